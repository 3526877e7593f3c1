"""Facts: values read from log lines, each with its provenance.

A `Fact` is one value the log states, with the line number, rank and text it came from. The
extractor (``extract.py``) fills a `LogFacts`; nothing downstream reads log lines again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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


@dataclass
class StatsSummary:
    """Aggregates of the periodic stats lines (constant memory however long the log)."""

    lines: int = 0
    kv_usage_max: float | None = None
    kv_usage_max_fact: Fact | None = None
    kv_usage_high_lines: int = 0  # lines with usage >= the high threshold
    kv_usage_high_first: Fact | None = None
    kv_usage_high_last_line: int | None = None
    kv_usage_samples: int = 0
    preemptions_total: int = 0  # V1 "Preemptions: P" summed
    preemption_lines: int = 0
    preemption_first: Fact | None = None
    running_max: int | None = None
    waiting_max: int | None = None
    single_running_with_queue: int = 0  # "Running: 1 reqs, Waiting: >0"
    single_running_first: Fact | None = None
    busy_lines: int = 0  # lines with running > 0 or waiting > 0
    prefix_hit_last: float | None = None
    engines: set = field(default_factory=set)


@dataclass
class LogFacts:
    """Everything extracted from one server start (run) of one input."""

    source: str
    lines_read: int = 0
    long_lines: int = 0
    runs: int = 1  # server starts in the whole input (set on every run's facts at the end)
    run_index: int = 0  # which start this is, 0-based
    first_line: int = 1  # first line of the input that belongs to this run
    last_line_of_run: int = 0  # last line of the input that belongs to this run
    started_by: str | None = None  # pattern that opened this run (None: the input's first run)
    version: list[Fact] = field(default_factory=list)
    engine: list[Fact] = field(default_factory=list)
    platform: list[Fact] = field(default_factory=list)
    config: dict[str, list[Fact]] = field(default_factory=dict)
    env: dict[str, Fact] = field(default_factory=dict)
    available: list[Fact] = field(default_factory=list)  # GiB, "Available KV cache memory"
    kv_budget: list[Fact] = field(default_factory=list)  # value = (source kind, GiB)
    tokens: list[Fact] = field(default_factory=list)
    blocks: list[Fact] = field(default_factory=list)
    concurrency: list[Fact] = field(default_factory=list)  # value = (tokens_per_request, x)
    memory: dict[str, list[Fact]] = field(default_factory=dict)  # weights, graph, non_torch, ...
    events: dict[str, list[Fact]] = field(default_factory=dict)  # named lines (errors, warnings), first 50
    event_counts: dict[str, int] = field(default_factory=dict)
    insufficient_kv: list[Fact] = field(default_factory=list)
    preemption_warnings: list[Fact] = field(default_factory=list)  # V0 lines (first 100 kept)
    preemption_warning_count: int = 0
    recompute_preemptions: int = 0
    recompute_first: Fact | None = None
    stats: StatsSummary = field(default_factory=StatsSummary)
    last_line: int = 0
    kv_sized: bool = False
    startup_complete: Fact | None = None
    line_hits: dict = field(default_factory=dict)  # user-rule line regex → (count, first Fact)

    def add_config(self, key: str, fact: Fact) -> None:
        self.config.setdefault(key, []).append(fact)

    def add_event(self, name: str, fact: Fact, keep: int = 50) -> None:
        self.event_counts[name] = self.event_counts.get(name, 0) + 1
        lst = self.events.setdefault(name, [])
        if len(lst) < keep:  # evidence is capped so memory stays flat; the count stays exact
            lst.append(fact)

    def event_count(self, name: str) -> int:
        return self.event_counts.get(name, 0)
