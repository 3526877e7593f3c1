"""Fault injection into ``kvlogdiag watch``: whatever the analysis does, the log passes through whole.

Each case runs watch in a subprocess whose analysis (the analyzer, a rule, a renderer) was patched before
the command started, to raise, hang or run out of memory, and checks that stdout equals the input byte for
byte and the exit code says what happened (`ExitCode.INTERNAL_ERROR`, 3). Timeouts here are hang guards
only (generous); nothing is asserted about how fast anything runs.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kvlogdiag.cli.exit import ExitCode

REPO = Path(__file__).resolve().parent.parent
TP4_BYTES = (REPO / "sample_logs" / "v1_tp4_workers.log").read_bytes()
GUARD_S = 120  # hang guard for one subprocess

# patches applied inside the watch process before the command runs
RAISE_ANALYZER = """
from kvlogdiag.pipeline import Analyzer
def broken(self, facts):
    raise RuntimeError("injected analyzer fault")
Analyzer.analyze_facts = broken
"""
# the rule evaluation as the pipeline calls it (a fault inside one rule's own check is a rule error)
RAISE_RULE = """
import kvlogdiag.pipeline as p
def broken(*a, **k):
    raise ZeroDivisionError("injected rule fault")
p.evaluate = broken
"""
# what turns an Analysis into the figures event / line (both formats)
RAISE_RENDERER = """
import kvlogdiag.modes.watch as w
def broken(a):
    raise ValueError("injected renderer fault")
w._figures_event = broken
"""
MEMORY_ERROR = """
from kvlogdiag.pipeline import Analyzer
def broken(self, facts):
    raise MemoryError("injected: cannot allocate")
Analyzer.analyze_facts = broken
"""
# a hang: the analysis blocks for good on its first evaluation; STUCK_S is the program's own hang guard
HANG = """
import threading
import kvlogdiag.modes.watch as w
from kvlogdiag.pipeline import Analyzer
def stuck(self, facts):
    threading.Event().wait()
Analyzer.analyze_facts = stuck
w.STUCK_S = {stuck_s}
"""


def watch_cmd(patch: str, *args: str) -> list[str]:
    code = patch + "\nimport sys\nfrom kvlogdiag.cli.main import main\nsys.argv = ['kvlogdiag', 'watch', *sys.argv[1:]]\nmain()\n"
    return [sys.executable, "-c", code, *args]


def run_patched(patch: str, data: bytes, *args: str) -> subprocess.CompletedProcess:
    # a pipe, not a file: the case watch exists for (a server writing into it)
    return subprocess.run(watch_cmd(patch, *args), input=data, capture_output=True, timeout=GUARD_S, cwd=REPO)


@pytest.mark.parametrize("patch,fault", [(RAISE_ANALYZER, "RuntimeError: injected analyzer fault"),
                                         (RAISE_RULE, "ZeroDivisionError: injected rule fault"),
                                         (RAISE_RENDERER, "ValueError: injected renderer fault"),
                                         (MEMORY_ERROR, "MemoryError: injected: cannot allocate")],
                         ids=["analyzer-raises", "rule-raises", "renderer-raises", "memory-error"])
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_an_analysis_fault_leaves_the_pass_through_byte_exact(patch, fault, fmt):
    data = TP4_BYTES + b"\xff\xfe invalid utf-8, \x1b[31mcolour\x1b[0m, and a last line without newline"
    p = run_patched(patch, data, "--format", fmt, "--fail-on", "never")
    err = p.stderr.decode(errors="replace")
    assert p.stdout == data
    assert "Traceback" not in err, err[-2000:]
    assert p.returncode == ExitCode.INTERNAL_ERROR, err[-2000:]
    assert err.count("internal error at line") == 1, err[-2000:]  # reported once
    assert fault in err
    if fmt == "text":
        assert "kvlogdiag: internal error at line " in err and "; passing the log through unchanged" in err


def test_a_fault_after_some_lines_reports_the_line_and_keeps_copying():
    """The analysis fails on the 3rd evaluation: the note names the line reached, the bytes go on."""
    patch = """
from kvlogdiag.pipeline import Analyzer
real = Analyzer.analyze_facts
calls = [0]
def flaky(self, facts):
    calls[0] += 1
    if calls[0] == 3:
        raise KeyError("third evaluation")
    return real(self, facts)
Analyzer.analyze_facts = flaky
"""
    data = TP4_BYTES * 3
    p = run_patched(patch, data, "--fail-on", "never")
    err = p.stderr.decode(errors="replace")
    assert p.stdout == data
    assert p.returncode == ExitCode.INTERNAL_ERROR, err[-2000:]
    line = [x for x in err.splitlines() if "internal error at line" in x]
    assert len(line) == 1 and "KeyError" in line[0], err[-2000:]
    n = int(line[0].split("internal error at line ")[1].split(" ")[0].replace(",", ""))
    assert 0 < n <= data.count(b"\n")


def test_a_hung_analysis_does_not_hold_the_echo_and_the_end_is_given_up():
    """The analysis hangs on its first evaluation: every byte still comes through, and at the end the
    program's own stuck guard (set small here, the hang is real) gives the analysis up with exit 3."""
    data = TP4_BYTES * 4
    p = run_patched(HANG.format(stuck_s=0.5), data, "--fail-on", "never")
    err = p.stderr.decode(errors="replace")
    assert p.stdout == data
    assert p.returncode == ExitCode.INTERNAL_ERROR, err[-2000:]
    assert "the analysis did not finish" in err and "Traceback" not in err and "Fatal Python error" not in err


def test_an_analysis_falling_behind_a_pipe_is_dropped_never_the_bytes():
    """A stuck analysis and more than the queue's bound (64 MiB) of input through a pipe: the analysis is
    given up with one note; the memory stays bounded; stdout is the input."""
    chunk = TP4_BYTES * 64
    reps = (70 << 20) // len(chunk) + 1
    proc = subprocess.Popen(watch_cmd(HANG.format(stuck_s=0.5), "--fail-on", "never"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    digest = hashlib.sha256()
    got = [0]
    err: list[bytes] = []

    def pump() -> None:
        while True:
            b = proc.stdout.read(1 << 20)
            if not b:
                return
            digest.update(b)
            got[0] += len(b)

    threads = [threading.Thread(target=pump, daemon=True),
               threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)]
    for t in threads:
        t.start()
    want = hashlib.sha256()
    try:
        for _ in range(reps):
            proc.stdin.write(chunk)
            want.update(chunk)
        proc.stdin.close()
        proc.wait(timeout=GUARD_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    for t in threads:
        t.join(timeout=GUARD_S)
    text = b"".join(err).decode(errors="replace")
    assert got[0] == reps * len(chunk) and digest.hexdigest() == want.hexdigest()
    assert proc.returncode == ExitCode.INTERNAL_ERROR, text[-2000:]
    assert text.count("internal error at line") == 1 and "MiB behind the input" in text, text[-2000:]


def _blocked_in_write(pid: int) -> bool:
    try:
        return "pipe_write" in Path(f"/proc/{pid}/wchan").read_text()  # pipe_write, anon_pipe_write
    except OSError:
        return False


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, ExitCode.TERMINATED), (signal.SIGINT, ExitCode.INTERRUPTED)])
def test_a_signal_ends_a_write_blocked_on_a_stalled_reader(sig, code):
    """stdout's reader stops reading (the pipe is full, watch's write blocks): SIGTERM/SIGINT still end
    watch, with its documented code, instead of waiting for a reader that never comes back."""
    proc = subprocess.Popen([sys.executable, "-m", "kvlogdiag", "watch", "--fail-on", "never"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    err: list[bytes] = []
    t = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    t.start()
    try:
        os.set_blocking(proc.stdin.fileno(), False)
        written = polls = 0
        view = memoryview(TP4_BYTES * 400)  # ~12 MB, far more than both pipes hold
        # nobody reads stdout: once the stdin pipe stays full, watch is blocked writing stdout
        while view:
            try:
                n = os.write(proc.stdin.fileno(), view[: 1 << 16])
            except BlockingIOError:
                polls += 1
                if written > (2 << 20) and _blocked_in_write(proc.pid) or proc.poll() is not None or polls > 2400:
                    break
                threading.Event().wait(0.05)
                continue
            written += n
            view = view[n:]
        assert proc.poll() is None and _blocked_in_write(proc.pid), "watch should be blocked writing stdout"
        proc.send_signal(sig)
        proc.wait(timeout=GUARD_S)  # before the fix: blocked for good (the guard's TimeoutExpired)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    t.join(timeout=GUARD_S)
    text = b"".join(err).decode(errors="replace")
    assert proc.returncode == code, text[-2000:]
    assert "Traceback" not in text, text[-2000:]


def test_stdout_on_a_full_disk_is_a_one_line_error():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with open("/dev/full", "wb") as full:
        p = subprocess.run([sys.executable, "-m", "kvlogdiag", "watch"], input=TP4_BYTES, stdout=full,
                           stderr=subprocess.PIPE, timeout=GUARD_S, cwd=REPO)
    err = p.stderr.decode()
    assert p.returncode == ExitCode.ERROR, err
    assert "Traceback" not in err and "stdout: cannot write (No space left on device)" in err, err
