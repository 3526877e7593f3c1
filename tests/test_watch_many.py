"""``watch -f A -f B`` and ``watch -f 'logs/*.log'``: several live files, each its own analysis (issue 16 item 5).

Real files appended to, truncated and created while watch runs; every wait is a bounded loop on a
condition (a hang guard), never a sleep whose length decides the result.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLE_LOGS_DIR
from test_watch import TP4, Watch, split_lines

SINGLE = SAMPLE_LOGS_DIR / "v1_single_gpu.log"
STATS = SAMPLE_LOGS_DIR / "long_running_stats.log"


@pytest.fixture
def watches():
    started: list[Watch] = []
    yield started
    for w in started:
        w.kill()


def per_file(stdout: bytes) -> dict[str, bytes]:
    """stdout of several followed files → each file's bytes (the ``==> FILE <==`` headers taken out)."""
    out: dict[str, bytes] = {}
    parts = re.split(rb"(?:^|\n)==> (.+?) <==\n", stdout)
    assert parts[0] == b"", parts[0][:200]
    for name, chunk in zip(parts[1::2], parts[2::2]):
        out[name.decode()] = out.get(name.decode(), b"") + chunk
    return out


def analyze(path: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "kvlogdiag", "analyze", "--format", "json", str(path)], capture_output=True,
                       timeout=120)
    return json.loads(r.stdout)["analyses"][0]


def test_two_files_each_their_own_analysis(tmp_path, watches):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    la, lb = split_lines(TP4.read_bytes()), split_lines(SINGLE.read_bytes())
    a.write_bytes(b"".join(la[:40]))
    b.write_bytes(b"")
    w = Watch(["-f", str(a), "-f", str(b), "--format", "json"], tmp_path, stdin=subprocess.DEVNULL)
    watches.append(w)
    w.wait_for(lambda: per_file(w.stdout()).get(str(a)) == b"".join(la[:40]), 120, "a's first lines")
    with open(b, "ab") as fh:  # both files grow, interleaved
        fh.write(b"".join(lb[:30]))
    with open(a, "ab") as fh:
        fh.write(b"".join(la[40:]))
    with open(b, "ab") as fh:
        fh.write(b"".join(lb[30:]))
    w.wait_for(lambda: per_file(w.stdout()) == {str(a): TP4.read_bytes(), str(b): SINGLE.read_bytes()}, 120,
               "both files echoed")
    w.wait_for(lambda: {e["source"] for e in w.events() if e["event"] == "figures"} == {str(a), str(b)}, 120,
               "figures of both")
    w.proc.send_signal(signal.SIGINT)
    assert w.proc.wait(timeout=120) == 130
    w.finish()
    ev = w.events()
    finals = {e["source"]: e["analysis"] for e in ev if e["event"] == "final"}
    assert set(finals) == {str(a), str(b)}
    for path, want_src in ((a, TP4), (b, SINGLE)):
        got, want = finals[str(path)], analyze(want_src)
        assert got["kv_cache"]["bytes_per_token"] == want["kv_cache"]["bytes_per_token"]
        assert [f["rule"] for f in got["findings"]] == [f["rule"] for f in want["findings"]]
        assert got["lines_read"] == want["lines_read"]
    findings = [e for e in ev if e["event"] == "finding"]
    assert {e["source"] for e in findings} == {str(a), str(b)}
    summaries = [e for e in ev if e["event"] == "summary" and e["reason"] == "sigint"]
    assert sorted(e["source"] for e in summaries) == sorted([str(a), str(b)])


def test_text_findings_are_prefixed_with_the_file(tmp_path, watches):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(TP4.read_bytes())
    b.write_bytes(SINGLE.read_bytes())
    w = Watch(["-f", str(a), "-f", str(b), "--no-echo"], tmp_path, stdin=subprocess.DEVNULL)
    watches.append(w)
    w.wait_for(lambda: sum("summary (start-up complete" in t for t in w.stderr()) == 2, 120, "both start-up summaries")
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(timeout=120) == 143
    w.finish()
    err = w.stderr()
    assert any(t.startswith(f"kvlogdiag: {a}: KVD005 ") for t in err)
    assert any(t.startswith(f"kvlogdiag: {b}: KVD014 ") for t in err)
    assert any(t.startswith(f"kvlogdiag: {a}: figures (at line ") and "81,919 B" in t for t in err)
    assert any(t.startswith(f"kvlogdiag: {b}: figures (at line ") and "57,343 B" in t for t in err)
    assert w.stdout() == b""


def test_a_glob_picks_up_a_new_file_and_each_handles_truncation(tmp_path, watches):
    logs = tmp_path / "logs"
    logs.mkdir()
    a = logs / "a.log"
    a.write_bytes(TP4.read_bytes())
    (logs / "notes.txt").write_bytes(b"not followed\n")
    w = Watch(["-f", str(logs / "*.log"), "--format", "json"], tmp_path, stdin=subprocess.DEVNULL)
    watches.append(w)
    w.wait_for(lambda: per_file(w.stdout()).get(str(a)) == TP4.read_bytes(), 120, "a.log echoed")
    c = logs / "c.log"
    c.write_bytes(b"".join(split_lines(STATS.read_bytes())[:60]))
    w.wait_for(lambda: any(e["event"] == "note" and "a new file matches" in e["message"] and str(c) in e["message"]
                           for e in w.events()), 120, "the new file noted")
    w.wait_for(lambda: per_file(w.stdout()).get(str(c)) == c.read_bytes(), 120, "c.log echoed from its start")
    short = b"".join(split_lines(SINGLE.read_bytes())[:5])
    with open(a, "wb") as fh:  # copytruncate of one file: only its own analysis starts a new run
        fh.write(short)
    w.wait_for(lambda: per_file(w.stdout())[str(a)] == TP4.read_bytes() + short, 120, "a.log after truncation")
    w.wait_for(lambda: any(e["event"] == "note" and e["source"] == str(a) and "truncated" in e["message"]
                           for e in w.events()), 120, "the truncation note of a.log")
    w.proc.send_signal(signal.SIGINT)
    assert w.proc.wait(timeout=120) == 130
    w.finish()
    ev = w.events()
    assert {e["source"] for e in ev if e["event"] == "final"} == {str(a), str(c)}  # notes.txt is not followed
    runs = [e for e in ev if e["event"] == "run"]
    assert [(e["source"], e["reason"]) for e in runs] == [(str(a), "truncated")]
    c_final = [e for e in ev if e["event"] == "final" and e["source"] == str(c)]
    assert c_final[-1]["analysis"]["lines_read"] == 60


def test_a_glob_that_matches_nothing_yet_waits(tmp_path, watches):
    w = Watch(["-f", str(tmp_path / "*.log"), "--format", "json"], tmp_path, stdin=subprocess.DEVNULL)
    watches.append(w)
    w.wait_for(lambda: any(e["event"] == "note" and "no file matches" in e["message"] for e in w.events()), 60,
               "the waiting note")
    late = tmp_path / "late.log"
    late.write_bytes(SINGLE.read_bytes())
    w.wait_for(lambda: per_file(w.stdout()).get(str(late)) == SINGLE.read_bytes(), 120, "the late file echoed")
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(timeout=120) == 143


def test_the_same_file_twice_is_followed_once(tmp_path, watches):
    a = tmp_path / "a.log"
    a.write_bytes(SINGLE.read_bytes())
    w = Watch(["-f", str(a), "-f", str(tmp_path / "*.log"), "--format", "json"], tmp_path, stdin=subprocess.DEVNULL)
    watches.append(w)
    w.wait_for(lambda: per_file(w.stdout()).get(str(a)) == SINGLE.read_bytes(), 120, "a.log echoed")
    w.proc.send_signal(signal.SIGINT)
    assert w.proc.wait(timeout=120) == 130
    w.finish()
    assert per_file(w.stdout()) == {str(a): SINGLE.read_bytes()}
    assert len([e for e in w.events() if e["event"] == "final"]) == 1


def test_metrics_with_several_files_is_refused(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(b"")
    b.write_bytes(b"")
    r = subprocess.run([sys.executable, "-m", "kvlogdiag", "watch", "-f", str(a), "-f", str(b), "--metrics",
                        "http://127.0.0.1:1/metrics"], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and b"one server" in r.stderr and b"Traceback" not in r.stderr
