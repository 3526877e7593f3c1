"""One analysis path for every command: source → lines → facts → figures → findings.

`analyze_source` reads one input (path or ``-``) with the fast prefiltered reader and returns the
analysis dictionary of the JSON contract. ``watch``, ``scan`` and ``report`` all go through
`Analyzer`, so there is one parser and one set of rules.
"""

from __future__ import annotations

from typing import Any, BinaryIO, Callable

from kvlogdiag.derive import derive
from kvlogdiag.extract import Extractor
from kvlogdiag.facts import LogFacts
from kvlogdiag.patterns import prefilter_regex
from kvlogdiag.reader import DEFAULT_MAX_BYTES, InputError, LineStats, iter_lines, open_input

_PREFILTER = None


def prefilter():
    """The compiled bytes prefilter (built once per process)."""
    global _PREFILTER
    if _PREFILTER is None:
        _PREFILTER = prefilter_regex()
    return _PREFILTER


def extract_stream(fh: BinaryIO, source: str, on_event: Callable | None = None) -> LogFacts:
    """Run the extractor over a binary stream; returns the facts."""
    ex = Extractor(source)
    if on_event is not None:
        ex.listeners.append(on_event)
    stats = LineStats()
    for line in iter_lines(fh, source, prefilter(), stats):
        ex.feed(line)
    return ex.finish(stats.lines, stats.long_lines)


def analyze_facts(facts: LogFacts, options: Any = None) -> dict[str, Any]:
    """Facts → analysis dict with findings."""
    from kvlogdiag.rules import evaluate_rules

    analysis = derive(facts)
    analysis["findings"] = evaluate_rules(facts, analysis, options)
    analysis.pop("_chosen", None)
    return analysis


def analyze_source(source: str, options: Any = None, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """Read and analyse one input. Raises `InputError` when it cannot be read at all."""
    fh = open_input(source, max_bytes)
    try:
        facts = extract_stream(fh, source)
    finally:
        try:
            fh.close()
        except Exception:  # noqa: BLE001 - closing a broken stream must not hide the real error
            pass
    return analyze_facts(facts, options)
