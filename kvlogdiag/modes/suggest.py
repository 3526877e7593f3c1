"""``kvlogdiag suggest LOG`` (and the "Suggested command" block of ``report``): the fixed launch command.

The server's own launch arguments are reconstructed from the log — the ``non-default args`` line
(vLLM >= 0.8), a ``Namespace(...)`` dump, or the launch command the log shows (the best the log has,
as `kvlogdiag.modes.diff.launch_arguments`), plus the ``VLLM_*`` variables it shows. Each finding
whose rule declares a suggestion in its TOML (``[suggest]``: one flag or variable, a value expression
of the rule language, or what to measure instead; `kvlogdiag.rules.suggestion`) changes ONE setting;
nothing else is touched, and a finding whose rule has no safe automatic value only says what to
measure. The result is a table (setting · now · suggested · why · rule) and a ready ``vllm serve``
command line with the environment variables in front of it.

Flags are spelled from vLLM's harvested argument list (kvlogdiag/catalogue/cli_args.json): the long
``--dashed-name`` of each argparse destination, ``--flag`` / ``--no-flag`` for booleans, JSON for the
config objects (``--kv-transfer-config '{...}'``, without the ``None`` fields vLLM fills in itself).
"""

from __future__ import annotations

import functools
import json
import shlex
from typing import Any

from kvlogdiag.derive.figures import parse_version
from kvlogdiag.extract.commands import arg_table
from kvlogdiag.extract.pyrepr import CLASS_KEY
from kvlogdiag.render.analysis import clean_json, md_code_block, md_table
from kvlogdiag.result import Analysis

__all__ = ["build_suggestion", "command_flags", "flag_for", "render_markdown", "render_text", "suggestion_rows"]

# argument dests that are no flag of 'vllm serve' (the positional model, kvlogdiag's alias)
_POSITIONAL = {"model", "model_tag"}
_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@functools.cache
def _dest_flags() -> dict[str, dict[str, Any]]:
    """dest → {"flag": long option, "kind", "kinds", "no": --no-option or None, "first", "last"}."""
    out: dict[str, dict[str, Any]] = {}
    flags = arg_table()["flags"]
    for opt, info in flags.items():
        if not opt.startswith("--") or info.get("kind") == "store_false":
            continue
        dest = info["dest"]
        prefer = opt == "--" + dest.replace("_", "-")
        if dest not in out or prefer:
            out[dest] = {"flag": opt, "kind": info.get("kind"), "kinds_by_version": info.get("kinds", {}),
                         "first": info.get("first"), "last": info.get("last")}
    for opt, info in flags.items():
        if info.get("kind") == "store_false" and info["dest"] in out and opt.startswith("--no-"):
            out[info["dest"]]["no"] = opt
    return out


def flag_for(dest: str) -> str:
    """The long flag of an argparse destination (``max_num_batched_tokens`` → ``--max-num-batched-tokens``)."""
    info = _dest_flags().get(dest)
    return info["flag"] if info else "--" + dest.replace("_", "-")


def flag_in_release(flag: str, version: str | None) -> bool:
    """The flag is in the harvested list and not known to be absent from ``version``: not at or before
    the last harvested release without it yet, and not at or after the harvested release that no
    longer has it (a version between two harvested releases is given the benefit of the doubt)."""
    info = arg_table()["flags"].get(flag)
    if info is None:
        return False
    v = parse_version(version) if version else None
    if v is None:
        return True
    first, last = parse_version(info.get("first")), parse_version(info.get("last"))
    releases = [x for x in (parse_version(r) for r in arg_table()["versions"]) if x is not None]
    before = [x for x in releases if first is not None and x < first]  # harvested releases without it yet
    if before and v <= before[-1]:
        return False
    gone = next((x for x in releases if last is not None and x > last), None)
    return gone is None or v < gone


def _kind_in(info: dict[str, Any], version: str | None) -> str | None:
    """The argparse kind of a flag in (the harvested release nearest below) ``version``."""
    kinds: dict[str, list[str]] = info.get("kinds_by_version") or {}
    v = parse_version(version) if version else None
    if not kinds or v is None:
        return info.get("kind")
    pairs = sorted((xv, kind) for kind, versions in kinds.items() for x in versions if (xv := parse_version(x)) is not None)
    if not pairs:
        return info.get("kind")
    below = [kind for xv, kind in pairs if xv <= v]
    return below[-1] if below else pairs[0][1]  # older than every harvested release: the oldest kind


def _json_arg(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _json_arg(x) for k, x in v.items() if k != CLASS_KEY and x is not None}
    if isinstance(v, list):
        return [_json_arg(x) for x in v]
    return v


def _tokens(dest: str, value: Any, version: str | None) -> list[str]:
    """The command-line words of one argument, as the log's vLLM release spells it."""
    info = _dest_flags().get(dest, {})
    flag = info.get("flag") or "--" + dest.replace("_", "-")
    kind = _kind_in(info, version) if info else None
    if isinstance(value, bool):
        if value:
            return [flag]
        if info.get("no") and flag_in_release(info["no"], version):
            return [info["no"]]
        if kind == "bool_optional":
            return ["--no-" + flag[2:]]
        return []  # a store_true flag left off is false
    if isinstance(value, dict):
        return [flag, json.dumps(_json_arg(value), separators=(",", ":"))]
    if isinstance(value, list):
        return [flag, *(str(x) for x in value)]
    return [flag, str(value)]


def command_flags(command: str) -> list[str]:
    """The ``--flags`` of a command line (what a test checks against vLLM's argument list)."""
    return [w.split("=", 1)[0] for w in shlex.split(command) if w.startswith("--")]


def _why(a: Analysis, rule: str) -> str:
    """The finding's rule summary, with the line of its evidence."""
    f = next((x for x in a.findings if x.rule == rule), None)
    if f is None:
        return ""
    return (f.summary or f.name) + (f" (line {f.line})" if f.line else "")


def _fmt_value(v: Any) -> str:
    if v is None:
        return "(default)"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, (dict, list)):
        return json.dumps(_json_arg(v), separators=(",", ":"))
    return str(v)


def build_suggestion(a: Analysis) -> dict[str, Any]:
    """The suggested settings and command of one run (JSON-ready)."""
    from kvlogdiag.modes.diff import launch_arguments  # one reading of the argument lines for both modes

    source, args, _lines = launch_arguments(a)
    args = dict(args)
    if source == "args_namespace":
        # a Namespace dump holds every argument, defaults included, and argparse's own entries
        # (subparser, dispatch_function): keep the flags of 'vllm serve' with a value
        args = {k: v for k, v in args.items()
                if k in _POSITIONAL or (k in _dest_flags() and v is not None and v != "" and v != [] and v != {}
                                        and not (isinstance(v, str) and v.startswith("<") and v.endswith(">")))}
    basis = "arguments"
    if source is None:
        basis = "resolved config"
        args = {k: v for k, v in a.config.items() if k not in ("env", "conflicts") and v is not None}
    env = dict(a.config.get("env") or {})
    model = args.pop("model", None) or a.model
    version = a.vllm.version
    rows: list[dict[str, Any]] = []
    taken: dict[str, dict[str, Any]] = {}
    for s in sorted(a.suggestions, key=lambda s: (_SEVERITY_ORDER.get(s["severity"], 3), s["line"] or 0)):
        use_env = s["env"] is not None and (s["flag"] is None or s["env"] in env or not flag_in_release(s["flag"], version))
        if use_env:
            setting, now = s["env"], env.get(s["env"])
        else:
            dest = arg_table()["flags"][s["flag"]]["dest"]
            setting, now = s["flag"], args.get(dest, a.config.get(dest))
        automatic = s["automatic"]
        row = {"setting": setting, "kind": "env" if use_env else "flag", "now": clean_json(now),
               "suggested": None if s["remove"] else clean_json(s["value"]), "remove": s["remove"],
               "automatic": automatic, "measure": s["measure"] if not automatic else None,
               "restart_and_measure": s["restart_and_measure"], "why": _why(a, s["rule"]),
               "rule": s["rule"], "name": s["name"], "severity": s["severity"], "line": s["line"]}
        if automatic and not s["remove"] and now is not None and _fmt_value(now) == _fmt_value(s["value"]):
            continue  # already so: nothing to change
        if setting in taken:
            taken[setting].setdefault("also", []).append(s["rule"])  # one setting, the first (worst) finding's value
            continue
        taken[setting] = row
        rows.append(row)
    new_args, new_env = dict(args), dict(env)
    for r in rows:
        if not r["automatic"]:
            continue
        if r["kind"] == "env":
            if r["remove"]:
                new_env.pop(r["setting"], None)
            else:
                new_env[r["setting"]] = _fmt_value(r["suggested"])
        else:
            dest = arg_table()["flags"][r["setting"]]["dest"]
            if r["remove"]:
                new_args.pop(dest, None)
            else:
                new_args[dest] = r["suggested"]
    words = ["vllm", "serve"] + ([str(model)] if model else [])
    for dest, value in new_args.items():
        if dest in _POSITIONAL or value is None:
            continue
        words += _tokens(dest, value, version)
    env_words = [f"{k}={shlex.quote(str(v))}" for k, v in new_env.items()]
    command = " ".join(env_words + [shlex.quote(w) for w in words])
    covered = {r["rule"] for r in rows} | {c for r in rows for c in r.get("also", [])}
    covered |= {s["rule"] for s in a.suggestions}  # already at the suggested value
    others = [f.rule for f in a.findings if f.rule not in covered]
    return clean_json({"source": a.source, "run": a.run.index + 1, "basis": basis, "arguments_from": source,
                       "other_findings": list(dict.fromkeys(others)),
                       "vllm_version": version, "model": model, "suggestions": rows,
                       "changed": sum(1 for r in rows if r["automatic"]),
                       "to_measure": sum(1 for r in rows if not r["automatic"]),
                       "command": command, "env": new_env})


def _suggested_cell(r: dict[str, Any]) -> str:
    if r["remove"]:
        return "(remove)"
    if not r["automatic"]:
        return "measure: " + (r["measure"] or "")
    return _fmt_value(r["suggested"])


def suggestion_rows(doc: dict[str, Any]) -> list[list[str]]:
    """The table rows: setting · now · suggested · why · rule."""
    out = []
    for r in doc["suggestions"]:
        why = r["why"]
        if r["restart_and_measure"]:
            why += f" — then restart and {r['restart_and_measure']}"
        out.append([r["setting"], _fmt_value(r["now"]), _suggested_cell(r), why, r["rule"] + ("+" + "+".join(r["also"]) if r.get("also") else "")])
    return out


def render_text(doc: dict[str, Any]) -> str:
    from tabulate import tabulate

    out = [f"== suggest  {doc['source']}" + (f"@{doc['run']}" if doc["run"] > 1 else "")]
    if doc["basis"] != "arguments":
        out.append("NOTE: the log has no argument line: the command is rebuilt from the resolved configuration")
    if not doc["suggestions"]:
        out += ["No finding asks for a different setting: nothing to change.", "", "Launch command (as the log shows it):",
                "  " + doc["command"]]
        return "\n".join(out) + "\n"
    out.append(f"{doc['changed']} setting(s) to change, {doc['to_measure']} to measure first (one per finding)")
    out.append(tabulate(suggestion_rows(doc), headers=["setting", "now", "suggested", "why", "rule"], disable_numparse=True,
                        maxcolwidths=[None, 24, 40, 70, None]))
    if doc["other_findings"]:
        out.append("No setting to change automatically for " + ", ".join(doc["other_findings"]) + ": see their fix.")
    out += ["", "Suggested command:", "  " + doc["command"]]
    return "\n".join(out) + "\n"


def render_markdown(doc: dict[str, Any], heading: str = "###") -> str:
    out = [f"{heading} Suggested command", ""]
    if doc["basis"] != "arguments":
        out += ["The log has no argument line: the command is rebuilt from the resolved configuration.", ""]
    if not doc["suggestions"]:
        out += ["No finding asks for a different setting.", ""]
    else:
        out += [md_table(["setting", "now", "suggested", "why", "rule"], suggestion_rows(doc)), ""]
    if doc["other_findings"]:
        out += ["No setting to change automatically for " + ", ".join(doc["other_findings"]) + ": see their fix.", ""]
    out += [md_code_block([doc["command"]]), ""]
    return "\n".join(out)

