"""``kvlogdiag scan``: the command line of the archive mode (finding, reading and rows are `kvlogdiag.modes.scan`)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import click

from kvlogdiag.cli.common import BYTES, build_analyzer, err, rule_options
from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.cli.output import (
    CI_FORMATS,
    Output,
    check_target,
    ci_text,
    finish,
    output_options,
    statistics_format_error,
    statistics_text,
)
from kvlogdiag.cli.timewindow import install_window, window_options
from kvlogdiag.deployment_result import GROUP_BY
from kvlogdiag.fileio import write_atomic
from kvlogdiag.input.reader import DEFAULT_MAX_BYTES
from kvlogdiag.modes import scan as scan_mode
from kvlogdiag.modes.deployment import deployment_column
from kvlogdiag.modes.scan import (
    _URL_LIKE,
    DETAIL_KEY,
    OUTPUT_FORMATS,
    Entry,
    Finder,
    StateError,
    _default_jobs,
    _run,
    _stderr_tty,
    empty_row,
    fail_exit_rows,
    fingerprint,
    head_hash,
    load_state,
    render_rows,
    save_state,
    summary_tables,
    write_output,
)
from kvlogdiag.render.ci import logs_from_rows, rule_info
from kvlogdiag.render.redact import escape_controls


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--include", multiple=True, metavar="GLOB",
              help="Scan files whose name (or path below the folder) matches; repeatable. "
                   "[default: *.log* *.out* *.txt* *.gz *.zst *.xz *.bz2; '*' for all]")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Skip files whose name or relative path matches; repeatable.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Worker processes [default: the CPU count].")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the rows to FILE: .csv, .parquet, .json, .jsonl or .md by extension; .sarif, or any name "
                   "with --format sarif|github|junit: that document instead of stdout.")
@click.option("--state", "state_path", type=click.Path(dir_okay=False), default=None,
              help="Remember what was scanned in FILE: re-scans read only new or changed files.")
@click.option("--max-bytes", type=BYTES, default=DEFAULT_MAX_BYTES, show_default=True,
              help="Per file: stop after this many decompressed bytes (decompression bombs) → an error row.")
@click.option("--format", "fmt_out", type=click.Choice(["table", "json", "jsonl", "csv", "markdown", *CI_FORMATS]), default="table",
              show_default=True, help="stdout: summary tables, or every row as JSON / JSON lines / CSV / Markdown; for CI: "
                                      "sarif, github (workflow annotations), junit (one test case per file).")
@click.option("--progress/--no-progress", default=None, help="Progress bar [default: when stderr is a terminal].")
@click.option("--group-by", type=click.Choice(GROUP_BY), default=None,
              help="Add a 'deployment' column: the PD deployment each file belongs to, grouped as `kvlogdiag deployment --group-by`.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Also write one self-contained HTML page over the whole archive (charts with the 'charts' extra).")
@window_options
@click.option("--engine", type=click.Choice(["local", "dask"]), default="local", show_default=True,
              help="Where the per-file work runs: local processes, or a Dask cluster (pip install 'kvlogdiag[dask]').")
@click.option("--scheduler", metavar="ADDRESS", default=None,
              help="--engine dask: the scheduler to use (tcp://host:8786) [default: a local cluster of -j workers].")
@rule_options
@output_options(with_output=False)
def scan(paths: tuple[str, ...], include: tuple[str, ...], exclude: tuple[str, ...], jobs: int | None,
         output: str | None, state_path: str | None, max_bytes: int, fmt_out: str, progress: bool | None,
         group_by: str | None = None, html_path: str | None = None, quiet: bool = False, statistics: bool = False,
         engine: str = "local", scheduler: str | None = None, **kw: Any) -> ExitCode:
    """Scan an archive of logs (folders, globs, compressed files): one row per server start of each file, summaries, --output.

    \b
    kvlogdiag scan /var/log/vllm/ -o runs.parquet
    kvlogdiag scan 'archive/**/*.gz' --state ~/.cache/kvlogdiag-scan.json -j 8
    kvlogdiag scan s3://bucket/vllm/ --engine dask --scheduler tcp://10.0.0.5:8786

    Exit: 0, or 1 when a finding reaches --fail-on; 2 when a path argument does not exist, the
    options are bad, or -o/--state cannot be written (the previous file is then kept). Files that cannot be read are rows with 'error' set, not exit 2.
    """
    t0 = time.monotonic()
    fmt: str | None = None
    ci_output: str | None = None  # -o gets the SARIF / GitHub / JUnit document
    if output and fmt_out == "table" and os.path.splitext(output)[1].lower() == ".sarif":
        fmt_out = "sarif"
    if output and fmt_out in CI_FORMATS:
        ci_output, output = output, None
    problem = statistics_format_error(fmt_out, statistics) or check_target(ci_output)
    if problem:
        err(problem)
        return ExitCode.ERROR
    if output:
        ext = os.path.splitext(output)[1].lower()
        fmt = OUTPUT_FORMATS.get(ext)
        if fmt is None:
            err(f"--output {output}: unknown extension {ext or '(none)'}; use .csv, .parquet, .json, .jsonl or .md")
            return ExitCode.ERROR
        if fmt == "parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                err("writing Parquet needs pyarrow: pip install 'kvlogdiag[parquet]' (or use .csv/.json)")
                return ExitCode.ERROR
    scan_mode.PANDAS_AFTER = fmt_out == "csv" or (bool(output) and fmt in ("csv", "parquet"))
    for what, target in (("--output", output), ("--state", state_path), ("--html", html_path)):
        if target:  # found out before the scan, not after it (the rows would be lost)
            where = os.path.dirname(os.path.abspath(target))
            if not os.path.isdir(where):
                err(f"{what} {target}: the folder {where} does not exist")
                return ExitCode.ERROR
            if not os.access(where, os.W_OK | os.X_OK):
                err(f"{what} {target}: the folder {where} is not writable")
                return ExitCode.ERROR
            if os.path.isdir(target):
                err(f"{what} {target}: is a folder")
                return ExitCode.ERROR
    if scheduler and engine != "dask":
        err("--scheduler needs --engine dask")
        return ExitCode.ERROR
    if engine == "dask":
        try:
            import distributed  # noqa: F401
        except ImportError:
            err("--engine dask needs dask.distributed: pip install 'kvlogdiag[dask]'")
            return ExitCode.ERROR
    analyzer = build_analyzer(kw, paths)
    window = install_window(analyzer, kw)
    analyzer.timelines = bool(html_path)
    opts = analyzer.options

    state: dict | None = None
    fp = ""  # the options' fingerprint, with --state
    if state_path:
        try:
            state = load_state(state_path)
        except StateError as exc:
            err(str(exc))
            return ExitCode.ERROR
        fp = fingerprint(analyzer, max_bytes)

    finder = Finder(include, exclude)
    arg_of: dict[str, str] = {}  # a row's source → the PATH it was found under (--group-by)
    for p in paths:
        seen = len(finder.entries)
        if _URL_LIKE.match(p):  # s3://, gs://, az://, https://, file://: kvlogdiag.input.remote (fsspec)
            from kvlogdiag.input.remote import RemoteError, add_url

            try:
                add_url(finder, p)
            except RemoteError as exc:
                err(str(exc))
                return ExitCode.ERROR
        else:
            finder.add_argument(p)
        arg_of.update((e.source, p) for e in finder.entries[seen:])
    for m in finder.missing:
        err(f"{m}: no such file or directory")
    entries = finder.entries

    # what must be read, what comes from the state
    rows: dict[str, list[dict]] = {}  # abspath → its rows (one per run)
    todo: list[Entry] = []
    cached = 0
    old_files = (state or {}).get("files", {})
    same_fp = state is not None and state.get("fingerprint") == fp
    for e in entries:
        if e.error is not None:
            rows[e.abspath] = [empty_row(e.source, e.error)]
            continue
        if state is not None:
            if _URL_LIKE.match(e.abspath):
                from kvlogdiag.input.remote import state_head

                e.head = state_head(e)  # type: ignore[arg-type]
            else:
                e.head = head_hash(e.abspath)
            prev = old_files.get(e.abspath)
            if (same_fp and prev and e.head is not None and prev.get("size") == e.size and prev.get("mtime_ns") == e.mtime_ns
                    and prev.get("head") == e.head and isinstance(prev.get("rows"), list)
                    and all(isinstance(r, dict) for r in prev["rows"]) and prev["rows"]
                    and not (group_by and _lacks_peer(prev["rows"]))
                    and (not html_path or _cached_details(prev))):
                rows[e.abspath] = [dict(r, source=e.source) for r in prev["rows"]]
                if html_path:  # the page's run details were kept with the rows
                    for r, d in zip(rows[e.abspath], prev["details"]):
                        r[DETAIL_KEY] = d
                cached += 1
                continue
        todo.append(e)
    by_path = {e.abspath: e for e in entries}

    new_state_files: dict[str, dict] = {}
    if state is not None and same_fp:
        for path, rec in old_files.items():
            if path in rows and path in by_path and by_path[path].error is None:
                new_state_files[path] = rec  # unchanged

    def remember(e: Entry, file_rows: list[dict]) -> None:
        if state is not None and all(r.get("error") is None for r in file_rows):
            rec: dict[str, Any] = {"size": e.size, "mtime_ns": e.mtime_ns, "head": e.head,
                                   "rows": [{k: v for k, v in r.items() if k != DETAIL_KEY} for r in file_rows]}
            if html_path:
                rec["details"] = [r.get(DETAIL_KEY) for r in file_rows]
            new_state_files[e.abspath] = rec

    checkpoint_failed: list[str] = []

    def checkpoint() -> None:
        """Progress so far, merged into the previous state (nothing dropped yet): a killed scan resumes."""
        if not state_path:
            return
        merged = dict(old_files) if same_fp else {}
        merged.update(new_state_files)
        try:
            save_state(state_path, fp, merged)
        except OSError as exc:  # the scan goes on; the final save reports it and exits 2
            if not checkpoint_failed:
                err(f"{state_path}: cannot write the state checkpoint ({exc.strerror or exc}); the previous state is kept")
            checkpoint_failed.append(str(exc))

    rule_errors: list[str] = []
    show = progress if progress is not None else _stderr_tty()
    njobs = jobs or _default_jobs()
    terminated = _on_sigterm_interrupt()
    try:
        interrupted = _run(todo, analyzer, max_bytes, njobs, show, rows, remember, rule_errors, checkpoint, engine, scheduler)
    except Exception as exc:  # noqa: BLE001 - the dask engine: no cluster to run on (nothing was scanned)
        from kvlogdiag.modes.scan_dask import DaskUnavailable

        if engine != "dask" or not isinstance(exc, DaskUnavailable):
            raise
        err(str(exc))
        return ExitCode.ERROR
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    if interrupted:
        checkpoint()
        how = "terminated (SIGTERM)" if terminated else "interrupted"
        err(f"{how}; state saved" if state_path else how)
        return ExitCode.TERMINATED if terminated else ExitCode.INTERRUPTED

    for msg in dict.fromkeys(rule_errors):
        click.echo(f"kvlogdiag: rule error: {escape_controls(msg)}", err=True)

    state_failed = False
    ordered = [row for e in sorted(entries, key=lambda e: e.source) for row in rows[e.abspath]]
    ordered = deployment_column(ordered, arg_of, group_by) if group_by else [
        {k: v for k, v in r.items() if k != "deployment"} for r in ordered]
    dropped = 0
    if state is not None and state_path:
        dropped = sum(1 for p in old_files if p not in by_path)
        if finder.missing:
            err("a path argument does not exist: the state file is left unchanged")
        else:
            try:
                save_state(state_path, fp, new_state_files)
            except OSError as exc:
                err(f"{state_path}: cannot write the state ({exc.strerror or exc}); the previous state is kept")
                state_failed = True

    if output and fmt:
        try:
            write_output(output, fmt, ordered)
        except OSError as exc:
            err(f"{output}: cannot write ({exc.strerror or exc})")
            return ExitCode.ERROR
        except ImportError as exc:
            err(f"{output}: {exc}")
            return ExitCode.ERROR

    if html_path:
        from kvlogdiag.modes.archive_report import render_html

        info = {"files": len(entries), "unreadable": sum(1 for r in ordered if r.get("error")), "paths": list(paths),
                "window": (f"{window.since_text or 'start'} to {window.until_text or 'end'}" if window is not None else None)}
        try:
            write_atomic(html_path, render_html(ordered, analyzer.rules.by_code(), info))
        except OSError as exc:
            err(f"{html_path}: cannot write ({exc.strerror or exc})")
            return ExitCode.ERROR
        click.echo(f"kvlogdiag: wrote {html_path}", err=True)
    outside = sum(1 for e in entries if e.error is None and not rows.get(e.abspath))
    if window is not None and outside:
        click.echo(f"kvlogdiag: {outside} file(s) have no server start in the --since/--until window", err=True)

    if finder.missing or state_failed or (opts.strict_rules and rule_errors):
        code = ExitCode.ERROR
    else:
        code = ExitCode(fail_exit_rows(ordered, opts.fail_on))
    if statistics or fmt_out in CI_FORMATS:
        logs = logs_from_rows(ordered, opts.min_severity)
        text = statistics_text(logs, fmt_out) if statistics else \
            ci_text(fmt_out, logs, [rule_info(r) for r in analyzer.rules.rules], opts.fail_on, "scan", code)
    elif fmt_out == "table":
        counts = {"analysed": len(todo), "cached": cached, "dropped": dropped}
        text = summary_tables(ordered, analyzer.rules.by_code(), time.monotonic() - t0, counts)
    else:
        text = render_rows(fmt_out, ordered)
    code = finish(Output(ci_output, quiet), text, code)
    if state_path and not quiet:
        click.echo(f"kvlogdiag: state: {len(todo):,} read, {cached:,} unchanged, {dropped:,} dropped", err=True)
    return code


def _lacks_peer(rows: list[dict]) -> bool:
    """A state row of an older kvlogdiag has no ``deployment_peer``: with --group-by its file is read again."""
    return any(r.get("error") is None and "deployment_peer" not in r for r in rows)


def _cached_details(prev: dict) -> bool:
    """The state record holds valid run details for each row (else the file is read again for --html)."""
    from kvlogdiag.modes.archive_report import valid_detail

    ds = prev.get("details")
    return isinstance(ds, list) and len(ds) == len(prev["rows"]) and all(valid_detail(d) for d in ds)


def _on_sigterm_interrupt() -> list[bool]:
    """SIGTERM ends the scan like Ctrl-C (the checkpoint is written, the workers are ended), exit 143."""
    seen = scan_mode.STOP_REQUESTED
    seen.clear()

    def handler(signum, frame):
        seen.append(True)  # the scan loops stop at their next file or batch

    signal.signal(signal.SIGTERM, handler)
    return seen
