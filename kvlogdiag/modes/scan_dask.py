"""``kvlogdiag scan --engine dask [--scheduler ADDRESS]``: the per-file work of a scan on a Dask cluster.

Optional: ``pip install 'kvlogdiag[dask]'`` (``dask[distributed]``). Each task is a batch of files; a
worker runs `kvlogdiag.modes.scan.analyze_file` on each — the very function of the local engine, with
one `Analyzer` per worker process — and sends back only the rows. The rows are put in order by the
command exactly as for a local scan, so both engines give the same output byte for byte.

Without ``--scheduler`` a `distributed.LocalCluster` of ``-j`` worker processes (one thread each) is
started for the scan and stopped after it. With ``--scheduler`` the workers of that cluster must see
the same paths (a shared file system, or URLs: `kvlogdiag.input.remote`), the same user rule files and
the same credentials.

A worker that dies mid-scan loses no row: the scheduler runs its batches again on another worker
(``distributed.scheduler.allowed-failures`` times). The files of a batch that still fails (a task that
was merely running beside the culprit when its worker died counts as a failure too) are then run once
more one at a time, each alone on the cluster: each gets its real row, and only a file that fails on its
own becomes an error row. Memory per worker stays flat: a worker holds one batch
of rows at a time, and each result is released as soon as the command has it.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

from kvlogdiag.modes.scan import Entry, _chunks, analyze_file, empty_row

INSTALL_HINT = "pip install 'kvlogdiag[dask]'"
BATCH_MAX = 256  # files per task: per-task scheduling costs ~1 ms, a batch of small logs ~0.5-1 s
# our LocalCluster only (a --scheduler cluster keeps its own): the event loop's health check every 20 ms and the
# system monitor (the dashboard's CPU / memory figures) every 500 ms run beside the task thread under the GIL
LOCAL_CONFIG = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
                "distributed.admin.system-monitor.interval": "5s"}

_ANALYZER: list = []  # in a worker: [options, Analyzer] of the last batch


def _worker_analyzer(options: Any) -> Any:
    from kvlogdiag.pipeline import Analyzer

    if not _ANALYZER or _ANALYZER[0] != options:
        _ANALYZER[:] = [options, Analyzer(options)]
    return _ANALYZER[1]


def prepare_local_worker(options: Any) -> None:
    """Run on each worker of the LocalCluster the scan started (`Client.run`), before any task: its Analyzer
    built, then `kvlogdiag.modes.scan.freeze_heap` — the worker process is the scan's, and ends with it."""
    from kvlogdiag.modes.scan import freeze_heap

    _worker_analyzer(options)
    freeze_heap()


def scan_batch(options: Any, max_bytes: int, batch: list[tuple[str, str]]) -> tuple[list[list[dict]], list[str]]:
    """The task run on a worker: rows of each (source, path) of ``batch``, and the rule errors raised meanwhile."""
    analyzer = _worker_analyzer(options)
    rows = [analyze_file(analyzer, src, path, max_bytes) for src, path in batch]
    errors = [e.message for e in analyzer.rule_errors]
    del analyzer.rule_errors[:]
    return rows, errors


class DaskUnavailable(Exception):
    """The dask extra is not installed, or the scheduler cannot be reached: the command exits 2."""


def _client(scheduler: str | None, njobs: int):
    try:
        import logging

        from distributed import Client, LocalCluster
    except ImportError:
        raise DaskUnavailable(f"--engine dask needs dask.distributed: {INSTALL_HINT}") from None
    if scheduler:
        try:
            return Client(scheduler, timeout="30s"), None
        except (OSError, TimeoutError, ValueError) as exc:
            raise DaskUnavailable(f"--scheduler {scheduler}: cannot connect ({exc})") from None
    import dask

    # no dashboard, so nothing reads the workers' statistical profiler: it samples the running task's stack
    # every 10 ms under the GIL (the nannies pass this configuration on to the worker processes)
    with dask.config.set(LOCAL_CONFIG):
        cluster = LocalCluster(n_workers=njobs, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=logging.ERROR)
    return Client(cluster), cluster


def run_dask(todo: list[Entry], options: Any, max_bytes: int, njobs: int, scheduler: str | None,
             done: Callable[[list[Entry], list[list[dict]]], None], rule_errors: list[str],
             start_bar: Callable[[], None] = lambda: None, task: Callable = scan_batch) -> None:
    """Analyse ``todo`` on the cluster; ``done(entries, rows)`` is called as each batch arrives (any order).
    ``task`` is the worker function (`scan_batch`; the tests pass one that kills its worker)."""
    client, cluster = _client(scheduler, njobs)
    try:
        from distributed import as_completed

        if cluster is not None:
            try:
                client.run(prepare_local_worker, options)
            except Exception:  # noqa: BLE001 - only a saving: a task builds its Analyzer itself, and fails as before
                pass
        nworkers = max(1, len(client.scheduler_info().get("workers", {})) or njobs)
        size = max(1, min(BATCH_MAX, len(todo) // (nworkers * 8) or 1))
        order = sorted(todo, key=lambda e: -(e.size or 0))  # biggest first, as the local pool
        batches = _chunks(order, size)
        run = uuid.uuid4().hex[:12]
        futures = {}
        for i, b in enumerate(batches):
            fut = client.submit(task, options, max_bytes, [(e.source, e.abspath) for e in b],
                                key=f"kvlogdiag-scan-{run}-{i}", pure=False)
            futures[fut.key] = (fut, b)
        start_bar()
        suspects: list[Entry] = []
        for fut in as_completed([f for f, _ in futures.values()]):
            _, b = futures.pop(fut.key)
            try:
                batch_rows, errs = fut.result()
            except Exception:  # noqa: BLE001 - a worker died too often, or the task failed: those files alone again
                suspects.extend(b)
                continue
            finally:
                fut.release()
            rule_errors.extend(errs)
            done(b, batch_rows)
        for i, e in enumerate(suspects):
            # one at a time, nothing else on the cluster: a death now is this file's own, never a neighbour's
            fut = client.submit(task, options, max_bytes, [(e.source, e.abspath)], key=f"kvlogdiag-alone-{run}-{i}",
                                pure=False)
            try:
                batch_rows, errs = fut.result()
            except Exception as exc:  # noqa: BLE001 - it fails alone: that file's error row
                batch_rows = [[empty_row(e.source, f"internal error: worker failed ({type(exc).__name__}: {exc})")]]
                errs = []
            finally:
                fut.release()
            rule_errors.extend(errs)
            done([e], batch_rows)
    finally:
        try:
            client.close()
        finally:
            if cluster is not None:
                cluster.close()
