"""Facts: values read from log lines, each with its provenance.

A `Fact` is one value the log states, with the line number, rank and text it came from. The
extractor (``extract.py``) fills a `LogFacts`; nothing downstream reads log lines again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvlogdiag.records import Record


@dataclass(slots=True)
class Fact:
    """One value from one line."""

    value: Any
    line: int
    rank: str | None
    raw: str
    source: str = ""  # which pattern / which part of a line (e.g. "non_default_args")
    run: int = 0  # index of the server start this line belongs to (several starts in one log)
    dp: int = 0  # data-parallel group (engine) the line belongs to

    def evidence(self) -> dict:
        return {"line": self.line, "rank": self.rank, "text": self.raw, "source": self.source}

    @property
    def kind(self) -> str:
        """Where the value stands: ``log``, ``command`` or ``prose`` (`provenance_kind`)."""
        return provenance_kind(self.source)


# Where a value was read: a log line (vLLM's own record, or a tool's output), the launch command the
# user pasted, or the user's prose. A log line beats a command, a command beats prose (derive/figures.py).
PROVENANCE_KINDS = ("log", "command", "prose")
COMMAND_SOURCES = frozenset({"user_command", "command_list", "command_flags", "python_call"})
PROSE_SOURCES = frozenset({"prose"})


def provenance_kind(source: str) -> str:
    """``log`` / ``command`` / ``prose`` of a fact's source (platform evidence names its kind as a suffix)."""
    if source in COMMAND_SOURCES or source.endswith("_in_command"):
        return "command"
    if source in PROSE_SOURCES or source.endswith("_in_prose"):
        return "prose"
    return "log"


# the figures of a stats line kept as distributions (StatsSummary.series)
SERIES = ("prompt_throughput", "generation_throughput", "running", "waiting", "kv_usage_pct", "prefix_cache_hit_pct")
SERIES_MAX_VALUES = 4096
KV_USAGE_STEPS = 1000  # histogram resolution: 0.1 % (vLLM prints the usage with one decimal)
JSON_KV_USAGE_HIGH_PCT = 90.0  # runtime.kv_usage_high_lines of the JSON contract (docs/json-output.md); rules use their own params


@dataclass(slots=True)
class UsageBucket:
    """Stats lines whose KV usage falls in one 0.1 % step: how many, and the first and last of them."""

    count: int
    first: Fact
    last: Fact


def usage_step(pct: float) -> int:
    """The histogram step of a usage figure: floor to 0.1 %, clamped to 0..100 % (also for inf/nan)."""
    if not pct > 0:
        return 0
    if pct >= 100:
        return KV_USAGE_STEPS
    return min(KV_USAGE_STEPS, math.floor(pct * 10 + 1e-6))


def threshold_step(pct: float) -> int:
    """The first step whose usage is >= ``pct`` (a threshold between two steps rounds up)."""
    if not pct > 0:
        return 0
    if pct > 100:
        return KV_USAGE_STEPS + 1  # above every step: nothing counts
    return math.ceil(pct * 10 - 1e-6)


@dataclass
class StatsSummary:
    """Aggregates of the runtime lines, threshold-free and in constant memory however long the log.

    Rules apply their own thresholds to these (e.g. ``kv_usage_lines_at_or_above(params.high_pct)``):
    the KV usage of every stats line is kept as a histogram of 0.1 % steps with the first and last
    line of each step, so any threshold can be counted and cited afterwards.
    """

    lines: int = 0
    kv_usage_max: float | None = None
    kv_usage_last: float | None = None  # the latest stats line's usage (per-run timelines of scan --html)
    kv_usage_max_fact: Fact | None = None
    kv_usage_samples: int = 0
    kv_usage_hist: dict[int, UsageBucket] = field(default_factory=dict)  # usage_step → bucket (≤ 1,001 entries)
    preemptions_total: int = 0  # V1 "Preemptions: P" summed
    preemption_lines: int = 0
    preemption_first: Fact | None = None
    v0_cumulative_preemptions: dict[str | None, Fact] = field(default_factory=dict)  # rank → last V0 warning's total
    running_max: int | None = None
    waiting_max: int | None = None
    single_running_with_queue: int = 0  # "Running: 1 reqs" with requests waiting that are not deferred
    single_running_first: Fact | None = None
    single_running_kv_usage_max: float | None = None  # highest KV usage on those lines
    busy_lines: int = 0  # lines with running > 0 or waiting > 0
    deferred_lines: int = 0  # lines with "Deferred: N reqs" > 0 (blocked waiting requests, vLLM >= 0.20)
    prefix_hit_last: float | None = None
    engines: set = field(default_factory=set)
    # V1 lines with Running > 0 and a KV usage: their sums, for the workload `kvlogdiag deployment`
    # infers when no --avg-prompt-len / --avg-output-len is given (modes/deployment.py, infer_workload)
    workload_lines: int = 0
    prompt_tps_sum: float = 0.0
    gen_tps_sum: float = 0.0
    running_sum: int = 0
    kv_usage_running_sum: float = 0.0  # sum of the KV usage % of those lines
    workload_first: Fact | None = None
    workload_last: Fact | None = None
    # value → number of active stats lines (running, waiting or throughput > 0), per figure (SERIES): the
    # distributions ``diff`` compares (p50/p90/max)
    series: dict[str, dict[float, int]] = field(default_factory=dict)

    def add_samples(self, values: tuple) -> None:
        """Count one active stats line's figures, in SERIES order (None: not on the line); one call per
        line (the hot path of a long log). A figure with SERIES_MAX_VALUES distinct values keeps later
        values to 3 significant digits, so memory stays bounded however long the log."""
        series = self.series
        if not series:
            series.update((name, {}) for name in SERIES)
        for name, value in zip(SERIES, values):
            if value is None:
                continue
            counts = series[name]
            if len(counts) >= SERIES_MAX_VALUES:
                value = float(f"{value:.3g}")
            counts[value] = counts.get(value, 0) + 1


    def add_kv_usage(self, pct: float, fact: Fact) -> None:
        self.kv_usage_samples += 1
        self.kv_usage_last = pct
        if self.kv_usage_max is None or pct > self.kv_usage_max:
            self.kv_usage_max = pct
            self.kv_usage_max_fact = fact
        step = usage_step(pct)
        b = self.kv_usage_hist.get(step)
        if b is None:
            self.kv_usage_hist[step] = UsageBucket(1, fact, fact)
        else:
            b.count += 1
            b.last = fact

    def add_sample(self, running: int, waiting: int, fact: Fact, *, engine: int | None = None,
                   preemptions: int | None = None, usages: tuple[float, ...] = (), hit: float | None = None,
                   deferred: int = 0) -> tuple[bool, bool]:
        """One runtime sample — a periodic stats line, or one engine of a ``/metrics`` scrape — into the
        aggregates. Returns (the KV usage peak rose, a lone running request held a queue)."""
        self.lines += 1
        if engine is not None:
            self.engines.add(engine)
        self.running_max = running if self.running_max is None else max(self.running_max, running)
        self.waiting_max = waiting if self.waiting_max is None else max(self.waiting_max, waiting)
        if running or waiting:
            self.busy_lines += 1
        if preemptions is not None:
            self.preemptions_total += preemptions
            if preemptions:
                self.preemption_lines += 1
                if self.preemption_first is None:
                    self.preemption_first = fact
        peak_rose = False
        for u in usages:
            peak = self.kv_usage_max
            self.add_kv_usage(u, fact)
            peak_rose = peak_rose or peak is None or u > peak
        if hit is not None:
            self.prefix_hit_last = hit
        if deferred:
            self.deferred_lines += 1
        # vLLM >= 0.20 counts the Deferred requests (blocked on remote KV, grammar, streamed input) in
        # Waiting (loggers.py), which no step budget could have admitted
        single = running == 1 and waiting - deferred > 0
        if single:
            self.single_running_with_queue += 1
            if self.single_running_first is None:
                self.single_running_first = fact
            usage = usages[-1] if usages else None
            if usage is not None and (self.single_running_kv_usage_max is None or usage > self.single_running_kv_usage_max):
                self.single_running_kv_usage_max = usage
        return peak_rose, single

    def _at_or_above(self, pct: float) -> list[UsageBucket]:
        lo = threshold_step(pct)
        return [b for s, b in self.kv_usage_hist.items() if s >= lo]

    def lines_at_or_above(self, pct: float) -> int:
        """Stats lines whose KV usage is >= ``pct`` %."""
        return sum(b.count for b in self._at_or_above(pct))

    def first_at_or_above(self, pct: float) -> Fact | None:
        """The first stats line with KV usage >= ``pct`` %."""
        return min((b.first for b in self._at_or_above(pct)), key=lambda f: f.line, default=None)

    def last_at_or_above(self, pct: float) -> Fact | None:
        """The last stats line with KV usage >= ``pct`` %."""
        return max((b.last for b in self._at_or_above(pct)), key=lambda f: f.line, default=None)

    @property
    def kv_usage_high_lines(self) -> int:
        """Lines at >= 90 %: the JSON contract's fixed figure (``runtime.kv_usage_high_lines``), not a rule threshold."""
        return self.lines_at_or_above(JSON_KV_USAGE_HIGH_PCT)

    def v0_preemption_total(self) -> tuple[int | None, Fact | None]:
        """Sum over ranks of the last ``total_num_cumulative_preemption`` each printed, with the latest line."""
        if not self.v0_cumulative_preemptions:
            return None, None
        facts = list(self.v0_cumulative_preemptions.values())
        return sum(f.value for f in facts), max(facts, key=lambda f: f.line)


def _column(second: bool = False) -> Any:
    """A `bounded.FactColumn`: the values of every line, the texts of the lines a reader can cite."""
    from kvlogdiag.extract.bounded import FactColumn, tuple_second

    return FactColumn(key=tuple_second if second else None)


def _columns() -> Any:
    from kvlogdiag.extract.bounded import FactColumns

    return FactColumns()


class LogFacts(Record):  # a plain record, not a dataclass: ~1.2 ms less per start (kvlogdiag/records.py)
    """Everything extracted from one server start (run) of one input."""

    _FIELDS = ("source", "lines_read", "long_lines", "runs", "run_index", "first_line", "last_line_of_run", "started_by",
               "version", "engine", "platform", "config", "env", "launch_args", "available", "kv_budget", "tokens",
               "blocks", "concurrency", "memory", "events", "event_counts", "insufficient_kv", "preemption_warnings",
               "preemption_warning_count", "recompute_preemptions", "recompute_first", "stats", "last_line", "kv_sized",
               "startup_complete", "line_hits", "metrics", "metrics_info", "metrics_input", "runtime_from",
               "preemptions_from", "startup")

    source: str
    lines_read: int = 0
    long_lines: int = 0
    runs: int = 1  # server starts in the whole input (set on every run's facts at the end)
    run_index: int = 0  # which start this is, 0-based
    first_line: int = 1  # first line of the input that belongs to this run
    last_line_of_run: int = 0  # last line of the input that belongs to this run
    started_by: str | None = None  # pattern that opened this run (None: the input's first run)
    version: list[Fact]
    engine: list[Fact]
    platform: list[Fact]
    config: dict[str, list[Fact]]
    env: dict[str, Fact]
    # every argument as each kind of line stated it, whether kvlogdiag tracks it or not: source
    # (non_default_args, args_namespace, user_command, ..., engine_config) → argparse dest → Fact
    launch_args: dict[str, dict[str, Fact]]
    available: list[Fact]  # GiB, "Available KV cache memory"
    kv_budget: list[Fact]  # value = (source kind, GiB)
    tokens: list[Fact]
    blocks: list[Fact]
    concurrency: list[Fact]  # value = (tokens_per_request, x)
    memory: dict[str, list[Fact]]  # weights, graph, non_torch, ...
    events: dict[str, list[Fact]]  # named lines (errors, warnings), first 50
    event_counts: dict[str, int]
    insufficient_kv: list[Fact]
    preemption_warnings: list[Fact]  # V0 lines (first 100 kept)
    preemption_warning_count: int = 0
    recompute_preemptions: int = 0
    recompute_first: Fact | None = None
    stats: StatsSummary
    last_line: int = 0
    kv_sized: bool = False
    startup_complete: Fact | None = None
    line_hits: dict  # user-rule line regex → (count, first Fact)
    #: runtime samples from Prometheus ``/metrics`` scrapes (kvlogdiag.input.metrics), kept apart from the
    #: stats lines: the rules read them when the run has no stats lines (`runtime_from`)
    metrics: StatsSummary
    metrics_info: dict | None = None  # scrapes, source, interval, last scrape's per-engine figures
    metrics_input: bool = False  # the input itself is a saved scrape, not a log
    runtime_from: str = "log"  # where `stats` came from: "log", or "metrics" (set by the pipeline)
    preemptions_from: str = "log"  # where `stats`' preemption figures came from (the scrapes' counter can see more)
    startup: dict | None = None  # start-up verdict of extract/failures.StartupTracker (failed, cause, ...)

    def __init__(self, source: str, lines_read: int = 0, long_lines: int = 0, runs: int = 1, run_index: int = 0,
                 first_line: int = 1, last_line_of_run: int = 0, started_by: str | None = None,
                 version: list[Fact] | None = None, engine: list[Fact] | None = None, platform: list[Fact] | None = None,
                 config: dict[str, list[Fact]] | None = None, env: dict[str, Fact] | None = None,
                 launch_args: dict[str, dict[str, Fact]] | None = None, available: list[Fact] | None = None,
                 kv_budget: list[Fact] | None = None, tokens: list[Fact] | None = None, blocks: list[Fact] | None = None,
                 concurrency: list[Fact] | None = None, memory: dict[str, list[Fact]] | None = None,
                 events: dict[str, list[Fact]] | None = None, event_counts: dict[str, int] | None = None,
                 insufficient_kv: list[Fact] | None = None, preemption_warnings: list[Fact] | None = None,
                 preemption_warning_count: int = 0, recompute_preemptions: int = 0, recompute_first: Fact | None = None,
                 stats: StatsSummary | None = None, last_line: int = 0, kv_sized: bool = False,
                 startup_complete: Fact | None = None, line_hits: dict | None = None, metrics: StatsSummary | None = None,
                 metrics_info: dict | None = None, metrics_input: bool = False, runtime_from: str = "log",
                 preemptions_from: str = "log", startup: dict | None = None) -> None:
        # None for a list or dict field: a new one, made in field order as the dataclass's default factories were
        self.source = source
        self.lines_read = lines_read
        self.long_lines = long_lines
        self.runs = runs
        self.run_index = run_index
        self.first_line = first_line
        self.last_line_of_run = last_line_of_run
        self.started_by = started_by
        self.version = _column() if version is None else version
        self.engine = _column() if engine is None else engine
        self.platform = _column() if platform is None else platform
        self.config = _columns() if config is None else config
        self.env = {} if env is None else env
        self.launch_args = {} if launch_args is None else launch_args
        self.available = _column() if available is None else available
        self.kv_budget = _column(second=True) if kv_budget is None else kv_budget
        self.tokens = _column() if tokens is None else tokens
        self.blocks = _column() if blocks is None else blocks
        self.concurrency = _column(second=True) if concurrency is None else concurrency
        self.memory = _columns() if memory is None else memory
        self.events = {} if events is None else events
        self.event_counts = {} if event_counts is None else event_counts
        self.insufficient_kv = _column() if insufficient_kv is None else insufficient_kv
        self.preemption_warnings = [] if preemption_warnings is None else preemption_warnings
        self.preemption_warning_count = preemption_warning_count
        self.recompute_preemptions = recompute_preemptions
        self.recompute_first = recompute_first
        self.stats = StatsSummary() if stats is None else stats
        self.last_line = last_line
        self.kv_sized = kv_sized
        self.startup_complete = startup_complete
        self.line_hits = {} if line_hits is None else line_hits
        self.metrics = StatsSummary() if metrics is None else metrics
        self.metrics_info = metrics_info
        self.metrics_input = metrics_input
        self.runtime_from = runtime_from
        self.preemptions_from = preemptions_from
        self.startup = startup

    def add_config(self, key: str, fact: Fact) -> None:
        self.config.setdefault(key, []).append(fact)

    def add_event(self, name: str, fact: Fact, keep: int = 50) -> None:
        self.event_counts[name] = self.event_counts.get(name, 0) + 1
        lst = self.events.setdefault(name, [])
        if len(lst) < keep:  # evidence is capped so memory stays flat; the count stays exact
            lst.append(fact)

    def event_count(self, name: str) -> int:
        return self.event_counts.get(name, 0)
