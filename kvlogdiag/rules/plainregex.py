"""Rule-author patterns that need neither the ``regex`` module nor its timeout: `plain_pattern`.

Rule conditions (``matches(text, pattern)``) and ``line:`` evidence run the author's pattern on text read
from the log, so `kvlogdiag.rules.condition.regex_search` uses the ``regex`` module for its per-search
timeout (a pattern such as ``(a|aa)+$`` backtracks exponentially). Importing ``regex`` costs ~8-10 ms of
CPU, and a small ``analyze`` imported it only for KVD001's two model-name patterns
(``(?i)gemma[-_]?[234]|gpt[-_]?oss|...``), which cannot backtrack at all.

`plain_pattern` returns a stdlib ``re`` pattern for a pattern in a small subset where both hold:

* **no catastrophic backtracking**: no unbounded or multi-step repeat (only ``?`` / ``{0,1}``), no
  back-references, look-arounds or conditionals; so a search tries a bounded number of paths
  (`MAX_PATHS`, counted from the parse) at each start position: linear in the text, no timeout needed;
* **the same answers as ``regex``**: ASCII literals and classes of ASCII literals (no ``.``, ``\\w``,
  ``\\d``, ``\\s``, negated classes, or — under ``(?i)`` — ranges and the letters ``i`` / ``I``, where the two
  engines' Unicode case tables differ), groups without inline flags, ``|``, ``^`` / ``$``, and no flag but a leading ``(?i)``. Both
  engines are backtracking engines with leftmost-first alternation, so the match is the same once every
  single character matches the same code points: ``tests/test_plainregex.py`` checks that for every
  ASCII character, as a literal and in a class, with and without ``(?i)``, over every Unicode code point
  (e.g. ``(?i)k`` matches the Kelvin sign U+212A in both; ``(?i)i`` is where they differ), and compares
  both engines on the built-in rules' patterns and on random patterns of the subset.

Anything else returns None and keeps the ``regex`` path with its timeout.
"""

from __future__ import annotations

import functools
import re

try:  # Python >= 3.11
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser as _p  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _p  # type: ignore[no-redef]

from kvlogdiag import recache

__all__ = ["FOLD_DIFFERS", "MAX_PATHS", "plain_pattern"]

#: ASCII letters whose ``(?i)`` matches differ: ``re`` lets ``i`` and ``I`` match both U+0130 (İ) and U+0131 (ı),
#: ``regex`` only İ for ``i`` and ı for ``I`` (``tests/test_plainregex.py`` finds exactly these)
FOLD_DIFFERS = frozenset(map(ord, "iI"))
#: most alternatives a search may try at one start position (a product over the pattern's ``|`` and ``?``)
MAX_PATHS = 4096

_ANCHORS = {_c.AT_BEGINNING, _c.AT_BEGINNING_STRING, _c.AT_END, _c.AT_END_STRING}


def _paths(items, ignorecase: bool) -> int | None:
    """Alternatives of the parsed sequence ``items`` at one position, or None outside the subset."""
    n = 1
    for op, av in items:
        if op is _c.LITERAL:
            if av >= 128 or (ignorecase and av in FOLD_DIFFERS):
                return None
        elif op is _c.IN:
            for iop, iav in av:
                if iop is _c.LITERAL and iav < 128 and not (ignorecase and iav in FOLD_DIFFERS):
                    continue
                if iop is _c.RANGE and not ignorecase and iav[1] < 128:
                    continue
                return None
        elif op is _c.BRANCH:
            total = 0
            for alt in av[1]:
                k = _paths(alt, ignorecase)
                if k is None:
                    return None
                total += k
            n *= total
        elif op is _c.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            k = None if add_flags or del_flags else _paths(sub, ignorecase)
            if k is None:
                return None
            n *= k
        elif op is _c.MAX_REPEAT or op is _c.MIN_REPEAT:
            lo, hi, sub = av
            k = _paths(sub, ignorecase) if hi <= 1 else None
            if k is None:
                return None
            n *= k + (1 if lo == 0 else 0)
        elif op is _c.AT and av in _ANCHORS:
            pass
        else:
            return None
        if n > MAX_PATHS:
            return None
    return n


@functools.lru_cache(maxsize=256)
def plain_pattern(pattern: str) -> re.Pattern[str] | None:
    """A stdlib pattern that gives ``regex.compile(pattern)``'s answers without backtracking risk, or None."""
    if not isinstance(pattern, str) or not pattern.isascii():
        return None
    try:
        parsed = _p.parse(pattern, 0)
    except (re.error, RecursionError, OverflowError, ValueError):
        return None  # the regex path reports it (its own wording)
    flags = parsed.state.flags & ~_c.SRE_FLAG_UNICODE
    if flags & ~_c.SRE_FLAG_IGNORECASE:
        return None
    if flags and not pattern.startswith("(?i)"):
        return None
    if _paths(parsed, bool(flags)) is None:
        return None
    return recache.compile(pattern)
