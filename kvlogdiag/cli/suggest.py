"""``kvlogdiag suggest LOG``: the command line of the suggest mode (`kvlogdiag.modes.suggest` builds it)."""

from __future__ import annotations

import json
from typing import Any

import click

from kvlogdiag.cli.common import build_analyzer, err, fail_exit, report_rule_errors, rule_options
from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.cli.output import Output, check_target, finish, output_options
from kvlogdiag.input.reader import DEFAULT_MAX_BYTES, InputError
from kvlogdiag.modes.diff import DiffError, parse_side, select_run
from kvlogdiag.modes.suggest import build_suggestion, render_markdown, render_text
from kvlogdiag.rules.engine import RuleLoadError


@click.command("suggest")
@click.argument("source", metavar="LOG")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True,
              help="text for a terminal, json, markdown for a PR or an issue.")
@click.option("--max-bytes", type=click.IntRange(min=1), default=DEFAULT_MAX_BYTES, show_default=True,
              help="Stop reading after this many (decompressed) bytes.")
@output_options(with_statistics=False)
@rule_options
def suggest(source: str, fmt: str, max_bytes: int, output: str | None, quiet: bool, **kw: Any) -> ExitCode:
    """The server's launch command rebuilt from LOG, with each finding's fix applied (one setting each).

    LOG@N picks a server start of a restarted log (N = 1 for the first); default: the current one.
    --p99-len and --avg-prompt-len give the rules the workload figures the log cannot show.
    Exit 1 when LOG has a finding at or above --fail-on (default: error), as analyze.

    \b
    kvlogdiag suggest server.log
    kvlogdiag suggest server.log --p99-len 16384 --format markdown
    """
    problem = check_target(output)
    if problem:
        err(problem)
        return ExitCode.ERROR
    analyzer = build_analyzer(kw, inputs=tuple(p.rsplit("@", 1)[0] for p in [source]))
    try:
        path, which = parse_side(source)
        a = select_run(analyzer.analyze_source(path, max_bytes), which)
    except (InputError, DiffError, RuleLoadError) as exc:
        err(str(exc))
        return ExitCode.ERROR
    if report_rule_errors(analyzer):
        return ExitCode.ERROR
    doc = build_suggestion(a)
    if fmt == "json":
        text = json.dumps({"tool": "kvlogdiag", "kind": "suggest", **doc}, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    elif fmt == "markdown":
        text = render_markdown(doc)
    else:
        text = render_text(doc)
    return finish(Output(output, quiet), text, fail_exit([a], analyzer.options.fail_on))
