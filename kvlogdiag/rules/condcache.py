"""Parsed rule conditions kept with the parsed rule files, so that a start does not parse them again.

Tokenizing and parsing the ~220 conditions of the built-in rules costs ~15 ms of CPU on every start
(docs/performance.md, "Session 6"). Each rule file's conditions are stored as small JSON trees in the
cache of `kvlogdiag.tomlcache`, keyed by the file's exact text and by the parser itself (size and
modification time of ``condition.py`` and of the installed ``regex``, which checked the patterns), so an edited
rule or parser is simply a miss. A stored tree is used only after the checks that depend on anything
but the text pass again — every name is known to this rule, every function is registered and takes
that many arguments —; otherwise the condition is parsed, and the parser raises its own error.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Any, Callable, Mapping

from kvlogdiag.rules import condition as _c

KIND = "conditions-v1"


def _stamp(path: str | None) -> str:
    try:
        st = os.stat(path)  # type: ignore[arg-type]
        return f"{st.st_size}:{st.st_mtime_ns}"
    except (OSError, TypeError):
        return "?"


@functools.cache
def _regex_origin() -> str | None:
    # looked up once per process: a path search each time was ~45 µs for each of the 19 rule files
    try:
        spec = importlib.util.find_spec("regex")
    except (ImportError, ValueError):
        spec = None
    return spec.origin if spec else None


def _parser_key() -> str:
    """The parser's identity: its file, and the installed ``regex`` (which checked the patterns; found, not imported)."""
    return f"{KIND}|{_stamp(_c.__file__)}|{_stamp(_regex_origin())}"


def encode(node: _c.Node) -> list:
    """The tree as nested lists: ``[kind, fields..., pos]`` (JSON-safe)."""
    if isinstance(node, _c.Literal):
        return ["l", node.value, node.pos]
    if isinstance(node, _c.Name):
        return ["n", node.name, node.pos]
    if isinstance(node, _c.ListExpr):
        return ["a", [encode(x) for x in node.items], node.pos]
    if isinstance(node, _c.Call):
        return ["c", node.name, [encode(x) for x in node.args], node.pos]
    if isinstance(node, _c.Unary):
        return ["u", node.op, encode(node.operand), node.pos]
    if isinstance(node, _c.Binary):
        return ["b", node.op, encode(node.left), encode(node.right), node.pos]
    raise TypeError(f"not a condition node: {node!r}")


def _decode(data: Any, names: set[str], calls: list[_c.Call]) -> _c.Node:
    kind = data[0]
    if kind == "l":
        value = data[1]
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise ValueError("literal")
        return _c.Literal(value, int(data[2]))
    if kind == "n":
        names.add(data[1])
        return _c.Name(str(data[1]), int(data[2]))
    if kind == "a":
        return _c.ListExpr(tuple(_decode(x, names, calls) for x in data[1]), int(data[2]))
    if kind == "c":
        call = _c.Call(str(data[1]), tuple(_decode(x, names, calls) for x in data[2]), int(data[3]))
        calls.append(call)
        return call
    if kind == "u":
        return _c.Unary(str(data[1]), _decode(data[2], names, calls), int(data[3]))
    if kind == "b":
        return _c.Binary(str(data[1]), _decode(data[2], names, calls), _decode(data[3], names, calls), int(data[4]))
    raise ValueError(f"node kind {kind!r}")


def restore(source: str, data: Any, known: "set[str] | Callable[[str], bool]",
            functions: Mapping[str, _c.FunctionSpec]) -> _c.Condition | None:
    """The stored condition, when it still passes every check that is not about its text; else None."""
    names: set[str] = set()
    calls: list[_c.Call] = []
    try:
        tree = _decode(data, names, calls)
    except (TypeError, ValueError, IndexError, KeyError, RecursionError):
        return None
    if not all((n in known) if isinstance(known, (set, frozenset)) else known(n) for n in names):
        return None
    for call in calls:
        spec = functions.get(call.name)
        if spec is None or len(call.args) < spec.min_args or (spec.max_args is not None and len(call.args) > spec.max_args):
            return None
    cond = _c.Condition(source, tree)
    # what the cached properties would compute from the same tree
    cond.__dict__["names"] = frozenset(names)
    cond.__dict__["functions"] = frozenset(c.name for c in calls)
    return cond


class FileTrees:
    """The stored trees of one rule file (by condition text), and those parsed now to store with them."""

    def __init__(self, file_text: str | None):
        from kvlogdiag import tomlcache

        self._tomlcache = tomlcache
        self._key_text = None if file_text is None else f"{_parser_key()}\0{file_text}"
        stored = tomlcache.get_json(self._key_text) if self._key_text is not None else None
        self.stored: dict[str, Any] = stored if isinstance(stored, dict) else {}
        self.added: dict[str, Any] = {}

    def parse(self, text: str, known: Any, functions: Mapping[str, _c.FunctionSpec]) -> _c.Condition:
        """``condition.parse(text, known, functions)``, from the stored tree when it still holds."""
        data = self.stored.get(text)
        if data is not None:
            cond = restore(text, data, known, functions)
            if cond is not None:
                return cond
        cond = _c.parse(text, known, functions)
        if self._key_text is not None:
            try:
                self.added[text] = encode(cond.tree)
            except (TypeError, RecursionError):
                pass
        return cond

    def save(self) -> None:
        """Store this file's trees with the parsed-TOML cache (written by its ``flush``)."""
        if self._key_text is not None and self.added:
            self._tomlcache.put_json(self._key_text, {**self.stored, **self.added})
