"""``watch``'s pass-through never waits for the analysis, and the analysis sees the bytes as analyze does.

Issue 18 item 1 and issue 17's watch target: the echo runs on the reading thread, the analysis on its
own thread; both are Python threads, so what couples them is the GIL. These tests pin the three things
that keep the echo's share of it small (`kvlogdiag.modes.watch`): the analysis searches at most
`ANALYSIS_PIECE` bytes in one C call, the thread switch interval is short while watch runs, and an
analysis that never gives up the CPU (a rule stuck in a Python loop) still lets every line through. The echo
copies nothing on the reading thread (the held partial line and a read's lines in one ``writev``, byte-exact
however short writes cut it) and stdin's and stdout's pipes are grown, never shrunk. The
figures and findings stay analyze's (the numpy finder of a live stream finds the regex's lines). Nothing
here is timed: the echo test waits for each line with a hang guard only, and the analysis spins until the
test has seen every line come back (an echo that waited for it would never come: the guard fails the test).
"""

from __future__ import annotations

import io
import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import SAMPLE_LOGS_DIR

import kvlogdiag.modes.watch as watch_mod
from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.input import reader
from kvlogdiag.input.incremental import StreamLines
from kvlogdiag.modes.watch import ANALYSIS_PIECE, LIVE_SIZE_HINT, SWITCH_INTERVAL_S, Emitter, Watcher, watch_main
from kvlogdiag.pipeline import Analyzer, prefilter

REPO = Path(__file__).resolve().parent.parent
TP4 = (SAMPLE_LOGS_DIR / "v1_tp4_workers.log").read_bytes()
STATS = (SAMPLE_LOGS_DIR / "long_running_stats.log").read_bytes()
GUARD_S = 60.0  # hang guard for one echoed line (never reached unless the echo waits for the analysis)


def test_the_analysis_searches_one_piece_at_a_time(monkeypatch):
    """A 1 MiB read is analysed in pieces of at most ANALYSIS_PIECE bytes (the longest the analysis holds
    the GIL in one search), with the same findings as one feed of the whole read."""
    seen: list[int] = []
    real = StreamLines.feed

    def feed(self, data):
        seen.append(len(data))
        return real(self, data)

    data = (TP4 + STATS) * ((2 << 20) // len(TP4 + STATS) + 1)
    sink = io.StringIO()
    w = Watcher(Analyzer(), Emitter("json", sink), echo=False)
    monkeypatch.setattr(StreamLines, "feed", feed)
    for i in range(0, len(data), 1 << 20):
        w.take(data[i: i + (1 << 20)])
    w.end_of_part()
    assert w.finish("eof") in (ExitCode.OK, ExitCode.FINDINGS)
    assert seen and max(seen) <= ANALYSIS_PIECE and sum(seen) == len(data)
    final = [json.loads(x) for x in sink.getvalue().splitlines() if '"event": "final"' in x]
    monkeypatch.setattr(StreamLines, "feed", real)
    want = Analyzer().analyze_stream_split(io.BytesIO(data), "-")[0]
    assert [f["analysis"]["findings"] for f in final] == [a.to_json()["findings"] for a in want.runs]
    assert [f["analysis"]["kv_cache"] for f in final] == [a.to_json()["kv_cache"] for a in want.runs]


def test_a_live_stream_is_searched_with_the_fast_finder_from_its_first_large_read():
    """The live size hint makes the first ≥ 64 KiB piece use the fast finder (Aho-Corasick, or numpy without
    ahocorasick_rs), which finds exactly the lines the file reader finds (the analysis of a live stream is analyze's)."""
    data = (TP4 + STATS) * ((1 << 20) // len(TP4 + STATS) + 1)
    sl = StreamLines(prefilter(), LIVE_SIZE_HINT)
    got = []
    for i in range(0, len(data), ANALYSIS_PIECE):
        got += sl.feed(data[i: i + ANALYSIS_PIECE])
    got += sl.end()
    assert sl.splitter is not None and sl.splitter.scan is not None
    assert (sl.splitter.scan.aho or sl.splitter.scan.bigrams) is not None
    want = list(reader.iter_lines(io.BytesIO(data), "<test>", prefilter()))
    assert got == want


def test_watch_shortens_the_switch_interval_while_it_runs_and_restores_it(monkeypatch):
    seen: list[float] = []
    real = watch_mod.run_stdin

    def spy(w, in_fd, sig):
        seen.append(sys.getswitchinterval())
        return real(w, in_fd, sig)

    monkeypatch.setattr(watch_mod, "run_stdin", spy)
    before = sys.getswitchinterval()
    r, wfd = os.pipe()
    os.write(wfd, TP4)
    os.close(wfd)
    out = os.open(os.devnull, os.O_WRONLY)
    try:
        code = watch_main(Analyzer(), in_fd=r, out_fd=out, err_stream=io.StringIO(), fmt="json")
    finally:
        os.close(r)
        os.close(out)
    assert code in (ExitCode.OK, ExitCode.FINDINGS)
    assert seen == [SWITCH_INTERVAL_S] and SWITCH_INTERVAL_S < before
    assert sys.getswitchinterval() == before


# every evaluation spins in Python (never blocking, never releasing the GIL on its own) until the test has
# seen every line echoed and creates the file named in argv[1]
SPIN = """
import os, sys
from kvlogdiag.pipeline import Analyzer
real = Analyzer.analyze_facts
flag = sys.argv.pop(1)
def spin(self, facts):
    n = 0
    while not os.path.exists(flag):
        n += sum(range(50))
    return real(self, facts)
Analyzer.analyze_facts = spin
from kvlogdiag.cli.main import main
sys.argv = ['kvlogdiag', 'watch', '--fail-on', 'never']
main()
"""


def test_every_line_is_echoed_while_the_analysis_spins_on_the_cpu(tmp_path):
    flag = tmp_path / "release"
    lines = TP4.splitlines(keepends=True)[:80]
    p = subprocess.Popen([sys.executable, "-c", SPIN, str(flag)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=REPO)
    try:
        fd = p.stdout.fileno()
        echoed = b""
        for line in lines:  # one line at a time: each makes the input go quiet, each starts an evaluation
            p.stdin.write(line)
            p.stdin.flush()
            want = len(echoed) + len(line)
            while len(echoed) < want:
                assert select.select([fd], [], [], GUARD_S)[0], f"line {len(echoed.splitlines()) + 1} never echoed"
                chunk = os.read(fd, 1 << 16)
                assert chunk, "watch ended early"
                echoed += chunk
        assert echoed == b"".join(lines)
        flag.write_text("")
        p.stdin.close()
        rest, err = p.stdout.read(), p.stderr.read()
        assert p.wait(timeout=GUARD_S) == ExitCode.OK, err.decode(errors="replace")[-2000:]
        assert rest == b"" and b"Traceback" not in err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_an_echo_cut_anywhere_by_short_writes_is_byte_exact():
    """A read's complete lines go out beside the held partial line in one ``writev`` (no join); a
    non-blocking stdout that takes a few KiB at a time cuts those writes anywhere — inside the held line,
    between the two parts, inside the lines — and what comes out is still the input, in order."""
    import fcntl  # POSIX only, as watch's loops

    r, wfd = os.pipe()
    try:
        fcntl.fcntl(wfd, fcntl.F_SETPIPE_SZ, 4096)  # the smallest pipe: every large write is short
    except (AttributeError, OSError):
        pass
    os.set_blocking(wfd, False)
    data = (TP4 + STATS) * 3
    got: list[bytes] = []
    reader_t = threading.Thread(target=lambda: got.extend(iter(lambda: os.read(r, 1000), b"")), daemon=True)
    reader_t.start()
    try:
        w = Watcher(Analyzer(), Emitter("json", io.StringIO()), echo=True, out_fd=wfd)
        step = 7919  # a prime: the pieces end inside lines, each read leaves a partial line held
        for i in range(0, len(data), step):
            w.echo_bytes(data[i: i + step])
        w.end_echo()
    finally:
        os.close(wfd)
    reader_t.join(GUARD_S)
    os.close(r)
    assert b"".join(got) == data


def test_watch_grows_its_stdin_and_stdout_pipes_and_never_shrinks_one(monkeypatch):
    """Both pipes get a `PIPE_BYTES` buffer (a read's echo fits stdout in one write); a larger one is left be."""
    import fcntl  # POSIX only, as watch's loops

    if not hasattr(fcntl, "F_GETPIPE_SZ"):
        pytest.skip("no F_GETPIPE_SZ (not Linux): watch asks for nothing")
    grown: list[int] = []
    real = watch_mod._grow_pipe
    monkeypatch.setattr(watch_mod, "_grow_pipe", lambda fd: (grown.append(fd), real(fd)))
    inp, inw = os.pipe()
    r, out = os.pipe()
    try:
        os.write(inw, TP4[:5000])
        os.close(inw)
        code = watch_main(Analyzer(), in_fd=inp, out_fd=out, err_stream=io.StringIO(), fmt="json")
        assert code in (ExitCode.OK, ExitCode.FINDINGS)
        assert os.read(r, 1 << 16) == TP4[:5000]
        assert sorted(grown) == sorted([inp, out])
        before = fcntl.fcntl(out, fcntl.F_GETPIPE_SZ)
        monkeypatch.setattr(watch_mod, "PIPE_BYTES", 2 * before)
        real(out)
        assert fcntl.fcntl(out, fcntl.F_GETPIPE_SZ) in (before, 2 * before)  # 2x, unless over the user's quota
        monkeypatch.setattr(watch_mod, "PIPE_BYTES", 4096)
        size = fcntl.fcntl(out, fcntl.F_GETPIPE_SZ)
        real(out)
        assert fcntl.fcntl(out, fcntl.F_GETPIPE_SZ) == size
    finally:
        for fd in (inp, r, out):
            os.close(fd)
