"""Compiled conditions (kvlogdiag.rules.compiled) give exactly the interpreter's value or error — on random trees
and environments, and on every condition of the built-in rules — and only trees that cannot run out of steps are
compiled."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlogdiag.rules import condition as C
from kvlogdiag.rules.compiled import MAX_COMPILED_DEPTH, compile_tree
from kvlogdiag.rules.condition import Binary, Call, Condition, EvaluationError, ListExpr, Literal, Name, Unary, parse
from kvlogdiag.rules.engine import load_rules


class Real(float):
    """A float that is not a plain float (as a numpy scalar is not): the evaluator normalises it."""


NAMES = ("a", "b", "c", "d")
VALUES = [None, 0, 1, -3, 2.5, 1e299, "", "x", "0.13.0", "xy", [], [1, "x"], (), (1,), True, False, Real(0.0),
          Real(4.0), 10 ** 40]


def _raise_evaluation() -> Any:
    raise EvaluationError("boom")


def _raise_value(*_: Any) -> Any:
    raise ValueError("bad input")


FUNCS = {
    "defined": lambda x: x is not None,
    "coalesce": lambda *a: next((x for x in a if x is not None), None),
    "boom": _raise_evaluation,
    "fail": _raise_value,
    "lower": lambda s: s.lower() if isinstance(s, str) else None,
    "real": lambda *a: Real(len(a)),
}
CALLED = sorted(FUNCS) + ["missing"]  # 'missing' is not in FUNCS: "function 'missing' is not available"

_pos = st.integers(0, 40)
_leaf = st.one_of(
    st.tuples(st.sampled_from(NAMES), _pos).map(lambda t: Name(*t)),
    st.tuples(st.sampled_from([None, 0, 1, 2.5, -1, "", "x", True, False, 1e300]), _pos).map(lambda t: Literal(*t)),
)
_BINARY = ["and", "or", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "+", "-", "*", "/", "%"]


def _extend(children: st.SearchStrategy) -> st.SearchStrategy:
    lists = st.tuples(st.lists(children, max_size=3), _pos).map(lambda t: ListExpr(tuple(t[0]), t[1]))
    return st.one_of(
        st.tuples(st.sampled_from(_BINARY), children, children, _pos).map(lambda t: Binary(*t)),
        # 'in' over a list literal: the compiled kind of membership
        st.tuples(st.sampled_from(["in", "not in"]), children, lists, _pos).map(lambda t: Binary(*t)),
        st.tuples(st.sampled_from(["not", "-", "is null", "is not null"]), children, _pos).map(lambda t: Unary(*t)),
        st.tuples(st.sampled_from(CALLED), st.lists(children, max_size=2), _pos).map(
            lambda t: Call(t[0], tuple(t[1][:1] if t[0] in ("defined", "lower") else t[1]), t[2])),
        lists,
    )


TREES = st.recursive(_leaf, _extend, max_leaves=14)
ENVS = st.fixed_dictionaries({}, optional={n: st.sampled_from(VALUES) for n in NAMES})


def _describe(run: Any) -> tuple[str, str]:
    try:
        value = run()
    except (EvaluationError, ArithmeticError, TypeError, ValueError, RecursionError) as exc:
        return "error", f"{type(exc).__name__}: {exc}"
    return "value", f"{type(value).__name__}: {value!r}"  # repr tells 1, 1.0 and True apart; lists element-wise


def _interpreted(tree: C.Node, env: dict, max_steps: int = C.MAX_STEPS) -> tuple[str, str]:
    cond = Condition("<generated>", tree)
    return _describe(lambda: cond._program(C._Evaluator(env, FUNCS, max_steps)))


@settings(max_examples=4000, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TREES, ENVS)
def test_a_compiled_tree_gives_the_interpreters_value_or_error(tree, env):
    _assert_agree(tree, env)


def _assert_agree(tree: C.Node, env: dict) -> None:
    compiled = compile_tree(tree)
    if compiled is None:
        assert any(type(n) is Binary and n.op in ("in", "not in") and type(n.right) is not ListExpr
                   for n in C._walk(tree)), tree
        return
    fn, bound = compiled
    assert bound <= C.MAX_STEPS
    assert _describe(lambda: fn(env, FUNCS)) == _interpreted(tree, env), (tree, env)


def test_most_random_trees_are_compiled():
    # the property test above is vacuous if the generator rarely compiles: count on a fixed sample
    rnd = random.Random(3)
    compiled = 0
    for _ in range(300):
        compiled += compile_tree(_random_tree(rnd, 4)) is not None
    assert compiled > 150


def _random_tree(rnd: random.Random, depth: int) -> C.Node:
    if depth == 0 or rnd.random() < 0.25:
        return Name(rnd.choice(NAMES), 0) if rnd.random() < 0.5 else Literal(rnd.choice([0, 1, "x", None, True, 2.5]), 0)
    op = rnd.choice(_BINARY)
    right = ListExpr((Literal(1, 0), Name("a", 0)), 0) if op in ("in", "not in") and rnd.random() < 0.7 \
        else _random_tree(rnd, depth - 1)
    return Binary(op, _random_tree(rnd, depth - 1), right, rnd.randint(0, 9))


def _builtin_conditions() -> list[Condition]:
    out = []
    for rule in load_rules(()).rules:
        out += [c for _, c in rule.lets] + [c.when for c in rule.checks]
    return out


def test_every_builtin_condition_compiled_gives_the_interpreters_result_on_random_environments():
    conds = _builtin_conditions()
    assert len(conds) > 100
    rnd = random.Random(29)
    compiled = 0
    for cond in conds:
        got = compile_tree(cond.tree)
        if got is None:
            continue
        compiled += 1
        fn, _ = got
        # the rules' own functions (event, version_ge, ...) answer from a fixed table, so both runs see the same
        table = {f: (lambda *a, _f=f: FUNCS[_f](*a) if _f in FUNCS else (len(a) or None)) for f in cond.functions}
        names = sorted(cond.names)
        for _ in range(60):
            env = {n: rnd.choice(VALUES) for n in names if rnd.random() < 0.7}
            want = _describe(lambda c=cond, e=env, t=table: c._program(C._Evaluator(e, t, C.MAX_STEPS)))
            assert _describe(lambda f=fn, e=env, t=table: f(e, t)) == want, (cond.source, env)
    assert compiled > 0.9 * len(conds)  # the built-in rules do run compiled


def _name_parse(text: str) -> Condition:
    return parse(text, lambda n: True, {"defined": C.FunctionSpec(1, 1)})


def test_in_over_a_name_keeps_the_interpreter_and_its_step_limit():
    cond = _name_parse("a in b")
    assert compile_tree(cond.tree) is None
    env = {"a": 5, "b": list(range(C.MAX_STEPS + 5))}
    for _ in range(C.COMPILE_AFTER + 2):  # past the evaluation that would compile it
        with pytest.raises(EvaluationError, match="exceeded"):
            cond.evaluate(env, {})


def test_a_step_limit_below_the_bound_keeps_the_interpreter():
    cond = _name_parse("a + 1 > 2 and a in [1, 2, 3]")
    fn, bound = compile_tree(cond.tree)  # type: ignore[misc]
    assert bound == 12 + 3  # twelve nodes, and the three elements the `in` looks through
    for _ in range(C.COMPILE_AFTER + 2):
        assert cond.evaluate({"a": 2}, {}) is True
        assert cond.evaluate({"a": 2}, {}, max_steps=bound) is True
        with pytest.raises(EvaluationError, match="exceeded 14 steps"):
            cond.evaluate({"a": 2}, {}, max_steps=bound - 1)
    assert "_compiled" in cond.__dict__


def test_compiled_only_after_repeated_evaluation_and_not_pickled():
    import pickle

    cond = _name_parse("defined(a) and a > 1")
    for _ in range(C.COMPILE_AFTER - 1):
        cond.evaluate({"a": 2}, FUNCS)
    assert "_compiled" not in cond.__dict__  # a one-file analyze never pays the compile
    cond.evaluate({"a": 2}, FUNCS)
    assert cond.__dict__["_compiled"] is not None
    again = pickle.loads(pickle.dumps(cond))
    assert again == cond and "_compiled" not in again.__dict__ and again.evaluate({"a": 2}, FUNCS) is True


def test_deep_trees_keep_the_interpreter():
    deep: C.Node = Name("a", 0)
    for _ in range(MAX_COMPILED_DEPTH):
        deep = Binary("+", deep, Literal(1, 0), 0)
    assert compile_tree(deep) is None
    assert Condition("deep", deep).evaluate({"a": 1}) == MAX_COMPILED_DEPTH + 1


def test_names_and_strings_never_reach_the_generated_source(monkeypatch):
    import kvlogdiag.rules.compiled as M

    seen: list[str] = []
    real_compile = compile
    monkeypatch.setattr(M, "compile", lambda src, *a: seen.append(src) or real_compile(src, *a), raising=False)
    compile_tree(Binary("==", Name("a.b", 0), Literal("')) or __import__('os')", 0), 0))
    assert seen and "__import__" not in seen[0] and "a.b" not in seen[0]


@pytest.mark.parametrize("helper", ["_order", "_equality"])
def test_the_property_test_catches_a_wrong_compiled_helper(helper, monkeypatch):
    """The random test above fails when a compiled fast path is made wrong on purpose."""
    import kvlogdiag.rules.compiled as M

    wrong = {  # ordering without the type check; equality across types (1 == True)
        "_order": lambda node, order, a, b: False if a is None or b is None else bool(order(a, b)),
        "_equality": lambda node, equal, a, b: (a == b) == equal,
    }
    monkeypatch.setitem(M._HELPERS, helper, wrong[helper])
    rnd = random.Random(11)
    with pytest.raises(AssertionError):
        for _ in range(2000):
            _assert_agree(_random_tree(rnd, 3), {n: rnd.choice(VALUES) for n in NAMES if rnd.random() < 0.7})
