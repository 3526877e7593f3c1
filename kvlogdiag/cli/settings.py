"""``--show-settings``: the settings a command would run with, and where each one came from.

Like ruff's ``--show-settings``: nothing is analysed; the config file that was found (and how), each
key's resolved value with its origin (``FILE:LINE``, ``--flag`` or ``default``) and the rules selected.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from kvlogdiag.rules.context import Options
from kvlogdiag.rules.engine import RuleSet

#: Options attribute → kvlogdiag.toml key, in the order shown
SHOWN = (("select", "select"), ("ignore", "ignore"), ("fail_on", "fail-on"), ("min_severity", "min-severity"),
         ("rule_dirs", "rules"), ("role", "role"), ("p99_len", "p99-len"), ("avg_prompt_len", "avg-prompt-len"),
         ("strict_rules", "strict-rules"))

_DEFAULT_NOTE = {"select": "every loaded rule", "ignore": "none", "rule_dirs": "built-in rules only",
                 "role": "from kv_role", "p99_len": "32,768 assumed by the rules", "avg_prompt_len": "not set"}


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v)
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def render_settings(opts: Options, sources: dict[str, str], rules: RuleSet, selected: RuleSet) -> str:
    defaults = {f.name: f.default for f in fields(Options) if f.default is not f.default_factory}  # type: ignore[misc]
    rows = [["config file", sources.get("config file", "none"), ""]]
    for attr, key in SHOWN:
        v = getattr(opts, attr)
        origin = sources.get(key, "default")
        shown = _value(v) if v not in (None, [], ()) else f"({_DEFAULT_NOTE.get(attr, 'not set')})"
        if origin == "default" and attr in defaults and v == defaults[attr] and attr not in _DEFAULT_NOTE:
            shown = _value(v)
        rows.append([key, shown, origin])
    for code, values in sorted(opts.params.items()):
        for name, value in sorted(values.items()):
            rows.append([f"params.{code}.{name}", _value(value), sources.get(f"params.{code}.{name}", "config file")])
    codes = [r.code for r in selected.rules]
    from tabulate import tabulate

    out = tabulate(rows, headers=["setting", "value", "from"], tablefmt="simple", disable_numparse=True)
    out += f"\n\nrules selected: {len(codes):,} of {len(rules.rules):,}: {', '.join(codes) or 'none'}\n"
    return out
