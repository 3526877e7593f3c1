"""Safe parsing of the Python reprs vLLM prints: dicts, Namespaces and ``key=value`` configs.

vLLM logs its settings as Python reprs (``non-default args: {...}``, ``args: Namespace(...)``,
``KVTransferConfig(kv_connector='NixlConnector', ...)``) and its engine config as a flat
``key=value, key=value`` string whose values nest brackets and commas. Nothing here ever calls
``eval``: a small tokenizer reads the literal subset (str, int, float, True/False/None, dict, list,
tuple, ``Name(k=v, ...)`` calls, dotted names such as ``torch.bfloat16`` and ``<Enum.X: 3>``) and
gives back plain Python values (set displays become lists; ``b''``/``r''`` prefixes and all Python
string escapes are read). Anything it does not understand becomes a string, so one odd value
never loses the rest of the line; a line cut short yields what was read up to the cut, nested
containers included (``{'a': 1, 'kv': KVTransferConfig(kv_role='kv_both', x=`` →
``{'a': 1, 'kv': {'__class__': 'KVTransferConfig', 'kv_role': 'kv_both', 'x': None}}``).
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
        self.partial: Any = None  # what the innermost container being cut had read

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

    def _child(self, depth: int) -> tuple[Any, bool]:
        """Parse one nested value; on a cut return (what the child had read, True)."""
        self.partial = None
        try:
            return self.value(depth), False
        except _Cut:
            return self.partial, True

    def mapping(self, depth: int) -> Any:
        self.i += 1
        out: dict = {}
        try:
            while True:
                c = self.peek()
                if c == "}":
                    self.i += 1
                    return out
                if not c:
                    raise _Cut("end")
                key = self.value(depth + 1)
                c = self.peek()
                if not out and c in (",", "}"):
                    break  # a set display, not a dict
                if c != ":":
                    raise _Cut("expected ':'")
                self.i += 1
                val, cut = self._child(depth + 1)
                out[_hashable(key)] = val
                if cut:
                    raise _Cut("cut inside a value")
                c = self.peek()
                if c == ",":
                    self.i += 1
                elif c != "}":
                    raise _Cut("expected ',' or '}'")
        except _Cut:
            self.partial = out
            raise
        return self._set_rest(key, depth)

    def _set_rest(self, first: Any, depth: int) -> list:
        """A set display ``{a, b}`` (first element already read) → list, in printed order."""
        out = [first]
        try:
            while True:
                c = self.peek()
                if c == ",":
                    self.i += 1
                    c = self.peek()
                if c == "}":
                    self.i += 1
                    return out
                if not c:
                    raise _Cut("end")
                val, cut = self._child(depth + 1)
                if cut:
                    if val is not None:
                        out.append(val)
                    raise _Cut("cut inside a value")
                out.append(val)
                c = self.peek()
                if c not in (",", "}"):
                    raise _Cut("expected ',' or '}'")
        except _Cut:
            self.partial = out
            raise

    def seq(self, close: str, depth: int) -> list:
        self.i += 1
        out: list = []
        try:
            while True:
                c = self.peek()
                if c == close:
                    self.i += 1
                    return out
                if not c:
                    raise _Cut("end")
                val, cut = self._child(depth + 1)
                if cut:
                    if val is not None:
                        out.append(val)
                    raise _Cut("cut inside a value")
                out.append(val)
                c = self.peek()
                if c == ",":
                    self.i += 1
                elif c != close:
                    raise _Cut(f"expected ',' or '{close}'")
        except _Cut:
            self.partial = out
            raise

    def string(self, raw: bool = False) -> str:
        s, q = self.s, self.s[self.i]
        n = self.n
        i = self.i + 1
        buf = []
        while i < n:
            ch = s[i]
            if ch == "\\" and i + 1 < n:
                if raw:
                    buf.append(s[i: i + 2])
                    i += 2
                    continue
                text, i = _unescape(s, i, n)
                buf.append(text)
                continue
            if ch == q:
                self.i = i + 1
                return "".join(buf)
            buf.append(ch)
            i += 1
        raise _Cut("unterminated string")

    def angle(self) -> str:
        """``<Enum.X: 3>``, ``<function <lambda> at 0x7f>``: kept as text, nesting and quotes respected."""
        s, n = self.s, self.n
        i = self.i
        depth = 0
        quote = ""
        while i < n:
            ch = s[i]
            if quote:
                if ch == quote:
                    quote = ""
            elif ch in "'\"" and s[i - 1: i] in (" ", "(", "[", "{", ":", ","):
                quote = ch
            elif ch == "<":
                depth += 1
            elif ch == ">":
                depth -= 1
                if depth == 0:
                    text = s[self.i: i + 1]
                    self.i = i + 1
                    return text
            i += 1
        raise _Cut("unterminated <...>")

    def number(self) -> Any:
        s, i = self.s, self.i
        j = i
        while j < self.n and (s[j].isalnum() or s[j] in "+-._"):
            if s[j] in "+-" and j > i and s[j - 1] not in "eE":
                break
            j += 1
        tok = s[i:j]
        self.i = j
        if not tok.isascii():
            return None  # int()/float() read non-ASCII digits (٣٢, ３２); vLLM prints ASCII ones: damage, no figure
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
        if j < self.n and s[j] in "'\"" and name.lower() in _STRING_PREFIXES:
            return self.string(raw="r" in name.lower())
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
        try:
            while True:
                c = self.peek()
                if c == ")":
                    self.i += 1
                    if args:
                        out["args"] = args
                    return out
                if not c:
                    raise _Cut("end")
                key = None
                j = self.i
                while j < self.n and (self.s[j].isalnum() or self.s[j] == "_"):
                    j += 1
                if j > self.i and j < self.n and self.s[j] == "=" and self.s[j + 1: j + 2] != "=":
                    key = self.s[self.i: j]
                    self.i = j + 1
                val, cut = self._child(depth + 1)
                if key is None:
                    if not cut or val is not None:
                        args.append(val)
                else:
                    out[key] = val
                if cut:
                    raise _Cut("cut inside a value")
                c = self.peek()
                if c == ",":
                    self.i += 1
                elif c != ")":
                    raise _Cut("expected ',' or ')'")
        except _Cut:
            if args:
                out["args"] = args
            self.partial = out
            raise


_STRING_PREFIXES = {"b", "r", "u", "rb", "br"}
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"',
                   "a": "\a", "b": "\b", "f": "\f", "v": "\v", "\n": ""}
_HEX_LEN = {"x": 2, "u": 4, "U": 8}


def _unescape(s: str, i: int, n: int) -> tuple[str, int]:
    """Decode the Python escape at ``s[i] == '\\'``; return (text, index after it).

    Unknown or malformed escapes are kept verbatim, as Python does for unknown ones.
    """
    nxt = s[i + 1]
    simple = _SIMPLE_ESCAPES.get(nxt)
    if simple is not None:
        return simple, i + 2
    if nxt in _HEX_LEN:
        k = _HEX_LEN[nxt]
        digits = s[i + 2: i + 2 + k]
        if len(digits) == k and all(c in "0123456789abcdefABCDEF" for c in digits):
            code = int(digits, 16)
            if code <= 0x10FFFF:
                return chr(code), i + 2 + k
        return "\\" + nxt, i + 2
    if nxt in "01234567":
        j = i + 1
        while j < n and j < i + 4 and s[j] in "01234567":
            j += 1
        return chr(int(s[i + 1: j], 8)), j
    if nxt == "N" and s[i + 2: i + 3] == "{":
        end = s.find("}", i + 3)
        if end > 0:
            import unicodedata

            try:
                return unicodedata.lookup(s[i + 3: end]), end + 1
            except KeyError:
                pass
    return "\\" + nxt, i + 2


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
    except (_Cut, RecursionError, IndexError, ValueError):
        partial = p.partial
        if isinstance(partial, dict) and text.lstrip().startswith("{"):
            # a dict broken in the middle (not cut at the end): the lenient pass may read more
            salvaged = _salvage_dict(text)
            if isinstance(salvaged, dict) and len(salvaged) > len(partial):
                return salvaged
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
    except (_Cut, RecursionError, IndexError, ValueError):
        return out


def parse_json_or_repr(text: str) -> Any:
    """A value that may be JSON (``--kv-transfer-config '{...}'``) or a Python repr."""
    t = text.strip()
    if t[:1] in "{[":
        try:
            return json.loads(t)
        except (ValueError, RecursionError):
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
    prev = "="  # last non-space character outside quotes
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
                prev = ch
            i += 1
            continue
        if ch in "'\"" and prev in "=([{,:<":
            # a quote opens a string only where a value starts (not the apostrophe in Bob's)
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
                prev = "="
                continue
        if ch != " ":
            prev = ch
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
    if not t.isascii():
        try:
            float(t)
        except ValueError:
            pass
        else:
            return None  # a number in non-ASCII digits (٣٢٧٦٨): damage, not a figure (vLLM prints ASCII digits)
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        pass
    if t[0] in "{[(" or "(" in t:
        return unwrap_path(parse_json_or_repr(t))
    return t


_PATH_CLASSES = frozenset({"PosixPath", "Path", "WindowsPath", "PurePosixPath", "PureWindowsPath"})


def unwrap_path(val: Any) -> Any:
    """``PosixPath('/models/x')`` (old vLLM printed model paths so) → ``'/models/x'``."""
    if (isinstance(val, dict) and val.get(CLASS_KEY) in _PATH_CLASSES and isinstance(val.get("args"), list)
            and len(val["args"]) == 1 and isinstance(val["args"][0], str)):
        return val["args"][0]
    return val
