"""The flat namespace rule conditions and messages are evaluated against.

`NAMES` documents every name a rule may use (unknown names are load errors); `build_context`
fills them from the facts, the derived analysis and the user's options, and records for each
name the log line it came from (provenance), so a finding can cite its evidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kvlogdiag.derive import _as_int, _dig_additional, parse_version
from kvlogdiag.facts import Fact, LogFacts

GIB = 1 << 30

NAMES: dict[str, str] = {
    # identity
    "vllm_version": "vLLM version string as logged",
    "engine": "'v0' or 'v1'",
    "platform": "cuda | rocm | npu | cpu | xpu | tpu | hpu",
    "is_ascend": "true on vLLM-Ascend (platform npu)",
    "model": "model name or path as logged",
    "is_deepseek_v4": "model name looks like DeepSeek-V4",
    "is_ssm_hybrid": "model name looks like a Mamba/SSM hybrid (Jamba, Bamba, Nemotron-H, Granite-4, Qwen3-Next, Falcon-H1)",
    "is_sliding_window_model": "model name looks like a model with sliding-window layers (Gemma 2/3/4, gpt-oss, Mistral v0.1, Cohere2, Llama-4)",
    # config
    "tensor_parallel_size": "TP size", "pipeline_parallel_size": "PP size", "data_parallel_size": "DP size",
    "tp": "TP size, 1 when not logged", "pp": "PP size, 1 when not logged", "dp": "DP size, 1 when not logged",
    "world_size": "tp × pp × dp",
    "max_model_len": "configured max model length",
    "block_size": "KV block size",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "equivalent_utilization": "vLLM's 'equivalent to --gpu-memory-utilization=X without CUDA graph memory profiling'",
    "kv_cache_dtype": "KV cache dtype as logged",
    "max_num_batched_tokens": "max_num_batched_tokens (args or 'Chunked prefill is enabled' line)",
    "max_num_seqs": "max_num_seqs",
    "max_num_partial_prefills": "max_num_partial_prefills",
    "max_long_partial_prefills": "max_long_partial_prefills",
    "long_prefill_token_threshold": "long_prefill_token_threshold",
    "enable_prefix_caching": "prefix caching on/off as logged",
    "enable_chunked_prefill": "chunked prefill on/off as logged",
    "hma_disabled": "hybrid KV cache manager off (flag or vLLM's warning)",
    "hma_disabled_flag": "true when --disable-hybrid-kv-cache-manager was given explicitly",
    "hma_off_cause": "why HMA is off: 'flag', 'connector', 'chunked_local_attention', 'unsupported', 'model' or null",
    "kv_connector": "top-level KV connector name",
    "kv_connectors": "all KV connector names (MultiConnector children included)",
    "kv_role": "kv_producer | kv_consumer | kv_both",
    "node_role": "prefill | decode | mixed (from --role, else from kv_role)",
    "recompute_scheduler_enable": "vLLM-Ascend additional_config recompute_scheduler_enable (top level or scheduler_config)",
    "retention_interval": "prefix-cache retention interval (env VLLM_PREFIX_CACHE_RETENTION_INTERVAL or --prefix-cache-retention-interval)",
    "retention_source": "'env' or 'flag'",
    "offload_cpu_bytes_total": "offload connector cpu_bytes_to_use (global) from kv_connector_extra_config",
    "offload_cpu_bytes_per_rank": "cpu_bytes_to_use_per_rank from kv_connector_extra_config",
    "offload_per_rank_gb_logged": "per_rank GB printed by RecomputeCPUOffloadConnector",
    "offload_world_size_logged": "world_size printed by RecomputeCPUOffloadConnector",
    "kv_offloading_size": "--kv-offloading-size (GiB)",
    # KV figures
    "kv_sized": "the log reached KV cache sizing (a memory figure, token count or KV error)",
    "available_gib_min": "smallest 'Available KV cache memory' (GiB) of the run",
    "available_gib_max": "largest 'Available KV cache memory' (GiB)",
    "kv_budget_gib_min": "smallest other KV budget figure (V0 profile, Ascend bytes, CPU backend)",
    "tokens_min": "smallest KV cache size in tokens",
    "tokens_per_dp_group": "KV tokens of one DP group (smallest)",
    "bytes_per_token": "the run's measured bytes per token (per rank)",
    "bytes_per_token_kind": "'pool' or 'effective'",
    "bpt_spread_pct": "spread of bytes per token across pairings, percent of the smallest",
    "available_spread_pct": "spread of Available KV cache memory across ranks of one group, percent of the smallest",
    "ranks_disagree": "pairings disagree by more than 1 %",
    "max_concurrency": "smallest 'Maximum concurrency' figure",
    "insufficient_kv": "vLLM's insufficient-KV error was logged",
    "needed_gib": "GiB vLLM said one max-length request needs",
    "error_available_gib": "available GiB in that error",
    "error_max_seq_len": "max seq len in that error",
    "estimated_max_len": "vLLM's estimated maximum model length",
    "no_available_memory": "'No available memory for the cache blocks' was logged",
    "available_negative": "an Available KV cache memory figure ≤ 0",
    "startup_failed": "EngineCore failed to start",
    "startup_complete": "the server reached 'Application startup complete'",
    "engine_failed_line": "line of the engine start failure",
    # runtime
    "preemption_warnings": "V0 preemption warning lines",
    "stats_preemptions": "sum of V1 'Preemptions: P' in stats lines",
    "recompute_preemptions": "vLLM-Ascend RecomputeScheduler 'Preempted request' lines",
    "stats_lines": "periodic stats lines",
    "kv_usage_max": "highest KV cache usage % in stats lines",
    "kv_usage_high_lines": "stats lines with KV usage ≥ 90 %",
    "single_running_lines": "stats lines with Running: 1 and a non-empty queue",
    "busy_lines": "stats lines with running or waiting requests",
    # options
    "p99_len": "--p99-len (workload P99 request length, default 32768)",
    "avg_prompt_len": "--avg-prompt-len or null",
    "kv_gib_at_p99": "KV one request of p99_len tokens needs on one rank (GiB), from bytes_per_token",
}

_DSV4 = re.compile(r"deepseek[-_ ]?v4", re.I)
_SSM = re.compile(r"jamba|bamba|nemotron[-_]?h|granite[-_]?4|qwen3[-_]?next|falcon[-_]?h1|mamba|zamba|minimax", re.I)
_SWA = re.compile(r"gemma[-_]?[234]|gpt[-_]?oss|mistral[-_]?7b[-_]?(?:instruct[-_]?)?v0\.1|cohere2|command[-_]?a|llama[-_]?4|phi[-_]?3[-_.]?(?:mini|small)", re.I)


@dataclass
class Options:
    """User options that reach the rules (from flags and kvlogdiag.toml)."""

    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    fail_on: str = "error"
    min_severity: str = "info"
    rule_dirs: list[str] = field(default_factory=list)
    role: str | None = None
    p99_len: int = 32768
    avg_prompt_len: int | None = None
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    strict_rules: bool = False


def _min(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return min(vals) if vals else None


def _spread(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    if len(vals) < 2:
        return None
    return (max(vals) - min(vals)) / min(vals) * 100.0


def build_context(facts: LogFacts, analysis: dict, options: Options | None = None) -> tuple[dict[str, Any], dict[str, Fact]]:
    """Fill `NAMES` from the analysis; returns (values, provenance)."""
    opts = options or Options()
    chosen: dict[str, Fact] = analysis.get("_chosen", {})
    cfg = analysis["config"]
    kv = analysis["kv_cache"]
    rt = analysis["runtime"]
    v: dict[str, Any] = {}
    prov: dict[str, Fact] = {}

    def put(name: str, value: Any, fact: Fact | None = None) -> None:
        v[name] = value
        if fact is not None:
            prov[name] = fact

    put("vllm_version", analysis["vllm"]["version"], facts.version[0] if facts.version else None)
    put("engine", analysis["vllm"]["engine"])
    put("platform", analysis["vllm"]["platform"], facts.platform[0] if facts.platform else None)
    put("is_ascend", analysis["vllm"]["platform"] == "npu")
    model = cfg["model"]
    put("model", model, chosen.get("model"))
    put("is_deepseek_v4", bool(model and _DSV4.search(model)))
    put("is_ssm_hybrid", bool(model and _SSM.search(model)))
    put("is_sliding_window_model", bool(model and _SWA.search(model)))

    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "max_model_len",
                "block_size", "gpu_memory_utilization", "kv_cache_dtype", "max_num_batched_tokens", "max_num_seqs",
                "max_num_partial_prefills", "max_long_partial_prefills", "long_prefill_token_threshold",
                "enable_prefix_caching"):
        put(key, cfg[key], chosen.get(key))
    ecp = chosen.get("enable_chunked_prefill")
    put("enable_chunked_prefill", ecp.value if ecp is not None and isinstance(ecp.value, bool) else None, ecp)
    tp, pp, dp = (cfg["tensor_parallel_size"] or 1), (cfg["pipeline_parallel_size"] or 1), (cfg["data_parallel_size"] or 1)
    put("tp", tp)
    put("pp", pp)
    put("dp", dp)
    put("world_size", tp * pp * dp)
    eq = analysis["memory"].get("equivalent_utilization") or []
    put("equivalent_utilization", eq[-1] if eq else None, (facts.memory.get("equivalent_utilization") or [None])[-1])

    # hybrid KV cache manager
    flag_fact = chosen.get("disable_hybrid_kv_cache_manager")
    flag = flag_fact.value if flag_fact is not None and isinstance(flag_fact.value, bool) else None
    put("hma_disabled", cfg["disable_hybrid_kv_cache_manager"], flag_fact)
    put("hma_disabled_flag", flag is True, flag_fact)
    cause = None
    for ev, name in (("hma_auto_off", "connector"), ("hma_chunked_local", "chunked_local_attention"),
                     ("hma_explicit_unsupported", "unsupported"), ("hma_disabled_hybrid_model", "model"),
                     ("hma_unify_failed", "model")):
        if facts.events.get(ev):
            if cause is None or cause == "model":
                cause = name
            prov.setdefault("hma_disabled", facts.events[ev][0])
    if flag is True:
        cause = "flag"
    put("hma_off_cause", cause)

    # KV transfer
    summ = analysis.get("kv_transfer") or {}
    put("kv_connector", summ.get("connector"), chosen.get("kv_transfer_config"))
    put("kv_connectors", summ.get("all_connectors") or [], chosen.get("kv_transfer_config"))
    put("kv_role", summ.get("kv_role"), chosen.get("kv_transfer_config"))
    role = opts.role
    if role is None:
        role = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "mixed"}.get(summ.get("kv_role") or "")
    put("node_role", role)
    ac = cfg.get("additional_config")
    rse = _dig_additional(ac, "recompute_scheduler_enable")
    if rse is None:
        f = (facts.config.get("ascend_config.recompute_scheduler_enable") or [None])[0]
        if f is not None:
            rse, prov["recompute_scheduler_enable"] = f.value, f
    put("recompute_scheduler_enable", rse if isinstance(rse, bool) else None, prov.get("recompute_scheduler_enable") or chosen.get("additional_config"))

    # retention interval: the CLI flag beats the env var (vLLM >= 0.29 reads the flag first)
    ri, rsrc, rfact = None, None, None
    fl = chosen.get("prefix_cache_retention_interval")
    if fl is not None and _as_int(fl.value) is not None:
        ri, rsrc, rfact = _as_int(fl.value), "flag", fl
    elif "VLLM_PREFIX_CACHE_RETENTION_INTERVAL" in facts.env:
        ef = facts.env["VLLM_PREFIX_CACHE_RETENTION_INTERVAL"]
        ri, rsrc, rfact = _as_int(ef.value), "env", ef
    elif facts.events.get("retention_not_multiple"):
        ef = facts.events["retention_not_multiple"][0]
        ri, rsrc, rfact = ef.value[0], "error", ef
    put("retention_interval", ri, rfact)
    put("retention_source", rsrc, rfact)

    # offload sizes
    total_b, per_rank_b = None, None
    ktc = cfg.get("kv_transfer_config") or {}
    extras = []
    if isinstance(ktc, dict):
        ex = ktc.get("kv_connector_extra_config")
        if isinstance(ex, dict):
            extras.append(ex)
            for c in ex.get("connectors") or []:
                if isinstance(c, dict) and isinstance(c.get("kv_connector_extra_config"), dict):
                    extras.append(c["kv_connector_extra_config"])
    for ex in extras:
        if total_b is None and _as_int(ex.get("cpu_bytes_to_use")) is not None:
            total_b = _as_int(ex.get("cpu_bytes_to_use"))
        if per_rank_b is None and _as_int(ex.get("cpu_bytes_to_use_per_rank")) is not None:
            per_rank_b = _as_int(ex.get("cpu_bytes_to_use_per_rank"))
    put("offload_cpu_bytes_total", total_b, chosen.get("kv_transfer_config"))
    put("offload_cpu_bytes_per_rank", per_rank_b, chosen.get("kv_transfer_config"))
    roc = facts.events.get("recompute_offload_connector") or []
    put("offload_per_rank_gb_logged", roc[0].value["per_rank_gb"] if roc else None, roc[0] if roc else None)
    put("offload_world_size_logged", roc[0].value["world_size"] if roc else None, roc[0] if roc else None)
    kos = chosen.get("kv_offloading_size")
    put("kv_offloading_size", kos.value if kos is not None else None, kos)

    # KV figures
    put("kv_sized", facts.kv_sized)
    avail = facts.available
    put("available_gib_min", _min([f.value for f in avail]), min(avail, key=lambda f: f.value) if avail else None)
    put("available_gib_max", max((f.value for f in avail), default=None))
    put("kv_budget_gib_min", _min([f.value[1] for f in facts.kv_budget]),
        min(facts.kv_budget, key=lambda f: f.value[1]) if facts.kv_budget else None)
    toks = facts.tokens
    put("tokens_min", _min([f.value for f in toks]), min(toks, key=lambda f: f.value) if toks else None)
    per_rank = kv["bytes_per_token_by_rank"]
    put("tokens_per_dp_group", _min([p["tokens"] for p in per_rank]) if per_rank else v["tokens_min"])
    put("bytes_per_token", kv["bytes_per_token"], prov.get("tokens_min") or prov.get("available_gib_min"))
    put("bytes_per_token_kind", kv["bytes_per_token_kind"])
    put("bpt_spread_pct", _spread([p["bytes_per_token"] for p in per_rank]))
    groups: dict[tuple, list[float]] = {}
    for f in avail:
        groups.setdefault((f.run, f.dp), []).append(f.value)
    spreads = [s for s in (_spread(g) for g in groups.values()) if s is not None]
    put("available_spread_pct", max(spreads) if spreads else None)
    put("ranks_disagree", bool(kv["ranks_disagree"]))
    conc = facts.concurrency
    put("max_concurrency", _min([f.value[1] for f in conc]), min(conc, key=lambda f: f.value[1]) if conc else None)
    ik = facts.insufficient_kv[0] if facts.insufficient_kv else None
    put("insufficient_kv", ik is not None, ik)
    put("needed_gib", ik.value["needed_gib"] if ik else None, ik)
    put("error_available_gib", ik.value["available_gib"] if ik else None, ik)
    put("error_max_seq_len", ik.value["max_seq_len"] if ik else None, ik)
    put("estimated_max_len", ik.value["estimated_max_len"] if ik else None, ik)
    nam = facts.events.get("no_available_memory")
    put("no_available_memory", bool(nam), nam[0] if nam else None)
    neg = [f for f in avail if f.value <= 0]
    put("available_negative", bool(neg), neg[0] if neg else None)
    ef = facts.events.get("engine_failed")
    put("startup_failed", bool(ef), ef[0] if ef else None)
    put("engine_failed_line", ef[0].line if ef else None)
    put("startup_complete", facts.startup_complete is not None, facts.startup_complete)

    st = facts.stats
    put("preemption_warnings", rt["preemptions"], facts.preemption_warnings[0] if facts.preemption_warnings else None)
    put("stats_preemptions", st.preemptions_total, st.preemption_first)
    put("recompute_preemptions", facts.recompute_preemptions, facts.recompute_first)
    put("stats_lines", st.lines)
    put("kv_usage_max", st.kv_usage_max, st.kv_usage_max_fact)
    put("kv_usage_high_lines", st.kv_usage_high_lines, st.kv_usage_high_first)
    put("single_running_lines", st.single_running_with_queue, st.single_running_first)
    put("busy_lines", st.busy_lines)

    put("p99_len", opts.p99_len)
    put("avg_prompt_len", opts.avg_prompt_len)
    bpt = kv["bytes_per_token"]
    put("kv_gib_at_p99", (opts.p99_len * bpt / GIB) if bpt else None)
    missing = set(NAMES) - set(v)
    assert not missing, f"context misses documented names: {sorted(missing)}"
    return v, prov


def version_cmp(version: str | None, other: str) -> int | None:
    """-1/0/1 comparing a logged version with ``other`` on (major, minor, patch); None if unknown."""
    a, b = parse_version(version), parse_version(other)
    if a is None or b is None:
        return None
    a3 = a + (0,) * (3 - len(a))
    b3 = b + (0,) * (3 - len(b))
    return (a3 > b3) - (a3 < b3)
