"""``kvlogdiag watch`` through its real interface: a subprocess fed by a (slow) writer.

Each test starts ``python -m kvlogdiag watch`` and talks to it over pipes, signals and files, the
way ``vllm serve ... 2>&1 | kvlogdiag watch`` and ``kvlogdiag watch -f FILE`` are used.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import SAMPLE_LOGS_DIR

TP4 = SAMPLE_LOGS_DIR / "v1_tp4_workers.log"
STATS = SAMPLE_LOGS_DIR / "long_running_stats.log"
INSUFFICIENT = SAMPLE_LOGS_DIR / "insufficient_kv_215000.log"

PREEMPT_LINE = ("(APIServer pid=5120) INFO 11-29 08:08:51 [loggers.py:273] Engine 000: Avg prompt throughput: 1.3 tokens/s, "
                "Avg generation throughput: 654.4 tokens/s, Running: 32 reqs, Waiting: 5 reqs, Preemptions: {n}, "
                "GPU KV cache usage: 50.0%, Prefix cache hit rate: 0.0%\n")


def split_lines(data: bytes) -> list[bytes]:
    """Lines with their newline (a bare \\r inside a line stays inside it)."""
    parts = data.split(b"\n")
    out = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


class Watch:
    """A running ``kvlogdiag watch`` with threads collecting its stdout bytes and stderr lines."""

    def __init__(self, args: list[str], cwd: Path, stdin=subprocess.PIPE):
        self.proc = subprocess.Popen([sys.executable, "-m", "kvlogdiag", "watch", *args], stdin=stdin,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(cwd))
        self.out = bytearray()
        self.err_lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._pump_out, daemon=True),
                         threading.Thread(target=self._pump_err, daemon=True)]
        for t in self._threads:
            t.start()

    def _pump_out(self) -> None:
        fd = self.proc.stdout.fileno()
        while True:
            data = os.read(fd, 65536)
            if not data:
                return
            with self._lock:
                self.out += data

    def _pump_err(self) -> None:
        for raw in self.proc.stderr:
            with self._lock:
                self.err_lines.append((time.monotonic(), raw.decode("utf-8", "replace").rstrip("\n")))

    def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def stdout(self) -> bytes:
        with self._lock:
            return bytes(self.out)

    def stderr(self) -> list[str]:
        with self._lock:
            return [t for _, t in self.err_lines]

    def events(self) -> list[dict]:
        return [json.loads(t) for t in self.stderr() if t.startswith("{")]

    def wait_for(self, pred, timeout: float = 10.0, what: str = "condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = pred()
            if got:
                return got
            if self.proc.poll() is not None:
                time.sleep(0.05)
                got = pred()
                if got:
                    return got
                raise AssertionError(f"watch exited ({self.proc.returncode}) before {what}; stderr: {self.stderr()}")
            time.sleep(0.01)
        raise AssertionError(f"timed out waiting for {what}; stderr: {self.stderr()}")

    def finish(self, timeout: float = 20.0) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        rc = self.proc.wait(timeout=timeout)
        for t in self._threads:
            t.join(timeout=5)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def watches():
    started: list[Watch] = []
    yield started
    for w in started:
        w.kill()


def run_watch(args: list[str], data: bytes, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvlogdiag", "watch", *args], input=data, capture_output=True,
                          cwd=str(cwd), timeout=timeout)


# --- echo and live findings ------------------------------------------------------------------


def test_figures_reach_stderr_before_the_writer_finishes_and_stdout_is_byte_exact(tmp_path, watches):
    lines = split_lines(TP4.read_bytes())
    last_kv = max(i for i, ln in enumerate(lines) if b"KV cache size" in ln or b"Maximum concurrency" in ln)
    head = lines[: last_kv + 1]
    extra = [b"(APIServer pid=1) INFO odd bytes \xff\xfe\xc3( here\r\n", b"\x1b[1;36mcolour\x1b[0m line\n"]
    tail = lines[last_kv + 1:] + [b"the last line has no newline \xe2\x82"]
    w = Watch([], tmp_path)
    watches.append(w)
    for ln in head + extra:
        w.write(ln)
        time.sleep(0.002)
    # the writer is still open and has more to send: the figures must already be on stderr
    fig = w.wait_for(lambda: [t for t in w.stderr() if "figures" in t and "smallest of 4" in t], 10, "the figures of 4 ranks")
    assert "bytes/token 81,9" in fig[-1] and "max concurrency 7.40x" in fig[-1], fig  # ~81,919 B per rank
    assert any("KVD004" in t for t in w.stderr())  # the finding for gpu_memory_utilization 0.92 came live too
    assert not any("summary (end of input)" in t for t in w.stderr())
    for ln in tail:
        w.write(ln)
    rc = w.finish()
    assert rc == 0, w.stderr()
    assert w.stdout() == b"".join(head + extra + tail)  # every byte, in order, invalid UTF-8 and all
    assert any("summary (end of input)" in t for t in w.stderr())


def test_figures_latency_is_short(tmp_path, watches):
    """The figures follow the KV-size line within a fraction of a second (debounce ~30 ms)."""
    lines = split_lines(TP4.read_bytes())
    kv = [i for i, ln in enumerate(lines) if b"KV cache size" in ln]
    w = Watch(["--format", "json", "--no-echo"], tmp_path)
    watches.append(w)
    w.write(b"".join(lines[: kv[-1]]))  # everything before the last rank's KV size line
    time.sleep(0.5)
    sent = time.monotonic()
    w.write(b"".join(lines[kv[-1]: kv[-1] + 1]))

    def figures_with_all_ranks():
        return [ev for ev in w.events() if ev["event"] == "figures" and len(ev["tokens"]) == 4]

    w.wait_for(figures_with_all_ranks, 5, "figures with 4 ranks")
    got = next(ts for ts, t in w.err_lines if t.startswith("{") and json.loads(t).get("event") == "figures"
               and len(json.loads(t)["tokens"]) == 4)
    assert got - sent < 1.0  # generous for loaded CI machines; typically ~40 ms
    w.finish()


def test_partial_line_is_echoed_when_the_input_goes_quiet(tmp_path, watches):
    w = Watch([], tmp_path)
    watches.append(w)
    w.write(b"line one\nprogress 50%")
    w.wait_for(lambda: w.stdout() == b"line one\nprogress 50%", 5, "the partial line on stdout")
    w.write(b" 100%\n")
    assert w.finish() == 0
    assert w.stdout() == b"line one\nprogress 50% 100%\n"


def test_no_echo_prints_findings_only(tmp_path):
    r = run_watch(["--no-echo"], TP4.read_bytes(), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b""
    err = r.stderr.decode()
    assert "KVD004" in err and "figures" in err and "summary (end of input)" in err


def test_json_format_every_stderr_line_is_an_event(tmp_path):
    r = run_watch(["--format", "json"], STATS.read_bytes(), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == STATS.read_bytes()
    events = [json.loads(line) for line in r.stderr.decode().splitlines()]
    kinds = [e["event"] for e in events]
    assert {"figures", "finding", "summary"} <= set(kinds)
    assert set(kinds) <= {"figures", "finding", "summary", "note"}
    final = events[-1]
    assert final["event"] == "summary" and final["reason"] == "eof" and final["exit_code"] == 0
    assert final["lines_read"] == STATS.read_bytes().count(b"\n")
    startup = [e for e in events if e["event"] == "summary" and e["reason"] == "startup_complete"]
    assert len(startup) == 1  # three start-up markers, one server start → one summary
    fig = next(e for e in events if e["event"] == "figures")
    assert fig["bytes_per_token"] == pytest.approx(131076, rel=1e-3)
    # runtime findings are marked as such and carry their evidence line
    rt = [e for e in events if e["event"] == "finding" and e["kind"] == "runtime"]
    assert rt and all(isinstance(e["line"], int) for e in rt)


def test_exit_code_follows_fail_on(tmp_path):
    data = INSUFFICIENT.read_bytes()
    assert run_watch(["--no-echo"], data, tmp_path).returncode == 1  # an error finding (insufficient KV)
    assert run_watch(["--no-echo", "--fail-on", "never"], data, tmp_path).returncode == 0
    assert run_watch(["--no-echo"], TP4.read_bytes(), tmp_path).returncode == 0  # a warning only
    assert run_watch(["--no-echo", "--fail-on", "warning"], TP4.read_bytes(), tmp_path).returncode == 1


def test_bad_rules_folder_is_exit_2(tmp_path):
    r = run_watch(["--rules", str(tmp_path / "nope")], b"", tmp_path)
    assert r.returncode == 2
    assert b"Traceback" not in r.stderr


# --- stdout closed, signals --------------------------------------------------------------------


def test_closed_stdout_exits_quietly(tmp_path):
    gen = tmp_path / "gen.py"
    gen.write_text(f"import sys\ndata = open({str(STATS)!r}, 'rb').read()\n"
                   "try:\n    for _ in range(400):\n        sys.stdout.buffer.write(data)\n"
                   "except BrokenPipeError:\n    pass\n")
    script = (f'"{sys.executable}" gen.py | "{sys.executable}" -m kvlogdiag watch 2>err.txt | head -1 > first.txt; '
              'echo "${PIPESTATUS[1]}" > rc.txt')
    subprocess.run(["bash", "-c", script], cwd=str(tmp_path), timeout=120, check=True)
    rc = int((tmp_path / "rc.txt").read_text())
    err = (tmp_path / "err.txt").read_text()
    assert (tmp_path / "first.txt").read_bytes() == STATS.read_bytes().split(b"\n")[0] + b"\n"
    assert rc == 141, err
    assert "Traceback" not in err and "Exception" not in err and "BrokenPipe" not in err, err


@pytest.mark.parametrize("signum,code,word", [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")])
def test_signal_prints_summary_and_exits(tmp_path, watches, signum, code, word):
    lines = split_lines(TP4.read_bytes())
    w = Watch([], tmp_path)
    watches.append(w)
    w.write(b"".join(lines[:160]))  # past start-up; the writer stays open (a server still running)
    w.wait_for(lambda: any("summary (start-up complete" in t for t in w.stderr()), 10, "the start-up summary")
    sent = time.monotonic()
    w.proc.send_signal(signum)
    rc = w.proc.wait(timeout=15)
    took = time.monotonic() - sent
    w.finish()
    assert rc == code
    err = w.stderr()
    assert any(f"summary (interrupted ({word}))" in t or f"summary (terminated ({word}))" in t for t in err), err
    assert not any("Traceback" in t for t in err)
    assert w.stdout() == b"".join(lines[:160])
    assert took < 5


# --- rate limiting -----------------------------------------------------------------------------


def _is_preemption(ev: dict) -> bool:
    return ev["event"] == "finding" and ev["name"] in ("preemptions", "preemption")


def test_runtime_findings_are_rate_limited_with_a_count(tmp_path, watches):
    w = Watch(["--format", "json", "--no-echo", "--repeat-after", "1.5"], tmp_path)
    watches.append(w)
    w.write(PREEMPT_LINE.format(n=1).encode())
    first = w.wait_for(lambda: [e for e in w.events() if _is_preemption(e)], 5, "the first preemption finding")
    assert len(first) == 1
    t_first = time.monotonic()
    burst = "".join(PREEMPT_LINE.format(n=2) for _ in range(40)).encode()
    for i in range(0, len(burst), 4096):
        w.write(burst[i:i + 4096])
    time.sleep(0.4)
    if time.monotonic() - t_first < 1.4:  # still inside the interval: nothing new may be printed
        assert len([e for e in w.events() if _is_preemption(e)]) == 1
    # the timer reports the held-back occurrences once the interval is over, while the input is idle
    second = w.wait_for(lambda: [e for e in w.events() if _is_preemption(e)][1:], 5, "the repeat report")
    assert len(second) == 1
    rep = second[0]
    assert rep["kind"] == "runtime" and rep["count"] == 40
    assert rep["since_s"] >= 1.4
    assert rep["message"].startswith("80 more preemptions in 40 lines since the last report"), rep["message"]
    assert rep["message"].endswith("; 81 in total"), rep["message"]
    assert w.finish() == 0
    final = [e for e in w.events() if _is_preemption(e)]
    assert len(final) == 2  # nothing was pending at EOF
    assert w.events()[-1]["event"] == "summary"


def test_runtime_findings_pending_at_eof_are_reported_before_the_summary(tmp_path):
    data = (PREEMPT_LINE.format(n=1) * 25).encode()
    r = run_watch(["--format", "json", "--no-echo", "--repeat-after", "3600"], data, tmp_path)
    events = [json.loads(x) for x in r.stderr.decode().splitlines()]
    pre = [e for e in events if _is_preemption(e)]
    assert 1 <= len(pre) <= 2
    assert events[-1]["event"] == "summary" and events[-1]["runtime"]["preemptions"] == 25


def test_ignoring_the_preemption_rule_silences_the_live_reports(tmp_path):
    data = (PREEMPT_LINE.format(n=1) * 5).encode()
    r = run_watch(["--format", "json", "--no-echo", "--ignore", "preemptions"], data, tmp_path)
    events = [json.loads(x) for x in r.stderr.decode().splitlines()]
    assert not [e for e in events if _is_preemption(e)]


# --- --follow ----------------------------------------------------------------------------------


def test_follow_handles_truncation_and_rotation(tmp_path, watches):
    lines = split_lines(TP4.read_bytes())
    log = tmp_path / "server.log"
    a, b = b"".join(lines[:60]), b"".join(lines[60:130])
    c = b"".join(lines[:5])  # shorter than a + b: a truncation is visible
    d = b"".join(lines[130:]) + b"\n"
    log.write_bytes(a)
    w = Watch(["-f", str(log), "--format", "json"], tmp_path, stdin=subprocess.DEVNULL)
    watches.append(w)
    w.wait_for(lambda: w.stdout() == a, 10, "the existing content")
    with open(log, "ab") as fh:
        fh.write(b)
    w.wait_for(lambda: w.stdout() == a + b, 10, "the appended content")
    w.wait_for(lambda: [e for e in w.events() if e["event"] == "figures"], 10, "figures from the followed file")
    with open(log, "wb") as fh:  # copytruncate-style
        fh.write(c)
    w.wait_for(lambda: w.stdout() == a + b + c, 10, "the content after truncation")
    w.wait_for(lambda: any(e["event"] == "note" and "truncated" in e["message"] for e in w.events()), 10,
               "the truncation note")  # stderr may lag stdout
    os.rename(log, tmp_path / "server.log.1")  # logrotate-style: rename, then a new file
    time.sleep(0.3)
    log.write_bytes(d)
    w.wait_for(lambda: w.stdout() == a + b + c + d, 10, "the rotated file's content")
    w.wait_for(lambda: any(e["event"] == "note" and "rotated" in e["message"] for e in w.events()), 10,
               "the rotation note")
    w.proc.send_signal(signal.SIGINT)
    assert w.proc.wait(timeout=10) == 130
    w.finish()
    assert w.events()[-1]["event"] == "summary"


def test_follow_from_end_skips_existing_content(tmp_path, watches):
    log = tmp_path / "server.log"
    old = TP4.read_bytes()
    log.write_bytes(old)
    w = Watch(["-f", str(log), "--from-end", "--format", "json"], tmp_path, stdin=subprocess.DEVNULL)
    watches.append(w)
    w.wait_for(lambda: [e for e in w.events() if e["event"] == "note" and "following from the end" in e["message"]],
               10, "the follow note")
    new = PREEMPT_LINE.format(n=3).encode()
    with open(log, "ab") as fh:
        fh.write(new)
    w.wait_for(lambda: w.stdout() == new, 10, "the appended line")
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(timeout=10) == 143
    w.finish()
    summary = w.events()[-1]
    assert summary["event"] == "summary" and summary["lines_read"] == 1


def test_follow_missing_directory_target_is_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kvlogdiag", "watch", "-f", str(tmp_path)], capture_output=True,
                       cwd=str(tmp_path), timeout=30)
    assert r.returncode == 2
    assert b"Traceback" not in r.stderr


# --- plumbing -----------------------------------------------------------------------------------


def test_modules_import_in_any_order():
    code = ("import kvlogdiag.modes.watch, kvlogdiag.modes.scan, sys\n"
            "from kvlogdiag.cli.main import cli\n"
            "assert {'watch', 'scan'} <= set(cli.commands)\n"
            "assert {'--select', '--fail-on'} <= {o for p in cli.commands['watch'].params for o in p.opts}\n"
            "assert 'pandas' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_memory_stays_flat_over_many_stats_lines(monkeypatch):
    """The extractor keeps aggregates: a long stream leaves no per-line state behind."""
    import io
    import tracemalloc

    from kvlogdiag.input import reader
    from kvlogdiag.pipeline import Analyzer
    from kvlogdiag.modes.watch import Emitter, Watcher

    class Sink(io.StringIO):  # output is not state: drop it
        def write(self, s):
            return len(s)

    # the numpy finder (a one-time import and table) is built during the warm-up, not measured
    monkeypatch.setattr(reader, "NUMPY_AFTER_BYTES", 0)
    w = Watcher(Analyzer(), Emitter("json", Sink()), echo=False, repeat_after=3600)
    block = TP4.read_bytes() + (PREEMPT_LINE.format(n=1) * 2000).encode()

    def round_trip():
        w.take(block)
        w.evaluate(final=False)  # what the debounced tick does on a live stream
        w.tick()

    for _ in range(5):  # warm-up: caches, lazily loaded rule data
        round_trip()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(30):
        round_trip()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert w.number == 35 * block.count(b"\n")
    assert after - before < 1_500_000, after - before  # ~70,000 lines and 35 server starts later
