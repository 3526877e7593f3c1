"""How much of what vLLM can print the catalogue reads: coverage over harvested format strings.

``harvested_formats.json`` (made by ``tools/harvest_formats.py`` from the released sdists) holds
every fact-bearing log / error format string of vLLM and vLLM-Ascend with the releases it occurs
in. Each one is rendered with sample values in the process-prefix styles of its releases, read by
the real `Extractor` (through the reader's `make_line`, so prefixes are peeled as in a real log),
and classified:

* ``covered`` — a catalogue pattern (other than the incidental ones in ``INCIDENTAL``) matched and
  every number and string the extractor recorded from the line is one that was printed on it;
* ``mismatch`` — something was extracted that is not on the line (a cut or misread value: a bug);
* ``value_lost`` — a pattern reads a line of a value-bearing category (KV memory and size,
  concurrency, blocks, version, stats) but none of the numbers printed in its placeholders came back;
* ``unmatched`` — no pattern reads the line.

Strings deliberately not covered are listed with why in ``not_covered.json`` (``id → reason`` and
a kind: ``no_fact``, ``elsewhere`` — the value is read from another line — or ``gap``).
Per release: strings, covered, listed, missing. ``kvlogdiag patterns --coverage`` prints it;
docs/coverage.md explains the method.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from kvlogdiag.catalogue.patterns import catalogue
from kvlogdiag.extract.extractor import Extractor
from kvlogdiag.extract.facts import Fact
from kvlogdiag.input.reader import make_line

HERE = Path(__file__).resolve().parent
HARVEST_FILE = HERE / "harvested_formats.json"
NOT_COVERED_FILE = HERE / "not_covered.json"

# patterns that read settings/commands/evidence anywhere in a paste: a match by one of them alone
# does not mean the catalogue understands the vLLM message
INCIDENTAL = frozenset({
    "prose_setting", "prose_model", "vllm_env", "user_command", "command_continuation", "command_model_line",
    "advice_lead", "llm_constructor", "llm_model_kwarg", "rocm_evidence", "npu_evidence", "cpu_backend_evidence",
    "v1_source_path", "wrapper_config_dict",
})

LONG_MODEL = "/mnt/nfs/shared-models/deepseek-ai/DeepSeek-V3.2-Exp-W8A8-dynamic-quantized-2025-12"
_NUMBER = re.compile(r"(?<![\w.])-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\w])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


# --- the harvested table --------------------------------------------------------------------------

@lru_cache(maxsize=2)
def _load(path: str) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def load_harvest(path: Path | None = None) -> dict:
    """The harvested table (``versions``, ``entries``, ...)."""
    return _load(str(path or HARVEST_FILE))


def load_not_covered(path: Path | None = None) -> dict[str, str]:
    """id → why the string is deliberately not read."""
    p = path or NOT_COVERED_FILE
    if not p.exists():
        return {}
    return {k: v["reason"] for k, v in _load(str(p)).items()}


MISS_KINDS = ("no_fact", "elsewhere", "gap")


def load_miss_kinds(path: Path | None = None) -> dict[str, str]:
    """id → kind of a listed miss: ``no_fact`` (no value kvlogdiag reports), ``elsewhere`` (the value
    is read from another line of the same run) or ``gap`` (a reported kind of value, not read here)."""
    p = path or NOT_COVERED_FILE
    if not p.exists():
        return {}
    return {k: v.get("kind", "no_fact") for k, v in _load(str(p)).items()}


def entry_versions(entry: dict, versions: list[str]) -> list[str]:
    return [versions[i] for a, b in entry["in"] for i in range(a, b + 1)]


def preview(tpl: list, width: int = 110) -> str:
    """The template as one line of text, placeholders as ``{expr}``."""
    s = "".join(x if isinstance(x, str) else "{" + x[0] + "}" for x in tpl)
    s = " ".join(s.split())
    return s if len(s) <= width else s[: width - 1] + "…"


# --- process-prefix styles ---------------------------------------------------------------------

def _vtuple(release: str) -> tuple[int, int]:
    ver = release.split()[-1]
    nums = [int(x) for x in re.findall(r"\d+", ver)[:2]]
    return (nums + [0, 0])[0], (nums + [0, 0])[1]


def prefix_styles(release: str) -> list[str]:
    """Line-head templates (``{level} {file} {msg}``) vLLM used in that release.

    V0 (< 0.8) printed ``file.py:123]``; from 0.8 the location is bracketed; worker/engine process
    prefixes follow the process layout of each era (reader.py `_PROC` reads all of them)."""
    major, minor = _vtuple(release)
    v = (major, minor)
    if v < (0, 8):
        styles = ["{level} 10-20 13:41:10 {file}:123] {msg}"]
        if v >= (0, 4):
            styles.append("(RayWorkerWrapper pid=4243, ip=10.0.0.2) {level} 10-20 13:41:10 {file}:123] {msg}")
        if v >= (0, 5):
            styles.append("(VllmWorkerProcess pid=4242) {level} 10-20 13:41:10 {file}:123] {msg}")
        return styles
    head = "{level} 10-20 13:41:10 [{file}:123] {msg}"
    if v < (0, 10):
        return [head, "(VllmWorker rank=0 pid=4242) " + head]
    if v < (0, 11):
        return [head, "(EngineCore_0 pid=123) " + head, "(APIServer pid=77) " + head, "(VllmWorker TP0 pid=4242) " + head]
    return [head, "(EngineCore_DP0 pid=123) " + head, "(APIServer pid=77) " + head, "(Worker_TP0 pid=4242) " + head,
            "(Worker_DP1_TP3 pid=4245) " + head]


def render_line(style: str, level: str, file: str, msg: str) -> str:
    """One log line: a raised exception is printed as ``ERROR ... ValueError: msg`` (traceback tail)."""
    if level.startswith("raise:"):
        msg, level = f"{level[6:]}: {msg}", "ERROR"
    base = file.rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return style.format(level=level, file=base, msg=msg)


# --- sample values -----------------------------------------------------------------------------

_INT_HINT = re.compile(r"token|len|block|size|num|count|seqs|interval|_id\b|rank|world|step|pid|batch|chunk|group|limit|max|\bn\b|idx|index|capacity|threshold|node", re.I)
_FLOAT_HINT = re.compile(r"gib|\bgb\b|_gb|memory|mem\b|bytes|util|ratio|concurren|usage|rate|throughput|time|sec|fraction|percent|gpu_memory", re.I)


def _kind(hint: str, spec: str) -> str:
    t = spec[-1:] if spec else ""
    if spec.startswith("%"):
        if t in "diouxX":
            return "int"
        if t in "eEfFgG":
            return "float"
    else:
        body = spec.split(":", 1)[1] if ":" in spec else ""
        if body and (body[-1] in "dn" or body in (",", "_")):
            return "int"
        if body and body[-1] in "eEfFgG%":
            return "float"
    h = hint.lower()
    if h == "prompt_type":
        return "prompt_type"  # vLLM passes "encoder" or "decoder"
    if h.startswith("format_bytes("):
        return "hpu_bytes"  # vllm_hpu_extension's profiler.format_bytes: "43.5 GiB", "512 MiB"
    if h.endswith("get_summary_string()"):
        return "hpu_summary"  # HabanaMemoryProfiler.get_summary_string, built of format_bytes figures
    if re.search(r":,}", h):
        return "int_text"  # f'{n:,}' passed to %s: already a string with separators
    if re.search(r"format_gib|gib_bytes|1 << 30|2 \*\* 30|\bgib\(", h):
        return "float"
    if re.search(r"(?:memory|_bytes|memory_size)$", h) and "util" not in h and spec in ("", "%s", "%d", "!s"):
        return "bytes"  # a raw byte count (vLLM-Ascend, XPU print them unconverted)
    if "version" in h:
        return "version"
    if h.startswith("tuple(") or h.endswith("sizes"):
        return "tuple"
    if re.search(r"args\b|_config$|^config$", h) and not spec.startswith("%d"):
        return "dict"
    if re.search(r"device|platform", h) and "memory" not in h:
        return "device"
    if re.search(r"model(?!_len|_config|s\b)|path|tokenizer", h) and "len" not in h:
        return "model"
    if _FLOAT_HINT.search(h) and not re.search(r"num_|_len|tokens", h):
        return "float"
    if _INT_HINT.search(h):
        return "int"
    return "word"


# what vLLM has left for the KV cache after profiling: the one memory figure that can print negative
_SIGNED = re.compile(r"available_kv_cache", re.I)


def sample_value(hint: str, spec: str, rnd: random.Random) -> Any:
    """A value of the kind the placeholder prints: ints up to millions (so separators show), floats
    (negative for memory figures sometimes: vLLM prints a negative 'Available KV cache memory'),
    release strings, long model paths, or a word."""
    kind = _kind(hint, spec)
    if kind == "int":
        return rnd.choice([rnd.randint(0, 9), rnd.randint(10, 9_999), rnd.randint(10_000, 99_999_999)])
    if kind == "float":
        v = round(rnd.uniform(0, 200), rnd.choice([1, 2, 4]))
        if _SIGNED.search(hint) and rnd.random() < 0.3:
            v = -v  # what is left for the KV cache can be negative; weights, totals or free memory cannot
        return v
    if kind == "bytes":
        v = rnd.randint(10**8, 2 * 10**11)
        return -v if _SIGNED.search(hint) and rnd.random() < 0.3 else v
    if kind == "prompt_type":
        return rnd.choice(["decoder", "encoder"])
    if kind == "hpu_bytes":
        return format_bytes(_hpu_byte_count(rnd))
    if kind == "hpu_summary":
        dev, host = (format_bytes(_hpu_byte_count(rnd)) for _ in range(2))
        return (f"{dev} of device memory ({format_bytes(_hpu_byte_count(rnd))}/{format_bytes(_hpu_byte_count(rnd))} used)"
                f" and {host} of host memory ({format_bytes(_hpu_byte_count(rnd))}/{format_bytes(_hpu_byte_count(rnd))} used)")
    if kind == "int_text":
        return f"{rnd.randint(1_000, 2_000_000):,}"
    if kind == "tuple":
        return tuple(rnd.choice([16, 32, 64, 128, 528, 4096]) for _ in range(rnd.randint(1, 3)))
    if kind == "dict":
        return {"model": rnd.choice([LONG_MODEL, "Qwen/Qwen3-32B"]), "max_model_len": rnd.randint(1024, 1_048_576),
                "tensor_parallel_size": rnd.choice([1, 2, 4, 8])}
    if kind == "device":
        return rnd.choice(["cuda", "CUDA", "npu"])
    if kind == "version":
        return rnd.choice(["0.10.2", "0.6.3.post1", "0.13.0+faa43dbf.nv26.01", "0.22.1rc1.dev495+g2ecf7d0eb"])
    if kind == "model":
        return rnd.choice([LONG_MODEL, "meta-llama/Llama-3.1-70B-Instruct", "Qwen/Qwen3-32B"])
    return rnd.choice(["auto", "FLASH_ATTN", "cuda", "kv_both", "True"])


def _hpu_byte_count(rnd: random.Random) -> int:
    return rnd.choice([rnd.randint(0, 1023), rnd.randint(2**20, 2**30), rnd.randint(2**30, 2**37)])


_BINARY_UNITS = ("", "Ki", "Mi", "Gi", "Ti")


def format_bytes(size: float) -> str:
    """A byte count the way vllm_hpu_extension (profiler.py) prints it: divided by 1024 while it is
    larger, 4 significant digits, a binary unit ("43.5 GiB", "512 MiB", "980 B")."""
    n = 0
    while abs(size) > 1024 and n < len(_BINARY_UNITS) - 1:
        size /= 1024
        n += 1
    return f"{size:.4g} {_BINARY_UNITS[n]}B"


def format_value(value: Any, spec: str) -> str:
    if spec.startswith("%"):
        t = spec[-1]
        if t in "diouxX" and isinstance(value, float):
            value = int(value)
        try:
            return spec % (value,)
        except (TypeError, ValueError):
            return str(value)
    conv, _, fmt = spec.partition(":")
    if conv == "!r":
        value = repr(value)
    elif conv in ("!s", "!a"):
        value = str(value)
    try:
        return format(value, fmt)
    except (TypeError, ValueError):
        return str(value)


def render(tpl: list, rnd: random.Random) -> tuple[str, list[str]]:
    """(message, the text printed for each placeholder)."""
    out, printed = [], []
    for item in tpl:
        if isinstance(item, str):
            out.append(item)
        else:
            hint, spec = item
            text = format_value(sample_value(hint, spec, rnd), spec)
            printed.append(text)
            out.append(text)
    return "".join(out), printed


# --- reading a rendered line ----------------------------------------------------------------------

def matching_patterns(text: str) -> list[str]:
    """Catalogue patterns whose keyword occurs in the message and whose regex matches it."""
    return [name for name, _ in _matches(text)]


def _matches(text: str) -> list[tuple[str, re.Match]]:
    out = []
    for p in catalogue():
        if any(k in text for k in p.keywords):
            m = p.regex.search(text)
            if m is not None:
                out.append((p.name, m))
    return out


_NUMERIC_GROUP = re.compile(r"-?[\d,]*\d(?:\.\d+)?")


def _values(obj: Any, out: list) -> None:

    if isinstance(obj, Fact):
        _values(obj.value, out)
    elif isinstance(obj, dict):
        for v in obj.values():
            _values(v, out)
    elif isinstance(obj, (list, tuple, set)) or isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)):
        # a Sequence: a fact list held in columns (extract/bounded.py FactColumn)
        for v in obj:
            _values(v, out)
    elif isinstance(obj, (str, int, float)) and not isinstance(obj, bool):
        out.append(obj)


def extracted_values(facts) -> list:
    """Every number and string the extractor recorded (engine/platform classifications excluded)."""
    out: list = []
    for name in ("version", "available", "kv_budget", "tokens", "blocks", "concurrency", "insufficient_kv"):
        _values(getattr(facts, name), out)
    for name in ("config", "memory", "events"):
        _values(getattr(facts, name), out)
    _values({k: f for k, f in facts.env.items()}, out)
    st = facts.stats
    for name in ("running_max", "waiting_max", "kv_usage_max", "prefix_hit_last"):
        v = getattr(st, name, None)
        if v is not None:  # a 0.0 % hit rate is a figure read, too
            out.append(v)
    if st.preemptions_total:  # 0 is the default, not a value read
        out.append(st.preemptions_total)
    return out


def _numbers(text: str) -> list[float]:
    return [float(m.group(0).replace(",", "")) for m in _NUMBER.finditer(text)]


_SMALL_UNIT = re.compile(r"\d (?:MB|MiB|KiB|B)\b")


def _same_figure(value: float, n: float, small_units: bool = True) -> bool:
    """``value`` is the printed ``n``, or ``n`` is that GiB figure printed in bytes (or, when the line
    prints MB/MiB/KiB, in those units: XPU's bytes / 1024**2, HPU's format_bytes)."""
    if math.isclose(value, n, rel_tol=1e-9, abs_tol=1e-9) or math.isclose(value * 2**30, n, rel_tol=1e-9):
        return True
    return small_units and any(math.isclose(value * k, n, rel_tol=1e-9) for k in (2**10, 2**20))


def _on_line(value: Any, msg: str, nums: list[float]) -> bool:
    if isinstance(value, str):
        return len(value) < 3 or value in msg or value.strip("'\"") in msg or _classification(value)
    small = _SMALL_UNIT.search(msg) is not None
    return any(_same_figure(value, n, small) for n in nums)


def _classification(value: str) -> bool:
    # labels a handler attaches (a budget's source kind), not values read from the line
    return value in {"v0_profile", "kv_cache_memory_bytes", "cpu_auto", "cpu_explicit", "cpu_default", "ascend_bytes",
                     "hpu_profile"} \
        or value.startswith(("GiB KV cache", "max seq len"))


@dataclass
class Check:
    """One rendered line and what kvlogdiag made of it."""

    line: str
    patterns: list[str]
    values: list
    foreign: list  # extracted values not on the line

    @property
    def status(self) -> str:
        if self.foreign:
            return "mismatch"
        if any(p not in INCIDENTAL for p in self.patterns):
            return "covered"
        return "unmatched"


def check_line(line: str) -> Check:
    """Run the real reader + Extractor on one line."""

    ln = make_line(1, line.encode("utf-8"))
    ex = Extractor("coverage")
    ex.feed(ln)
    facts = ex.finish(1)
    values = extracted_values(facts)
    nums = _numbers(ln.text)
    foreign = [v for v in values if not _on_line(v, ln.text, nums)]
    matches = _matches(ln.text)
    for name, m in matches:
        if name in INCIDENTAL:
            continue
        for g in m.groups():
            # a numeric group must hold a whole printed number (not "485" of "485,088")
            if g and _NUMERIC_GROUP.fullmatch(g) and not _on_line(float(g.replace(",", "")), ln.text, nums):
                foreign.append(f"{name}:{g}")
    return Check(line, [name for name, _ in matches], values, foreign)


# --- the measurement ----------------------------------------------------------------------------

@dataclass
class EntryResult:
    id: str
    cat: str
    file: str
    text: str
    versions: list[str]
    status: str  # covered | mismatch | value_lost | unmatched
    patterns: list[str]
    example: str  # a rendered line that shows the status
    reason: str | None = None  # why it is deliberately not read (from not_covered.json)
    kind: str | None = None  # no_fact | elsewhere | gap, for a listed string


@dataclass
class Coverage:
    versions: list[str]
    entries: list[EntryResult]
    rows: list[dict] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.entries)

    @property
    def covered(self) -> int:
        return sum(e.status == "covered" for e in self.entries)

    @property
    def listed(self) -> int:
        return sum(e.status != "covered" and e.reason is not None for e in self.entries)

    def missing(self) -> list[EntryResult]:
        """Not covered and not listed with a reason: the gaps."""
        return [e for e in self.entries if e.status != "covered" and e.reason is None]

    def gaps(self) -> list[EntryResult]:
        """Listed strings that carry a value of a kind kvlogdiag reports (read nowhere else)."""
        return [e for e in self.entries if e.status != "covered" and e.kind == "gap"]

    def summary(self) -> dict:
        t = self.total or 1
        fact = self.covered + len(self.gaps()) + len(self.missing())
        return {"strings": self.total, "covered": self.covered, "listed": self.listed, "gaps": len(self.gaps()),
                # of the strings whose value kvlogdiag reports and can only get from them: how many are read
                "fact_covered_pct": round(100 * self.covered / (fact or 1), 2),
                "missing": len(self.missing()), "mismatch": sum(e.status == "mismatch" for e in self.entries),
                "value_lost": sum(e.status == "value_lost" for e in self.entries),
                "covered_pct": round(100 * self.covered / t, 2),
                "accounted_pct": round(100 * (self.covered + self.listed) / t, 2)}


def evaluate_entry(entry: dict, versions: list[str], rnd: random.Random, tries: int = 3) -> tuple[str, list[str], str]:
    """(status, patterns, example line) over every prefix style of every release of the entry,
    ``tries`` value draws each; the worst status wins (mismatch > unmatched > covered)."""
    rank = {"covered": 0, "unmatched": 1, "value_lost": 2, "mismatch": 3}
    styles: dict[str, None] = {}
    for rel in entry_versions(entry, versions):
        for s in prefix_styles(rel):
            styles[s] = None
    worst, example = "covered", ""
    pats: set[str] = set()
    for _ in range(tries):
        msg, printed = render(entry["t"], rnd)
        for style in styles:
            for level in entry["levels"][:2]:
                c = check_line(render_line(style, level, entry["file"], msg))
                status = c.status
                if status == "covered" and entry["cat"] in VALUE_CATEGORIES and not value_read(c, printed):
                    status = "value_lost"
                pats.update(p for p in c.patterns if p not in INCIDENTAL)
                if rank[status] > rank[worst] or not example:
                    worst, example = (status if rank[status] > rank[worst] else worst), c.line
    return worst, sorted(pats), example


# categories whose strings carry a figure kvlogdiag reports: when a pattern reads such a line and a
# number was printed in a placeholder, at least one of those numbers must be among the extracted values
VALUE_CATEGORIES = frozenset({"kv_memory", "kv_size", "concurrency", "blocks", "version", "stats"})


_WITH_UNIT = re.compile(r"(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?) ((?:[KMGT]i)?B)")
_UNIT_GIB = {"B": 2.0**-30, "KiB": 2.0**-20, "MiB": 2.0**-10, "GiB": 1.0, "TiB": 1024.0}


def _printed_numbers(printed: list[str]) -> list[float]:
    """The numbers printed in placeholders; a figure with a binary unit (``43.5 GiB``) counts in GiB."""
    out = []
    for p in printed:
        m = _NUMERIC_GROUP.fullmatch(p.strip().rstrip("x%").strip("'"))
        if m:
            out.append(float(m.group(0).replace(",", "")))
            continue
        for u in _WITH_UNIT.finditer(p):
            out.append(float(u.group(1)) * _UNIT_GIB[u.group(2)])
    return out


def value_read(c: Check, printed: list[str]) -> bool:
    """A printed placeholder value (a number, or a version string) came back from the extractor."""
    nums = _printed_numbers(printed)
    strings = [p.strip("'") for p in printed
               if not _NUMERIC_GROUP.fullmatch(p.strip().rstrip("x%").strip("'")) and not _WITH_UNIT.search(p)]
    if not nums and not strings:
        return True  # nothing printed that could come back
    for v in c.values:
        if isinstance(v, str) and any(v == s for s in strings):
            return True
        if isinstance(v, (int, float)) and any(_same_figure(v, n) for n in nums):
            return True
    return not nums  # only words were printed (a device name): nothing numeric to lose


def measure(harvest: dict | None = None, not_covered: dict[str, str] | None = None, seed: int = 13) -> Coverage:
    """Classify every harvested string and count per release (deterministic for a seed)."""
    h = harvest if harvest is not None else load_harvest()
    nc = not_covered if not_covered is not None else load_not_covered()
    kinds = load_miss_kinds() if not_covered is None else {}
    rnd = random.Random(seed)
    versions = h["versions"]
    results = []
    for e in h["entries"]:
        status, pats, example = evaluate_entry(e, versions, rnd)
        results.append(EntryResult(e["id"], e["cat"], e["file"], preview(e["t"]), entry_versions(e, versions),
                                   status, pats, example, nc.get(e["id"]), kinds.get(e["id"]) if e["id"] in nc else None))
    return Coverage(versions, results, release_rows(versions, results))


def release_rows(versions: list[str], results: list[EntryResult]) -> list[dict]:
    """Per release: strings, covered, listed, of which gaps, missing, and the three ratios."""
    rows = []
    for v in versions:
        es = [r for r in results if v in r.versions]
        n = len(es) or 1
        cov_n = sum(r.status == "covered" for r in es)
        listed = sum(r.status != "covered" and r.reason is not None for r in es)
        gaps = sum(r.status != "covered" and r.kind == "gap" for r in es)
        missing = len(es) - cov_n - listed
        rows.append({"release": v, "strings": len(es), "covered": cov_n, "listed": listed, "gaps": gaps,
                     "missing": missing, "covered_pct": round(100 * cov_n / n, 1),
                     "fact_covered_pct": round(100 * cov_n / ((cov_n + gaps + missing) or 1), 1),
                     "accounted_pct": round(100 * (cov_n + listed) / n, 1)})
    return rows


# issue 13's bar: of the strings whose value kvlogdiag reports and reads from no other line, at least
# this share must be covered in every release (tests/test_format_coverage.py enforces it)
FACT_BAR_PCT = 99.0


def below_bar(cov: Coverage, bar: float = FACT_BAR_PCT) -> list[tuple[str, int, int]]:
    """(release, covered, fact strings) of every release whose fact-string coverage is below ``bar`` %,
    counted exactly (not from the rounded table figure)."""
    out = []
    for r in cov.rows:
        fact = r["covered"] + r["gaps"] + r["missing"]
        if fact and 100 * r["covered"] < bar * fact:
            out.append((r["release"], r["covered"], fact))
    return out


def table_rows(cov: Coverage) -> Iterable[list]:
    for r in cov.rows:
        yield [r["release"], r["strings"], r["covered"], r["listed"], r["gaps"], r["missing"], f"{r['covered_pct']:.1f}",
               f"{r['fact_covered_pct']:.1f}", f"{r['accounted_pct']:.1f}"]


TABLE_HEADERS = ["release", "strings", "covered", "listed", "of which gaps", "missing", "covered %",
                 "covered % of fact strings", "covered+listed %"]


def coverage_text(verbose: bool = False, markdown: bool = False, cov: Coverage | None = None) -> str:
    """What ``kvlogdiag patterns --coverage`` prints: the per-release table, the totals, and with
    ``verbose`` every string that is not covered (listed ones with their reason)."""
    from tabulate import tabulate

    cov = cov or measure()
    s = cov.summary()
    fmt = "github" if markdown else "simple"
    out = [tabulate(list(table_rows(cov)), headers=TABLE_HEADERS, tablefmt=fmt), "",
           f"all releases: {s['covered']}/{s['strings']} harvested fact-bearing strings covered ({s['covered_pct']:.2f} %); "
           f"{s['listed']} listed as deliberately not read, {s['missing']} missing "
           f"(covered + listed {s['accounted_pct']:.2f} %); {s['mismatch']} read with a wrong value, "
           f"{s['value_lost']} read without their figure",
           f"strings whose value kvlogdiag reports and reads from no other line: {s['covered']}/"
           f"{s['covered'] + s['gaps'] + s['missing']} covered ({s['fact_covered_pct']:.2f} %); {s['gaps']} known gaps "
           f"(kind 'gap' in not_covered.json)"]
    low = below_bar(cov)
    out.append(f"bar (>= {FACT_BAR_PCT:g} % of those strings covered in every release): " + (
        "met" if not low else "NOT met in " + ", ".join(f"{rel} ({c}/{n})" for rel, c, n in low)))
    if verbose:
        rows = [[e.id, e.status + (f" ({e.kind})" if e.kind else ""), e.cat, e.file, e.text, e.reason or "-"]
                for e in sorted(cov.entries, key=lambda e: (e.reason is not None, e.cat, e.text)) if e.status != "covered"]
        out += ["", tabulate(rows, headers=["id", "status", "category", "file (newest)", "format string", "why not read"],
                             tablefmt=fmt, maxcolwidths=None if markdown else [None, None, None, 40, 70, 40])]
    return "\n".join(out) + "\n"
