"""A `FactColumn` of at most ``2 * KEEP`` facts holds the facts themselves and builds its typed stores only
when one more comes (`bounded.FactColumn._small`): what it reads back — values, lines, ranks, groups, texts,
which facts are the same object, the views made from it — must be what a column that had its stores from the
start reads back, at every length and across the switch."""

from __future__ import annotations

import random

import pytest

from kvlogdiag.derive.pairings import ValueView, group_at, line_at, rank_at, value_at
from kvlogdiag.extract import bounded
from kvlogdiag.extract.bounded import KEEP, FactColumn, tuple_second
from kvlogdiag.extract.facts import Fact

_VALUES = [30.5, 30.5, 0.0, -2.0, 7, 2**70, None, "v1", "ascend", (65536, 7.25), ("v0_profile", 1.5), True, {"a": 1}]


def _facts(rng: random.Random, n: int) -> list[Fact]:
    out = []
    for i in range(n):
        v = rng.choice(_VALUES + [round(rng.uniform(-1, 60), 2), rng.randint(0, 10**6)])
        out.append(Fact(v, i + 1 + rng.randint(0, 3) * (1 << 33 if rng.random() < 0.05 else 1),
                        rng.choice(["Worker_TP0", "Worker_TP1", None]), f"text {i}",
                        rng.choice(["kv_available_gib", "engine_config"]), rng.randint(0, 1), rng.choice([0, 0, 1])))
    return out


def _stored_from_the_start(facts: list[Fact], key) -> FactColumn:
    col = FactColumn(key=key)
    col._small = None  # the stores from the first fact on (the behaviour before session 9)
    for f in facts:
        col.append(f)
    return col


def _read(col: FactColumn) -> list:
    return ([(f.value, type(f.value), f.line, f.rank, f.raw, f.source, f.run, f.dp) for f in col],
            [(value_at(col, i), type(value_at(col, i)), line_at(col, i), rank_at(col, i), group_at(col, i))
             for i in range(len(col))],
            list(ValueView(col)), col.texts_dropped, len(col))


@pytest.mark.parametrize("key", [None, tuple_second])
def test_a_small_column_reads_back_what_a_stored_column_does_at_every_length(key):
    rng = random.Random(17)
    for trial in range(60):
        facts = _facts(rng, rng.choice([0, 1, 2, 3, 2 * KEEP - 1, 2 * KEEP, 2 * KEEP + 1, 2 * KEEP + 2, 3 * KEEP, 200]))
        small, ref = FactColumn(key=key), _stored_from_the_start(facts, key)
        views = []
        for f in facts:
            small.append(f)
            views.append((len(small), ValueView(small), list(ValueView(small))))
            assert (small._small is not None) == (len(small) <= 2 * KEEP)  # the case under test is the one run
        assert _read(small) == _read(ref), trial
        # a kept fact is the fact appended (the same object), in both; a dropped one has no text in both
        assert [small[i] is facts[i] for i in range(len(facts))] == [ref[i] is facts[i] for i in range(len(facts))]
        # a view sees the facts its column held when it was made, also after the column built its stores
        for n, view, then in views:
            assert len(view) == n and list(view) == then == [f.value for f in facts[:n]]


def test_a_small_column_builds_no_store_until_it_holds_more_than_two_keep(monkeypatch):
    built = []

    class CountedBlocks(bounded.Blocks):
        def __init__(self, *a, **kw):
            built.append(1)
            super().__init__(*a, **kw)

    monkeypatch.setattr(bounded, "Blocks", CountedBlocks)
    col = FactColumn()
    facts = _facts(random.Random(3), 2 * KEEP + 1)
    for f in facts[:-1]:
        col.append(f)
    assert built == []  # before: 3 blocks (ranks, sources, lines) and a value store at the first append
    col.append(facts[-1])
    assert built and col[-1] is facts[-1] and [f.value for f in col] == [f.value for f in facts]


def test_the_small_limit_follows_keep(monkeypatch):
    # KEEP read when appending (tests raise it to keep every text): a larger KEEP keeps the column small longer
    monkeypatch.setattr(bounded, "KEEP", 100)
    col = FactColumn(_facts(random.Random(5), 150))
    assert col._small is not None and col.texts_dropped == 0
