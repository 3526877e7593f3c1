"""The flat namespace rule conditions and messages are evaluated against.

`NAMES` documents every name a rule may use (unknown names are load errors); `build_context`
fills them from the facts, the derived analysis and the user's options, and records for each
name the log line it came from (provenance), so a finding can cite its evidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kvlogdiag.derive.figures import as_int, dig_additional, parse_version
from kvlogdiag.extract.facts import Fact, LogFacts

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

# --- names for KVD001-KVD009
NAMES.update({
    "arch_is_hybrid": "the model (built-in catalogue) mixes full attention with sliding-window/compressed/SSM layers; null when not in the catalogue",
    "hma_on_bpt_expected": "catalogue: per-rank KV bytes per context token with the hybrid KV cache manager ON (full/compressed layers only; SWA layers cost a fixed per-request window); null if unknown",
    "hma_off_bpt_expected": "catalogue: per-rank KV bytes per context token with the hybrid KV cache manager OFF (every layer full length); null if unknown",
    "retention_error_value": "retention interval quoted in vLLM's 'must be ... a multiple of scheduler_block_size' error",
    "retention_error_block": "scheduler_block_size quoted in that error (lcm of the KV-cache group block sizes)",
    "long_prefill_threshold_logged": "long_prefill_token_threshold as resolved by vLLM ('Concurrent partial prefills enabled ...' line)",
    "launch_args_logged": "the launch arguments are in the log (non-default args, Namespace or the pasted command): options absent there were not set",
    "activation_peak_gib": "largest peak-activation figure of the memory profile (GiB, per rank)",
})

# --- names for KVD010-KVD018
_NAMES_KVD010_018: dict[str, str] = {
    # memory breakdown (KVD010)
    "kv_gib_min": "smallest KV memory figure of any kind, GiB: Available KV cache memory, V0 profile, vLLM-Ascend bytes, CPU budget",
    "mem_weights_gib": "largest model-weights figure per rank, GiB ('Model loading took', V0 'model weights take', K10)",
    "mem_non_torch_gib": "largest non-torch memory figure per rank, GiB (memory-profiling lines), when logged",
    "mem_cuda_graph_gib": "CUDA graph memory per rank, GiB: captured figure, else vLLM's estimate (>=0.19), when logged",
    "mem_total_gib": "device memory per rank, GiB (memory-profiling lines or the startup free-memory error)",
    "mem_budget_gib": "total x gpu_memory_utilization per rank, GiB: as logged, else computed from mem_total_gib",
    "mem_breakdown": "what was logged of the non-KV memory per rank, as text: weights, activation peak, non-torch, CUDA graphs (null when none)",
    "start_free_gib": "free device memory at startup, GiB, from 'Free memory on device ... is less than desired GPU memory utilization'",
    "start_total_gib": "device memory, GiB, from that error",
    "start_desired_gib": "total x gpu_memory_utilization, GiB, from that error",
    # bytes per token vs the model catalogue (KVD011)
    "bpt_measured": "measured per-rank bytes per token compared with the catalogue (bytes_per_token, x cp size when vLLM multiplied N by it)",
    "expected_bytes_per_token": "catalogue: the Z*2^30/N figure this log should show (ExpectedKV.log_figure); null when the model is not in the catalogue or the figure cannot be predicted",
    "bpt_ratio": "bpt_measured / expected_bytes_per_token",
    "bpt_mismatch_cause": "first likely cause from architecture.explain_mismatch (text)",
    "bpt_expected_model": "catalogue entry the logged model name matched",
    "speculative_decoding": "a speculative_config (draft model, EAGLE, MTP, n-gram) is in the launch args or engine config",
    "bpt_expected_assumed": "the catalogue figure had to assume max_num_batched_tokens (sliding-window reservation of a hybrid model): it is only an estimate",
    "bpt_expected_verified": "false when the catalogue figure rests on unverified config facts or estimates",
    # runtime (KVD012, KVD013)
    "v0_preemption_total": "V0: total_num_cumulative_preemption of the last preemption warning (the warning prints once per 50 preemptions)",
    "stats_preemption_lines": "V1 stats lines with Preemptions > 0",
    "stats_interval_s": "seconds between stats lines: VLLM_LOG_STATS_INTERVAL when logged, else 5 (V0 and V1 < 0.9) or 10",
    "stats_engines": "number of distinct 'Engine NNN' ids in stats lines (DP engines), null when none",
    "kv_usage_high_last_line": "line of the last stats line with KV usage >= 90 %",
    "kv_tokens_per_engine": "KV tokens of one engine (DP group): tokens_per_dp_group, else V0 '# GPU blocks' × block_size",
    "kv_capacity_text": "KV capacity as text: 'T tokens = C× max-length (L-token) requests' with what is logged, ' per engine (DP group)' when DP > 1; null when neither figure is logged",
    # block pool (KVD016)
    "kv_alloc_fail_blocks": "blocks requested in the first 'Cannot get N free blocks from the pool' error",
    "ignored_prompt_tokens": "largest prompt V0 ignored because it 'exceeds the capacity of block_manager'",
    # log completeness (KVD017)
    "kv_size_logged": "a KV size figure is in the log: 'GPU KV cache size', '# GPU blocks' or 'Maximum concurrency'",
    "missing_startup_facts": "startup facts absent from the log: vLLM version, launch args/engine config, KV memory line, KV size line",
    "kv_error_logged": "a KV-sizing error that other rules explain: insufficient KV, no memory, utilization too high at start, auto-fit or memory-profiling failure",
    "runtime_evidence": "the log has runtime lines (stats, preemptions, block-pool errors)",
    # rank agreement (KVD018)
    "rank_kv_spread_pct": "largest spread of per-rank KV memory (Available, V0 profile, Ascend bytes) within one group (run, DP group, PP stage when known), % of the smallest",
    "rank_kv_spread_detail": "the smallest and largest figure of that group, with ranks and lines",
    "rank_kv_lost_tokens": "KV tokens the group loses because every rank gets the smallest rank's pool: (largest - smallest GiB) x 2^30 / bytes_per_token",
    "rank_kv_spread_stage_known": "that group is one PP stage for sure (PP = 1, or PP stage in every rank prefix)",
    "dp_kv_spread_pct": "spread across the DP groups of one run of their KV memory (smallest per group) or KV tokens, % of the smallest",
    "dp_kv_spread_detail": "the smallest and largest DP group figure, with lines",
    "run_bpt_spread_pct": "largest spread of bytes per token across the pairings of one run, % of the smallest",
    "run_bpt_spread_detail": "the smallest and largest bytes-per-token pairing of that run, with ranks and lines",
}
NAMES.update(_NAMES_KVD010_018)

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
    rse = dig_additional(ac, "recompute_scheduler_enable")
    if rse is None:
        f = (facts.config.get("ascend_config.recompute_scheduler_enable") or [None])[0]
        if f is not None:
            rse, prov["recompute_scheduler_enable"] = f.value, f
    put("recompute_scheduler_enable", rse if isinstance(rse, bool) else None, prov.get("recompute_scheduler_enable") or chosen.get("additional_config"))

    # retention interval: the CLI flag beats the env var (vLLM >= 0.29 reads the flag first)
    ri, rsrc, rfact = None, None, None
    fl = chosen.get("prefix_cache_retention_interval")
    if fl is not None and as_int(fl.value) is not None:
        ri, rsrc, rfact = as_int(fl.value), "flag", fl
    elif "VLLM_PREFIX_CACHE_RETENTION_INTERVAL" in facts.env:
        ef = facts.env["VLLM_PREFIX_CACHE_RETENTION_INTERVAL"]
        ri, rsrc, rfact = as_int(ef.value), "env", ef
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
        if total_b is None and as_int(ex.get("cpu_bytes_to_use")) is not None:
            total_b = as_int(ex.get("cpu_bytes_to_use"))
        if per_rank_b is None and as_int(ex.get("cpu_bytes_to_use_per_rank")) is not None:
            per_rank_b = as_int(ex.get("cpu_bytes_to_use_per_rank"))
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
    # --- names for KVD001-KVD009
    arch_h = on_b = off_b = None
    if model:
        try:
            from kvlogdiag.derive.architecture import expected_kv, lookup_model
            arch = lookup_model(model)
            if arch is not None:
                arch_h = bool(arch.is_hybrid)
                e = expected_kv(arch, tp=tp, pp=pp, kv_cache_dtype=str(cfg["kv_cache_dtype"] or "auto"),
                                hma_enabled=True, max_model_len=cfg["max_model_len"],
                                max_num_batched_tokens=cfg["max_num_batched_tokens"], block_size=cfg["block_size"],
                                vllm_version=analysis["vllm"]["version"], platform=analysis["vllm"]["platform"] or "cuda")
                on_b, off_b = e.bytes_per_token, e.hma_off_bytes_per_token
        except Exception:  # noqa: BLE001 - a catalogue problem must not stop the other rules
            arch_h = on_b = off_b = None
    put("arch_is_hybrid", arch_h)
    put("hma_on_bpt_expected", on_b if arch_h else None)
    put("hma_off_bpt_expected", off_b if arch_h else None)
    rnm = (facts.events.get("retention_not_multiple") or [None])[0]
    put("retention_error_value", rnm.value[0] if rnm else None, rnm)
    put("retention_error_block", rnm.value[1] if rnm else None, rnm)
    lpt = [f for f in facts.config.get("long_prefill_token_threshold", []) if f.source == "partial_prefill_line"]
    put("long_prefill_threshold_logged", as_int(lpt[-1].value) if lpt else None, lpt[-1] if lpt else None)
    put("launch_args_logged", any(f.source in ("non_default_args", "args_namespace", "user_command")
                                  for lst in facts.config.values() for f in lst))
    act = facts.memory.get("activation_peak_gib") or []
    put("activation_peak_gib", max((f.value for f in act), default=None),
        max(act, key=lambda f: f.value) if act else None)
    # --- names for KVD010-KVD018
    try:
        _names_kvd010_018(facts, analysis, v, prov)
    except Exception:  # noqa: BLE001 - odd facts must not stop the other rules: those names stay null
        for n in _NAMES_KVD010_018:
            v.setdefault(n, None)
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


# --- names for KVD010-KVD018 (filled by build_context) ------------------------------------------

_PP_STAGE = re.compile(r"(?:^|[_ (])PP(\d+)")
_CUM_PREEMPT = re.compile(r"total_num_cumulative_preemption=(\d+)")


def _pp_stage(rank: str | None) -> int | None:
    m = _PP_STAGE.search(rank or "")
    return int(m.group(1)) if m else None


def _where(f: Fact | None) -> str:
    if f is None:
        return ""
    return f" ({f.rank + ', ' if f.rank else ''}line {f.line})"


def _spread_detail(items: list[tuple[float, Any]], unit: str, fmt: str) -> tuple[float | None, str | None]:
    """(spread % of the smallest, 'lo unit (where) vs hi unit (where)'); items are (value, Fact or text)."""
    vals = [(x, f) for x, f in items if isinstance(x, (int, float)) and x > 0]
    if len(vals) < 2:
        return None, None
    lo = min(vals, key=lambda t: t[0])
    hi = max(vals, key=lambda t: t[0])
    pct = (hi[0] - lo[0]) / lo[0] * 100.0

    def where(f: Any) -> str:
        return f" ({f})" if isinstance(f, str) else _where(f)

    return pct, f"{format(lo[0], fmt)} {unit}{where(lo[1])} vs {format(hi[0], fmt)} {unit}{where(hi[1])}"


def _names_kvd010_018(facts: LogFacts, analysis: dict, v: dict[str, Any], prov: dict[str, Fact]) -> None:
    """Names used by rules KVD010-KVD018 (see NAMES). Never raises for odd logs: unknown → null."""

    def put(name: str, value: Any, fact: Fact | None = None) -> None:
        v[name] = value
        if fact is not None:
            prov[name] = fact

    mem = facts.memory

    def mem_max(key: str) -> tuple[float | None, Fact | None]:
        lst = [f for f in mem.get(key) or [] if isinstance(f.value, (int, float))]
        if not lst:
            return None, None
        f = max(lst, key=lambda x: x.value)
        return f.value, f

    # -- KVD010: memory figures and breakdown
    kv_figs = [(f.value, f) for f in facts.available] + [(f.value[1], f) for f in facts.kv_budget]
    lo = min(kv_figs, key=lambda t: t[0]) if kv_figs else None
    put("kv_gib_min", lo[0] if lo else None, lo[1] if lo else None)
    w, wf = mem_max("weights_gib")
    put("mem_weights_gib", w, wf)
    nt, ntf = mem_max("non_torch_gib")
    put("mem_non_torch_gib", nt, ntf)
    g, gf = mem_max("cuda_graph_gib")
    if g is None:
        g, gf = mem_max("cuda_graph_estimate_gib")
    put("mem_cuda_graph_gib", g, gf)
    uth = (facts.events.get("util_too_high_start") or [None])[0]
    uv = uth.value if uth is not None and isinstance(uth.value, dict) else {}
    put("start_free_gib", uv.get("free_gib"), uth)
    put("start_total_gib", uv.get("total_gib"), uth)
    put("start_desired_gib", uv.get("desired_gib"), uth)
    total, tf = mem_max("total_gib")
    if total is None and uv.get("total_gib") is not None:
        total, tf = uv.get("total_gib"), uth
    put("mem_total_gib", total, tf)
    budget, bf = mem_max("budget_gib")
    if budget is None and uv.get("desired_gib") is not None:
        budget, bf = uv.get("desired_gib"), uth
    util = v.get("gpu_memory_utilization")
    if budget is None and total is not None and isinstance(util, (int, float)) and not isinstance(util, bool):
        budget = total * util
    put("mem_budget_gib", budget, bf)
    act, _ = mem_max("activation_peak_gib")
    parts = [f"{label} {x:.2f} GiB" for label, x in (("weights", w), ("activation peak", act),
                                                      ("non-torch", nt), ("CUDA graphs", g)) if x is not None]
    put("mem_breakdown", ", ".join(parts) or None, wf)

    # -- KVD011: measured vs catalogue bytes per token
    exp_fig = ratio = cause = exp_model = exp_verified = measured = exp_assumed = None
    try:
        measured = v.get("bytes_per_token")
        cp = (facts.events.get("cp_multiply") or [None])[0]
        if measured is not None and cp is not None and isinstance(cp.value, int) and cp.value > 1:
            measured = measured * cp.value
        conflicts = analysis["config"].get("conflicts") or {}
        relevant = {"model", "tensor_parallel_size", "pipeline_parallel_size", "kv_cache_dtype", "max_model_len", "block_size"}
        if measured and measured > 0 and v.get("model") and not (relevant & set(conflicts)):
            from kvlogdiag.derive.architecture import expected_kv, explain_mismatch, lookup_model
            arch = lookup_model(v["model"])
            if arch is not None:
                kvd = v.get("kv_cache_dtype") or ("fp8" if facts.event_count("fp8_kv_cache") else "auto")
                hd = v.get("hma_disabled")
                e = expected_kv(arch, tp=int(v.get("tp") or 1), pp=int(v.get("pp") or 1), kv_cache_dtype=str(kvd),
                                hma_enabled=None if hd is None else not hd, max_model_len=v.get("max_model_len"),
                                max_num_batched_tokens=v.get("max_num_batched_tokens"), block_size=v.get("block_size"),
                                vllm_version=v.get("vllm_version"), platform=v.get("platform") or "cuda")
                exp_model, exp_verified = arch.name, bool(e.verified)
                exp_assumed = any("max_num_batched_tokens unknown" in a for a in e.assumptions)
                if e.log_figure and e.log_figure > 0:
                    exp_fig = float(e.log_figure)
                    ratio = measured / exp_fig
                    causes = explain_mismatch(measured, e)
                    cause = causes[0] if causes else None
                    if cause and cause.startswith("measured ") and "(ratio " in cause:
                        # drop explain_mismatch's "measured X vs expected Y (ratio r)" prefix: the rule prints the figures
                        cause = cause.split(")", 1)[1].lstrip(" :") or cause
                        cause = re.sub(r"^≈ [^:]*: ", "", cause)
    except Exception:  # noqa: BLE001 - a catalogue problem must never break the analysis
        exp_fig = ratio = cause = exp_model = exp_verified = exp_assumed = None
    spec = [f for f in facts.config.get("speculative_config") or []
            if f.value not in (None, "None", "", {}) and not (isinstance(f.value, str) and f.value.strip() in ("None", "{}"))]
    put("speculative_decoding", bool(spec), spec[0] if spec else None)
    put("bpt_measured", measured, prov.get("bytes_per_token"))
    put("expected_bytes_per_token", exp_fig)
    put("bpt_ratio", ratio, prov.get("bytes_per_token"))
    put("bpt_mismatch_cause", cause)
    put("bpt_expected_model", exp_model)
    put("bpt_expected_verified", exp_verified)
    put("bpt_expected_assumed", exp_assumed)

    # -- KVD012 / KVD013: runtime
    warned = facts.preemption_warnings
    totals = [(int(m.group(1)), f) for f in warned for m in [_CUM_PREEMPT.search(f.raw)] if m]
    total_p, total_f = (max(totals, key=lambda t: t[0]) if totals else (None, None))
    if total_p is not None and facts.preemption_warning_count > len(warned):
        total_p += 50 * (facts.preemption_warning_count - len(warned))  # lines past the kept evidence
    put("v0_preemption_total", total_p, total_f)
    st = facts.stats
    put("stats_preemption_lines", st.preemption_lines, st.preemption_first)
    interval = None
    env = facts.env.get("VLLM_LOG_STATS_INTERVAL")
    if env is not None:
        try:
            interval = float(env.value)
            interval = interval if interval > 0 else 10.0
        except (TypeError, ValueError):
            interval = None
    if interval is None:
        ver = parse_version(v.get("vllm_version"))
        interval = 5.0 if v.get("engine") == "v0" or (ver is not None and ver < (0, 9)) else 10.0
    put("stats_interval_s", interval, env)
    put("stats_engines", len(st.engines) or None)
    put("kv_usage_high_last_line", st.kv_usage_high_last_line)
    conc = [f for f in facts.concurrency if isinstance(f.value, tuple) and len(f.value) == 2]
    cmin = min(conc, key=lambda f: f.value[1]) if conc else None
    tpg = v.get("tokens_per_dp_group")
    bs = v.get("block_size")
    if tpg is None and facts.blocks and isinstance(bs, int) and bs > 0:
        tpg = min(f.value for f in facts.blocks) * bs
    put("kv_tokens_per_engine", tpg, prov.get("tokens_min") or (min(facts.blocks, key=lambda f: f.value) if facts.blocks else None))
    cap = []
    if isinstance(tpg, (int, float)) and tpg > 0:
        cap.append(f"{tpg:,.0f} tokens")
    if cmin is not None:
        cap.append(f"{cmin.value[1]:g}× max-length ({cmin.value[0]:,}-token) requests")
    elif cap and isinstance(v.get("max_model_len"), int) and v["max_model_len"] > 0:
        cap.append(f"{tpg / v['max_model_len']:.2f}× max-length ({v['max_model_len']:,}-token) requests")
    cap_text = " = ".join(cap) or None
    if cap_text and (v.get("dp") or 1) > 1:
        cap_text += " per engine (DP group)"
    put("kv_capacity_text", cap_text, cmin)

    # -- KVD016: block pool
    bp = (facts.events.get("block_pool_no_free") or [None])[0]
    put("kv_alloc_fail_blocks", bp.value if bp is not None else None, bp)
    pe = facts.events.get("prompt_exceeds_kv_capacity") or []
    pe_max = max((f for f in pe if isinstance(f.value, int)), key=lambda f: f.value, default=None)
    put("ignored_prompt_tokens", pe_max.value if pe_max else None, pe_max)

    # -- KVD017: what the log lacks
    size_logged = bool(facts.tokens or facts.blocks or facts.concurrency)
    put("kv_size_logged", size_logged, (facts.tokens or facts.blocks or facts.concurrency or [None])[0])
    config_logged = any(f.source in ("non_default_args", "args_namespace", "engine_config", "user_command")
                        for lst in facts.config.values() for f in lst)
    missing = []
    if not v.get("vllm_version"):
        missing.append("vLLM version")
    if not config_logged:
        missing.append("launch args / engine config")
    if not (facts.available or facts.kv_budget):
        missing.append("KV memory line ('Available KV cache memory')")
    if not size_logged:
        missing.append("KV size line ('GPU KV cache size' / '# GPU blocks')")
    put("missing_startup_facts", missing)
    put("kv_error_logged", bool(facts.insufficient_kv) or any(
        facts.event_count(n) for n in ("no_available_memory", "util_too_high_start", "auto_fit_failed",
                                       "memory_profiling_error", "cpu_worker_over_budget"))
        or any(f.value <= 0 for f in facts.available))
    put("runtime_evidence", bool(st.lines or facts.preemption_warning_count or facts.recompute_preemptions
                                 or facts.event_count("block_exhaustion") or facts.event_count("block_pool_no_free")
                                 or facts.event_count("prompt_exceeds_kv_capacity")))

    # -- KVD018: ranks and DP groups that should agree
    pp = v.get("pp") or 1
    groups: dict[tuple, list[tuple[float, Fact]]] = {}
    for f in facts.available:
        groups.setdefault((f.run, f.dp, _pp_stage(f.rank), "available"), []).append((f.value, f))
    for f in facts.kv_budget:
        if f.value[0] in ("v0_profile", "ascend_bytes"):
            groups.setdefault((f.run, f.dp, _pp_stage(f.rank), f.value[0]), []).append((f.value[1], f))
    best: tuple[float, str, bool, float] | None = None
    for key, items in groups.items():
        pct, detail = _spread_detail(items, "GiB", ".2f")
        if pct is not None and (best is None or pct > best[0]):
            stage_known = pp == 1 or all(_pp_stage(f.rank) is not None for _, f in items)
            vals = [x for x, _ in items if x > 0]
            best = (pct, detail, stage_known, max(vals) - min(vals))
    put("rank_kv_spread_pct", best[0] if best else None)
    put("rank_kv_spread_detail", best[1] if best else None)
    put("rank_kv_spread_stage_known", best[2] if best else None)
    bpt_now = v.get("bytes_per_token")
    put("rank_kv_lost_tokens", best[3] * GIB / bpt_now if best and bpt_now else None)
    dp_best: tuple[float, str] | None = None
    by_run: dict[int, dict[int, list[tuple[float, Fact]]]] = {}
    for (run, dp, _stage, kind), items in groups.items():
        by_run.setdefault(run, {}).setdefault(dp, []).extend(items)
    tok_run: dict[int, dict[int, list[tuple[float, Fact]]]] = {}
    for f in facts.tokens:
        tok_run.setdefault(f.run, {}).setdefault(f.dp, []).append((f.value, f))
    for source, unit, fmt in ((by_run, "GiB", ".2f"), (tok_run, "tokens", ",.0f")):
        for run, per_dp in source.items():
            if len(per_dp) < 2:
                continue
            mins = [min(items, key=lambda t: t[0]) for items in per_dp.values()]
            pct, detail = _spread_detail(mins, unit, fmt)
            if pct is not None and (dp_best is None or pct > dp_best[0]):
                dp_best = (pct, detail)
    put("dp_kv_spread_pct", dp_best[0] if dp_best else None)
    put("dp_kv_spread_detail", dp_best[1] if dp_best else None)
    bpt_best: tuple[float, str] | None = None
    pairs = analysis["kv_cache"].get("bytes_per_token_by_rank") or []
    runs: dict[int, list[tuple[float, Fact | None]]] = {}
    for p in pairs:
        if p.get("bytes_per_token"):
            label = (f"{p['rank']}, " if p.get("rank") else "") + f"lines {p.get('memory_line')}/{p.get('tokens_line')}"
            runs.setdefault(p.get("run", 0), []).append((p["bytes_per_token"], label))
    for items in runs.values():
        pct, detail = _spread_detail(items, "B/token", ",.0f")
        if pct is not None and (bpt_best is None or pct > bpt_best[0]):
            bpt_best = (pct, detail)
    put("run_bpt_spread_pct", bpt_best[0] if bpt_best else None)
    put("run_bpt_spread_detail", bpt_best[1] if bpt_best else None)
