"""``kvlogdiag diff BEFORE AFTER``: the command line of the diff mode (`kvlogdiag.modes.diff` compares)."""

from __future__ import annotations

import json
from typing import Any

import click

from kvlogdiag.cli.common import build_analyzer, err, fail_exit, report_rule_errors, rule_options
from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.cli.output import Output, check_target, finish, output_options
from kvlogdiag.cli.timewindow import install_window, window_options
from kvlogdiag.input.reader import DEFAULT_MAX_BYTES, InputError
from kvlogdiag.modes.diff import DiffError, compare, parse_side, render_markdown, render_text, select_run
from kvlogdiag.rules.engine import RuleLoadError


@click.command("diff")
@click.argument("before", metavar="BEFORE")
@click.argument("after", metavar="AFTER")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True,
              help="text for a terminal, json (docs/diff.schema.json), markdown for a PR or an issue.")
@click.option("--max-bytes", type=click.IntRange(min=1), default=DEFAULT_MAX_BYTES, show_default=True,
              help="Stop reading each input after this many (decompressed) bytes.")
@output_options(with_statistics=False)
@window_options
@rule_options
def diff(before: str, after: str, fmt: str, max_bytes: int, output: str | None, quiet: bool, **kw: Any) -> ExitCode:
    """Compare two server starts: the settings that changed, the KV figures, the stats, the findings.

    BEFORE and AFTER are logs, or runs of one log: FILE@N (N = 1 for the first start), FILE@first,
    FILE@last; a plain FILE is its current (last) start. Exit 1 when AFTER has a finding at or above
    --fail-on (default: error), as analyze.

    \b
    kvlogdiag diff baseline.log tuned.log
    kvlogdiag diff server.log@1 server.log@2 --format markdown > pr-comment.md
    """
    problem = check_target(output)
    if problem:
        err(problem)
        return ExitCode.ERROR
    analyzer = build_analyzer(kw, inputs=tuple(p.rsplit("@", 1)[0] for p in [before, after]))
    install_window(analyzer, kw)  # --since/--until: both sides' runtime figures cover the window
    sides = []
    try:
        cache: dict[str, Any] = {}
        for spec in (before, after):
            path, which = parse_side(spec)
            if path not in cache:
                cache[path] = analyzer.analyze_source(path, max_bytes)
            sides.append(select_run(cache[path], which))
    except (InputError, DiffError, RuleLoadError) as exc:
        err(str(exc))
        return ExitCode.ERROR
    if report_rule_errors(analyzer):
        return ExitCode.ERROR
    doc = compare(sides[0], sides[1], analyzer.options.min_severity)
    if fmt == "json":
        text = json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    elif fmt == "markdown":
        text = render_markdown(doc)
    else:
        text = render_text(doc)
    return finish(Output(output, quiet), text, fail_exit([sides[1]], analyzer.options.fail_on))  # AFTER is the server as it is now
