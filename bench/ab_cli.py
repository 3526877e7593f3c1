#!/usr/bin/env python3
"""A/B check of the command line's bytes: ``kvlogdiag analyze`` text and JSON of every given log, from
this tree and from another checkout.

    python bench/ab_cli.py --old OLD_TREE [--every N] sample_logs tests/data [more files or folders]

``OLD_TREE`` is a checkout of kvlogdiag (e.g. a ``git archive`` of an older commit). Two passes:

* **in one process per side**: each side's CLI (``cli.run``) runs ``analyze FILE`` and
  ``analyze --format json FILE`` for every file (in a folder: every file but JSON, Markdown, scripts and TOML), stdout and stderr captured; the two sides' stdout,
  stderr and exit code are compared file by file;
* **as separate processes** (what start-up changes touch: lazy imports, the quick exit): every Nth file
  (``--every``, default 12) plus every file under a folder named ``sample_logs`` or ``real_logs``, as
  the console script would run it, in text and JSON, compared the same way.

Each side runs with its package first on ``PYTHONPATH`` and a cache folder of its own. Prints the runs
whose output differs and exits 1 if any does.
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

_IN_PROCESS = r"""
import io, json, sys
import kvlogdiag
from kvlogdiag.cli.main import cli
paths = json.load(open(sys.argv[1]))
out = {"package": kvlogdiag.__file__, "runs": {}}
real_out, real_err = sys.stdout, sys.stderr
for p in paths:
    for fmt in ("text", "json"):
        o, e = io.StringIO(), io.StringIO()
        sys.stdout, sys.stderr = o, e
        try:
            rc = cli.run(["analyze", "--format", fmt, p])
        except BaseException as exc:  # a crash is a result too: both sides must agree on it
            rc = "CRASH " + type(exc).__name__ + ": " + str(exc)
        finally:
            sys.stdout, sys.stderr = real_out, real_err
        out["runs"][fmt + " " + p] = [o.getvalue(), e.getvalue(), rc]
json.dump(out, open(sys.argv[2], "w"))
"""

_ENTRY = ("import sys\ntry:\n    from kvlogdiag.cli.entry import main\nexcept ImportError:  # a tree from before session 8\n"
          "    from kvlogdiag.cli.main import main\nsys.argv[0] = 'kvlogdiag'\nsys.exit(main())")


_NOT_LOGS = (".json", ".md", ".py", ".sh", ".toml")  # in a folder: answers, goldens, scripts (a named file always runs)


def _files(args: list[str]) -> list[str]:
    out: list[str] = []
    for a in args:
        if os.path.isdir(a):
            for dirpath, _, names in os.walk(a):
                out.extend(os.path.join(dirpath, n) for n in names
                           if not n.startswith(".") and not n.endswith(_NOT_LOGS))
        else:
            out.append(a)
    return sorted(os.path.abspath(p) for p in out)


def _env(tree: str, cache: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = tree
    env["KVLOGDIAG_CACHE_DIR"] = cache
    env.pop("NO_COLOR", None)
    return env


def _in_process(tree: str, cache: str, files: list[str], work: str) -> dict:
    lst, res = os.path.join(work, "files.json"), os.path.join(work, f"res-{abs(hash(tree))}.json")
    with open(lst, "w") as fh:
        json.dump(files, fh)
    subprocess.run([sys.executable, "-c", _IN_PROCESS, lst, res], check=True, cwd=work, env=_env(tree, cache))
    with open(res) as fh:
        doc = json.load(fh)
    if not doc["package"].startswith(tree):
        raise SystemExit(f"{tree}: the child imported {doc['package']} (not that tree)")
    return doc["runs"]


def _process(tree: str, cache: str, args: list[str], work: str) -> tuple[bytes, bytes, int]:
    p = subprocess.run([sys.executable, "-c", _ENTRY, *args], capture_output=True, cwd=work, env=_env(tree, cache))
    return p.stdout, p.stderr, p.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="another kvlogdiag checkout (the A side)")
    ap.add_argument("--every", type=int, default=12, help="separate processes for every Nth file (0: none)")
    ap.add_argument("paths", nargs="+")
    ns = ap.parse_args()
    files = _files(ns.paths)
    work = tempfile.mkdtemp(prefix="kvlogdiag-ab-cli-")
    old, new = os.path.abspath(ns.old), ROOT
    caches = {old: os.path.join(work, "cache-old"), new: os.path.join(work, "cache-new")}
    bad = 0
    a, b = _in_process(old, caches[old], files, work), _in_process(new, caches[new], files, work)
    for key in sorted(a):
        if a[key] != b.get(key):
            bad += 1
            print(f"DIFFERENT (in process): analyze --format {key}")
    print(f"in process: {len(a)} runs ({len(files)} files x text, json), {bad} different", flush=True)
    picked = [f for i, f in enumerate(files)
              if (ns.every and i % ns.every == 0) or "/sample_logs/" in f or "/real_logs/" in f]
    n_proc = bad_proc = 0
    for f in picked:
        for args in (["analyze", f], ["analyze", "--format", "json", f]):
            n_proc += 1
            if _process(old, caches[old], args, work) != _process(new, caches[new], args, work):
                bad_proc += 1
                print(f"DIFFERENT (process): {' '.join(args)}")
    print(f"separate processes: {n_proc} runs ({len(picked)} files x text, json), {bad_proc} different")
    return 1 if bad or bad_proc else 0


if __name__ == "__main__":
    sys.exit(main())
