"""The typed result of ``kvlogdiag deployment``: one `Deployment` of P / D nodes built from per-log analyses.

A `DeploymentNode` is one log's server start (one vLLM instance's log, or the part of one on one
host), reduced to what matters between nodes: role, layout, KV figures, connectors, offload
buffers. It is built from that log's `kvlogdiag.result.Analysis` (``modes/deployment.py``), never
by reading lines again, so its figures are the ones ``analyze`` prints. `DeploymentFinding` is a
deployment rule's verdict (``rules/deployment/*.toml``): it names the nodes it concerns, cites one
line per node, and links to the single-log findings it builds on instead of repeating them.
`Deployment.to_json()` is the ``deployment`` object of docs/json-output.md (docs/deployment.schema.json).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kvlogdiag.result import Severity

# how logs are split into deployments (`--group-by`): modes/deployment.py groups, the CLI offers the choice
GROUP_BY = ("auto", "dir", "model", "all")


@dataclass
class OffloadBuffer:
    """One CPU-offload connector's pinned host buffer on one node."""

    connector: str
    per_rank_gib: float | None  # None: configured but its size is not in the log
    source: str  # 'cpu_bytes_to_use_per_rank', 'cpu_bytes_to_use / (TP x PP)', 'logged per_rank', 'default 8 GiB / (TP x PP)', 'kv_offloading_size / (TP x PP)'


@dataclass
class DeploymentNode:
    """One log of the deployment. Every field may be None: the log did not show it."""

    name: str
    source: str = ""
    host: str | None = None
    host_source: str | None = None  # 'directory', 'file name', 'data_parallel_address', 'group'
    role: str = "unknown"  # prefill | decode | mixed | proxy | unknown
    kv_role: str | None = None
    connector: str | None = None
    connectors: list[str] = field(default_factory=list)  # every connector, MultiConnector children included
    engine_id: str | None = None
    kv_port: int | None = None
    declared_prefill: dict[str, int] | None = None  # MooncakeConnector kv_connector_extra_config 'prefill'
    declared_decode: dict[str, int] | None = None
    recompute_scheduler: bool | None = None
    model: str | None = None
    served_model_name: str | None = None
    quantization: str | None = None
    vllm_version: str | None = None
    platform: str | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    dp_local: int | None = None  # DP engines whose workers print in this log (on this host)
    ep: bool | None = None
    block_size: int | None = None
    kv_cache_dtype: str | None = None
    bytes_per_token: float | None = None  # per rank, as analyze
    bytes_per_token_kind: str | None = None
    pool_tokens_per_dp_group: int | None = None  # the smallest DP group's KV pool (tokens)
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    offload: list[OffloadBuffer] = field(default_factory=list)
    startup_failed: bool | None = None
    findings: list[str] = field(default_factory=list)  # codes of the single-log findings of this log
    # the sums of the stats lines with running requests (extract/facts.py StatsSummary.workload_*):
    # lines, prompt_tps_sum, gen_tps_sum, running_sum, kv_usage_running_sum, first_line, last_line
    workload_stats: dict[str, Any] | None = None
    lines: dict[str, int] = field(default_factory=dict)  # field → the log line it came from
    # the log was read only in part (a cut compressed file, --max-bytes): the ``truncated`` note of the analysis
    truncated: dict[str, Any] | None = None

    @property
    def offload_per_rank_gib(self) -> float | None:
        sizes = [b.per_rank_gib for b in self.offload if b.per_rank_gib is not None]
        return sum(sizes) if sizes else None

    @property
    def ranks_local(self) -> int | None:
        """Ranks whose pinned buffers live on this log's host: TP x PP x the DP engines in this log."""
        if self.tp is None and self.dp_local is None:
            return None
        return (self.tp or 1) * (self.pp or 1) * (self.dp_local or 1)

    @property
    def pinned_host_gib(self) -> float | None:
        per_rank = self.offload_per_rank_gib
        ranks = self.ranks_local
        return per_rank * ranks if per_rank is not None and ranks is not None else None

    @property
    def layout(self) -> str:
        """``DP2×TP4×EP`` (EP when expert parallelism is on)."""
        parts = [f"DP{self.dp or 1}", f"TP{self.tp or 1}"]
        if self.pp and self.pp > 1:
            parts.append(f"PP{self.pp}")
        if self.ep:
            parts.append("EP")
        return "×".join(parts)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if out.get("truncated") is None:
            out.pop("truncated", None)  # present only for a log read in part (docs/deployment.md)
        out["offload_per_rank_gib"] = self.offload_per_rank_gib
        out["pinned_host_gib"] = self.pinned_host_gib
        out["layout"] = self.layout
        return out

    @classmethod
    def from_table(cls, row: dict[str, Any]) -> "DeploymentNode":
        """A node from a table row (rule samples): the fields of this class, ``offload`` as a list of tables."""
        data = dict(row)
        data["offload"] = [OffloadBuffer(**b) for b in data.get("offload", [])]
        return cls(**data)


@dataclass(frozen=True)
class Citation:
    """A line of one node's log that a deployment finding rests on."""

    node: str
    line: int | None
    what: str

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "line": self.line, "what": self.what}


@dataclass(frozen=True)
class DeploymentFinding:
    """One deployment rule's verdict."""

    rule: str
    name: str
    severity: Severity
    message: str
    fix: str | None
    nodes: tuple[str, ...]
    evidence: tuple[Citation, ...] = ()
    links: tuple[str, ...] = ()  # 'node: KVD007' - single-log findings this one builds on
    summary: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "name": self.name, "severity": self.severity.label, "message": self.message,
                "fix": self.fix, "nodes": list(self.nodes), "evidence": [c.to_json() for c in self.evidence],
                "links": list(self.links), "summary": self.summary}


@dataclass
class Deployment:
    """The nodes of one deployment, its capacity figures and the deployment rules' findings."""

    name: str
    nodes: list[DeploymentNode]
    findings: list[DeploymentFinding] = field(default_factory=list)
    capacity: dict[str, Any] = field(default_factory=dict)  # the D/P capacity figures (see docs/deployment.md)
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)  # host → ranks, pinned GiB, nodes
    grouped_by: str = "auto"

    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), default=None)

    def visible_findings(self, min_severity: str = "info") -> list[DeploymentFinding]:
        limit = Severity.threshold(min_severity)
        return [f for f in self.findings if f.severity >= limit]

    def to_json(self, min_severity: str = "info") -> dict[str, Any]:
        return {"name": self.name, "grouped_by": self.grouped_by,
                "nodes": [n.to_json() for n in self.nodes],
                "hosts": self.hosts, "capacity": self.capacity,
                "findings": [f.to_json() for f in self.visible_findings(min_severity)]}
