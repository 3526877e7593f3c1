"""``kvlogdiag deployment``: several logs of one PD deployment judged together (no click here).

Each log is analysed once, as ``analyze`` does (`kvlogdiag.pipeline.Analyzer`); a `DeploymentNode` is
built from that `Analysis` (plus three launch settings the Analysis does not carry — quantization,
served_model_name, enable_expert_parallel — taken from the same pass's facts, never by reading the
log again). Logs are grouped into deployments (`group_nodes`), each node's role is classified
(`classify_role`), hosts come from directories or ``<host>__<node>.log`` file names (`assign_hosts`),
and the deployment rules (``rules/deployment/*.toml``) are evaluated over the scopes `scope_envs`
builds. Method and the worked capacity example: docs/deployment.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from tabulate import tabulate

from kvlogdiag.deployment_result import Citation, Deployment, DeploymentFinding, DeploymentNode, OffloadBuffer
from kvlogdiag.derive.architecture import lookup_model
from kvlogdiag.derive.figures import dig_additional
from kvlogdiag.derive.workload import describe as describe_workload
from kvlogdiag.derive.workload import infer_workload
from kvlogdiag.extract.runs import server_starts
from kvlogdiag.input.reader import open_input, truncation
from kvlogdiag.pipeline import Analyzer
from kvlogdiag.result import Analysis
from kvlogdiag.rules.deployment_rules import (
    DeploymentRuleSet,
    ScopeEnv,
    evaluate_deployment,
    load_deployment_rules,
)

GIB = 1 << 30

# KVTransferConfig's default (vllm 0.23.0 vllm/config/kv_transfer.py:57): every deployment that does not set it shares it
DEFAULT_KV_PORT = 14579
MOONCAKE = ("MooncakeConnectorV1", "MooncakeHybridConnector", "MooncakeLayerwiseConnector", "MooncakeConnector")
OFFLOAD = ("OffloadingConnector", "SimpleCPUOffloadConnector", "RecomputeCPUOffloadConnector")
_MLA = re.compile(r"deepseek[-_ ]?(?:v2|v3|r1|v4)|kimi[-_ ]?k2", re.I)
ROLE_ORDER = {"proxy": 0, "prefill": 1, "mixed": 2, "decode": 3}
_LOG_SUFFIXES = (".log", ".txt", ".gz", ".bz2", ".xz", ".zst")


@dataclass
class Workload:
    """The workload the capacity figures use (``--avg-prompt-len``, ``--avg-output-len``), and host RAM."""

    avg_prompt_len: int | None = None
    avg_output_len: int | None = None
    host_ram_gib: float | None = None
    inferred: dict[str, Any] | None = None  # set when the lengths come from the stats lines (`infer_workload`)

    @property
    def given(self) -> bool:
        """Both lengths known (given on the command line, or inferred from the stats lines)."""
        return self.avg_prompt_len is not None and self.avg_output_len is not None


@dataclass
class LoggedNode:
    """One input: its analysis (current run) and the node built from it."""

    path: str
    analysis: Analysis | None
    node: DeploymentNode
    extras: dict[str, Any] = field(default_factory=dict)


# --- one log → one node ---------------------------------------------------------------------


def _children(ktc: dict[str, Any]) -> list[dict[str, Any]]:
    extra = ktc.get("kv_connector_extra_config") or {}
    kids = extra.get("connectors") if isinstance(extra, dict) else None
    return [c for c in kids if isinstance(c, dict)] if isinstance(kids, list) else []


def _int(x: Any) -> int | None:
    try:
        return int(x) if x is not None and not isinstance(x, bool) else None
    except (TypeError, ValueError):
        return None


def offload_buffers(ktc: dict[str, Any] | None, tp: int, pp: int, logged: dict[str, Any] | None,
                    kv_offloading_size: Any = None, bytes_per_token: float | None = None) -> list[OffloadBuffer]:
    """Pinned host buffer per rank of each offload connector (vLLM / vLLM-Ascend semantics: KVD009's why)."""
    out: list[OffloadBuffer] = []
    entries: list[dict[str, Any]] = []
    if isinstance(ktc, dict):
        entries = [ktc, *_children(ktc)]
    ws = max(1, tp * pp)
    for e in entries:
        name = e.get("kv_connector")
        if name not in OFFLOAD:
            continue
        extra = e.get("kv_connector_extra_config") or {}
        per_rank, total = extra.get("cpu_bytes_to_use_per_rank"), extra.get("cpu_bytes_to_use")
        if name == "RecomputeCPUOffloadConnector" and logged and logged.get("per_rank_gb") is not None:
            out.append(OffloadBuffer(name, float(logged["per_rank_gb"]), "logged per_rank"))
        elif isinstance(per_rank, (int, float)):
            out.append(OffloadBuffer(name, per_rank / GIB, "cpu_bytes_to_use_per_rank"))
        elif isinstance(total, (int, float)):
            out.append(OffloadBuffer(name, total / GIB / ws, "cpu_bytes_to_use / (TP x PP)"))
        elif isinstance(extra.get("num_cpu_blocks"), int) and isinstance(extra.get("block_size"), int) and bytes_per_token:
            # vLLM-Ascend NPUOffloadingSpec: num_cpu_blocks CPU blocks of block_size tokens per worker
            # (vllm-ascend 0.23.0.post1 kv_offload/npu.py:20-23, docs kv_cache_cpu_offload.md)
            out.append(OffloadBuffer(name, extra["num_cpu_blocks"] * extra["block_size"] * bytes_per_token / GIB,
                                     "num_cpu_blocks x block_size x bytes/token"))
        elif name in ("RecomputeCPUOffloadConnector", "SimpleCPUOffloadConnector"):
            out.append(OffloadBuffer(name, 8 / ws, "default 8 GiB / (TP x PP)"))
        else:
            out.append(OffloadBuffer(name, None, "not in the log"))
    if kv_offloading_size is not None and not any(b.connector == "OffloadingConnector" for b in out):
        out.append(OffloadBuffer("OffloadingConnector", float(kv_offloading_size) / ws, "kv_offloading_size / (TP x PP)"))
    return out


def classify_role(kv_role: str | None, recompute: bool | None, has_vllm: bool, source: str) -> str:
    """prefill / decode / mixed from kv_role; proxy or unknown for a log that is not a vLLM server's."""
    if kv_role == "kv_producer":
        return "prefill"
    if kv_role == "kv_consumer":
        return "decode"
    if kv_role == "kv_both":
        return "mixed"
    if not has_vllm:
        return "proxy" if "proxy" in Path(source).name.lower() else "unknown"
    return "mixed"  # a vLLM server without kv_role is not one side of a P/D pair


def node_from_analysis(a: Analysis, name: str, extras: dict[str, Any] | None = None) -> DeploymentNode:
    """The deployment view of one log's current run."""
    extras = extras or {}
    c = a.config
    ktc = c.get("kv_transfer_config") if isinstance(c.get("kv_transfer_config"), dict) else None
    kt = a.kv_transfer or {}
    declared_p = declared_d = None
    mooncake_entry = None
    if ktc:
        for e in [ktc, *_children(ktc)]:
            if e.get("kv_connector") in MOONCAKE:
                mooncake_entry = e
                break
        for e in ([mooncake_entry] if mooncake_entry else []) + [ktc]:
            extra = e.get("kv_connector_extra_config") or {}
            if isinstance(extra, dict) and isinstance(extra.get("prefill"), dict):
                declared_p, declared_d = extra.get("prefill"), extra.get("decode")
                break
    recompute = dig_additional(c.get("additional_config"), "recompute_scheduler_enable")
    recompute = bool(recompute) if recompute is not None else None
    tp, pp, dp = c.get("tensor_parallel_size"), c.get("pipeline_parallel_size"), c.get("data_parallel_size")
    groups = {r.dp_group for r in a.kv_cache.ranks}
    if not groups:
        groups = {int(m.group(1)) for rv in a.memory_by_rank.values() for v in rv
                  if v.rank and (m := re.search(r"DP(\d+)", v.rank))}
    dp_local = len(groups) or _int(extras.get("data_parallel_size_local")) or dp
    per_group = [r.tokens for r in a.kv_cache.ranks if r.tokens]
    logged_rco = a.evidence.get("recompute_offload_connector")
    has_vllm = bool(a.vllm.version or c.get("model") or a.kv_cache.ranks)
    kv_role = kt.get("kv_role") or (ktc or {}).get("kv_role")
    lines = {k.split(".", 1)[1]: v["line"] for k, v in a.provenance.items()
             if k.startswith("config.") and isinstance(v, dict) and v.get("line")}
    if a.provenance.get("vllm.version", {}).get("line"):
        lines["vllm_version"] = a.provenance["vllm.version"]["line"]
    if a.kv_cache.ranks:
        tightest = min(a.kv_cache.ranks, key=lambda r: r.tokens)
        if tightest.tokens_line:
            lines["pool_tokens"] = tightest.tokens_line
        if tightest.memory_line:
            lines["bytes_per_token"] = tightest.memory_line
    if logged_rco is not None:
        lines["offload"] = logged_rco.line
    elif "kv_transfer_config" in lines:
        lines["offload"] = lines["kv_transfer_config"]
    return DeploymentNode(
        name=name, source=a.source, role=classify_role(kv_role, recompute, has_vllm, a.source), kv_role=kv_role,
        connector=kt.get("connector"), connectors=[x for x in kt.get("all_connectors", []) if x != "MultiConnector"]
        or ([kt["connector"]] if kt.get("connector") else []),
        engine_id=(ktc or {}).get("engine_id"), kv_port=_int((ktc or {}).get("kv_port")),
        declared_prefill={k: v for k, v in declared_p.items() if isinstance(v, int)} if declared_p else None,
        declared_decode={k: v for k, v in declared_d.items() if isinstance(v, int)} if isinstance(declared_d, dict) else None,
        recompute_scheduler=recompute, model=c.get("model"),
        served_model_name=extras.get("served_model_name"), quantization=extras.get("quantization"),
        vllm_version=a.vllm.version, platform=a.vllm.platform, tp=tp, pp=pp, dp=dp, dp_local=dp_local,
        ep=extras.get("enable_expert_parallel"), block_size=c.get("block_size"), kv_cache_dtype=c.get("kv_cache_dtype"),
        bytes_per_token=a.kv_cache.bytes_per_token, bytes_per_token_kind=a.kv_cache.bytes_per_token_kind,
        pool_tokens_per_dp_group=min(per_group) if per_group else None,
        max_num_seqs=c.get("max_num_seqs"), max_num_batched_tokens=c.get("max_num_batched_tokens"),
        max_model_len=c.get("max_model_len"),
        offload=offload_buffers(ktc, tp or 1, pp or 1, logged_rco.value if logged_rco else None,
                                extras.get("kv_offloading_size"), a.kv_cache.bytes_per_token),
        startup_failed=bool(a.errors.get("startup_failed")) if a.errors else None,
        findings=sorted({f.rule for f in a.findings}), lines=lines)


def _extras(facts: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("quantization", "served_model_name", "enable_expert_parallel", "data_parallel_size_local",
                "kv_offloading_size"):
        vals = facts.config.get(key) if facts is not None else None
        if vals:
            v = vals[-1].value
            out[key] = v[0] if key == "served_model_name" and isinstance(v, list) and v else v
    return out


def analyze_log(analyzer: Analyzer, path: str, max_bytes: int) -> LoggedNode:
    """Analyse one log (its current run) and build its node. Raises `InputError` when it cannot be read."""
    session = analyzer.session(path)
    fh = open_input(path, max_bytes)
    try:
        stats = analyzer.read(fh, path, session)
        cut = truncation(fh)  # a cut compressed log, or --max-bytes: the node is of the lines read
    finally:
        fh.close()
    result = session.result(stats.lines, stats.long_lines)
    a = result.current
    if cut is not None:
        a.extra["truncated"] = cut
    starts = server_starts(session.runs)
    extras = _extras(starts[-1] if starts else None)
    node = node_from_analysis(a, _stem(path), extras)
    node.workload_stats = workload_stats(starts[-1].stats) if starts else None
    node.truncated = cut
    return LoggedNode(path, a, node, extras)


def workload_stats(st: Any) -> dict[str, Any] | None:
    """The stats-line sums a node's workload inference needs (None: no line with running requests)."""
    if not st.workload_lines:
        return None
    return {"lines": st.workload_lines, "prompt_tps_sum": round(st.prompt_tps_sum, 3),
            "gen_tps_sum": round(st.gen_tps_sum, 3), "running_sum": st.running_sum,
            "kv_usage_running_sum": round(st.kv_usage_running_sum, 3),
            "first_line": st.workload_first.line if st.workload_first else None,
            "last_line": st.workload_last.line if st.workload_last else None}


def _stem(path: str) -> str:
    name = Path(path).name
    while any(name.endswith(s) for s in _LOG_SUFFIXES):
        name = name.rsplit(".", 1)[0]
    return name.split("__", 1)[1] if "__" in name else name


def expand_inputs(paths: Iterable[str]) -> list[tuple[str, str]]:
    """(argument, file) for files, directories (recursively, *.log and compressed logs) and globs."""
    out: list[tuple[str, str]] = []
    for arg in paths:
        p = Path(arg)
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(_LOG_SUFFIXES))
            out.extend((arg, str(f)) for f in files)
        elif any(ch in arg for ch in "*?["):
            out.extend((arg, str(f)) for f in sorted(Path().glob(arg)) if f.is_file())
        else:
            out.append((arg, arg))
    return out


# --- grouping and hosts ---------------------------------------------------------------------


def model_id(model: str | None) -> str | None:
    return model.rstrip("/").rsplit("/", 1)[-1].lower() if model else None


def group_nodes(items: list[tuple[str, LoggedNode]], group_by: str = "auto") -> list[tuple[str, list[LoggedNode]]]:
    """Split the logs into deployments.

    ``all``: one deployment. ``dir``: one per command-line argument (a directory is one deployment).
    ``model``: one per model (last path component). ``auto``: within each argument, logs are joined when
    they share the model, the declared P/D layout, the kv_port or the engine_id (connector peers), and
    a proxy or unknown log joins the argument's first deployment.
    """
    if group_by == "all":
        return [("deployment", [ln for _, ln in items])]
    by_arg: dict[str, list[LoggedNode]] = {}
    for arg, ln in items:
        by_arg.setdefault(arg, []).append(ln)
    if group_by == "dir":
        return [(arg.rstrip("/") or arg, lns) for arg, lns in by_arg.items()]
    if group_by == "model":
        by_model: dict[str, list[LoggedNode]] = {}
        for _, ln in items:
            by_model.setdefault(model_id(ln.node.model) or "unknown model", []).append(ln)
        return list(by_model.items())
    out: list[tuple[str, list[LoggedNode]]] = []
    for arg, lns in by_arg.items():
        servers = [ln for ln in lns if ln.node.role not in ("proxy", "unknown")]
        others = [ln for ln in lns if ln.node.role in ("proxy", "unknown")]
        parent = list(range(len(servers)))
        owner: dict[tuple, int] = {}
        for i, ln in enumerate(servers):
            for key in _peer_keys(ln.node):
                if key in owner:
                    parent[_find(parent, i)] = _find(parent, owner[key])
                else:
                    owner[key] = i
        comps: dict[int, list[LoggedNode]] = {}
        for i, ln in enumerate(servers):
            comps.setdefault(_find(parent, i), []).append(ln)
        groups = list(comps.values()) or [[]]
        groups[0].extend(others)
        name = arg.rstrip("/") or arg
        for j, g in enumerate(groups):
            out.append((name if len(groups) == 1 else f"{name}#{j + 1}", g))
    return out


def _find(parent: list[int], i: int) -> int:
    """Union-find root, with path halving."""
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def _peer_keys(n: DeploymentNode) -> set[tuple]:
    """What links two logs of one deployment: the model, the declared P/D layout, kv_port, engine_id."""
    k: set[tuple] = set()
    if n.model:
        k.add(("model", model_id(n.model)))
    if n.declared_prefill:
        k.add(("layout", tuple(sorted(n.declared_prefill.items())), tuple(sorted((n.declared_decode or {}).items()))))
    if n.kv_port is not None and n.kv_port != DEFAULT_KV_PORT:
        k.add(("port", n.kv_port))
    if n.engine_id:
        k.add(("engine", n.engine_id))
    return k


def assign_hosts(lns: list[LoggedNode]) -> None:
    """Host of each node: ``<host>__<node>.log`` names, else the parent directory when the logs sit in several."""
    parents = {str(Path(ln.path).parent) for ln in lns}
    for ln in lns:
        name = Path(ln.path).name
        if "__" in name:
            ln.node.host, ln.node.host_source = name.split("__", 1)[0], "file name"
        elif len(parents) > 1:
            ln.node.host, ln.node.host_source = Path(ln.path).parent.name, "directory"


def unique_names(lns: list[LoggedNode]) -> None:
    seen: dict[str, int] = {}
    for ln in lns:
        seen[ln.node.name] = seen.get(ln.node.name, 0) + 1
    for ln in lns:
        if seen[ln.node.name] > 1:
            ln.node.name = str(Path(*Path(ln.path).parts[-2:]))
    if len({ln.node.name for ln in lns}) < len(lns):
        for ln in lns:
            ln.node.name = ln.path


# --- rule scopes ----------------------------------------------------------------------------


def latent_replicated(model: str | None) -> bool:
    """MLA / DeepSeek-V4: the KV latent is not split by TP (docs/vllm-behaviour.md section 6)."""
    if not model:
        return False
    arch = lookup_model(model)
    if arch is not None:
        return arch.family in ("deepseek-mla", "deepseek-v4")
    return bool(_MLA.search(model))


def node_values(n: DeploymentNode, w: Workload) -> dict[str, Any]:
    """The ``n.*`` names of one node (docs in `kvlogdiag.rules.deployment_rules.NODE_NAMES`)."""
    rep = latent_replicated(n.model)
    bpt = n.bytes_per_token
    v: dict[str, Any] = {
        "name": n.name, "host": n.host, "role": n.role, "kv_role": n.kv_role, "connector": n.connector,
        "connectors": list(n.connectors), "mooncake": next((c for c in n.connectors if c in MOONCAKE), None),
        "engine_id": n.engine_id, "kv_port": n.kv_port,
        "declared_prefill_dp": (n.declared_prefill or {}).get("dp_size"),
        "declared_prefill_tp": (n.declared_prefill or {}).get("tp_size"),
        "declared_decode_dp": (n.declared_decode or {}).get("dp_size"),
        "declared_decode_tp": (n.declared_decode or {}).get("tp_size"),
        "recompute_scheduler": n.recompute_scheduler, "model": n.model, "model_id": model_id(n.model),
        "quantization": n.quantization, "vllm_version": n.vllm_version, "platform": n.platform,
        "tp": n.tp or 1, "pp": n.pp or 1, "dp": n.dp or 1, "dp_local": n.dp_local, "ep": n.ep,
        "block_size": n.block_size, "kv_cache_dtype": n.kv_cache_dtype, "bytes_per_token": bpt,
        # vLLM >= 0.21 prints every pool at max_model_len; it differs from the tokens held only for a hybrid
        # model, so a model known to be dense is not flagged (an unknown one is: it may be hybrid)
        "bpt_effective": n.bytes_per_token_kind == "effective" and not ((arch := lookup_model(n.model or "")) is not None
                                                                         and not arch.is_hybrid),
        "bytes_per_token_total": (bpt if rep else bpt * (n.tp or 1)) if bpt is not None else None,
        "kv_latent_replicated": rep, "pool_tokens": n.pool_tokens_per_dp_group,
        "max_num_seqs": n.max_num_seqs, "max_num_batched_tokens": n.max_num_batched_tokens,
        "max_model_len": n.max_model_len,
        "has_offloading_connector": "OffloadingConnector" in n.connectors,
        "has_rco": "RecomputeCPUOffloadConnector" in n.connectors,
        "offload_per_rank_gib": n.offload_per_rank_gib, "pinned_host_gib": n.pinned_host_gib,
        "findings": list(n.findings), "startup_failed": n.startup_failed,
    }
    v.update(capacity_values(n, w))
    return v


def capacity_values(n: DeploymentNode, w: Workload) -> dict[str, Any]:
    """Workload figures of one node: live tokens at max_num_seqs and requests its DP group's pool holds."""
    out: dict[str, Any] = dict.fromkeys(("live_tokens_avg", "live_tokens_peak", "fit_avg", "fit_peak", "prefill_tokens",
                                         "prefill_tokens_upper", "offload_tokens", "fit_prefill"))
    prompt, output = w.avg_prompt_len, w.avg_output_len
    if prompt is None or output is None:
        return out
    seqs, pool, bpt = n.max_num_seqs, n.pool_tokens_per_dp_group, n.bytes_per_token
    avg, peak = prompt + output / 2, prompt + output
    if seqs is not None:
        out["live_tokens_avg"] = seqs * avg
        out["live_tokens_peak"] = seqs * peak
        out["prefill_tokens"] = seqs * prompt
        out["prefill_tokens_upper"] = seqs * peak
    if pool is not None:
        out["fit_avg"] = math.floor(pool / avg)
        out["fit_peak"] = math.floor(pool / peak)
        out["fit_prefill"] = math.floor(pool / prompt)
    if n.offload_per_rank_gib is not None and bpt:
        out["offload_tokens"] = math.floor(n.offload_per_rank_gib * GIB / bpt)
    return out


def _one(values: Iterable[Any]) -> Any:
    vals = {v for v in values if v is not None}
    return vals.pop() if len(vals) == 1 else None


def deployment_values(nodes: list[DeploymentNode], w: Workload) -> dict[str, Any]:
    """The deployment-wide names (`kvlogdiag.rules.deployment_rules.DEPLOYMENT_NAMES`)."""
    prod = [n for n in nodes if n.kv_role == "kv_producer"]
    cons = [n for n in nodes if n.kv_role == "kv_consumer"]
    names = lambda ns: [n.name for n in ns]  # noqa: E731
    instances = lambda ns: {(n.engine_id or "", model_id(n.model), n.tp, n.dp) for n in ns}  # noqa: E731

    def groups(ns: list[DeploymentNode]) -> int | None:
        if not ns:
            return None
        by_inst: dict[tuple, int] = {}
        for n in ns:
            key = (n.engine_id or "", model_id(n.model), n.tp)
            by_inst[key] = max(by_inst.get(key, 0), n.dp or 1)
        return sum(by_inst.values())

    v: dict[str, Any] = {
        "n_nodes": len(nodes), "n_producers": len(prod), "n_consumers": len(cons),
        "n_mixed": sum(n.kv_role == "kv_both" for n in nodes),
        "n_no_role": sum(n.kv_role is None and n.role not in ("proxy", "unknown") for n in nodes),
        "producers": names(prod), "consumers": names(cons),
        "mixed_nodes": names([n for n in nodes if n.kv_role == "kv_both"]),
        "producer_instances": len(instances(prod)),
        "real_prefill_dp": _one(n.dp or 1 for n in prod), "real_prefill_tp": _one(n.tp or 1 for n in prod),
        "real_decode_dp": _one(n.dp or 1 for n in cons), "real_decode_tp": _one(n.tp or 1 for n in cons),
        "versions": sorted({n.vllm_version for n in nodes if n.vllm_version}),
        "producer_versions": sorted({n.vllm_version for n in prod if n.vllm_version}),
        "consumer_versions": sorted({n.vllm_version for n in cons if n.vllm_version}),
        "recompute_producers": names([n for n in prod if n.recompute_scheduler]),
        "recompute_consumers": names([n for n in cons if n.recompute_scheduler]),
        "rco_producers": names([n for n in prod if "RecomputeCPUOffloadConnector" in n.connectors]),
        "rco_consumers": names([n for n in cons if "RecomputeCPUOffloadConnector" in n.connectors]),
        "offloading_producers": names([n for n in prod if "OffloadingConnector" in n.connectors]),
        "offloading_consumers": names([n for n in cons if "OffloadingConnector" in n.connectors]),
        "avg_prompt_len": w.avg_prompt_len, "avg_output_len": w.avg_output_len, "workload_given": w.given,
        "workload_inferred": w.given and w.inferred is not None,
        "workload_note": describe_workload(w.inferred) if w.given and w.inferred else None,
        "decode_groups": groups(cons), "prefill_groups": groups(prod),
        "decode_capacity": None, "prefill_capacity": None, "first_out": None, "first_out_concurrency": None,
    }
    cap = capacity(nodes, w)
    v.update({k: cap.get(k) for k in ("decode_capacity", "prefill_capacity", "first_out", "first_out_concurrency")})
    return v


def capacity(nodes: list[DeploymentNode], w: Workload) -> dict[str, Any]:
    """D and P capacity of the deployment at the workload (docs/deployment.md, worked example)."""
    if not w.given:
        return {"workload": None, **({"workload_inference": w.inferred} if w.inferred else {})}
    prod = [n for n in nodes if n.kv_role == "kv_producer"]
    cons = [n for n in nodes if n.kv_role == "kv_consumer"]
    per_node = {n.name: capacity_values(n, w) for n in prod + cons}
    out: dict[str, Any] = {"workload": {"avg_prompt_len": w.avg_prompt_len, "avg_output_len": w.avg_output_len,
                                        "source": "stats lines" if w.inferred else "given"},
                           "nodes": per_node}
    if w.inferred:
        out["workload_inference"] = w.inferred
    dv: dict[str, int | None] = {"decode_groups": None, "prefill_groups": None}
    by_inst: dict[str, dict[tuple, int]] = {"d": {}, "p": {}}
    for side, ns in (("d", cons), ("p", prod)):
        for n in ns:
            key = (n.engine_id or "", model_id(n.model), n.tp)
            by_inst[side][key] = max(by_inst[side].get(key, 0), n.dp or 1)
    dv["decode_groups"] = sum(by_inst["d"].values()) or None
    dv["prefill_groups"] = sum(by_inst["p"].values()) or None
    d_fit = [per_node[n.name]["fit_avg"] for n in cons if per_node[n.name]["fit_avg"] is not None]
    p_fit = [per_node[n.name]["fit_prefill"] for n in prod if per_node[n.name]["fit_prefill"] is not None]
    out["decode_capacity"] = min(d_fit) * dv["decode_groups"] if d_fit and dv["decode_groups"] else None
    out["prefill_capacity"] = min(p_fit) * dv["prefill_groups"] if p_fit and dv["prefill_groups"] else None
    # which side's pool runs out first: the one whose max_num_seqs is the larger share of what its pool holds
    ratios: dict[str, tuple[float, int]] = {}
    for side, ns, fit in (("decode", cons, "fit_avg"), ("prefill", prod, "fit_prefill")):
        rs = [(n.max_num_seqs / per_node[n.name][fit], per_node[n.name][fit]) for n in ns
              if n.max_num_seqs and per_node[n.name][fit]]
        if rs:
            ratios[side] = max(rs)
    if ratios:
        first = max(ratios, key=lambda s: ratios[s][0])
        out["first_out"], out["first_out_concurrency"] = first, ratios[first][1]
        out["first_out_ratio"] = ratios[first][0]
    else:
        out["first_out"] = out["first_out_concurrency"] = None
    return out


def host_table(nodes: list[DeploymentNode], w: Workload) -> dict[str, dict[str, Any]]:
    """Per host: nodes, ranks, the pinned offload buffers of its ranks summed, and RAM when given."""
    hosts: dict[str, dict[str, Any]] = {}
    for n in nodes:
        if n.role in ("proxy", "unknown"):
            continue
        h = hosts.setdefault(n.host or f"(host of {n.name})", {"nodes": [], "ranks": 0, "pinned_gib": 0.0,
                                                             "unsized": [], "ram_gib": w.host_ram_gib})
        h["nodes"].append(n.name)
        h["ranks"] += n.ranks_local or 0
        if n.pinned_host_gib is not None:
            h["pinned_gib"] = round(h["pinned_gib"] + n.pinned_host_gib, 4)
        if any(b.per_rank_gib is None for b in n.offload):
            h["unsized"].append(n.name)
    return hosts


def _node_cites(n: DeploymentNode, prefix: str) -> dict[str, list[tuple[str, int | None]]]:
    field_line = {"block_size": "block_size", "kv_cache_dtype": "kv_cache_dtype", "model": "model", "model_id": "model",
                  "quantization": "model", "tp": "tensor_parallel_size", "dp": "data_parallel_size",
                  "max_num_seqs": "max_num_seqs", "kv_role": "kv_transfer_config", "connectors": "kv_transfer_config",
                  "declared_prefill_dp": "kv_transfer_config", "declared_prefill_tp": "kv_transfer_config",
                  "declared_decode_dp": "kv_transfer_config", "declared_decode_tp": "kv_transfer_config",
                  "recompute_scheduler": "additional_config", "vllm_version": "vllm_version",
                  "pool_tokens": "pool_tokens", "bytes_per_token": "bytes_per_token",
                  "bytes_per_token_total": "bytes_per_token", "offload_per_rank_gib": "offload",
                  "pinned_host_gib": "offload", "has_rco": "kv_transfer_config",
                  "has_offloading_connector": "kv_transfer_config"}
    return {f"{prefix}.{k}": [(n.name, n.lines.get(src))] for k, src in field_line.items()}


def _deployment_cites(nodes: list[DeploymentNode]) -> dict[str, list[tuple[str, int | None]]]:
    """The lines behind the deployment-wide lists: each listed node's launch-argument line."""
    def cite(pred: Any, key: str) -> list[tuple[str, int | None]]:
        return [(n.name, n.lines.get(key)) for n in nodes if pred(n)]
    prod = lambda n: n.kv_role == "kv_producer"  # noqa: E731
    cons = lambda n: n.kv_role == "kv_consumer"  # noqa: E731
    return {
        "recompute_producers": cite(lambda n: prod(n) and n.recompute_scheduler, "additional_config"),
        "recompute_consumers": cite(lambda n: cons(n) and n.recompute_scheduler, "additional_config"),
        "rco_producers": cite(lambda n: prod(n) and "RecomputeCPUOffloadConnector" in n.connectors, "kv_transfer_config"),
        "rco_consumers": cite(lambda n: cons(n) and "RecomputeCPUOffloadConnector" in n.connectors, "kv_transfer_config"),
        "offloading_producers": cite(lambda n: prod(n) and "OffloadingConnector" in n.connectors, "kv_transfer_config"),
        "offloading_consumers": cite(lambda n: cons(n) and "OffloadingConnector" in n.connectors, "kv_transfer_config"),
        "producers": cite(prod, "kv_transfer_config"), "consumers": cite(cons, "kv_transfer_config"),
        # the first and last stats line each node's inferred workload sums (when it is inferred)
        "workload_note": [(n.name, n.workload_stats[k]) for n in nodes if n.workload_stats and n.kv_role in
                          ("kv_producer", "kv_consumer") for k in ("first_line", "last_line")],
    }


def instance_key(n: DeploymentNode) -> tuple:
    """Logs of one instance (one per DP rank or host) share the connector's engine_id and every setting a pair rule reads."""
    return (n.kv_role, n.engine_id, model_id(n.model), n.quantization, n.tp, n.dp, n.block_size, n.kv_cache_dtype,
            n.vllm_version, n.max_num_seqs, tuple(n.connectors), n.recompute_scheduler)


def representatives(nodes: list[DeploymentNode]) -> list[DeploymentNode]:
    """One node per instance: the one with the smallest KV pool (the DP group that runs out first)."""
    best: dict[tuple, DeploymentNode] = {}
    for n in nodes:
        k = instance_key(n)
        cur = best.get(k)
        if cur is None or (n.pool_tokens_per_dp_group or 1 << 62) < (cur.pool_tokens_per_dp_group or 1 << 62):
            best[k] = n
    return list(best.values())


def scope_envs(nodes: list[DeploymentNode], w: Workload) -> Any:
    """A function scope → the evaluations of that scope (`ScopeEnv`), for `evaluate_deployment`."""
    base = deployment_values(nodes, w)
    servers = [n for n in nodes if n.role not in ("proxy", "unknown")]
    findings = {n.name: list(n.findings) for n in nodes}
    nv = {n.name: node_values(n, w) for n in nodes}

    def envs(scope: str) -> list[ScopeEnv]:
        if scope == "deployment":
            return [ScopeEnv(dict(base), tuple(n.name for n in servers), _deployment_cites(servers), findings)]
        if scope == "node":
            return [ScopeEnv({**base, **{f"n.{k}": v for k, v in nv[n.name].items()}}, (n.name,), _node_cites(n, "n"),
                             findings) for n in servers]
        if scope == "pair":
            out = []
            dep_cites = {"workload_note": _deployment_cites(servers)["workload_note"]} if base["workload_inferred"] else {}
            for p in representatives([n for n in servers if n.kv_role == "kv_producer"]):
                for d in representatives([n for n in servers if n.kv_role == "kv_consumer"]):
                    values = {**base, **{f"p.{k}": v for k, v in nv[p.name].items()},
                              **{f"d.{k}": v for k, v in nv[d.name].items()}}
                    out.append(ScopeEnv(values, (p.name, d.name), {**_node_cites(p, "p"), **_node_cites(d, "d"), **dep_cites},
                                        findings))
            return out
        hosts = host_table(nodes, w)
        return [ScopeEnv({**base, "host.name": h, "host.nodes": t["nodes"], "host.ranks": t["ranks"],
                          "host.pinned_gib": t["pinned_gib"], "host.unsized": t["unsized"], "host.ram_gib": t["ram_gib"]},
                         tuple(t["nodes"]), {"host.pinned_gib": [(n.name, n.lines.get("offload")) for n in nodes
                                                                  if n.name in t["nodes"] and n.offload]},
                         findings) for h, t in hosts.items()]

    return envs


# --- the deployment -------------------------------------------------------------------------


def build_deployment(name: str, nodes: list[DeploymentNode], workload: Workload | None = None,
                     rules: DeploymentRuleSet | None = None, params: dict[str, dict[str, Any]] | None = None,
                     errors: list[str] | None = None, grouped_by: str = "auto") -> Deployment:
    """Findings and capacity of one deployment's nodes (a node table works as well as analysed logs)."""
    w = workload_for(nodes, workload or Workload())
    rules = rules if rules is not None else load_deployment_rules()
    raw = evaluate_deployment(rules, scope_envs(nodes, w), params, errors)
    # a node-scope verdict that is the same on several nodes (one shared launch template) is one finding
    merged: dict[tuple[str, str, str], list[Any]] = {}
    for f in raw:
        one = f.rule.scope == "node" and len(f.nodes) == 1
        key = (f.rule.code, f.severity.label, f.message.replace(f.nodes[0], "\0") if one else f.message)
        if key in merged:
            if one:
                merged[key].append(f)
            continue
        merged[key] = [f]
    findings = []
    for (_, _, text), fs in merged.items():
        f = fs[0]
        names = tuple(n for x in fs for n in x.nodes)
        message = text.replace("\0", ", ".join(names))
        cites = tuple(Citation(node, line, what) for x in fs for node, line, what in x.evidence)
        links = tuple(dict.fromkeys(link for x in fs for link in x.links))
        fix = f.fix.replace(f.nodes[0], ", ".join(names)) if len(fs) > 1 else f.fix
        findings.append(DeploymentFinding(f.rule.code, f.rule.name, f.severity, message, fix, names, cites, links,
                                          f.rule.summary))
    return Deployment(name, nodes, findings, capacity(nodes, w), host_table(nodes, w), grouped_by)


def workload_for(nodes: list[DeploymentNode], w: Workload) -> Workload:
    """``w``, or — when neither length is given — the workload the stats lines support (`infer_workload`).

    The inference is kept in ``w.inferred`` either way (with a ``reason`` when it gives no figure)."""
    if w.avg_prompt_len is not None or w.avg_output_len is not None:
        return w
    inf = infer_workload([n for n in nodes if n.kv_role == "kv_producer"], [n for n in nodes if n.kv_role == "kv_consumer"])
    if inf["avg_prompt_len"] is None:
        return Workload(None, None, w.host_ram_gib, inf)
    return Workload(inf["avg_prompt_len"], inf["avg_output_len"], w.host_ram_gib, inf)


def deployments_from_logs(paths: Iterable[str], analyzer: Analyzer, workload: Workload | None = None,
                          group_by: str = "auto", max_bytes: int = 1 << 40, rules: DeploymentRuleSet | None = None,
                          errors: list[str] | None = None) -> list[Deployment]:
    """Analyse every log once, group them into deployments, and judge each. `InputError` for an unreadable log."""
    items = [(arg, analyze_log(analyzer, f, max_bytes)) for arg, f in expand_inputs(paths)]
    out = []
    for name, lns in group_nodes(items, group_by):
        assign_hosts(lns)
        unique_names(lns)
        nodes = sorted((ln.node for ln in lns), key=lambda n: (ROLE_ORDER.get(n.role, 9), n.name))
        out.append(build_deployment(name, nodes, workload, rules, analyzer.options.params, errors, group_by))
    return out


# --- text -----------------------------------------------------------------------------------


def _fmt(x: Any, spec: str = ",") -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and spec == ",":
        return f"{x:,.0f}"
    return format(x, spec) if spec else str(x)


def node_rows(d: Deployment) -> list[list[str]]:
    rows = []
    for n in d.nodes:
        offload = ", ".join(f"{b.connector} {b.per_rank_gib:.2f} GiB/rank" if b.per_rank_gib is not None
                            else f"{b.connector} (size not logged)" for b in n.offload) or "—"
        codes = sorted({f.rule for f in d.findings if n.name in f.nodes})
        rows.append([n.name, n.host or "—", n.role + (f" ({n.kv_role})" if n.kv_role else ""), n.layout,
                     n.vllm_version or "—", _fmt(n.block_size), n.kv_cache_dtype or "—", _fmt(n.bytes_per_token),
                     _fmt(n.pool_tokens_per_dp_group), _fmt(n.max_num_seqs), _fmt(n.max_num_batched_tokens),
                     _fmt(n.max_model_len), offload, ", ".join(codes) or "—"])
    return rows


HEADERS = ["node", "host", "role", "DP×TP×EP", "version", "block", "KV dtype", "B/token/rank", "KV pool/DP group",
           "max-num-seqs", "max-batched-tokens", "max-model-len", "offload buffers", "findings"]


def render_text(deps: list[Deployment], min_severity: str = "info") -> str:
    out: list[str] = []
    for d in deps:
        out.append(f"== deployment {d.name}  ({len(d.nodes)} logs)")
        out.append(tabulate(node_rows(d), headers=HEADERS, disable_numparse=True))
        out.append("")
        cap = d.capacity
        if cap.get("workload"):
            wl = cap["workload"]
            out.append(f"Capacity at avg prompt {wl['avg_prompt_len']:,} + output {wl['avg_output_len']:,} tokens "
                       "(per DP group; D holds prompt + output so far, P the prompt until it is sent)")
            if cap.get("workload_inference"):
                out.append(f"  ({describe_workload(cap['workload_inference'])})")
            for name, c in cap["nodes"].items():
                out.append(f"  {name}: live {_fmt(c['live_tokens_avg'])} tokens (peak {_fmt(c['live_tokens_peak'])}), "
                           f"prompts {_fmt(c['prefill_tokens'])}; the pool holds {_fmt(c['fit_avg'])} requests "
                           f"({_fmt(c['fit_peak'])} at full length), {_fmt(c['fit_prefill'])} prompts")
            if cap.get("first_out"):
                out.append(f"  runs out first: {cap['first_out']} side, at {cap['first_out_concurrency']:,} concurrent "
                           "requests per DP group")
            out.append("")
        elif (cap.get("workload_inference") or {}).get("reason"):
            out.append(f"Capacity: no workload given (--avg-prompt-len, --avg-output-len), and none inferred from the "
                       f"stats lines: {cap['workload_inference']['reason']}.")
            out.append("")
        if d.hosts:
            out.append("Hosts: " + "; ".join(
                f"{h}: {t['ranks']} ranks, "
                + (f"pinned offload {t['pinned_gib']:.1f} GiB" if t["pinned_gib"] or t["unsized"] else "no offload buffers")
                + (f" of {t['ram_gib']:,.0f} GiB RAM" if t.get("ram_gib") else "")
                + (f" (+ unsized: {', '.join(t['unsized'])})" if t["unsized"] else "")
                for h, t in d.hosts.items()))
            out.append("")
        shown = d.visible_findings(min_severity)
        out.append(f"Deployment findings ({len(shown)})")
        for f in shown:
            out.append(f"  {f.rule} [{f.severity.label}] {f.name} ({', '.join(f.nodes)})")
            out.append(f"      {f.message}")
            if f.evidence:
                out.append("      evidence: " + "; ".join(f"{c.node}:{c.line if c.line is not None else '?'} {c.what}"
                                                          for c in f.evidence))
            if f.links:
                out.append("      see: " + ", ".join(f.links))
            if f.fix:
                out.append(f"      fix: {f.fix}")
        out.append("")
    return "\n".join(out)


# --- scan --group-by: the deployment column ---------------------------------------------------

PEER_FIELDS = ("role", "kv_role", "model", "kv_port", "engine_id", "declared_prefill", "declared_decode")


def peer_record(a: Analysis) -> str:
    """What `group_nodes` reads of one run, as JSON text (a scan row carries it, also through --state)."""
    import json

    n = node_from_analysis(a, "")
    return json.dumps({k: getattr(n, k) for k in PEER_FIELDS}, sort_keys=True)


def deployment_column(rows: list[dict[str, Any]], arg_of: dict[str, str], group_by: str) -> list[dict[str, Any]]:
    """The rows, each with ``deployment``: the deployment its file belongs to, grouped as ``kvlogdiag deployment``.

    One node per file (per container of a multi-container log), from its current (last) run, as
    ``deployment`` reads each log; every run of the file gets that name. ``arg_of`` maps a row's
    ``source`` to the PATH argument it was found under. A row without an analysis (``error``) gets none."""
    import json

    last: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        if r.get("deployment_peer"):
            last[(r["source"], r.get("container"))] = r
    items = []
    keys: dict[int, tuple] = {}
    for key, r in last.items():
        peer = json.loads(r["deployment_peer"])
        node = DeploymentNode(name=str(key[0]), **{k: peer.get(k) for k in PEER_FIELDS})
        ln = LoggedNode(str(key[0]), None, node)
        keys[id(ln)] = key
        items.append((arg_of.get(r["source"], r["source"]), ln))
    name_of: dict[tuple, str] = {}
    for name, lns in group_nodes(items, group_by):
        for ln in lns:
            name_of[keys[id(ln)]] = name
    return [dict(r, deployment=name_of.get((r["source"], r.get("container")))) for r in rows]
