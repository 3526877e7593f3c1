"""The records that were dataclasses on the small-analyze path and are plain classes since session 8 (2) and 9
(docs/performance.md "Session 8 (2)" and "Session 9: small-analyze start-up"; `kvlogdiag/records.py`): each keeps what was used of its dataclass —
equality and hash by value, the dataclass repr, refusing assignment when it was frozen, a pickle round trip
(the rule-set cache) — checked against a real dataclass of the same fields where there is one to compare."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import io
import pickle
import re
from typing import Any

import pytest
from conftest import DATA_DIR, SAMPLE_LOGS_DIR

from kvlogdiag import result as R
from kvlogdiag.catalogue import patterns as PT
from kvlogdiag.cli.output import Output
from kvlogdiag.derive import architecture as A
from kvlogdiag.extract import commands as CM
from kvlogdiag.extract import platform as PL
from kvlogdiag.extract.facts import LogFacts
from kvlogdiag.input import metrics as M
from kvlogdiag.records import FrozenRecord, Record, replace
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


# -- kvlogdiag/records.py: the result records and the other records on the analyze path (session 9) ----------

RESULT_RECORDS = (R.Finding, R.RankFigures, R.RankValue, R.LogLine, R.RunInfo, R.VllmInfo, R.KVCache, R.Analysis,
                  R.InputAnalysis)
OTHER_RECORDS = (PL.Evidence, PL._Entry, M.Histogram, M.EngineSample, M.Scrape, PT.Pattern, CM.Command, LogFacts)
_FACTORY_FIELDS = {"KVCache": ("available_by_rank", "tokens_by_rank", "blocks_by_rank"),
                   "Analysis": ("findings", "memory_by_rank", "evidence", "extra", "launch_args", "stats_series",
                                "suggestions"),
                   "EngineSample": ("lines",)}
_DICT_FIELDS = {"memory_by_rank", "evidence", "extra", "launch_args", "stats_series", "lines"}


def _reference(cls: type) -> type:
    """The dataclass ``cls`` was: its fields in order, with the defaults of its ``__init__`` (None standing for the
    dataclass's ``default_factory``), frozen when ``cls`` is."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    factories = _FACTORY_FIELDS.get(cls.__name__, ())
    spec: list = []
    for p in params:
        if p.name in factories:
            spec.append((p.name, Any, dataclasses.field(default_factory=dict if p.name in _DICT_FIELDS else list)))
        elif p.default is inspect.Parameter.empty:
            spec.append((p.name, Any))
        else:
            spec.append((p.name, Any, dataclasses.field(default=p.default)))
    ref = dataclasses.make_dataclass(cls.__name__, spec, frozen=issubclass(cls, FrozenRecord))
    ref.__qualname__ = cls.__qualname__
    return ref


def _records(obj: object, seen: list) -> None:
    """Every record reachable from ``obj``, depth first."""
    if isinstance(obj, Record):
        seen.append(obj)
        for f in obj._FIELDS:
            _records(getattr(obj, f), seen)
    elif isinstance(obj, dict):
        for v in obj.values():
            _records(v, seen)
    elif not isinstance(obj, (str, bytes)) and hasattr(obj, "__iter__"):  # lists, and the lazy views of derive/pairings
        for v in obj:
            _records(v, seen)


@pytest.fixture(scope="module")
def records() -> list:
    """Records of every kind: the analyses of the sample logs, a saved scrape, the catalogues, a launch command."""
    from kvlogdiag.pipeline import Analyzer

    analyzer = Analyzer()
    seen: list = []
    analyze_facts = analyzer.analyze_facts
    analyzer.analyze_facts = lambda facts: seen.append(facts) or analyze_facts(facts)  # type: ignore[method-assign]
    for log in sorted(SAMPLE_LOGS_DIR.glob("*.log")):
        _records(analyzer.analyze_source(str(log)), seen)
    _records(M.parse_scrape((DATA_DIR / "metrics" / "vllmcpu-0.32-load.txt").read_text()), seen)
    _records([PT.catalogue(), PL._entries(), PL.evidence("NVIDIA H100 80GB HBM3, CUDA_VISIBLE_DEVICES=0,1")], seen)
    _records([CM.shell_command("vllm serve Qwen/Qwen3-8B --tensor-parallel-size 2 \\"),
              CM.list_command("['vllm', 'serve', 'Qwen/Qwen3-8B', '--max-model-len', '8192']")], seen)
    return seen


@pytest.mark.parametrize("cls", RESULT_RECORDS + OTHER_RECORDS, ids=lambda c: c.__name__)
def test_records_are_not_dataclasses_and_declare_their_fields_once(cls: type) -> None:
    assert not dataclasses.is_dataclass(cls)  # created at import for ~0.3-1.2 ms each: the point of the change
    params = tuple(inspect.signature(cls.__init__).parameters)[1:]
    assert cls._FIELDS == params == tuple(cls.__annotations__) == cls.__match_args__  # type: ignore[attr-defined]


def test_records_behave_as_their_dataclasses_did(records: list) -> None:
    kinds = {type(r) for r in records}
    assert kinds == set(RESULT_RECORDS + OTHER_RECORDS), set(RESULT_RECORDS + OTHER_RECORDS) - kinds  # all reached
    refs = {cls: _reference(cls) for cls in kinds}
    for rec in records:
        cls = type(rec)
        values = [getattr(rec, f) for f in cls._FIELDS]
        ref = refs[cls](*values)
        assert repr(rec) == repr(ref)
        assert vars(rec) == vars(ref) and list(vars(rec)) == list(vars(ref))
        twin = cls(*values)
        assert twin == rec and twin is not rec and not (twin != rec)
        assert replace(rec) == rec and replace(rec) is not rec
        if issubclass(cls, FrozenRecord):
            try:
                want = hash(ref)
            except TypeError:  # a list among the fields (KVCache): unhashable, as its dataclass was
                with pytest.raises(TypeError):
                    hash(rec)
            else:
                assert hash(rec) == want
            name = cls._FIELDS[0]
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(rec, name, None)
            with pytest.raises(dataclasses.FrozenInstanceError):
                delattr(rec, name)
        else:
            with pytest.raises(TypeError):
                hash(rec)
        if cls is not PL._Entry:  # module-private, never pickled
            back = pickle.loads(pickle.dumps(rec))
            assert back == rec and type(back) is cls
        assert copy.copy(rec) == rec and copy.deepcopy(rec) == rec


def test_records_defaults_equality_and_replace() -> None:
    f = R.Finding("KVD001", "n", R.Severity.INFO, "m")
    ref = _reference(R.Finding)("KVD001", "n", R.Severity.INFO, "m")
    assert repr(f) == repr(ref) and (f.fix, f.summary) == (None, None)
    assert f != R.Finding("KVD001", "n", R.Severity.INFO, "m", line=3) and f != ref  # another class is never equal
    assert R.Finding.__eq__(f, ref) is NotImplemented
    assert R.replace(f, line=3) == R.Finding("KVD001", "n", R.Severity.INFO, "m", None, 3) and f.line is None
    with pytest.raises(TypeError):
        R.replace(f, no_such_field=1)
    kv = R.KVCache([], [], [], [], [], None, None, [], None, None, False)
    kv2 = R.KVCache([], [], [], [], [], None, None, [], None, None, False)
    assert kv == kv2 and kv.available_by_rank == [] and kv.available_by_rank is not kv2.available_by_rank
    run, vllm = R.RunInfo(0, 1, 1, 9), R.VllmInfo("0.11.0", "v1", "cuda")
    a = R.Analysis("x.log", 9, run, vllm, {}, kv, {}, {}, {}, None, {})
    b = R.Analysis("x.log", 9, run, vllm, {}, kv, {}, {}, {}, None, {})
    assert a == b and a.findings == [] and a.findings is not b.findings and a.evidence is not b.evidence
    assert (a.startup, a.container) == (None, None) and run.started_by is None and run.current
    a.errors = {"e": 1}  # Analysis stays mutable
    assert a != b and R.replace(a, errors={}) == b and R.replace(a, errors={}).run is run
    ia = R.InputAnalysis("x.log", [a])
    assert ia == R.InputAnalysis("x.log", [R.replace(a)]) != R.InputAnalysis("x.log", [b])
    assert repr(ia).startswith("InputAnalysis(source='x.log', runs=[Analysis(source='x.log', lines_read=9, run=RunInfo(")
    e = M.EngineSample("0")
    assert e.lines == {} and e.lines is not M.EngineSample("0").lines and e == M.EngineSample("0")
    e.running = 3
    assert e != M.EngineSample("0") and M.EngineSample("0", 3) == e
    c = CM.Command({"model": "m"}, "shell")
    assert (c.continued, c.needs_model) == (False, False) and c == CM.Command({"model": "m"}, "shell", False, False)
    assert PT.Pattern("n", "v", ("k",), re.compile("k")).samples == () == PT.Pattern.samples
