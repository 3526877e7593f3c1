"""Conditions compiled once per process into one Python function, for trees that cannot run out of steps.

`rules.condition._Evaluator` counts one step per node it visits and one per element an ``in`` looks through,
and fails past ``max_steps``. In a tree every node is visited at most once, so a tree whose every ``in`` /
``not in`` looks through a list literal can spend at most ``nodes + sum(len(list literal))`` steps: when that
bound is within ``max_steps`` the count can never decide anything, and the tree runs as straight-line Python
generated from it — names and literals read inline, ``and``/``or``/``not``/``is null`` as Python's own
short-circuiting operators on the same truthiness, every other node one call of the very helper the
interpreter uses (`condition._call_function`, `_Evaluator._arith`, `_Evaluator._unary`, the ``_compare`` of a
step-free evaluator), with the same operands evaluated in the same order, so the values and errors (message,
position) are the interpreter's. Any other tree (an ``in`` over a name or a call, whose list may be long; a
node type the generator does not know; a tree too deep for Python's compiler) is not compiled and keeps the
interpreter (`compile_tree` returns None). The generated source is built from the tree's shape only: every
literal, name and node is bound as a constant of the function's globals, never written into the source.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kvlogdiag.rules import condition as C

# The generated expression nests one level per tree level; CPython's parser refuses ~200 nested parentheses.
MAX_COMPILED_DEPTH = 60

_ORDER_OPS = ("<", "<=", ">", ">=")


class _StepFree(C._Evaluator):
    """An evaluator whose steps are never counted: only its ``_compare`` (``in`` on a list spends steps) is used."""

    def __init__(self) -> None:
        super().__init__({}, {}, 0)

    def _spend(self, n: int, pos: int) -> None:
        return None


_FREE = _StepFree()
_NUMBER_TYPES = C._NUMBER_TYPES


def _order(node: C.Binary, order: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    if type(a) in _NUMBER_TYPES and type(b) in _NUMBER_TYPES:
        return bool(order(a, b))
    return _FREE._compare(node, a, b)


def _equality(node: C.Binary, equal: bool, a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if (ta in _NUMBER_TYPES and tb in _NUMBER_TYPES) or (ta is str and tb is str):
        return (a == b) == equal
    return _FREE._compare(node, a, b)


_HELPERS: dict[str, Any] = {
    "_truthy": C._truthy, "_normalize": C._normalize, "_PLAIN": C._PLAIN, "_call": C._call_function,
    "_arith": C._Evaluator._arith, "_unary": C._Evaluator._unary, "_compare": _FREE._compare,
    "_order": _order, "_equality": _equality,
}


def _shape(tree: C.Node) -> tuple[int, int] | None:
    """(the most steps an evaluation can spend, the depth), or None when the step count is unbounded here."""
    steps, depth = 0, 0
    stack: list[tuple[C.Node, int]] = [(tree, 1)]
    while stack:
        node, level = stack.pop()
        steps += 1
        depth = max(depth, level)
        t = type(node)
        if t is C.Literal or t is C.Name:
            continue
        if t is C.ListExpr or t is C.Call:
            children = node.items if t is C.ListExpr else node.args  # type: ignore[union-attr]
            stack.extend((c, level + 1) for c in children)
        elif t is C.Unary:
            stack.append((node.operand, level + 1))  # type: ignore[union-attr]
        elif t is C.Binary:
            if node.op in ("in", "not in"):  # type: ignore[union-attr]
                if type(node.right) is not C.ListExpr:  # type: ignore[union-attr]
                    return None  # a list from the log or a function: its length is not known here
                steps += len(node.right.items)  # type: ignore[union-attr]
            stack.extend(((node.left, level + 1), (node.right, level + 1)))  # type: ignore[union-attr]
        else:
            return None
    return steps, depth


class _Source:
    def __init__(self) -> None:
        self.consts: dict[str, Any] = {}

    def const(self, value: Any) -> str:
        name = f"_k{len(self.consts)}"
        self.consts[name] = value
        return name

    def expr(self, node: C.Node) -> str:  # recursive: depth is bounded by MAX_COMPILED_DEPTH
        t = type(node)
        if t is C.Literal:
            return self.const(node.value)  # type: ignore[union-attr]
        if t is C.Name:
            key = self.const(node.name)  # type: ignore[union-attr]
            return f"(_v if (_v := env.get({key})) is None or type(_v) in _PLAIN else _normalize(_v))"
        if t is C.ListExpr:
            return "[" + "".join(self.expr(i) + ", " for i in node.items) + "]"  # type: ignore[union-attr]
        if t is C.Call:
            args = "".join(", " + self.expr(a) for a in node.args)  # type: ignore[union-attr]
            return f"_call(functions, {self.const(node)}{args})"
        if t is C.Unary:
            operand = self.expr(node.operand)  # type: ignore[union-attr]
            op = node.op  # type: ignore[union-attr]
            if op == "not":
                return f"(not _truthy({operand}))"
            if op == "is null":
                return f"({operand} is None)"
            if op == "is not null":
                return f"({operand} is not None)"
            return f"_unary({self.const(node)}, {operand})"
        assert t is C.Binary
        op, left, right = node.op, self.expr(node.left), self.expr(node.right)  # type: ignore[union-attr]
        if op == "and":
            return f"(_truthy({left}) and _truthy({right}))"
        if op == "or":
            return f"(_truthy({left}) or _truthy({right}))"
        ref = self.const(node)
        if op in C._ARITH:
            return f"_arith({ref}, {left}, {right})"
        if op in _ORDER_OPS:
            return f"_order({ref}, {self.const(C._ORDER[op])}, {left}, {right})"
        if op in ("==", "!=") and not (C._is_null_literal(node.left) or C._is_null_literal(node.right)):  # type: ignore[union-attr]
            return f"_equality({ref}, {op == '=='}, {left}, {right})"
        return f"_compare({ref}, {left}, {right})"


CompiledCondition = tuple[Callable[[Mapping[str, Any], Mapping[str, Callable[..., Any]]], Any], int]


def compile_tree(tree: C.Node) -> CompiledCondition | None:
    """(a function of (env, functions) giving the interpreter's value, the most steps the tree can spend), or
    None when the tree must keep the interpreter."""
    shape = _shape(tree)
    if shape is None or shape[1] > MAX_COMPILED_DEPTH:
        return None
    src = _Source()
    body = src.expr(tree)
    namespace = {**_HELPERS, **src.consts}
    exec(compile(f"def _condition(env, functions):\n    return {body}\n",  # noqa: S102 - built from the tree's shape only
                 "<kvlogdiag condition>", "exec"), namespace)
    return namespace["_condition"], shape[0]
