"""Null guards (kvlogdiag.rules.guards): a condition the engine skips because a name it needs is absent
must be one whose evaluation gives exactly the stored value (a let) or a false result (a check), with no
error — on random trees and environments, and on every condition of the built-in rules."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlogdiag.rules import guards as G
from kvlogdiag.rules.condition import (
    Binary,
    Call,
    Condition,
    EvaluationError,
    FunctionSpec,
    ListExpr,
    Literal,
    Name,
    Unary,
    parse,
)
from kvlogdiag.rules.engine import _truthy as engine_truthy
from kvlogdiag.rules.engine import load_rules

NAMES = ("a", "b", "c", "d")
VALUES = [None, 0, 1, 2.5, -3, "", "x", "0.13.0", [], [1, "x"], (), True, False]


def _boom() -> Any:
    raise EvaluationError("boom")


FUNCS = {
    "defined": lambda x: x is not None,
    "coalesce": lambda *a: next((x for x in a if x is not None), None),
    "event": lambda name: 0 if name == "never" else 2,
    "boom": _boom,
    "lower": lambda s: s.lower() if isinstance(s, str) else None,
}

_leaf = st.one_of(
    st.sampled_from(NAMES).map(lambda n: Name(n, 0)),
    st.sampled_from([None, 0, 1, 2.5, "", "x", True, False]).map(lambda v: Literal(v, 0)),
)


def _extend(children: st.SearchStrategy) -> st.SearchStrategy:
    ops = ["and", "or", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "+", "-", "*", "/", "%"]
    return st.one_of(
        st.tuples(st.sampled_from(ops), children, children).map(lambda t: Binary(t[0], t[1], t[2], 0)),
        st.tuples(st.sampled_from(["not", "-", "is null", "is not null"]), children).map(lambda t: Unary(t[0], t[1], 0)),
        st.tuples(st.sampled_from(sorted(FUNCS)), st.lists(children, max_size=2)).map(
            lambda t: Call(t[0], tuple(t[1][:1] if t[0] in ("defined", "lower") else [] if t[0] == "boom" else t[1]), 0)),
        st.lists(children, max_size=3).map(lambda items: ListExpr(tuple(items), 0)),
    )


TREES = st.recursive(_leaf, _extend, max_leaves=12)
ENVS = st.fixed_dictionaries({}, optional={n: st.sampled_from(VALUES) for n in NAMES})


def _outcome(cond: Condition, env: dict) -> tuple[str, Any]:
    try:
        return "value", cond.evaluate(env, FUNCS)
    except (EvaluationError, ArithmeticError, TypeError, ValueError, RecursionError) as exc:
        return "error", type(exc).__name__


def _check_exact(tree, env: dict) -> bool:
    """The guard's promise on one environment; True when a guard applied (the case was decided)."""
    cond = Condition("<generated>", tree)
    applied = False
    gs, value = cond.null_guards
    if gs and G.decided(gs, env):
        applied = True
        kind, got = _outcome(cond, env)
        assert kind == "value", (tree, env, got)
        assert got is value, (tree, env, got, value)  # the very constant: False or None, never 0 or ''
    cgs = cond.check_guards
    if cgs and G.decided(cgs, env):
        applied = True
        kind, got = _outcome(cond, env)
        assert kind == "value", (tree, env, got)
        assert not engine_truthy(got), (tree, env, got)
    return applied


@settings(max_examples=3000, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TREES, ENVS)
def test_a_guarded_condition_evaluates_to_the_stored_value_without_error(tree, env):
    _check_exact(tree, env)


def test_guards_fire_where_they_should():
    def g(text: str):
        return parse(text, lambda n: True, {"defined": FunctionSpec(1, 1), "boom": FunctionSpec(0, 0)}).null_guards

    assert g("a > 1 and b") == ((("a", False),), False)
    assert g("a and b > 1") == ((("a", True), ("b", False)), False)  # a is safe to read: b decides too
    assert g("-a > 1 and b > 1") == ((("a", False),), False)  # -a may raise (a string): b alone cannot decide
    assert g("boom() and a > 1") == ((), None)  # boom() runs first and may raise: no guard
    assert g("a > 1 and boom()") == ((("a", False),), False)  # a null: boom() never runs
    assert g("a * b / 2") == ((("a", False), ("b", False)), None)
    assert g("a == null") == ((), None)  # true when a is absent
    assert g("not a") == ((), None)
    assert g("a is null and b > 1") == ((("b", False),), False)
    assert g("defined(a)") == ((("a", False),), False)
    assert g("(a > 1 and boom()) or (a < 0)") == ((("a", False),), False)
    assert g("boom() > a") == ((), None)
    assert g("a in b") == ((("a", False), ("b", False)), False)


def test_a_bare_name_check_is_guarded_by_null_only():
    # the engine's truth test differs from the language's (an empty tuple is true to it)
    cond = Condition("a", Name("a", 0))
    assert cond.check_guards == (("a", False),)
    assert not G.decided(cond.check_guards, {"a": ()}) and engine_truthy(())


def test_limits_give_no_guard():
    deep = Name("a", 0)
    for _ in range(G.MAX_GUARDED_DEPTH + 1):
        deep = Unary("-", deep, 0)
    assert G.guards(deep) == ((), None) and G.check_guards(deep) == ()


def test_decided_reads_values_as_the_evaluator_does():
    assert G.decided((("a", False),), {})
    assert G.decided((("a", False),), {"a": None})
    assert not G.decided((("a", False),), {"a": 0})
    assert G.decided((("a", True),), {"a": 0}) and G.decided((("a", True),), {"a": ""})
    assert not G.decided((("a", True),), {"a": 1})

    class Weird(float):  # not a plain type: never decided by falsiness, left to the evaluator
        pass

    assert not G.decided((("a", True),), {"a": Weird(0.0)})


def _builtin_conditions() -> list[Condition]:
    out = []
    for rule in load_rules(()).rules:
        out += [c for _, c in rule.lets] + [c.when for c in rule.checks]
    return out


def test_every_builtin_condition_keeps_its_promise_on_random_environments():
    conds = _builtin_conditions()
    assert len(conds) > 100
    rnd = random.Random(17)
    decided = 0
    funcs_seen = set()
    for cond in conds:
        funcs_seen |= cond.functions
        names = sorted(cond.names)
        for _ in range(60):
            env = {n: rnd.choice(VALUES) for n in names if rnd.random() < 0.7}
            if _check_builtin(cond, env):
                decided += 1
    assert decided > 1000  # the guards do fire on the real rules


def _check_builtin(cond: Condition, env: dict) -> bool:
    # the built-in rules call functions of their own (event, version_ge, ...): any that the guard lets be
    # skipped must not matter, so calling them must not even happen — a function that raises proves it
    funcs = {**FUNCS, **{f: _boom for f in cond.functions if f not in ("defined",)}}
    applied = False
    gs, value = cond.null_guards
    if gs and G.decided(gs, env):
        applied = True
        assert cond.evaluate(env, funcs) is value, (cond.source, env)
    cgs = cond.check_guards
    if cgs and G.decided(cgs, env):
        applied = True
        assert not engine_truthy(cond.evaluate(env, funcs)), (cond.source, env)
    return applied


@pytest.mark.parametrize("broken", ["safe_negation", "or_union"])
def test_the_property_test_catches_a_wrong_guard(broken, monkeypatch):
    """The random test above fails when the derivation is made wrong on purpose."""
    if broken == "safe_negation":  # negating a string raises: calling it safe lets a guard skip an error
        monkeypatch.setattr(G, "_safe", lambda node: True)
    else:  # 'a or b' is not false because a alone is absent
        monkeypatch.setattr(G, "_false", _or_as_union(G._false))
    rnd = random.Random(5)
    trees = [
        Binary("and", Binary(">", Name("a", 0), Literal(1, 0), 0), Unary("-", Name("b", 0), 0), 0),
        Binary("or", Binary(">", Name("a", 0), Literal(1, 0), 0), Name("b", 0), 0),
        Binary("+", Name("a", 0), Unary("-", Name("b", 0), 0), 0),
    ]
    failed = False
    for tree in trees:
        for _ in range(200):
            env = {n: rnd.choice(VALUES) for n in NAMES if rnd.random() < 0.6}
            try:
                _check_exact(tree, env)
            except AssertionError:
                failed = True
    assert failed


def _or_as_union(real):
    def wrong(node):
        if type(node) is Binary and node.op == "or":
            return G._falsy(node.left) | G._falsy(node.right)
        return real(node)
    return wrong
