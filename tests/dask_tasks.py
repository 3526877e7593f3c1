"""Worker functions for tests/test_scan_remote.py that kill their Dask worker (importable by the workers)."""

from __future__ import annotations

import os

from kvlogdiag.modes.scan_dask import scan_batch


def crash_once(marker, options, max_bytes, batch):
    """The first task to run anywhere kills its worker process (as an OOM kill would); every later one,
    including that task's retry, runs `scan_batch`. Bind ``marker`` (a file path) with functools.partial."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return scan_batch(options, max_bytes, batch)
    os.close(fd)
    os._exit(9)


def crash_on_poison(options, max_bytes, batch):
    """Kills its worker on every attempt at a batch holding a file named 'poison*'."""
    if any(os.path.basename(path).startswith("poison") for _, path in batch):
        os._exit(9)
    return scan_batch(options, max_bytes, batch)
