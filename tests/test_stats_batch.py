"""Issue 17 item 1: stats lines folded in batches (kvlogdiag/extract/stats_batch.py) give exactly what the
per-line path gives — the summary field by field (every bucket's first and last line, the series counts, the
workload sums), the engine facts and the analysis JSON — on every sample and test log and on generated
mixes of stats lines in odd forms. The per-line path (``Extractor._h_stats``) is the oracle."""

from __future__ import annotations

import dataclasses
import glob
import io
import json
import os
import random
import re

import pytest
from conftest import DATA_DIR, SAMPLE_LOGS_DIR
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as s

from kvlogdiag.catalogue.keywords import overlap_pairs
from kvlogdiag.extract import extractor as X
from kvlogdiag.extract import facts as F
from kvlogdiag.extract import stats_batch as B
from kvlogdiag.input.reader import LineStats, iter_lines, make_line, open_stream
from kvlogdiag.pipeline import Analyzer
from kvlogdiag.render.analysis import render_json

ANALYZER = Analyzer()


def _runs(data: bytes, batch: bool) -> list:
    ex = ANALYZER.new_extractor("t.log")
    ex.batch_stats = batch
    st = LineStats()
    for line in iter_lines(open_stream(io.BytesIO(data), "t.log"), "t.log", ANALYZER.line_prefilter(), st):
        ex.feed(line)
    ex.finish(st.lines, st.long_lines)
    return ex.runs


def _state(runs: list) -> list:
    """Everything the stats lines feed, per run, as plain data (Facts included: line, rank, text, run, dp)."""
    out = []
    for f in runs:
        st = dataclasses.asdict(f.stats)
        st["engines"] = sorted(st["engines"])
        st["hist_order"] = list(f.stats.kv_usage_hist)  # insertion order too
        st["series_order"] = {k: list(v) for k, v in f.stats.series.items()}
        out.append((repr(st), [dataclasses.astuple(e) for e in f.engine], f.lines_read))
    return out


def _json(runs: list) -> str:
    return render_json([ANALYZER.analyze_facts(f).to_json() for f in runs])


def _same(data: bytes) -> None:
    one, many = _runs(data, False), _runs(data, True)
    assert _state(many) == _state(one)
    assert _json(many) == _json(one)


# -- generated stats lines ------------------------------------------------------------------------

NUM = s.one_of(s.integers(0, 300).map(str), s.sampled_from(["0", "1", "00", "9" * 30, "9" * 5000, "1,024"]))
PCT = s.one_of(s.floats(0, 120, allow_nan=False).map(lambda v: f"{v:.1f}"),
               s.sampled_from(["0.0", "89.9", "90.0", "99.95", "100.0", "1.2.3", ".", "9" * 400, "007.5"]))
TPS = s.one_of(s.floats(0, 1e5, allow_nan=False).map(lambda v: f"{v:.1f}"), s.sampled_from(["0.0", "1e3", "9" * 60, "."]))


@s.composite
def stats_line(draw) -> str:
    head = draw(s.sampled_from(["", "Engine 000: ", "Engine 007: ", "2 Engines Aggregated: ", "Engine x: ", "12Engine 003: "]))
    body = f"Avg prompt throughput: {draw(TPS)} tokens/s, Avg generation throughput: {draw(TPS)} tokens/s, Running: {draw(NUM)} reqs, "
    v0 = draw(s.booleans())
    body += f"Swapped: {draw(NUM)} reqs, Pending: {draw(NUM)} reqs" if v0 else f"Waiting: {draw(NUM)} reqs"
    tail = draw(s.lists(s.sampled_from(["preempt", "gpu", "cpu", "npu", "hit", "hitgpu", "deferred"]), max_size=5))
    for t in tail:
        body += {"preempt": f", Preemptions: {draw(NUM)}", "gpu": f", GPU KV cache usage: {draw(PCT)}%",
                 "cpu": f", CPU KV cache usage: {draw(PCT)}%", "npu": f", NPU KV cache usage: {draw(PCT)}%",
                 "hit": f", Prefix cache hit rate: {draw(PCT)}%", "hitgpu": f", Prefix cache hit rate: GPU: {draw(PCT)}%",
                 "deferred": f", Deferred: {draw(NUM)} reqs"}[t]
    body += draw(s.sampled_from(["", ".", "  # note", " \u2028x"]))
    return head + body


OTHER = [
    "(APIServer pid=1) INFO 11-29 08:40:01 [api_server.py:1] vLLM API server version 0.13.0",
    "(APIServer pid=2) INFO 11-29 08:40:01 [api_server.py:1] vLLM API server version 0.13.0",  # a restart
    "INFO 11-29 08:40:02 [llm_engine.py:1] Initializing a V0 LLM engine (v0.6.3) with config: model='m', tensor_parallel_size=1",
    "(EngineCore_DP0 pid=3) INFO 11-29 08:40:03 [kv_cache_utils.py:1] GPU KV cache size: 485,088 tokens",
    "(APIServer pid=1) INFO 11-29 08:40:04 [logger.py:1] Received request chatcmpl-1: prompt: 'the value must be set', params: x",
    "WARNING 11-29 08:40:05 [scheduler.py:1] Sequence group 3 is preempted by PreemptionMode.RECOMPUTE mode because there "
    "is not enough KV cache space. total_num_cumulative_preemption=4",
    "(APIServer pid=1) INFO:     127.0.0.1:5 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
]
PREFIX = ["", "(EngineCore_DP0 pid=3) INFO 11-29 08:40:09 [loggers.py:1] ", "(EngineCore_DP1 pid=4) INFO 11-29 08:40:09 [loggers.py:1] ",
          "INFO 11-29 08:40:09 [metrics.py:1] ", "(APIServer pid=1) \x1b[32mINFO\x1b[0m 11-29 08:40:09 [loggers.py:1] ",
          "2026-11-29T08:40:09.123456789Z stdout F (EngineCore_DP0 pid=3) INFO 11-29 08:40:09 [loggers.py:1] ",
          "web-1  | INFO 11-29 08:40:09 [loggers.py:1] ", "[pod/p/c] INFO 11-29 08:40:09 [loggers.py:1] "]


def _docker_json(line: str) -> str:
    return json.dumps({"log": line + "\n", "stream": "stdout", "time": "2026-11-29T08:40:09Z"})


@s.composite
def log_bytes(draw) -> bytes:
    out = []
    for _ in range(draw(s.integers(1, 40))):
        if draw(s.integers(0, 4)) == 0:
            line = draw(s.sampled_from(OTHER))
        else:
            line = draw(s.sampled_from(PREFIX)) + draw(stats_line())
        if draw(s.integers(0, 9)) == 0:
            line = _docker_json(line)
        out.append(line)
    end = draw(s.sampled_from(["\n", "\r\n"]))
    data = end.join(out)
    if draw(s.booleans()):
        data += end  # else the last line is cut: the input ends inside it
    return data.encode()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log_bytes(), s.sampled_from([1, 2, 3, 7, 4096]), s.sampled_from([2, 5, 4096]))
def test_batches_give_the_per_line_figures_on_generated_mixes(data, batch_lines, series_cap):
    """Batches of 1 to 4096 lines, across run starts and other lines; the series cap low enough to be reached."""
    old = (X.BATCH_LINES, F.SERIES_MAX_VALUES, B.SERIES_MAX_VALUES)
    X.BATCH_LINES, F.SERIES_MAX_VALUES, B.SERIES_MAX_VALUES = batch_lines, series_cap, series_cap
    try:
        _same(data)
    finally:
        X.BATCH_LINES, F.SERIES_MAX_VALUES, B.SERIES_MAX_VALUES = old


def _files() -> list[str]:
    out = glob.glob(os.path.join(SAMPLE_LOGS_DIR, "**", "*"), recursive=True) + glob.glob(os.path.join(DATA_DIR, "**", "*"), recursive=True)
    return sorted(p for p in out if os.path.isfile(p))


def test_batches_give_the_per_line_figures_on_every_sample_and_test_log(monkeypatch):
    monkeypatch.setattr(X, "BATCH_LINES", 5)  # many batch ends in a small log
    seen_stats = 0
    for path in _files():
        with open(path, "rb") as fh:
            data = fh.read()
        try:
            one = _runs(data, False)
        except Exception as exc:  # noqa: BLE001 - a log the reader refuses: both paths must refuse it
            with pytest.raises(type(exc)):
                _runs(data, True)
            continue
        many = _runs(data, True)
        assert _state(many) == _state(one), path
        seen_stats += sum(f.stats.lines for f in one)
    assert seen_stats > 100  # the logs do exercise the stats path


def test_a_long_generated_log_in_full_batches():
    rnd = random.Random(17)
    lines = [OTHER[0], OTHER[3]]
    for i in range(30_000):
        u = rnd.choice([0.0, 12.5, 50.0, 89.9, 90.0, 99.9, 100.0, rnd.uniform(0, 100)])
        lines.append(f"(EngineCore_DP{i % 4} pid=3) INFO 11-29 08:40:09 [loggers.py:1] Engine 00{i % 4}: Avg prompt throughput: "
                     f"{rnd.uniform(0, 9e3):.1f} tokens/s, Avg generation throughput: {rnd.uniform(0, 900):.1f} tokens/s, Running: "
                     f"{rnd.randint(0, 3)} reqs, Waiting: {rnd.randint(0, 2)} reqs, GPU KV cache usage: {u:.1f}%, "
                     f"Prefix cache hit rate: {rnd.uniform(0, 100):.1f}%")
        if i % 5000 == 4999:
            lines.append(OTHER[5])
    _same(("\n".join(lines) + "\n").encode())


def test_the_comparison_sees_a_wrong_fold(monkeypatch):
    """The checks above fail when the batch path is off by one step of the KV-usage histogram."""
    data = ("\n".join(PREFIX[1] + f"Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, "
                      f"Waiting: 0 reqs, GPU KV cache usage: {u}%" for u in ("10.0", "95.0")) + "\n").encode()
    _same(data)
    monkeypatch.setattr(B, "_usage_step", lambda pct: F.usage_step(pct) + 1)
    monkeypatch.setattr(B, "_STEPS", {})  # the steps the fold remembers by usage
    with pytest.raises(AssertionError):
        _same(data)


def test_inlined_usage_step_and_cached_values_agree():
    for pct in [0.0, -0.0, 1e-9, 0.05, 0.1, 12.34, 89.95, 90.0, 99.99, 100.0, 100.1, 1e300, float("inf"), float("nan")]:
        assert B._usage_step(pct) == F.usage_step(pct)
    stats = next(p for p in X._dispatch_tables()[0] if p.name == "stats").regex
    for text in ["Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 4 reqs, "
                 "GPU KV cache usage: 5.0%, Prefix cache hit rate: 6.0%, Preemptions: 7, Preemptions: 8",
                 "Engine 001: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, "
                 "Pending: 2 reqs, GPU KV cache usage: 5.0%, CPU KV cache usage: 9.0%"]:
        m = stats.search(text)
        assert B.stats_values(m) == B.parse_stats(m) == B.stats_values(stats.search(text))
        assert B._TAIL_FINDALL  # the fast tail read is in use; its fallback reads the same
        B._TAIL_FINDALL = False
        try:
            assert B.parse_stats(m) == B.stats_values(m)
        finally:
            B._TAIL_FINDALL = True


def test_damaged_figures_are_no_sample_and_no_crash():
    """'1.2.3 %' and a count of 5,000 digits used to raise out of the extractor; now such a line is not a sample."""
    good = "INFO 11-29 08:40:29 [loggers.py:1] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 5.0%"
    bad = [good.replace("5.0%", "1.2.3%"), good.replace("Running: 1", "Running: " + "9" * 5000)]
    data = ("\n".join([good, *bad]) + "\n").encode()
    for batch in (False, True):
        runs = _runs(data, batch)
        assert runs[-1].stats.lines == 1 and runs[-1].stats.kv_usage_max == 5.0
    _same(data)


@settings(max_examples=200, deadline=None)
@given(s.lists(s.sampled_from(sorted(X._dispatch_tables()[1]) + ["Avg", "KV ", "max", "took", "x", " "]), max_size=30).map("".join))
def test_the_keyword_trie_finds_what_the_flat_alternation_finds(text):
    kws = sorted(X._dispatch_tables()[1], key=len, reverse=True)
    flat = re.compile("|".join(re.escape(k) for k in kws))
    trie = X._dispatch_tables()[2]
    assert [m.span() for m in trie.finditer(text)] == [m.span() for m in flat.finditer(text)]


def test_every_keyword_in_a_line_dispatches_its_patterns():
    """Keywords that overlap without containing each other ("Available KV cache memory" + "KV cache memory (")
    hid each other from a non-overlapping search: every keyword the line holds must reach its patterns."""
    _, by_kw, _ = X._dispatch_tables()
    pairs = overlap_pairs(sorted(by_kw))
    assert len(pairs) > 10
    checked = 0
    for a, b, text in pairs:
        line = make_line(1, ("INFO 01-01 00:00:00 [x.py:1] " + text).encode())
        if a not in line.text or b not in line.text:
            continue  # the reader folds runs of spaces ("  model   "): those keywords never meet in a line
        checked += 1
        want = {p.name for k in (a, b) for p in by_kw[k]}
        assert want <= _dispatched(line), (a, b)
    assert checked > 10


def _dispatched(line) -> set[str]:
    """The patterns Extractor.feed tries on ``line``: its table's patterns replaced by ones that record the search."""
    ex = X.Extractor("t.log")
    tried: set[str] = set()

    class _Rx:
        def __init__(self, name):
            self.name = name

        def search(self, s):
            tried.add(self.name)

    class _P:
        def __init__(self, name):
            self.name, self.regex = name, _Rx(name)

    ex._by_kw = {k: [_P(p.name) for p in ps] for k, ps in ex._by_kw.items()}
    ex.feed(line)
    return tried


STATS_RX = next(p for p in X._dispatch_tables()[0] if p.name == "stats").regex


def test_the_stats_search_takes_its_fast_path():
    """A change to the stats pattern's head silently sent every stats line through the plain search (~3x the
    time): the fast path must recognise the catalogue's pattern."""
    X._stats_search(STATS_RX, "Avg prompt throughput: 1 tokens/s")
    assert X._STATS_FAST == [STATS_RX, True]


_PIECES = ["Engine ", "000", "7", "12", ": ", " Engines Aggregated", "Avg prompt throughput: ", "1.0 tokens/s, ",
           "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs", ", GPU KV cache usage: 5.0%",
           "x", " ", "\u0663", "Engine 000: Avg prompt throughput: "]


@settings(max_examples=400, deadline=None)
@given(s.lists(s.sampled_from(_PIECES), max_size=12).map("".join))
def test_the_stats_search_finds_what_the_plain_search_finds(text):
    got, want = X._stats_search(STATS_RX, text), STATS_RX.search(text)
    assert (got and (got.span(), got.groups())) == (want and (want.span(), want.groups()))
