"""Fact lists whose memory is a few tens of bytes per line, and whose line texts are capped.

A long or repeated log can print the same kind of line hundreds of thousands of times: the KV figures
(``Available KV cache memory``, ``GPU KV cache size``, ``# GPU blocks``, ``Maximum concurrency``), and the
lines that vote for the engine or the platform, or restate a config value. The JSON contract lists every
KV value (docs/json-output.md), so the values stay; a `FactColumn` keeps them in typed columns (value,
line, rank, source, run, DP group: ~30 bytes a line) instead of one `Fact` with its line's text each
(~500 bytes), and builds the `Fact` when it is read.

Texts (the evidence a finding quotes) are kept only for the facts a reader can cite: the first and the
last `KEEP` of the list, and in each (source, run, DP group, rank) group its first and last fact, its
first smallest and first largest value, its first smallest positive one and its first one ≤ 0 (the
figures and rules cite those of a group: ``min(facts.tokens, key=…)``, ``facts.version[0]``, ``top[-1]``,
the ends of a spread of positive figures, the first "no KV memory" figure).
Any other fact reads back with ``raw=None``. Kept facts are returned as the same object every time.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kvlogdiag.extract.facts import Fact

KEEP = 16  # facts kept whole at each end of a list


BLOCK_SHIFT = 13
BLOCK = 1 << BLOCK_SHIFT  # entries per block of a `Blocks` (64 KiB of 8-byte numbers)


class Blocks:
    """A typed array kept as blocks of `BLOCK` entries: appending never moves what is stored.

    One ``array`` grown by ``realloc`` to hundreds of thousands of entries, next to a dozen others growing
    at the same time, leaves the heap fragmented: the process held twice the bytes it stored (measured on
    500,000 KV lines). Full blocks are never resized."""

    __slots__ = ("typecode", "blocks", "n")

    def __init__(self, typecode: str, values: Any = ()) -> None:
        self.typecode = typecode
        self.blocks: list[array] = [array(typecode)]
        self.n = 0
        for v in values:
            self.append(v)

    def append(self, v: Any) -> None:
        last = self.blocks[-1]
        if len(last) == BLOCK:
            last = array(self.typecode)
            last.append(v)  # raises (OverflowError/TypeError) before the block is added
            self.blocks.append(last)
        else:
            last.append(v)
        self.n += 1

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        if i < 0:
            i += self.n
        return self.blocks[i >> BLOCK_SHIFT][i & (BLOCK - 1)]

    def __setitem__(self, i: int, v: Any) -> None:
        if i < 0:
            i += self.n
        self.blocks[i >> BLOCK_SHIFT][i & (BLOCK - 1)] = v

    def __iter__(self) -> Iterator[Any]:
        for b in self.blocks:
            yield from b


class _Runs:
    """Integers that change rarely (the run, the DP group of a fact): one entry per stretch of equal values."""

    __slots__ = ("values", "starts", "n")

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.starts = array("q")
        self.n = 0

    def append(self, v: Any) -> None:
        if not self.values or type(v) is not type(self.values[-1]) or v != self.values[-1]:
            self.values.append(v)
            self.starts.append(self.n)
        self.n += 1

    def __getitem__(self, i: int) -> Any:
        if i < 0:
            i += self.n
        return self.values[bisect.bisect_right(self.starts, i) - 1]


class _Ints:
    """Integers (line numbers) in `Blocks` of 4-byte unsigned numbers, widened to 8-byte signed ones on the
    first that does not fit, then to a list."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data: Any = Blocks("I")

    def append(self, v: int) -> None:
        data = self.data
        if type(data) is Blocks:
            try:
                data.append(v)
                return
            except (OverflowError, TypeError):
                self.data = Blocks("q", data) if data.typecode == "I" else list(data)
                self.append(v)
                return
        data.append(v)

    def __getitem__(self, i: int) -> int:
        return self.data[i]


class _Values:
    """The values: floats or ints in an array while every value is of that exact type, strings (an engine or
    platform vote: a few distinct ones) as 4-byte ids into a table, else a list."""

    __slots__ = ("data", "kind", "ids")

    def __init__(self) -> None:
        self.data: Any = None
        self.kind = ""
        self.ids: dict[str, int] = {}

    def append(self, v: Any) -> None:
        t = type(v)
        if self.data is None:
            if t is float:
                self.data, self.kind = Blocks("d"), "d"
            elif t is int and -(1 << 63) <= v < (1 << 63):
                self.data, self.kind = Blocks("q"), "q"
            elif t is tuple and len(v) == 2 and type(v[0]) is int and type(v[1]) is float and -(1 << 63) <= v[0] < (1 << 63):
                self.data, self.kind = (Blocks("q"), Blocks("d")), "qd"  # Maximum concurrency: (tokens, x)
            elif t is str:
                self.data, self.kind = (Blocks("I"), []), "s"
            else:
                self.data, self.kind = [], "o"
        k = self.kind
        if k == "d" and t is float:
            self.data.append(v)
        elif k == "q" and t is int and -(1 << 63) <= v < (1 << 63):
            self.data.append(v)
        elif k == "qd" and t is tuple and len(v) == 2 and type(v[0]) is int and type(v[1]) is float \
                and -(1 << 63) <= v[0] < (1 << 63):
            self.data[0].append(v[0])
            self.data[1].append(v[1])
        elif k == "s" and t is str and (v in self.ids or len(self.ids) < 4096):
            i = self.ids.get(v)
            if i is None:
                i = self.ids[v] = len(self.data[1])
                self.data[1].append(v)
            self.data[0].append(i)
        else:
            if k != "o":
                self.data = [self[i] for i in range(self._len())]
                self.kind = "o"
                self.ids = {}
            self.data.append(v)

    def _len(self) -> int:
        if self.data is None:
            return 0
        return len(self.data[0]) if self.kind in ("qd", "s") else len(self.data)

    def __getitem__(self, i: int) -> Any:
        if self.kind == "qd":
            return (self.data[0][i], self.data[1][i])
        if self.kind == "s":
            return self.data[1][self.data[0][i]]
        return self.data[i]


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v if not isinstance(v, float) or not math.isnan(v) else None


# The facts of a group a reader can cite, each as "does the new value x take the role" (empty: no holder yet,
# v: the holder's value): the first, the last, the first smallest and first largest, the first smallest
# positive (the low end of a spread: KVD018) and the first that is zero or negative (no KV memory: KVD010).
_ROLES: tuple[Callable[[Any, bool, Any], bool], ...] = (
    lambda x, empty, v: empty,
    lambda x, empty, v: True,
    lambda x, empty, v: x is not None and (empty or x < v),
    lambda x, empty, v: x is not None and (empty or x > v),
    lambda x, empty, v: x is not None and x > 0 and (empty or x < v),
    lambda x, empty, v: x is not None and x <= 0 and empty,
)


class FactColumn(Sequence):
    """A list of `Fact` (append, len, index, iterate) stored in columns, texts capped (module docstring).

    ``key``: the number a group's smallest and largest fact are found by (None: the value itself when it is
    a number)."""

    def __init__(self, facts: Any = (), key: Callable[[Any], Any] | None = None):
        self._key = key
        # an extractor makes ~18 columns per log and a few stay empty (3-4 of a small log's): an empty column
        # shares read-only empty stores (no index of one is ever valid), and gets its own at its first append
        self._values, self._lines, self._runs, self._dps, self._ranks, self._sources = _EMPTY_STORES
        # up to 2 * KEEP facts every one is kept whole (each index is within KEEP of an end): the column holds
        # the facts themselves, and builds its stores and groups when one more comes, by appending them again in
        # order (the same state as if it had had them from the start). A small log's ~25 columns hold 1-3 facts
        # each: the stores, groups and roles cost ~10 % of its analysis (docs/performance.md, session 9).
        self._small: list[Fact] | None = []
        self._rank_ids: dict[str | None, int] = {}
        self._rank_of: list[str | None] = []
        self._source_ids: dict[str, int] = {}
        self._source_of: list[str] = []
        self._n = 0
        self._kept: dict[int, Fact] = {}
        self._pins: dict[int, int] = {}  # index → how many group roles (first/last/min/max) it holds
        self._groups: dict[tuple, list] = {}  # (source, run, dp, rank) → [index, value] of each of _ROLES
        self.texts_dropped = 0  # facts whose text was let go
        for f in facts:
            self.append(f)

    # -- building --------------------------------------------------------------------------------

    def _id(self, ids: dict, of: list, v: Any) -> int:
        i = ids.get(v)
        if i is None:
            i = ids[v] = len(of)
            of.append(v)
        return i

    def _pin(self, i: int) -> None:
        self._pins[i] = self._pins.get(i, 0) + 1

    def _unpin(self, i: int) -> None:
        c = self._pins[i] - 1
        if c:
            self._pins[i] = c
        else:
            del self._pins[i]
            self._maybe_drop(i)

    def _maybe_drop(self, i: int) -> None:
        if i < KEEP or i >= self._n - KEEP or i in self._pins:
            return
        if self._kept.pop(i, None) is not None:
            self.texts_dropped += 1

    def _own_stores(self) -> None:
        self._values, self._lines, self._runs, self._dps = _Values(), _Ints(), _Runs(), _Runs()
        self._ranks, self._sources = Blocks("I"), Blocks("I")

    def append(self, f: Fact) -> None:
        small = self._small
        if small is not None:
            if len(small) < 2 * KEEP:
                small.append(f)
                self._n += 1
                return
            self._small = None
            self._n = 0
            for g in small:
                self._add(g)
        self._add(f)

    def _add(self, f: Fact) -> None:
        i = self._n
        if self._values is _EMPTY_STORES[0]:
            self._own_stores()
        self._values.append(f.value)
        self._lines.append(f.line)
        self._runs.append(f.run)
        self._dps.append(f.dp)
        r = self._id(self._rank_ids, self._rank_of, f.rank)
        s = self._id(self._source_ids, self._source_of, f.source)
        self._ranks.append(r)
        self._sources.append(s)
        self._n = i + 1
        self._kept[i] = f
        key = (s, f.run, f.dp, r)
        g = self._groups.get(key)
        if g is None:
            g = self._groups[key] = [None] * (2 * len(_ROLES))
        x = _number(self._key(f.value) if self._key is not None else f.value)
        for k, takes in enumerate(_ROLES):
            held = g[2 * k]
            if takes(x, held is None, g[2 * k + 1]):
                if held is not None:
                    self._unpin(held)
                g[2 * k], g[2 * k + 1] = i, x
                self._pin(i)
        if i - KEEP >= KEEP:
            self._maybe_drop(i - KEEP)  # it left the last KEEP

    def extend(self, facts: Any) -> None:
        for f in facts:
            self.append(f)

    # -- reading ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    # one field of fact ``i`` (0 <= i < len) without building the `Fact` (derive's passes over many KV lines)
    def value_at(self, i: int) -> Any:
        if self._small is not None:
            return self._small[i].value
        return self._values[i]

    def line_at(self, i: int) -> int:
        if self._small is not None:
            return self._small[i].line
        return self._lines[i]

    def rank_at(self, i: int) -> str | None:
        if self._small is not None:
            return self._small[i].rank
        return self._rank_of[self._ranks[i]]

    def group_at(self, i: int) -> tuple[int, int]:
        """(run, DP group)."""
        if self._small is not None:
            f = self._small[i]
            return f.run, f.dp
        return self._runs[i], self._dps[i]

    def _fact(self, i: int) -> Fact:
        if self._small is not None:
            return self._small[i]
        f = self._kept.get(i)
        if f is not None:
            return f
        return Fact(self._values[i], self._lines[i], self._rank_of[self._ranks[i]], None,  # type: ignore[arg-type]
                    self._source_of[self._sources[i]], self._runs[i], self._dps[i])

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._fact(j) for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("FactColumn index out of range")
        return self._fact(i)

    def __iter__(self) -> Iterator[Fact]:
        for i in range(self._n):
            yield self._fact(i)

    def __add__(self, other: Any) -> list:
        return list(self) + list(other)

    def __radd__(self, other: Any) -> list:
        return list(other) + list(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (FactColumn, list)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FactColumn({list(self)!r})"


_EMPTY_STORES = (_Values(), _Ints(), _Runs(), _Runs(), Blocks("I"), Blocks("I"))  # never appended to


class FactColumns(dict):
    """``name → FactColumn`` (``LogFacts.config`` / ``memory``): ``setdefault(k, [])`` gives a column."""

    def setdefault(self, key: Any, default: Any = None) -> Any:  # type: ignore[override]
        got = self.get(key)
        if got is None:
            got = self[key] = FactColumn(default or ())
        return got


def tuple_second(v: Any) -> Any:
    """The number a ``(kind, GiB, …)`` / ``(tokens, x)`` value is compared by."""
    return v[1] if isinstance(v, tuple) and len(v) > 1 else None


__all__ = ["KEEP", "FactColumn", "FactColumns", "RankValues", "tuple_second"]


class RankValues(Sequence):
    """The `result.RankValue` of each fact of a list, built when read (the analysis keeps no copy per line).

    It sees the facts the list held when it was made (lists only grow: ``watch`` analyses again while
    lines arrive, and an earlier analysis must not change)."""

    def __init__(self, facts: Any):
        self._facts = facts
        self._n = len(facts)

    def __len__(self) -> int:
        return self._n

    def _one(self, f: Fact) -> Any:
        from kvlogdiag.result import RankValue

        return RankValue(f.value, f.rank, f.line, f.dp)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._one(self._facts[j]) for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("RankValues index out of range")
        return self._one(self._facts[i])

    def __iter__(self) -> Iterator[Any]:
        from kvlogdiag.result import RankValue

        facts = self._facts
        for j in range(self._n):
            f = facts[j]
            yield RankValue(f.value, f.rank, f.line, f.dp)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (RankValues, list)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))
