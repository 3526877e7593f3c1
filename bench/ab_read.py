#!/usr/bin/env python3
"""Interleaved A/B of ``kvlogdiag analyze --format json LOG`` on long logs: CPU and wall, old tree against this one.

    python bench/ab_read.py --old OLD_TREE [--runs 7] [--jobs 0,default] LOG [LOG ...]

For each LOG and each reader setting of ``--jobs`` (``KVLOGDIAG_READ_JOBS``: ``0`` reads serially, ``default``
leaves the variable unset, any other number is passed as is), the command runs as a separate process,
alternately from ``OLD_TREE`` and from this tree (each side's package first on ``PYTHONPATH``, run from a
temporary folder so that the working directory's package is not imported instead), with a private cache folder
warmed by one run of each side first. CPU is user + system of the child and of the reader processes it waited
for (``os.wait4``); wall is measured around the process. Prints the median and minimum of both per LOG, setting
and side, and fails when the two sides' stdout, stderr or exit code differ on any run. The machine is shared:
compare CPU; wall is only meaningful on an idle machine and then as a median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# what the console script does (pyproject.toml [project.scripts]), so both sides start the same way
_ENTRY = ("import sys\ntry:\n    from kvlogdiag.cli.entry import main\nexcept ImportError:  # a tree from before session 8\n"
          "    from kvlogdiag.cli.main import main\nsys.argv[0] = 'kvlogdiag'\nsys.exit(main())")


def run_once(tree: str, cache: str, log: str, jobs: str, cwd: str) -> tuple[float, float, bytes, bytes, int]:
    """(CPU s, wall s, stdout, stderr, exit code) of one ``analyze --format json`` of ``log`` from ``tree``."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = tree
    env["KVLOGDIAG_CACHE_DIR"] = cache
    env.pop("KVLOGDIAG_READ_JOBS", None)
    if jobs != "default":
        env["KVLOGDIAG_READ_JOBS"] = jobs
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as errf:
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-c", _ENTRY, "analyze", "--format", "json", log],
                             stdout=out, stderr=errf, cwd=cwd, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        errf.seek(0)
        return ru.ru_utime + ru.ru_stime, wall, out.read(), errf.read(), os.waitstatus_to_exitcode(status)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the other checkout's root (holding kvlogdiag/)")
    ap.add_argument("--runs", type=int, default=7, help="runs per side, LOG and setting (default 7)")
    ap.add_argument("--jobs", default="0,default", help="comma-separated KVLOGDIAG_READ_JOBS settings (default 0,default)")
    ap.add_argument("logs", nargs="+")
    args = ap.parse_args()
    sides = {"old": os.path.abspath(args.old), "new": ROOT}
    bad = 0
    with tempfile.TemporaryDirectory(prefix="kvlogdiag-ab-read-") as tmp:
        caches = {name: os.path.join(tmp, f"cache-{name}") for name in sides}
        logs = [os.path.abspath(p) for p in args.logs]
        for log in logs:
            for jobs in args.jobs.split(","):
                got: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
                ref = None
                for i in range(args.runs + 1):  # run 0 of each side warms its cache and is not counted
                    for name in (sides if i % 2 else reversed(list(sides))):
                        cpu, wall, out, err, code = run_once(sides[name], caches[name], log, jobs, tmp)
                        if ref is None:
                            ref = (out, err, code)
                        elif (out, err, code) != ref:
                            bad += 1
                            print(f"DIFFERENT OUTPUT: {os.path.basename(log)} jobs={jobs} side {name} run {i}")
                        if i:
                            got[name].append((cpu, wall))
                for name in sides:
                    cpus, walls = [c for c, _ in got[name]], [w for _, w in got[name]]
                    print(f"{os.path.basename(log):32s} jobs={jobs:7s} {name}: CPU median {statistics.median(cpus):.3f} s "
                          f"(min {min(cpus):.3f}), wall median {statistics.median(walls):.3f} s (min {min(walls):.3f})", flush=True)
    if bad:
        print(f"{bad} runs with output different from the first")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
