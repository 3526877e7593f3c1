#!/usr/bin/env python3
"""Measure the start-up root-cause finder on a directory of logs with hand-read expectations.

Each ``<case>.log`` has a ``<case>.json`` (``failed``, ``not_in_excerpt``, ``cause_class``,
``cause_fragment``; see tests/test_failures.py). Lines are read the way `kvlogdiag analyze` reads
them (compression, envelopes, hard-wrap rejoining, the line prefilter) and fed to `StartupTracker`.

    python tools/measure_failures.py tests/data/failures_heldout [-v]

Prints, over the logs: the cause found in how many of those that contain it, the class right,
'not in this excerpt' said where the cause is absent, and wrong causes (a cause line reported that
is not the hand-read one, or a cause reported where the excerpt has none).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kvlogdiag.catalogue.failures import prefilter_keywords
from kvlogdiag.catalogue.patterns import prefilter_regex
from kvlogdiag.extract.failures import StartupTracker
from kvlogdiag.input.reader import detect_hard_wrap, iter_lines, open_input, unwrap_lines


def verdict(path: Path) -> dict:
    t = StartupTracker()
    with open_input(str(path)) as fh:
        width = detect_hard_wrap(fh, str(path))
        if width:
            lines = unwrap_lines(iter_lines(fh, str(path), None), width)
        else:
            lines = iter_lines(fh, str(path), prefilter_regex(prefilter_keywords()), first_request=True)
        for line in lines:
            t.feed(line)
    return t.result()


def score(directory: Path, verbose: bool = False) -> dict:
    n = {"logs": 0, "with_cause": 0, "found": 0, "class_right": 0, "without_cause": 0, "said_absent": 0, "wrong": 0}
    for exp_path in sorted(directory.glob("*.json")):
        exp = json.loads(exp_path.read_text())
        r = verdict(exp_path.with_suffix(".log"))
        n["logs"] += 1
        status = ""
        if not exp["failed"]:
            n["not_failed"] = n.get("not_failed", 0) + 1
            if r["cause_line"] is not None:
                n["wrong"] += 1
                status = f"WRONG: a start-up cause on a log that shows none: {r['cause_text']!r}"
            else:
                n["not_failed_quiet"] = n.get("not_failed_quiet", 0) + 1
                status = "no start-up failure, quiet" if not r["failed"] else "WRONG: called a failed start (no cause)"
                if r["failed"]:
                    n["wrong"] += 1
        elif exp.get("not_in_excerpt"):
            n["without_cause"] += 1
            if r["cause_line"] is not None:
                n["wrong"] += 1
                status = f"WRONG: reported {r['cause_text']!r}"
            elif r["failed"] and r["not_in_excerpt_reason"] and all(
                    f in r["not_in_excerpt_reason"] for f in exp.get("reason_fragments", [])):
                n["said_absent"] += 1
                status = "absent, said"
            else:
                status = f"absent, NOT said (failed={r['failed']}, reason={r['not_in_excerpt_reason']!r})"
        else:
            n["with_cause"] += 1
            # the cause line found: its reported message or the raw line holds the hand-read fragment
            if r["cause_text"] and (exp["cause_fragment"] in r["cause_text"] or exp["cause_fragment"] in (r["cause_raw"] or "")):
                n["found"] += 1
                ok = r["cause_class"] == exp["cause_class"] or r["cause_class"] in exp.get("cause_class_alt", [])
                n["class_right"] += ok
                status = "found" + ("" if ok else f", class {r['cause_class']} != {exp['cause_class']}")
            elif r["cause_line"] is not None:
                n["wrong"] += 1
                status = f"WRONG: reported {r['cause_text']!r}"
            else:
                status = f"missed (failed={r['failed']})"
        if verbose:
            print(f"{exp_path.stem:45s} {status}")
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    n = score(a.directory, a.verbose)
    print(f"logs {n['logs']}: cause found {n['found']}/{n['with_cause']}, class right {n['class_right']}/{n['found']}, "
          f"'not in excerpt' said {n['said_absent']}/{n['without_cause']}, wrong causes {n['wrong']}"
          + (f", not start-up failures left without a cause {n.get('not_failed_quiet', 0)}/{n['not_failed']}" if n.get("not_failed") else ""))
    return 0 if n["wrong"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
