"""No regular expression of the reading side backtracks super-linearly (issue 18, ReDoS).

A log line is up to ``reader.MAX_LINE_BYTES`` (1 MiB) and ``watch`` sits in a server's log pipe: one
pattern that is quadratic in the length of a line stalls the server's logging for hours. Every regex
compiled by the line catalogue (``catalogue/patterns.py``), the start-up failure catalogue
(``failures.toml``: patterns, extras, echo/death lines, class hints), the reader (envelopes, prefixes,
the prefilter) and the extractor modules is collected two ways:

* at run time: a child process wraps ``re._compile`` while it imports kvlogdiag and analyses every
  sample log, recording each pattern compiled from a kvlogdiag module and *how* the code applies it
  (``search``/``finditer``... try every start position; ``match``/``fullmatch`` only the first);
* statically: every ``re.<function>("literal", ...)`` call in those modules (patterns on code paths the
  sample logs do not reach).

Each pattern is then run, the way the code runs it, on pathological lines built from its own sample lines:
at every place where the kind of character changes, a run of 20,000 characters of that kind (a space, a
digit, a letter, the punctuation itself) is inserted, or the line is cut after such a run (so the match
must fail after backtracking over it). A hypothesis test adds random compositions of the pattern's
literal fragments and long runs.

The criterion is not a timing: each search runs under a CPU-time guard (``ITIMER_PROF``, 0.5 s of this
process's CPU, so other processes' load cannot trip it) that a linear pattern cannot reach on a
20,000-character line — a linear search costs well under 10 ms there — while a quadratic one needs
~10^9 steps (the issue's ``user_command`` case took 28 s at 8,000 characters; ``command_continuation``
19 s at 2,000). A guard that trips names the pattern, where it is compiled and the input that did it.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlogdiag.catalogue import patterns as P
from kvlogdiag.catalogue.failures import catalogue as load_failures

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "kvlogdiag"
SCOPE = ("catalogue/", "input/", "extract/", "derive/")  # the modules that read every line, and derive/ (it applies
# regexes to values read from lines: versions, process prefixes)
NOT_ON_LINES = ("catalogue/coverage.py",)  # reads vLLM's harvested format strings (a `rules --coverage` report), not logs
RUN = 20_000
GUARD_CPU_S = 0.5
DEEP = os.environ.get("KVLOGDIAG_SLOW_TESTS") == "1"  # every place of every context, not its first and last

_CAPTURE = r'''
import glob, json, re, sys
seen, used = {}, {}
orig = re._compile
APPLY = {"search", "match", "fullmatch", "sub", "subn", "split", "findall", "finditer"}

class Proxy:
    """A compiled pattern that records which of its methods the code calls."""
    __slots__ = ("_rx", "_key")
    def __init__(self, rx, key):
        self._rx, self._key = rx, key
    def __getattr__(self, name):
        if name in APPLY:
            used.setdefault(self._key, set()).add(name)
        return getattr(self._rx, name)
    def __hash__(self):
        return hash(self._rx)
    def __eq__(self, other):
        return self._rx == getattr(other, "_rx", other)

def key(pattern, flags):
    text = pattern if isinstance(pattern, str) else pattern.decode("latin-1")
    return (text, isinstance(pattern, bytes), int(flags))

def _compile(pattern, flags):
    caller = sys._getframe(1).f_code.co_name
    if isinstance(pattern, Proxy):
        if caller in APPLY:
            used.setdefault(pattern._key, set()).add(caller)
        return pattern._rx
    if not isinstance(pattern, (str, bytes)):
        return orig(pattern, flags)
    f = sys._getframe(1)
    # re's own frames, and kvlogdiag.recache (its compile calls re.compile for the module that asked)
    while f is not None and f.f_code.co_filename.endswith(("/re/__init__.py", "/re.py", "/kvlogdiag/recache.py")):
        f = f.f_back
    where = f.f_code.co_filename if f is not None else ""
    rx = orig(pattern, flags)
    if "/kvlogdiag/" not in where:
        return rx
    k = key(pattern, flags)
    seen.setdefault(k, where.split("/kvlogdiag/")[-1] + ":" + str(f.f_lineno))
    if caller in APPLY:
        used.setdefault(k, set()).add(caller)
        return rx
    return Proxy(rx, k) if caller == "compile" else rx

re._compile = _compile
from kvlogdiag.pipeline import Analyzer
for path in sorted(glob.glob("sample_logs/*.log")):
    Analyzer().analyze_source(path)
re._compile = orig
print(json.dumps([[k[0], k[1], k[2], w, sorted(used.get(k, ()))] for k, w in seen.items()]))
'''


def _static_literals() -> list[tuple[str, bool, int, str, list[str]]]:
    """Every ``re.f("literal", ...)`` in the scope's modules (flags given as ``re.X`` names are applied)."""
    out = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if not rel.startswith(SCOPE) or rel.startswith(NOT_ON_LINES):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in ("re", "recache")
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, (str, bytes))):
                continue
            fn = node.func.attr
            if fn not in {"compile", "search", "match", "fullmatch", "sub", "subn", "split", "findall", "finditer"}:
                continue
            flags = 0
            for a in [*node.args[1:], *(k.value for k in node.keywords if k.arg == "flags")]:
                for n in ast.walk(a):
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "re":
                        flags |= int(getattr(re, n.attr, 0))
            value = node.args[0].value
            text = value if isinstance(value, str) else value.decode("latin-1")
            out.append((text, isinstance(value, bytes), flags, f"{rel}:{node.lineno}", [] if fn == "compile" else [fn]))
    return out


@lru_cache(maxsize=1)
def collected() -> list[tuple[str, bool, int, str, tuple[str, ...]]]:
    # the regex program cache off: a program built from the cache never passes through re._compile
    env = {**os.environ, "KVLOGDIAG_CACHE_DIR": "off"}
    proc = subprocess.run([sys.executable, "-c", _CAPTURE], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found: dict[tuple[str, bool, int], tuple[str, set[str]]] = {}
    for text, is_bytes, flags, where, used in json.loads(proc.stdout.splitlines()[-1]) + _static_literals():
        k = (text, is_bytes, flags)
        w, u = found.get(k, (where, set()))
        found[k] = (w, u | set(used))
    out = []
    for (text, is_bytes, flags), (where, used) in found.items():
        if not where.startswith(SCOPE) or where.startswith(NOT_ON_LINES):
            continue
        if where.startswith("input/reader.py") and where in _ENVELOPE_SHAPES_AT:
            used = used or {"match"}  # Envelopes.peel / learn: match and fullmatch only
        out.append((text, is_bytes, flags, where, tuple(sorted(used))))
    return sorted(out, key=lambda x: (x[3], x[0]))


def _envelope_shapes_line() -> set[str]:
    src = (PKG / "input" / "reader.py").read_text(encoding="utf-8").splitlines()
    return {f"input/reader.py:{i}" for i, line in enumerate(src, 1) if "self.shapes[key] = re.compile(key)" in line}


_ENVELOPE_SHAPES_AT = _envelope_shapes_line()


class _Tripped(Exception):
    pass


def _trip(signum, frame):
    raise _Tripped


@contextlib.contextmanager
def cpu_guard(seconds: float = GUARD_CPU_S):
    """Raise `_Tripped` in the guarded block once this process has used ``seconds`` of CPU in it."""
    old = signal.signal(signal.SIGPROF, _trip)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


def _applier(rx: re.Pattern, used: tuple[str, ...]):
    """How the code applies the pattern: only from the start when every use is match/fullmatch."""
    if used and set(used) <= {"fullmatch"}:
        return rx.fullmatch
    if used and set(used) <= {"match", "fullmatch"}:
        return rx.match
    return rx.search  # search, finditer, sub, ...: every start position (and the safe default)


def _kind(ch: str) -> str:
    if ch in " \t":
        return " "
    if ch.isdigit():
        return "0"
    if ch.isalpha():
        return "a"
    return ch


_ALPHABET = (" ", "\t", "a", "A", "0", "-", "_", ".", ",", "/", ":", "=", "(", "\\", "'", '"', "\u2588")


@lru_cache(maxsize=1)
def _seeds() -> dict[str, list[str]]:
    """Sample lines per pattern text: the catalogue's and failures.toml's own samples."""
    out: dict[str, list[str]] = {}
    for p in P.catalogue():
        out.setdefault(p.regex.pattern, []).extend(s for s, _ in p.samples)
    for e in load_failures().entries:
        for _, rx in e.patterns:
            out.setdefault(rx.pattern, []).extend(str(s.get("line", "")) for s in e.samples)
    return out


@lru_cache(maxsize=1)
def _log_lines() -> list[str]:
    lines: list[str] = []
    for path in sorted((ROOT / "sample_logs").glob("*.log")):
        lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
    return lines


def attacks(text: str, is_bytes: bool, flags: int, run: int = RUN, deep: bool = DEEP):
    """Pathological inputs for one pattern: long runs spliced into its sample lines at every kind change."""
    rx = re.compile(text.encode("latin-1") if is_bytes else text, flags)
    seeds = list(dict.fromkeys(_seeds().get(text, [])))[:3 if deep else 2]
    if not seeds:
        enc = (lambda s: s.encode("utf-8", "replace")) if is_bytes else (lambda s: s)
        seeds = [line for line in _log_lines() if rx.search(enc(line))][:2]
    for seed in [*seeds, ""]:
        cuts = [0, *(i for i in range(1, len(seed)) if _kind(seed[i]) != _kind(seed[i - 1])), len(seed)]
        tried: dict[tuple[str, str, str], list[int]] = {}
        for i in cuts:
            chars = set(_ALPHABET) if not seed else set()
            for j in (i - 1, i):
                if 0 <= j < len(seed):
                    chars |= {seed[j], _kind(seed[j])}
            for c in chars:
                # one context (the pumped character between these two kinds) is tried at its first and last place
                ctx = (c, _kind(seed[i - 1]) if i else "^", _kind(seed[i]) if i < len(seed) else "$")
                tried.setdefault(ctx, []).append(i)
        for (c, _, _), places in sorted(tried.items()):
            for i in sorted({places[0], places[-1]}) if not deep else places:
                pump = c * run
                variants = [seed[:i] + pump + seed[i:], seed[:i] + pump]
                if deep:
                    variants.append(seed[:i] + pump + "\x00" + seed[i:])
                for s in variants:
                    yield s.encode("utf-8", "replace") if is_bytes else s


def _ids():
    return [f"{w}:{t[:40]}" for t, _, _, w, _ in collected()]


def test_the_collection_covers_the_catalogues():
    """The run-time collection sees the catalogue, failures.toml, the reader's and the extractor's regexes."""
    texts = {t for t, *_ in collected()}
    assert {p.regex.pattern for p in P.catalogue()} <= texts
    assert {rx.pattern for e in load_failures().entries for _, rx in e.patterns} <= texts
    where = {w.split(":")[0] for *_, w, _ in collected()}
    assert {"input/reader.py", "extract/extractor.py", "extract/commands.py", "extract/platform.py",
            "extract/failures.py", "catalogue/failures.py", "catalogue/patterns.py"} <= where
    assert len(texts) > 250


def _parse(text: str, flags: int):
    try:
        parser = re._parser  # type: ignore[attr-defined]
    except AttributeError:  # Python 3.10
        import sre_parse as parser  # type: ignore[no-redef]
    return parser.parse(text, flags)


def unbounded_repeats(text: str, is_bytes: bool = False, flags: int = 0) -> int:
    """How many ``*``/``+``/``{n,}`` the pattern holds: with none, every start position costs bounded work."""
    if is_bytes:
        text = text.encode("latin-1")  # type: ignore[assignment]
    count = 0
    maxrepeat = re._constants.MAXREPEAT if hasattr(re, "_constants") else __import__("sre_constants").MAXREPEAT

    def walk(av):
        nonlocal count
        if isinstance(av, (list, tuple)) or hasattr(av, "data"):
            items = av.data if hasattr(av, "data") else av
            for x in items:
                if isinstance(x, tuple) and len(x) == 2 and str(x[0]) in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                    if x[1][1] == maxrepeat:
                        count += 1
                walk(x)
    walk(_parse(text, flags))
    return count


def test_a_pattern_without_unbounded_repeats_needs_no_attack():
    """The structural shortcut below: it sees the repeats of the issue's patterns, and none in a plain alternation."""
    assert unbounded_repeats(P.by_name()["command_continuation"].regex.pattern) >= 3
    assert unbounded_repeats(r"(?:a|bc)+") == 1 and unbounded_repeats(r"\d{2,}") == 1
    assert unbounded_repeats(r"foo|ba[rz]\b|x{1,30}") == 0


@pytest.mark.parametrize("entry", collected(), ids=_ids())
def test_no_pattern_backtracks_on_long_runs(entry):
    text, is_bytes, flags, where, used = entry
    if not unbounded_repeats(text, is_bytes, flags):
        return  # bounded work per start position: linear by construction (alternations of literals, x{0,30})
    apply = _applier(re.compile(text.encode("latin-1") if is_bytes else text, flags), used)
    for s in attacks(text, is_bytes, flags):
        try:
            with cpu_guard():
                apply(s)
        except _Tripped:
            shown = s if len(s) < 200 else s[:60] + (b"..." if is_bytes else "...") + s[-60:]
            pytest.fail(f"{where}: {text!r} backtracks super-linearly ({'/'.join(used) or 'search'}) on {shown!r}"
                        f" ({len(s):,} characters, over {GUARD_CPU_S} s CPU)")


def test_the_issue_lines_are_linear_and_read_as_before():
    """The two lines of issue 18 (19 s and 28 s before) end at once, with the same reading."""
    cont = P.by_name()["command_continuation"].regex
    line = "  --x" + " " * 2000 + "y--x"
    with cpu_guard():
        m = cont.search(line)
        m_long = cont.search("  --x" + " " * RUN + "y--x \\")
    assert m is not None and m["args"] == line.strip() and m["cont"] is None
    assert m_long is not None and m_long["args"].endswith("y--x") and m_long["cont"] == "\\"
    user = P.by_name()["user_command"].regex
    with cpu_guard():
        assert user.search(" " * 8000 + "api_server") is None
        assert user.search(" " * RUN + "- cmd: `  $ vllm serve m")["cmd"] == "vllm serve m"
        assert user.search("- " + " " * RUN + "x") is None
    assert user.search("- command: `  $ vllm serve m --tp 2`")["cmd"] == "vllm serve m --tp 2`"
    assert user.search("A=1 B=x=y vllm serve m")["cmd"] == "vllm serve m"


def _fragments(text: str) -> list[str]:
    """The literal runs of a pattern (what a line must contain to get far into it)."""
    out, cur = [], []
    try:
        tree = re._parser.parse(text)  # type: ignore[attr-defined]
    except AttributeError:  # Python 3.10
        import sre_parse
        tree = sre_parse.parse(text)

    def walk(items):
        for op, av in items:
            name = str(op)
            if name == "LITERAL":
                cur.append(chr(av))
                continue
            if cur:
                out.append("".join(cur))
                cur.clear()
            if name in ("SUBPATTERN",):
                walk(av[-1])
            elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                walk(av[2])
            elif name == "BRANCH":
                for b in av[1]:
                    walk(b)
                    if cur:
                        out.append("".join(cur))
                        cur.clear()
    walk(tree)
    if cur:
        out.append("".join(cur))
    return [f for f in out if f] or [""]


_STR_PATTERNS = [e for e in collected() if not e[1]]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_random_compositions_of_fragments_and_runs_do_not_backtrack(data):
    text, _, flags, where, used = data.draw(st.sampled_from(_STR_PATTERNS))
    frags = _fragments(text)
    piece = st.one_of(
        st.sampled_from(frags),
        st.builds(lambda c, n: c * n, st.sampled_from(_ALPHABET + tuple({c for f in frags for c in f})),
                  st.integers(1_000, 10_000)),
        st.text(max_size=5),
    )
    s = "".join(data.draw(st.lists(piece, min_size=1, max_size=8)))
    apply = _applier(re.compile(text, flags), used)
    try:
        with cpu_guard():
            apply(s)
    except _Tripped:
        pytest.fail(f"{where}: {text!r} backtracks on {s[:80]!r}...{s[-80:]!r} ({len(s):,} characters)")
