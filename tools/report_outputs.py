#!/usr/bin/env python3
"""Every ``kvlogdiag report`` output of every log we have, written to a folder, or compared with such a folder.

Issue 18 bounded ``report`` (its per-rank tables capped as the text summary is: `kvlogdiag.render.caps`);
a change to how the report is built must not change what it shows of a log under the caps. This script
proves it: run it on the tree before the change (``--write OLD``) and after (``--compare OLD``).

    python tools/report_outputs.py --write OLD_DIR           # on the old tree (e.g. a checkout of main)
    python tools/report_outputs.py --compare OLD_DIR         # on the new tree: exit 1 on a difference

The logs: ``sample_logs/`` (with its deployments), every ``.log`` under ``tests/data/``, and the shared real
logs when ``--real-logs DIR`` is given. The outputs of each: Markdown (redacted), Markdown ``--no-redact``,
HTML (redacted, with charts when matplotlib is installed) and Markdown ``--run all``. A log the report
refuses (empty, several containers) is compared by its one-line error.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from kvlogdiag.input.reader import DEFAULT_MAX_BYTES, InputError  # noqa: E402
from kvlogdiag.modes.report import ReportError, make_report, read_input  # noqa: E402
from kvlogdiag.pipeline import Analyzer  # noqa: E402

#: (name, run, format, redact)
VARIANTS = (("md", "last", "markdown", True), ("md-plain", "last", "markdown", False),
            ("html", "last", "html", True), ("md-all", "all", "markdown", True))


def logs(real_logs: str | None) -> Iterator[str]:
    """Every log, as a path relative to the repository (or under ``real_logs``), sorted."""
    found: list[str] = []
    for top in ("sample_logs", os.path.join("tests", "data")):
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, top)):
            found += [os.path.join(dirpath, f) for f in files if f.endswith(".log")]
    if real_logs:
        for dirpath, _dirs, files in os.walk(real_logs):
            found += [os.path.join(dirpath, f) for f in files if f.endswith(".log")]
    yield from sorted(found)


def outputs(path: str) -> dict[str, str]:
    """Each variant's report of ``path`` (or its error line)."""
    out: dict[str, str] = {}
    try:
        result = read_input(Analyzer(), path, False, DEFAULT_MAX_BYTES, lambda msg: None)
    except (InputError, ReportError) as exc:
        return {name: f"error: {exc}\n" for name, *_ in VARIANTS}
    for name, run, fmt, redact in VARIANTS:
        try:
            out[name] = make_report(result, run, fmt, redact)[0]
        except ReportError as exc:
            out[name] = f"error: {exc}\n"
    return out


def key(path: str) -> str:
    """A file name for ``path``'s outputs: readable, and unique through a hash of the whole path."""
    base = os.path.basename(path)[:60]
    return f"{base}.{hashlib.sha256(path.encode()).hexdigest()[:12]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="DIR", help="write every output under DIR")
    mode.add_argument("--compare", metavar="DIR", help="compare every output with the ones under DIR")
    ap.add_argument("--real-logs", metavar="DIR", help="also the logs under DIR (the shared real logs)")
    args = ap.parse_args(argv)
    folder = args.write or args.compare
    if args.write:
        os.makedirs(folder, exist_ok=True)
    n = differ = missing = 0
    for path in logs(args.real_logs):
        for name, text in outputs(path).items():
            n += 1
            target = os.path.join(folder, f"{key(path)}.{name}")
            if args.write:
                with open(target, "w", encoding="utf-8") as fh:
                    fh.write(text)
                continue
            if not os.path.exists(target):
                missing += 1
                print(f"no old output: {path} ({name})")
                continue
            with open(target, encoding="utf-8") as fh:
                if fh.read() != text:
                    differ += 1
                    print(f"differs: {path} ({name})")
    if args.write:
        print(f"{n:,} outputs written to {folder}")
        return 0
    print(f"{n:,} outputs compared: {differ} differ, {missing} without an old output")
    return 1 if differ or missing else 0


if __name__ == "__main__":
    sys.exit(main())
