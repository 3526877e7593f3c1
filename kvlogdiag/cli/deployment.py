"""``kvlogdiag deployment``: the logs of a P/D deployment judged together (the work is in modes/deployment.py)."""

from __future__ import annotations

import json
from typing import Any

import click

from kvlogdiag import __version__
from kvlogdiag.cli.common import BYTES, build_analyzer, err, report_rule_errors, rule_options, truncated_exit
from kvlogdiag.cli.deployment_options import deployment_options  # noqa: F401 - re-exported
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
from kvlogdiag.deployment_result import Deployment
from kvlogdiag.input.reader import DEFAULT_MAX_BYTES, InputError
from kvlogdiag.modes.deployment import Workload, deployments_from_logs, render_text
from kvlogdiag.render.ci import logs_from_deployments, rule_info
from kvlogdiag.render.colour import style_text
from kvlogdiag.render.redact import escape_controls
from kvlogdiag.result import Severity
from kvlogdiag.rules.deployment_rules import load_deployment_rules
from kvlogdiag.rules.engine import RuleLoadError

SPEC_KEYS = ("select", "extend_select", "ignore", "extend_ignore")


def _split_specs(kw: dict[str, Any], names: set[str], codes: list[str]) -> dict[str, list[str]]:
    """Take the rule specs that name deployment rules out of ``kw`` (the rest select single-log rules)."""
    mine: dict[str, list[str]] = {}
    for key in SPEC_KEYS:
        specs = [s.strip() for v in kw.get(key) or () for s in v.split(",") if s.strip()]
        dep = [s for s in specs if s.lower() in names or (s.upper().startswith("KVD1") and any(c.startswith(s.upper()) for c in codes))]
        mine[key] = dep
        kw[key] = tuple(s for s in specs if s not in dep)
    return mine


def load_deployments(paths: tuple[str, ...], kw: dict[str, Any], avg_output_len: int | None, group_by: str | None,
                     host_ram_gib: float | None, max_bytes: int) -> tuple[list[Deployment], Any, list[str], bool]:
    """Analyse and group the logs as ``deployment`` does: (deployments, analyzer, rule errors, fatal).

    Raises `InputError` / `RuleLoadError` (exit 2) and `click.UsageError` for no logs at all."""
    rules = load_deployment_rules()  # built-in only: a --rules folder holds single-log rules (engine.py loads every *.toml)
    mine = _split_specs(kw, {r.name for r in rules.rules}, [r.code for r in rules.rules])
    analyzer = build_analyzer(kw, paths)
    opts = analyzer.options
    select = mine["select"] or ([] if not mine["extend_select"] else [r.code for r in rules.rules])
    rules = rules.selected(select + mine["extend_select"], mine["ignore"] + mine["extend_ignore"])
    workload = Workload(opts.avg_prompt_len, avg_output_len, host_ram_gib)
    errors: list[str] = []
    deps = deployments_from_logs(paths, analyzer, workload, group_by or "auto", max_bytes, rules, errors)
    if not deps or not any(d.nodes for d in deps):
        raise InputError(f"no logs found in {', '.join(paths)}")
    fatal = report_rule_errors(analyzer)
    for e in errors:
        click.echo(f"kvlogdiag: rule error: {e}", err=True)
    return deps, analyzer, errors, fatal


def deployment_json(deps: list[Deployment], min_severity: str) -> str:
    """The ``--format json`` document of ``deployment`` (docs/deployment.schema.json)."""
    return json.dumps({"tool": "kvlogdiag", "version": __version__,
                       "deployments": [d.to_json(min_severity) for d in deps]}, indent=2, ensure_ascii=False)


def run_deployment(paths: tuple[str, ...], fmt: str, kw: dict[str, Any], avg_output_len: int | None,
                   group_by: str | None, host_ram_gib: float | None, max_bytes: int, output: str | None = None,
                   quiet: bool = False, statistics: bool = False) -> ExitCode:
    """``deployment`` and ``analyze --deployment``: one grouping, one result, text / json / markdown / CI formats."""
    if fmt not in ("text", "json", "markdown", *CI_FORMATS):  # analyze may offer formats of single-log analyses only
        err(f"--format {fmt}: a deployment prints text, json, markdown, sarif, github or junit")
        return ExitCode.ERROR
    problem = statistics_format_error(fmt, statistics) or check_target(output)
    if problem:
        err(problem)
        return ExitCode.ERROR
    try:
        deps, analyzer, errors, fatal = load_deployments(paths, kw, avg_output_len, group_by, host_ram_gib, max_bytes)
    except (InputError, RuleLoadError) as exc:
        err(str(exc))
        return ExitCode.ERROR
    opts = analyzer.options
    limit = Severity.threshold(opts.fail_on)
    if fatal or (errors and opts.strict_rules):
        code = ExitCode.ERROR
    else:
        code = ExitCode.FINDINGS if any(f.severity >= limit for d in deps for f in d.findings) else ExitCode.OK
    cut = [(n, n.truncated) for d in deps for n in d.nodes if n.truncated]
    for n, note in cut:
        click.echo(f"kvlogdiag: {escape_controls(n.source or n.name)}: truncated: {note['message']}", err=True)
    code = truncated_exit(code, bool(cut))
    colour = None
    if statistics or fmt in CI_FORMATS:
        logs = logs_from_deployments(deps, opts.min_severity)
        text = statistics_text(logs, fmt) if statistics else \
            ci_text(fmt, logs, [rule_info(r) for r in load_deployment_rules().rules], opts.fail_on, "deployment", code)
    elif fmt == "json":
        text = deployment_json(deps, opts.min_severity) + "\n"
    elif fmt == "markdown":
        from kvlogdiag.render.deployment import render_markdown

        text = render_markdown(deps, opts.min_severity)
    else:
        text = render_text(deps, opts.min_severity)
        colour = style_text
    return finish(Output(output, quiet), text, code, colour)


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", *CI_FORMATS]), default="text", show_default=True,
              help="text, json, markdown; for CI: sarif, github (workflow annotations), junit (one test case per log).")
@deployment_options
@click.option("--max-bytes", type=BYTES, default=DEFAULT_MAX_BYTES, show_default=True,
              help="Stop reading a log after this many (decompressed) bytes.")
@rule_options
@output_options()
def deployment(paths: tuple[str, ...], fmt: str, avg_output_len: int | None, group_by: str | None,
               host_ram_gib: float | None, max_bytes: int, output: str | None = None, quiet: bool = False,
               statistics: bool = False, **kw: Any) -> ExitCode:
    """Judge the logs of a PD deployment together: P and D nodes, DP groups, hosts.

    PATH is a log, a directory (read recursively) or a glob. Prints one row per log and the findings
    of the deployment rules (KVD101...): what P and D must agree on, the declared peer layout, kv_role
    pairing, offload connectors per side, D/P capacity at --avg-prompt-len/--avg-output-len (or the
    workload the stats lines show), pinned host memory per host, versions. Exit 1 when a deployment
    finding reaches --fail-on. The same as ``analyze --deployment``."""
    return run_deployment(paths, fmt, kw, avg_output_len, group_by, host_ram_gib, max_bytes, output, quiet, statistics)
