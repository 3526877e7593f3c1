"""``kvlogdiag analyze``: figures and findings for one or more logs, per server start."""

from __future__ import annotations

import sys
from typing import Any, Callable

import click

from kvlogdiag.cli.common import BYTES, build_analyzer, err, fail_exit, report_rule_errors, rule_options, truncated_exit
from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.input.reader import DEFAULT_MAX_BYTES, InputError
from kvlogdiag.render.analysis import render_json, render_markdown, render_text
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
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("--max-bytes", type=BYTES, default=DEFAULT_MAX_BYTES, show_default=True,
              help="Stop reading an input after this many (decompressed) bytes: guards against decompression bombs.")
@run_option
@rule_options
def analyze(inputs: tuple[str, ...], fmt: str, max_bytes: int, run: str | None, **kw: Any) -> ExitCode:
    """Analyse one or more logs (paths or - for stdin; gzip/bz2/xz/zstd detected automatically).

    A log with several server starts (a restarted server appending to its log) is analysed per
    start: each figure and finding belongs to one run. Interleaved output of several containers
    (docker compose logs, kubectl logs --prefix) is analysed per container."""
    if not inputs and sys.stdin.isatty():
        err("no input: give a log file, or pipe one in (kvlogdiag analyze - < server.log)")
        return ExitCode.ERROR
    analyzer = build_analyzer(kw)
    opts = analyzer.options
    results = []
    failed: list[str] = []
    for src in inputs or ("-",):
        try:
            results.extend(analyzer.analyze_source_split(src, max_bytes))  # one per container
        except InputError as exc:
            err(str(exc))
            failed.append(str(exc))
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
    if fmt == "json":
        click.echo(render_json([r.to_json(run or "last", opts.min_severity) for r in results]))
    elif fmt == "markdown":
        click.echo(render_markdown(shown, opts.min_severity), nl=False)
    else:
        click.echo(render_text(shown, opts.min_severity), nl=False)
    if failed or fatal:
        return ExitCode.ERROR
    return truncated_exit(fail_exit(shown, opts.fail_on), any(a.extra.get("truncated") for r in results for a in r.runs))
