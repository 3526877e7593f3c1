"""The namespace rule conditions and messages are evaluated against.

Two layers:

* the generic context (this module): names any rule may use, independent of any one rule — identity,
  configuration, KV and memory figures, runtime aggregates, user options. `NAMES` documents them
  (unknown names are load errors); `build_context` fills them from the facts and the derived analysis
  and records for each name the log line it came from (provenance), so a finding can cite its evidence.
* providers: a built-in rule whose figure the condition language cannot compute has a Python file next
  to its TOML (``rules/builtin/KVD011-bytes-per-token-mismatch.py``) that adds names to *that rule's*
  namespace only. Its thresholds and wording stay in the TOML. Providers exist for built-in rules only:
  a ``--rules DIR`` folder is data and is never imported.

Nothing here turns an error into a silent null: a generic section that fails leaves its names in
`Context.failed`, and the engine reports every rule that uses one of them as a rule error; a provider
that raises is a rule error of its rule.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
from array import array
from dataclasses import FrozenInstanceError, dataclass, field
from functools import lru_cache
from types import ModuleType
from typing import Any, Callable, Iterable, Iterator, Mapping

from kvlogdiag import pkgdata, recache
from kvlogdiag.derive.architecture import KIND_DSV4, KIND_MLA_SPARSE, expected_kv, lookup_model
from kvlogdiag.derive.figures import as_int, dig_additional, parse_version
from kvlogdiag.derive.pairings import ValueView, group_at, value_at
from kvlogdiag.errors import KvlogdiagError
from kvlogdiag.extract.facts import Fact, LogFacts

GIB = 1 << 30
#: the P99 request length the rules assume when neither --p99-len nor the config's p99-len is given
DEFAULT_P99_LEN = 32768
#: measured vs architecture bytes per token: a hybrid model's >= 0.21 log figure includes the window
#: reservation amortised over max_model_len, so agreement within this share confirms the catalogue
_HYBRID_CONFIRM = 0.25

SECTIONS: dict[str, dict[str, str]] = {
    "identity": {
        "vllm_version": "vLLM version string as logged",
        "engine": "'v0' or 'v1'",
        "platform": "cuda | rocm | npu | cpu | xpu | tpu | hpu",
        "is_ascend": "true on vLLM-Ascend (platform npu)",
        "model": "model name or path as logged",
        "is_deepseek_v4": "model name looks like DeepSeek-V4",
        "is_ssm_hybrid": "model name looks like a Mamba/SSM hybrid (Jamba, Bamba, Nemotron-H, Granite-4, Qwen3-Next, Falcon-H1)",
        "is_sliding_window_model": "model name looks like a model with sliding-window layers (Gemma 2/3/4, gpt-oss, Mistral v0.1, Cohere2, Llama-4)",
        "arch_is_hybrid": "the model (built-in catalogue) mixes full attention with sliding-window/compressed/SSM layers; null when not in the catalogue",
        "arch_family": "the model's family in the built-in catalogue ('llama', 'deepseek-mla', 'deepseek-v4', ...); null when not in the catalogue",
        "kv_latent_replicated": "MLA / DeepSeek-V4 model (catalogue family, else the name): its KV latent is not split by TP, every TP rank holds all of it (docs/vllm-behaviour.md section 6)",
        "kv_dtype_follows_model": "vLLM-Ascend with a model that has index_topk (DeepSeek-V3.2/V4): the platform sets the KV cache dtype to the model dtype, so --kv-cache-dtype fp8 does not apply (docs/vllm-behaviour.md section 6)",
        "launch_args_logged": "the launch arguments are in the log (non-default args, Namespace or the pasted command): options absent there were not set",
    },
    "config": {
        "tensor_parallel_size": "TP size", "pipeline_parallel_size": "PP size", "data_parallel_size": "DP size",
        "tp": "TP size, 1 when not logged", "pp": "PP size, 1 when not logged", "dp": "DP size, 1 when not logged",
        "world_size": "tp × pp × dp",
        "kv_levers": "text: the levers that add KV per rank for THIS model on THIS platform (fp8 KV unless already fp8 or forced to the model dtype; higher TP unless the latent is replicated, then PP)",
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
        "long_prefill_threshold_logged": "long_prefill_token_threshold as resolved by vLLM ('Concurrent partial prefills enabled ...' line)",
        "enable_prefix_caching": "prefix caching on/off as logged",
        "enable_chunked_prefill": "chunked prefill on/off as logged",
        "speculative_decoding": "a speculative_config (draft model, EAGLE, MTP, n-gram) is in the launch args or engine config",
        "hma_disabled": "hybrid KV cache manager off (flag or vLLM's warning)",
        "hma_disabled_flag": "true when --disable-hybrid-kv-cache-manager was given explicitly",
        "hma_off_cause": "why HMA is off: 'flag', 'connector', 'chunked_local_attention', 'model' or null ('explicitly enabled but is not supported' is a start-up ValueError, not HMA off: hma_enable_refused)",
        "hma_enable_refused": "vLLM refused to start: 'Hybrid KV cache manager was explicitly enabled but is not supported in this configuration' (a ValueError in VllmConfig, docs/vllm-behaviour.md section 5)",
        "swa_full_length": "vLLM >= 0.27 'KV cache page sizes cannot be unified; treating sliding-window layers as full attention': sliding-window layers keep full-length KV although HMA is on (docs/vllm-behaviour.md section 5)",
        "kv_connector": "top-level KV connector name",
        "kv_connectors": "all KV connector names (MultiConnector children included)",
        "kv_role": "kv_producer | kv_consumer | kv_both (top level: the one vLLM and vLLM-Ascend's scheduler read)",
        "kv_connector_roles": "each connector with its own kv_role, 'Name=role' (MultiConnector children carry their own; 'Name=' when a child sets none)",
        "rco_kv_role": "kv_role of the RecomputeCPUOffloadConnector entry itself (the MultiConnector child's own, null when the child sets none; the top level's when it is the top-level connector); null without that connector",
        "node_role": "prefill | decode | mixed (from --role, else from kv_role)",
        "recompute_scheduler_enable": "vLLM-Ascend additional_config recompute_scheduler_enable (top level or scheduler_config)",
        "retention_interval": "prefix-cache retention interval (env VLLM_PREFIX_CACHE_RETENTION_INTERVAL or --prefix-cache-retention-interval)",
        "retention_source": "'env' or 'flag'",
        "retention_error_value": "retention interval quoted in vLLM's 'must be ... a multiple of scheduler_block_size' error",
        "retention_error_block": "scheduler_block_size quoted in that error (lcm of the KV-cache group block sizes)",
        "offload_cpu_bytes_total": "offload connector cpu_bytes_to_use (global) from kv_connector_extra_config",
        "offload_cpu_bytes_per_rank": "cpu_bytes_to_use_per_rank from kv_connector_extra_config",
        "offload_per_rank_gb_logged": "per_rank GB printed by RecomputeCPUOffloadConnector",
        "offload_world_size_logged": "world_size printed by RecomputeCPUOffloadConnector",
        "kv_offloading_size": "--kv-offloading-size (GiB)",
    },
    "KV and memory figures": {
        "kv_sized": "the log reached KV cache sizing (a memory figure, token count or KV error)",
        "kv_size_logged": "a KV size figure is in the log: 'GPU KV cache size', '# GPU blocks' or 'Maximum concurrency'",
        "available_gib_min": "smallest 'Available KV cache memory' (GiB) of the run",
        "available_gib_max": "largest 'Available KV cache memory' (GiB)",
        "kv_budget_gib_min": "smallest other KV budget figure (V0 profile, Ascend bytes, CPU backend)",
        "kv_gib_min": "smallest KV memory figure of any kind, GiB: Available KV cache memory, V0 profile, vLLM-Ascend bytes, CPU budget",
        "tokens_min": "smallest KV cache size in tokens",
        "tokens_per_dp_group": "KV tokens of one DP group (smallest)",
        "kv_tokens_per_engine": "KV tokens of one engine (DP group): tokens_per_dp_group, else V0 '# GPU blocks' × block_size",
        "kv_capacity_text": "KV capacity as text: 'T tokens = C× max-length (L-token) requests' with what is logged, ' per engine (DP group)' when DP > 1; null when neither figure is logged",
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
        "kv_alloc_fail_blocks": "blocks requested in the first 'Cannot get N free blocks from the pool' error",
        "ignored_prompt_tokens": "largest prompt V0 ignored because it 'exceeds the capacity of block_manager'",
        "activation_peak_gib": "largest peak-activation figure of the memory profile (GiB, per rank)",
        "mem_weights_gib": "largest model-weights figure per rank, GiB ('Model loading took', V0 'model weights take', K10)",
        "mem_non_torch_gib": "largest non-torch memory figure per rank, GiB (memory-profiling lines), when logged",
        "mem_cuda_graph_gib": "CUDA graph memory per rank, GiB: captured figure, else vLLM's estimate (>=0.19), when logged",
        "mem_total_gib": "device memory per rank, GiB (memory-profiling lines or the startup free-memory error)",
        "mem_budget_gib": "total x gpu_memory_utilization per rank, GiB: as logged, else computed from mem_total_gib",
        "start_free_gib": "free device memory at startup, GiB, from 'Free memory on device ... is less than desired GPU memory utilization'",
        "start_total_gib": "device memory, GiB, from that error",
        "start_desired_gib": "total x gpu_memory_utilization, GiB, from that error",
        "startup_failed": "EngineCore failed to start",
        "startup_complete": "the server reached 'Application startup complete'",
        "engine_failed_line": "line of the engine start failure",
        "startup_verdict_failed": "the start-up root-cause tracker saw a failed start (a cause, echoes, a death or a cut traceback; see KVD019)",
        "startup_verdict_cause": "that tracker found the line stating why the start failed",
    },
    "runtime": {
        "stats_lines": "periodic stats lines",
        "stats_interval_s": "seconds between stats lines: VLLM_LOG_STATS_INTERVAL when logged, else 5 (V0 and V1 < 0.9) or 10",
        "stats_engines": "number of distinct 'Engine NNN' ids in stats lines (DP engines), null when none",
        "kv_usage_max": "highest KV cache usage % in stats lines (count lines above a threshold with kv_usage_lines_at_or_above(pct))",
        "preemption_warnings": "V0 preemption warning lines",
        "v0_preemption_total": "V0: the last total_num_cumulative_preemption each engine printed, summed (the warning prints once per 50 preemptions)",
        "stats_preemptions": "sum of V1 'Preemptions: P' in stats lines",
        "stats_preemption_lines": "V1 stats lines with Preemptions > 0",
        "recompute_preemptions": "vLLM-Ascend RecomputeScheduler 'Preempted request' lines",
        "running_max": "largest 'Running: N reqs' of the stats lines",
        "waiting_max": "largest 'Waiting: N reqs' (V0 'Pending') of the stats lines",
        "busy_lines": "stats lines with running or waiting requests",
        "single_running_lines": "stats lines with 'Running: 1 reqs' and requests waiting that are not 'Deferred' (from vLLM 0.20 'Waiting' counts the Deferred requests, blocked on remote KV, too: docs/vllm-behaviour.md §2)",
        "single_running_kv_usage_max": "highest KV cache usage % on those single-running lines (null when they print none)",
        "deferred_lines": "stats lines with 'Deferred: N reqs' > 0 (waiting requests blocked on remote KV, grammar or streamed input; vLLM >= 0.20)",
        "runtime_source": "where the runtime names above come from: 'log' (the stats lines) or 'metrics' (the engines of Prometheus /metrics scrapes, when the run's log has no stats lines: docs/metrics.md)",
        "stats_what": "what the runtime samples are, for messages: 'stats lines', or 'metrics samples' (one per engine and scrape)",
        "stats_each": "one runtime sample, for messages: 'line' or 'scrape'",
        "input_is_metrics": "the input is a saved Prometheus /metrics scrape, not a log (no start-up lines to expect)",
        "preemption_samples": "the samples stats_preemption_lines counts in: stats_lines, or the metrics samples when the preemptions come from the scrapes' counter (it saw more than the stats lines: vLLM 0.11.2-0.33.0 never prints their 'Preemptions:', docs/metrics.md)",
        "preemption_what": "what those samples are, for messages: 'stats lines' or 'metrics samples'",
    },
    "options": {
        "p99_len": "--p99-len (workload P99 request length, default 32768)",
        "p99_len_given": "true when the workload length was given (--p99-len or p99-len in kvlogdiag.toml); false when p99_len is the assumed 32768",
        "avg_prompt_len": "--avg-prompt-len or null",
        "start_skipped": "the reader skipped the start of the log on purpose (watch -f --from-end): start-up lines before that point were never read",
        "skipped_start_bytes": "bytes skipped at the start (watch -f --from-end), null when nothing was skipped",
        "kv_gib_at_p99": "KV one request of p99_len tokens needs on one rank (GiB): for a hybrid model of the catalogue whose figure the log confirms, the architecture's cost (full layers per token + min(window - 1 + chunk, length) tokens in each sliding-window layer, as `estimate`); else p99_len x bytes_per_token (or the error-implied figure); null for a hybrid model whose per-token cost the log does not confirm",
        "kv_p99_from_architecture": "kv_gib_at_p99 is the architecture's hybrid cost (per-token + sliding-window reservation), not p99_len x a measured figure",
        "kv_p99_hma_off": "that architecture figure is the HMA-off one (every layer full length): the log's figure matched it, not the HMA-on one",
    },
}
NAMES: dict[str, str] = {name: doc for section in SECTIONS.values() for name, doc in section.items()}

_DSV4 = recache.compile(r"deepseek[-_ ]?v4", re.I)
_INDEX_TOPK = recache.compile(r"deepseek[-_ ]?v3[._]?2|deepseek[-_ ]?v4", re.I)
_MLA = recache.compile(r"deepseek[-_ ]?(?:v2|v3|r1|v4)|kimi[-_ ]?k2", re.I)
_SSM = recache.compile(r"jamba|bamba|nemotron[-_]?h|granite[-_]?4|qwen3[-_]?next|falcon[-_]?h1|mamba|zamba|minimax", re.I)
_SWA = recache.compile(r"gemma[-_]?[234]|gpt[-_]?oss|mistral[-_]?7b[-_]?(?:instruct[-_]?)?v0\.1|cohere2|command[-_]?a|llama[-_]?4|phi[-_]?3[-_.]?(?:mini|small)", re.I)


@dataclass
class Options:
    """User options that reach the rules (from flags and kvlogdiag.toml)."""

    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    fail_on: str = "error"
    min_severity: str = "info"
    rule_dirs: list[str] = field(default_factory=list)
    role: str | None = None
    p99_len: int | None = None  # None: not given; the rules assume DEFAULT_P99_LEN and say so
    avg_prompt_len: int | None = None
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    strict_rules: bool = False
    #: set by ``watch -f --from-end``: bytes of the file before the first line read (None: nothing skipped)
    skipped_start_bytes: int | None = None


class Context:
    """The filled generic namespace: values, the line each came from, and the names that failed.

    A plain class (a dataclass costs ~0.5 ms to create at import; docs/performance.md "Session 8 (2)"): read by
    its attributes only, never compared, copied or pickled."""

    __slots__ = ("values", "prov", "failed")

    def __init__(self, values: dict[str, Any], prov: dict[str, Fact], failed: dict[str, str]) -> None:
        self.values = values
        self.prov = prov
        self.failed = failed  # name → why it could not be computed

    def guarded(self) -> Mapping[str, Any]:
        """The values for a provider: reading a name that failed raises `UpstreamFailed`."""
        return _Guarded(self.values, self.failed)


class UpstreamFailed(Exception):
    """A figure needs another one that failed to compute."""


class _Guarded(Mapping[str, Any]):
    def __init__(self, values: dict[str, Any], failed: dict[str, str]):
        self._values, self._failed = values, failed

    def __getitem__(self, name: str) -> Any:
        if name in self._failed:
            raise UpstreamFailed(f"needs {name}, which failed: {self._failed[name]}")
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


class _Builder:
    def __init__(self, facts: LogFacts, analysis: dict, opts: Options):
        self.facts, self.analysis, self.opts = facts, analysis, opts
        self.v: dict[str, Any] = {}
        self.prov: dict[str, Fact] = {}
        self.failed: dict[str, str] = {}
        self.arch: Any = None  # the catalogue's ModelArch of the logged model (identity section)

    def put(self, name: str, value: Any, fact: Fact | None = None) -> None:
        self.v[name] = value
        if fact is not None:
            self.prov[name] = fact

    def get(self, name: str) -> Any:
        if name in self.failed:
            raise UpstreamFailed(f"needs {name}, which failed: {self.failed[name]}")
        return self.v.get(name)


def _first(facts: list[Fact] | None) -> Fact | None:
    return facts[0] if facts else None


def _last(facts: list[Fact] | None) -> Fact | None:
    return facts[-1] if facts else None


def _min(values: Iterable[Any]) -> float | None:
    return min((v for v in values if v is not None), default=None)  # one pass, no list (issue 18, memory)


def _spread(values: Iterable[Any]) -> float | None:
    lo = hi = None
    n = 0
    for v in values:  # one pass, no list (issue 18, memory)
        if v is not None and v > 0:
            n += 1
            lo = v if lo is None or v < lo else lo
            hi = v if hi is None or v > hi else hi
    if n < 2 or lo is None or hi is None:
        return None
    return (hi - lo) / lo * 100.0


def _identity(b: _Builder) -> None:
    facts, analysis = b.facts, b.analysis
    chosen: dict[str, Fact] = analysis.get("_chosen", {})
    put = b.put
    put("vllm_version", analysis["vllm"]["version"], facts.version[0] if facts.version else None)
    put("engine", analysis["vllm"]["engine"])
    put("platform", analysis["vllm"]["platform"], facts.platform[0] if facts.platform else None)
    put("is_ascend", analysis["vllm"]["platform"] == "npu")
    model = analysis["config"]["model"]
    put("model", model, chosen.get("model"))
    put("is_deepseek_v4", bool(model and _DSV4.search(model)))
    put("is_ssm_hybrid", bool(model and _SSM.search(model)))
    put("is_sliding_window_model", bool(model and _SWA.search(model)))
    arch = lookup_model(model) if model else None
    b.arch = arch
    put("arch_is_hybrid", bool(arch.is_hybrid) if arch is not None else None)
    put("arch_family", arch.family if arch is not None else None)
    kinds = set(arch.kind_counts) if arch is not None else set()
    if arch is not None:
        latent = arch.family in ("deepseek-mla", "deepseek-v4")
        topk = bool(kinds & {KIND_MLA_SPARSE, KIND_DSV4})
    else:
        latent = bool(model and _MLA.search(model))
        topk = bool(model and _INDEX_TOPK.search(model))
    put("kv_latent_replicated", latent)
    put("kv_dtype_follows_model", bool(b.v["is_ascend"] and topk))
    put("launch_args_logged", any(f.source in ("non_default_args", "args_namespace", "user_command")
                                  for lst in facts.config.values() for f in lst))


def _kv_levers(b: _Builder) -> str:
    """The KV-per-rank levers that apply to this model on this platform, as one phrase."""
    levers = []
    dtype = str(b.get("kv_cache_dtype") or "").lower()
    arch = b.arch
    if arch is not None and arch.auto_kv_cache_dtype and dtype in ("", "auto") and not b.get("is_ascend"):
        dtype = arch.auto_kv_cache_dtype  # vLLM forces it for --kv-cache-dtype auto on CUDA (DeepSeek-V4: fp8_ds_mla)
    if not b.get("kv_dtype_follows_model") and "fp8" not in dtype and "int8" not in dtype:
        levers.append("--kv-cache-dtype fp8 (halves bytes per token)")
    if b.get("kv_latent_replicated"):
        levers.append("more PP stages, each holding only its layers (TP does not split an MLA/DeepSeek latent: every TP rank holds all of it)")
    else:
        levers.append("higher TP (splits the KV heads, up to their number)")
    levers.append("a smaller/quantized model or bigger devices")
    text = ", ".join(levers)
    if b.get("kv_dtype_follows_model"):
        text += " (not --kv-cache-dtype fp8: vLLM-Ascend stores this model's KV in the model dtype)"
    return text


def _config(b: _Builder) -> None:
    facts, analysis, opts, put = b.facts, b.analysis, b.opts, b.put
    chosen: dict[str, Fact] = analysis.get("_chosen", {})
    cfg = analysis["config"]
    prov = b.prov
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
    put("kv_levers", _kv_levers(b))
    eq = analysis["memory"].get("equivalent_utilization") or []
    put("equivalent_utilization", eq[-1] if eq else None, _last(facts.memory.get("equivalent_utilization")))
    lpt = [f for f in facts.config.get("long_prefill_token_threshold", []) if f.source == "partial_prefill_line"]
    put("long_prefill_threshold_logged", as_int(lpt[-1].value) if lpt else None, lpt[-1] if lpt else None)
    spec = [f for f in facts.config.get("speculative_config") or []
            if f.value not in (None, "None", "", {}) and not (isinstance(f.value, str) and f.value.strip() in ("None", "{}"))]
    put("speculative_decoding", bool(spec), spec[0] if spec else None)

    # hybrid KV cache manager
    flag_fact = chosen.get("disable_hybrid_kv_cache_manager")
    flag = flag_fact.value if flag_fact is not None and isinstance(flag_fact.value, bool) else None
    put("hma_disabled", cfg["disable_hybrid_kv_cache_manager"], flag_fact)
    put("hma_disabled_flag", flag is True, flag_fact)
    cause = None
    for ev, name in (("hma_auto_off", "connector"), ("hma_chunked_local", "chunked_local_attention"),
                     ("hma_disabled_hybrid_model", "model"),
                     ("hma_unify_failed", "model")):
        if facts.events.get(ev):
            if cause is None or cause == "model":
                cause = name
            prov.setdefault("hma_disabled", facts.events[ev][0])
    if flag is True:
        cause = "flag"
    put("hma_off_cause", cause)
    ref = _first(facts.events.get("hma_explicit_unsupported"))
    put("hma_enable_refused", ref is not None, ref)
    swf = _first(facts.events.get("hma_swa_full_fallback"))
    put("swa_full_length", swf is not None, swf)

    # KV transfer
    summ = analysis.get("kv_transfer") or {}
    put("kv_connector", summ.get("connector"), chosen.get("kv_transfer_config"))
    put("kv_connectors", summ.get("all_connectors") or [], chosen.get("kv_transfer_config"))
    put("kv_role", summ.get("kv_role"), chosen.get("kv_transfer_config"))
    ktc_raw = cfg.get("kv_transfer_config")
    roles: list[str] = []
    rco_role = None
    if isinstance(ktc_raw, dict):
        top = ktc_raw.get("kv_connector")
        if top:
            roles.append(f"{top}={ktc_raw.get('kv_role') or ''}")
        if top == "RecomputeCPUOffloadConnector":
            rco_role = ktc_raw.get("kv_role")
        ex = ktc_raw.get("kv_connector_extra_config")
        for c in (ex.get("connectors") or []) if isinstance(ex, dict) else []:
            if isinstance(c, dict) and c.get("kv_connector"):
                roles.append(f"{c['kv_connector']}={c.get('kv_role') or ''}")
                if c["kv_connector"] == "RecomputeCPUOffloadConnector" and rco_role is None:
                    rco_role = c.get("kv_role")
    put("kv_connector_roles", roles, chosen.get("kv_transfer_config"))
    put("rco_kv_role", rco_role, chosen.get("kv_transfer_config"))
    role = opts.role
    if role is None:
        role = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "mixed"}.get(summ.get("kv_role") or "")
    put("node_role", role)
    ac = cfg.get("additional_config")
    rse = dig_additional(ac, "recompute_scheduler_enable")
    if rse is None:
        f = _first(facts.config.get("ascend_config.recompute_scheduler_enable"))
        if f is not None:
            rse, prov["recompute_scheduler_enable"] = f.value, f
    put("recompute_scheduler_enable", rse if isinstance(rse, bool) else None,
        prov.get("recompute_scheduler_enable") or chosen.get("additional_config"))

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
    rnm = _first(facts.events.get("retention_not_multiple"))
    put("retention_error_value", rnm.value[0] if rnm else None, rnm)
    put("retention_error_block", rnm.value[1] if rnm else None, rnm)

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


def _kv(b: _Builder) -> None:
    facts, analysis, put, prov = b.facts, b.analysis, b.put, b.prov
    kv = analysis["kv_cache"]
    put("kv_sized", facts.kv_sized)
    put("kv_size_logged", bool(facts.tokens or facts.blocks or facts.concurrency),
        _first(facts.tokens or facts.blocks or facts.concurrency))
    avail = facts.available
    put("available_gib_min", _min(ValueView(avail)), min(avail, key=lambda f: f.value) if avail else None)
    put("available_gib_max", max((f.value for f in avail), default=None))
    put("kv_budget_gib_min", _min(v[1] for v in ValueView(facts.kv_budget)),
        min(facts.kv_budget, key=lambda f: f.value[1]) if facts.kv_budget else None)
    # a generator, not a list: one (value, Fact) at a time however many KV lines (issue 18, memory)
    kv_figs = itertools.chain(((f.value, f) for f in facts.available), ((f.value[1], f) for f in facts.kv_budget))
    lo = min(kv_figs, key=lambda t: t[0], default=None)
    put("kv_gib_min", lo[0] if lo else None, lo[1] if lo else None)
    toks = facts.tokens
    put("tokens_min", _min(ValueView(toks)), min(toks, key=lambda f: f.value) if toks else None)
    per_rank = kv["bytes_per_token_by_rank"]
    put("tokens_per_dp_group", _min(p["tokens"] for p in per_rank) if per_rank else b.v["tokens_min"])
    put("bytes_per_token", kv["bytes_per_token"], prov.get("tokens_min") or prov.get("available_gib_min"))
    put("bytes_per_token_kind", kv["bytes_per_token_kind"])
    known = getattr(per_rank, "known_bytes_per_token", None)
    put("bpt_spread_pct", _spread(known() if known else (p["bytes_per_token"] for p in per_rank)))
    groups: dict[tuple, list[int]] = {}
    for i in range(len(avail)):  # positions per (run, DP group), 8 bytes each, not the values
        groups.setdefault(group_at(avail, i), array("q")).append(i)  # type: ignore[arg-type]
    spreads = [s for s in (_spread(value_at(avail, i) for i in g) for g in groups.values()) if s is not None]
    put("available_spread_pct", max(spreads) if spreads else None)
    put("ranks_disagree", bool(kv["ranks_disagree"]))
    conc = facts.concurrency
    put("max_concurrency", _min([f.value[1] for f in conc]), min(conc, key=lambda f: f.value[1]) if conc else None)

    # capacity of one engine, and as text
    cconc = (f for f in conc if isinstance(f.value, tuple) and len(f.value) == 2)  # one at a time (issue 18, memory)
    cmin = min(cconc, key=lambda f: f.value[1], default=None)
    tpg = b.get("tokens_per_dp_group")
    bs = b.get("block_size")
    if tpg is None and facts.blocks and isinstance(bs, int) and bs > 0:
        tpg = min(f.value for f in facts.blocks) * bs
    put("kv_tokens_per_engine", tpg,
        prov.get("tokens_min") or (min(facts.blocks, key=lambda f: f.value) if facts.blocks else None))
    cap = []
    if isinstance(tpg, (int, float)) and tpg > 0:
        cap.append(f"{tpg:,.0f} tokens")
    mml = b.get("max_model_len")
    if cmin is not None:
        cap.append(f"{cmin.value[1]:g}× max-length ({cmin.value[0]:,}-token) requests")
    elif cap and isinstance(mml, int) and mml > 0:
        cap.append(f"{tpg / mml:.2f}× max-length ({mml:,}-token) requests")
    cap_text = " = ".join(cap) or None
    if cap_text and (b.get("dp") or 1) > 1:
        cap_text += " per engine (DP group)"
    put("kv_capacity_text", cap_text, cmin)

    # errors
    ik = facts.insufficient_kv[0] if facts.insufficient_kv else None
    put("insufficient_kv", ik is not None, ik)
    put("needed_gib", ik.value["needed_gib"] if ik else None, ik)
    put("error_available_gib", ik.value["available_gib"] if ik else None, ik)
    put("error_max_seq_len", ik.value["max_seq_len"] if ik else None, ik)
    put("estimated_max_len", ik.value["estimated_max_len"] if ik else None, ik)
    nam = facts.events.get("no_available_memory")
    put("no_available_memory", bool(nam), nam[0] if nam else None)
    neg = next((f for f in avail if f.value <= 0), None)  # the first: no list of them (issue 18, memory)
    put("available_negative", neg is not None, neg)
    bp = _first(facts.events.get("block_pool_no_free"))
    put("kv_alloc_fail_blocks", bp.value if bp is not None else None, bp)
    pe = facts.events.get("prompt_exceeds_kv_capacity") or []
    pe_max = max((f for f in pe if isinstance(f.value, int)), key=lambda f: f.value, default=None)
    put("ignored_prompt_tokens", pe_max.value if pe_max else None, pe_max)
    ef = facts.events.get("engine_failed")
    put("startup_failed", bool(ef), ef[0] if ef else None)
    put("engine_failed_line", ef[0].line if ef else None)
    sv = facts.startup or {}
    put("startup_verdict_failed", bool(sv.get("failed")))
    put("startup_verdict_cause", sv.get("cause_line") is not None)
    put("startup_complete", facts.startup_complete is not None, facts.startup_complete)

    # memory figures
    mem = facts.memory

    def mem_max(key: str) -> tuple[float | None, Fact | None]:
        lst = [f for f in mem.get(key) or [] if isinstance(f.value, (int, float))]
        if not lst:
            return None, None
        f = max(lst, key=lambda x: x.value)
        return f.value, f

    act = mem.get("activation_peak_gib") or []
    put("activation_peak_gib", max((f.value for f in act), default=None),
        max(act, key=lambda f: f.value) if act else None)
    w, wf = mem_max("weights_gib")
    put("mem_weights_gib", w, wf)
    nt, ntf = mem_max("non_torch_gib")
    put("mem_non_torch_gib", nt, ntf)
    g, gf = mem_max("cuda_graph_gib")
    if g is None:
        g, gf = mem_max("cuda_graph_estimate_gib")
    put("mem_cuda_graph_gib", g, gf)
    uth = _first(facts.events.get("util_too_high_start"))
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
    util = b.get("gpu_memory_utilization")
    if budget is None and total is not None and isinstance(util, (int, float)) and not isinstance(util, bool):
        budget = total * util
    put("mem_budget_gib", budget, bf)


def _runtime(b: _Builder) -> None:
    facts, put = b.facts, b.put
    st = facts.stats
    put("stats_lines", st.lines)
    put("kv_usage_max", st.kv_usage_max, st.kv_usage_max_fact)
    put("preemption_warnings", facts.preemption_warning_count,
        facts.preemption_warnings[0] if facts.preemption_warnings else None)
    total_p, total_f = st.v0_preemption_total()
    put("v0_preemption_total", total_p, total_f)
    put("stats_preemptions", st.preemptions_total, st.preemption_first)
    put("stats_preemption_lines", st.preemption_lines, st.preemption_first)
    put("recompute_preemptions", facts.recompute_preemptions, facts.recompute_first)
    put("running_max", st.running_max)
    put("waiting_max", st.waiting_max)
    put("busy_lines", st.busy_lines)
    put("single_running_lines", st.single_running_with_queue, st.single_running_first)
    put("single_running_kv_usage_max", st.single_running_kv_usage_max)
    put("deferred_lines", st.deferred_lines)
    put("stats_engines", len(st.engines) or None)
    from_metrics = facts.runtime_from == "metrics"
    put("runtime_source", ("metrics" if from_metrics else "log") if st.lines else None)
    put("stats_what", "metrics samples" if from_metrics else "stats lines")
    put("stats_each", "scrape" if from_metrics else "line")
    put("input_is_metrics", facts.metrics_input)
    pre_metrics = from_metrics or facts.preemptions_from == "metrics"
    put("preemption_samples", facts.metrics.lines if pre_metrics else st.lines)
    put("preemption_what", "metrics samples" if pre_metrics else "stats lines")
    if from_metrics:  # the poll interval of watch --metrics; unknown for a saved scrape
        put("stats_interval_s", (facts.metrics_info or {}).get("interval_s"))
        return
    interval = None
    env = facts.env.get("VLLM_LOG_STATS_INTERVAL")
    if env is not None:
        try:
            interval = float(env.value)
        except (TypeError, ValueError):  # not a number: vLLM would not start with it; use the default below
            interval = None
        else:
            interval = interval if interval > 0 else 10.0
    if interval is None:
        ver = parse_version(b.get("vllm_version"))
        interval = 5.0 if b.get("engine") == "v0" or (ver is not None and ver < (0, 9)) else 10.0
    put("stats_interval_s", interval, env)


def _options(b: _Builder) -> None:
    opts = b.opts
    given = opts.p99_len is not None
    p99: int = opts.p99_len if opts.p99_len is not None else DEFAULT_P99_LEN
    b.put("p99_len", p99)
    b.put("p99_len_given", given)
    b.put("avg_prompt_len", opts.avg_prompt_len)
    b.put("start_skipped", bool(opts.skipped_start_bytes))
    b.put("skipped_start_bytes", opts.skipped_start_bytes or None)
    bpt = b.get("bytes_per_token")
    needed, err_len = b.get("needed_gib"), b.get("error_max_seq_len")
    bpt_err = needed * GIB / err_len if needed and err_len else None
    arch_gib, arch_off = _hybrid_request_gib(b, p99, bpt or bpt_err)
    b.put("kv_p99_from_architecture", arch_gib is not None)
    b.put("kv_p99_hma_off", arch_off)
    if arch_gib is not None:
        b.put("kv_gib_at_p99", arch_gib)
    elif b.get("arch_is_hybrid") is True and (bpt or bpt_err):
        # the measured figure of a hybrid model is not a per-token cost (its window part does not
        # scale with length): without the catalogue's confirmation no P99 figure is given
        b.put("kv_gib_at_p99", None)
    else:
        use = bpt or bpt_err
        b.put("kv_gib_at_p99", (p99 * use / GIB) if use else None)


def _hybrid_request_gib(b: _Builder, tokens: int, measured_bpt: float | None) -> tuple[float | None, bool]:
    """GiB one request of ``tokens`` needs on a rank, from the catalogue, for a hybrid model.

    `ExpectedKV.request_bytes` (what `estimate` uses): full-length layers per token, each
    sliding-window layer min(window - 1 + in-flight tokens, length) tokens (vLLM
    SlidingWindowSpec.max_memory_usage_bytes), plus SSM state. Only when the log's measured figure
    agrees with the catalogue's prediction for this configuration (else None: the catalogue
    does not describe this run). The flag is true when the figure that agreed is the HMA-off one.
    """
    model = b.get("model")
    arch = lookup_model(model) if model else None
    if arch is None or not arch.is_hybrid or not measured_bpt:
        return None, False
    off = (b.get("hma_disabled") is True or b.get("hma_off_cause") in ("flag", "connector", "chunked_local_attention", "model")
           or b.get("swa_full_length") is True)
    # as resolved first; then HMA off, which a figure without any HMA line can still reveal (the
    # insufficient-KV error of a start with HMA off, KVD001)
    for hma in ((False,) if off else (None, False)):
        try:
            e = expected_kv(arch, tp=int(b.get("tp") or 1), pp=int(b.get("pp") or 1),
                            kv_cache_dtype=str(b.get("kv_cache_dtype") or "auto"), hma_enabled=hma,
                            max_model_len=b.get("max_model_len") or b.get("error_max_seq_len"),
                            max_num_batched_tokens=b.get("max_num_batched_tokens"),
                            block_size=b.get("block_size"), vllm_version=b.get("vllm_version"),
                            platform=b.get("platform") or "cuda")
        except ValueError:  # a logged setting the catalogue cannot price: no architecture figure
            return None, False
        ref = e.log_figure if e.log_figure else e.bytes_per_token
        if ref and abs(measured_bpt / ref - 1) <= _HYBRID_CONFIRM:
            return e.request_bytes(tokens) / GIB, not e.hma_enabled
    return None, False


_FILLERS: dict[str, Callable[[_Builder], None]] = {
    "identity": _identity, "config": _config, "KV and memory figures": _kv, "runtime": _runtime, "options": _options,
}


def build_context(facts: LogFacts, analysis: dict, options: Options | None = None) -> Context:
    """Fill `NAMES` from the analysis. A section that raises leaves its unfilled names in ``failed``."""
    b = _Builder(facts, analysis, options or Options())
    for section, fill in _FILLERS.items():
        try:
            fill(b)
        except Exception as exc:  # noqa: BLE001 - not silenced: every rule using these names reports a rule error
            why = str(exc) if isinstance(exc, UpstreamFailed) else f"{section} figures failed: {type(exc).__name__}: {exc}"
            for name in SECTIONS[section]:
                if name not in b.v:
                    b.failed[name] = why
                    b.v[name] = None
    missing = set(NAMES) - set(b.v)
    if missing:
        raise AssertionError(f"context misses documented names: {sorted(missing)}")
    return Context(b.v, b.prov, b.failed)


def version_cmp(version: str | None, other: str) -> int | None:
    """-1/0/1 comparing a logged version with ``other`` on (major, minor, patch); None if unknown."""
    a, b = parse_version(version), parse_version(other)
    if a is None or b is None:
        return None
    a3 = a + (0,) * (3 - len(a))
    b3 = b + (0,) * (3 - len(b))
    return (a3 > b3) - (a3 < b3)


# --- providers: per-rule figures, in a Python file next to the rule's TOML ------------------------


class ProviderError(KvlogdiagError):
    """A provider file that does not follow the provider contract."""


class Provider:
    """The Python half of one built-in rule: the names it adds and the module that computes them.

    A provider module defines ``CODE`` (the rule code), ``NAMES`` (name → meaning, documented like
    `NAMES`) and ``provide(facts, analysis, ctx, put)``, which computes the names from the facts,
    the derived analysis and the generic context ``ctx`` and stores each with ``put(name, value,
    fact=None)``. Names it does not put are null. Any exception it raises is a rule error.
    """

    # A plain class with the frozen dataclass's immutability (~0.5 ms less at import): read by its attributes
    # only, never compared or hashed; it holds a module, so it is never pickled.
    __slots__ = ("code", "path", "module")
    code: str
    path: str
    module: ModuleType

    def __init__(self, code: str, path: str, module: ModuleType) -> None:
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "module", module)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    @property
    def names(self) -> dict[str, str]:
        return dict(self.module.NAMES)

    def provide(self, facts: LogFacts, analysis: dict, ctx: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Fact]]:
        declared = self.names
        values: dict[str, Any] = dict.fromkeys(declared)
        prov: dict[str, Fact] = {}

        def put(name: str, value: Any, fact: Fact | None = None) -> None:
            if name not in declared:
                raise ProviderError(f"{self.path}: puts {name!r}, which its NAMES does not declare")
            values[name] = value
            if fact is not None:
                prov[name] = fact

        self.module.provide(facts, analysis, ctx, put)
        return values, prov


def _load_provider(name: str, path: Any) -> Provider:
    code = name.split("-", 1)[0]
    spec = importlib.util.spec_from_file_location(f"kvlogdiag.rules.builtin.provider_{code}", path)
    if spec is None or spec.loader is None:
        raise ProviderError(f"kvlogdiag/rules/builtin/{name}.py: cannot be loaded")
    where = f"kvlogdiag/rules/builtin/{name}.py"
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - a shipped file that cannot be imported is a load error that names it
        raise ProviderError(f"{where}: cannot be imported: {type(exc).__name__}: {exc}") from exc
    if getattr(module, "CODE", None) != code:
        raise ProviderError(f"{where}: CODE must be {code!r}")
    names = getattr(module, "NAMES", None)
    if not isinstance(names, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in names.items()):
        raise ProviderError(f"{where}: NAMES must map names to their meaning")
    clash = set(names) & set(NAMES)
    if clash:
        raise ProviderError(f"{where}: NAMES redefines generic name(s) {', '.join(sorted(clash))}")
    if not callable(getattr(module, "provide", None)):
        raise ProviderError(f"{where}: needs a provide(facts, analysis, ctx, put) function")
    return Provider(code, where, module)


@lru_cache(maxsize=1)
def builtin_providers() -> dict[str, Provider]:
    """Rule code → provider, for every ``KVDnnn-name.py`` next to the built-in rule files."""
    out: dict[str, Provider] = {}
    for name in pkgdata.names("rules", "builtin"):
        if name.endswith(".py") and name != "__init__.py":
            p = _load_provider(name[:-3], pkgdata.path("rules", "builtin", name))
            out[p.code] = p
    return out


def provider_names(code: str) -> dict[str, str]:
    """Names the built-in provider of rule ``code`` adds to its namespace (empty without one)."""
    p = builtin_providers().get(code)
    return p.names if p is not None else {}
