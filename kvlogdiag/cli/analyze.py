"""``kvlogdiag analyze``: figures and findings for one or more logs, per server start."""

from __future__ import annotations

import itertools
import os
import sys
from typing import Any, Callable

import click

from kvlogdiag.cli.common import BYTES, build_analyzer, err, fail_exit, report_rule_errors, rule_options, truncated_exit
from kvlogdiag.cli.deployment_options import deployment_options
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
from kvlogdiag.cli.timewindow import install_window, window_given, window_options
from kvlogdiag.input.reader import DEFAULT_MAX_BYTES, InputError
from kvlogdiag.render.analysis import render_markdown, render_text
from kvlogdiag.render.colour import style_text
from kvlogdiag.render.json_stream import render_json_stream
from kvlogdiag.render.summary import summary_text
from kvlogdiag.rules.engine import RuleLoadError

RUN_HELP = ("Which server start of each input: last (the current one), first, a run number (1 = first), or all "
            "[default: all runs for text/markdown, newest first; JSON: the current run, every run under all_runs].")


def run_option(func: Callable) -> Callable:
    return click.option("--run", "run", default=None, metavar="last|first|N|all", callback=_check_run, help=RUN_HELP)(func)


def _check_run(ctx, param, value):
    if value is None or value in ("last", "first", "all") or (value.isdigit() and int(value) >= 1):
        return value
    raise click.BadParameter(f"{value!r}: use last, first, all or a run number (1, 2, ...)")


@click.command()
@click.argument("inputs", nargs=-1, metavar="[FILE|-]...")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", *CI_FORMATS]), default="text", show_default=True,
              help="text, json, markdown; for CI: sarif (code scanning), github (workflow annotations), junit (test report).")
@click.option("--max-bytes", type=BYTES, default=DEFAULT_MAX_BYTES, show_default=True,
              help="Stop reading an input after this many (decompressed) bytes: guards against decompression bombs.")
@run_option
@click.option("--deployment", "as_deployment", is_flag=True,
              help="Judge the inputs as the logs of one PD deployment (files, folders, globs): as `kvlogdiag deployment`.")
@deployment_options
@window_options
@rule_options
@output_options()
def analyze(inputs: tuple[str, ...], fmt: str, max_bytes: int, run: str | None, as_deployment: bool = False,
            avg_output_len: int | None = None, group_by: str | None = None, host_ram_gib: float | None = None,
            output: str | None = None, quiet: bool = False, statistics: bool = False, **kw: Any) -> ExitCode:
    """Analyse one or more logs (paths or - for stdin; gzip/bz2/xz/zstd detected automatically).

    A log with several server starts (a restarted server appending to its log) is analysed per
    start: each figure and finding belongs to one run. Interleaved output of several containers
    (docker compose logs, kubectl logs --prefix) is analysed per container. With --deployment the
    inputs are the logs of a PD deployment, judged together (docs/deployment.md)."""
    if not as_deployment:
        from kvlogdiag.cli.fastexit import allow

        allow()  # output is written whole (stdout or write_atomic), no thread or process remains: no teardown needed
    if as_deployment:  # one code path with `kvlogdiag deployment` (cli/deployment.py)
        windowed = window_given(kw)
        if windowed:
            err(f"{windowed}: not with --deployment (each log's current server start is judged whole)")
            return ExitCode.ERROR
        if run not in (None, "last"):
            err("--deployment judges each log's current server start: --run does not apply")
            return ExitCode.ERROR
        if not inputs or "-" in inputs:
            err("--deployment needs the logs' paths (files, folders or globs), not stdin")
            return ExitCode.ERROR
        from kvlogdiag.cli.deployment import run_deployment

        return run_deployment(inputs, fmt, kw, avg_output_len, group_by, host_ram_gib, max_bytes, output, quiet, statistics)
    given = [name for name, v in (("--avg-output-len", avg_output_len), ("--group-by", group_by),
                                  ("--host-ram-gib", host_ram_gib)) if v is not None]
    if given:
        err(f"{', '.join(given)}: only with --deployment")
        return ExitCode.ERROR
    analyzer = build_analyzer(kw, inputs)
    if not inputs and sys.stdin.isatty():
        err("no input: give a log file, or pipe one in (kvlogdiag analyze - < server.log)")
        return ExitCode.ERROR
    problem = statistics_format_error(fmt, statistics) or check_target(output)
    folders = [src for src in inputs if src != "-" and os.path.isdir(src)]
    if folders:
        problem = (f"{folders[0]}: is a folder; analyze reads log files — for a folder of logs use: "
                   f"kvlogdiag scan {folders[0]} (or analyze --deployment for the logs of one P/D deployment)")
    if problem:
        err(problem)
        return ExitCode.ERROR
    install_window(analyzer, kw)
    opts = analyzer.options
    out = Output(output, quiet)
    results = []
    failed: list[str] = []
    unreadable: list[tuple[str, str]] = []
    for src in inputs or ("-",):
        try:
            results.extend(analyzer.analyze_source_split(src, max_bytes))  # one per container
        except InputError as exc:
            err(str(exc))
            failed.append(str(exc))
            unreadable.append((src, str(exc)))
        except RuleLoadError as exc:  # --strict-rules
            err(str(exc))
            return ExitCode.ERROR
    shown = []
    try:
        for r in results:
            shown.extend(r.select(run or "all"))
    except IndexError as exc:
        err(str(exc))
        return ExitCode.ERROR
    fatal = report_rule_errors(analyzer)
    code = ExitCode.ERROR if failed or fatal else \
        truncated_exit(fail_exit(shown, opts.fail_on), any(a.extra.get("truncated") for r in results for a in r.runs))
    colour = None
    if statistics or fmt in CI_FORMATS:
        from kvlogdiag.render.ci import logs_from_analyses, rule_info  # on use: a small analyze starts faster

        logs = logs_from_analyses(shown, opts.min_severity, unreadable)
        if statistics:
            text = statistics_text(logs, fmt)
        else:
            text = ci_text(fmt, logs, [rule_info(r) for r in analyzer.rules.rules], opts.fail_on, "analyze", code)
    elif fmt == "json":
        # written piece by piece: the same text as render_json, never held whole (render/json_stream.py)
        pieces = render_json_stream([r.to_json(run or "last", opts.min_severity, lazy=True) for r in results])
        return finish(out, itertools.chain(pieces, ("\n",)), code)
    elif fmt == "markdown":
        text = render_markdown(shown, opts.min_severity)
    else:
        text = render_text(shown, opts.min_severity) + summary_text(shown, opts.min_severity, len(inputs or ("-",)))
        colour = style_text
    return finish(out, text, code, colour)
