"""``kvlogdiag watch``: through its real interface (a subprocess fed by a slow writer, signals, files) and
through its engine (`kvlogdiag.modes.watch.Watcher` fed line by line with a fake clock, where a test must
not depend on how fast the machine is).

Timeouts in the subprocess tests only guard against hangs; no test asserts how long anything took.
"""

from __future__ import annotations

import io
import json
import os
import re
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
SINGLE = SAMPLE_LOGS_DIR / "v1_single_gpu.log"
DP2_TP4 = SAMPLE_LOGS_DIR / "v1_dp2_tp4.log"

PREEMPT_LINE = ("(APIServer pid=5120) INFO 11-29 08:08:51 [loggers.py:273] Engine 000: Avg prompt throughput: 1.3 tokens/s, "
                "Avg generation throughput: 654.4 tokens/s, Running: 32 reqs, Waiting: 5 reqs, Preemptions: {n}, "
                "GPU KV cache usage: 50.0%, Prefix cache hit rate: 0.0%\n")
SINGLE_RUNNING = ("(APIServer pid=2231) INFO 09-26 07:59:51 [loggers.py:123] Engine 000: Avg prompt throughput: 3276.7 tokens/s, "
                  "Avg generation throughput: 2.1 tokens/s, Running: 1 reqs, Waiting: {w} reqs, GPU KV cache usage: 12.0%, "
                  "Prefix cache hit rate: 0.0%\n")


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

    def wait_for(self, pred, timeout: float = 120.0, what: str = "condition"):
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
    fig = w.wait_for(lambda: [t for t in w.stderr() if "figures" in t and "smallest of 4" in t], 120, "the figures of 4 ranks")
    assert "bytes/token 81,9" in fig[-1] and "max concurrency 7.40x" in fig[-1], fig  # ~81,919 B per rank
    assert any(re.match(r"kvlogdiag: KVD0\d\d \[", t) for t in w.stderr())  # findings came live too
    assert not any("summary (end of input)" in t for t in w.stderr())
    for ln in tail:
        w.write(ln)
    rc = w.finish()
    assert rc == 0, w.stderr()
    assert w.stdout() == b"".join(head + extra + tail)  # every byte, in order, invalid UTF-8 and all
    assert any("summary (end of input)" in t for t in w.stderr())


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
    assert "KVD005" in err and "figures" in err and "summary (end of input)" in err


def test_json_format_every_stderr_line_is_an_event(tmp_path):
    r = run_watch(["--format", "json"], STATS.read_bytes(), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == STATS.read_bytes()
    events = [json.loads(line) for line in r.stderr.decode().splitlines()]
    kinds = [e["event"] for e in events]
    assert {"figures", "finding", "summary", "final"} <= set(kinds)
    assert set(kinds) <= {"figures", "finding", "summary", "final", "note", "run"}
    final = events[-1]
    assert final["event"] == "summary" and final["reason"] == "eof" and final["exit_code"] == 0
    assert final["lines_read"] == STATS.read_bytes().count(b"\n")
    startup = [e for e in events if e["event"] == "summary" and e["reason"] == "startup_complete"]
    assert len(startup) == 1  # three start-up markers, one server start → one summary
    fig = next(e for e in events if e["event"] == "figures")
    assert fig["bytes_per_token"] == pytest.approx(131076, rel=1e-3)
    # every finding is a rule's, with its code and evidence line
    found = [e for e in events if e["event"] == "finding"]
    assert found and all(e["kind"] == "rule" and e["rule"].startswith("KVD") for e in found)


def test_final_events_carry_what_analyze_says(tmp_path):
    """The JSON stream ends with the analysis of `analyze --format json` for the same input (per run too)."""
    two = SINGLE.read_bytes() + TP4.read_bytes()
    for data in (TP4.read_bytes(), STATS.read_bytes(), two):
        want = json.loads(subprocess.run([sys.executable, "-m", "kvlogdiag", "analyze", "--format", "json", "-"],
                                         input=data, capture_output=True, cwd=str(tmp_path), timeout=60).stdout)
        want = want["analyses"][0]
        r = run_watch(["--format", "json", "--no-echo"], data, tmp_path)
        events = [json.loads(x) for x in r.stderr.decode().splitlines()]
        last = events[-1]
        assert last["result"] == want
        finals = [e for e in events if e["event"] == "final"]
        per_run = list(reversed(want["all_runs"])) if "all_runs" in want else [want]
        assert [e["analysis"] for e in finals] == per_run
        assert last["analysis"] == per_run[-1]
        kv = last["analysis"]["kv_cache"]
        assert kv["bytes_per_token"] == want["kv_cache"]["bytes_per_token"] is not None


def test_exit_code_follows_fail_on(tmp_path):
    data = INSUFFICIENT.read_bytes()
    assert run_watch(["--no-echo"], data, tmp_path).returncode == 1  # an error finding (insufficient KV)
    assert run_watch(["--no-echo", "--fail-on", "never"], data, tmp_path).returncode == 0
    assert run_watch(["--no-echo"], TP4.read_bytes(), tmp_path).returncode == 0  # an info finding only (KVD005)
    assert run_watch(["--no-echo", "--fail-on", "info"], TP4.read_bytes(), tmp_path).returncode == 1


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
    w.wait_for(lambda: any("summary (start-up complete" in t for t in w.stderr()), 120, "the start-up summary")
    w.proc.send_signal(signum)
    rc = w.proc.wait(timeout=30)  # a hang guard, not a speed test
    w.finish()
    assert rc == code
    err = w.stderr()
    assert any(f"summary (interrupted ({word}))" in t or f"summary (terminated ({word}))" in t for t in err), err
    assert not any("Traceback" in t for t in err)
    assert w.stdout() == b"".join(lines[:160])


# --- the engine, line by line (deterministic: a fake clock, no subprocess) ---------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def engine(repeat_after: float = 300.0, clock: Clock | None = None, **options):
    """A Watcher writing JSON events to a list; ``options`` are `Options` fields (select=[...], ...)."""
    from kvlogdiag.modes.watch import Emitter, Watcher
    from kvlogdiag.pipeline import Analyzer
    from kvlogdiag.rules.context import Options

    sink = io.StringIO()
    w = Watcher(Analyzer(Options(**options)), Emitter("json", sink), echo=False, repeat_after=repeat_after,
                clock=clock or Clock())
    return w, lambda: [json.loads(x) for x in sink.getvalue().splitlines()]


def replay_slowly(w, data: bytes) -> None:
    """Each line arrives on its own and the input goes quiet after it (a server writing slowly)."""
    for ln in split_lines(data):
        w.take(ln)
        w.idle()
    w.end_of_part()


def pairings(ranks: list[dict]) -> set:
    return {(r["rank"], r["memory_line"], r["tokens_line"]) for r in ranks}


@pytest.mark.parametrize("path", [TP4, DP2_TP4], ids=lambda p: p.name)
def test_interim_figures_never_pair_one_ranks_memory_with_another_ranks_tokens(path):
    """v1_tp4_workers replayed line by line: TP2's memory line comes first; the first token line is
    TP0's. The interim pairing (81,827 B/token) must never be printed — only the complete one."""
    w, events = engine()
    replay_slowly(w, path.read_bytes())
    assert w.finish("eof") == 0
    final = next(e for e in events() if e["event"] == "final")["analysis"]["kv_cache"]
    figures = [e for e in events() if e["event"] == "figures"]
    assert figures
    for ev in figures:
        assert pairings(ev["ranks"]) <= pairings(final["bytes_per_token_by_rank"]), ev
        assert ev["bytes_per_token"] == final["bytes_per_token"], ev
    if path == TP4:
        assert round(figures[0]["bytes_per_token"]) == 81919 and figures[0]["line"] == 128


def test_interim_figures_on_a_slow_pipe_never_mix_ranks(tmp_path, watches):
    """The same through a real pipe: each KV line is echoed (so watch has read it and found the pipe
    empty) before the next one is written."""
    lines = split_lines(TP4.read_bytes())
    kv = [i for i, ln in enumerate(lines) if b"Available KV cache memory" in ln or b"KV cache size" in ln]
    w = Watch(["--format", "json"], tmp_path)
    watches.append(w)
    w.write(b"".join(lines[: kv[0]]))
    sent = b"".join(lines[: kv[0]])
    for ln in lines[kv[0]: kv[-1] + 1]:
        w.write(ln)
        sent += ln
        w.wait_for(lambda sent=sent: w.stdout() == sent, 120, "the echo of the line")
        time.sleep(0.05)  # room for an evaluation between two lines (the old engine printed 81,827 here)
    w.wait_for(lambda: [e for e in w.events() if e["event"] == "figures"], 120, "the figures")
    w.write(b"".join(lines[kv[-1] + 1:]))
    assert w.finish() == 0
    figures = [e for e in w.events() if e["event"] == "figures"]
    assert [round(e["bytes_per_token"]) for e in figures] == [81919], figures
    assert len(figures[0]["ranks"]) == 4


def test_a_rule_that_fires_again_is_repeated_at_most_every_repeat_after():
    clock = Clock()
    w, events = engine(repeat_after=60, clock=clock, select=["KVD012"])
    preempted = lambda: [e for e in events() if e["event"] == "finding"]  # noqa: E731
    w.take(PREEMPT_LINE.format(n=1).encode())
    w.idle()
    assert [e["rule"] for e in preempted()] == ["KVD012"]
    assert "preempted 1 requests" in preempted()[0]["message"] and preempted()[0]["repeat"] == 0
    for _ in range(40):  # the finding changes (the count grows) inside the interval: held back
        clock.t += 1
        w.take(PREEMPT_LINE.format(n=2).encode())
        w.idle()
        w.tick()
    assert len(preempted()) == 1
    clock.t += 20  # the interval is over: the latest version, once
    w.tick()
    rep = preempted()[1:]
    assert len(rep) == 1 and rep[0]["repeat"] == 1 and rep[0]["since_s"] == 60
    assert "preempted 81 requests" in rep[0]["message"]
    w.tick()
    assert len(preempted()) == 2
    assert w.finish("eof") == 0
    assert len(preempted()) == 2  # nothing was pending at the end
    assert events()[-1]["event"] == "summary" and events()[-1]["runtime"]["preemptions"] == 81


def test_held_back_repeats_are_printed_before_the_final_summary():
    w, events = engine(repeat_after=3600)
    for _ in range(25):
        w.take(PREEMPT_LINE.format(n=1).encode())
        w.idle()
    w.end_of_part()
    w.finish("eof")
    pre = [e for e in events() if e["event"] == "finding" and e["rule"] == "KVD012"]
    assert [p["repeat"] for p in pre] == [0, 1]
    assert "preempted 25 requests" in pre[-1]["message"]
    kinds = [e["event"] for e in events()]
    assert kinds.index("summary") > max(i for i, e in enumerate(events()) if e["event"] == "finding")


def test_a_severity_that_rises_is_printed_at_once():
    """insufficient_kv_215000 line by line: KVD002 warns at the arguments (line 3) and becomes an error
    when vLLM refuses to start (line 87) — printed then, whatever --repeat-after."""
    w, events = engine(repeat_after=3600)
    replay_slowly(w, INSUFFICIENT.read_bytes())
    assert w.finish("eof") == 1
    kvd002 = [e for e in events() if e["event"] == "finding" and e["rule"] == "KVD002"]
    assert [(e["severity"], e["repeat"], e["line"]) for e in kvd002] == [("info", 0, 3), ("error", 1, 87)]  # KVD002 is info without a workload length (issue 12)
    # what still holds at the end is what analyze says (findings that stopped holding were withdrawn)
    final = next(e for e in events() if e["event"] == "final")["analysis"]
    holding: set[str] = set()
    for e in events():
        if e["event"] == "finding":
            holding.add(e["rule"])
        elif e["event"] == "note" and e["kind"] == "withdrawn":
            holding.discard(e["rule"])
    assert holding == {f["rule"] for f in final["findings"]}


def test_a_finding_that_stops_holding_is_withdrawn(monkeypatch):
    """A rule can hold on a prefix and not once a later line is read (e.g. 'failed before the KV cache was
    sized' until the KV error printed right after the failure): watch withdraws what it printed."""
    from kvlogdiag.result import Finding, Severity, replace

    w, events = engine()
    w.take(TP4.read_bytes())
    real = w._analyse
    held = Finding("KVD099", "test-rule", Severity.WARNING, "holds on the prefix", line=3)
    answers = iter([[held], []])
    monkeypatch.setattr(w, "_analyse", lambda i: replace(real(i), findings=next(answers)))
    w.evaluate()
    w.evaluate()
    kinds = [(e["event"], e.get("kind"), e.get("rule")) for e in events()]
    assert ("finding", "rule", "KVD099") in kinds and kinds[-1] == ("note", "withdrawn", "KVD099")
    assert "KVD099" not in w.rates


def test_no_warning_of_watchs_own_single_running_with_queue():
    """'Running: 1 reqs' with a queue is KVD005's signal (a rule, with --select/--ignore); watch adds
    nothing of its own and shows what analyze shows."""
    data = TP4.read_bytes() + (SINGLE_RUNNING.format(w=6) * 12).encode()
    w, events = engine()
    replay_slowly(w, data)
    w.finish("eof")
    found = [e for e in events() if e["event"] == "finding"]
    assert not [e for e in found if "single-running" in e["name"] or e["rule"] is None]
    from kvlogdiag.pipeline import Analyzer

    want = Analyzer().analyze_stream(io.BufferedReader(io.BytesIO(data)), "-").current
    assert {e["rule"] for e in found} == {f.rule for f in want.findings}


def test_select_one_rule_prints_nothing_but_that_rule(tmp_path):
    tp4_099 = TP4.read_bytes().replace(b"'gpu_memory_utilization': 0.92}", b"'gpu_memory_utilization': 0.99}")
    data = INSUFFICIENT.read_bytes() + tp4_099 + (SINGLE_RUNNING.format(w=6) * 12).encode() \
        + (PREEMPT_LINE.format(n=3) * 5).encode()
    r = run_watch(["--no-echo", "--format", "json", "--select", "KVD004"], data, tmp_path)
    events = [json.loads(x) for x in r.stderr.decode().splitlines()]
    found = [e for e in events if e["event"] == "finding"]
    assert found and {e["rule"] for e in found} == {"KVD004"}
    assert {e["event"] for e in events} <= {"figures", "finding", "summary", "final", "run"}
    assert all(f["rule"] == "KVD004" for e in events if e["event"] == "final" for f in e["analysis"]["findings"])
    text = run_watch(["--no-echo", "--select", "KVD004"], data, tmp_path).stderr.decode()
    assert "KVD004" in text
    codes = re.findall(r"^kvlogdiag: (\S+) \[(?:info|warning|error)\]", text, re.M)
    assert codes and set(codes) == {"KVD004"}, text
    assert "single-running" not in text


def test_ignore_and_fail_on_are_analyzes_options(tmp_path):
    data = (PREEMPT_LINE.format(n=1) * 5).encode()
    r = run_watch(["--format", "json", "--no-echo", "--ignore", "preemptions"], data, tmp_path)
    events = [json.loads(x) for x in r.stderr.decode().splitlines()]
    assert not [e for e in events if e["event"] == "finding" and e["rule"] == "KVD012"]
    assert run_watch(["--no-echo", "--fail-on", "warning"], data, tmp_path).returncode == 1  # KVD012 is a warning
    assert run_watch(["--no-echo", "--fail-on", "warning", "--ignore", "KVD012"], data, tmp_path).returncode == 0


def test_a_restart_in_the_stream_starts_a_new_run(tmp_path):
    """Two server starts in one stream (a restarted container under `docker logs -f`)."""
    data = SINGLE.read_bytes() + TP4.read_bytes()
    first = SINGLE.read_bytes().count(b"\n")
    r = run_watch(["--no-echo", "--format", "json"], data, tmp_path)
    events = [json.loads(x) for x in r.stderr.decode().splitlines()]
    runs = [e for e in events if e["event"] == "run"]
    assert [(e["index"], e["first_line"], e["reason"]) for e in runs] == [(1, first + 1, "restart")]
    at = events.index(runs[0])
    before = [e for e in events[:at] if e["event"] == "figures"]
    after = [e for e in events[at:] if e["event"] == "figures"]
    assert {e["run"] for e in before} == {0} and {e["run"] for e in after} == {1}
    assert round(after[-1]["bytes_per_token"]) == 81919 and len(after[-1]["ranks"]) == 4
    assert any(e["event"] == "summary" and e["reason"] == "run_end" for e in events[:at])
    # the findings of the new run are printed again (KVD005 fires in both)
    assert [e["run"] for e in events if e["event"] == "finding" and e["rule"] == "KVD005"] == [0, 1]
    last = events[-1]
    assert last["run"]["index"] == 1 and last["analysis"]["config"]["tensor_parallel_size"] == 4
    text = run_watch(["--no-echo"], data, tmp_path).stderr.decode()
    assert f"new run (server start 2) at line {first + 1:,}" in text


@pytest.mark.parametrize("case", ["tokens", "max_model_len"])
def test_a_number_cut_by_the_end_of_input_is_not_read(tmp_path, case):
    """The writer died mid-number: '1,009' of '1,009,456 tokens', '104857' of 'max model len 1048576'.
    The last line is unterminated, so (as in analyze) its cut value is not a figure."""
    lines = split_lines(SINGLE.read_bytes())
    if case == "tokens":
        k = next(i for i, ln in enumerate(lines) if b"GPU KV cache size" in ln)
        cut = b"".join(lines[:k]) + lines[k].split(b"1,009,456")[0] + b"1,009"
    else:
        k = 0
        cut = b"(APIServer pid=1) INFO 11-29 08:02:52 [model.py:1776] Using max model len 104857"
    r = run_watch(["--no-echo", "--format", "json"], cut, tmp_path)
    events = [json.loads(x) for x in r.stderr.decode().splitlines()]
    last = events[-1]
    assert last["lines_read"] == k + 1
    a = last["analysis"]
    if case == "tokens":
        assert a["kv_cache"]["tokens"] == [] and a["kv_cache"]["bytes_per_token"] is None, a["kv_cache"]
        assert not [e for e in events if e["event"] == "figures" and e["tokens"]]
    else:
        assert a["config"]["max_model_len"] is None and last["config"]["max_model_len"] is None
    whole = run_watch(["--no-echo", "--format", "json"], cut + (b"456 tokens\n" if case == "tokens" else b"6\n"), tmp_path)
    done = json.loads(whole.stderr.decode().splitlines()[-1])["analysis"]
    assert (done["kv_cache"]["tokens"] == [1009456]) if case == "tokens" else (done["config"]["max_model_len"] == 1048576)
    analyze = json.loads(subprocess.run([sys.executable, "-m", "kvlogdiag", "analyze", "--format", "json", "-"],
                                        input=cut, capture_output=True, timeout=60).stdout)["analyses"][0]
    assert analyze["kv_cache"] == a["kv_cache"] and analyze["config"] == a["config"]


def test_an_analysis_bug_never_stops_the_pass_through(tmp_path, monkeypatch):
    from kvlogdiag.modes.watch import Emitter, Watcher
    from kvlogdiag.pipeline import Analyzer

    def broken(self, facts):
        raise RuntimeError("a rule blew up")

    monkeypatch.setattr(Analyzer, "analyze_facts", broken)
    out = tmp_path / "out"
    sink = io.StringIO()
    data = TP4.read_bytes()
    with open(out, "wb") as fh:
        w = Watcher(Analyzer(), Emitter("json", sink), echo=True, out_fd=fh.fileno(), clock=Clock())
        for ln in split_lines(data):
            w.take(ln)
            w.idle()
        w.end_of_part()
        code = w.finish("eof")
    assert out.read_bytes() == data
    assert code == 3  # ExitCode.INTERNAL_ERROR
    notes = [json.loads(x) for x in sink.getvalue().splitlines()]
    assert [n["event"] for n in notes] == ["note", "note"]
    assert "internal error at line" in notes[0]["message"] and "RuntimeError: a rule blew up" in notes[0]["message"]


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
    w.wait_for(lambda: w.stdout() == a, 120, "the existing content")
    with open(log, "ab") as fh:
        fh.write(b)
    w.wait_for(lambda: w.stdout() == a + b, 120, "the appended content")
    w.wait_for(lambda: [e for e in w.events() if e["event"] == "figures"], 120, "figures from the followed file")
    with open(log, "wb") as fh:  # copytruncate-style
        fh.write(c)
    w.wait_for(lambda: w.stdout() == a + b + c, 120, "the content after truncation")
    w.wait_for(lambda: any(e["event"] == "note" and "truncated" in e["message"] for e in w.events()), 10,
               "the truncation note")  # stderr may lag stdout
    # the truncated file shows vLLM output again: a new run (server start), numbered on from the old lines
    run = w.wait_for(lambda: [e for e in w.events() if e["event"] == "run"], 120, "the new run")
    assert [(e["index"], e["reason"], e["first_line"]) for e in run] == [(1, "truncated", 131)]
    os.rename(log, tmp_path / "server.log.1")  # logrotate-style: rename, then a new file
    time.sleep(0.3)
    log.write_bytes(d)
    w.wait_for(lambda: w.stdout() == a + b + c + d, 120, "the rotated file's content")
    w.wait_for(lambda: any(e["event"] == "note" and "rotated" in e["message"] for e in w.events()), 10,
               "the rotation note")
    w.wait_for(lambda: [e for e in w.events() if e["event"] == "run"][1:], 120, "the run of the rotated file")
    w.proc.send_signal(signal.SIGINT)
    assert w.proc.wait(timeout=120) == 130
    w.finish()
    events = w.events()
    assert [(e["index"], e["reason"]) for e in events if e["event"] == "run"] == [(1, "truncated"), (2, "rotated")]
    assert events[-1]["event"] == "summary" and events[-1]["runs"] == 3
    assert len([e for e in events if e["event"] == "final"]) == 3
    assert [round(e["bytes_per_token"]) for e in events if e["event"] == "figures"] == [81919]  # run 0's only


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
    w.wait_for(lambda: w.stdout() == new, 120, "the appended line")
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(timeout=120) == 143
    w.finish()
    summary = w.events()[-1]
    assert summary["event"] == "summary" and summary["lines_read"] == 1
    # the skipped start-up is said as such (info), not called an incomplete log (issue 12)
    kvd017 = [e for e in w.events() if e["event"] == "finding" and e.get("rule") == "KVD017"]
    assert kvd017 and all(e["severity"] == "info" for e in kvd017), kvd017
    assert "--from-end" in kvd017[-1]["message"] and f"{len(old):,} bytes skipped" in kvd017[-1]["message"]


def test_control_sequences_from_the_log_never_reach_the_terminal(tmp_path):
    """A model name with OSC/CSI/BEL bytes (a hostile or garbled log) is printed escaped."""
    nasty = "x\x1b]0;pwned\x07\x9b31m"
    line = ("(APIServer pid=1) INFO 11-29 08:02:52 [utils.py:328] non-default args: {'model': '" + nasty
            + "', 'max_num_batched_tokens': 8192}\n")
    data = TP4.read_bytes() + line.encode()
    for fmt in ("text", "json"):
        r = run_watch(["--no-echo", "--format", fmt], data, tmp_path)
        err = r.stderr.decode()
        assert "\x1b" not in err and "\x07" not in err and "\x9b" not in err, fmt
    assert "x\\x1b]0;pwned" in run_watch(["--no-echo"], line.encode(), tmp_path).stderr.decode()


def test_follow_missing_directory_target_is_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kvlogdiag", "watch", "-f", str(tmp_path)], capture_output=True,
                       cwd=str(tmp_path), timeout=30)
    assert r.returncode == 2
    assert b"Traceback" not in r.stderr


# --- plumbing -----------------------------------------------------------------------------------


def test_modules_import_in_any_order():
    code = ("import kvlogdiag.modes.watch, sys\n"
            "assert 'click' not in sys.modules  # the engine has no command line in it\n"
            "import kvlogdiag.modes.scan\n"
            "from kvlogdiag.cli.main import cli\n"
            "assert {'watch', 'scan'} <= set(cli.commands)\n"
            "assert {'--select', '--fail-on', '--ignore'} <= {o for p in cli.commands['watch'].params for o in p.opts}\n"
            "assert 'pandas' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_memory_stays_flat_over_many_stats_lines(monkeypatch):
    """watch keeps no lines: a long stream of stats lines leaves no per-line state behind."""
    import tracemalloc

    from kvlogdiag.input import reader

    # the fast finder (Aho-Corasick, or numpy: a one-time import and table) is built during the warm-up, not measured
    monkeypatch.setattr(reader, "NUMPY_AFTER_BYTES", 0)
    monkeypatch.setattr(reader, "AHO_AFTER_BYTES", 0)

    class Sink(io.StringIO):  # output is not state: drop it
        def write(self, s):
            return len(s)

    from kvlogdiag.modes.watch import Emitter, Watcher
    from kvlogdiag.pipeline import Analyzer

    w = Watcher(Analyzer(), Emitter("json", Sink()), echo=False, repeat_after=3600, clock=Clock())
    w.take(TP4.read_bytes())
    block = (PREEMPT_LINE.format(n=1) * 2000).encode()

    def round_trip():
        w.take(block)
        w.idle()
        w.tick()

    for _ in range(5):  # warm-up: caches, lazily loaded rule data
        round_trip()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(30):
        round_trip()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert w.lines.stats.lines == TP4.read_bytes().count(b"\n") + 35 * 2000
    assert after - before < 500_000, after - before  # 60,000 stats lines later


def test_startup_cause_is_reported_when_its_line_arrives(tmp_path, watches):
    """Issue 11: the root-cause finding appears as soon as the cause line is read, with the input still open."""
    data = (Path(__file__).parent / "data" / "failures" / "block_size_16.log").read_bytes()
    lines = data.splitlines(keepends=True)
    w = Watch(["--format", "json", "--no-echo"], tmp_path)
    watches.append(w)
    w.write(b"".join(lines[:69]))  # up to the cause (line 68) and one more; the echoes come later
    found = w.wait_for(lambda: [e for e in w.events() if e.get("event") == "finding" and e.get("rule") == "KVD019"], 120,
                       "the KVD019 finding")
    assert found[0]["line"] == 68 and "block_size" in found[0]["message"]
    w.proc.stdin.close()
    w.proc.wait(timeout=120)


def test_startup_cause_is_evaluated_inside_a_busy_stream():
    """A server that keeps writing after the cause (no quiet moment): the finding is still reported at once."""
    data = (Path(__file__).parent / "data" / "failures" / "block_size_16.log").read_bytes()
    lines = data.splitlines(keepends=True)
    w, events = engine()
    w.take(b"".join(lines[:10]))
    w.idle()  # the head of the input is judged (hard-wrapped paste or not) at the first quiet moment
    w.take(b"".join(lines[10:69]))  # then one read up to the cause and past it: no quiet moment, as with a busy pipe
    assert [e["line"] for e in events() if e.get("event") == "finding" and e.get("rule") == "KVD019"] == [68]
