"""The records that were dataclasses on the small-analyze path and are plain classes since session 8 (2)
(docs/performance.md "Session 8 (2): small-analyze start-up"): each keeps what was used of its dataclass —
equality and hash by value, the dataclass repr, refusing assignment when it was frozen, a pickle round trip
(the rule-set cache) — checked against a real dataclass of the same fields where there is one to compare."""

from __future__ import annotations

import copy
import dataclasses
import io
import pickle

import pytest

from kvlogdiag.cli.output import Output
from kvlogdiag.derive import architecture as A
from kvlogdiag.rules import condition as C
from kvlogdiag.rules import setcache
from kvlogdiag.rules.context import Context, builtin_providers
from kvlogdiag.rules.engine import Check, Rule, RuleError, RuleSet, load_rules
from kvlogdiag.rules.suggestion import SuggestSpec

NODE_FIELDS = {C.Literal: ("value", "pos"), C.Name: ("name", "pos"), C.ListExpr: ("items", "pos"),
               C.Call: ("name", "args", "pos"), C.Unary: ("op", "operand", "pos"),
               C.Binary: ("op", "left", "right", "pos")}


def _reference(cls: type, fields: tuple[str, ...]) -> type:
    """A frozen dataclass of the same name and fields: what the class was before."""
    ref = dataclasses.make_dataclass(cls.__name__, list(fields), frozen=True)
    ref.__qualname__ = cls.__qualname__
    return ref


def _as_reference(node: object) -> object:
    """The same tree built of reference dataclasses."""
    if isinstance(node, tuple):
        return tuple(_as_reference(n) for n in node)
    fields = NODE_FIELDS.get(type(node))  # type: ignore[call-overload]
    if fields is None:
        return node
    return _REFS[type(node)](*(_as_reference(getattr(node, f)) for f in fields))


_REFS = {cls: _reference(cls, f) for cls, f in NODE_FIELDS.items()}


def _conditions(rules: RuleSet) -> list[C.Condition]:
    out: list[C.Condition] = []
    for r in rules.rules:
        out += [c for _, c in r.lets] + [c.when for c in r.checks]
        out += [v for c in r.checks if c.suggest for v in (c.suggest.value, c.suggest.when) if v is not None]
    return out


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


def test_condition_nodes_compare_hash_and_show_as_their_dataclasses_did(rules: RuleSet) -> None:
    conds = _conditions(rules)
    assert len(conds) > 100
    for cond in conds:
        ref = _as_reference(cond.tree)
        assert repr(cond.tree) == repr(ref)
        assert repr(cond) == f"Condition(source={cond.source!r}, tree={ref!r})"
        again = copy.deepcopy(cond)
        assert again == cond and hash(again) == hash(cond) and again is not cond
        assert again.tree == cond.tree and hash(again.tree) == hash(cond.tree)
    a, b = C.Literal(1, 0), C.Literal(1, 0)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != C.Literal(1, 1) and a != C.Literal(2, 0)
    assert C.Name("x", 0) != C.Call("x", (), 0) and a != (1, 0)  # another class is never equal
    assert C.Binary("+", a, b, 1) == C.Binary("+", b, a, 1) != C.Binary("-", a, b, 1)
    assert C.FunctionSpec(1, 2) == C.FunctionSpec(min_args=1, max_args=2) != C.FunctionSpec(1, 3)
    with pytest.raises(ValueError, match="invalid arity"):
        C.FunctionSpec(2, 1)


def test_frozen_records_refuse_assignment_and_deletion(rules: RuleSet) -> None:
    check = rules.rules[0].checks[0]
    arch = next(iter(A.load_catalogue().values()))
    entry = A.catalogue_entries()[0]
    provider = next(iter(builtin_providers().values()))
    spec = next(c.suggest for r in rules.rules for c in r.checks if c.suggest is not None)
    targets = [(C.Literal(1, 0), "value"), (C.Binary("+", C.Literal(1, 0), C.Literal(2, 2), 1), "op"),
               (check.when, "source"), (C.FunctionSpec(), "min_args"), (check, "message"), (spec, "flag"),
               (provider, "code"), (arch, "name"), (arch.layers[0], "kind"), (arch.layer_groups[0], "count"),
               (entry, "arch")]
    for obj, name in targets:
        before = getattr(obj, name)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, None)
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(obj, name)
        assert getattr(obj, name) is before, type(obj)


def test_rule_set_pickles_round_trip_with_exactly_the_allowed_classes(rules: RuleSet) -> None:
    named: list[tuple[str, str]] = []

    class Recording(setcache._Unpickler):
        def find_class(self, module: str, name: str):  # type: ignore[no-untyped-def]
            named.append((module, name))
            return super().find_class(module, name)

    data = setcache._dumps(rules)
    back = Recording(io.BytesIO(data)).load()
    assert back == rules and back is not rules
    assert [r.names_used for r in back.rules] == [r.names_used for r in rules.rules]
    for x, y in zip(_conditions(back), _conditions(rules)):
        assert (x.source, x.tree, x.null_guards, x.check_guards) == (y.source, y.tree, y.null_guards, y.check_guards)
    # the built-in set names every allowed class and nothing else: the allow-list is exact
    assert set(named) == setcache.ALLOWED


def test_rule_and_rule_set_compare_by_fields_and_are_unhashable(rules: RuleSet) -> None:
    rule = rules.rules[0]
    twin = copy.copy(rule)
    assert twin == rule and twin is not rule
    twin.severity = "error" if rule.severity != "error" else "info"
    assert twin != rule
    assert RuleSet(list(rules.rules)) == rules != RuleSet(rules.rules[1:])
    assert RuleSet() == RuleSet([]) and RuleSet().rules is not RuleSet().rules
    for obj in (rule, rules):
        with pytest.raises(TypeError):
            hash(obj)
    assert rule != object() and Check.__eq__(rule.checks[0], rule) is NotImplemented  # type: ignore[arg-type]
    assert Rule(*(getattr(rule, f) for f in Rule.__init__.__code__.co_varnames[1:17])) == rule  # the fields, in order


def test_suggest_spec_and_check_keep_positions_and_defaults() -> None:
    s = SuggestSpec("--max-num-seqs", None, None, None, None, None)
    assert s.remove is False and vars(s)["flag"] == "--max-num-seqs"
    assert s == SuggestSpec("--max-num-seqs", None, None, None, None, None, False) != \
        SuggestSpec("--max-num-seqs", None, None, None, None, None, True)
    assert repr(s) == ("SuggestSpec(flag='--max-num-seqs', env=None, value=None, when=None, measure=None, "
                       "restart_and_measure=None, remove=False)")
    cond = C.Condition("x", C.Name("x", 0))
    c = Check(cond, "m", "info", None, ())
    assert c.suggest is None and c == Check(cond, "m", "info", None, (), None)
    assert pickle.loads(pickle.dumps(c)) == c and pickle.loads(pickle.dumps(s)) == s


def test_plain_mutable_records_keep_their_attributes() -> None:
    e = RuleError("KVD001", "boom")
    assert (e.code, e.message) == ("KVD001", "boom") and not hasattr(e, "__dict__")
    ctx = Context({"a": 1}, {}, {"b": "why"})
    assert (ctx.values, ctx.prov, ctx.failed) == ({"a": 1}, {}, {"b": "why"}) and dict(ctx.guarded()) == {"a": 1}
    out = Output()
    assert (out.path, out.quiet) == (None, False) and (Output("f", True).path, Output("f", True).quiet) == ("f", True)


def test_architecture_records_compare_and_rebuild_as_before() -> None:
    full = A.LayerSpec(A.KIND_FULL, 8, 128)
    assert full == A.LayerSpec(A.KIND_FULL, num_kv_heads=8, head_dim=128) and hash(full) == hash(A.LayerSpec("full", 8, 128))
    assert full != A.LayerSpec(A.KIND_SLIDING, 8, 128, sliding_window=4096)
    arch = A.ModelArch("m", "f", 3, 8, 128, (full, A.LayerSpec(A.KIND_FULL, 8, 128), A.LayerSpec(A.KIND_SLIDING, 8, 128, 512)))
    groups = arch.layer_groups
    assert [(g.spec.kind, g.count) for g in groups] == [("full", 2), ("sliding", 1)]  # equal specs counted together
    fields = ["name", "family", "num_layers", "num_kv_heads", "head_dim", "layers", "num_mtp_layers", "mtp_layer",
              "default_dtype", "auto_kv_cache_dtype", "max_position_embeddings", "num_attention_heads", "verified",
              "source", "notes"]
    assert list(arch.__dict__) == fields  # catalogue_entries rebuilds one with ModelArch(**arch.__dict__)
    assert A.ModelArch(**{**arch.__dict__, "source": "s"}).source == "s"
    with pytest.raises(ValueError, match="2 layer specs for num_layers=3"):
        A.ModelArch("m", "f", 3, 8, 128, (full, full))
    for entry in A.catalogue_entries():
        back = pickle.loads(pickle.dumps(entry))
        assert back.__dict__.keys() == entry.__dict__.keys() and back.arch.layers == entry.arch.layers
        assert back.arch.layer_groups[0].spec == entry.arch.layer_groups[0].spec
    e1 = A.expected_kv(arch, tp=1)
    e2 = A.expected_kv(arch, tp=1)
    assert e1.assumptions is not e2.assumptions and e1.breakdown is not e2.breakdown
    assert A._LayerCost().__slots__ == ("context", "window_bytes", "window", "state")
    assert (A._LayerCost(window=4).window, A._LayerCost().context) == (4, 0.0)
