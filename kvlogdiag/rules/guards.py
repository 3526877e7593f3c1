"""Null guards: names whose absence decides a condition without evaluating it.

A scan evaluates every rule on every log, and most of a rule's ``[let]`` values and checks read a
figure the log does not have (``max_num_batched_tokens > params.activation_limit`` on a log that never
printed it). Under the condition language's null semantics (`kvlogdiag.rules.condition`) such an
evaluation ends in a known constant: a comparison with ``null`` is false, arithmetic with ``null`` is
``null``, ``a and b`` is false when ``a`` is falsy. `guards` finds, once per condition, the names for
which that holds *whatever the other names are*, and the constant; `decided` looks them up in an
environment. The engine then stores the constant instead of evaluating — the same value, and no error
skipped, because a guard is only derived where everything the evaluator would run before deciding
cannot raise (see `_safe`). Steps (``MAX_STEPS``) cannot be exceeded on such a path either: it
evaluates no ``in`` (the only node that spends more than one step) and at most the tree's nodes.

The derivation, per node (``G_null``: the name being null makes the node ``null``; ``G_false``: makes it
falsy; ``Safe``: evaluating it never raises, for any environment):

* ``Name n``: ``G_null = G_false = {n}`` (null) and, as a truth value, ``n`` falsy;
* arithmetic ``l op r`` and unary ``-``: ``null`` as soon as one side is ``null`` — but both sides are
  evaluated first, so a side's guard counts only if the other side is safe or is guarded by the same name;
* a comparison other than ``== null``/``!= null`` (``< <= > >= == != in``, ``not in``): ``false`` when a side is
  ``null`` (checked before any type error), with the same rule for the other side;
* ``defined(x)``: false when ``x`` is ``null``;
* ``l and r``: false when ``l`` is falsy (``r`` is not evaluated), or when ``l`` is safe and ``r`` is falsy;
* ``l or r``: false when both are falsy on the same name.

Anything else (other calls, ``not``, ``is [not] null``, ``== null``) has no guard; it may still be safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvlogdiag.rules.condition import Binary, Call, ListExpr, Literal, Name, Node, Unary, _is_null_literal

# A guard: (name, falsy) — the condition is decided when env[name] is None, or (falsy=True) any falsy value.
Guard = tuple[str, bool]

_ARITH = frozenset("+-*/%")
_COMPARE = frozenset(("<", "<=", ">", ">=", "==", "!=", "in", "not in"))
_SAFE_CALLS = frozenset({"defined"})  # `lambda x: x is not None`: cannot raise
_PLAIN_FALSY = frozenset({bool, int, float, str, list, tuple})  # what `_normalize` returns unchanged
MAX_GUARDED_NODES = 1_000  # well under MAX_STEPS (10,000): a guarded path cannot run out of steps
MAX_GUARDED_DEPTH = 100  # far from Python's recursion limit: the evaluation it replaces could not fail on it


def _safe(node: Node) -> bool:
    """True when evaluating ``node`` can raise for no environment (nor run out of steps: no ``in``)."""
    t = type(node)
    if t is Literal or t is Name:
        return True
    if t is ListExpr:
        return all(_safe(i) for i in node.items)  # type: ignore[union-attr]
    if t is Unary:
        return node.op != "-" and _safe(node.operand)  # type: ignore[union-attr]  # negating a string raises
    if t is Binary:
        op = node.op  # type: ignore[union-attr]
        if op in ("and", "or", "==", "!="):  # _equal never raises
            return _safe(node.left) and _safe(node.right)  # type: ignore[union-attr]
        return False
    if t is Call:
        return node.name in _SAFE_CALLS and all(_safe(a) for a in node.args)  # type: ignore[union-attr]
    return False


def _both_sides(left: Node, right: Node, gl: frozenset[str], gr: frozenset[str]) -> frozenset[str]:
    # both sides are evaluated before the operator looks at them: a side's guard holds only when the
    # other side cannot raise, or is itself null (hence error-free) under the same name
    out = gl & gr
    if _safe(right):
        out |= gl
    if _safe(left):
        out |= gr
    return out


def _null(node: Node) -> frozenset[str]:
    """Names whose null makes ``node`` evaluate to null, error-free."""
    t = type(node)
    if t is Name:
        return frozenset((node.name,))  # type: ignore[union-attr]
    if t is Unary and node.op == "-":  # type: ignore[union-attr]
        return _null(node.operand)  # type: ignore[union-attr]
    if t is Binary and node.op in _ARITH:  # type: ignore[union-attr]
        left, right = node.left, node.right  # type: ignore[union-attr]
        return _both_sides(left, right, _null(left), _null(right))
    return frozenset()


def _false(node: Node) -> set[Guard]:
    """Guards under which ``node`` evaluates to exactly ``False``, error-free."""
    t = type(node)
    if t is Binary:
        op, left, right = node.op, node.left, node.right  # type: ignore[union-attr]
        if op in _COMPARE:
            if op in ("==", "!=") and (_is_null_literal(left) or _is_null_literal(right)):
                return set()
            return {(n, False) for n in _both_sides(left, right, _null(left), _null(right))}
        if op == "and":
            out = _falsy(left)
            if _safe(left):
                out |= _falsy(right)
            return out
        if op == "or":
            return _falsy(left) & _falsy(right)
        return set()
    if t is Call and node.name == "defined" and len(node.args) == 1:  # type: ignore[union-attr]
        return {(n, False) for n in _null(node.args[0])}  # type: ignore[union-attr]
    return set()


def _falsy(node: Node) -> set[Guard]:
    """Guards under which ``node`` evaluates to a falsy value, error-free."""
    if type(node) is Name:
        return {(node.name, True)}  # type: ignore[union-attr]  # (name, True) covers null too
    return _false(node) | {(n, False) for n in _null(node)}


def _size(root: Node) -> tuple[int, int]:
    nodes, depth, stack = 0, 0, [(root, 1)]
    while stack:
        node, d = stack.pop()
        nodes, depth = nodes + 1, max(depth, d)
        if isinstance(node, (ListExpr, Call)):
            stack.extend((c, d + 1) for c in (node.items if isinstance(node, ListExpr) else node.args))
        elif isinstance(node, Unary):
            stack.append((node.operand, d + 1))
        elif isinstance(node, Binary):
            stack.extend(((node.left, d + 1), (node.right, d + 1)))
    return nodes, depth


def guards(tree: Node) -> tuple[tuple[Guard, ...], Any]:
    """``(guards, value)``: when `decided` finds one of ``guards`` in the environment, evaluating ``tree``
    returns ``value`` (``False`` or ``None``) without an error. ``((), None)`` when there is none."""
    nodes, depth = _size(tree)
    if nodes > MAX_GUARDED_NODES or depth > MAX_GUARDED_DEPTH:
        return (), None
    false = _false(tree)
    if false:
        return _reduce(false), False
    null = _null(tree)
    return tuple(sorted((n, False) for n in null)), None


def check_guards(tree: Node) -> tuple[Guard, ...]:
    """Guards under which ``tree``, a check's ``when``, is false for the engine (`kvlogdiag.rules.engine`):
    every value a guard gives is ``False`` or ``None``, except a bare name's own value — the engine's truth
    test is not the language's (an empty tuple is true to it), so a bare name is guarded by null only."""
    nodes, depth = _size(tree)
    if nodes > MAX_GUARDED_NODES or depth > MAX_GUARDED_DEPTH:
        return ()
    if type(tree) is Name:
        return ((tree.name, False),)  # type: ignore[union-attr]
    return _reduce(_falsy(tree))


def _reduce(found: set[Guard]) -> tuple[Guard, ...]:
    # (n, True) already covers (n, False)
    return tuple(sorted(g for g in found if g[1] or (g[0], True) not in found))


def decided(gs: tuple[Guard, ...], env: Mapping[str, Any]) -> bool:
    """True when one of ``gs`` holds in ``env`` (a name's value exactly as the evaluator would read it)."""
    for name, falsy in gs:
        v = env.get(name)
        if v is None:
            return True
        if falsy and type(v) in _PLAIN_FALSY and not v:
            return True
    return False
