"""A small, safe expression language for rule conditions.

Each rule (TOML) has a ``condition`` such as::

    gpu_memory_utilization >= 0.90 and kv_cache_tokens is not null
    kv_role in ['kv_producer', 'kv_both'] and not defined(kv_connector)
    max_num_seqs * max_model_len > kv_cache_tokens
    any_line('Maximum concurrency for \\d+ tokens') or count("OOM") > 0

The text is tokenized and parsed by hand into an immutable tree; it never
reaches ``eval``/``exec``/``compile`` or the ``ast`` module. (`rules/compiled.py`
compiles Python generated from the tree's *shape*: every literal and name is
a bound constant, never source text.)

Language
  * literals: ints (``65_536``), floats (``0.90``, ``1e3``), strings in single
    or double quotes (escapes are ``\\'``, ``\\"`` and ``\\\\``; other backslashes
    are kept, so regex patterns read naturally), ``true``, ``false``, ``null``,
    lists ``[1, 2, 'a']``.
  * names, dotted allowed (``config.max_model_len``: one flat key of the
    environment). Names must be known at load time and may not start or end
    with ``_`` or contain ``__``.
  * ``f(a, b)`` for registered functions only; positional arguments only.
  * operators, lowest precedence first: ``or``; ``and``; ``not``; the
    non-chaining comparisons ``== != < <= > >= in``, ``not in``, ``is null``,
    ``is not null``; ``+ -``; ``* / %``; unary ``-``. Parentheses group.

Semantics (SQL-like nulls, so rules survive facts a log lacks)
  * A name absent from the environment is ``null``. Every comparison with
    ``null`` is false, except ``is [not] null`` and ``==``/``!=`` written
    against the literal ``null``. Arithmetic with ``null`` is ``null``.
  * ``not``/``and``/``or`` use truthiness (``null 0 '' []`` are false),
    short-circuit, and return a bool.
  * Division/modulo by zero and results non-finite or beyond +/-1e300 are ``null``.
  * Ordering works for number/number and string/string only, anything else
    raises :class:`EvaluationError`; ``==`` across types is false (``true != 1``).
  * ``in`` is list membership or substring.
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, Union

if TYPE_CHECKING:
    import regex

from kvlogdiag import recache
from kvlogdiag.errors import KvlogdiagError
from kvlogdiag.records import FrozenRecord

__all__ = [
    "Binary", "Call", "Condition", "ConditionError", "EvaluationError", "FunctionSpec",
    "ListExpr", "Literal", "Name", "Node", "Unary", "bounded_round", "check_round_digits", "compile_user_regex",
    "parse", "regex_search",
]

MAX_SOURCE_LENGTH = 4_000
MAX_DEPTH = 32
MAX_NODES = 500
MAX_DIGITS = 30
MAX_STEPS = 10_000
MAX_MAGNITUDE = 1e300
COMPILE_AFTER = 3  # evaluations of one Condition before it runs compiled (rules/compiled.py)
MAX_ROUND_DIGITS = 20  # round(x, n): |n| beyond this means nothing for a figure; round(1, -10**9) builds 10**(10**9)

_E = TypeVar("_E", bound="_PositionedError")


class _PositionedError(KvlogdiagError):
    def __init__(self, message: str, position: int | None = None, context: str = "") -> None:
        super().__init__(message, position, context)  # keeps the error picklable
        self.message, self.position, self.context = message, position, context

    def with_context(self: _E, context: str) -> _E:
        """The same error prefixed with e.g. ``"rules/kv.toml: KV001"``."""
        joined = f"{context}: {self.context}" if self.context else context
        return type(self)(self.message, self.position, joined)

    def __str__(self) -> str:
        prefix = f"{self.context}: " if self.context else ""
        where = "" if self.position is None else f" at column {self.position}"
        return f"{prefix}{self.message}{where}"


class ConditionError(_PositionedError, ValueError):
    """A condition refused at load time; ``position`` is the 0-based column."""

    position: int


class EvaluationError(_PositionedError):
    """A condition could not be evaluated; ``position`` is the column, if known."""


class _Frozen(FrozenRecord):
    """A `kvlogdiag.records.FrozenRecord` (the frozen-dataclass behaviour, written out: a dataclass costs ~0.5 ms to
    create at import, docs/performance.md "Session 8 (2)") whose fields are ``__slots__`` (`_FIELDS`, in order), set
    once in ``__init__`` and pickled as a call of the class with those fields."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:  # Class(*fields): half the cost of a state to set back field by field
        return self.__class__, self._GET(self)


class FunctionSpec(_Frozen):
    """Arity of a registered function (``max_args=None``: unbounded).

    A string literal passed at an index in ``regex_args`` is compiled at load
    time, so a broken pattern fails the rule load rather than every evaluation;
    a number literal at an index in ``digits_args`` (round's decimals) must be
    an integer within +/-``MAX_ROUND_DIGITS``.
    """

    __slots__ = ("min_args", "max_args", "regex_args", "digits_args")
    _FIELDS = __slots__
    min_args: int
    max_args: int | None
    regex_args: frozenset[int]
    digits_args: frozenset[int]

    def __init__(self, min_args: int = 0, max_args: int | None = None, regex_args: frozenset[int] = frozenset(),
                 digits_args: frozenset[int] = frozenset()) -> None:
        if min_args < 0 or (max_args is not None and max_args < min_args):
            raise ValueError(f"invalid arity {min_args}..{max_args}")
        _set = object.__setattr__
        _set(self, "min_args", min_args)
        _set(self, "max_args", max_args)
        _set(self, "regex_args", regex_args)
        _set(self, "digits_args", digits_args)



class Literal(_Frozen):
    """A constant: null, true/false, a number or a string."""

    __slots__ = ("value", "pos")
    _FIELDS = __slots__
    value: None | bool | int | float | str
    pos: int

    def __init__(self, value: None | bool | int | float | str, pos: int) -> None:
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "pos", pos)



class Name(_Frozen):
    """A name from the rule's context or its [let] table."""

    __slots__ = ("name", "pos")
    _FIELDS = __slots__
    name: str
    pos: int

    def __init__(self, name: str, pos: int) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "pos", pos)



class ListExpr(_Frozen):
    """A list literal, ``[a, b, ...]``."""

    __slots__ = ("items", "pos")
    _FIELDS = __slots__
    items: tuple[Node, ...]
    pos: int

    def __init__(self, items: tuple[Node, ...], pos: int) -> None:
        object.__setattr__(self, "items", items)
        object.__setattr__(self, "pos", pos)



class Call(_Frozen):
    """A function call, ``name(args...)``."""

    __slots__ = ("name", "args", "pos")
    _FIELDS = __slots__
    name: str
    args: tuple[Node, ...]
    pos: int

    def __init__(self, name: str, args: tuple[Node, ...], pos: int) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "pos", pos)



class Unary(_Frozen):
    """A prefix or postfix operator applied to one operand."""

    __slots__ = ("op", "operand", "pos")
    _FIELDS = __slots__
    op: str  # '-', 'not', 'is null', 'is not null'
    operand: Node
    pos: int

    def __init__(self, op: str, operand: Node, pos: int) -> None:
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "operand", operand)
        object.__setattr__(self, "pos", pos)



class Binary(_Frozen):
    """An infix operator applied to two operands."""

    __slots__ = ("op", "left", "right", "pos")
    _FIELDS = __slots__
    op: str  # or and == != < <= > >= in 'not in' + - * / %
    left: Node
    right: Node
    pos: int

    def __init__(self, op: str, left: Node, right: Node, pos: int) -> None:
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "left", left)
        object.__setattr__(self, "right", right)
        object.__setattr__(self, "pos", pos)



Node = Union[Literal, Name, ListExpr, Call, Unary, Binary]


def _walk(root: Node) -> Iterator[Node]:
    # Iterative: a long left-deep chain such as a+b+c+... must not recurse.
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ListExpr, Call)):
            stack.extend(node.items if isinstance(node, ListExpr) else node.args)
        elif isinstance(node, Unary):
            stack.append(node.operand)
        elif isinstance(node, Binary):
            stack.extend((node.left, node.right))


# Python words are refused by name so the error says why, not just "unknown name".
_KEYWORDS = frozenset({"and", "or", "not", "in", "is", "true", "false", "null"})
_RESERVED = frozenset(
    "lambda if else elif for while import from as def class return yield with try except "
    "finally raise del global nonlocal assert pass break continue async await True False "
    "None".split())
_PY_CONSTANTS = {"True": "true", "False": "false", "None": "null"}
_CONSTANTS = {"true": True, "false": False, "null": None}
_CHAR_HINTS = {
    "=": "use '==' to compare; keyword arguments are not supported",
    ".": "attribute access is not supported", "!": "use 'not' or '!='",
    "&": "use 'and'", "|": "use 'or'", ":": "lambdas and slices are not supported",
    ";": "only a single expression is allowed",
}
_DIGITS = r"\d(?:_?\d)*"
_TOKEN_RE = recache.compile(
    rf"""(?P<ws>\s+)
    |(?P<number>{_DIGITS}(?:\.{_DIGITS})?(?:[eE][+-]?{_DIGITS})?)
    |(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)
    |(?P<string>'(?:[^'\\\n]|\\[^\n])*'|"(?:[^"\\\n]|\\[^\n])*")
    |(?P<op>\*\*|==|!=|<=|>=|[-+*/%<>()\[\],])""",
    re.VERBOSE | re.ASCII)
_UNESCAPE_RE = recache.compile(r"""\\(['"\\])""")


class _Token(NamedTuple):
    kind: str  # number string name keyword op eof
    text: str
    value: Any
    pos: int


def _number(text: str, pos: int) -> int | float:
    if sum(c.isdigit() for c in text) > MAX_DIGITS:
        raise ConditionError(f"numeric literal has more than {MAX_DIGITS} digits", pos)
    plain = text.replace("_", "")
    if recache.compile(r"0\d").match(plain):
        raise ConditionError("leading zeros are not allowed in numbers", pos)
    if not any(c in plain for c in ".eE"):
        return int(plain)
    value = float(plain)
    if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
        raise ConditionError("numeric literal out of range", pos)
    return value


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            if text[pos] in "'\"":
                raise ConditionError("unterminated string", pos)
            hint = _CHAR_HINTS.get(text[pos])
            raise ConditionError(f"unexpected {text[pos]!r}" + (f" ({hint})" if hint else ""), pos)
        kind, tok, end = m.lastgroup, m.group(), m.end()
        if kind == "number":
            if end < len(text) and (text[end].isalnum() or text[end] in "_."):
                raise ConditionError(f"invalid number {text[pos:end + 1]!r}", pos)
            tokens.append(_Token(kind, tok, _number(tok, pos), pos))
        elif kind == "string":
            tokens.append(_Token(kind, tok, _UNESCAPE_RE.sub(r"\1", tok[1:-1]), pos))
        elif kind == "name":
            tokens.append(_Token("keyword" if tok in _KEYWORDS else "name", tok, tok, pos))
        elif tok == "**":
            raise ConditionError("the power operator '**' is not supported", pos)
        elif kind == "op":
            tokens.append(_Token(kind, tok, tok, pos))
        pos = end
    tokens.append(_Token("eof", "", None, len(text)))
    return tokens


_OR, _AND, _NOT, _CMP, _ADD, _MUL, _NEG = range(1, 8)  # binding powers, low to high
_PREC = {"or": _OR, "and": _AND, "+": _ADD, "-": _ADD, "*": _MUL, "/": _MUL, "%": _MUL,
         **dict.fromkeys(("==", "!=", "<", "<=", ">", ">=", "in", "not", "is"), _CMP)}
NameSet = Union[Collection[str], Callable[[str], bool]]


def _describe(tok: _Token) -> str:
    if tok.kind == "eof":
        return "end of condition"
    return repr(tok.text if len(tok.text) <= 24 else tok.text[:21] + "...")


def _suggest(name: str, known: Collection[str]) -> str:
    import difflib  # only for an unknown name (~2 ms of CPU to import)

    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class _Parser:
    def __init__(self, text: str, names: NameSet, functions: Mapping[str, FunctionSpec]) -> None:
        self.tokens = _tokenize(text)
        self.index = self.depth = self.nodes = 0
        self.names = names
        self.functions = functions

    @property
    def tok(self) -> _Token:
        return self.tokens[self.index]

    def _advance(self) -> _Token:
        tok = self.tokens[self.index]
        self.index += tok.kind != "eof"
        return tok

    def _at(self, kind: str, text: str) -> bool:
        return self.tok.kind == kind and self.tok.text == text

    def _fail(self, expected: str) -> ConditionError:
        return ConditionError(f"expected {expected}, found {_describe(self.tok)}", self.tok.pos)

    def _node(self, node: Node) -> Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ConditionError(f"condition has more than {MAX_NODES} nodes", node.pos)
        return node

    @contextmanager
    def _nested(self, pos: int) -> Iterator[None]:
        # Counted explicitly so deep input is refused long before Python's own limit.
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ConditionError(f"nesting deeper than {MAX_DEPTH} levels", pos)
        yield
        self.depth -= 1

    def parse(self) -> Node:
        if self.tok.kind == "eof":
            raise ConditionError("empty condition; expected an expression", 0)
        node = self._expr(_OR)
        if self.tok.kind != "eof":
            raise ConditionError(f"unexpected {_describe(self.tok)}; expected an operator "
                                 "or end of condition", self.tok.pos)
        return node

    def _expr(self, min_prec: int) -> Node:
        # Precedence climbing: binary operators loop; only real nesting recurses.
        left = self._prefix(min_prec)
        compared = False
        while self.tok.kind in ("op", "keyword") and _PREC.get(self.tok.text, 0) >= min_prec:
            tok = self._advance()
            prec = _PREC[tok.text]
            if prec != _CMP:
                left = self._node(Binary(tok.text, left, self._expr(prec + 1), tok.pos))
            elif compared:
                raise ConditionError(f"comparisons cannot be chained; unexpected {tok.text!r}",
                                     tok.pos)
            else:
                compared = True
                left = self._comparison(tok, left)
        return left

    def _comparison(self, tok: _Token, left: Node) -> Node:
        if tok.text == "is":
            negated = self._at("keyword", "not")
            self.index += negated
            if not self._at("keyword", "null"):
                raise self._fail("'null' after 'is'")
            self._advance()
            return self._node(Unary("is not null" if negated else "is null", left, tok.pos))
        op = tok.text
        if op == "not":
            if not self._at("keyword", "in"):
                raise self._fail("'in' after 'not'")
            self._advance()
            op = "not in"
        return self._node(Binary(op, left, self._expr(_CMP + 1), tok.pos))

    def _prefix(self, min_prec: int) -> Node:
        tok = self.tok
        prec = {"not": _NOT, "-": _NEG}.get(tok.text, 0) if tok.kind in ("op", "keyword") else 0
        if prec >= min_prec:
            self._advance()
            with self._nested(tok.pos):
                operand = self._expr(prec)
            return self._node(Unary(tok.text, operand, tok.pos))
        node = self._primary()
        if self._at("op", "["):
            raise ConditionError("unexpected '[' (subscripts are not supported)", self.tok.pos)
        if self._at("op", "("):
            raise ConditionError("unexpected '(' (only registered functions can be called)",
                                 self.tok.pos)
        return node

    def _primary(self) -> Node:
        tok = self.tok
        if tok.kind in ("number", "string") or (tok.kind == "keyword" and tok.text in _CONSTANTS):
            self._advance()
            value = _CONSTANTS[tok.text] if tok.kind == "keyword" else tok.value
            return self._node(Literal(value, tok.pos))
        if tok.kind == "name":
            self._check_identifier(tok)
            self._advance()
            if self._at("op", "("):
                return self._call(tok)
            if isinstance(self.names, Collection):
                if tok.text not in self.names:
                    hint = _suggest(tok.text, self.names)
                    raise ConditionError(f"unknown name {tok.text!r}{hint}", tok.pos)
            elif not self.names(tok.text):
                raise ConditionError(f"unknown name {tok.text!r}", tok.pos)
            return self._node(Name(tok.text, tok.pos))
        if tok.kind == "op" and tok.text in ("(", "["):
            self._advance()
            with self._nested(tok.pos):
                if tok.text == "[":
                    return self._node(ListExpr(self._sequence("]", trailing_comma=True), tok.pos))
                inner = self._expr(_OR)
                if not self._at("op", ")"):
                    raise self._fail("')'")
                self._advance()
                return inner
        raise self._fail("an expression")

    @staticmethod
    def _check_identifier(tok: _Token) -> None:
        if "__" in tok.text or any(p[0] == "_" or p[-1] == "_" for p in tok.text.split(".")):
            raise ConditionError(f"invalid name {tok.text!r}: names may not start or end "
                                 "with '_' or contain '__'", tok.pos)
        if tok.text in _RESERVED:
            hint = f" (use {_PY_CONSTANTS[tok.text]!r})" if tok.text in _PY_CONSTANTS else ""
            raise ConditionError(f"{tok.text!r} is not part of the condition language{hint}",
                                 tok.pos)

    def _sequence(self, close: str, trailing_comma: bool) -> tuple[Node, ...]:
        items: list[Node] = []
        while not self._at("op", close):
            items.append(self._expr(_OR))
            if self._at("op", ","):
                self._advance()
                if self._at("op", close) and not trailing_comma:
                    raise self._fail("an expression")
            elif not self._at("op", close):
                raise self._fail(f"',' or {close!r}")
        self._advance()
        return tuple(items)

    def _call(self, name: _Token) -> Node:
        spec = self.functions.get(name.text)
        if spec is None:
            hint = _suggest(name.text, self.functions)
            raise ConditionError(f"unknown function {name.text!r}{hint}", name.pos)
        with self._nested(self._advance().pos):
            args = self._sequence(")", trailing_comma=False)
        low, high = spec.min_args, spec.max_args
        if len(args) < low or (high is not None and len(args) > high):
            wanted = (str(low) if high == low else f"at least {low}" if high is None
                      else f"{low} to {high}")
            raise ConditionError(
                f"function {name.text!r} takes {wanted} argument(s), got {len(args)}", name.pos)
        for i in spec.regex_args:
            arg = args[i] if i < len(args) else None
            if isinstance(arg, Literal) and isinstance(arg.value, str):
                compile_user_regex(arg.value, position=arg.pos)
        for i in spec.digits_args:
            arg = args[i] if i < len(args) else None
            sign, lit = 1, arg
            if isinstance(arg, Unary) and arg.op == "-":
                sign, lit = -1, arg.operand
            if arg is not None and isinstance(lit, Literal) and isinstance(lit.value, (int, float)) \
                    and not isinstance(lit.value, bool):
                try:
                    check_round_digits(sign * lit.value)
                except EvaluationError as exc:
                    raise ConditionError(f"function {name.text!r}: {exc.message}", arg.pos) from None
        return self._node(Call(name.text, args, name.pos))


def parse(text: str, names: NameSet, functions: Mapping[str, FunctionSpec]) -> Condition:
    """Parse and validate ``text``, raising :class:`ConditionError` on any problem.

    ``names`` is the collection of known names, or a predicate saying whether one is known.
    """
    if not isinstance(text, str):
        raise ConditionError(f"condition must be a string, not {type(text).__name__}", 0)
    if len(text) > MAX_SOURCE_LENGTH:
        raise ConditionError(f"condition is longer than {MAX_SOURCE_LENGTH} characters",
                             MAX_SOURCE_LENGTH)
    parser = _Parser(text, names, functions)
    try:
        tree = parser.parse()
    except RecursionError:  # backstop only: the depth counter should always trip first
        raise ConditionError("condition is nested too deeply", parser.tok.pos) from None
    return Condition(text, tree)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _normalize(x: Any) -> Any:
    # Facts may come from pandas/numpy; their scalars must act like plain numbers.
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    return float(x) if isinstance(x, numbers.Real) else x


def _type_name(x: Any) -> str:
    for kind, name in ((type(None), "null"), (bool, "bool"), (str, "string"),
                       ((list, tuple), "list"), ((int, float), "number")):
        if isinstance(x, kind):
            return name
    return type(x).__name__


def _truthy(x: Any) -> bool:
    return x is not None and bool(x)


def _equal(a: Any, b: Any) -> bool:
    # bool is excluded from numbers, so the final type check keeps true != 1.
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and bool(a == b)


def _bounded(x: int | float) -> int | float | None:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return None if abs(x) > MAX_MAGNITUDE else x


def check_round_digits(n: Any) -> int:
    """round()'s decimals as an int; EvaluationError unless an integer within +/-MAX_ROUND_DIGITS."""
    if not _is_number(n) or n != int(n):
        raise EvaluationError(f"decimals must be a whole number, not {n!r}")
    if abs(n) > MAX_ROUND_DIGITS:
        raise EvaluationError(f"decimals {int(n)} out of range (at most {MAX_ROUND_DIGITS} either way)")
    return int(n)


def bounded_round(x: Any, n: Any = 0) -> int | float | None:
    """The rule language's ``round(x, n)``: null for a non-number ``x``; ``n`` checked first (see above)."""
    digits = check_round_digits(n)
    if not _is_number(x):
        return None
    return _bounded(round(x, digits))


def _call_function(functions: Mapping[str, Callable[..., Any]], node: Call, *args: Any) -> Any:
    fn = functions.get(node.name)
    if fn is None:
        raise EvaluationError(f"function {node.name!r} is not available", node.pos)
    try:
        return _normalize(fn(*args))
    except EvaluationError:
        raise
    except Exception as exc:  # one broken function must not crash the whole run
        raise EvaluationError(f"function {node.name!r} failed: {exc}", node.pos) from exc


def _is_null_literal(node: Node) -> bool:
    return isinstance(node, Literal) and node.value is None


_ORDER: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "%": operator.mod}


class _Evaluator:
    def __init__(self, env: Mapping[str, Any], functions: Mapping[str, Callable[..., Any]],
                 max_steps: int) -> None:
        self.env, self.functions, self.max_steps = env, functions, max_steps
        self.steps = 0

    def _spend(self, n: int, pos: int) -> None:
        self.steps += n
        if self.steps > self.max_steps:
            raise EvaluationError(f"evaluation exceeded {self.max_steps} steps", pos)

    def visit(self, node: Node) -> Any:
        self._spend(1, node.pos)
        match node:
            case Literal():
                return node.value
            case Name():
                return _normalize(self.env.get(node.name))
            case ListExpr():
                return [self.visit(item) for item in node.items]
            case Call():
                return self._call(node, [self.visit(arg) for arg in node.args])
            case Unary():
                return self._unary(node, self.visit(node.operand))
            case Binary(op="and"):
                return _truthy(self.visit(node.left)) and _truthy(self.visit(node.right))
            case Binary(op="or"):
                return _truthy(self.visit(node.left)) or _truthy(self.visit(node.right))
            case Binary(op=op) if op in _ARITH:
                return self._arith(node, self.visit(node.left), self.visit(node.right))
            case Binary():
                return self._compare(node, self.visit(node.left), self.visit(node.right))
        raise EvaluationError(f"unknown node {type(node).__name__}")

    def _call(self, node: Call, args: list[Any]) -> Any:
        return _call_function(self.functions, node, *args)

    @staticmethod
    def _unary(node: Unary, value: Any) -> Any:
        if node.op == "not":
            return not _truthy(value)
        if node.op != "-":
            return (value is None) == (node.op == "is null")
        if value is None:
            return None
        if not _is_number(value):
            raise EvaluationError(f"cannot negate a {_type_name(value)}", node.pos)
        return _bounded(-value)

    def _compare(self, node: Binary, left: Any, right: Any) -> bool:
        op = node.op
        if op in ("==", "!=") and (_is_null_literal(node.left) or _is_null_literal(node.right)):
            return (left is None and right is None) == (op == "==")
        if left is None or right is None:
            return False
        if op in ("==", "!="):
            return _equal(left, right) == (op == "==")
        if op in ("in", "not in"):
            return self._contains(node, right, left) == (op == "in")
        if not ((_is_number(left) and _is_number(right))
                or (isinstance(left, str) and isinstance(right, str))):
            raise EvaluationError(
                f"cannot compare {_type_name(left)} {op} {_type_name(right)}", node.pos)
        return bool(_ORDER[op](left, right))

    def _contains(self, node: Binary, container: Any, item: Any) -> bool:
        if isinstance(container, str):
            if not isinstance(item, str):
                raise EvaluationError(f"'{node.op}' on a string needs a string on the left, "
                                      f"not {_type_name(item)}", node.pos)
            return item in container
        if isinstance(container, (list, tuple)):
            self._spend(len(container), node.pos)  # env lists can be long: they cost steps
            return any(_equal(item, element) for element in container)
        raise EvaluationError(f"'{node.op}' needs a list or string on the right, "
                              f"not {_type_name(container)}", node.pos)

    @staticmethod
    def _arith(node: Binary, left: Any, right: Any) -> Any:
        if left is None or right is None:
            return None
        if node.op == "+" and isinstance(left, str) and isinstance(right, str):
            return left + right
        if not (_is_number(left) and _is_number(right)):
            raise EvaluationError(f"cannot apply '{node.op}' to {_type_name(left)} and "
                                  f"{_type_name(right)}", node.pos)
        try:
            return _bounded(_ARITH[node.op](left, right))
        except (ZeroDivisionError, OverflowError):
            return None


_Program = Callable[[_Evaluator], Any]
_PLAIN = frozenset({bool, int, float, str})
_NUMBER_TYPES = frozenset({int, float})  # exactly: bool is not a number in the condition language  # what `_normalize` returns unchanged (its other cases: subclasses, numpy)


def _program(node: Node) -> _Program:
    """``node`` as closures over its children's: what `_Evaluator.visit` does, step for step (the same steps
    counted, in the same order, the same errors), without the type dispatch at every visit — a scan evaluates
    every rule on every log. A node of any other type (or a subclass) is left to `_Evaluator.visit`."""
    t, pos = type(node), node.pos

    if t is Literal:
        value = node.value  # type: ignore[union-attr]

        def literal(ev: _Evaluator) -> Any:
            ev.steps += 1
            if ev.steps > ev.max_steps:
                ev._spend(0, pos)
            return value
        return literal
    if t is Name:
        name = node.name  # type: ignore[union-attr]

        def get(ev: _Evaluator) -> Any:
            ev.steps += 1
            if ev.steps > ev.max_steps:
                ev._spend(0, pos)
            value = ev.env.get(name)
            return value if value is None or type(value) in _PLAIN else _normalize(value)
        return get
    if t is ListExpr:
        items = tuple(_program(i) for i in node.items)  # type: ignore[union-attr]

        def listing(ev: _Evaluator) -> Any:
            ev.steps += 1
            if ev.steps > ev.max_steps:
                ev._spend(0, pos)
            return [i(ev) for i in items]
        return listing
    if t is Call:
        call_node = node
        args = tuple(_program(a) for a in node.args)  # type: ignore[union-attr]

        def call(ev: _Evaluator) -> Any:
            ev.steps += 1
            if ev.steps > ev.max_steps:
                ev._spend(0, pos)
            return ev._call(call_node, [a(ev) for a in args])  # type: ignore[arg-type]
        return call
    if t is Unary:
        unary_node = node
        operand = _program(node.operand)  # type: ignore[union-attr]

        def unary(ev: _Evaluator) -> Any:
            ev.steps += 1
            if ev.steps > ev.max_steps:
                ev._spend(0, pos)
            return _Evaluator._unary(unary_node, operand(ev))  # type: ignore[arg-type]
        return unary
    if t is Binary:
        bin_node: Binary = node  # type: ignore[assignment]
        op, left, right = bin_node.op, _program(bin_node.left), _program(bin_node.right)
        if op == "and":
            def both(ev: _Evaluator) -> Any:
                ev.steps += 1
                if ev.steps > ev.max_steps:
                    ev._spend(0, pos)
                return _truthy(left(ev)) and _truthy(right(ev))
            return both
        if op == "or":
            def either(ev: _Evaluator) -> Any:
                ev.steps += 1
                if ev.steps > ev.max_steps:
                    ev._spend(0, pos)
                return _truthy(left(ev)) or _truthy(right(ev))
            return either
        if op in _ARITH:
            def arith(ev: _Evaluator) -> Any:
                ev.steps += 1
                if ev.steps > ev.max_steps:
                    ev._spend(0, pos)
                return _Evaluator._arith(bin_node, left(ev), right(ev))
            return arith

        if op in _ORDER:  # two plain numbers: what _compare does for them, without its other cases
            order = _ORDER[op]

            def ordered(ev: _Evaluator) -> Any:
                ev.steps += 1
                if ev.steps > ev.max_steps:
                    ev._spend(0, pos)
                a, b = left(ev), right(ev)
                if type(a) in _NUMBER_TYPES and type(b) in _NUMBER_TYPES:
                    return bool(order(a, b))
                return ev._compare(bin_node, a, b)
            return ordered
        if op in ("==", "!=") and not (_is_null_literal(bin_node.left) or _is_null_literal(bin_node.right)):
            equal = op == "=="

            def equality(ev: _Evaluator) -> Any:  # two plain numbers or two strings: _equal is plain ==
                ev.steps += 1
                if ev.steps > ev.max_steps:
                    ev._spend(0, pos)
                a, b = left(ev), right(ev)
                ta, tb = type(a), type(b)
                if (ta in _NUMBER_TYPES and tb in _NUMBER_TYPES) or (ta is str and tb is str):
                    return (a == b) == equal
                return ev._compare(bin_node, a, b)
            return equality

        def compare(ev: _Evaluator) -> Any:
            ev.steps += 1
            if ev.steps > ev.max_steps:
                ev._spend(0, pos)
            return ev._compare(bin_node, left(ev), right(ev))
        return compare
    return lambda ev: ev.visit(node)


class Condition(_Frozen):
    """A parsed, validated condition; immutable and safe to share between threads."""

    # no __slots__: the cached properties below live in the instance __dict__, pickled with it (`__getstate__`)
    _FIELDS = ("source", "tree")
    __reduce__ = object.__reduce__  # type: ignore[assignment]  # the default: a new object, its __dict__ set back
    source: str
    tree: Node

    def __init__(self, source: str, tree: Node) -> None:
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "tree", tree)


    @functools.cached_property
    def names(self) -> frozenset[str]:
        return frozenset(n.name for n in _walk(self.tree) if isinstance(n, Name))

    @functools.cached_property
    def functions(self) -> frozenset[str]:
        return frozenset(n.name for n in _walk(self.tree) if isinstance(n, Call))

    def evaluate(self, env: Mapping[str, Any],
                 functions: Mapping[str, Callable[..., Any]] | None = None,
                 *, max_steps: int = MAX_STEPS) -> Any:
        """Evaluate against ``env`` (missing names are null); EvaluationError on failure."""
        compiled = self.__dict__.get("_compiled")
        if compiled is None and "_compiled" not in self.__dict__:
            # compiled on its COMPILE_AFTER-th evaluation: a one-file analyze evaluates each condition once and
            # would only pay the compile (~0.1 ms each); a scan evaluates each thousands of times
            uses = self.__dict__["_uses"] = self.__dict__.get("_uses", 0) + 1
            if uses >= COMPILE_AFTER:
                compiled = self._compiled
        try:
            if compiled is not None and compiled[1] <= max_steps:  # cannot run out of steps: no count kept
                return compiled[0](env, functions or {})
            return self._program(_Evaluator(env, functions or {}, max_steps))
        except RecursionError:
            raise EvaluationError("condition is nested too deeply to evaluate") from None

    def __str__(self) -> str:
        return self.source

    @functools.cached_property
    def null_guards(self) -> tuple[tuple[tuple[str, bool], ...], Any]:
        """`kvlogdiag.rules.guards.guards` of the tree: names whose absence decides the value."""
        from kvlogdiag.rules.guards import guards

        return guards(self.tree)

    @functools.cached_property
    def check_guards(self) -> tuple[tuple[str, bool], ...]:
        """`kvlogdiag.rules.guards.check_guards` of the tree: names whose absence makes a check false."""
        from kvlogdiag.rules.guards import check_guards

        return check_guards(self.tree)

    @functools.cached_property
    def _program(self) -> _Program:
        return _program(self.tree)

    @functools.cached_property
    def _compiled(self) -> Any:
        """`kvlogdiag.rules.compiled.compile_tree` of the tree: (function, most steps), or None."""
        from kvlogdiag.rules.compiled import compile_tree

        return compile_tree(self.tree)

    def __getstate__(self) -> dict[str, Any]:  # closures and generated functions do not pickle: rebuilt on use
        return {k: v for k, v in self.__dict__.items() if k not in ("_program", "_compiled", "_uses")}


@functools.lru_cache(maxsize=256)
def _compile(pattern: str) -> regex.Pattern[str]:
    import regex  # on first use: importing it is ~10 ms of CPU, and most starts evaluate no rule regex

    return regex.compile(pattern)


def compile_user_regex(pattern: str, position: int = 0) -> regex.Pattern[str]:
    """Compile a rule author's pattern; ConditionError at ``position`` if it is invalid."""
    if not isinstance(pattern, str):
        raise ConditionError(f"regex pattern must be a string, not {_type_name(pattern)}",
                             position)
    try:
        return _compile(pattern)
    except Exception as exc:
        import regex

        if isinstance(exc, regex.error):
            where = "" if exc.pos is None else f" (pattern offset {exc.pos})"
            raise ConditionError(f"invalid regular expression: {exc.msg}{where}", position) from None
        if isinstance(exc, (ValueError, OverflowError)):  # e.g. NUL bytes, huge repeat counts
            raise ConditionError(f"invalid regular expression: {exc}", position) from None
        raise


def regex_search(pattern: str, text: str, timeout: float = 0.25) -> regex.Match[str] | re.Match[str] | None:
    """Search ``text`` with at most ``timeout`` seconds of matching; EvaluationError on timeout."""
    if not isinstance(text, str):
        raise EvaluationError(f"regex subject must be a string, not {_type_name(text)}")
    from kvlogdiag.rules.plainregex import plain_pattern

    plain = plain_pattern(pattern)  # same answers, cannot backtrack: no `regex` import, no timeout needed
    if plain is not None:
        return plain.search(text)
    try:
        compiled = compile_user_regex(pattern)
    except ConditionError as exc:
        raise EvaluationError(exc.message) from None
    try:
        return compiled.search(text, timeout=timeout)
    except TimeoutError:
        raise EvaluationError(f"regex timed out after {timeout} s: {pattern[:60]!r}") from None
