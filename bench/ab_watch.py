#!/usr/bin/env python3
"""Interleaved A/B of ``watch``'s pass-through: this tree against another checkout, on the bench's inputs.

    python bench/ab_watch.py --old OLD_TREE [--reps 7] [LOG ...]

``cat LOG | kvlogdiag watch --fail-on never`` runs as in ``bench/run.py --only watch`` (`run.watch_through`'s
way: stdout read with ``os.read`` as it comes), alternately from this tree and from ``OLD_TREE`` (its package
first on ``PYTHONPATH``, a cache folder of its own, started from a neutral folder so that neither tree's
package is picked up from the working directory). The default LOGs are the watch rows' two inputs under
``bench/out`` (``python bench/run.py --only watch`` generates them). Per LOG and side: the pass-through
(lines ÷ first to last byte out), end to end (lines ÷ start to exit), CPU and peak RSS of the watch
process — median, minimum and maximum over the runs.

Fails (exit 1) when a run's stdout is not the input byte for byte (one untimed run per side; the timed
runs count the bytes), its exit code is not 0, or its stderr
differs from the other side's beyond what depends on timing: the findings first reported (rule, severity,
line) and the whole ``summary (end of input)`` block must be the same (the findings repeated on the way,
their counts and their ``again after N s`` follow the evaluations, which follow the input going quiet).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import run as bench  # noqa: E402

_FIRST = re.compile(r"^kvlogdiag: (KVD\d+ \[\w+\] [\w-]+ \(line [\d,]+\))(?!, again)", re.M)


def watch_once(tree: str, cache: str, log: str, cwd: str, check: bool = False) -> dict:
    """One ``cat LOG | watch`` from ``tree``: rates' times, CPU, RSS, stdout's size (and digest with ``check``:
    hashing as it comes costs this process CPU the measured pipe shares), stderr, exit code."""
    env = dict(os.environ, PYTHONPATH=tree, KVLOGDIAG_CACHE_DIR=cache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    digest = hashlib.sha256()
    first = last = None
    size = 0
    with tempfile.TemporaryFile() as errf:
        t0 = time.perf_counter()
        src = subprocess.Popen(["cat", log], stdout=subprocess.PIPE)
        cmd = [sys.executable, "-m", "kvlogdiag", "watch", "--fail-on", "never"]
        timing = os.path.join(cwd, "time.txt")
        # GNU time, as bench/run.py: forked from its own small process, the RSS is watch's, not this script's too
        full = [bench.GNU_TIME, "-o", timing, "-f", "%M %U %S", *cmd] if bench.GNU_TIME else cmd
        p = subprocess.Popen(full, stdin=src.stdout, stdout=subprocess.PIPE, stderr=errf, cwd=cwd, env=env)
        src.stdout.close()
        fd = p.stdout.fileno()
        while data := os.read(fd, 1 << 20):  # what is there (a buffered read would wait to fill)
            last = time.perf_counter() - t0
            if first is None:
                first = last
            size += len(data)
            if check:
                digest.update(data)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.stdout.close()
        src.wait()
        errf.seek(0)
        err = errf.read().decode("utf-8", "replace")
    rss, cpu = ru.ru_maxrss / 1024.0, ru.ru_utime + ru.ru_stime
    if bench.GNU_TIME:
        with open(timing) as fh:
            fields = fh.read().split()
        rss, cpu = float(fields[-3]) / 1024.0, float(fields[-2]) + float(fields[-1])
    return {"first": first, "last": last, "wall": wall, "cpu": cpu, "rss": rss,
            "size": size, "digest": digest.hexdigest() if check else None, "err": err, "rc": os.waitstatus_to_exitcode(status)}


def stable(err: str) -> tuple[list[str], str]:
    """What of watch's stderr does not depend on timing: first reports, and the end-of-input summary."""
    at = err.rfind("kvlogdiag: summary (end of input)")
    return _FIRST.findall(err), err[at:] if at >= 0 else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="another kvlogdiag checkout (the A side)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("logs", nargs="*", default=[os.path.join(bench.OUT, "long-60MB.log"),
                                               os.path.join(bench.OUT, "shape-stats-dense-20MB.log")])
    ns = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kvlogdiag-ab-watch-")
    sides = {"old": os.path.abspath(ns.old), "new": ROOT}
    bad: list[str] = []
    for log in ns.logs:
        want, lines = hashlib.sha256(), 0
        with open(log, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                want.update(chunk)
                lines += chunk.count(b"\n")
        size = os.path.getsize(log)
        runs: dict[str, list[dict]] = {name: [] for name in sides}
        for name, tree in sides.items():  # untimed: stdout is the input byte for byte (and the caches are warm)
            r = watch_once(tree, os.path.join(work, f"cache-{name}"), log, work, check=True)
            if r["digest"] != want.hexdigest() or r["rc"] != 0:
                bad.append(f"{name} {os.path.basename(log)}: exit {r['rc']}, stdout "
                           f"{'the input' if r['digest'] == want.hexdigest() else 'NOT the input'}")
        for _ in range(ns.reps):
            for name, tree in sides.items():
                r = watch_once(tree, os.path.join(work, f"cache-{name}"), log, work)
                runs[name].append(r)
                if r["size"] != size or r["rc"] != 0:
                    bad.append(f"{name} {os.path.basename(log)}: exit {r['rc']}, {r['size']:,} of {size:,} bytes out")
        print(f"{os.path.basename(log)} ({lines:,} lines), {ns.reps} runs per side, interleaved:")
        for name, rs in runs.items():
            steady = sorted(lines / (r["last"] - r["first"]) for r in rs if r["first"] is not None and r["last"] > r["first"])
            e2e = sorted(lines / r["wall"] for r in rs)
            print(f"  {name}: pass-through median {statistics.median(steady):,.0f} lines/s (min {steady[0]:,.0f}, max "
                  f"{steady[-1]:,.0f}); end to end {statistics.median(e2e):,.0f} lines/s; CPU median "
                  f"{statistics.median(r['cpu'] for r in rs):.2f} s; peak RSS max {max(r['rss'] for r in rs):.0f} MB")
        ref = stable(runs["old"][0]["err"])
        for name, rs in runs.items():
            for i, r in enumerate(rs):
                if stable(r["err"]) != ref:
                    bad.append(f"{name} {os.path.basename(log)} run {i + 1}: stderr's findings or final summary differ")
    for b in bad:
        print("DIFFERS:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
