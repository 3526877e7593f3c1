"""What the commands share: the rule options, building the analyzer from config + flags, exit by findings.

Commands return an `ExitCode`; errors meant for the user are `KvlogdiagError` and are printed as one
``kvlogdiag: error: ...`` line by the group in `kvlogdiag.cli.main` (exit 2).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

import click

from kvlogdiag.cli.exit import ExitCode, quiet_stdout  # noqa: F401 - re-exported for cli.main
from kvlogdiag.config import LEVELS, ROLES, load_settings
from kvlogdiag.errors import KvlogdiagError
from kvlogdiag.pipeline import Analyzer
from kvlogdiag.render.redact import escape_controls
from kvlogdiag.result import Severity


class OneLineUsageError(KvlogdiagError):
    """A usage error a command reports as one ``kvlogdiag: error:`` line (exit 2) instead of click's usage text."""


def fail_exit(analyses: list, fail_on: str) -> ExitCode:
    """FINDINGS when any finding of the given runs reaches ``fail_on`` (``never`` disables)."""
    limit = Severity.threshold(fail_on)
    if any(f.severity >= limit for a in analyses for f in a.findings):
        return ExitCode.FINDINGS
    return ExitCode.OK


class ByteSize(click.ParamType):
    """A size in bytes: ``1000000``, ``1e9``, ``512MiB``, ``16GiB``, ``10MB`` (kB/MB/GB/TB are powers of 1000)."""

    name = "SIZE"
    _UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
              "t": 1000**4, "tb": 1000**4, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int):
            return value
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:[eE]\d{1,2})?)\s*([A-Za-z]{0,3})\s*", str(value))
        unit = m and self._UNITS.get(m[2].lower())
        if not m or unit is None:
            self.fail(f"{value!r}: not a size (use e.g. 1000000, 1e9, 512MiB, 16GiB)", param, ctx)
        size = int(float(m[1]) * unit) if ("." in m[1] or "e" in m[1].lower()) else int(m[1]) * unit
        if size < 1:
            self.fail(f"{value!r}: must be at least 1 byte", param, ctx)
        return size


BYTES = ByteSize()


def truncated_exit(code: ExitCode, truncated: bool) -> ExitCode:
    """`ExitCode.TRUNCATED` instead of OK/FINDINGS when an input was read only in part (errors win)."""
    return ExitCode.TRUNCATED if truncated and code in (ExitCode.OK, ExitCode.FINDINGS) else code


def err(msg: str) -> None:
    click.echo(f"kvlogdiag: error: {escape_controls(msg)}", err=True)  # a file name may hold escapes


SPEC_HELP = "codes, code prefixes or names; repeatable or comma-separated"


def rule_options(func: Callable) -> Callable:
    """Options shared by every command that evaluates rules."""
    decorators = [
        click.option("--select", multiple=True, help=f"Only these rules ({SPEC_HELP}); replaces the config's select."),
        click.option("--extend-select", multiple=True, help="Add these rules to the selection (of the config or --select)."),
        click.option("--ignore", multiple=True, help=f"Skip these rules ({SPEC_HELP}); replaces the config's ignore."),
        click.option("--extend-ignore", multiple=True, help="Skip these rules as well as the ignored ones."),
        click.option("--fail-on", type=click.Choice(LEVELS), default=None, help="Exit 1 when a finding reaches this severity [default: error]."),
        click.option("--min-severity", type=click.Choice(LEVELS[:3]), default=None, help="Show findings from this severity up [default: info]."),
        click.option("--rules", "rule_dirs", multiple=True, type=click.Path(file_okay=False), help="Extra folder of rule files (repeatable)."),
        click.option("--role", type=click.Choice(ROLES), default=None, help="Node role; default from kv_role (kv_producer→prefill, kv_consumer→decode, kv_both→mixed)."),
        click.option("--p99-len", type=click.IntRange(min=1), default=None, help="Workload P99 request length in tokens [default: 32768]."),
        click.option("--avg-prompt-len", type=click.IntRange(min=1), default=None, help="Average prompt length in tokens."),
        click.option("--strict-rules", is_flag=True, default=None, help="A rule that fails while evaluating is fatal (exit 2)."),
        click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None, help="kvlogdiag.toml to use instead of the one found from the input's folder or the current directory."),
        click.option("--isolated", is_flag=True, default=False, help="Read no configuration file (flags and defaults only)."),
        click.option("--show-settings", is_flag=True, default=False, help="Print the resolved settings and the file each came from, then exit."),
    ]
    for d in reversed(decorators):
        func = d(func)
    return func


def build_analyzer(ctx_kwargs: dict[str, Any], inputs: Iterable[str] = ()) -> Analyzer:
    """Options (config file + flags, popped from ``ctx_kwargs``) and an Analyzer over the selected rules.

    The config file is looked up from the first of ``inputs`` (the command's log arguments) upwards,
    then from the working directory. With ``--show-settings`` the settings are printed and the command
    exits 0 here. Bad configuration, rules or rule specs raise `KvlogdiagError` subclasses (one-line messages).
    """
    sources: dict[str, str] = {}
    show = ctx_kwargs.pop("show_settings", False)
    opts, rules = load_settings(
        ctx_kwargs.pop("config_path", None), inputs=inputs, isolated=ctx_kwargs.pop("isolated", False), sources=sources,
        select=ctx_kwargs.pop("select", ()), ignore=ctx_kwargs.pop("ignore", ()),
        extend_select=ctx_kwargs.pop("extend_select", ()), extend_ignore=ctx_kwargs.pop("extend_ignore", ()),
        fail_on=ctx_kwargs.pop("fail_on", None), min_severity=ctx_kwargs.pop("min_severity", None),
        rule_dirs=ctx_kwargs.pop("rule_dirs", ()), role=ctx_kwargs.pop("role", None),
        p99_len=ctx_kwargs.pop("p99_len", None), avg_prompt_len=ctx_kwargs.pop("avg_prompt_len", None),
        strict_rules=ctx_kwargs.pop("strict_rules", None),
    )
    for note in filter(None, sources.get("notes", "").split("\n")):
        click.echo(f"kvlogdiag: warning: {escape_controls(note)}", err=True)
    selected = rules.selected(opts.select, opts.ignore)
    if show:
        from kvlogdiag.cli.settings import render_settings

        click.echo(render_settings(opts, sources, rules, selected), nl=False)
        raise click.exceptions.Exit(0)
    return Analyzer(opts, rules=selected)


def report_rule_errors(analyzer: Analyzer) -> bool:
    """Print rule evaluation errors to stderr; True when --strict-rules makes them fatal."""
    for e in analyzer.rule_errors:
        click.echo(f"kvlogdiag: rule error: {escape_controls(e.message)}", err=True)
    return bool(analyzer.rule_errors) and analyzer.options.strict_rules

