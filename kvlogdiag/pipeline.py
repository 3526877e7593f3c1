"""One analysis path for every command: source → lines → facts → figures → findings.

`Analyzer` holds the options and the loaded rules; ``analyze``, ``watch``, ``scan`` and ``report``
all go through it, so there is one parser and one set of rules. Reading uses the fast prefiltered
reader unless a loaded user rule matches raw lines (``any_line``/``count``), which needs every line.
"""

from __future__ import annotations

from typing import Any, BinaryIO

from kvlogdiag.catalogue.patterns import prefilter_regex
from kvlogdiag.derive.figures import derive
from kvlogdiag.derive.pairings import RankFiguresView
from kvlogdiag.extract.bounded import RankValues
from kvlogdiag.extract.commands import PREFILTER_KEYWORDS as COMMAND_KEYWORDS
from kvlogdiag.extract.extractor import Extractor
from kvlogdiag.extract.facts import LogFacts
from kvlogdiag.extract.metrics import add_scrape, metrics_json, use_metrics
from kvlogdiag.extract.platform import keywords as platform_keywords
from kvlogdiag.extract.runs import server_starts
from kvlogdiag.input.metrics import SNIFF_BYTES as METRICS_SNIFF_BYTES
from kvlogdiag.input.metrics import MetricsError, parse_scrapes
from kvlogdiag.input.metrics import sniff as metrics_sniff
from kvlogdiag.input.reader import (
    CHUNK_BYTES,
    DEFAULT_MAX_BYTES,
    InputError,
    Line,
    LineStats,
    StatsRun,
    _read_error,
    detect_hard_wrap,
    iter_lines,
    open_input,
    truncation,
    unwrap_lines,
)
from kvlogdiag.result import (
    Analysis,
    Finding,
    InputAnalysis,
    KVCache,
    LogLine,
    RankValue,
    RunInfo,
    VllmInfo,
)
from kvlogdiag.rules.condition import EvaluationError, regex_search
from kvlogdiag.rules.context import Options
from kvlogdiag.rules.engine import RuleError, RuleSet, evaluate, load_rules

__all__ = ["Analyzer", "ContainerSessions", "InputError", "Session", "analyze_source", "build_analysis"]

_PREFILTER = None


def prefilter():
    """The compiled bytes prefilter (built once per process)."""
    global _PREFILTER
    if _PREFILTER is None:
        # launch commands in list/block/Python forms and platform evidence (extract/commands.py, platform.py)
        _PREFILTER = prefilter_regex(COMMAND_KEYWORDS + platform_keywords())
    return _PREFILTER


_USER_PREFILTERS: dict[tuple[str, ...], Any] = {}  # the user rules' words → their prefilter (`Analyzer.line_prefilter`)

# A hang guard, not a budget: a user regex stuck on one line (catastrophic backtracking) is stopped after
# this long and reported; generous so that a busy host never trips it on a sane pattern. Counts never
# depend on how fast the machine is: a pattern either sees every line or its rules report an error.
LINE_REGEX_TIMEOUT_S = 1.5


class LineHits(dict):
    """Pattern → (matching lines, first matching line) of the user-rule line regexes.

    ``stopped`` names the patterns the hang guard stopped, with where: their counts are incomplete and
    the rules using them report a rule error instead of a finding.
    """

    def __init__(self) -> None:
        super().__init__()
        self.stopped: dict[str, str] = {}


class LineMatcher:
    """Counts matches of user-rule line regexes on every line, each search under the hang guard."""

    def __init__(self, patterns: tuple[str, ...]):
        self.patterns = list(patterns)
        self.hits = LineHits()

    def __call__(self, line: Line, fact_of) -> None:
        for p in list(self.patterns):
            try:
                m = regex_search(p, line.text, LINE_REGEX_TIMEOUT_S)
            except EvaluationError as exc:
                self.hits.stopped[p] = f"stopped at line {line.number}: {exc}"
                self.patterns.remove(p)
                continue
            if m is not None:
                n, first = self.hits.get(p, (0, None))
                self.hits[p] = (n + 1, first or fact_of(line))


class Session:
    """An input being analysed line by line: ``analyze`` feeds it a whole file, ``watch`` a live pipe.

    `analyses()` can be called at any time (``watch`` re-evaluates as lines arrive) and gives one
    `Analysis` per server start seen so far, in log order.
    """

    def __init__(self, analyzer: "Analyzer", source: str, container: str | None = None):
        self.analyzer = analyzer
        self.source = source
        self.container = container
        self.extractor = analyzer.new_extractor(source)
        self.lines = 0
        self.long_lines = 0
        self.fed = 0  # lines fed (candidate lines, with the prefilter)

    @property
    def runs(self) -> list[LogFacts]:
        return self.extractor.runs

    def feed(self, line: Line) -> None:
        self.extractor.feed(line)
        self.lines = max(self.lines, line.number)
        self.fed += 1

    def feed_run(self, run: StatsRun) -> None:
        """Feed a run of stats lines (`iter_lines`'s ``stats_runs``): at once, or line by line."""
        if self.extractor.feed_run(run):
            self.lines = max(self.lines, run.numbers[-1])
            self.fed += len(run.numbers)
        else:
            for line in run.lines():
                self.feed(line)

    def new_run(self, reason: str, first_line: int) -> None:
        """Start a new run by hand (``watch -f`` saw the file truncated: the server was restarted)."""
        self.extractor.new_run(reason, first_line)

    def analyses(self, lines_read: int | None = None, long_lines: int | None = None) -> list[Analysis]:
        self.extractor.finish(self.lines if lines_read is None else lines_read,
                              self.long_lines if long_lines is None else long_lines)
        out = [self.analyzer.analyze_facts(f) for f in server_starts(self.extractor.runs)]
        for a in out:
            a.container = self.container
        return out

    def result(self, lines_read: int | None = None, long_lines: int | None = None) -> InputAnalysis:
        return InputAnalysis(self.source, self.analyses(lines_read, long_lines), self.container)


class ContainerSessions:
    """One `Session` per container of an interleaved multi-container log, never merged.

    ``docker compose logs`` prefixes each line with ``name  | ``, ``kubectl logs --prefix`` with
    ``[pod/p/c] ``; the reader keeps that name as ``meta["container"]``. Lines of each container feed
    their own session, so two servers' figures, configs and findings are never mixed. Lines without a
    container name (compose's own ``Attaching to ...``) form an analysis of their own only when
    candidate lines came without any container, or the log names no container at all.
    """

    def __init__(self, analyzer: "Analyzer", source: str):
        self.analyzer = analyzer
        self.source = source
        self.sessions: dict[str | None, Session] = {}

    def feed(self, line: Line) -> None:
        key = line.meta.get("container") if line.meta else None
        s = self.sessions.get(key)
        if s is None:
            s = self.sessions[key] = Session(self.analyzer, self.source, key)
        s.feed(line)

    def feed_run(self, run: StatsRun) -> None:
        """A run of stats lines: at once when it goes to the session of lines without a container (the only
        lines `Extractor.feed_run` reads at once), else line by line."""
        s = self.sessions.get(None)
        if s is not None and s.extractor.feed_run(run):
            s.lines = max(s.lines, run.numbers[-1])
            s.fed += len(run.numbers)
        else:
            for line in run.lines():
                self.feed(line)

    def results(self, lines_read: int, long_lines: int) -> list[InputAnalysis]:
        """One `InputAnalysis` per container, in order of first appearance (lines_read: the input's)."""
        shown = [s for k, s in self.sessions.items() if k is not None or s.fed]
        if not shown:
            shown = [Session(self.analyzer, self.source)]
        return [s.result(lines_read, long_lines) for s in shown]


class Analyzer:
    """Options + rules, and the functions that turn an input into an analysis."""

    def __init__(self, options: Options | None = None, rules: RuleSet | None = None):
        self.options = options or Options()
        if rules is None:
            rules = load_rules(self.options.rule_dirs).selected(self.options.select, self.options.ignore)
        self.rules = rules
        self.rule_errors: list[RuleError] = []
        # --since/--until (kvlogdiag.timeline): runtime lines outside it are not fed, runs outside it dropped
        self.window: Any = None
        self.timelines = False  # record per-run KV usage / preemption timelines (scan --html)
        self.last_feed: Any = None  # the TimedFeed of the last read (its timelines), when one was installed
        self._batch_stats = False  # extractors made now fold stats lines in batches (`read`)

    def new_extractor(self, source: str) -> Extractor:
        ex = Extractor(source)
        ex.batch_stats = self._batch_stats
        if self.rules.line_patterns:
            matcher = LineMatcher(self.rules.line_patterns)
            ex.line_hook = matcher
            ex.facts.line_hits = matcher.hits

            def next_run(old: LogFacts, new: LogFacts) -> None:  # user-rule line counts are per run
                hits = LineHits()
                hits.stopped.update(matcher.hits.stopped)  # a pattern the hang guard stopped stays stopped
                matcher.hits = hits
                new.line_hits = hits

            ex.run_listeners.append(next_run)
        return ex

    def session(self, source: str) -> Session:
        return Session(self, source)

    @property
    def needs_every_line(self) -> bool:
        """True when a user rule's line regex has no word the prefilter could look for (`kvlogdiag.rules.literals`)."""
        from kvlogdiag.rules.literals import required_literal

        return any(required_literal(p) is None for p in self.rules.line_patterns)

    def line_prefilter(self):
        """The reader's prefilter for this rule set: `prefilter`, plus the words the user rules' line regexes
        cannot match without; None (every line) when one of them has no such word."""
        patterns = self.rules.line_patterns
        if not patterns:
            return prefilter()
        if self.needs_every_line:
            return None
        from kvlogdiag.rules.literals import required_literal

        words = tuple(sorted({required_literal(p) or "" for p in patterns}))
        got = _USER_PREFILTERS.get(words)
        if got is None:
            got = _USER_PREFILTERS[words] = prefilter_regex(COMMAND_KEYWORDS + platform_keywords() + words)
        return got

    def read(self, fh: BinaryIO, source: str, session: "Session | ContainerSessions") -> LineStats:
        """Feed every (candidate) line of ``fh`` into ``session``."""
        stats = LineStats()
        # stats lines in batches (kvlogdiag/extract/stats_batch.py) unless a TimedFeed reads the summary
        # after each line
        batch = self.window is None and not self.timelines
        if not batch:
            from kvlogdiag.timeline import TimedFeed

            session = self.last_feed = TimedFeed(session, source, self.window, self.timelines)  # type: ignore[assignment]
        elif isinstance(session, Session):
            session.extractor.batch_stats = True
        width = detect_hard_wrap(fh, source)
        runs = False
        if width:  # a paste cut into fixed-width rows: rejoin them (every row must be seen)
            lines = unwrap_lines(iter_lines(fh, source, None, stats), width)
        else:
            # a plain session reads runs of stats lines at once (Extractor.feed_run)
            runs = batch
            # the first request-logger line too: the start-up tracker reads it as "the server was up"
            lines = iter_lines(fh, source, self.line_prefilter(), stats, stats_runs=runs, first_request=True)
        self._batch_stats = batch
        try:
            if not runs:
                for line in lines:
                    session.feed(line)
            else:
                feed, feed_run = session.feed, session.feed_run
                for item in lines:
                    if item.__class__ is StatsRun:
                        feed_run(item)  # type: ignore[arg-type]
                    else:
                        feed(item)
        finally:
            self._batch_stats = False
        if batch:
            for s in session.sessions.values() if isinstance(session, ContainerSessions) else [session]:
                s.extractor.flush_stats()  # type: ignore[union-attr]
        return stats

    def analyze_facts(self, facts: LogFacts) -> Analysis:
        """Figures and findings of one run's facts (its runtime samples from the scrapes when its log has
        no stats lines: `kvlogdiag.extract.metrics.use_metrics`)."""
        facts = use_metrics(facts)
        derived = derive(facts)
        if facts.metrics_info is not None:  # present only when /metrics was read: logs keep their JSON
            derived["runtime"]["source"] = facts.runtime_from
            derived["runtime"]["preemptions_source"] = facts.preemptions_from if facts.runtime_from == "log" else "metrics"
            derived["runtime"]["metrics"] = metrics_json(facts)
        suggestions: list[dict] = []
        findings = evaluate(self.rules, facts, derived, self.options, self.rule_errors, suggestions)
        analysis = build_analysis(facts, derived, findings)
        analysis.suggestions = suggestions
        return analysis

    def analyze_stream_split(self, fh: BinaryIO, source: str) -> list[InputAnalysis]:
        """One `InputAnalysis` per container of ``fh`` (one for a log of one server): see `ContainerSessions`.
        A saved Prometheus ``/metrics`` scrape (recognised by content) is analysed as one (`analyze_metrics`)."""
        if _is_scrape(fh, source):
            return [self.analyze_metrics(fh, source)]
        router = ContainerSessions(self, source)
        self.last_feed = None
        stats = self.read(fh, source, router)
        results = router.results(stats.lines, stats.long_lines)
        if self.last_feed is not None:
            results = self.last_feed.apply(results)
        cut = truncation(fh)  # a cut compressed stream, or --max-bytes: the analysis is of the lines read
        if cut is not None:
            for r in results:
                for a in r.runs:
                    a.extra["truncated"] = cut
        return results

    def analyze_stream(self, fh: BinaryIO, source: str) -> InputAnalysis:
        """The analysis of ``fh``; of a multi-container log, its first container's (never a merge:
        `analyze_stream_split` gives them all)."""
        return self.analyze_stream_split(fh, source)[0]

    def analyze_metrics(self, fh: BinaryIO, source: str) -> InputAnalysis:
        """A saved scrape (or several concatenated): its vLLM figures as the runtime samples of one run,
        through the same rules. Raises `InputError` naming the line when it does not parse."""
        data = fh.read()
        name = "<stdin>" if source == "-" else source
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{name}: a Prometheus exposition that is not UTF-8 (byte {exc.start:,})") from None
        try:
            scrapes = parse_scrapes(text)
        except MetricsError as exc:
            at = f":{exc.line}" if exc.line else ""
            raise InputError(f"{name}{at}: {exc}") from None
        ex = self.new_extractor(source)
        ex.facts.metrics_input = True
        for sc in scrapes:
            add_scrape(ex.facts, sc, source)
        n = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        facts = ex.finish(n)
        return InputAnalysis(source, [self.analyze_facts(facts)])

    def analyze_source_split(self, source: str, max_bytes: int = DEFAULT_MAX_BYTES) -> list[InputAnalysis]:
        """Read and analyse one input, per container. Raises `InputError` when it cannot be read at all."""
        fh = open_input(source, max_bytes)
        try:
            return self.analyze_stream_split(fh, source)
        finally:
            try:
                fh.close()
            except Exception:  # noqa: BLE001 - closing a broken stream must not hide the real error
                pass

    def analyze_source(self, source: str, max_bytes: int = DEFAULT_MAX_BYTES) -> InputAnalysis:
        """Read and analyse one input (its first container's analysis: see `analyze_stream`)."""
        return self.analyze_source_split(source, max_bytes)[0]


def _is_scrape(fh: BinaryIO, source: str) -> bool:
    """Whether ``fh`` starts like a Prometheus exposition (its buffered head, peeked: nothing is consumed).
    A head that cannot be read (a truncated or corrupt archive) raises `InputError` exactly as the reader's
    own first peek does (`detect_hard_wrap`: keep the two alike)."""
    peek = getattr(fh, "peek", None)
    if peek is None:
        return False
    try:
        head = peek(CHUNK_BYTES)[:METRICS_SNIFF_BYTES]
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - gzip/lzma/zstd errors differ; all are input errors
        raise _read_error(source, exc) from None
    return metrics_sniff(head)


def build_analysis(facts: LogFacts, d: dict[str, Any], findings: list[dict]) -> Analysis:
    """The typed `Analysis` of one run from its derived figures and findings."""
    kv = d["kv_cache"]
    ranks: Any = RankFiguresView(kv["bytes_per_token_by_rank"], facts.run_index)  # built when read (derive/pairings.py)
    known = {"source", "lines_read", "vllm", "config", "kv_cache", "errors", "runtime", "runs", "memory",
             "kv_transfer", "provenance", "findings", "_chosen", "startup"}
    return Analysis(
        source=d["source"],
        lines_read=d["lines_read"],
        run=RunInfo(facts.run_index, facts.runs, facts.first_line, facts.last_line_of_run, facts.started_by),
        vllm=VllmInfo(**d["vllm"]),
        config=d["config"],
        kv_cache=KVCache(kv["available_gib"], kv["kv_budget"], kv["tokens"], kv["gpu_blocks"], kv["max_concurrency"],
                         kv["bytes_per_token"], kv["bytes_per_token_kind"], ranks, kv["bytes_per_token_note"],
                         kv["bytes_per_token_from_error"], kv["ranks_disagree"],
                         _rank_values(facts.available), _rank_values(facts.tokens), _rank_values(facts.blocks)),
        errors=d["errors"],
        runtime=d["runtime"],
        memory=d["memory"],
        kv_transfer=d.get("kv_transfer"),
        provenance=d["provenance"],
        findings=[Finding.from_json(f) for f in findings],
        memory_by_rank={k: RankValues(v) for k, v in sorted(facts.memory.items())},  # type: ignore[misc]
        startup=d.get("startup"),
        evidence=_first_lines(facts),
        extra={k: v for k, v in d.items() if k not in known},
        launch_args={src: {k: LogLine(f.line, f.rank, f.raw, f.value) for k, f in args.items()}
                     for src, args in facts.launch_args.items()},
        stats_series={k: dict(v) for k, v in facts.stats.series.items()},
    )


def _rank_values(facts: list) -> list[RankValue]:
    return RankValues(facts)  # type: ignore[return-value]  # a view: no RankValue kept per line (extract/bounded.py)


def _first_lines(facts: LogFacts) -> dict[str, LogLine]:
    """The first line of each named event, and of the insufficient-KV error, with its text."""
    firsts = {name: lst[0] for name, lst in sorted(facts.events.items()) if lst}
    if facts.insufficient_kv:
        firsts["insufficient_kv"] = facts.insufficient_kv[0]
    return {name: LogLine(f.line, f.rank, f.raw, f.value) for name, f in firsts.items()}


_DEFAULT: Analyzer | None = None


def analyze_source(source: str, options: Options | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """Convenience for scripts and tests: the JSON form of the current run of one input."""
    global _DEFAULT
    if options is not None:
        return Analyzer(options).analyze_source(source, max_bytes).to_json()
    if _DEFAULT is None:
        _DEFAULT = Analyzer()
    return _DEFAULT.analyze_source(source, max_bytes).to_json()
