"""``kvlogdiag deployment``: the logs of a P/D deployment judged together (the work is in modes/deployment.py)."""

from __future__ import annotations

import json
from typing import Any

import click

from kvlogdiag import __version__
from kvlogdiag.cli.common import BYTES, build_analyzer, err, report_rule_errors, rule_options
from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.input.reader import DEFAULT_MAX_BYTES, InputError
from kvlogdiag.modes.deployment import GROUP_BY, Workload, deployments_from_logs, render_text
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


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--avg-output-len", type=click.IntRange(min=1), default=None,
              help="Average output length in tokens (with --avg-prompt-len: the D/P capacity figures).")
@click.option("--group-by", type=click.Choice(GROUP_BY), default="auto", show_default=True,
              help="How logs are split into deployments: auto (connector peers and model within each PATH), dir (one per PATH), model, all.")
@click.option("--host-ram-gib", type=click.FloatRange(min=0, min_open=True), default=None,
              help="RAM of each host, GiB: compared with the pinned offload buffers of the ranks on it.")
@click.option("--max-bytes", type=BYTES, default=DEFAULT_MAX_BYTES, show_default=True,
              help="Stop reading a log after this many (decompressed) bytes.")
@rule_options
def deployment(paths: tuple[str, ...], fmt: str, avg_output_len: int | None, group_by: str, host_ram_gib: float | None,
               max_bytes: int, **kw: Any) -> ExitCode:
    """Judge the logs of a PD deployment together: P and D nodes, DP groups, hosts.

    PATH is a log, a directory (read recursively) or a glob. Prints one row per log and the findings
    of the deployment rules (KVD101...): what P and D must agree on, the declared peer layout, kv_role
    pairing, offload connectors per side, D/P capacity at --avg-prompt-len/--avg-output-len, pinned
    host memory per host, versions. Exit 1 when a deployment finding reaches --fail-on."""
    rules = load_deployment_rules()  # built-in only: a --rules folder holds single-log rules (engine.py loads every *.toml)
    mine = _split_specs(kw, {r.name for r in rules.rules}, [r.code for r in rules.rules])
    analyzer = build_analyzer(kw)
    opts = analyzer.options
    select = mine["select"] or ([] if not mine["extend_select"] else [r.code for r in rules.rules])
    rules = rules.selected(select + mine["extend_select"], mine["ignore"] + mine["extend_ignore"])
    workload = Workload(opts.avg_prompt_len, avg_output_len, host_ram_gib)
    errors: list[str] = []
    try:
        deps = deployments_from_logs(paths, analyzer, workload, group_by, max_bytes, rules, errors)
    except InputError as exc:
        err(str(exc))
        return ExitCode.ERROR
    except RuleLoadError as exc:
        err(str(exc))
        return ExitCode.ERROR
    if not deps or not any(d.nodes for d in deps):
        err(f"no logs found in {', '.join(paths)}")
        return ExitCode.ERROR
    fatal = report_rule_errors(analyzer)
    for e in errors:
        click.echo(f"kvlogdiag: rule error: {e}", err=True)
    if fmt == "json":
        click.echo(json.dumps({"tool": "kvlogdiag", "version": __version__,
                               "deployments": [d.to_json(opts.min_severity) for d in deps]}, indent=2, ensure_ascii=False))
    else:
        click.echo(render_text(deps, opts.min_severity), nl=False)
    if fatal or (errors and opts.strict_rules):
        return ExitCode.ERROR
    limit = Severity.threshold(opts.fail_on)
    return ExitCode.FINDINGS if any(f.severity >= limit for d in deps for f in d.findings) else ExitCode.OK
