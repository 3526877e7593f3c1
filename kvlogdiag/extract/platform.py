"""Platform evidence beyond vLLM's own platform lines: device names, tool output, env variables, files.

The table in ``kvlogdiag/catalogue/devices.toml`` lists device names (NVIDIA data-centre and consumer
GPUs, AMD Instinct/Radeon, Ascend 910/310, Intel Gaudi/Arc/Max, Google TPU generations, Apple), the
device tools (``nvidia-smi``, ``npu-smi``, ``rocm-smi``, ``hl-smi``, ``xpu-smi``), the environment
variables that select devices (``CUDA_VISIBLE_DEVICES``, ``ASCEND_RT_VISIBLE_DEVICES``,
``HIP_VISIBLE_DEVICES`` ...), the vLLM source files only one platform runs (``rocm.py``,
``tpu_worker.py``, ``xpu_worker.py`` ...) and container images. `evidence(line)` applies it to a line
and says where the evidence stands: in a log record or tool output (``log``), in a launch command
(``command``) or in the user's prose (``prose``) — the resolver (``derive/figures.py``) prefers the
first kind present and never picks between prose statements that disagree. Nothing is inferred from
the absence of evidence, and a placeholder (``<gpu>``, ``$DEVICES``) is no value.
"""

from __future__ import annotations

import functools
import re

from kvlogdiag import pkgdata, recache
from kvlogdiag.extract.commands import is_placeholder
from kvlogdiag.records import FrozenRecord

# a vLLM log record head ('INFO 10-20 13:41:05', '[file.py:12]') or a device tool's table row
_LOG_HEAD = recache.compile(r"\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b.{0,40}?\d\d:\d\d:\d\d|\[[\w.]+\.py:\d+\]"
                            r"|^\s*(?:GPU|NPU|Chip|Device)\s+\d+\s*:|^\s*GPU\[\d+\]\s*:|^\s*File \"[^\"]+\", line \d+|^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Warning):|\bNVIDIA-SMI\s+\d|\bnpu-smi\s+\d|Driver Version:|^\s*=+\s*ROCm|^\s*\d+\s+\|")
# a row of nvidia-smi / npu-smi / rocm-smi's table, not a markdown table someone wrote
_SMI_WORDS = recache.compile(r"\d\s*MiB|(?<!\d)\d+W\s*/|[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:|\|\s*OK\s*\||\b(?:On|Off)\s*\||Bus-Id|Health|Perf\s|Persistence|NPU\s+Name|Chip\s")
_COMMAND = recache.compile(r"(?<![\w.-])(?:vllm\s+serve|vllm\.entrypoints|api_server\.py|docker\s+run|podman\s+run|srun|"
                           r"export\s+[A-Z_]+=|kubectl|image\s*:)|^\s*(?:[A-Z][A-Z0-9_]*=\S*\s+)+\S|^\s*(?:-\s*)?(?:name|value)\s*:")


class Evidence(FrozenRecord):  # a plain record, not a dataclass: less to build per start (kvlogdiag/records.py)
    """One piece of platform evidence on a line."""

    _FIELDS = ("platform", "what", "name", "text", "weak", "kind")
    platform: str  # contract value (cuda rocm npu cpu xpu tpu hpu), "" = recognised, says no platform
    what: str  # device / tool / env / file / image
    name: str  # the table entry
    text: str  # what matched
    weak: bool  # counts only when nothing strong does (CUDA_VISIBLE_DEVICES: HIP honours it too)
    kind: str  # log / command / prose

    def __init__(self, platform: str, what: str, name: str, text: str, weak: bool, kind: str) -> None:
        d = self.__dict__
        d["platform"] = platform
        d["what"] = what
        d["name"] = name
        d["text"] = text
        d["weak"] = weak
        d["kind"] = kind


class _Entry(FrozenRecord):
    """One entry of the device table: what it names, its platform and the patterns that recognise it."""

    _FIELDS = ("what", "name", "platform", "rx", "weak", "short_needs")
    what: str
    name: str
    platform: str
    rx: re.Pattern[str]
    weak: bool
    short_needs: re.Pattern[str] | None

    def __init__(self, what: str, name: str, platform: str, rx: re.Pattern[str], weak: bool,
                 short_needs: re.Pattern[str] | None) -> None:
        d = self.__dict__
        d["what"] = what
        d["name"] = name
        d["platform"] = platform
        d["rx"] = rx
        d["weak"] = weak
        d["short_needs"] = short_needs


@functools.cache
def table() -> dict:
    """``kvlogdiag/catalogue/devices.toml`` as read."""
    from kvlogdiag import tomlcache

    text = pkgdata.read_text("catalogue", "devices.toml")
    data = tomlcache.loads(text, remember=True)  # parsed once, then read back as JSON (by content hash)
    tomlcache.flush()
    return data


@functools.cache
def _entries() -> tuple[_Entry, ...]:
    out = []
    t = table()
    for what in ("device", "tool", "file", "image"):
        for e in t.get(what, []):
            sn = e.get("short_needs")
            out.append(_Entry(what, e["name"], e["platform"], recache.compile(e["regex"]), e.get("strength") == "weak",
                              recache.compile(sn) if sn else None))
    for e in t.get("env", []):
        rx = recache.compile(r"(?<![\w-])" + re.escape(e["name"]) + r"""["']?\s*(?:=|:\s*|"?\s*,\s*"?value"?\s*:\s*)(?P<v>"[^"]*"|'[^']*'|[^\s,;)}\]]*)""")
        out.append(_Entry("env", e["name"], e["platform"], rx, e.get("strength") == "weak", None))
    return tuple(out)


@functools.cache
def keywords() -> tuple[str, ...]:
    """Literal words a line needs for any evidence here (the reader's prefilter keeps such lines)."""
    t = table()
    kws = {kw for what in ("device", "tool", "file", "image") for e in t.get(what, []) for kw in e.get("keywords", [])}
    kws |= {e["name"] for e in t.get("env", [])}
    return tuple(sorted(kws))


@functools.cache
def keyword_regex() -> re.Pattern[str]:
    return recache.compile("|".join(re.escape(k) for k in sorted(keywords(), key=len, reverse=True)))


_SHORT_MODEL = recache.compile(r"(?:^|[\s(x×])(?:A10G?|A16|A30|A40|A2|L4|L20|H20|P40|T4)(?:$|[\s,)-])")


def line_kind(text: str) -> str:
    """Where a line stands: a log record or tool output, a launch command, or prose."""
    t = text.strip()
    if _LOG_HEAD.search(text) or (t[:1] == "|" and t[-1:] == "|" and _SMI_WORDS.search(t)):
        return "log"
    if _COMMAND.search(text):
        return "command"
    return "prose"


def _env_value_selects(v: str) -> bool:
    v = v.strip("'\" ")
    return bool(v) and v not in ("-1", "none", "None", "NoDevFiles", "void") and v[0] not in "<${" \
        and not is_placeholder(v)


# in a vLLM log record, evidence needs one of these words (a cheap test before the full keyword search,
# which costs ~9 us a line: long logs are mostly records)
_RECORD_WORDS = ("NVIDIA", "AMD", "Ascend", "Intel", "TPU", "VISIBLE_", "gfx", "Gaudi", "Radeon", "rocm", "ROCm",
                 "iter", "tpu", "xpu", "hpu", "npu", "cuda.py", "habana", "Apple")
_RECORD_WORDS_RX = recache.compile("|".join(map(re.escape, _RECORD_WORDS)))
# a vLLM record head after the envelope: 'INFO 10-20 13:41:05 [file.py:12]' (older: 'file.py:12]')
RECORD = recache.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) [\d-]+ [\d:.,]+ \[?[\w.]+\.py:\d+\]")


def evidence(text: str, record: bool = False) -> list[Evidence]:
    """Every piece of platform evidence in one line (``record``: the line is a vLLM log record)."""
    if record and not _RECORD_WORDS_RX.search(text):
        return []
    if not keyword_regex().search(text):
        return []
    kind = ""
    out: list[Evidence] = []
    for e in _entries():
        for m in e.rx.finditer(text):
            if e.what == "env" and not _env_value_selects(m.group("v")):
                continue
            hit = m.group(0)
            if e.short_needs is not None and _SHORT_MODEL.search(" " + hit.strip() + " ") and \
                    not re.search(r"NVIDIA|Tesla|\d\s*[x×]", hit) and not e.short_needs.search(text):
                continue  # 'A10', 'L4', 'T4' alone could be anything
            if is_placeholder(hit):
                continue
            kind = kind or line_kind(text)
            out.append(Evidence(e.platform, e.what, e.name, hit.strip(), e.weak, kind))
            break
    return out
