"""The one typed result every mode renders: `Analysis` of one server start (run) of one input.

Data flows one way: lines → facts (``extract``) → figures (``derive``) → findings (``rules``) →
`Analysis` (this module) → renderers and modes. A renderer, ``scan`` row, ``watch`` event, ``report``
or ``estimate`` reads only these objects, never the facts or the log again, so every mode states the
same figures for the same run. `Analysis.to_json()` is the JSON contract (docs/json-output.md): keys are
only ever added.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from kvlogdiag.records import FrozenRecord as _FrozenRecord
from kvlogdiag.records import Record as _Record
from kvlogdiag.records import replace as replace  # re-exported: dataclasses.replace for these records


class Severity(IntEnum):
    """Finding severity; higher is worse. The one definition used by rules, filters and exit codes."""

    INFO = 1
    WARNING = 2
    ERROR = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, name: str) -> "Severity":
        """``"warning"`` → `Severity.WARNING`; ValueError for anything else."""
        try:
            return cls[str(name).upper()]
        except KeyError:
            raise ValueError(f"unknown severity {name!r} (info, warning, error)") from None

    @classmethod
    def threshold(cls, name: str) -> int:
        """Rank of a ``--fail-on``/``--min-severity`` level; ``never`` is above every severity."""
        return 99 if name == "never" else int(cls.parse(name))


LEVELS = ("info", "warning", "error", "never")  # --fail-on values, lowest first

# The records below were dataclasses; they are plain classes on `kvlogdiag.records` (creating the nine cost ~4.5 ms
# of every start: docs/performance.md "Session 9: small-analyze start-up"). `replace` is ``dataclasses.replace``
# for them. A new field goes into ``_FIELDS`` and ``__init__`` (tests/test_plain_records.py fails when the two, or
# the annotations, disagree).


class Finding(_FrozenRecord):
    """One rule's verdict on one run, with the log line that is its evidence."""

    _FIELDS = ("rule", "name", "severity", "message", "fix", "line", "evidence", "rank", "summary")
    rule: str
    name: str
    severity: Severity
    message: str
    fix: str | None = None
    line: int | None = None
    evidence: str | None = None
    rank: str | None = None
    summary: str | None = None

    def __init__(self, rule: str, name: str, severity: Severity, message: str, fix: str | None = None,
                 line: int | None = None, evidence: str | None = None, rank: str | None = None,
                 summary: str | None = None) -> None:
        d = self.__dict__
        d["rule"] = rule
        d["name"] = name
        d["severity"] = severity
        d["message"] = message
        d["fix"] = fix
        d["line"] = line
        d["evidence"] = evidence
        d["rank"] = rank
        d["summary"] = summary

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "name": self.name, "severity": self.severity.label, "message": self.message,
                "fix": self.fix, "line": self.line, "evidence": self.evidence, "rank": self.rank,
                "summary": self.summary}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Finding":
        return cls(d["rule"], d["name"], Severity.parse(d["severity"]), d["message"], d.get("fix"), d.get("line"),
                   d.get("evidence"), d.get("rank"), d.get("summary"))


class RankFigures(_FrozenRecord):
    """One pairing of a KV memory figure with a token count (one rank, or a DP group's tightest rank)."""

    _FIELDS = ("rank", "available_gib", "tokens", "bytes_per_token", "dp_group", "run", "memory_source", "memory_line",
               "tokens_line")
    rank: str | None
    available_gib: float
    tokens: int
    bytes_per_token: float | None
    dp_group: int = 0
    run: int = 0
    memory_source: str | None = None
    memory_line: int | None = None
    tokens_line: int | None = None

    def __init__(self, rank: str | None, available_gib: float, tokens: int, bytes_per_token: float | None,
                 dp_group: int = 0, run: int = 0, memory_source: str | None = None, memory_line: int | None = None,
                 tokens_line: int | None = None) -> None:
        d = self.__dict__
        d["rank"] = rank
        d["available_gib"] = available_gib
        d["tokens"] = tokens
        d["bytes_per_token"] = bytes_per_token
        d["dp_group"] = dp_group
        d["run"] = run
        d["memory_source"] = memory_source
        d["memory_line"] = memory_line
        d["tokens_line"] = tokens_line

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "available_gib": self.available_gib, "tokens": self.tokens,
                "bytes_per_token": self.bytes_per_token, "dp_group": self.dp_group, "run": self.run,
                "memory_source": self.memory_source, "memory_line": self.memory_line, "tokens_line": self.tokens_line}


class RankValue(_FrozenRecord):
    """A per-rank figure of the memory profile (weights, CUDA graphs, …) with its line."""

    _FIELDS = ("value", "rank", "line", "dp_group")
    value: Any
    rank: str | None
    line: int
    dp_group: int = 0

    def __init__(self, value: Any, rank: str | None, line: int, dp_group: int = 0) -> None:
        d = self.__dict__
        d["value"] = value
        d["rank"] = rank
        d["line"] = line
        d["dp_group"] = dp_group


class LogLine(_FrozenRecord):
    """A line a mode cites that is neither a config value nor a KV figure (an error, a connector line)."""

    _FIELDS = ("line", "rank", "text", "value")
    line: int
    rank: str | None
    text: str
    value: Any = None

    def __init__(self, line: int, rank: str | None, text: str, value: Any = None) -> None:
        d = self.__dict__
        d["line"] = line
        d["rank"] = rank
        d["text"] = text
        d["value"] = value


class RunInfo(_FrozenRecord):
    """Which server start of the input this analysis covers."""

    _FIELDS = ("index", "count", "first_line", "last_line", "started_by")
    index: int  # 0-based, in log order
    count: int  # server starts in the input
    first_line: int
    last_line: int
    started_by: str | None = None  # the pattern that opened the run (None for the first run)

    def __init__(self, index: int, count: int, first_line: int, last_line: int, started_by: str | None = None) -> None:
        d = self.__dict__
        d["index"] = index
        d["count"] = count
        d["first_line"] = first_line
        d["last_line"] = last_line
        d["started_by"] = started_by

    @property
    def current(self) -> bool:
        """The last start of the input: the server as it is now."""
        return self.index == self.count - 1

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "count": self.count, "first_line": self.first_line,
                "last_line": self.last_line, "current": self.current, "started_by": self.started_by}


class VllmInfo(_FrozenRecord):
    """The vLLM version, engine and platform of one run, as the log states them."""

    _FIELDS = ("version", "engine", "platform")
    version: str | None
    engine: str | None
    platform: str | None

    def __init__(self, version: str | None, engine: str | None, platform: str | None) -> None:
        d = self.__dict__
        d["version"] = version
        d["engine"] = engine
        d["platform"] = platform

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "engine": self.engine, "platform": self.platform}


class KVCache(_FrozenRecord):
    """The KV figures of one run, as logged, and the bytes per token derived from them."""

    _FIELDS = ("available_gib", "kv_budget", "tokens", "gpu_blocks", "max_concurrency", "bytes_per_token",
               "bytes_per_token_kind", "ranks", "bytes_per_token_note", "bytes_per_token_from_error", "ranks_disagree",
               "available_by_rank", "tokens_by_rank", "blocks_by_rank")
    available_gib: list[float]
    kv_budget: list[dict[str, Any]]
    tokens: list[int]
    gpu_blocks: list[int]
    max_concurrency: list[dict[str, Any]]
    bytes_per_token: float | None
    bytes_per_token_kind: str | None
    ranks: list[RankFigures]
    bytes_per_token_note: str | None
    bytes_per_token_from_error: float | None
    ranks_disagree: bool
    # every logged memory / size line of the run with its rank and line, paired into `ranks` or not
    # (a start-up that failed before sizing the pool, V0 block counts): report and estimate cite them
    available_by_rank: list[RankValue]
    tokens_by_rank: list[RankValue]
    blocks_by_rank: list[RankValue]

    def __init__(self, available_gib: list[float], kv_budget: list[dict[str, Any]], tokens: list[int],
                 gpu_blocks: list[int], max_concurrency: list[dict[str, Any]], bytes_per_token: float | None,
                 bytes_per_token_kind: str | None, ranks: list[RankFigures], bytes_per_token_note: str | None,
                 bytes_per_token_from_error: float | None, ranks_disagree: bool,
                 available_by_rank: list[RankValue] | None = None, tokens_by_rank: list[RankValue] | None = None,
                 blocks_by_rank: list[RankValue] | None = None) -> None:
        d = self.__dict__
        d["available_gib"] = available_gib
        d["kv_budget"] = kv_budget
        d["tokens"] = tokens
        d["gpu_blocks"] = gpu_blocks
        d["max_concurrency"] = max_concurrency
        d["bytes_per_token"] = bytes_per_token
        d["bytes_per_token_kind"] = bytes_per_token_kind
        d["ranks"] = ranks
        d["bytes_per_token_note"] = bytes_per_token_note
        d["bytes_per_token_from_error"] = bytes_per_token_from_error
        d["ranks_disagree"] = ranks_disagree
        d["available_by_rank"] = [] if available_by_rank is None else available_by_rank
        d["tokens_by_rank"] = [] if tokens_by_rank is None else tokens_by_rank
        d["blocks_by_rank"] = [] if blocks_by_rank is None else blocks_by_rank

    @property
    def kv_memory_gib_min(self) -> float | None:
        """Smallest KV memory figure: "Available KV cache memory", else the other budget lines (V0, CPU, Ascend)."""
        mem = [x for x in self.available_gib if x is not None] or [b["gib"] for b in self.kv_budget if b.get("gib") is not None]
        return min(mem) if mem else None

    @property
    def max_concurrency_by_length(self) -> dict[int, tuple[float, float, int]]:
        """tokens per request → (lowest, highest, number of lines)."""
        out: dict[int, list] = {}
        for mc in self.max_concurrency:  # running figures: no list of every line (issue 18, memory)
            x = mc["concurrency"]
            e = out.get(mc["tokens_per_request"])
            if e is None:
                out[mc["tokens_per_request"]] = [x, x, 1]
            else:
                e[0] = x if x < e[0] else e[0]
                e[1] = x if x > e[1] else e[1]
                e[2] += 1
        return {k: (lo, hi, n) for k, (lo, hi, n) in out.items()}

    def to_json(self, lazy: bool = False) -> dict[str, Any]:
        """The ``kv_cache`` object; ``lazy``: its lists as read-only views whose entries are built when read
        (`kvlogdiag.derive.pairings`; the streamed JSON writes them in chunks), else as lists."""
        if lazy:
            ranks = self.ranks
            entries = getattr(ranks, "json_entries", None)
            lists: dict[str, Any] = {"available_gib": self.available_gib, "kv_budget": self.kv_budget,
                                     "tokens": self.tokens, "gpu_blocks": self.gpu_blocks,
                                     "max_concurrency": self.max_concurrency,
                                     "bytes_per_token_by_rank": entries() if entries else [r.to_json() for r in ranks]}
        else:
            lists = {"available_gib": list(self.available_gib), "kv_budget": list(self.kv_budget),
                     "tokens": list(self.tokens), "gpu_blocks": list(self.gpu_blocks),
                     "max_concurrency": list(self.max_concurrency),
                     "bytes_per_token_by_rank": [r.to_json() for r in self.ranks]}
        return {"available_gib": lists["available_gib"], "kv_budget": lists["kv_budget"],
                "tokens": lists["tokens"], "gpu_blocks": lists["gpu_blocks"],
                "max_concurrency": lists["max_concurrency"], "bytes_per_token": self.bytes_per_token,
                "bytes_per_token_kind": self.bytes_per_token_kind,
                "bytes_per_token_by_rank": lists["bytes_per_token_by_rank"],
                "bytes_per_token_note": self.bytes_per_token_note,
                "bytes_per_token_from_error": self.bytes_per_token_from_error,
                "ranks_disagree": self.ranks_disagree}


class Analysis(_Record):
    """Everything kvlogdiag states about one server start of one input.

    ``config``, ``errors``, ``runtime``, ``memory``, ``kv_transfer`` and ``provenance`` keep the
    JSON shape of the contract (plain dictionaries of JSON values); the figures people size clusters
    with are typed (`VllmInfo`, `KVCache`, `RankFigures`, `Finding`).
    """

    _FIELDS = ("source", "lines_read", "run", "vllm", "config", "kv_cache", "errors", "runtime", "memory", "kv_transfer",
               "provenance", "findings", "memory_by_rank", "startup", "evidence", "extra", "container", "launch_args",
               "stats_series", "suggestions")
    source: str
    lines_read: int
    run: RunInfo
    vllm: VllmInfo
    config: dict[str, Any]
    kv_cache: KVCache
    errors: dict[str, Any]
    runtime: dict[str, Any]
    memory: dict[str, list[Any]]
    kv_transfer: dict[str, Any] | None
    provenance: dict[str, dict[str, Any]]
    findings: list[Finding]
    memory_by_rank: dict[str, list[RankValue]]
    startup: dict[str, Any] | None = None
    # first line of each named event of the run (``engine_failed``, ``no_available_memory``,
    # ``recompute_offload_connector``, ``hma_auto_off``, …) and of the insufficient-KV error
    # (``insufficient_kv``): the evidence report and estimate cite; not part of the JSON
    evidence: dict[str, LogLine]
    extra: dict[str, Any]  # fields added to the JSON by later stages
    # the container (docker compose / kubectl --prefix) of an interleaved multi-container log: each
    # container is analysed on its own; None for a log of one server
    container: str | None = None
    # not part of the JSON (``diff`` and ``suggest`` read them): every launch argument as each kind of
    # line stated it (source → argparse dest → line), the stats lines' figures as value → line count, and
    # the suggested setting of each finding whose rule declares one (rules/suggestion.py)
    launch_args: dict[str, dict[str, LogLine]]
    stats_series: dict[str, dict[float, int]]
    suggestions: list[dict[str, Any]]

    def __init__(self, source: str, lines_read: int, run: RunInfo, vllm: VllmInfo, config: dict[str, Any],
                 kv_cache: KVCache, errors: dict[str, Any], runtime: dict[str, Any], memory: dict[str, list[Any]],
                 kv_transfer: dict[str, Any] | None, provenance: dict[str, dict[str, Any]],
                 findings: list[Finding] | None = None, memory_by_rank: dict[str, list[RankValue]] | None = None,
                 startup: dict[str, Any] | None = None, evidence: dict[str, LogLine] | None = None,
                 extra: dict[str, Any] | None = None, container: str | None = None,
                 launch_args: dict[str, dict[str, LogLine]] | None = None,
                 stats_series: dict[str, dict[float, int]] | None = None,
                 suggestions: list[dict[str, Any]] | None = None) -> None:
        self.source = source
        self.lines_read = lines_read
        self.run = run
        self.vllm = vllm
        self.config = config
        self.kv_cache = kv_cache
        self.errors = errors
        self.runtime = runtime
        self.memory = memory
        self.kv_transfer = kv_transfer
        self.provenance = provenance
        self.findings = [] if findings is None else findings
        self.memory_by_rank = {} if memory_by_rank is None else memory_by_rank
        self.startup = startup
        self.evidence = {} if evidence is None else evidence
        self.extra = {} if extra is None else extra
        self.container = container
        self.launch_args = {} if launch_args is None else launch_args
        self.stats_series = {} if stats_series is None else stats_series
        self.suggestions = [] if suggestions is None else suggestions

    # -- views -----------------------------------------------------------------------------------

    @property
    def model(self) -> str | None:
        return self.config.get("model")

    @property
    def parallel(self) -> tuple[int | None, int | None, int | None]:
        c = self.config
        return c.get("tensor_parallel_size"), c.get("pipeline_parallel_size"), c.get("data_parallel_size")

    def visible_findings(self, min_severity: str = "info") -> list[Finding]:
        limit = Severity.threshold(min_severity)
        return [f for f in self.findings if f.severity >= limit]

    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), default=None)

    def to_json(self, min_severity: str = "info", lazy: bool = False) -> dict[str, Any]:
        """The JSON contract (docs/json-output.md); findings below ``min_severity`` left out. ``lazy``: the
        lists of KV and memory lines as views (`KVCache.to_json`), for `kvlogdiag.render.json_stream`."""
        out: dict[str, Any] = {"source": self.source}
        if self.container is not None:
            out["container"] = self.container
        out.update({
            "lines_read": self.lines_read,
            "vllm": self.vllm.to_json(),
            "config": self.config,
            "kv_cache": self.kv_cache.to_json(lazy),
            "errors": self.errors,
            "runtime": self.runtime,
            "runs": self.run.count,
            "run": self.run.to_json(),
            "memory": self.memory if lazy else {k: list(v) for k, v in self.memory.items()},
            "kv_transfer": self.kv_transfer,
            "provenance": self.provenance,
        })
        if self.startup is not None:
            out["startup"] = self.startup
        out.update(self.extra)
        out["findings"] = [f.to_json() for f in self.visible_findings(min_severity)]
        return out


class InputAnalysis(_Record):
    """The runs of one input, in log order; `selected` are the ones the user asked for."""

    _FIELDS = ("source", "runs", "container")
    source: str
    runs: list[Analysis]
    container: str | None = None  # see `Analysis.container`

    def __init__(self, source: str, runs: list[Analysis], container: str | None = None) -> None:
        self.source = source
        self.runs = runs
        self.container = container

    @property
    def current(self) -> Analysis:
        return self.runs[-1]

    def select(self, which: str = "last") -> list[Analysis]:
        """``last`` (the current start), ``first``, ``all`` (newest first) or a 1-based run number."""
        if which == "all":
            return list(reversed(self.runs))
        if which == "last":
            return [self.runs[-1]]
        if which == "first":
            return [self.runs[0]]
        n = int(which)
        if not 1 <= n <= len(self.runs):
            where = f"{self.source} [{self.container}]" if self.container else self.source
            raise IndexError(f"{where}: no run {n} (the input has {len(self.runs)})")
        return [self.runs[n - 1]]

    def to_json(self, which: str = "last", min_severity: str = "info", lazy: bool = False) -> dict[str, Any]:
        """The Analysis of the selected run (default: the current one), with every run under ``all_runs``.

        The lists of KV lines under ``kv_cache`` (available_gib, kv_budget, tokens, gpu_blocks,
        max_concurrency) keep the contract's meaning at this level: every such line of the input, in log
        order, whichever run printed it. Each entry of ``all_runs`` lists its own run's lines; every other
        figure (bytes per token, config, findings) is the selected run's alone.
        """
        chosen = self.select("last" if which == "all" else which)[0]
        out = chosen.to_json(min_severity, lazy)
        if len(self.runs) > 1 or which == "all":
            out["all_runs"] = [a.to_json(min_severity, lazy) for a in reversed(self.runs)]
            for key in INPUT_LISTS:
                if lazy:
                    from kvlogdiag.derive.pairings import ChainView

                    out["kv_cache"][key] = ChainView([getattr(a.kv_cache, key) for a in self.runs])
                else:
                    out["kv_cache"][key] = [x for a in self.runs for x in getattr(a.kv_cache, key)]
        return out


INPUT_LISTS = ("available_gib", "kv_budget", "tokens", "gpu_blocks", "max_concurrency")
