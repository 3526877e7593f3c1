#!/usr/bin/env python3
"""Interleaved A/B of the CPU time of short kvlogdiag commands: this tree against another checkout.

    python bench/ab_startup.py --old OLD_TREE [--runs 20] [--installed] LOG [LOG ...]

For each LOG, ``kvlogdiag analyze LOG`` (text) and ``kvlogdiag analyze --format json LOG`` are run as
separate processes, alternately from this tree and from ``OLD_TREE`` (its package first on
``PYTHONPATH``; both through the same console-script entry, so the quick exit applies to both), with a
private cache folder (``KVLOGDIAG_CACHE_DIR``, warmed by one run of each side first) and ``.pyc`` files
allowed. CPU is user + system of the child from ``os.wait4`` (never wall time: the machine is shared).
Prints the median and minimum per command and side, and fails if the two sides' stdout, stderr or
exit code differ on any run. With ``--installed`` each side runs the console script of a regular wheel
install of its tree instead (``bench/installed.py``; private venvs under ``bench/out``), as a user's
``pip install`` would.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# what the console script does (pyproject.toml [project.scripts]), so both sides start the same way
_ENTRY = ("import sys\ntry:\n    from kvlogdiag.cli.entry import main\nexcept ImportError:  # a tree from before session 8\n"
          "    from kvlogdiag.cli.main import main\nsys.argv[0] = 'kvlogdiag'\nsys.exit(main())")


def _env(tree: str, cache: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = tree
    env["KVLOGDIAG_CACHE_DIR"] = cache
    return env


def run_once(tree: str, cache: str, args: list[str], cwd: str, script: str | None = None) -> tuple[float, bytes, bytes, int]:
    """CPU seconds (user + sys), stdout, stderr and exit code of one run (``script``: an installed console script)."""
    env = _env(tree, cache)
    if script:
        env.pop("PYTHONPATH")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as errf:
        cmd = [script, *args] if script else [sys.executable, "-c", _ENTRY, *args]
        p = subprocess.Popen(cmd, stdout=out, stderr=errf, cwd=cwd, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        errf.seek(0)
        return ru.ru_utime + ru.ru_stime, out.read(), errf.read(), p.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="another kvlogdiag checkout (the A side)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--installed", action="store_true", help="run each tree from a regular wheel install of it")
    ap.add_argument("logs", nargs="+")
    ns = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kvlogdiag-ab-")
    sides = {"old": (os.path.abspath(ns.old), os.path.join(work, "cache-old")),
             "new": (ROOT, os.path.join(work, "cache-new"))}
    scripts: dict[str, str | None] = {"old": None, "new": None}
    if ns.installed:
        sys.path.insert(0, HERE)
        import installed

        for name, (tree, _cache) in sides.items():
            scripts[name] = installed.kvlogdiag_script(tree, os.path.join(HERE, "out", f"installed-ab-{name}"))
    differ = False
    for log in ns.logs:
        log = os.path.abspath(log)
        for fmt in ("text", "json"):
            args = ["analyze", log] if fmt == "text" else ["analyze", "--format", "json", log]
            for name, (tree, cache) in sides.items():
                run_once(tree, cache, args, work, scripts[name])  # fills that side's caches
            cpu: dict[str, list[float]] = {"old": [], "new": []}
            for i in range(ns.runs):
                outs = {}
                for name in (("old", "new") if i % 2 == 0 else ("new", "old")):
                    tree, cache = sides[name]
                    c, out, err, rc = run_once(tree, cache, args, work, scripts[name])
                    cpu[name].append(c)
                    outs[name] = (out, err, rc)
                if outs["old"] != outs["new"]:
                    differ = True
                    print(f"DIFFERENT output: {' '.join(args)}", file=sys.stderr)
            print(f"{os.path.basename(log)} {fmt:4}  old {statistics.median(cpu['old']) * 1000:6.1f} / "
                  f"{min(cpu['old']) * 1000:6.1f} ms   new {statistics.median(cpu['new']) * 1000:6.1f} / "
                  f"{min(cpu['new']) * 1000:6.1f} ms  (median / min CPU of {ns.runs})", flush=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
