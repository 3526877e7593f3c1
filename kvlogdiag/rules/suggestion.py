"""A rule's suggested setting, declared as data in its TOML and evaluated with its finding.

A rule (or one of its ``[[checks]]``) says which ONE setting its finding would change, and to what::

    [suggest]                               # for every check of the rule
    flag = "--max-num-batched-tokens"       # a flag of vLLM's harvested argument list
    env = "VLLM_PREFIX_CACHE_RETENTION_INTERVAL"   # or/and an environment variable
    value = "budget_suggest"                # an expression of the rule language (null: no value)
    when = "p99_len_given"                  # optional: the automatic value only when this holds
    measure = "..."                         # template: what to measure when there is no safe value
                                            # (when is false or value is null); without it: no row
    restart_and_measure = "..."             # template: what to check in the next start-up log
    remove = true                           # the fix is to drop the flag / unset the variable

    [[checks]]
    suggest = { value = "params.recommended" }   # overrides keys of [suggest] for this check
    suggest = false                               # this check suggests nothing

Everything is validated when the rule is loaded (flag known to some vLLM release, expressions parsed
with the rule's own names, templates checked); ``suggest`` and ``report`` apply the evaluated
suggestions to the launch arguments reconstructed from the log (modes/suggest.py).
"""

from __future__ import annotations

from typing import Any, Callable

from kvlogdiag.rules.condition import Condition, _Frozen

KEYS = {"flag": "a vLLM flag (--max-model-len)", "env": "an environment variable (VLLM_...)",
        "value": "an expression", "when": "a condition", "measure": "a template",
        "restart_and_measure": "a template", "remove": "true/false"}


class SuggestSpec(_Frozen):
    """One setting a finding changes (see the module docstring)."""

    # no __slots__: read with vars() (tests/test_startup_cache.py collects its conditions that way)
    _FIELDS = ("flag", "env", "value", "when", "measure", "restart_and_measure", "remove")
    flag: str | None
    env: str | None
    value: Condition | None
    when: Condition | None
    measure: str | None
    restart_and_measure: str | None
    remove: bool

    def __init__(self, flag: str | None, env: str | None, value: Condition | None, when: Condition | None,
                 measure: str | None, restart_and_measure: str | None, remove: bool = False) -> None:
        _set = object.__setattr__
        _set(self, "flag", flag)
        _set(self, "env", env)
        _set(self, "value", value)
        _set(self, "when", when)
        _set(self, "measure", measure)
        _set(self, "restart_and_measure", restart_and_measure)
        _set(self, "remove", remove)



def merge(base: dict | None, override: Any) -> dict | None:
    """The raw table of a check: the rule's ``[suggest]`` with the check's keys on top; None: no suggestion."""
    if override is False:
        return None
    if override is None:
        return dict(base) if base else None
    out = dict(base or {})
    out.update(override)
    return out


def build(raw: dict, where: str, parse: Callable[[str, str], Condition], check_template: Callable[[str, str], None],
          flag_known: Callable[[str], bool], error: Callable[[str], Exception]) -> SuggestSpec:
    """Validate one merged suggest table; ``error(text)`` builds the load error to raise."""
    unknown = set(raw) - set(KEYS)
    if unknown:
        raise error(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(KEYS)})")
    flag, env = raw.get("flag"), raw.get("env")
    if flag is None and env is None:
        raise error(f"{where}: needs 'flag' (a vLLM flag) or 'env' (an environment variable)")
    if flag is not None and (not isinstance(flag, str) or not flag.startswith("--") or not flag_known(flag)):
        raise error(f"{where}: flag {flag!r} is not in vLLM's argument list (kvlogdiag/catalogue/cli_args.json)")
    if env is not None and (not isinstance(env, str) or not env.isupper() or not env.startswith("VLLM_")):
        raise error(f"{where}: env {env!r} must be a VLLM_* variable name")
    remove = raw.get("remove", False)
    if not isinstance(remove, bool):
        raise error(f"{where}: remove must be true or false")
    for key in ("value", "when", "measure", "restart_and_measure"):
        if key in raw and not isinstance(raw[key], str):
            raise error(f"{where}: {key} must be a string")
    if remove and "value" in raw:
        raise error(f"{where}: 'remove' and 'value' exclude each other")
    if not remove and "value" not in raw and "measure" not in raw:
        raise error(f"{where}: needs 'value', 'remove' or 'measure' (what to measure when no value is safe)")
    for key in ("measure", "restart_and_measure"):
        if key in raw:
            check_template(f"{where}.{key}", raw[key])
    value = parse(f"{where}.value", raw["value"]) if "value" in raw else None
    when = parse(f"{where}.when", raw["when"]) if "when" in raw else None
    return SuggestSpec(flag, env, value, when, raw.get("measure"), raw.get("restart_and_measure"), remove)


def evaluate(spec: SuggestSpec, env: dict[str, Any], funcs: dict[str, Callable], render: Callable[[str, dict], str],
             rule: str, name: str, severity: str, line: int | None) -> dict | None:
    """The suggestion of a fired check (None when its ``when`` does not hold)."""
    ok = spec.when.evaluate(env, funcs) if spec.when is not None else True
    automatic = not (ok is None or ok is False or ok == 0)
    value = spec.value.evaluate(env, funcs) if automatic and spec.value is not None else None
    if isinstance(value, bool) or (value is not None and not isinstance(value, (int, float, str))):
        value = None  # a flag takes a number or a word; anything else is no safe value
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1:
        value = int(value)  # 16384.0 from an arithmetic expression is the integer flag value 16384
    remove = spec.remove and automatic
    if value is None and not remove:
        if not spec.measure:
            return None  # no safe value here and nothing to measure: the finding's fix says the rest
        automatic = False
    return {"rule": rule, "name": name, "severity": severity, "line": line, "flag": spec.flag, "env": spec.env,
            "value": value, "remove": remove, "automatic": automatic,
            "measure": render(spec.measure, env) if spec.measure and not automatic else None,
            "restart_and_measure": render(spec.restart_and_measure, env) if spec.restart_and_measure else None}
