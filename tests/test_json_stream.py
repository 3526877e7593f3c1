"""The streamed JSON and the KV figures kept in columns give the output the lists and dicts gave (issue 18).

* every sample log and every test log: ``render_json_stream`` of the lazy analyses is the text
  ``render_json`` gives of the eager ones, byte for byte (and ``analyze --format json`` writes it);
* long lists cut into many chunks (``CHUNK`` set to 3), several runs (``all_runs``, the input's lists
  chained over runs): the same;
* the pairings (`kvlogdiag.derive.pairings.Pairings`) equal those of the dict-per-pairing implementation
  derive had before, kept here as the reference, on logs of many ranks, DP groups, runs, ties, zeros,
  negatives and V0 blocks;
* a view keeps the length its list had (``watch`` analyses while lines arrive);
* the text and Markdown summaries of a log of thousands of KV lines stay the size of one of a hundred.
"""

from __future__ import annotations

import io
import json
import math
import random
import subprocess
import sys
from array import array
from pathlib import Path

import pytest

from kvlogdiag.derive import figures
from kvlogdiag.derive.pairings import ChainView, Pairings, ValueView
from kvlogdiag.extract.bounded import Blocks, FactColumn
from kvlogdiag.extract.facts import Fact
from kvlogdiag.pipeline import Analyzer
from kvlogdiag.render import json_stream
from kvlogdiag.render.analysis import render_json, render_markdown, render_text

ROOT = Path(__file__).resolve().parent.parent
LOGS = sorted({*ROOT.glob("sample_logs/**/*.log"), *ROOT.glob("tests/data/**/*.log")})
HEAD = (ROOT / "sample_logs" / "v1_tp4_workers.log").read_bytes()


@pytest.fixture(scope="module")
def analyzer() -> Analyzer:
    return Analyzer()


def _both(results) -> tuple[str, str]:
    eager = render_json([r.to_json("last", "info") for r in results])
    streamed = "".join(json_stream.render_json_stream([r.to_json("last", "info", lazy=True) for r in results]))
    return eager, streamed


def test_every_log_streams_the_same_json(analyzer):
    assert len(LOGS) > 500
    differ = []
    for path in LOGS:
        eager, streamed = _both(analyzer.analyze_source_split(str(path)))
        if eager != streamed:
            differ.append(path.name)
    assert not differ


def _kv_log(seed: int, n: int, runs: int = 1) -> bytes:
    """KV lines of several ranks and DP groups (ties, zeros, negatives, V0 blocks, memory-profile lines),
    after ``runs`` start-ups of the TP-4 log."""
    rng = random.Random(seed)
    parts = []
    for _ in range(runs):
        out = []
        for _ in range(n):
            dp, tp = rng.randint(0, 2), rng.randint(0, 3)
            rank = rng.choice([f"(Worker_DP{dp}_TP{tp} pid={100 + tp}) ", f"(EngineCore_DP{dp} pid=9) ", ""])
            v = rng.choice([30.0, 31.5, 0.0, -2.0, round(rng.uniform(-1, 60), 2)])
            out.append(rng.choice([
                f"{rank}INFO 11-29 10:00:00 [gpu_worker.py:298] Available KV cache memory: {v} GiB",
                f"{rank}INFO 11-29 10:00:00 [kv_cache_utils.py:864] GPU KV cache size: {rng.choice([0, 485088, rng.randint(1, 10**6)]):,} tokens",
                f"{rank}INFO 11-29 10:00:00 [kv_cache_utils.py:868] Maximum concurrency for 65,536 tokens per request: {rng.uniform(0, 20):.2f}x",
                f"{rank}INFO 11-29 10:00:00 executor_base.py:111] # cuda blocks: {rng.choice([0, 28047, rng.randint(1, 50000)])}, # CPU blocks: 2048",
                f"{rank}INFO 11-29 10:00:00 worker.py:232] Memory profiling results: total_gpu_memory=44.42GiB "
                f"non_torch_memory=0.73GiB kv_cache_size={v}GiB gpu_memory_utilization=0.90",
                f"{rank}INFO 11-29 10:00:00 [gpu_model_runner.py:2007] Model loading took {v} GiB and 88.4 seconds",
            ]))
        parts.append(HEAD + ("\n".join(out) + "\n").encode())
    return b"".join(parts)


@pytest.mark.parametrize("seed, runs", [(1, 1), (2, 3), (3, 2)])
def test_long_lists_in_many_chunks_and_runs_stream_the_same_json(analyzer, monkeypatch, seed, runs):
    monkeypatch.setattr(json_stream, "CHUNK", 3)
    results = analyzer.analyze_stream_split(io.BufferedReader(io.BytesIO(_kv_log(seed, 400, runs))), "x.log")
    eager, streamed = _both(results)
    assert eager == streamed
    doc = json.loads(streamed)["analyses"][0]
    assert len(doc["kv_cache"]["bytes_per_token_by_rank"]) > 3 and (runs == 1 or len(doc["all_runs"]) == runs)
    for which in ("all", "first", "2" if runs > 1 else "1"):  # --run all / first / N
        eager = render_json([r.to_json(which, "info") for r in results])
        assert eager == "".join(json_stream.render_json_stream([r.to_json(which, "info", lazy=True) for r in results]))


def test_the_command_writes_the_same_json_to_stdout_and_to_a_file(tmp_path):
    log = tmp_path / "kv.log"
    log.write_bytes(_kv_log(4, 3_000, 2))
    run = [sys.executable, "-m", "kvlogdiag", "analyze", "--format", "json", "--fail-on", "never"]
    out = subprocess.run([*run, str(log)], capture_output=True, check=True).stdout.decode()
    subprocess.run([*run, str(log), "-o", str(tmp_path / "out.json")], check=True)
    results = Analyzer().analyze_source_split(str(log))
    want = render_json([r.to_json("last", "info") for r in results]) + "\n"
    assert out == want == (tmp_path / "out.json").read_text()


# -- the pairings against the implementation they replaced (a dict per pairing) -------------------------

def _reference_pairs(facts, block_size):
    """derive.pair_bytes_per_token as it was before the pairings were kept in columns (session 5)."""
    pairs: list[dict] = []
    avail, budget_facts, token_facts = facts.available, facts.kv_budget, facts.tokens
    groups: dict = {}
    for i, f in enumerate(avail):
        groups.setdefault((f.run, f.dp), {}).setdefault("avail", array("q")).append(i)
    for i, f in enumerate(budget_facts):
        groups.setdefault((f.run, f.dp), {}).setdefault("budget", array("q")).append(i)
    for i, f in enumerate(token_facts):
        groups.setdefault((f.run, f.dp), {}).setdefault("tokens", array("q")).append(i)
    if facts.blocks and block_size:
        for i, f in enumerate(facts.blocks):
            groups.setdefault((f.run, f.dp), {}).setdefault("tokens", array("q")).append(~i)

    def token_fact(i):
        if i >= 0:
            return token_facts[i]
        f = facts.blocks[~i]
        return Fact(f.value * block_size, f.line, f.rank, f.raw, "blocks", f.run, f.dp)

    for (run, dp), g in sorted(groups.items()):
        if "tokens" not in g:
            continue
        kind = "available"
        if "avail" in g:
            col, idx, second = avail, g["avail"], False
        elif "budget" in g:
            col, idx, second = budget_facts, g["budget"], True
            kind = budget_facts[idx[0]].value[0]
        else:
            col, idx, second = avail, array("q", (i for (r, _d), gg in groups.items() if r == run for i in gg.get("avail", ()))), False
        if not len(idx):
            continue
        mem = [(col[i], col[i].value[1] if second else col[i].value, col[i].rank) for i in idx]
        tok_idx = g["tokens"]
        matched = None
        if len(mem) == len(tok_idx) and len(tok_idx) > 1:
            toks = [token_fact(i) for i in tok_idx]
            keys = [figures.worker_order(rank) for _, _, rank in mem]
            if all(k is not None for k in keys) and len(set(keys)) == len(keys):
                ms = [m for _, m in sorted(zip(keys, mem), key=lambda kv: kv[0])]
                matched = list(zip(ms, toks))
            else:
                matched = list(zip(sorted(mem, key=lambda x: x[1]), sorted(toks, key=lambda f: f.value)))
        if matched is None:
            smallest = min(mem, key=lambda x: x[1])
            matched = [(smallest, token_fact(i)) for i in tok_idx]
        for (mf, gib, rank), tf in matched:
            tokens, bpt = tf.value, None
            if tokens and tokens > 0 and gib > 0 and math.isfinite(gib):
                bpt = gib * figures.GIB / tokens
                if not (figures.MIN_PLAUSIBLE_BPT <= bpt <= figures.MAX_PLAUSIBLE_BPT):
                    bpt = None
            pairs.append({"rank": rank, "available_gib": gib, "tokens": tokens, "bytes_per_token": bpt, "dp_group": dp,
                          "run": run, "memory_source": kind, "memory_line": mf.line, "tokens_line": tf.line})
    return pairs


def _facts_of(analyzer, data: bytes):
    session = analyzer.session("x.log")
    analyzer.read(io.BufferedReader(io.BytesIO(data)), "x.log", session)
    session.extractor.finish(session.lines)
    return session.extractor.runs


@pytest.mark.parametrize("seed", range(6))
def test_pairings_equal_the_dict_per_pairing_reference(analyzer, seed):
    data = _kv_log(seed, 300, 1 + seed % 3)
    if seed % 2:  # one worker line per rank, in rank order (0.8-0.11): the worker-order matching
        data += b"".join(f"(VllmWorker TP{t} pid={t}) INFO 11-29 [gpu_worker.py:1] Available KV cache memory: {30 + t}.5 GiB\n"
                         f"(VllmWorker TP{t} pid={t}) INFO 11-29 [kv_cache_utils.py:1] GPU KV cache size: {400000 + t:,} tokens\n"
                         .encode() for t in (3, 1, 0, 2))
    checked = 0
    for facts in _facts_of(analyzer, data):
        for bs in (None, 16):
            got, _notes = figures.pair_bytes_per_token(facts, bs)
            want = _reference_pairs(facts, bs)
            assert isinstance(got, Pairings) and list(got) == want and len(got) == len(want)
            assert [got[i] for i in range(-3, 0)] == want[-3:] if want else True
            checked += len(want)
    assert checked > 100


def test_sample_logs_pairings_equal_the_reference(analyzer):
    for path in sorted(ROOT.glob("sample_logs/*.log")):
        for facts in _facts_of(analyzer, path.read_bytes()):
            for bs in (None, 16):
                assert list(figures.pair_bytes_per_token(facts, bs)[0]) == _reference_pairs(facts, bs), path.name


# -- views ----------------------------------------------------------------------------------------------

def test_a_view_keeps_the_length_its_list_had():
    col = FactColumn()
    for i in range(10):
        col.append(Fact(float(i), i + 1, "r", None, "kv_available_gib", 0, 0))  # type: ignore[arg-type]
    view = ValueView(col)
    col.append(Fact(99.0, 11, "r", None, "kv_available_gib", 0, 0))  # type: ignore[arg-type]
    assert len(view) == 10 and list(view) == [float(i) for i in range(10)] and view == [float(i) for i in range(10)]
    assert view[-1] == 9.0 and view[2:4] == [2.0, 3.0] and ChainView([view, [5, 6]]) == [*map(float, range(10)), 5, 6]
    with pytest.raises(IndexError):
        view[10]


def test_blocks_keep_every_value_across_blocks():
    b = Blocks("q")
    values = list(range(-5, 3 * 8192 + 7))
    for v in values:
        b.append(v)
    assert len(b) == len(values) and list(b) == values and b[8192] == values[8192] and b[-1] == values[-1]
    with pytest.raises(OverflowError):
        b.append(2**70)
    assert len(b) == len(values)  # a refused value adds nothing


# -- the text and Markdown summaries stay bounded ---------------------------------------------------------

def _pairs_log(n: int) -> bytes:
    rng = random.Random(n)
    out = []
    for _ in range(n):
        out.append(f"(EngineCore_DP0 pid=1) INFO 11-01 10:00:00 [gpu_worker.py:1] Available KV cache memory: {rng.uniform(30, 40):.2f} GiB")
        out.append(f"(EngineCore_DP0 pid=1) INFO 11-01 10:00:00 [kv_cache_utils.py:1] GPU KV cache size: {rng.randint(400000, 500000):,} tokens")
    return HEAD + ("\n".join(out) + "\n").encode()


def test_the_text_summary_of_many_kv_lines_is_bounded(analyzer):
    def texts(n):
        runs = analyzer.analyze_stream(io.BufferedReader(io.BytesIO(_pairs_log(n))), "x.log").select("all")
        return render_text(runs), render_markdown(runs)

    (t1, m1), (t2, m2) = texts(300), texts(3_000)
    assert abs(len(t2) - len(t1)) < 200 and abs(len(m2) - len(m1)) < 200  # before: 20 B more per KV line
    assert "every one in --format json" in t2 and "3,004 pairings: the first and last 32 shown" in t2
    assert "pairings: the first and last 32 shown" in m2
    small = render_text(analyzer.analyze_stream(io.BufferedReader(io.BytesIO(_pairs_log(20))), "x.log").select("all"))
    assert "--format json" not in small  # up to 64 figures: every one, as before


# -- one JSON line (watch --format json events, session 7) ----------------------------------------------------

@pytest.mark.parametrize("seed, runs", [(4, 1), (5, 3)])
def test_a_json_line_streams_the_same_text_as_json_dumps(analyzer, monkeypatch, seed, runs):
    """`render_json_line` of lazy analyses (a watch ``final`` / ``summary`` event) = ``json.dumps`` of the eager ones."""
    from kvlogdiag.render.analysis import clean_json

    monkeypatch.setattr(json_stream, "CHUNK", 3)
    results = analyzer.analyze_stream_split(io.BufferedReader(io.BytesIO(_kv_log(seed, 300, runs))), "x.log")
    for r in results:
        eager = {"event": "summary", "analysis": r.current.to_json("info"), "result": r.to_json("last", "info"), "_x": 1}
        lazy = {"event": "summary", "analysis": r.current.to_json("info", lazy=True),
                "result": r.to_json("last", "info", lazy=True), "_x": 1}
        pieces = list(json_stream.render_json_line(lazy))
        assert len(pieces) > 10  # in pieces, not one string
        assert "".join(pieces) == json.dumps(clean_json(eager), ensure_ascii=False, allow_nan=False)
    small = {"event": "note", "message": "ünïcode \u009b", "n": [1, 2.5, None]}
    assert list(json_stream.render_json_line(small)) == [json.dumps(small, ensure_ascii=False, allow_nan=False)]


def test_sample_logs_watch_json_events_are_the_analyses(analyzer):
    """The ``final`` events of watch (written in pieces) parse to what ``analyze --format json`` states, per log."""
    from kvlogdiag.modes.watch import Emitter, Watcher
    from kvlogdiag.render.analysis import clean_json

    for path in sorted((ROOT / "sample_logs").glob("*.log")):
        sink = io.StringIO()
        w = Watcher(Analyzer(), Emitter("json", sink), echo=False)
        w.take(path.read_bytes())
        w.end_of_part()
        w.finish("eof")
        events = [json.loads(x) for x in sink.getvalue().splitlines()]
        want = analyzer.analyze_source_split(str(path))[0]
        final = [e["analysis"] for e in events if e["event"] == "final"]
        assert len(final) == len(want.runs), path.name
        for got, a in zip(final, want.runs):
            assert got["kv_cache"] == json.loads(json.dumps(clean_json(a.to_json()["kv_cache"]))), path.name
