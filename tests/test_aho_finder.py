"""The reader's Aho-Corasick keyword finder (`reader._AhoFinder`, ahocorasick_rs) finds exactly the prefilter's lines.

Every line of a chunk in which the prefilter regex matches, and nothing else, with the same newline counts as
the regex path of `reader.ChunkScanner` — on the pipeline's own prefilter over format-exact vLLM lines, and on
adversarial chunks: keywords at line starts and ends, at the chunk's end with and without a newline, cut by the
chunk's end, overlapping and nested keywords (where non-overlapping matching could hide a line), CRLF, dense
lines, and windows (`AHO_WINDOW`) as small as one byte so that keywords straddle every window boundary; then
random keyword sets and chunks (hypothesis). The reader takes this finder from `AHO_AFTER_BYTES` on, before
numpy, and without the library reads the same lines with the numpy and stdlib finders.
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as s

from kvlogdiag.input import reader as R
from kvlogdiag.pipeline import prefilter

ahocorasick_rs = pytest.importorskip("ahocorasick_rs")

ROOT = Path(__file__).resolve().parents[1]


def _regex_lines(chunk: bytes, rx: "re.Pattern[bytes]") -> tuple[list[tuple[int, int, int]], int]:
    """The reference: each line of ``chunk`` on its own, searched with the regex."""
    out, pos, number = [], 0, 0
    while pos <= len(chunk):
        end = chunk.find(b"\n", pos)
        stop = len(chunk) if end < 0 else end
        if pos < len(chunk) or end >= 0:
            if rx.search(chunk, pos, stop):
                out.append((number, pos, stop))
        if end < 0:
            break
        number += 1
        pos = end + 1
    return out, chunk.count(b"\n")


def _rx(keywords: list[bytes]) -> "re.Pattern[bytes]":
    return re.compile(b"|".join(re.escape(k) for k in sorted(keywords, key=len, reverse=True)))


def _check(finder: R._AhoFinder, chunk: bytes, rx: "re.Pattern[bytes]") -> None:
    assert finder.lines(chunk) == _regex_lines(chunk, rx), chunk


def test_the_pipeline_prefilter_on_format_exact_logs():
    pf = prefilter()
    kws = R._keywords_for(pf)
    assert kws
    finder = R._AhoFinder(ahocorasick_rs, kws)
    logs = sorted((ROOT / "sample_logs").glob("*.log")) + sorted((ROOT / "tests" / "data").rglob("*.log"))[:80]
    assert len(logs) > 20
    found = 0
    for path in logs:
        data = path.read_bytes()
        for chunk in (data, data.replace(b"\n", b"\r\n"), data.rstrip(b"\n")):
            got = finder.lines(chunk)
            assert got == _regex_lines(chunk, pf), path
            found += len(got[0])
    assert found > 1000


@pytest.mark.parametrize("window", [1, 2, 3, 7, 64, 1 << 16])
def test_adversarial_chunks(monkeypatch, window):
    monkeypatch.setattr(R, "AHO_WINDOW", window)
    # nested and overlapping keywords: a short one inside or across a long one must not hide a line
    kws = [b"KV cache", b"cache size", b"che s", b"Error", b"DistNetworkError", b"ab", b"abc", b"bcd", b"cd",
           b"x", b"\r", b"took "]
    rx = _rx(kws)
    finder = R._AhoFinder(ahocorasick_rs, kws)
    cases = [
        b"", b"\n", b"\n\n\n", b"x", b"KV cache", b"KV cache\n", b"KV cach", b"KV cach\n", b"noise\nKV cach",
        b"KV cache size: 1\n", b"abcd\n", b"a\nbcd\n", b"zzab\nzzbc\nzzcd", b"DistNetworkErro\nr\n",
        b"line\r\nKV cache\r\nplain\r\n", b"\r\n\r\n", b"Error" * 40 + b"\n" + b"y" * 50 + b"\nx",
        b"yyyy\n" * 30 + b"took ", b"took\n" * 5, b"KV cache\n" * 17, b"\n" + b"q" * 300 + b"cache size\n",
        b"bc" * 100 + b"d\n" + b"c" * 70 + b"d", b"cab" + b"\n" * 3 + b"cd",
    ]
    for chunk in cases:
        _check(finder, chunk, rx)


def test_one_byte_keywords_and_keywords_at_the_edges(monkeypatch):
    monkeypatch.setattr(R, "AHO_WINDOW", 5)
    kws = [b"A", b"ZZ", b"\xff\xfe", b"(APIServer pid="]
    rx = _rx(kws)
    finder = R._AhoFinder(ahocorasick_rs, kws)
    for chunk in (b"A", b"A\n", b"\nA", b"bbbbA\nbbbbb\nZ\nZ\nZZ", b"\xff\n\xfe\xff\xfe", b"(APIServer pid=1) x\n" * 3,
                  b"(APIServer pid" + b"=" * 8 + b"\n", b"........A"):
        _check(finder, chunk, rx)


_ALPHABET = [b"a", b"b", b"c", b"\n", b"\r", b" ", b"ab", b"ba", b"abc", b"cab", b"\xff", b"K", b"V", b"KV"]


@settings(max_examples=300, deadline=None)
@given(kws=s.lists(s.lists(s.sampled_from([b"a", b"b", b"c", b" ", b"\r", b"\xff", b"K", b"V"]), min_size=1,
                           max_size=6).map(b"".join), min_size=1, max_size=8, unique=True),
       parts=s.lists(s.sampled_from(_ALPHABET), max_size=120), window=s.integers(1, 40))
def test_random_keywords_and_chunks(kws, parts, window):
    chunk = b"".join(parts)
    old = R.AHO_WINDOW
    R.AHO_WINDOW = window
    try:
        _check(R._AhoFinder(ahocorasick_rs, kws), chunk, _rx(kws))
    finally:
        R.AHO_WINDOW = old


def _lines(data: bytes) -> list[tuple]:
    return [(ln.number, ln.text, ln.rank, ln.raw, ln.unterminated)
            for ln in R.iter_lines(io.BufferedReader(io.BytesIO(data)), "<t>", prefilter())]


def test_the_reader_takes_it_past_the_threshold_and_reads_the_same_lines_without_it(monkeypatch):
    data = b"".join((ROOT / "sample_logs" / p).read_bytes() for p in sorted(x.name for x in (ROOT / "sample_logs").glob("*.log")))
    assert len(data) > 50_000
    pf = prefilter()
    monkeypatch.setattr(R, "AHO_AFTER_BYTES", 0)
    scan = R.ChunkScanner(pf, len(data))
    scan(data[: data.rfind(b"\n", 0, 20_000) + 1])
    assert scan.aho is not None and scan.bigrams is None and scan.finder is None
    with_aho = _lines(data)
    monkeypatch.setattr(R, "_AHO_FINDERS", {})
    monkeypatch.setitem(sys.modules, "ahocorasick_rs", None)  # the library missing: import fails
    assert R._aho_finder_for(pf) is None
    scan = R.ChunkScanner(pf, len(data))
    scan(data[:20_000])
    assert scan.aho is None and scan.no_aho
    monkeypatch.setattr(R, "NUMPY_AFTER_BYTES", 0)
    monkeypatch.setattr(R, "_NUMPY_MIN_CHUNK", 0)
    assert _lines(data) == with_aho  # numpy
    monkeypatch.setattr(R, "NUMPY_AFTER_BYTES", 1 << 60)
    monkeypatch.setattr(R, "FINDER_AFTER_BYTES", 0)
    assert _lines(data) == with_aho  # stdlib finder
    monkeypatch.setattr(R, "FINDER_AFTER_BYTES", 1 << 60)
    monkeypatch.setattr(R, "_CHEAP", {k: False for k in R._CHEAP} | {(pf.pattern, pf.flags): False})
    monkeypatch.setattr(R, "_FINDERS", {})
    assert _lines(data) == with_aho  # the regex


def test_candidate_spans_uses_it_past_the_threshold(monkeypatch):
    pf = prefilter()
    data = (ROOT / "sample_logs").glob("*.log").__next__().read_bytes()
    monkeypatch.setattr(R, "AHO_AFTER_BYTES", 0)
    calls = []
    real = R._AhoFinder.lines
    monkeypatch.setattr(R._AhoFinder, "lines", lambda self, chunk: calls.append(len(chunk)) or real(self, chunk))
    assert R.candidate_spans(data, pf) == R._regex_spans(data, pf)
    assert calls == [len(data)]
