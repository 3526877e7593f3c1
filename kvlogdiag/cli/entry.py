"""The ``kvlogdiag`` console script (and ``python -m kvlogdiag``): `kvlogdiag.cli.main.main`, imported with
the cyclic garbage collector paused.

Importing the CLI and the analysis path creates ~100,000 objects (module dicts, functions, classes, the
dataclasses' generated methods, compiled patterns), none of them garbage; each 700 new containers start a
collection that walks the young ones, and every tenth of those the older ones too: ~42 collections, ~7 ms
of the ~130 ms of CPU a small ``analyze`` costs (counted with ``gc.callbacks``; docs/performance.md, "Session
8"). Here the collector is off while the CLI is imported, and what the imports made is then moved out of its
reach (`gc.freeze`: never freed before the process ends, which it would not have been either) so that later
collections walk only what the command itself creates. The collector is on again, with its usual
thresholds, before the command runs: a long ``watch`` or ``scan`` collects cycles exactly as before.
The patterns that the imported modules (click, the standard library's) compile at import come from the
regex cache meanwhile (`kvlogdiag.recache.serving`: ~1.5-2.5 ms; docs/performance.md, "Session 10").
Nothing else differs from calling `kvlogdiag.cli.main.main`.
"""

from __future__ import annotations

import gc


def main() -> None:
    """The ``kvlogdiag`` console script."""
    was = gc.isenabled()
    gc.disable()
    try:
        from kvlogdiag import recache

        with recache.serving():  # the regexes the imports compile, from the programs kept by earlier runs
            from kvlogdiag.cli.main import main as run
        gc.freeze()
    finally:
        if was:
            gc.enable()
    run()
