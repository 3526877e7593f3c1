"""``kvlogdiag report``: the command line of the report mode (the document is built by `kvlogdiag.modes.report`)."""

from __future__ import annotations

from typing import Any

import click

from kvlogdiag.cli.common import BYTES, build_analyzer, err, fail_exit, report_rule_errors, rule_options, truncated_exit
from kvlogdiag.cli.exit import ExitCode
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
@click.argument("source", required=False, metavar="[FILE|-]")
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
@rule_options
def report(source: str | None, clipboard: bool, fmt: str, output: str | None, redact: bool, run: str, max_bytes: int,
           container: str | None = None, **kw: Any) -> ExitCode:
    """Turn one log (FILE, - or a paste on stdin, or --clipboard) into a report for an issue.

    \b
    kvlogdiag report server.log > issue.md
    kvlogdiag report                      paste, then Ctrl-D
    kvlogdiag report --clipboard --format html -o report.html
    kvlogdiag report --run all restarted.log   one section per server start
    """
    if clipboard and source is not None:
        err("give a FILE or --clipboard, not both")
        return ExitCode.ERROR
    analyzer = build_analyzer(kw)
    opts = analyzer.options
    try:
        result = read_input(analyzer, source, clipboard, max_bytes, lambda msg: click.echo(msg, err=True), container)
        text, shown = make_report(result, run, fmt, redact, opts.min_severity)
    except (InputError, ReportError, RuleLoadError) as exc:  # RuleLoadError: --strict-rules
        err(str(exc))
        return ExitCode.ERROR
    fatal = report_rule_errors(analyzer)
    if output:
        try:
            with open(output, "w", encoding="utf-8", newline="\n") as fp:
                fp.write(escape_controls(text))  # as on stdout: the file is read in a terminal too
        except OSError as exc:
            err(f"{output}: cannot write ({exc.strerror or exc})")
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
