"""Memory of one analysis grows by a bounded number of bytes per line (issue 18, item 5), counted, not timed.

The same start-up (the TP-4 sample log) is followed by N lines of one kind, at two sizes (12,000 and
36,000: both past the reader's first 1 MiB chunks, under its 16 MiB numpy switch), and two figures grow per
added line under a bound:

* the tracemalloc peak of ``Analyzer.analyze_stream`` + ``to_json``, for runtime lines (stats, V0
  preemption warnings, warnings/errors, request lines, a mix): aggregates and capped evidence only;
* what reading keeps (traced memory once every line is fed, the session alive: ``watch`` holds it for
  as long as the server logs), for the KV figure lines: the JSON contract lists every KV value, so each
  stays, as a column entry of a few tens of bytes (`kvlogdiag.extract.bounded.FactColumn`) instead of a
  `Fact` with its line's text and rank string (before: 300-510 B a line).

The peak of an analysis of many KV lines still grows by the contract's lists (every value, one
``bytes_per_token_by_rank`` entry per pairing) and derive's passes over them: docs/reliability.md gives
those numbers. Before/after figures are in the comments of the bounds. Session 6 added text mode on
a log of KV pairs (``test_text_mode_keeps_a_few_tens_of_bytes_per_kv_line``): the pairings in columns,
the contract's lists as views, the summary capped (kvlogdiag/derive/pairings.py, render/caps.py). Session 7
added ``report`` (Markdown, HTML: no dict per row, the tables capped the same way) and ``watch --format json``
(final and summary events written piece by piece, figures events capped, evaluations spaced by the KV figures).
"""

from __future__ import annotations

import contextlib
import gc
import io
import random
import tracemalloc
from pathlib import Path

import pytest

from kvlogdiag.extract import stats_batch
from kvlogdiag.extract.bounded import KEEP, FactColumn, tuple_second
from kvlogdiag.extract.facts import Fact
from kvlogdiag.input import reader
from kvlogdiag.pipeline import Analyzer

ROOT = Path(__file__).resolve().parent.parent
HEAD = (ROOT / "sample_logs" / "v1_tp4_workers.log").read_bytes()
SMALL, LARGE = 12_000, 36_000  # both past the reader's first chunks (1 MiB: a chunk's lines are transient)


def _line(kind: str, i: int, rng: random.Random) -> str:
    t = f"{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}"
    r = i % 4
    if kind == "stats":
        # 1-decimal percentages and request counts: the distributions keep one count per distinct value
        return (f"(APIServer pid=88) INFO 11-29 {t} [loggers.py:340] Engine 000: Avg prompt throughput: "
                f"{rng.randint(0, 400) * 10.0:.1f} tokens/s, Avg generation throughput: {rng.randint(0, 300) * 10.0:.1f} tokens/s, "
                f"Running: {rng.randint(0, 256)} reqs, Waiting: {rng.randint(0, 30)} reqs, Preemptions: {rng.choice([0, 0, 0, 1, 3])}, "
                f"GPU KV cache usage: {rng.uniform(0, 100):.1f}%, Prefix cache hit rate: {rng.uniform(0, 95):.1f}%")
    if kind == "available":
        return f"(Worker_TP{r} pid={2520 + r}) INFO 11-29 {t} [gpu_worker.py:298] Available KV cache memory: {rng.uniform(30, 40):.2f} GiB"
    if kind == "tokens":
        return f"(EngineCore_DP0 pid=2410) INFO 11-29 {t} [kv_cache_utils.py:864] GPU KV cache size: {rng.randint(400000, 500000):,} tokens"
    if kind == "concurrency":
        return (f"(EngineCore_DP0 pid=2410) INFO 11-29 {t} [kv_cache_utils.py:868] Maximum concurrency for 65,536 tokens "
                f"per request: {rng.uniform(5, 9):.2f}x")
    if kind == "blocks":
        return f"INFO 11-29 {t} executor_base.py:111] # cuda blocks: {rng.randint(20000, 30000)}, # CPU blocks: 2048"
    if kind == "preemption":
        return (f"WARNING 11-29 {t} scheduler.py:1560] Sequence group {i} is preempted by PreemptionMode.RECOMPUTE mode "
                "because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
                f"gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={i + 1}")
    if kind == "warning":
        return (f"WARNING 11-29 {t} [block_pool.py:300] No free blocks in the block pool; request {i} must wait.",
                f"WARNING 11-29 {t} scheduler.py:1010] Input prompt ({10000 + i} tokens) is too long and exceeds the capacity of block_manager",
                f"(APIServer pid=2231) ERROR 11-29 {t} [serving.py:100] VLLMValidationError: The decoder prompt (length {40000 + i}) "
                "is longer than the maximum model length of 32768. Make sure that `max_model_len` is no smaller than the number of text tokens.",
                f"INFO 11-29 {t} [recompute_scheduler.py:400] [RecomputeScheduler] Preempted request cmpl-{i}-0. running_count=63, token_budget=120",
                )[i % 4]
    if kind == "request":
        rid = f"chatcmpl-{rng.getrandbits(128):032x}"
        return (f"(APIServer pid=2231) INFO 11-29 {t} [logger.py:43] Received request {rid}: prompt: 'hello world {i}', "
                "params: SamplingParams(n=1, temperature=0.7, max_tokens=256), prompt_token_ids: None, lora_request: None.",
                f"(APIServer pid=2231) INFO 11-29 {t} [async_llm.py:325] Added request {rid}.",
                f"(APIServer pid=2231) INFO:     127.0.0.1:{rng.randint(50000, 59999)} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
                )[i % 3]
    assert kind == "mixed"
    k = ("stats", "request", "request", "request", "stats", "warning", "preemption", "request")[i % 8]
    return _line(k, i, rng)


def log_of(kind: str, n: int) -> bytes:
    rng = random.Random(n)
    return HEAD + ("\n".join(_line(kind, i, rng) for i in range(n)) + "\n").encode()


@contextlib.contextmanager
def traced(pause_gc: bool = True):
    """tracemalloc on, the cycle collector paused (when it runs would move the peak) and the reader's count
    of the bytes this process scanned reset (past 16 MiB it switches to the numpy line finder, built once
    and cached: a figure would depend on the tests run before)."""
    gc.collect()
    if pause_gc:
        gc.disable()
    scanned = reader._scanned
    reader._scanned = 0
    # the stats fold's rounding memo is process-wide and cleared when full: what it holds depends on the tests run before
    stats_batch._ROUNDED.clear()
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()
        reader._scanned = scanned
        gc.enable()


def peak_bytes(analyzer: Analyzer, data: bytes) -> int:
    """tracemalloc peak of one analysis and its JSON."""
    with traced():
        analyzer.analyze_stream(io.BufferedReader(io.BytesIO(data)), "x.log").to_json()
        return tracemalloc.get_traced_memory()[1]


def state_bytes(analyzer: Analyzer, data: bytes) -> int:
    """What reading keeps (the facts of the lines read so far): traced memory held once every line is fed,
    with the session alive, as ``watch`` holds it for as long as the server logs."""
    with traced():
        session = analyzer.session("x.log")
        analyzer.read(io.BufferedReader(io.BytesIO(data)), "x.log", session)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        del session
        return held


# bytes of peak (analysis + JSON) per added line: before (session 5) → now, and the bound
PEAK_BOUNDS = {
    # aggregates only (the distributions keep one count per distinct value); 36-47 B measured, depending on which tests
    # ran in this process before (patterns compiled and caches filled on first use fall into one size or the other)
    "stats": 60,
    "preemption": 150,   # 540 → 44: a count and the first 50 lines; was also an engine vote with its text per line
    "warning": 150,      # 244 → 57: event counts + the first 50 of each; was also the restated max_model_len as a Fact
    "request": 100,      # 19 → 19: lines no pattern reads
    "mixed": 150,        # 95 → 16
    # KV lines: the contract's list entry of each value (+ one bytes_per_token_by_rank pairing per token count)
    "available": 220,    # 329 → 114
    "tokens": 850,       # 1,016 → 659: the pairing is a dict (derive, then the JSON) and a RankFigures
    "concurrency": 600,  # 711 → 466: the {tokens_per_request, concurrency} dict of the contract per line
    "blocks": 400,       # 509 → 222
}
# bytes kept while reading per added line: before → bound (the values the JSON contract lists stay)
STATE_BOUNDS = {
    "available": 80,     # 300 → 41: was a Fact with the line's text and its own rank string per line
    "tokens": 120,       # 405 → 81: + an engine vote (a second Fact) per line; now two column entries
    "concurrency": 130,  # 508 → 89: (tokens, x) as two array entries, + the engine vote
    "blocks": 160,       # 481 → 118: the count, the engine vote and the device's platform vote
    "preemption": 60,    # ~500 → 41: the engine vote of each warning, with its text
    "warning": 60,       # 186 → 21
}


@pytest.fixture(scope="module")
def analyzer() -> Analyzer:
    a = Analyzer()
    peak_bytes(a, log_of("mixed", 3_000))  # rules loaded, regexes compiled, caches filled: not per line
    return a


def _per_line(measure, analyzer: Analyzer, kind: str, sizes: tuple[int, int] = (SMALL, LARGE)) -> tuple[float, int, int]:
    lo, hi = sizes
    small = measure(analyzer, log_of(kind, lo))
    large = measure(analyzer, log_of(kind, hi))
    return (large - small) / (hi - lo), small, large


@pytest.mark.parametrize("kind", sorted(PEAK_BOUNDS))
def test_peak_memory_per_line_is_bounded(analyzer, kind):
    per_line, small, large = _per_line(peak_bytes, analyzer, kind)
    print(f"{kind}: {per_line:.0f} B of peak per line ({small:,} → {large:,} B)")
    assert per_line < PEAK_BOUNDS[kind], f"{kind}: {per_line:.0f} B of peak per line ({small:,} → {large:,} B)"


@pytest.mark.parametrize("kind", sorted(STATE_BOUNDS))
def test_reading_keeps_a_few_tens_of_bytes_per_line(analyzer, kind):
    per_line, small, large = _per_line(state_bytes, analyzer, kind, (SMALL // 3, LARGE // 3))  # no transient to outgrow
    print(f"{kind}: {per_line:.0f} B kept per line ({small:,} → {large:,} B)")
    assert per_line < STATE_BOUNDS[kind], f"{kind}: {per_line:.0f} B kept per line ({small:,} → {large:,} B)"


def _fact(v, line, rank="Worker_TP0", source="kv_available_gib", dp=0) -> Fact:
    return Fact(v, line, rank, f"line {line} says {v}", source, 0, dp)


def test_a_column_keeps_every_value_and_the_texts_a_reader_can_cite():
    rng = random.Random(7)
    facts = [_fact(round(rng.uniform(30, 40), 2), i + 1, f"Worker_TP{i % 4}") for i in range(5_000)]
    col = FactColumn(facts)
    assert len(col) == 5_000 and [f.value for f in col] == [f.value for f in facts]
    assert [(f.line, f.rank, f.source, f.run, f.dp) for f in col] == [(f.line, f.rank, f.source, f.run, f.dp) for f in facts]
    # what the figures and rules cite: first, last, the first smallest / largest overall and per rank
    cited = [col[0], col[-1], min(col, key=lambda f: f.value), max(col, key=lambda f: f.value)]
    for r in range(4):
        mine = [f for f in col if f.rank == f"Worker_TP{r}"]
        cited += [mine[0], mine[-1], min(mine, key=lambda f: f.value), max(mine, key=lambda f: f.value)]
    for f in cited:
        assert f.raw == f"line {f.line} says {f.value}"
    assert col[KEEP + 100].raw is None and col.texts_dropped > 4_000
    assert min(col, key=lambda f: f.value) is min(col, key=lambda f: f.value)  # a kept fact is the same object


def test_a_column_keeps_the_exact_type_of_odd_values():
    col = FactColumn(key=tuple_second)
    odd = [(65536, 7.25), (2**70, 1.0), 3, 2.5, ("v0_profile", 1.5), None, {"a": 1}, True]
    for i, v in enumerate(odd):
        col.append(_fact(v, i + 1))
    assert [f.value for f in col] == odd and [type(f.value) for f in col] == [type(v) for v in odd]


def _kv_mix(seed: int, n: int) -> bytes:
    """KV lines of several ranks and DP groups, with ties, zeros and negatives (only after the first tenth, so
    the first of them is no group's first line), V0 budgets and blocks."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        dp, tp = rng.randint(0, 2), rng.randint(0, 3)
        rank = rng.choice([f"(Worker_DP{dp}_TP{tp} pid={100 + tp}) ", f"(Worker_DP{dp}_PP1_TP{tp} pid=7) ", f"(EngineCore_DP{dp} pid=9) ", ""])
        v = rng.choice([30.0, 31.5, 0.0, -2.0, round(rng.uniform(-1, 60), 2)])
        if i < n // 10:
            v = abs(v) + 1.0
        out.append(rng.choice([
            f"{rank}INFO 11-29 10:00:00 [gpu_worker.py:298] Available KV cache memory: {v} GiB",
            f"{rank}INFO 11-29 10:00:00 [kv_cache_utils.py:864] GPU KV cache size: {rng.choice([0, 485088, rng.randint(1, 10**6)]):,} tokens",
            f"{rank}INFO 11-29 10:00:00 [kv_cache_utils.py:868] Maximum concurrency for 65,536 tokens per request: {rng.choice([7.4, round(rng.uniform(0, 20), 2)])}x",
            f"{rank}INFO 11-29 10:00:00 executor_base.py:111] # cuda blocks: {rng.choice([0, 28047, rng.randint(1, 50000)])}, # CPU blocks: 2048",
            f"{rank}INFO 11-29 10:00:00 worker.py:232] Memory profiling results: total_gpu_memory=44.42GiB "
            f"non_torch_memory=0.73GiB kv_cache_size={v}GiB gpu_memory_utilization=0.90",
            f"{rank}INFO 11-29 10:00:00 [gpu_model_runner.py:2007] Model loading took {v} GiB and 88.4 seconds",
        ]))
    return (ROOT / "sample_logs" / "v1_dp2_tp4.log").read_bytes() + ("\n".join(out) + "\n").encode()


@pytest.mark.parametrize("seed", [2, 5])  # seeds where keeping only first/last/min/max loses a cited text
def test_capped_texts_change_no_output(analyzer, monkeypatch, seed):
    """What a finding, the provenance or a figure cites keeps its text: the JSON of a log of 3,000 KV lines
    is the same with the texts capped as with every text kept."""
    from kvlogdiag.extract import bounded

    data = _kv_mix(seed, 3_000)
    capped = analyzer.analyze_stream(io.BufferedReader(io.BytesIO(data)), "x.log").to_json(which="all")
    monkeypatch.setattr(bounded, "KEEP", 10**9)  # nothing is let go
    whole = analyzer.analyze_stream(io.BufferedReader(io.BytesIO(data)), "x.log").to_json(which="all")
    assert capped == whole and capped["findings"]


# -- text mode on a log of KV pairs (issue 18: memory O(ranks + findings), not O(KV lines)) ------------------

def _kv_pairs(n: int) -> bytes:
    """The start-up, then ``n`` lines: ``Available KV cache memory`` / ``GPU KV cache size`` pairs (varied values:
    every pairing sorted, none equal to the next)."""
    rng = random.Random(n)
    out = []
    for _ in range(n // 2):
        out.append(f"(EngineCore_DP0 pid=1) INFO 11-01 10:00:00 [gpu_worker.py:1] Available KV cache memory: {rng.uniform(30, 40):.2f} GiB")
        out.append(f"(EngineCore_DP0 pid=1) INFO 11-01 10:00:00 [kv_cache_utils.py:1] GPU KV cache size: {rng.randint(400000, 500000):,} tokens")
    return HEAD + ("\n".join(out) + "\n").encode()


def text_bytes(analyzer: Analyzer, data: bytes) -> tuple[int, int]:
    """(held, peak) of ``kvlogdiag analyze``'s text mode: the analysis and its text summary, held while the
    result is alive (``watch``, ``report`` keep it), and the tracemalloc peak of the whole."""
    from kvlogdiag.render.analysis import render_text
    from kvlogdiag.render.summary import summary_text

    with traced():
        runs = analyzer.analyze_stream(io.BufferedReader(io.BytesIO(data)), "x.log").select("all")
        text = render_text(runs) + summary_text(runs, "info", 1)
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
        del text, runs
        return held, peak


# bytes per KV line, before (the JSON contract's lists and one dict + one RankFigures per pairing, the whole rank
# table and value lists in the text) → now (typed columns in blocks, pairings in columns, views, the text capped)
TEXT_HELD_BOUND = 40   # 316 → 24
TEXT_PEAK_BOUND = 160  # 840 → 111


def test_text_mode_keeps_a_few_tens_of_bytes_per_kv_line(analyzer):
    (h1, p1), (h2, p2) = text_bytes(analyzer, _kv_pairs(SMALL)), text_bytes(analyzer, _kv_pairs(LARGE))
    held, peak = (h2 - h1) / (LARGE - SMALL), (p2 - p1) / (LARGE - SMALL)
    print(f"text mode per KV line: {held:.0f} B held ({h1:,} → {h2:,}), {peak:.0f} B of peak ({p1:,} → {p2:,})")
    assert held < TEXT_HELD_BOUND, f"{held:.0f} B held per KV line ({h1:,} → {h2:,} B)"
    assert peak < TEXT_PEAK_BOUND, f"{peak:.0f} B of peak per KV line ({p1:,} → {p2:,} B)"


# -- report and watch --format json on a log of KV pairs (issue 18, session 7) -------------------------------

def report_bytes(analyzer: Analyzer, data: bytes, fmt: str) -> tuple[int, int]:
    """(size of the text, tracemalloc peak) of ``kvlogdiag report``: the analysis, the document, its redaction
    and the page (HTML without the charts: matplotlib's figure is of the at most `caps.SHOW_ALL` rows shown)."""
    from kvlogdiag.modes.report import build_document, redact_document, render_report_html, render_report_markdown

    with traced():
        runs = analyzer.analyze_stream(io.BufferedReader(io.BytesIO(data)), "x.log").select("last")
        doc = redact_document(build_document(runs))
        text = render_report_html(doc, charts=False) if fmt == "html" else render_report_markdown(doc)
        peak = tracemalloc.get_traced_memory()[1]
        size = len(text)
        del text, doc, runs
        return size, peak


class _CountingSink:
    """A stderr that keeps nothing: the number of characters written and the longest single write."""

    def __init__(self) -> None:
        self.chars = 0
        self.longest = 0
        self.lines = 0

    def write(self, text: str) -> int:
        self.chars += len(text)
        self.longest = max(self.longest, len(text))
        self.lines += text.count("\n")
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def watch_bytes(data: bytes) -> tuple[_CountingSink, int]:
    """(what ``watch --format json`` wrote, tracemalloc peak) of the input arriving in 1 MiB reads, to the end:
    its figures, final and summary events (the last two with every value of the contract)."""
    from kvlogdiag.modes.watch import Emitter, Watcher

    sink = _CountingSink()
    # the collector runs: each evaluation leaves an analysis in cycles, which watch's collector frees as it goes
    # (paused, the peak would count the garbage of every evaluation so far)
    with traced(pause_gc=False):
        w = Watcher(Analyzer(), Emitter("json", sink), echo=False)
        for i in range(0, len(data), 1 << 20):
            w.take(data[i: i + (1 << 20)])
        w.end_of_part()
        w.finish("eof")
        peak = tracemalloc.get_traced_memory()[1]
        del w
    return sink, peak


# bytes of peak per KV line, before (session 6: a dict per report row, the analysis' lists copied by to_json and
# again by the redaction; watch: every value in every figures event and each final/summary event one string)
# → now; the bounds leave room over text mode's own peak (TEXT_PEAK_BOUND: the analysis)
REPORT_PEAK_BOUND = 200  # markdown 849 → 112, html 850 → 111 (12,000 vs 36,000 KV lines; the analysis' own peak)
WATCH_PEAK_BOUND = 100   # 1,296 → 2 (the peak is then the reading's, before the KV figures outgrow it)


@pytest.mark.parametrize("fmt", ["markdown", "html"])
def test_report_peak_grows_by_the_analysis_alone(analyzer, fmt):
    (_, p1), (_, p2) = report_bytes(analyzer, _kv_pairs(SMALL), fmt), report_bytes(analyzer, _kv_pairs(LARGE), fmt)
    peak = (p2 - p1) / (LARGE - SMALL)
    print(f"report {fmt} per KV line: {peak:.0f} B of peak ({p1:,} → {p2:,})")
    assert peak < REPORT_PEAK_BOUND, f"report {fmt}: {peak:.0f} B of peak per KV line ({p1:,} → {p2:,} B)"


def test_report_of_many_kv_lines_is_the_same_size_whatever_their_number(analyzer):
    """The tables show the first and last `caps.ROW_ENDS` rows past `caps.SHOW_ALL`, with the count and ranges."""
    from kvlogdiag.modes.report import build_document, render_report_markdown
    from kvlogdiag.render.analysis import fmt_gib
    from kvlogdiag.render.caps import ROW_ENDS, SHOW_ALL

    texts = []
    for n in (2 * SHOW_ALL + 10, 4_000):
        runs = analyzer.analyze_stream(io.BufferedReader(io.BytesIO(_kv_pairs(n))), "x.log").select("last")
        text = render_report_markdown(build_document(runs))
        pairs = sorted(runs[0].kv_cache.ranks, key=lambda p: (p.dp_group, p.memory_line))  # the report's row order
        assert f"{len(pairs):,} KV figures: the first and last {ROW_ENDS} shown" in text
        lo = min(p.available_gib for p in pairs)
        assert f"available lowest {fmt_gib(lo)}, highest " in text
        # the last row is in both tables; a middle one is not
        assert f"| {pairs[-1].memory_line}/{pairs[-1].tokens_line} |" in text
        assert f"| {pairs[ROW_ENDS + 1].memory_line}/{pairs[ROW_ENDS + 1].tokens_line} |" not in text
        texts.append(len(text))
    assert abs(texts[1] - texts[0]) < 600, texts  # the same rows; only the figures in the note differ


def test_watch_json_peak_grows_by_the_analysis_alone():
    watch_bytes(_kv_pairs(200))  # imports, the watch module's caches: not per line
    (s1, p1), (s2, p2) = watch_bytes(_kv_pairs(SMALL)), watch_bytes(_kv_pairs(LARGE))
    peak = (p2 - p1) / (LARGE - SMALL)
    print(f"watch json per KV line: {peak:.0f} B of peak ({p1:,} → {p2:,}); written {s1.chars:,} → {s2.chars:,} "
          f"chars in {s1.lines} / {s2.lines} events, longest write {s2.longest:,}")
    assert peak < WATCH_PEAK_BOUND, f"watch: {peak:.0f} B of peak per KV line ({p1:,} → {p2:,} B)"
    # every value is still written (final + summary: the contract), the output grows linearly, not per evaluation
    assert s2.chars < 3.6 * s1.chars, (s1.chars, s2.chars)
    # written in pieces (at most a chunk of `json_stream.CHUNK` entries), never as one string of the whole event
    assert s2.longest < 1 << 20 and s2.longest < 1.2 * s1.longest, (s1.longest, s2.longest)
