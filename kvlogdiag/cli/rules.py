"""``kvlogdiag rules | explain | patterns``: the rule set and the log-line catalogue, and docs/rules.md."""

from __future__ import annotations

import json

import click
from tabulate import tabulate

from kvlogdiag.catalogue.patterns import catalogue, catalogue_markdown
from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.cli.output import Output, finish, output_options
from kvlogdiag.rules.deployment_rules import load_deployment_rules
from kvlogdiag.rules.engine import SEVERITY_RANK, RuleSet, load_rules, namespace_markdown, rule_namespace_markdown


@click.command("rules")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
@click.option("--rules", "rule_dirs", multiple=True, type=click.Path(file_okay=False), help="Extra folder of rule files.")
@output_options(with_statistics=False)
def rules_cmd(fmt: str, rule_dirs: tuple[str, ...], output: str | None = None, quiet: bool = False) -> ExitCode:
    """List the rules."""
    rs = load_rules(rule_dirs)
    if fmt == "json":
        text = json.dumps([_rule_dict(r) for r in rs.rules], indent=2, ensure_ascii=False) + "\n"
    elif fmt == "markdown":
        text = rules_markdown(rs)
    else:
        rows = [[r.code, r.name, "/".join(sorted({c.severity for c in r.checks}, key=lambda s: -SEVERITY_RANK[s])), r.summary]
                for r in rs.rules]
        text = tabulate(rows, headers=["code", "name", "severity", "summary"], tablefmt="simple", maxcolwidths=[None, None, None, 70]) + "\n"
    return finish(Output(output, quiet), text, ExitCode.OK)


@click.command()
@click.argument("code")
@click.option("--rules", "rule_dirs", multiple=True, type=click.Path(file_okay=False), help="Extra folder of rule files.")
@output_options(with_statistics=False)
def explain(code: str, rule_dirs: tuple[str, ...], output: str | None = None, quiet: bool = False) -> ExitCode:
    """Print a rule's full text: what it checks, why it matters, how to fix it.

    CODE is a code, a name, or a code prefix shared by exactly one rule (an exact code wins).
    """
    s = code.strip()
    found = next((r for r in load_deployment_rules(rule_dirs).rules  # KVD1xx: rules over a whole deployment
                  if r.code == s.upper() or r.name == s.lower()), None)
    return finish(Output(output, quiet), rule_text(found or load_rules(rule_dirs).lookup(code)), ExitCode.OK)


@click.command()
@click.option("--format", "fmt", type=click.Choice(["table", "markdown"]), default="table", show_default=True)
@click.option("--coverage", is_flag=True, help="Harvested vLLM format strings the catalogue reads, per release (docs/coverage.md).")
@click.option("-v", "--verbose", is_flag=True, help="With --coverage: also list every string that is not covered.")
@output_options(with_statistics=False)
def patterns(fmt: str, coverage: bool = False, verbose: bool = False, output: str | None = None, quiet: bool = False) -> ExitCode:
    """List the log lines kvlogdiag recognises, with the vLLM versions they cover."""
    if coverage:
        from kvlogdiag.catalogue.coverage import coverage_text

        text = coverage_text(verbose=verbose, markdown=fmt == "markdown")
    elif fmt == "markdown":
        text = catalogue_markdown()
    else:
        text = tabulate([[p.name, p.versions, len(p.samples)] for p in catalogue()],
                        headers=["pattern", "vLLM versions", "samples"], tablefmt="simple") + "\n"
    return finish(Output(output, quiet), text, ExitCode.OK)


def _rule_dict(r) -> dict:
    return {"code": r.code, "name": r.name, "severity": r.severity,
            "severities": sorted({c.severity for c in r.checks}, key=lambda s: -SEVERITY_RANK[s]),
            "summary": r.summary, "why": r.why, "fix": r.fix, "references": r.references,
            "applies_to": r.applies_to, "params": r.params,
            "checks": [{"when": c.when.source, "severity": c.severity, "message": c.message} for c in r.checks],
            "source": r.path}


def rule_text(r) -> str:
    sev = "/".join(sorted({c.severity for c in r.checks}, key=lambda s: -SEVERITY_RANK[s]))
    lines = [f"{r.code} {r.name} ({sev})", "", r.summary, "", "Why it matters", _indent(r.why), "", "How to fix it", _indent(r.fix), ""]
    lines.append("Fires when")
    for c in r.checks:
        lines.append(f"  [{c.severity}] {c.when.source}")
    if r.params:
        lines += ["", "Thresholds (override in kvlogdiag.toml under [params." + r.code + "])"]
        lines += [f"  {k} = {v}" for k, v in r.params.items()]
    if getattr(r, "scope", None):
        lines += ["", f"Scope: one {r.scope} of a deployment (kvlogdiag deployment)"]
    if getattr(r, "applies_to", None):
        lines += ["", "Applies to: " + "; ".join(f"{k} {v}" for k, v in r.applies_to.items())]
    if r.references:
        lines += ["", "References"] + [f"  {u}" for u in r.references]
    return "\n".join(lines) + "\n"


def _indent(text: str) -> str:
    return "\n".join("  " + ln if ln.strip() else "" for ln in text.strip().splitlines())


def _pipe(text: str) -> str:
    return text.replace("|", "\\|")


def _suggest_markdown(r) -> list[str]:
    """The settings a rule's checks suggest (``[suggest]`` / ``checks[].suggest``; docs/tuning.md)."""
    lines = []
    for i, c in enumerate(r.checks):
        s = c.suggest
        if s is None:
            continue
        target = " or ".join(f"`{x}`" for x in (s.flag, s.env) if x)
        what = "remove it" if s.remove else (f"`{s.value.source}`" if s.value is not None else "no automatic value")
        if s.when is not None:
            what += f" when `{s.when.source}`"
        if s.measure:
            what += f"; else measure: {s.measure}"
        if s.restart_and_measure:
            what += f"; then restart and {s.restart_and_measure}"
        lines.append(f"- check {i + 1} ({c.severity}): {target} → {_pipe(what)}")
    return ["", "**Suggests** (`kvlogdiag suggest`, one setting per finding):", "", *lines] if lines else []


def rules_markdown(rs: RuleSet) -> str:
    """docs/rules.md, generated from the rule files (a test fails when the file is stale)."""
    out = ["# Rules", "", "Generated by `kvlogdiag rules --format markdown` from the files in `kvlogdiag/rules/builtin/`; do not edit by hand.", "",
           "| code | name | severity | summary |", "|---|---|---|---|"]
    for r in rs.rules:
        sev = "/".join(sorted({c.severity for c in r.checks}, key=lambda s: -SEVERITY_RANK[s]))
        out.append(f"| [{r.code}](#{r.code.lower()}-{r.name}) | {r.name} | {sev} | {_pipe(r.summary)} |")
    for r in rs.rules:
        out += ["", f"## {r.code} {r.name}", "", r.summary, "", "**Why it matters.** " + " ".join(r.why.split()), "",
                "**How to fix it.** " + " ".join(r.fix.split()), "", "**Fires when** (first match gives the severity):", ""]
        for c in r.checks:
            out.append(f"- {c.severity}: `{c.when.source}`")
        out += _suggest_markdown(r)
        if r.params:
            out += ["", f"**Thresholds** (`[params.{r.code}]` in kvlogdiag.toml): " + ", ".join(f"`{k} = {v}`" for k, v in r.params.items())]
        out += rule_namespace_markdown(r)
        if r.references:
            out += ["", "**References:** " + ", ".join(f"<{u}>" for u in r.references)]
    out += namespace_markdown()
    return "\n".join(out).rstrip("\n") + "\n"
