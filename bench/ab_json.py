#!/usr/bin/env python3
"""A/B check: the analysis JSON of every given log, from this tree and from another checkout.

    python bench/ab_json.py --old OLD_TREE sample_logs tests/data [more files or folders]

``OLD_TREE`` is a checkout of kvlogdiag (e.g. ``git worktree add ../old HEAD~3`` or a ``git archive``
of it); each side runs in its own process (the other side's package on ``PYTHONPATH``), analyses every
file in-process with the default options (``--run all``: every server start) and the two outputs are
compared file by file. Prints the files whose JSON differs (or whose error differs) and exits 1 if any
does. The JSON includes the runtime figures (stats lines, KV-usage peak and the lines over 90 %,
preemptions, busy lines), the KV figures, settings and findings.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_CHILD = r"""
import json, sys
import kvlogdiag
from kvlogdiag.pipeline import Analyzer
from kvlogdiag.render.analysis import render_json
paths = json.load(open(sys.argv[1]))
out = {"package": kvlogdiag.__file__, "results": {}}
an = Analyzer()
for p in paths:
    try:
        res = an.analyze_source_split(p)
        out["results"][p] = render_json([r.to_json("all") for r in res])
    except Exception as exc:  # an error is a result too: both sides must agree on it
        out["results"][p] = "ERROR " + type(exc).__name__ + ": " + str(exc)
json.dump(out, open(sys.argv[2], "w"))
"""


def files_of(args: list[str]) -> list[str]:
    out = []
    for a in args:
        if os.path.isdir(a):
            for d, _, names in os.walk(a):
                out += [os.path.join(d, n) for n in sorted(names)]
        else:
            out.append(a)
    return sorted(set(out))


def run_side(tree: str, paths_file: str, out_file: str) -> dict:
    env = dict(os.environ, PYTHONPATH=tree, KVLOGDIAG_CACHE_DIR="off")
    subprocess.run([sys.executable, "-c", _CHILD, paths_file, out_file], check=True, env=env, cwd=tree)
    with open(out_file) as fh:
        return json.load(fh)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="the other checkout's root (holding kvlogdiag/)")
    ap.add_argument("inputs", nargs="+")
    args = ap.parse_args()
    paths = [os.path.abspath(p) for p in files_of(args.inputs)]
    with tempfile.TemporaryDirectory() as tmp:
        pf = os.path.join(tmp, "paths.json")
        with open(pf, "w") as fh:
            json.dump(paths, fh)
        new = run_side(ROOT, pf, os.path.join(tmp, "new.json"))
        old = run_side(os.path.abspath(args.old), pf, os.path.join(tmp, "old.json"))
    print(f"new: {new['package']}\nold: {old['package']}")
    if new["package"] == old["package"]:
        print("both sides imported the same package: nothing compared", file=sys.stderr)
        return 2
    differ = [p for p in paths if new["results"][p] != old["results"][p]]
    errors = sum(1 for p in paths if new["results"][p].startswith("ERROR "))
    for p in differ:
        print(f"DIFFERS: {os.path.relpath(p)}")
        print(f"  old: {old['results'][p][:300]!r}")
        print(f"  new: {new['results'][p][:300]!r}")
    print(f"{len(paths)} files, {len(differ)} differ, {errors} analysed with an error (on both sides: {errors - sum(1 for p in differ if new['results'][p].startswith('ERROR '))})")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
