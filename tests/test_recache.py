"""The compiled-regex cache (kvlogdiag/recache.py): what it builds is what `re.compile` builds, and any
problem with the cache file falls back to `re.compile` silently."""

from __future__ import annotations

import json
import marshal
import os
import re
import subprocess
import sys

import pytest
from conftest import SAMPLE_LOGS_DIR

from kvlogdiag import recache
from kvlogdiag.catalogue.failures import catalogue as failure_catalogue
from kvlogdiag.catalogue.patterns import STATS_TAIL, catalogue, prefilter_regex
from kvlogdiag.input import reader

SMALL = str(SAMPLE_LOGS_DIR / "v1_single_gpu.log")

pytestmark = pytest.mark.skipif(recache._TYPECODE is None, reason="not CPython: recache is plain re.compile")


def _fresh(monkeypatch, where) -> None:
    monkeypatch.setenv("KVLOGDIAG_CACHE_DIR", str(where))
    monkeypatch.setattr(recache, "_disk", None)
    monkeypatch.setattr(recache, "_new", {})
    monkeypatch.setattr(recache, "_memo", {})
    monkeypatch.setattr(recache, "_writable", None)


def _patterns() -> list[re.Pattern]:
    fc = failure_catalogue()
    out = [p.regex for p in catalogue()] + [STATS_TAIL, prefilter_regex(), prefilter_regex(("CUDA out of memory",))]
    for e in fc.entries:
        out += [rx for _, rx in e.patterns] + list(e.extra)
    out += fc.echo + fc.deaths + [rx for _, rx, _ in fc.class_hints if rx] + [rx for _, _, rx in fc.class_hints if rx]
    from kvlogdiag.extract import commands, extractor, failures, platform
    from kvlogdiag.render import redact

    for mod in (commands, extractor, failures, platform, redact, reader):  # their module-level regexes
        out += [v for v in vars(mod).values() if isinstance(v, re.Pattern)]
    return out


def _same(a: re.Pattern, b: re.Pattern) -> bool:
    # Pattern.__eq__ compares the flags, the text and the compiled program
    return a == b and a.groups == b.groups and a.groupindex == b.groupindex and type(a.pattern) is type(b.pattern)


def test_every_catalogue_regex_built_from_its_cached_program_equals_re_compile(tmp_path, monkeypatch):
    _fresh(monkeypatch, tmp_path / "c")
    pats = _patterns()
    assert len(pats) > 250
    for p in pats:
        recache.compile(p.pattern, p.flags)
    recache.flush()
    doc = marshal.loads((tmp_path / "c" / recache.FILE_NAME).read_bytes())
    assert doc["tag"] == recache.TAG and len(doc["entries"]) >= len({(p.pattern, p.flags) for p in pats}) - 5
    _fresh(monkeypatch, tmp_path / "c")
    parsed = []
    real_parse = recache._sre_parse.parse
    monkeypatch.setattr(recache._sre_parse, "parse", lambda *a: parsed.append(a) or real_parse(*a))
    got = [recache.compile(p.pattern, p.flags) for p in pats]
    assert parsed == []  # every one came from the cache file
    re.purge()
    for p, g in zip(pats, got):
        assert _same(g, re.compile(p.pattern, p.flags)), p.pattern[:80]
    m = recache.compile(r"(?P<a>x)(y)?").match("x")  # and it matches like re's
    assert m is not None and m.groupdict() == {"a": "x"} and m.groups() == ("x", None)


def test_off_unwritable_corrupt_or_foreign_cache_falls_back_to_re_compile(tmp_path, monkeypatch):
    pattern = r"KV cache (?P<n>\d+) \w+"
    _fresh(monkeypatch, "off")
    assert _same(recache.compile(pattern), re.compile(pattern)) and recache._new == {}
    assert not recache.writable()
    recache.flush()

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    _fresh(monkeypatch, blocker / "cache")  # cannot be created (root can write anywhere, so not chmod)
    assert _same(recache.compile(pattern), re.compile(pattern))
    assert not recache.writable()
    recache.flush()  # errors ignored
    assert blocker.read_text() == "not a folder"

    target = tmp_path / "c" / recache.FILE_NAME
    target.parent.mkdir()
    good = marshal.dumps({"tag": recache.TAG, "entries": [["s", pattern, 0, [0, b"!!!", 1, {}, [None]]], [1, 2], "x"]})
    for junk in (b"{not marshal", b"", good[: len(good) // 2],  # corrupt, empty, truncated
                 json.dumps({"tag": recache.TAG, "entries": []}).encode(),  # the old JSON format
                 marshal.dumps({"tag": "another python", "entries": [["s", pattern, 0, [0, b"\0\0\0\0", 0, {}, []]]]}),
                 marshal.dumps([1, 2]), good,
                 # a v2 entry (its program as base64 text) under this interpreter's tag
                 marshal.dumps({"tag": recache.TAG, "entries": [["s", pattern, 0, [0, "AQAAAA==", 1, {}, [None]]]]})):
        target.write_bytes(junk)
        _fresh(monkeypatch, tmp_path / "c")
        assert _same(recache.compile(pattern), re.compile(pattern))
        recache.flush()
        doc = marshal.loads(target.read_bytes())  # rewritten whole, with a good entry
        assert doc["tag"] == recache.TAG and ["s", pattern, 0] in [e[:3] for e in doc["entries"]]


def test_a_cache_file_that_is_not_a_regular_file_of_this_user_is_not_read(tmp_path, monkeypatch):
    pattern = r"KV cache (?P<n>\d+) \w+"
    _fresh(monkeypatch, tmp_path / "c")
    recache.compile(pattern)
    recache.flush()
    target = tmp_path / "c" / recache.FILE_NAME
    assert ["s", pattern, 0] in [e[:3] for e in marshal.loads(target.read_bytes())["entries"]]
    _fresh(monkeypatch, tmp_path / "c")
    uid = os.geteuid()
    monkeypatch.setattr(recache.os, "geteuid", lambda: uid + 1)  # the file is another owner's now
    assert recache._load() == {}
    target.unlink()
    os.mkfifo(target)  # a FIFO there: never read, never blocks
    _fresh(monkeypatch, tmp_path / "c")
    assert recache._load() == {} and _same(recache.compile(pattern), re.compile(pattern))


def test_derived_values_are_cached_and_checked(tmp_path, monkeypatch):
    _fresh(monkeypatch, tmp_path / "c")
    calls = []
    assert recache.derived("t", "k", lambda: calls.append(1) or [1, "a"], lambda v: isinstance(v, list)) == [1, "a"]
    recache.flush()
    _fresh(monkeypatch, tmp_path / "c")
    assert recache.cached("t", "k") == [[1, "a"]]
    assert recache.derived("t", "k", lambda: calls.append(1) or [1, "a"], lambda v: isinstance(v, list)) == [1, "a"]
    assert calls == [1]
    assert recache.derived("t", "k", lambda: calls.append(1) or "fresh", lambda v: False) == "fresh"  # refused
    assert calls == [1, 1]


def test_small_log_searched_by_the_cached_finder_gives_the_regex_lines(tmp_path, monkeypatch):
    _fresh(monkeypatch, tmp_path / "c")
    rx = prefilter_regex()
    for cache in ("_FINDERS", "_CHEAP", "_KEYWORDS"):
        monkeypatch.setattr(reader, cache, {})
    assert reader._finder_is_cheap(rx)  # writable: worked out once, kept for the next run
    finder = reader._finder_for(rx)
    recache.flush()
    for cache in ("_FINDERS", "_CHEAP", "_KEYWORDS"):
        monkeypatch.setattr(reader, cache, {})
    _fresh(monkeypatch, tmp_path / "c")
    assert reader._finder_is_cheap(rx)
    again = reader._finder_for(rx)
    assert [(b, p.pattern) for b, p in again.probes] == [(b, p.pattern) for b, p in finder.probes]
    assert [p.pattern for p in again.passes] == [p.pattern for p in finder.passes]
    for log in sorted(SAMPLE_LOGS_DIR.glob("*.log")):
        data = log.read_bytes()
        assert again.spans(data) == list(reader._regex_spans(data, rx)), log.name


def test_a_warm_small_analyze_compiles_few_regexes_and_parses_no_toml(tmp_path):
    """Issue 17 item 2: on a warm cache a small analyze builds the catalogues' regexes from their cached
    programs and reads the rule, failure, device and model TOML back as JSON (before: ~470 regexes compiled
    by `re`, 3 TOML documents parsed)."""
    code = ("import re, sys, tomllib\nfrom re import _compiler\n"
            "n = [0, 0]\nrc_ = _compiler.compile\n"
            "def c(*a, **k):\n    n[0] += 1\n    return rc_(*a, **k)\n"
            "_compiler.compile = c\ntl = tomllib.loads\n"
            "def t(*a, **k):\n    n[1] += 1\n    return tl(*a, **k)\n"
            "tomllib.loads = t\n"
            "from kvlogdiag.cli.main import cli\n"
            f"rc = cli.run(['analyze', '--format', 'json', {SMALL!r}])\n"
            "sys.stderr.write(f'\\nCOUNTS {n[0]} {n[1]} {rc}\\n')\n")
    env = dict(os.environ, KVLOGDIAG_CACHE_DIR=str(tmp_path / "cache"))
    outs = []
    for _ in range(2):  # the first run fills the caches
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
        outs.append(r.stdout)
        line = [ln for ln in r.stderr.splitlines() if ln.startswith("COUNTS ")]
        assert line, r.stderr
    compiles, tomls, rc = map(int, line[-1].split()[1:])
    assert rc in (0, 1) and outs[0] == outs[1]
    assert compiles <= 120, compiles  # the standard library's own and a few of kvlogdiag's small ones
    assert tomls == 0


def test_a_file_grown_past_its_budget_keeps_what_the_last_run_used(tmp_path, monkeypatch):
    _fresh(monkeypatch, tmp_path / "c")
    for p in ("a+", "b+", "c+"):
        recache.compile(p)
    recache.flush()
    _fresh(monkeypatch, tmp_path / "c")
    monkeypatch.setattr(recache, "SOFT_BYTES", 10)  # every file is too big now
    recache.compile("b+")  # used from the file
    recache.compile("d+")  # new
    recache.flush()
    doc = marshal.loads((tmp_path / "c" / recache.FILE_NAME).read_bytes())
    assert [e[1] for e in doc["entries"]] == ["b+", "d+"]


def test_serving_gives_re_compile_the_cached_programs_and_gives_it_back(tmp_path, monkeypatch):
    """`recache.serving` (the CLI's import, tabulate's): re.compile is `recache.compile` inside the block only."""
    _fresh(monkeypatch, tmp_path / "c")
    real = re.compile
    patterns = [(r"(?P<w>\w+)\s+#.*$", re.M), (rb"\r|\n", 0), (r"""(?x) a  # comment
                 b""", 0)]
    with recache.serving():
        assert re.compile is not real
        got = [re.compile(p, f) for p, f in patterns]
        assert re.compile(got[0]) is got[0]  # a compiled pattern given back, as by re
    assert re.compile is real
    re.purge()
    assert all(_same(g, re.compile(p, f)) for g, (p, f) in zip(got, patterns))
    recache.flush()
    _fresh(monkeypatch, tmp_path / "c")
    parsed = []
    real_parse = recache._sre_parse.parse
    monkeypatch.setattr(recache._sre_parse, "parse", lambda *a: parsed.append(a) or real_parse(*a))
    with pytest.raises(LookupError):
        with recache.serving():
            again = [re.compile(p, f) for p, f in patterns]
            raise LookupError("the block fails")
    assert re.compile is real  # however the block ends
    assert parsed == [] and all(_same(a, g) for a, g in zip(again, got))  # the second run: from the file


def test_serving_leaves_a_replaced_re_compile_alone(monkeypatch):
    def other(pattern, flags=0):
        return ("other", pattern)

    monkeypatch.setattr(re, "compile", other)
    with recache.serving():
        assert re.compile is other and re.compile("x") == ("other", "x")
    assert re.compile is other


def test_serving_is_plain_re_compile_while_another_thread_runs():
    import threading

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        with recache.serving():
            assert re.compile is recache._re_compile
    finally:
        stop.set()
        t.join()
