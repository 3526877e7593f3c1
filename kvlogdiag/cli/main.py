"""Command-line interface: ``kvlogdiag analyze | rules | explain`` (+ watch, scan, report, estimate).

Linter conventions: ``--select/--ignore`` by code, prefix or name; ``--fail-on`` (what sets the
exit code) separate from ``--min-severity`` (what is shown); exit codes are `ExitCode`.
"""

from __future__ import annotations

import functools
import json
import sys
from enum import IntEnum
from typing import Any, Callable

import click

from kvlogdiag import __version__
from kvlogdiag.config import LEVELS, ROLES, ConfigError, load_options
from kvlogdiag.rules.context import NAMES, Options
from kvlogdiag.input.reader import DEFAULT_MAX_BYTES, InputError
from kvlogdiag.result import Severity
from kvlogdiag.rules.engine import SEVERITY_RANK, RuleLoadError, RuleSet, load_rules


class ExitCode(IntEnum):
    """Exit status of every command."""

    OK = 0  # no finding at or above --fail-on
    FINDINGS = 1  # findings at or above --fail-on
    ERROR = 2  # usage error, bad configuration or rules, or an input that could not be read
    INTERRUPTED = 130  # Ctrl-C (watch)


def fail_exit(analyses: list, fail_on: str) -> ExitCode:
    """FINDINGS when any finding of the given runs reaches ``fail_on`` (``never`` disables)."""
    limit = Severity.threshold(fail_on)
    if any(f.severity >= limit for a in analyses for f in a.findings):
        return ExitCode.FINDINGS
    return ExitCode.OK


def err(msg: str) -> None:
    click.echo(f"kvlogdiag: error: {msg}", err=True)


def rule_options(func: Callable) -> Callable:
    """Options shared by every command that evaluates rules."""
    decorators = [
        click.option("--select", multiple=True, help="Only these rules (codes, code prefixes or names; repeatable or comma-separated)."),
        click.option("--ignore", multiple=True, help="Skip these rules (codes, prefixes or names)."),
        click.option("--fail-on", type=click.Choice(LEVELS), default=None, help="Exit 1 when a finding reaches this severity [default: error]."),
        click.option("--min-severity", type=click.Choice(LEVELS[:3]), default=None, help="Show findings from this severity up [default: info]."),
        click.option("--rules", "rule_dirs", multiple=True, type=click.Path(file_okay=False), help="Extra folder of rule files (repeatable)."),
        click.option("--role", type=click.Choice(ROLES), default=None, help="Node role; default from kv_role (kv_producer→prefill, kv_consumer→decode, kv_both→mixed)."),
        click.option("--p99-len", type=click.IntRange(min=1), default=None, help="Workload P99 request length in tokens [default: 32768]."),
        click.option("--avg-prompt-len", type=click.IntRange(min=1), default=None, help="Average prompt length in tokens."),
        click.option("--strict-rules", is_flag=True, default=None, help="A rule that fails while evaluating is fatal (exit 2)."),
        click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None, help="kvlogdiag.toml to use instead of the one found from the current directory."),
    ]
    for d in reversed(decorators):
        func = d(func)
    return func


def build_analyzer(ctx_kwargs: dict[str, Any]):
    """Options (config file + flags) and an Analyzer; exits 2 with a one-line error on bad config/rules."""
    from kvlogdiag.pipeline import Analyzer

    try:
        opts = load_options(
            ctx_kwargs.pop("config_path", None),
            select=ctx_kwargs.pop("select", ()), ignore=ctx_kwargs.pop("ignore", ()),
            fail_on=ctx_kwargs.pop("fail_on", None), min_severity=ctx_kwargs.pop("min_severity", None),
            rule_dirs=ctx_kwargs.pop("rule_dirs", ()), role=ctx_kwargs.pop("role", None),
            p99_len=ctx_kwargs.pop("p99_len", None), avg_prompt_len=ctx_kwargs.pop("avg_prompt_len", None),
            strict_rules=ctx_kwargs.pop("strict_rules", None),
        )
        return Analyzer(opts)
    except (ConfigError, RuleLoadError) as exc:
        err(str(exc))
        sys.exit(ExitCode.ERROR)


def report_rule_errors(analyzer) -> bool:
    """Print rule evaluation errors to stderr; True when --strict-rules makes them fatal."""
    for e in analyzer.rule_errors:
        click.echo(f"kvlogdiag: rule error: {e.message}", err=True)
    return bool(analyzer.rule_errors) and analyzer.options.strict_rules


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kvlogdiag")
def cli() -> None:
    """Read vLLM / vLLM-Ascend logs: exact KV-cache figures per rank, and the settings that are wrong.

    \b
    kvlogdiag analyze server.log            figures + findings for one or more logs
    vllm serve ... 2>&1 | kvlogdiag watch   live, behind a running server
    kvlogdiag scan /var/log/vllm/           an archive of logs → one row per run
    kvlogdiag report -                      paste a log, get a Markdown/HTML report
    kvlogdiag estimate --log server.log     what fits: expected vs measured bytes/token, what-if
    kvlogdiag rules / explain KVD002        the rule set
    """


RUN_HELP = ("Which server start of each input: last (the current one), first, a run number (1 = first), or all "
            "[default: all runs for text/markdown, newest first; JSON: the current run, every run under all_runs].")


def run_option(func: Callable) -> Callable:
    return click.option("--run", "run", default=None, metavar="last|first|N|all", callback=_check_run, help=RUN_HELP)(func)


def _check_run(ctx, param, value):
    if value is None or value in ("last", "first", "all") or (value.isdigit() and int(value) >= 1):
        return value
    raise click.BadParameter(f"{value!r}: use last, first, all or a run number (1, 2, ...)")


@cli.command()
@click.argument("inputs", nargs=-1, metavar="[FILE|-]...")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("--max-bytes", type=click.IntRange(min=1), default=DEFAULT_MAX_BYTES, show_default=True,
              help="Stop reading an input after this many (decompressed) bytes: guards against decompression bombs.")
@run_option
@rule_options
def analyze(inputs: tuple[str, ...], fmt: str, max_bytes: int, run: str | None, **kw: Any) -> None:
    """Analyse one or more logs (paths or - for stdin; gzip/bz2/xz/zstd detected automatically).

    A log with several server starts (a restarted server appending to its log) is analysed per
    start: each figure and finding belongs to one run."""
    from kvlogdiag.render.analysis import render_json, render_markdown, render_text

    if not inputs and sys.stdin.isatty():
        err("no input: give a log file, or pipe one in (kvlogdiag analyze - < server.log)")
        sys.exit(ExitCode.ERROR)
    analyzer = build_analyzer(kw)
    opts = analyzer.options
    results = []
    failed: list[str] = []
    for src in inputs or ("-",):
        try:
            results.append(analyzer.analyze_source(src, max_bytes))
        except InputError as exc:
            err(str(exc))
            failed.append(str(exc))
        except RuleLoadError as exc:  # --strict-rules
            err(str(exc))
            sys.exit(ExitCode.ERROR)
    shown = []
    try:
        for r in results:
            shown.extend(r.select(run or "all"))
    except IndexError as exc:
        err(str(exc))
        sys.exit(ExitCode.ERROR)
    fatal = report_rule_errors(analyzer)
    if fmt == "json":
        click.echo(render_json([r.to_json(run or "last", opts.min_severity) for r in results]))
    elif fmt == "markdown":
        click.echo(render_markdown(shown, opts.min_severity), nl=False)
    else:
        click.echo(render_text(shown, opts.min_severity), nl=False)
    if failed or fatal:
        sys.exit(ExitCode.ERROR)
    sys.exit(fail_exit(shown, opts.fail_on))


@cli.command("rules")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
@click.option("--rules", "rule_dirs", multiple=True, type=click.Path(file_okay=False), help="Extra folder of rule files.")
def rules_cmd(fmt: str, rule_dirs: tuple[str, ...]) -> None:
    """List the rules."""
    rs = _load_or_exit(rule_dirs)
    if fmt == "json":
        click.echo(json.dumps([_rule_dict(r) for r in rs.rules], indent=2, ensure_ascii=False))
    elif fmt == "markdown":
        click.echo(rules_markdown(rs), nl=False)
    else:
        from tabulate import tabulate

        rows = [[r.code, r.name, "/".join(sorted({c.severity for c in r.checks}, key=lambda s: -SEVERITY_RANK[s])), r.summary]
                for r in rs.rules]
        click.echo(tabulate(rows, headers=["code", "name", "severity", "summary"], tablefmt="simple", maxcolwidths=[None, None, None, 70]))


@cli.command()
@click.argument("code")
@click.option("--rules", "rule_dirs", multiple=True, type=click.Path(file_okay=False), help="Extra folder of rule files.")
def explain(code: str, rule_dirs: tuple[str, ...]) -> None:
    """Print a rule's full text: what it checks, why it matters, how to fix it."""
    rs = _load_or_exit(rule_dirs)
    sel = rs.selected([code])
    if not sel.rules:
        err(f"no rule {code!r} (see 'kvlogdiag rules')")
        sys.exit(ExitCode.ERROR)
    click.echo(rule_text(sel.rules[0]), nl=False)


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["table", "markdown"]), default="table", show_default=True)
def patterns(fmt: str) -> None:
    """List the log lines kvlogdiag recognises, with the vLLM versions they cover."""
    from kvlogdiag.catalogue.patterns import catalogue, catalogue_markdown

    if fmt == "markdown":
        click.echo(catalogue_markdown(), nl=False)
        return
    from tabulate import tabulate

    click.echo(tabulate([[p.name, p.versions, len(p.samples)] for p in catalogue()],
                        headers=["pattern", "vLLM versions", "samples"], tablefmt="simple"))


def _load_or_exit(rule_dirs) -> RuleSet:
    try:
        return load_rules(rule_dirs)
    except RuleLoadError as exc:
        err(str(exc))
        sys.exit(ExitCode.ERROR)


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
    if r.applies_to:
        lines += ["", "Applies to: " + "; ".join(f"{k} {v}" for k, v in r.applies_to.items())]
    if r.references:
        lines += ["", "References"] + [f"  {u}" for u in r.references]
    return "\n".join(lines) + "\n"


def _indent(text: str) -> str:
    return "\n".join("  " + ln if ln.strip() else "" for ln in text.strip().splitlines())


def _pipe(text: str) -> str:
    return text.replace("|", "\\|")


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
        if r.params:
            out += ["", f"**Thresholds** (`[params.{r.code}]` in kvlogdiag.toml): " + ", ".join(f"`{k} = {v}`" for k, v in r.params.items())]
        if r.references:
            out += ["", "**References:** " + ", ".join(f"<{u}>" for u in r.references)]
    out += ["", "## Names a rule condition can use", "", "| name | meaning |", "|---|---|"]
    out += [f"| `{k}` | {_pipe(v)} |" for k, v in NAMES.items()]
    return "\n".join(out) + "\n"


def _register_optional() -> None:
    """Commands that live in their own modules (added as they are built)."""
    import importlib

    for mod, attr in (("kvlogdiag.modes.watch", "watch"), ("kvlogdiag.modes.scan", "scan"), ("kvlogdiag.modes.report", "report"),
                      ("kvlogdiag.modes.estimate", "estimate")):
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:
                raise
            continue
        cli.add_command(getattr(m, attr))


_register_optional()


def main() -> None:
    try:
        cli(prog_name="kvlogdiag")
    except KeyboardInterrupt:  # pragma: no cover - interactive
        sys.exit(ExitCode.INTERRUPTED)
