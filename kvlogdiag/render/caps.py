"""How much of a long list the text and Markdown summaries show (issue 18: output bounded by construction).

A log that repeats its KV lines (a restart loop, a concatenation of many start-ups, a logger gone wrong)
can hold hundreds of thousands of ``Available KV cache memory`` / ``GPU KV cache size`` lines. The JSON
lists every one (the contract); a summary meant for a person shows up to `SHOW_ALL` of them as before,
and past that the first and the last `ENDS` with the count and the lowest and highest value, so its size
and the work to build it do not grow with the log. Real logs (45 shared, 850 test logs) print at most 8.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["ENDS", "ROW_ENDS", "SHOW_ALL", "capped_rows", "capped_values", "value_range"]

SHOW_ALL = 64  # a list this long or shorter is shown whole (64: TP 8 × DP 8 workers each printing theirs)
ENDS = 8  # past SHOW_ALL: this many values from each end
ROW_ENDS = 32  # past SHOW_ALL: this many table rows from each end


def value_range(values: Sequence[Any], key: Callable[[Any], Any] | None = None) -> tuple[Any, Any]:
    """(lowest, highest) of the numbers among ``values`` (through ``key``), one pass; (None, None) if none."""
    lo = hi = None
    for v in values:
        x = key(v) if key is not None else v
        if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x:
            continue
        if lo is None or x < lo:
            lo = x
        if hi is None or x > hi:
            hi = x
    return lo, hi


def capped_values(values: Sequence[Any], fmt: Callable[[Any], str]) -> str:
    """``a, b, c`` for a short list; for a long one the ends, the count and the range."""
    n = len(values)
    if n <= SHOW_ALL:
        return ", ".join(fmt(x) for x in values)
    lo, hi = value_range(values)
    if lo is not None and lo == hi and all(v == lo for v in values):
        return f"{fmt(values[0])} (all {n:,} lines the same; every one in --format json)"
    head = ", ".join(fmt(values[i]) for i in range(ENDS))
    tail = ", ".join(fmt(values[i]) for i in range(n - ENDS, n))
    span = f"; lowest {fmt(lo)}, highest {fmt(hi)}" if lo is not None else ""
    return f"{head}, …, {tail} ({n:,} lines{span}; every one in --format json)"


def capped_rows(n: int, row: Callable[[int], list[str]], filler: list[str]) -> tuple[list[list[str]], int]:
    """The rows of a table of ``n`` rows (``row(i)`` builds row ``i``): all of a short one; of a long one the
    first and last `ROW_ENDS` with ``filler`` between. Also the number of rows left out."""
    if n <= SHOW_ALL:
        return [row(i) for i in range(n)], 0
    rows = [row(i) for i in range(ROW_ENDS)] + [filler] + [row(i) for i in range(n - ROW_ENDS, n)]
    return rows, n - 2 * ROW_ENDS
