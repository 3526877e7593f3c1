"""Project configuration: ``kvlogdiag.toml`` or ``[tool.kvlogdiag]`` in ``pyproject.toml``.

Looked up from the current directory upwards (first file found wins); command-line flags win over
the file. Keys: ``select``, ``ignore`` (lists), ``fail-on``, ``min-severity``, ``rules`` (list of
folders, relative to the file), ``role``, ``p99-len``, ``avg-prompt-len``, ``strict-rules`` and a
``[params.KVD004]`` table per rule to change thresholds.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from kvlogdiag.rules.context import Options

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROLES = ("prefill", "decode", "mixed")
LEVELS = ("error", "warning", "info", "never")


class ConfigError(Exception):
    """A configuration file that cannot be used; the message names the file (and line)."""


_KEYS = {"select", "ignore", "fail-on", "min-severity", "rules", "role", "p99-len", "avg-prompt-len",
         "strict-rules", "params"}


def find_config(start: Path | None = None) -> tuple[Path, dict] | None:
    """The first kvlogdiag.toml / pyproject.toml with [tool.kvlogdiag] from ``start`` upwards."""
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


def toml_error_line(exc: Exception, text: str) -> int:
    """Line number of a TOML error (tomllib says "at line N" or "at end of document")."""
    m = re.search(r"line (\d+)", str(exc))
    if m:
        return int(m.group(1))
    return max(1, text.count("\n") + (0 if text.endswith("\n") else 1))


def nesting_line(text: str, limit: int = 100) -> int:
    """Line where bracket nesting first passes ``limit`` (where a too-deep TOML document goes wrong)."""
    depth = 0
    for n, line in enumerate(text.splitlines(), 1):
        for ch in line:
            if ch in "[{":
                depth += 1
                if depth > limit:
                    return n
            elif ch in "]}":
                depth = max(0, depth - 1)
    return 1


def _read(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
        return tomllib.loads(text)
    except RecursionError:
        raise ConfigError(f"{path}:{nesting_line(text)}: invalid TOML: nested too deeply") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}:{toml_error_line(exc, text)}: invalid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None


def _key_line(path: Path, key: str) -> str:
    """``path:line`` of the first line that sets ``key`` (or opens its table), else just ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return str(path)
    pat = re.compile(rf"""^\s*(?:["']?{re.escape(key)}["']?\s*=|\[+\s*(?:tool\.kvlogdiag\.)?["']?{re.escape(key)}\b)""")
    for n, line in enumerate(text.splitlines(), 1):
        if pat.match(line):
            return f"{path}:{n}"
    return str(path)


def options_from_file(path: Path, data: dict) -> dict[str, Any]:
    """Validate a config table and turn it into `Options` keyword arguments."""
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
        raise _KeyError(first, f"unknown key(s): {', '.join(sorted(unknown))} (known: {', '.join(sorted(_KEYS))})")
    out: dict[str, Any] = {}

    def lst(key: str) -> list[str]:
        v = data[key]
        if isinstance(v, str):
            v = [x.strip() for x in v.split(",") if x.strip()]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise _KeyError(key, f"'{key}' must be a list of strings")
        return v

    if "select" in data:
        out["select"] = lst("select")
    if "ignore" in data:
        out["ignore"] = lst("ignore")
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


def load_options(explicit: str | None = None, **flags: Any) -> Options:
    """Options from the config file (``explicit`` path or the one found), then flags on top."""
    base: dict[str, Any] = {}
    if explicit:
        p = Path(explicit)
        if not p.is_file():
            raise ConfigError(f"{explicit}: config file not found")
        data = _read(p)
        if p.name == "pyproject.toml":
            data = data.get("tool", {}).get("kvlogdiag", {})
        base = options_from_file(p, data)
    else:
        found = find_config()
        if found:
            base = options_from_file(*found)
    for k, v in flags.items():
        if v is None or v == () or v == []:
            continue
        if k == "rule_dirs":
            base[k] = list(base.get(k, [])) + list(v)
        elif k in ("select", "ignore"):
            base[k] = [x.strip() for item in v for x in item.split(",") if x.strip()]
        else:
            base[k] = v
    return Options(**base)
