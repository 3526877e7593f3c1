"""One analysis path for every command: source → lines → facts → figures → findings.

`Analyzer` holds the options and the loaded rules; ``analyze``, ``watch``, ``scan`` and ``report``
all go through it, so there is one parser and one set of rules. Reading uses the fast prefiltered
reader unless a loaded user rule matches raw lines (``any_line``/``count``), which needs every line.
"""

from __future__ import annotations

import time
from typing import Any, BinaryIO, Callable

from kvlogdiag.rules.condition import EvaluationError, regex_search
from kvlogdiag.rules.context import Options
from kvlogdiag.derive.figures import derive
from kvlogdiag.extract.extractor import Extractor
from kvlogdiag.extract.facts import LogFacts
from kvlogdiag.catalogue.patterns import prefilter_regex
from kvlogdiag.input.reader import (
    DEFAULT_MAX_BYTES, InputError, Line, LineStats, detect_hard_wrap, iter_lines, open_input, unwrap_lines,
)
from kvlogdiag.rules.engine import RuleError, RuleSet, evaluate, load_rules

__all__ = ["Analyzer", "InputError", "analyze_source"]

_PREFILTER = None


def prefilter():
    """The compiled bytes prefilter (built once per process)."""
    global _PREFILTER
    if _PREFILTER is None:
        _PREFILTER = prefilter_regex()
    return _PREFILTER


LINE_REGEX_TIMEOUT_S = 0.25  # one line
LINE_REGEX_BUDGET_S = 2.0  # one pattern over a whole input: a slow-but-not-timing-out regex can't cost hours
LINE_REGEX_SLOW_S = 0.001  # a search slower than this is charged to the budget


class LineMatcher:
    """Counts matches of user-rule line regexes, with a per-line timeout and a per-input time budget."""

    def __init__(self, patterns: tuple[str, ...], errors: list[RuleError]):
        self.patterns = list(patterns)
        self.hits: dict[str, tuple[int, Any]] = {}
        self.errors = errors
        self.spent: dict[str, float] = {p: 0.0 for p in self.patterns}

    def __call__(self, line: Line, fact_of) -> None:
        for p in list(self.patterns):
            t0 = time.perf_counter()
            try:
                m = regex_search(p, line.text, LINE_REGEX_TIMEOUT_S)
            except EvaluationError as exc:
                self.errors.append(RuleError("-", f"line regex {p!r} stopped at line {line.number}: {exc}"))
                self.patterns.remove(p)
                continue
            took = time.perf_counter() - t0
            if took > LINE_REGEX_SLOW_S:  # only slow searches count: cheap patterns run on any log size
                self.spent[p] += took
            if self.spent[p] > LINE_REGEX_BUDGET_S:
                self.errors.append(RuleError("-", f"line regex {p!r} used its time budget ({LINE_REGEX_BUDGET_S:g} s) "
                                                  f"at line {line.number}; its counts cover lines before that"))
                self.patterns.remove(p)
            if m is not None:
                n, first = self.hits.get(p, (0, None))
                self.hits[p] = (n + 1, first or fact_of(line))


class Analyzer:
    """Options + rules, and the functions that turn an input into an analysis."""

    def __init__(self, options: Options | None = None, rules: RuleSet | None = None):
        self.options = options or Options()
        if rules is None:
            rules = load_rules(self.options.rule_dirs).selected(self.options.select, self.options.ignore)
        self.rules = rules
        self.rule_errors: list[RuleError] = []

    def new_extractor(self, source: str) -> Extractor:
        ex = Extractor(source)
        if self.rules.line_patterns:
            matcher = LineMatcher(self.rules.line_patterns, self.rule_errors)
            ex.line_hook = matcher
            ex.facts.line_hits = matcher.hits
        return ex

    @property
    def needs_every_line(self) -> bool:
        return bool(self.rules.line_patterns)

    def extract_stream(self, fh: BinaryIO, source: str, on_event: Callable | None = None) -> LogFacts:
        ex = self.new_extractor(source)
        if on_event is not None:
            ex.listeners.append(on_event)
        stats = LineStats()
        width = detect_hard_wrap(fh, source)
        if width:  # a paste cut into fixed-width rows: rejoin them (every row must be seen)
            lines = unwrap_lines(iter_lines(fh, source, None, stats), width)
        else:
            lines = iter_lines(fh, source, None if self.needs_every_line else prefilter(), stats)
        for line in lines:
            ex.feed(line)
        return ex.finish(stats.lines, stats.long_lines)

    def analyze_facts(self, facts: LogFacts) -> dict[str, Any]:
        analysis = derive(facts)
        analysis["findings"] = evaluate(self.rules, facts, analysis, self.options, self.rule_errors)
        analysis.pop("_chosen", None)
        return analysis

    def analyze_stream(self, fh: BinaryIO, source: str) -> dict[str, Any]:
        return self.analyze_facts(self.extract_stream(fh, source))

    def analyze_source(self, source: str, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
        """Read and analyse one input. Raises `InputError` when it cannot be read at all."""
        fh = open_input(source, max_bytes)
        try:
            return self.analyze_stream(fh, source)
        finally:
            try:
                fh.close()
            except Exception:  # noqa: BLE001 - closing a broken stream must not hide the real error
                pass


_DEFAULT: Analyzer | None = None


def analyze_source(source: str, options: Options | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """Convenience: analyse one input with default (or given) options."""
    global _DEFAULT
    if options is not None:
        return Analyzer(options).analyze_source(source, max_bytes)
    if _DEFAULT is None:
        _DEFAULT = Analyzer()
    return _DEFAULT.analyze_source(source, max_bytes)
