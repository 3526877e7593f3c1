"""``scan -j 2`` workers die with their parent, SIGTERM checkpoints, and a killed scan resumes exactly (issue 18).

Real ``python -m kvlogdiag scan`` processes on a tree of small logs. A worker is found as a child
process of the scan (``/proc/*/stat``); "gone" means no such process, or a zombie (dead, waiting for a
reaper: in a container, PID 1 may never reap it). The kill points are random (seeded); every assertion
holds wherever the kill lands (before the workers start, mid-scan, after the end), so no timing matters
but the generous timeouts, which are hang guards only.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_PDEATHSIG is Linux")

PY = sys.executable
LINES = (b"(EngineCore_DP0 pid=9) INFO 07-03 14:19:40 [gpu_worker.py:298] Available KV cache memory: %d.01 GiB\n"
         b"(EngineCore_DP0 pid=9) INFO 07-03 14:19:41 [kv_cache_utils.py:864] GPU KV cache size: %d tokens\n")


def make_tree(root: Path, n: int) -> None:
    for i in range(n):
        d = root / f"d{i // 200:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"s{i:05d}.log").write_bytes(LINES % (i % 50 + 1, 1000 + i))


def scan(*args: str) -> list[str]:
    return [PY, "-m", "kvlogdiag", "scan", "--no-progress", "-j", "2", *args]


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def wait_for(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def workers_of(proc: subprocess.Popen) -> list[int]:
    """The scan's worker processes, once it has them (or [] if it ended first)."""
    found: list[int] = []

    def have() -> bool:
        found[:] = [c for c in children(proc.pid) if alive(c)]
        return bool(found) or proc.poll() is not None
    assert wait_for(have, 120), "the scan neither started workers nor ended"
    return found


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("scansig")
    make_tree(base / "logs", 3000)
    subprocess.run(scan("logs", "-o", "clean.json"), cwd=base, check=False, capture_output=True, timeout=600)
    assert (base / "clean.json").exists()
    return base


def test_a_sigkilled_scan_leaves_no_worker_behind(tree):
    proc = start(scan("logs", "-o", "k.json"), tree)
    workers = workers_of(proc)
    assert workers, "the scan ended before its workers could be seen: make the tree bigger"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    # before: the workers stayed blocked for good (pipe write / read on the pool's queues), holding stdout
    assert wait_for(lambda: not any(alive(w) for w in workers), 60), f"orphaned workers: {workers}"
    proc.stdout.close()
    proc.stderr.close()


def test_sigterm_checkpoints_ends_the_workers_and_exits_143(tree, tmp_path):
    state = tmp_path / "state.json"
    proc = start(scan("logs", "--state", str(state), "-o", str(tmp_path / "t.json")), tree)
    workers = workers_of(proc)
    assert workers, "the scan ended before its workers could be seen: make the tree bigger"
    proc.send_signal(signal.SIGTERM)
    out, errs = proc.communicate(timeout=120)
    assert proc.returncode == 143, errs.decode()[-2000:]
    assert b"terminated (SIGTERM); state saved" in errs and b"Traceback" not in errs
    assert wait_for(lambda: not any(alive(w) for w in workers), 60), f"workers left: {workers}"
    from kvlogdiag.modes.scan import load_state

    saved = load_state(str(state))  # the checkpoint: a valid state holding the files done before the signal
    assert isinstance(saved["files"], dict)


def test_sigkill_at_random_points_then_a_rerun_gives_the_complete_result(tree, tmp_path):
    state = tmp_path / "state.json"
    rng = random.Random(1818)
    for i in range(4):
        proc = start(scan("logs", "--state", str(state), "-o", str(tmp_path / f"k{i}.json")), tree)
        time.sleep(rng.uniform(0.0, 4.0))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=600)
    p = subprocess.run(scan("logs", "--state", str(state), "-o", str(tmp_path / "final.json")), cwd=tree,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    final = json.loads((tmp_path / "final.json").read_text())
    clean = json.loads((tree / "clean.json").read_text())
    sources = [r["source"] for r in final]
    assert len(sources) == len(set(sources)) == 3000  # no duplicated, no missing row
    assert final == clean  # every row as a scan without kills gives it
