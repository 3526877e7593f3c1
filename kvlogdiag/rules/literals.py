"""The word a user rule's line regex cannot match without: it joins the reader's keyword prefilter.

A rule with ``count('CUDA out of memory')`` or ``any_line(...)`` needs to see every line its regex could
match. It used to switch the prefilter off (every line decoded and fed to the extractor: ~4x the time
of a long log). A line that matches ``CUDA out of memory`` contains ``CUDA``, so adding that word to
the prefilter's keywords feeds the extractor every line the regex can match, and the counts stay the
same. `required_literal` finds such a word — the rarest of them by typical byte frequencies, since a
common one (``memory``) would also pick every request line quoting a prompt — or says there is none
(then every line is read, as before).

Only a run of word characters (``[A-Za-z0-9_]``, at least `MIN_LITERAL` of them) outside every
alternation, optional part, repeat and flag is taken: the prefilter looks at the raw bytes, where an
ANSI colour code, a JSON escape or an envelope may sit between punctuation and words, never inside a
run of ASCII letters and digits. A pattern Python's ``re`` cannot parse (syntax only the ``regex``
module knows) gets no literal.
"""

from __future__ import annotations

import re
from functools import lru_cache

MIN_LITERAL = 3
_WORD = re.compile(r"[A-Za-z0-9_]+")


@lru_cache(maxsize=256)
def required_literal(pattern: str) -> str | None:
    """The rarest word every match of ``pattern`` contains, or None."""
    try:
        from re import _parser as sre_parse  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_parse  # type: ignore[no-redef]
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError, TypeError):
        return None
    if parsed.state.flags & ~(re.UNICODE | getattr(sre_parse, "TYPE_FLAGS", 0)):
        return None  # (?i), (?x), (?s)... change what a literal matches: read every line
    runs: list[str] = []
    _literal_runs(parsed, runs)
    words = [w for run in runs for w in _WORD.findall(run) if len(w) >= MIN_LITERAL]
    # the rarest word in vLLM logs, not the longest: 'CUDA out of memory' → 'CUDA' ('memory' is in prompts)
    return min(words, key=_frequency) if words else None


def _frequency(word: str) -> float:
    """How often ``word`` is expected in a log: the product of its bytes' typical frequencies."""
    from kvlogdiag.input.reader import _BYTE_FREQ, _RARE_FREQ

    f = 1.0
    for ch in word:
        f *= _BYTE_FREQ.get(ch, _RARE_FREQ)
    return f


def _literal_runs(seq, runs: list[str]) -> None:
    """Runs of consecutive literal characters that every match of ``seq`` contains, in order."""
    from re import _constants as c  # type: ignore[attr-defined]

    cur: list[str] = []
    for op, av in seq:
        if op is c.LITERAL:
            cur.append(chr(av))
            continue
        runs.append("".join(cur))
        cur = []
        if op is c.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if not add_flags and not del_flags:
                _literal_runs(sub, runs)  # a plain group is matched as a whole, once
    runs.append("".join(cur))
