"""Project configuration: ``kvlogdiag.toml`` or ``[tool.kvlogdiag]`` in ``pyproject.toml``.

Looked up from the first input's folder upwards, then from the current directory upwards (first file
found wins; ``--config FILE`` names it, ``--isolated`` reads none); command-line flags win over the
file (docs/configuration.md). Keys: ``select``, ``extend-select``, ``ignore``, ``extend-ignore`` (lists of codes, code
prefixes or names), ``fail-on``, ``min-severity``, ``rules`` (list of folders, relative to the file),
``role``, ``p99-len``, ``avg-prompt-len``, ``strict-rules`` and a ``[params.KVD004]`` table per rule
to change thresholds.

Rule selection merges like ruff's: ``select`` replaces the default set (every loaded rule),
``extend-select`` adds to it; a ``--select`` flag replaces the file's ``select`` and its
``extend-select``, ``--extend-select`` adds to what the file chose. ``ignore`` / ``extend-ignore``
work the same way, and an ignored rule stays off even when selected. Everything is checked against
the loaded rules: an unknown code, prefix, name, ``[params]`` rule, parameter or parameter type is
an error naming the file and line (or the flag), with a suggestion.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from typing import TYPE_CHECKING, Any, Iterable

from kvlogdiag.errors import KvlogdiagError
from kvlogdiag.rules.context import Options
from kvlogdiag.rules.engine import RuleSet, UnknownRuleError, load_rules, nesting_line, suggest, toml_error_line
from kvlogdiag.tomlcache import tomllib  # imported on first use

if TYPE_CHECKING:  # pathlib (with urllib.parse and ipaddress ~3 ms) is imported only where a config file is used
    from pathlib import Path

__all__ = ["ConfigError", "KEYS", "LEVELS", "ROLES", "find_config", "find_config_for", "load_options", "load_settings",
           "nesting_line", "options_from_file", "toml_error_line"]

ROLES = ("prefill", "decode", "mixed")
LEVELS = ("error", "warning", "info", "never")
SPEC_KEYS = ("select", "extend-select", "ignore", "extend-ignore")


class ConfigError(KvlogdiagError):
    """A configuration file that cannot be used; the message names the file (and line)."""


_KEYS = {*SPEC_KEYS, "fail-on", "min-severity", "rules", "role", "p99-len", "avg-prompt-len", "strict-rules", "params"}
KEYS = tuple(sorted(_KEYS))  #: every key a kvlogdiag.toml may hold (docs/configuration.md lists each with its default)


def find_config(start: Path | None = None) -> tuple[Path, dict] | None:
    """The first kvlogdiag.toml / pyproject.toml with [tool.kvlogdiag] from ``start`` upwards."""
    from pathlib import Path

    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        k = d / "kvlogdiag.toml"
        if k.is_file():
            return k, _read(k)
        p = d / "pyproject.toml"
        if p.is_file():
            data = _read(p)
            tool = data.get("tool", {}).get("kvlogdiag") if isinstance(data.get("tool"), dict) else None
            if tool is not None:
                return p, tool
    return None


def _read(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
        from kvlogdiag import tomlcache

        return tomlcache.loads(text, remember=True)  # by content hash: a pyproject.toml is read back as JSON
    except RecursionError:
        raise ConfigError(f"{path}:{nesting_line(text)}: invalid TOML: nested too deeply") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}:{toml_error_line(exc, text)}: invalid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None


def _text_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []


def _table_start(path: Path, lines: list[str]) -> int:
    """Index of the first line of kvlogdiag's table: 0, or the ``[tool.kvlogdiag]`` header of a pyproject.toml."""
    if path.name == "pyproject.toml":
        for n, line in enumerate(lines):
            if re.match(r"^\s*\[\s*tool\.kvlogdiag\s*[\].]", line):
                return n
    return 0


def _key_line(path: Path, key: str, value: str | None = None) -> str:
    """``path:line`` of the first line that sets ``key`` (or opens its table), else just ``path``.

    With ``value``: the line, from the key on, that holds that quoted string (a list spread over lines).
    """
    lines = _text_lines(path)
    pat = re.compile(rf"""^\s*(?:["']?{re.escape(key)}["']?\s*=|\[+\s*(?:tool\.kvlogdiag\.)?["']?{re.escape(key)}\b)""")
    start = _table_start(path, lines)
    for n in range(start, len(lines)):
        if pat.match(lines[n]):
            if value is not None:
                quoted = re.compile(rf"""["']{re.escape(value)}["']""")
                for m in range(n, len(lines)):
                    if quoted.search(lines[m]):
                        return f"{path}:{m + 1}"
            return f"{path}:{n + 1}"
    return str(path)


def _params_line(path: Path, code: str, name: str | None = None) -> str:
    """``path:line`` of ``[params.CODE]`` (or of ``name`` inside that table), else of ``params``."""
    lines = _text_lines(path)
    header = re.compile(rf"""^\s*\[\s*(?:tool\.kvlogdiag\.)?params\.["']?{re.escape(code)}["']?\s*\]""", re.I)
    inline = re.compile(rf"""^\s*(?:params\.)?["']?{re.escape(code)}["']?\s*=""", re.I)
    for n in range(_table_start(path, lines), len(lines)):
        if header.match(lines[n]) or inline.match(lines[n]):
            if name is None:
                return f"{path}:{n + 1}"
            key = re.compile(rf"""(?:^\s*|[{{,]\s*)["']?{re.escape(name)}["']?\s*=""")
            for m in range(n, len(lines)):
                if m > n and re.match(r"^\s*\[", lines[m]):
                    break
                if key.search(lines[m]):
                    return f"{path}:{m + 1}"
            return f"{path}:{n + 1}"
    return _key_line(path, "params")


def options_from_file(path: Path, data: dict) -> dict[str, Any]:
    """Validate a config table and turn it into `Options` keyword arguments.

    ``extend_select`` / ``extend_ignore`` are returned too, for `load_settings` to merge.
    """
    try:
        return _options_from_file(path, data)
    except _KeyError as exc:
        raise ConfigError(f"{_key_line(path, exc.key)}: {exc.message}") from None


class _KeyError(Exception):
    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key, self.message = key, message


def _options_from_file(path: Path, data: dict) -> dict[str, Any]:
    unknown = set(data) - _KEYS
    if unknown:
        first = sorted(unknown)[0]
        raise _KeyError(first, f"unknown key(s): {', '.join(sorted(unknown))}{suggest(first, sorted(_KEYS))} "
                               f"(known: {', '.join(sorted(_KEYS))})")
    out: dict[str, Any] = {}

    def lst(key: str) -> list[str]:
        v = data[key]
        if isinstance(v, str):
            v = [x.strip() for x in v.split(",") if x.strip()]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise _KeyError(key, f"'{key}' must be a list of strings")
        return v

    for key in SPEC_KEYS:
        if key in data:
            out[key.replace("-", "_")] = [x.strip() for x in lst(key) if x.strip()]
    for key, attr, allowed in (("fail-on", "fail_on", LEVELS), ("min-severity", "min_severity", LEVELS[:3]), ("role", "role", ROLES)):
        if key in data:
            if data[key] not in allowed:
                raise _KeyError(key, f"'{key}' must be one of {', '.join(allowed)}")
            out[attr] = data[key]
    for key, attr in (("p99-len", "p99_len"), ("avg-prompt-len", "avg_prompt_len")):
        if key in data:
            if not isinstance(data[key], int) or isinstance(data[key], bool) or data[key] <= 0:
                raise _KeyError(key, f"'{key}' must be a positive integer")
            out[attr] = data[key]
    if "strict-rules" in data:
        if not isinstance(data["strict-rules"], bool):
            raise _KeyError("strict-rules", "'strict-rules' must be true or false")
        out["strict_rules"] = data["strict-rules"]
    if "rules" in data:
        out["rule_dirs"] = [str((path.parent / d).resolve()) for d in lst("rules")]
    if "params" in data:
        params = data["params"]
        if not isinstance(params, dict) or not all(isinstance(v, dict) for v in params.values()):
            raise _KeyError("params", "[params] must hold one table per rule code, e.g. [params.KVD004]")
        out["params"] = {k.upper(): dict(v) for k, v in params.items()}
    return out


def _check_file_specs(path: Path, base: dict[str, Any], rules: RuleSet) -> None:
    for key in SPEC_KEYS:
        for spec in base.get(key.replace("-", "_"), []):
            try:
                rules.check_spec(spec)
            except UnknownRuleError as exc:
                raise ConfigError(f"{_key_line(path, key, spec)}: {key}: {exc.message}") from None


def _type_problem(default: Any, value: Any) -> str | None:
    """What ``value`` should be to replace ``default`` (numbers are interchangeable, bools are not), or None."""
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "true or false"
    if isinstance(default, (int, float)):
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number"
    if isinstance(default, str):
        return None if isinstance(value, str) else "a string"
    return None


def _check_params(path: Path, params: dict[str, dict[str, Any]], rules: RuleSet) -> None:
    by_code = rules.by_code()
    for code, values in params.items():
        rule = by_code.get(code)
        if rule is None:
            raise ConfigError(f"{_params_line(path, code)}: [params.{code}]: no loaded rule has the code {code!r}"
                              f"{suggest(code, by_code)}")
        for name, value in values.items():
            if name not in rule.params:
                known = ", ".join(rule.params) or "none"
                raise ConfigError(f"{_params_line(path, code, name)}: [params.{code}]: {code} has no parameter "
                                  f"{name!r}{suggest(name, rule.params)} (its parameters: {known})")
            want = _type_problem(rule.params[name], value)
            if want:
                raise ConfigError(f"{_params_line(path, code, name)}: [params.{code}]: {name!r} must be {want} "
                                  f"(the rule's default is {rule.params[name]!r}), not {value!r}")


def _split(values: Iterable[str]) -> list[str]:
    return [x.strip() for item in values for x in item.split(",") if x.strip()]


def _merge(flag: list[str] | None, file_base: list[str] | None, file_extend: list[str], flag_extend: list[str]) -> list[str]:
    """ruff's merge: a flag's list replaces the file's list and its extension; extensions add."""
    if flag is not None:
        return flag + flag_extend
    return (file_base or []) + file_extend + flag_extend


def _input_dir(arg: str) -> Path | None:
    """The folder a command-line input names: itself (a folder), its parent (a file), the fixed part of a glob."""
    from pathlib import Path

    if arg in ("-", ""):
        return None
    magic = min((i for i, c in enumerate(arg) if c in "*?["), default=None)
    if magic is not None:
        arg = arg[:magic]
        cut = max(arg.rfind("/"), arg.rfind("\\"))
        arg = arg[:cut + 1] if cut >= 0 else "."
    p = Path(arg)
    if p.is_dir():
        return p
    if p.parent.is_dir() and (p.exists() or magic is None):
        return p.parent
    return None


# what pathlib's is_file / is_dir take for "no" (any other error they raise)
_NO_SUCH = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)
_CONFIG_NAMES = ("kvlogdiag.toml", "pyproject.toml")


def _mode(path: str) -> int | None:
    """``st_mode`` of ``path``; None where pathlib's checks say "no"; OSError where they would raise."""
    try:
        return os.stat(path).st_mode
    except OSError as exc:
        if exc.errno in _NO_SUCH:
            return None
        raise


def _no_config_file_above(folder: str) -> bool:
    """No kvlogdiag.toml, nor pyproject.toml with [tool.kvlogdiag], in ``folder`` (resolved) or any folder
    above it: what `find_config` finds, read the same way (False for anything it would complain about)."""
    d = os.path.realpath(folder)
    while True:
        for name in _CONFIG_NAMES:
            path = os.path.join(d, name)
            mode = _mode(path)
            if mode is None or not stat.S_ISREG(mode):
                continue
            if name != "pyproject.toml":
                return False
            try:
                with open(path, encoding="utf-8") as fh:  # as Path.read_text in `_read`
                    text = fh.read()
                from kvlogdiag import tomlcache

                data = tomlcache.loads(text, remember=True)
            except Exception:  # noqa: BLE001 - `_read` turns it into its ConfigError: the Path search runs
                return False
            if not isinstance(data, dict):
                return False
            tool = data.get("tool")
            if isinstance(tool, dict) and tool.get("kvlogdiag") is not None:  # as find_config tests it
                return False
        up = os.path.dirname(d)
        if up == d:
            return True
        d = up


def _surely_none(inputs: tuple[str, ...]) -> bool:
    """True when `find_config_for` of at most one plain input (no glob, nothing pathlib would rewrite: no
    ``//``, ``.`` part or trailing ``/``) finds no config: in the folders it would search, no kvlogdiag.toml and
    no pyproject.toml with [tool.kvlogdiag]. The usual case then needs no pathlib (~3 ms of a small analyze)."""
    if len(inputs) > 1:
        return False
    folders = [os.getcwd()]
    if inputs and inputs[0] not in ("-", ""):
        arg = inputs[0]
        parts = arg.split("/")
        if any(c in arg for c in "*?[") or any(p in ("", ".") for p in parts[1:]) or parts[0] == ".":
            return False
        try:
            mode = _mode(arg)
            if mode is not None and stat.S_ISDIR(mode):
                folders.insert(0, arg)
            else:
                parent = os.path.dirname(arg) or "."
                mode = _mode(parent)
                if mode is not None and stat.S_ISDIR(mode):
                    folders.insert(0, parent)
            return all(_no_config_file_above(f) for f in folders)
        except OSError:
            return False  # what pathlib would raise on: the Path search meets it as before
    try:
        return _no_config_file_above(folders[0])
    except OSError:
        return False


def find_config_for(inputs: Iterable[str] = ()) -> tuple[tuple[Path, dict] | None, str, list[str]]:
    """The config of a run over ``inputs``: found from the first input's folder upwards, else from the
    working directory upwards. Also says how it was found, and notes for inputs below another config."""
    inputs = tuple(inputs)
    if _surely_none(inputs):
        return None, "found from the working directory upwards", []
    dirs = [d for d in (_input_dir(a) for a in inputs) if d is not None]
    notes: list[str] = []
    found = None
    how = ""
    if dirs:
        found = find_config(dirs[0])
        how = f"found from the folder of the first input ({dirs[0]}) upwards"
        if found:
            for d in dict.fromkeys(x.resolve() for x in dirs[1:]):  # each folder once (a shell glob of 1,000 logs)
                other = find_config(d)
                if other and other[0].resolve() != found[0].resolve():
                    notes.append(f"{d} is below {other[0]}, which is not used: the settings come from {found[0]} "
                                 "(the first input's); give --config to choose")
                    break
    if not found:
        found = find_config()
        how = "found from the working directory upwards"
    return found, how, notes


def load_settings(explicit: str | None = None, *, inputs: Iterable[str] = (), isolated: bool = False,
                  sources: dict[str, str] | None = None, **flags: Any) -> tuple[Options, RuleSet]:
    """Options from the config file (``explicit`` path or the one found), flags on top, and the loaded rules.

    The file: ``explicit``; none with ``isolated``; else the first kvlogdiag.toml (or pyproject.toml with
    [tool.kvlogdiag]) from the first input's folder upwards, else from the working directory upwards.
    ``sources``, when given, is filled with where each setting came from (``--show-settings``):
    ``config file`` and, per key, ``FILE:LINE``, ``--flag`` or ``default``.

    Raises `ConfigError` (file and line) for a bad file, `UnknownRuleError` (naming the flag) for a
    ``--select``-like flag that matches no rule, `RuleLoadError` for a bad rule folder.
    """
    base: dict[str, Any] = {}
    path: Path | None = None
    data: dict = {}
    src: dict[str, str] = {}
    if explicit and isolated:
        raise ConfigError("--config and --isolated exclude each other (--isolated: no configuration file)")
    if explicit:
        from pathlib import Path

        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"{explicit}: config file not found")
        data = _read(path)
        if path.name == "pyproject.toml":
            tool = data.get("tool", {})
            data = tool.get("kvlogdiag", {}) if isinstance(tool, dict) else {}
        base = options_from_file(path, data)
        src["config file"] = f"{path} (--config)"
    elif isolated:
        src["config file"] = "none (--isolated)"
    else:
        found, how, notes = find_config_for(inputs)
        if found:
            path, data = found
            base = options_from_file(*found)
            src["config file"] = f"{path} ({how})"
        else:
            src["config file"] = "none found (from the first input's folder or the working directory upwards)"
        for n in notes:
            src.setdefault("notes", "")
            src["notes"] += ("\n" if src["notes"] else "") + n
    if path is not None:
        for key in data:
            if key == "params" and isinstance(data[key], dict):
                for code, values in data[key].items():
                    for name in values if isinstance(values, dict) else ():
                        src[f"params.{str(code).upper()}.{name}"] = _params_line(path, code, name)
            elif key not in SPEC_KEYS:
                src[key] = _key_line(path, key)
    specs = {k: flags.pop(k, None) for k in ("select", "ignore", "extend_select", "extend_ignore")}
    for k, v in flags.items():
        if v is None or v == () or v == []:
            continue
        flag = "--rules" if k == "rule_dirs" else f"--{k.replace('_', '-')}"
        if k == "rule_dirs":
            base[k] = list(base.get(k, [])) + list(v)
            src["rules"] = f"{src['rules']} + {flag}" if "rules" in src else flag
        else:
            base[k] = v
            src[k.replace("_", "-")] = flag
    rules = load_rules(base.get("rule_dirs", ()))
    if path is not None:
        _check_file_specs(path, base, rules)
        _check_params(path, base.get("params", {}), rules)
    cli = {k: _split(v) if v else None for k, v in specs.items()}
    for k, values in cli.items():
        for spec in values or ():
            try:
                rules.check_spec(spec)
            except UnknownRuleError as exc:
                raise UnknownRuleError(spec, f"--{k.replace('_', '-')}: {exc.message}") from None
    for key in ("select", "ignore"):
        parts = []
        if cli[key] is not None:
            parts.append(f"--{key}")
        else:
            for k in (key, f"extend-{key}"):
                if path is not None and k in data:
                    parts.append(_key_line(path, k))
        if cli[f"extend_{key}"]:
            parts.append(f"--extend-{key}")
        if parts:
            src[key] = " + ".join(parts)
    chose = cli["select"] or base.get("select")
    select = _merge(cli["select"], base.pop("select", None), base.pop("extend_select", []), cli["extend_select"] or [])
    if not chose:  # no select anywhere: the default set (every rule) already holds the extensions
        select = []
    ignore = _merge(cli["ignore"], base.pop("ignore", None), base.pop("extend_ignore", []), cli["extend_ignore"] or [])
    if sources is not None:
        sources.update(src)
    return Options(**base, select=select, ignore=ignore), rules


def load_options(explicit: str | None = None, **flags: Any) -> Options:
    """`load_settings` without the rules."""
    return load_settings(explicit, **flags)[0]
