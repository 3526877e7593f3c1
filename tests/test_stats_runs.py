"""Issue 17 item 1: runs of stats lines read as one text (`reader.StatsRun`, `stats_batch.read_run`,
`Extractor.feed_run`) give exactly what feeding their lines one by one gives — the summary field by field
(every kept line's `Fact`: number, rank, raw text, run, DP group), the engine facts and the analysis JSON —
and the reader's runs hold exactly the lines it yields without them, serially and through its workers.
The per-line path (``Extractor._h_stats``) is the oracle, as in tests/test_stats_batch.py."""

from __future__ import annotations

import glob
import io
import os
import random

import pytest
from conftest import DATA_DIR, SAMPLE_LOGS_DIR
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as s
from test_stats_batch import ANALYZER, NUM, OTHER, PCT, PREFIX, TPS, _json, _runs, _state, log_bytes

from kvlogdiag.catalogue.patterns import catalogue
from kvlogdiag.extract import extractor as X
from kvlogdiag.extract import facts as F
from kvlogdiag.extract import stats_batch as B
from kvlogdiag.input import reader as R
from kvlogdiag.input.reader import LineStats, StatsRun, iter_lines, open_stream
from kvlogdiag.pipeline import Analyzer
from kvlogdiag.render.analysis import render_json

STATS_RX = next(p for p in catalogue() if p.name == "stats").regex


def _fed_in_runs(data: bytes) -> tuple[list, int]:
    """The runs of an extractor fed as `Analyzer.read` feeds it (runs at once where it can), and how many lines
    went in at once."""
    ex = ANALYZER.new_extractor("t.log")
    ex.batch_stats = True
    st = LineStats()
    at_once = 0
    for item in iter_lines(open_stream(io.BytesIO(data), "t.log"), "t.log", ANALYZER.line_prefilter(), st, stats_runs=True):
        if isinstance(item, StatsRun):
            if ex.feed_run(item):
                at_once += len(item.numbers)
            else:
                for line in item.lines():
                    ex.feed(line)
        else:
            ex.feed(item)
    ex.finish(st.lines, st.long_lines)
    return ex.runs, at_once


def _same(data: bytes) -> int:
    one = _runs(data, False)
    runs, at_once = _fed_in_runs(data)
    assert _state(runs) == _state(one)
    assert _json(runs) == _json(one)
    return at_once


# -- generated logs -----------------------------------------------------------------------------------------

def _mostly(plain, odd):
    """``plain`` values, with one of ``odd`` in twenty (a run with one damaged line is read line by line)."""
    return s.integers(0, 19).flatmap(lambda k: odd if k == 0 else plain)


NUM, PCT, TPS = (_mostly(s.integers(0, 300).map(str), NUM), _mostly(s.floats(0, 100).map(lambda v: f"{v:.1f}"), PCT),
                 _mostly(s.floats(0, 1e5).map(lambda v: f"{v:.1f}"), TPS))


@s.composite
def v1_line(draw) -> str:
    """A stats line in the forms a run is read at once in, with odd numbers among them."""
    head = draw(s.sampled_from(["", "Engine 000: ", "Engine 007: ", "Engine 12: ", "3 Engines Aggregated: ", "12Engine 003: "]))
    pre = draw(s.sampled_from(["", f", Preemptions: {draw(NUM)}"]))
    rest = draw(s.sampled_from([
        f"{pre}, GPU KV cache usage: {draw(PCT)}%, Prefix cache hit rate: {draw(PCT)}%",  # the usual V1 rest
        f", GPU KV cache usage: {draw(PCT)}%, Prefix cache hit rate: GPU: {draw(PCT)}%",
        f", Deferred: {draw(NUM)} reqs, GPU KV cache usage: {draw(PCT)}%",
        f", NPU KV cache usage: {draw(PCT)}%, Prefix cache hit rate: {draw(PCT)}%.",
        "", ".",
    ]))
    mid = (f"Swapped: {draw(NUM)} reqs, Pending: {draw(NUM)} reqs" if draw(s.integers(0, 9)) == 0
           else f"Waiting: {draw(NUM)} reqs")
    return (f"{head}Avg prompt throughput: {draw(TPS)} tokens/s, Avg generation throughput: {draw(TPS)} tokens/s, "
            f"Running: {draw(NUM)} reqs, {mid}{rest}")


PLAIN_PREFIX = PREFIX[1:5] + ["(APIServer pid=1 ip=10.0.0.1) INFO 11-29 08:40:09 [loggers.py:1] ",
                              "\x1b[1;36m(APIServer pid=1)\x1b[0;0m \x1b[32mINFO\x1b[0m 11-29 08:40:09 [loggers.py:1] "]


@s.composite
def plain_log(draw) -> bytes:
    # the server's start, and its first stats line (read line by line: the start-up tracker reads it) on its own
    out = [OTHER[0], PLAIN_PREFIX[0] + draw(v1_line()), OTHER[4]]
    served = False
    for _ in range(draw(s.integers(1, 60))):
        k = draw(s.integers(0, 12))
        if k == 0:
            out.append(draw(s.sampled_from(OTHER)))
        elif k == 1:
            out.append("(APIServer pid=1) INFO 11-29 08:40:04 [async_llm.py:1] Added request chatcmpl-1.")  # no candidate
        else:
            out.append(draw(s.sampled_from(PLAIN_PREFIX)) + draw(v1_line()))
            served = True
    end = draw(s.sampled_from(["\n", "\r\n"]))
    data = end.join(out)
    if draw(s.booleans()) or not served:
        data += end
    return data.encode()


@pytest.fixture()
def short_runs(monkeypatch):
    monkeypatch.setattr(R, "RUN_MIN_LINES", 1)  # every stats line of the tests is in a run


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(plain_log(), s.sampled_from([1, 3, 4096]), s.sampled_from([2, 5, 4096]))
def test_runs_give_the_per_line_figures_on_plain_logs(short_runs, data, batch_lines, series_cap):
    old = (X.BATCH_LINES, F.SERIES_MAX_VALUES, B.SERIES_MAX_VALUES)
    X.BATCH_LINES, F.SERIES_MAX_VALUES, B.SERIES_MAX_VALUES = batch_lines, series_cap, series_cap
    try:
        _same(data)
    finally:
        X.BATCH_LINES, F.SERIES_MAX_VALUES, B.SERIES_MAX_VALUES = old


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(log_bytes())
def test_runs_give_the_per_line_figures_on_odd_forms(short_runs, data):
    """Docker JSON lines, compose and kube prefixes, collector timestamps, alignment, remarks, cut last lines."""
    _same(data)


def _generated(n: int, seed: int = 5, crlf: bool = False) -> bytes:
    rnd = random.Random(seed)
    lines = [OTHER[0]]
    for i in range(n):
        u = rnd.uniform(0, 100)
        pre = f", Preemptions: {rnd.randint(1, 9)}" if rnd.random() < 0.01 else ""
        lines.append(f"(EngineCore_DP{i % 4} pid=3) INFO 11-29 08:40:09 [loggers.py:1] Engine 00{i % 4}: Avg prompt throughput: "
                     f"{rnd.uniform(0, 9e3):.1f} tokens/s, Avg generation throughput: {rnd.uniform(0, 900):.1f} tokens/s, Running: "
                     f"{rnd.choice([0, 1, 2, 200])} reqs, Waiting: {rnd.randint(0, 2)} reqs{pre}, GPU KV cache usage: {u:.1f}%, "
                     f"Prefix cache hit rate: {rnd.uniform(0, 100):.1f}%")
        if i % 700 == 699:
            lines.append(OTHER[4])  # a candidate line between runs
        if i % 9000 == 8999:
            lines.append(OTHER[1])  # a restart: a new run of the analysis
    eol = "\r\n" if crlf else "\n"
    return (eol.join(lines) + eol).encode()


def test_a_long_log_is_read_in_runs_and_gives_the_per_line_figures():
    """Full batches, the series cap reached (random throughputs), restarts, a CRLF copy; nearly every line at once
    (a test that fails if the run path silently turns itself off)."""
    for crlf in (False, True):
        data = _generated(20_000, crlf=crlf)
        assert _same(data) > 19_000


def test_a_wrong_run_reading_is_caught(monkeypatch, short_runs):
    data = _generated(1500)
    _same(data)
    monkeypatch.setattr(B, "_ENGINES", {"": None, "000": 7})  # engine 000 read as 7
    with pytest.raises(AssertionError):
        _same(data)


def test_the_catalogue_pattern_is_read_in_runs():
    """The run reading is built from the catalogue's stats pattern; if the pattern changes so that it can no longer
    be (its head, its groups, a part that could cross a line), this fails instead of the path going quiet."""
    assert B._run_regex(STATS_RX) is not None
    assert B.STATS_HEAD == X._STATS_HEAD
    assert B.read_run(STATS_RX, [b"INFO 11-29 08:40:09 [metrics.py:1] Avg prompt throughput: 1.0 tokens/s, Avg generation "
                                 b"throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 4 reqs, GPU KV cache usage: 5.0%, "
                                 b"Prefix cache hit rate: 6.0%"]) == [(None, False, False, 3, 4, 0, None, (5.0,), 6.0, 1.0, 2.0)]


@pytest.mark.parametrize("part", [
    b"(APIServer pid=1) INFO 11-29 08:40:09 [l.py:1] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 "
    b"tokens/s, Running: 3 reqs, Waiting: 4 reqs,  GPU KV cache usage: 5.0%",  # alignment spaces: normalise_message's
    b"web-1  | INFO 11-29 08:40:09 [l.py:1] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 "
    b"tokens/s, Running: 3 reqs, Waiting: 4 reqs",  # a compose prefix: an envelope
    b"(APIServer pid=1) INFO 11-29 08:40:09 [l.py:1] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 "
    b"tokens/s, Running: 3 reqs, Waiting: 4 reqs # x",  # a remark
    b"(APIServer pid=1) INFO 11-29 08:40:09 [l.py:1] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 "
    b"tokens/s, Running: \xd9\xa3 reqs, Waiting: 4 reqs",  # a non-ASCII digit
    b"(APIServer pid=1) INFO 11-29 08:40:09 [l.py:1] Avg prompt throughput: 1.0 tokens/s\r50%\r",  # a progress bar's \r
    b"(APIServer pid=1) INFO 11-29 08:40:09 [l.py:1] Avg prompt throughput: 1.0 tokens/s, Avg prompt throughput: 1.0 tokens/s",
])
def test_lines_not_in_the_plain_form_are_left_to_the_per_line_path(part):
    good = (b"(APIServer pid=1) INFO 11-29 08:40:09 [l.py:1] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: "
            b"2.0 tokens/s, Running: 3 reqs, Waiting: 4 reqs")
    assert B.read_run(STATS_RX, [good, good]) is not None
    assert B.read_run(STATS_RX, [good, part, good]) is None


def _lines(items) -> list[tuple]:
    out = []
    for it in items:
        for ln in (it.lines() if isinstance(it, StatsRun) else [it]):
            out.append((ln.number, ln.text, ln.rank, ln.raw, ln.meta, ln.unterminated))
    return out


def test_the_reader_runs_hold_exactly_its_lines_serially_and_through_workers(tmp_path, monkeypatch):
    path = tmp_path / "long.log"
    data = _generated(30_000, seed=9) + b"(APIServer pid=1) INFO 11-29 08:40:09 [l.py:1] Avg prompt throughput: 1.0 tok"  # cut
    path.write_bytes(data)
    pf = ANALYZER.line_prefilter()

    def read(runs: bool, jobs: str) -> tuple[list, LineStats, int]:
        monkeypatch.setenv("KVLOGDIAG_READ_JOBS", jobs)
        st = LineStats()
        with open(path, "rb") as fh:
            items = list(iter_lines(fh, str(path), pf, st, stats_runs=runs))
        return _lines(items), st, sum(isinstance(i, StatsRun) for i in items)

    monkeypatch.setattr(R, "PARALLEL_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(R, "UNIT_CHUNKS", 1)
    want, st0, _ = read(False, "0")
    for jobs in ("0", "2"):
        got, st, n_runs = read(True, jobs)
        assert n_runs > 10
        assert got == want
        assert (st.lines, st.long_lines, st.bytes) == (st0.lines, st0.long_lines, st0.bytes)
    assert want[-1][-1] is True  # the cut last line came as a line of its own, unterminated


def _files() -> list[str]:
    out = glob.glob(os.path.join(SAMPLE_LOGS_DIR, "**", "*"), recursive=True) + glob.glob(os.path.join(DATA_DIR, "**", "*"), recursive=True)
    return sorted(p for p in out if os.path.isfile(p))


def test_every_sample_and_test_log_gives_the_same_json_with_runs(monkeypatch):
    """`Analyzer` (containers, envelopes, every command's path) with runs of one line and without runs at all."""
    an = Analyzer()
    seen = 0

    def json_of(path: str) -> str:
        try:
            return render_json([r.to_json("all") for r in an.analyze_source_split(path)])
        except Exception as exc:  # noqa: BLE001 - a log the reader refuses: both ways must refuse it
            return f"ERROR {type(exc).__name__}: {exc}"

    for path in _files():
        monkeypatch.setattr(R, "RUN_MIN_LINES", 10**9)
        want = json_of(path)
        monkeypatch.setattr(R, "RUN_MIN_LINES", 1)
        assert json_of(path) == want, path
        seen += want.count('"stats_lines"')
    assert seen > 10

