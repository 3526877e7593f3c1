"""Safe parsing of the Python reprs vLLM prints: dicts, Namespaces and ``key=value`` configs.

vLLM logs its settings as Python reprs (``non-default args: {...}``, ``args: Namespace(...)``,
``KVTransferConfig(kv_connector='NixlConnector', ...)``) and its engine config as a flat
``key=value, key=value`` string whose values nest brackets and commas. Nothing here ever calls
``eval``: a small tokenizer reads the literal subset (str, int, float, True/False/None, dict, list,
tuple, ``Name(k=v, ...)`` calls, dotted names such as ``torch.bfloat16`` and ``<Enum.X: 3>``) and
gives back plain Python values. Anything it does not understand becomes a string, so one odd value
never loses the rest of the line; a line cut short yields what was read up to the cut.
"""

from __future__ import annotations

import json
from typing import Any

_MAX_DEPTH = 64

CLASS_KEY = "__class__"


class _Cut(Exception):
    """The text ended (or broke) before the value did."""


class _Parser:
    def __init__(self, text: str):
        self.s = text
        self.i = 0
        self.n = len(text)

    def ws(self) -> None:
        s, i, n = self.s, self.i, self.n
        while i < n and s[i] in " \t\r\n":
            i += 1
        self.i = i

    def peek(self) -> str:
        self.ws()
        return self.s[self.i] if self.i < self.n else ""

    def value(self, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            raise _Cut("too deep")
        c = self.peek()
        if not c:
            raise _Cut("end")
        if c == "{":
            return self.mapping(depth)
        if c == "[":
            return self.seq("]", depth)
        if c == "(":
            return tuple(self.seq(")", depth))
        if c in "'\"":
            return self.string()
        if c == "<":
            return self.angle()
        if c.isdigit() or (c in "-+." and self.i + 1 < self.n and (self.s[self.i + 1].isdigit() or self.s[self.i + 1] in "i.")):
            return self.number()
        return self.name_or_call(depth)

    def mapping(self, depth: int) -> dict:
        self.i += 1
        out: dict = {}
        while True:
            c = self.peek()
            if c == "}":
                self.i += 1
                return out
            if not c:
                raise _Cut("end")
            key = self.value(depth + 1)
            if self.peek() != ":":
                raise _Cut("expected ':'")
            self.i += 1
            try:
                out[_hashable(key)] = self.value(depth + 1)
            except _Cut:
                out[_hashable(key)] = None
                self.partial = out
                raise
            c = self.peek()
            if c == ",":
                self.i += 1
            elif c != "}":
                raise _Cut("expected ',' or '}'")

    def seq(self, close: str, depth: int) -> list:
        self.i += 1
        out: list = []
        while True:
            c = self.peek()
            if c == close:
                self.i += 1
                return out
            if not c:
                raise _Cut("end")
            out.append(self.value(depth + 1))
            c = self.peek()
            if c == ",":
                self.i += 1
            elif c != close:
                raise _Cut(f"expected ',' or '{close}'")

    def string(self) -> str:
        s, q = self.s, self.s[self.i]
        i = self.i + 1
        buf = []
        while i < self.n:
            ch = s[i]
            if ch == "\\" and i + 1 < self.n:
                nxt = s[i + 1]
                buf.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}.get(nxt, "\\" + nxt))
                i += 2
                continue
            if ch == q:
                self.i = i + 1
                return "".join(buf)
            buf.append(ch)
            i += 1
        raise _Cut("unterminated string")

    def angle(self) -> str:
        end = self.s.find(">", self.i)
        if end < 0:
            raise _Cut("unterminated <...>")
        text = self.s[self.i: end + 1]
        self.i = end + 1
        return text

    def number(self) -> Any:
        s, i = self.s, self.i
        j = i
        while j < self.n and (s[j].isalnum() or s[j] in "+-._"):
            if s[j] in "+-" and j > i and s[j - 1] not in "eE":
                break
            j += 1
        tok = s[i:j]
        self.i = j
        for conv in (int, float):
            try:
                return conv(tok)
            except ValueError:
                pass
        return tok

    def name_or_call(self, depth: int) -> Any:
        s, i = self.s, self.i
        j = i
        while j < self.n and (s[j].isalnum() or s[j] in "_."):
            j += 1
        if j == i:
            raise _Cut(f"unexpected {s[i]!r}")
        name = s[i:j]
        self.i = j
        if name == "True":
            return True
        if name == "False":
            return False
        if name == "None":
            return None
        if name in ("inf", "nan"):
            return float(name)
        if self.i < self.n and s[self.i] == "(":
            return self.call(name, depth)
        return name

    def call(self, name: str, depth: int) -> dict:
        """``Name(k=v, ...)`` → dict with the class name under CLASS_KEY; positional args → list."""
        self.i += 1
        out: dict = {CLASS_KEY: name}
        args: list = []
        while True:
            c = self.peek()
            if c == ")":
                self.i += 1
                if args:
                    out["args"] = args
                return out
            if not c:
                self.partial = out
                raise _Cut("end")
            save = self.i
            key = None
            j = self.i
            while j < self.n and (self.s[j].isalnum() or self.s[j] == "_"):
                j += 1
            if j > self.i and j < self.n and self.s[j] == "=" and self.s[j + 1: j + 2] != "=":
                key = self.s[self.i: j]
                self.i = j + 1
            else:
                self.i = save
            try:
                val = self.value(depth + 1)
            except _Cut:
                if key is not None:
                    out[key] = None
                self.partial = out
                raise
            if key is None:
                args.append(val)
            else:
                out[key] = val
            c = self.peek()
            if c == ",":
                self.i += 1
            elif c != ")":
                raise _Cut("expected ',' or ')'")


def _hashable(key: Any) -> Any:
    try:
        hash(key)
        return key
    except TypeError:
        return repr(key)


def parse_repr(text: str) -> Any:
    """Parse one Python literal repr; on a cut or odd text return what was read (or the text).

    >>> parse_repr("{'a': 1, 'b': KVTransferConfig(kv_role='kv_both')}")
    {'a': 1, 'b': {'__class__': 'KVTransferConfig', 'kv_role': 'kv_both'}}
    """
    p = _Parser(text)
    try:
        return p.value()
    except (_Cut, RecursionError, IndexError):
        partial = getattr(p, "partial", None)
        if partial is not None:
            return partial
        return _salvage_dict(text)


def _salvage_dict(text: str) -> Any:
    """Best effort for a dict repr cut mid-way: parse ``'key': value`` pairs one by one."""
    t = text.strip()
    if not t.startswith("{"):
        return text
    out: dict = {}
    p = _Parser(t)
    p.i = 1
    try:
        while True:
            c = p.peek()
            if c in ("}", ""):
                return out
            key = p.value(1)
            if p.peek() != ":":
                return out
            p.i += 1
            out[_hashable(key)] = p.value(1)
            if p.peek() == ",":
                p.i += 1
    except (_Cut, RecursionError, IndexError):
        return out


def parse_json_or_repr(text: str) -> Any:
    """A value that may be JSON (``--kv-transfer-config '{...}'``) or a Python repr."""
    t = text.strip()
    if t[:1] in "{[":
        try:
            return json.loads(t)
        except ValueError:
            pass
    return parse_repr(t)


def split_key_values(text: str) -> dict[str, str]:
    """Split ``k1=v1, k2=v2, ...`` into raw value strings, respecting brackets and quotes.

    A boundary is a top-level ``, `` followed by an identifier and ``=``: nested values such as
    ``compilation_config={"level": 3, "x": [1, 2]}`` keep their commas.
    """
    out: dict[str, str] = {}
    n = len(text)
    i = 0
    key_start = 0
    depth = 0
    quote = ""
    val_start = -1
    key = None

    def key_at(pos: int) -> int:
        j = pos
        while j < n and (text[j].isalnum() or text[j] == "_"):
            j += 1
        if j > pos and j < n and text[j] == "=" and text[j + 1: j + 2] != "=":
            return j
        return -1

    j = key_at(0)
    if j < 0:
        return out
    key, val_start = text[0:j], j + 1
    i = val_start
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0 and text[i + 1: i + 2] == " ":
            k = i + 1
            while k < n and text[k] == " ":  # 0.8-0.10 print a double space before some keys
                k += 1
            j = key_at(k)
            if j >= 0:
                out[key] = text[val_start:i].strip()
                key_start = k
                key, val_start = text[key_start:j], j + 1
                i = val_start
                continue
        i += 1
    if key is not None:
        out[key] = text[val_start:].rstrip().rstrip(",").strip()
    return out


def scalar(raw: str) -> Any:
    """Convert a raw config value: quoted string, int, float, bool, None, else the text."""
    t = raw.strip()
    if not t:
        return None
    if t[0] in "'\"" and t[-1:] == t[0] and len(t) >= 2:
        return parse_repr(t)
    if t in ("True", "False"):
        return t == "True"
    if t == "None":
        return None
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        pass
    if t[0] in "{[(" or "(" in t:
        val = parse_json_or_repr(t)
        return val
    return t
