"""`LineSplitter` (kvlogdiag/input/incremental.py): pieces cut anywhere give the file reader's lines."""

from __future__ import annotations

import io

import pytest
from conftest import SAMPLE_LOGS_DIR
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlogdiag.input import incremental, reader
from kvlogdiag.input.incremental import LineSplitter, StreamLines
from kvlogdiag.pipeline import prefilter

TP4 = (SAMPLE_LOGS_DIR / "v1_tp4_workers.log").read_bytes()
DOCKER = (SAMPLE_LOGS_DIR / "docker_timestamps_ansi.log").read_bytes()
STATS = (SAMPLE_LOGS_DIR / "long_running_stats.log").read_bytes()


def file_lines(data: bytes, pf=None) -> tuple[list, reader.LineStats]:
    stats = reader.LineStats()
    return list(reader.iter_lines(io.BytesIO(data), "<test>", pf, stats)), stats


def split_lines(data: bytes, cuts: list[int], pf=None) -> tuple[list, reader.LineStats]:
    sp = LineSplitter(pf)
    out = []
    prev = 0
    for c in sorted(set(cuts)) + [len(data)]:
        out += sp.feed(data[prev:c])
        prev = c
    out += sp.end()
    return out, sp.stats


# pieces of real lines, odd bytes and line ends, glued into inputs that end anywhere
_pieces = st.sampled_from(TP4.split(b"\n")[100:140] + DOCKER.split(b"\n")[:20] + STATS.split(b"\n")[:10]
                          + [b"", b"\r", b"\xe2\x82", b"\xff", b"\x1b[0m", b"  ", b"GPU KV cache size: 485,6"])
_inputs = st.lists(st.tuples(_pieces, st.sampled_from([b"\n", b"\r\n", b"", b"\n\n"])), max_size=25).map(
    lambda xs: b"".join(a + b for a, b in xs))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_inputs, cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=30),
       filtered=st.booleans())
def test_any_chunking_gives_the_file_readers_lines(data, cuts, filtered):
    pf = prefilter() if filtered else None
    want, want_stats = file_lines(data, pf)
    got, got_stats = split_lines(data, [c for c in cuts if c <= len(data)], pf)
    assert got == want
    assert got_stats.lines == want_stats.lines
    assert got_stats.bytes == len(data)


@pytest.mark.parametrize("filtered", [False, True])
def test_a_real_log_fed_byte_by_byte(filtered):
    pf = prefilter() if filtered else None
    data = TP4[:-30]  # the input ends inside the last (stats) line
    want, want_stats = file_lines(data, pf)
    got, got_stats = split_lines(data, list(range(len(data))), pf)
    assert got == want and got_stats.lines == want_stats.lines
    assert want[-1].unterminated and not any(ln.unterminated for ln in want[:-1])


def test_a_line_still_being_written_is_not_yielded_until_the_end():
    sp = LineSplitter()
    assert sp.feed(b"INFO GPU KV cache size: 485,6") == []
    assert sp.pending
    assert [ln.text for ln in sp.feed(b"48 tokens\nnext")] == ["INFO GPU KV cache size: 485,648 tokens"]
    last = sp.end()
    assert [(ln.number, ln.text, ln.unterminated) for ln in last] == [(2, "next", True)]
    assert sp.stats.lines == 2 and not sp.pending
    assert sp.end() == []


def test_numbering_continues_after_end_and_the_next_byte_starts_a_new_line():
    sp = LineSplitter()
    sp.feed(b"a\nb")
    assert [ln.number for ln in sp.end()] == [2]
    assert [(ln.number, ln.text) for ln in sp.feed(b"c\n")] == [(3, "c")]


def test_over_long_lines_are_cut_and_counted_without_buffering_the_tail(monkeypatch):
    monkeypatch.setattr(incremental, "MAX_LINE_BYTES", 8)
    sp = LineSplitter()
    got = []
    for piece in (b"0123456", b"789abc", b"defgh", b"ij\nshort\n", b"0123456789"):
        got += sp.feed(piece)
        assert len(sp._carry) <= 8
    got += sp.end()
    assert [(ln.number, ln.text, ln.unterminated) for ln in got] == [
        (1, "01234567", False), (2, "short", False), (3, "01234567", True)]
    assert sp.stats.long_lines == 2


def test_prefilter_skips_lines_but_counts_them():
    sp = LineSplitter(prefilter())
    got = sp.feed(b"nothing here\n" * 3 + TP4.split(b"\n")[117] + b"\n" + b"more\n")
    assert [ln.number for ln in got] == [4]
    assert "Available KV cache memory" in got[0].text and got[0].rank == "Worker_TP2"
    assert sp.stats.lines == 5


def analyzer_lines(data: bytes) -> list:
    """The lines `Analyzer.read` feeds for ``data`` (hard-wrap detection, prefilter)."""
    fh = io.BufferedReader(io.BytesIO(data), reader.CHUNK_BYTES)
    width = reader.detect_hard_wrap(fh)
    if width:
        return list(reader.unwrap_lines(reader.iter_lines(fh, "<test>", None), width))
    return list(reader.iter_lines(fh, "<test>", prefilter()))


WRAPPED = [SAMPLE_LOGS_DIR.parent / "tests" / "data" / "heldout" / n for n in ("k01.log", "k02.log")]


@pytest.mark.parametrize("path", WRAPPED + [SAMPLE_LOGS_DIR / "v1_tp4_workers.log"], ids=lambda p: p.name)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(min_value=0, max_value=60_000), max_size=40))
def test_stream_lines_are_the_analyzers_lines_for_hard_wrapped_pastes_too(path, cuts):
    data = path.read_bytes()
    sl = StreamLines(prefilter())
    got = []
    prev = 0
    for c in sorted(set(c for c in cuts if c <= len(data))) + [len(data)]:
        got += sl.feed(data[prev:c])
        prev = c
    got += sl.end()
    assert got == analyzer_lines(data)
    assert sl.stats.lines == data.count(b"\n") + (not data.endswith(b"\n"))


def test_stream_lines_judge_the_head_when_told_the_input_went_quiet():
    sl = StreamLines(prefilter())
    assert sl.feed(TP4[:5000]) == []  # buffered: the head is not judged yet
    got = sl.settle()
    assert got and got[-1].number <= TP4[:5000].count(b"\n") and sl.wrap_width is None
    assert sl.feed(b"") == []
