"""The KV figures of a run kept in columns, read as the JSON contract's lists and dicts (issue 18, memory).

The JSON contract (docs/json-output.md) lists every ``Available KV cache memory``, ``GPU KV cache size``,
``# GPU blocks`` and ``Maximum concurrency`` value and one ``bytes_per_token_by_rank`` entry per pairing,
so a log that repeats those lines half a million times has half a million of each to report. This module
keeps them without a Python object per line:

* `ValueView`: the values of a fact list (a `kvlogdiag.extract.bounded.FactColumn`, whose values already
  sit in a typed array) as a read-only sequence, each value (or the contract's dict of it) built when read;
* `Pairings`: the pairings of memory figures with token counts in typed columns (~40 bytes each instead
  of a dict and a `RankFigures` of ~700 bytes), each read back as the JSON dict derive used to build;
* `RankFiguresView`: the same pairings read as `kvlogdiag.result.RankFigures` (`KVCache.ranks`);
* `ChainView`: several such sequences end to end (an input's lists over its runs).

Every view has the length its list had when it was made: ``watch`` analyses again while lines arrive,
and an analysis already made must not change. The aggregates the text summary, the rules and the
renderers need are computed by passing over a view once (`spread_of`), never by materialising it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kvlogdiag.extract.bounded import Blocks, _Ints, _Values

__all__ = ["ChainView", "Pairings", "RankFiguresView", "ValueView", "group_at", "is_view", "line_at", "rank_at",
           "value_at"]


# one field of fact ``i`` of a fact list: read from the columns of a `FactColumn`, else from the `Fact`
def value_at(facts: Any, i: int) -> Any:
    get = getattr(facts, "value_at", None)
    return get(i) if get is not None else facts[i].value


def line_at(facts: Any, i: int) -> int:
    get = getattr(facts, "line_at", None)
    return get(i) if get is not None else facts[i].line


def rank_at(facts: Any, i: int) -> str | None:
    get = getattr(facts, "rank_at", None)
    return get(i) if get is not None else facts[i].rank


def group_at(facts: Any, i: int) -> tuple[int, int]:
    """(run, DP group) of fact ``i``."""
    get = getattr(facts, "group_at", None)
    if get is not None:
        return get(i)
    f = facts[i]
    return f.run, f.dp


class _View(Sequence):
    """Shared behaviour: slicing, equality with lists, ``+``, ``repr`` (as a list would)."""

    _n = 0

    def _get(self, i: int) -> Any:  # pragma: no cover - every view defines it
        raise NotImplementedError

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._get(j) for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"{type(self).__name__} index out of range")
        return self._get(i)

    def __iter__(self) -> Iterator[Any]:
        get = self._get
        for i in range(self._n):
            yield get(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, _View)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Any) -> list:
        return list(self) + list(other)

    def __radd__(self, other: Any) -> list:
        return list(other) + list(self)

    def __repr__(self) -> str:
        return repr(list(self))


def is_view(obj: Any) -> bool:
    """Whether ``obj`` is one of this module's sequences (the streamed JSON writes them in chunks)."""
    return isinstance(obj, _View)


class ValueView(_View):
    """The values of the first ``len(facts)`` facts, optionally through ``make`` (value, fact-or-None → item).

    On a `FactColumn` the value is read from its typed column without building the `Fact`; ``with_fact``
    makes ``make`` see the fact too (the budget lines' dict names the line)."""

    def __init__(self, facts: Any, make: Callable[..., Any] | None = None, with_fact: bool = False):
        self._facts = facts
        self._n = len(facts)
        self._make = make
        self._with_fact = with_fact
        values = getattr(facts, "_values", None)
        # a column of a few facts holds the facts themselves (`FactColumn._small`), not yet its typed stores
        self._values = values if isinstance(values, _Values) and not with_fact and getattr(facts, "_small", None) is None \
            else None

    def _get(self, i: int) -> Any:
        if self._values is not None:
            v = self._values[i]
            return v if self._make is None else self._make(v)
        f = self._facts[i]
        if self._make is None:
            return f.value
        return self._make(f.value, f) if self._with_fact else self._make(f.value)


class ChainView(_View):
    """Several sequences end to end, without a copy."""

    def __init__(self, parts: Sequence[Sequence[Any]]):
        self._parts = list(parts)
        self._starts: list[int] = []
        n = 0
        for p in self._parts:
            self._starts.append(n)
            n += len(p)
        self._n = n

    def _get(self, i: int) -> Any:
        k = bisect.bisect_right(self._starts, i) - 1
        while len(self._parts[k]) == 0:  # pragma: no cover - bisect_right lands past empty parts
            k += 1
        return self._parts[k][i - self._starts[k]]

    def __iter__(self) -> Iterator[Any]:
        for p in self._parts:
            yield from p


_NONE = float("nan")  # a bytes per token that is not reported (the column is floats)


class Pairings(_View):
    """``kv_cache.bytes_per_token_by_rank`` in columns, appended one pairing at a time (derive).

    Rank, memory figure, token count, bytes per token and the two line numbers are columns; DP group, run
    and memory source change only between groups and are kept once per stretch. Reading entry ``i`` builds
    the JSON dict (a fresh one each time: a reader may change it, the columns never change through it)."""

    def __init__(self) -> None:
        self._gib = _Values()
        self._tokens = _Values()
        self._bpt = Blocks("d")
        self._mline = _Ints()
        self._tline = _Ints()
        self._rank = Blocks("I")
        self._rank_ids: dict[str | None, int] = {}
        self._rank_of: list[str | None] = []
        self._starts: list[int] = []  # first pairing of each stretch of one (dp, run, memory source)
        self._groups: list[tuple[Any, Any, Any]] = []
        self._n = 0
        self._bpt_known = 0  # pairings whose bytes per token is not None

    def append(self, rank: str | None, gib: Any, tokens: Any, bpt: float | None, dp: Any, run: Any,
               memory_source: Any, memory_line: int, tokens_line: int) -> None:
        g = (dp, run, memory_source)
        if not self._groups or self._groups[-1] != g:
            self._starts.append(self._n)
            self._groups.append(g)
        r = self._rank_ids.get(rank)
        if r is None:
            r = self._rank_ids[rank] = len(self._rank_of)
            self._rank_of.append(rank)
        self._rank.append(r)
        self._gib.append(gib)
        self._tokens.append(tokens)
        if bpt is None:
            self._bpt.append(_NONE)
        else:
            self._bpt.append(bpt)
            self._bpt_known += 1
        self._mline.append(memory_line)
        self._tline.append(tokens_line)
        self._n += 1

    def clear_bytes_per_token(self) -> None:
        """Every pairing's bytes per token becomes None (the log cannot support the figure)."""
        self._bpt = Blocks("d", (_NONE for _ in range(self._n)))
        self._bpt_known = 0

    def bytes_per_token(self, i: int) -> float | None:
        x = self._bpt[i]
        return None if math.isnan(x) else x

    def known_bytes_per_token(self) -> Iterator[float]:
        """The bytes per token of every pairing that has one, in order."""
        if self._bpt_known:
            for x in self._bpt:
                if not math.isnan(x):
                    yield x

    def group(self, i: int) -> tuple[Any, Any, Any]:
        """(DP group, run, memory source) of pairing ``i``."""
        return self._groups[bisect.bisect_right(self._starts, i) - 1]

    def fields(self, i: int) -> tuple[Any, ...]:
        """(rank, GiB, tokens, bytes per token, DP group, run, memory source, memory line, tokens line)."""
        dp, run, source = self.group(i)
        return (self._rank_of[self._rank[i]], self._gib[i], self._tokens[i], self.bytes_per_token(i), dp, run,
                source, self._mline[i], self._tline[i])

    def _get(self, i: int) -> dict[str, Any]:
        rank, gib, tokens, bpt, dp, run, source, ml, tl = self.fields(i)
        return {"rank": rank, "available_gib": gib, "tokens": tokens, "bytes_per_token": bpt, "dp_group": dp,
                "run": run, "memory_source": source, "memory_line": ml, "tokens_line": tl}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(self._n):
            yield self._get(i)


class RankFiguresView(_View):
    """The pairings read as `kvlogdiag.result.RankFigures` of the run ``run_index`` (`KVCache.ranks`)."""

    def __init__(self, pairs: Sequence[Any], run_index: int):
        self._pairs = pairs
        self._n = len(pairs)
        self._run = run_index

    def _get(self, i: int) -> Any:
        from kvlogdiag.result import RankFigures

        p = self._pairs
        if isinstance(p, Pairings):
            rank, gib, tokens, bpt, dp, _run, source, ml, tl = p.fields(i)
            return RankFigures(rank, gib, tokens, bpt, dp, self._run, source, ml, tl)
        r = p[i]
        return RankFigures(r["rank"], r["available_gib"], r["tokens"], r["bytes_per_token"], r["dp_group"], self._run,
                           r["memory_source"], r["memory_line"], r["tokens_line"])

    def json_entries(self) -> "_RankJSON":
        """``RankFigures.to_json()`` of each pairing, built when read (the streamed JSON)."""
        return _RankJSON(self)


class _RankJSON(_View):
    def __init__(self, ranks: RankFiguresView):
        self._ranks = ranks
        self._n = len(ranks)

    def _get(self, i: int) -> dict[str, Any]:
        return self._ranks[i].to_json()
