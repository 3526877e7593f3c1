"""``kvlogdiag report``: the command line of the report mode (the document is built by `kvlogdiag.modes.report`)."""

from __future__ import annotations

import os
from typing import Any

import click

from kvlogdiag.cli.common import BYTES, build_analyzer, err, fail_exit, report_rule_errors, rule_options, truncated_exit
from kvlogdiag.cli.deployment import deployment_options, load_deployments
from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.cli.output import check_target
from kvlogdiag.cli.timewindow import install_window, window_given, window_options
from kvlogdiag.fileio import write_atomic
from kvlogdiag.input.reader import DEFAULT_MAX_BYTES, InputError
from kvlogdiag.modes.report import ReportError, make_report, read_input
from kvlogdiag.render.redact import escape_controls
from kvlogdiag.rules.engine import RuleLoadError

RUN_HELP = ("Which server start of the log: last (the current one), first, a run number (1 = first), "
            "or all (one section per run, newest first).")


def _check_run(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value in ("last", "first", "all") or (value.isdigit() and int(value) >= 1):
        return value
    raise click.BadParameter(f"{value!r}: use last, first, all or a run number (1, 2, ...)")


@click.command("report")
@click.argument("sources", nargs=-1, metavar="[FILE|-|PATH...]")
@click.option("--clipboard", is_flag=True, help="Read the log from the clipboard (needs the optional pyperclip package).")
@click.option("--format", "fmt", type=click.Choice(["markdown", "html"]), default="markdown", show_default=True,
              help="markdown: paste into a GitHub issue; html: one self-contained page with charts.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write the report here [default: stdout].")
@click.option("--redact/--no-redact", default=True, show_default=True,
              help="Mask host names, IPs, home-directory user names, API keys, HF tokens and e-mails.")
@click.option("--run", "run", default="last", show_default=True, metavar="last|first|N|all", callback=_check_run,
              help=RUN_HELP)
@click.option("--max-bytes", type=BYTES, default=DEFAULT_MAX_BYTES, show_default=True,
              help="Stop reading after this many (decompressed) bytes.")
@click.option("--container", default=None, metavar="NAME",
              help="Of an interleaved multi-container log (docker compose logs), the container to report.")
@click.option("--deployment", "as_deployment", is_flag=True,
              help="Report the logs as one PD deployment (several files or a folder imply it): docs/deployment.md.")
@deployment_options
@window_options
@rule_options
def report(sources: tuple[str, ...], clipboard: bool, fmt: str, output: str | None, redact: bool, run: str, max_bytes: int,
           container: str | None = None, as_deployment: bool = False, avg_output_len: int | None = None,
           group_by: str | None = None, host_ram_gib: float | None = None, **kw: Any) -> ExitCode:
    """Turn one log (FILE, - or a paste on stdin, or --clipboard) into a report for an issue.

    \b
    kvlogdiag report server.log > issue.md
    kvlogdiag report                      paste, then Ctrl-D
    kvlogdiag report --clipboard --format html -o report.html
    kvlogdiag report --run all restarted.log   one section per server start
    kvlogdiag report p0.log d0.log --format html -o pd.html   a P/D deployment
    """
    if as_deployment or len(sources) > 1 or (sources and os.path.isdir(sources[0])):
        if clipboard or "-" in sources or not sources:
            err("a deployment report reads the logs' paths (files, folders, globs), not stdin or the clipboard")
            return ExitCode.ERROR
        if container is not None or run != "last":
            err("a deployment report takes each log's current server start: --run and --container do not apply")
            return ExitCode.ERROR
        windowed = window_given(kw)
        if windowed:
            err(f"{windowed}: not for a deployment report (each log's current server start is judged whole)")
            return ExitCode.ERROR
        return _deployment_report(sources, fmt, output, redact, max_bytes, kw, avg_output_len, group_by, host_ram_gib)
    given = [name for name, v in (("--avg-output-len", avg_output_len), ("--group-by", group_by),
                                  ("--host-ram-gib", host_ram_gib)) if v is not None]
    if given:
        err(f"{', '.join(given)}: only for a deployment (--deployment, several files or a folder)")
        return ExitCode.ERROR
    source = sources[0] if sources else None
    if clipboard and source is not None:
        err("give a FILE or --clipboard, not both")
        return ExitCode.ERROR
    analyzer = build_analyzer(kw, [source] if source else [])
    install_window(analyzer, kw)
    problem = check_target(output)
    if problem:
        err(problem)
        return ExitCode.ERROR
    opts = analyzer.options
    try:
        result = read_input(analyzer, source, clipboard, max_bytes, lambda msg: click.echo(msg, err=True), container)
        text, shown = make_report(result, run, fmt, redact, opts.min_severity)
    except (InputError, ReportError, RuleLoadError) as exc:  # RuleLoadError: --strict-rules
        err(str(exc))
        return ExitCode.ERROR
    fatal = report_rule_errors(analyzer)
    if output:
        try:  # atomically: a failed write leaves the previous report whole
            write_atomic(output, escape_controls(text))  # as on stdout: the file is read in a terminal too
        except OSError as exc:
            err(f"{output}: cannot write ({exc.strerror or exc}); the previous file is kept")
            return ExitCode.ERROR
        click.echo(f"kvlogdiag: wrote {output}", err=True)
    else:
        click.echo(text, nl=False)
    if fatal:
        return ExitCode.ERROR
    cut = result.current.extra.get("truncated")
    if cut:
        click.echo(f"kvlogdiag: {escape_controls(result.source)}: truncated: {cut['message']}", err=True)
    return truncated_exit(fail_exit(shown, opts.fail_on), bool(cut))


def _write(text: str, output: str | None) -> bool:
    """The report to ``output`` (a file, as on stdout: control characters escaped) or stdout; False when it cannot."""
    if not output:
        click.echo(text, nl=False)
        return True
    try:  # atomically: a failed write leaves the previous report whole
        write_atomic(output, escape_controls(text))
    except OSError as exc:
        err(f"{output}: cannot write ({exc.strerror or exc}); the previous file is kept")
        return False
    click.echo(f"kvlogdiag: wrote {output}", err=True)
    return True


def _deployment_report(sources: tuple[str, ...], fmt: str, output: str | None, redact: bool, max_bytes: int,
                       kw: dict[str, Any], avg_output_len: int | None, group_by: str | None,
                       host_ram_gib: float | None) -> ExitCode:
    """``report`` on a P/D deployment: the grouping and result of ``kvlogdiag deployment`` (render/deployment.py)."""
    from kvlogdiag.render.deployment import make_report as deployment_report
    from kvlogdiag.result import Severity

    problem = check_target(output)
    if problem:
        err(problem)
        return ExitCode.ERROR
    try:
        deps, analyzer, errors, fatal = load_deployments(sources, kw, avg_output_len, group_by, host_ram_gib, max_bytes)
    except (InputError, RuleLoadError) as exc:
        err(str(exc))
        return ExitCode.ERROR
    opts = analyzer.options
    text = deployment_report(deps, fmt, redact, opts.min_severity, ", ".join(sources))
    if not _write(text, output) or fatal or (errors and opts.strict_rules):
        return ExitCode.ERROR
    limit = Severity.threshold(opts.fail_on)
    return ExitCode.FINDINGS if any(f.severity >= limit for d in deps for f in d.findings) else ExitCode.OK
