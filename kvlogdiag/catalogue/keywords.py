"""Keywords that overlap: where one keyword's end is another's start.

The catalogues find their keywords in a line with one regex alternation, longest first, whose matches do not
overlap. A keyword that lies inside a longer one is handled by the tables that map each keyword to the patterns
of every keyword it contains; one that *starts* inside a longer one and runs past its end ("Available KV cache
memory" then "KV cache memory (" in "Available KV cache memory (…)") is hidden by the longer match. For each
keyword, its partners are those keywords with the overlap length: after a match of the keyword ending at ``e``,
a partner ``(b, n)`` is in the line when ``text.startswith(b, e - n)`` (looked up by the character at ``e``).
"""

from __future__ import annotations

from collections.abc import Iterable


class OverlapPartners(dict):
    """``partners[k]`` → ``{c: ((b, n), …)}``: keyword ``b`` can start ``n`` characters before the end of ``k``
    (``k`` ends with ``b[:n]``, ``0 < n < len(b)``, ``b`` not inside ``k``), keyed by ``c = b[n]``, the character
    that must follow ``k``'s match for ``b`` to be there — so a match costs one look at the next character. Computed
    for a keyword the first time it is asked for (~20 µs), so a process pays only for the keywords its lines hold."""

    def __init__(self, keywords: Iterable[str]):
        super().__init__()
        self._first: dict[str, list[str]] = {}
        for b in dict.fromkeys(keywords):
            if b:
                self._first.setdefault(b[0], []).append(b)

    def __missing__(self, k: str) -> dict[str, tuple[tuple[str, int], ...]]:
        found: dict[str, list[tuple[str, int]]] = {}
        for p in range(1, len(k)):
            tail = k[p:]
            for b in self._first.get(k[p], ()):
                if len(b) > len(tail) and b.startswith(tail) and b not in k:
                    found.setdefault(b[len(tail)], []).append((b, len(tail)))
        out = {c: tuple(v) for c, v in found.items()}
        self[k] = out
        return out


def overlap_pairs(keywords: Iterable[str]) -> list[tuple[str, str, str]]:
    """Every ``(a, b, text)`` where ``b`` overlaps ``a``'s end, ``text`` holding both (for the tests)."""
    kws = list(dict.fromkeys(keywords))
    partners = OverlapPartners(kws)
    return [(a, b, a + b[n:]) for a in kws for group in partners[a].values() for b, n in group]
