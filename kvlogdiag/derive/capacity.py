"""What-if KV-cache capacity arithmetic (pure functions, for ``kvlogdiag estimate``).

Every quantity is **per rank** unless the name says otherwise: vLLM sizes the KV pool on each
GPU/NPU (``Available KV cache memory: Z GiB``) and every TP rank of a DP group holds its slice of
the *same* tokens, so "tokens per rank" = "tokens per DP group".  ``bytes_per_token`` is the
per-rank figure of :func:`kvlogdiag.derive.architecture.expected_kv` (or the measured ``Z·2**30/N``);
``fixed_bytes_per_request`` is the per-request sliding-window / state reservation of hybrid
models (0 otherwise).  GiB = 2**30 bytes.  Method and worked examples: ``docs/capacity.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = [
    "GIB_BYTES",
    "DEFAULT_OFFLOAD_CPU_BYTES",
    "bytes_per_token_from_log",
    "pool_tokens_per_dp_group",
    "pool_tokens_total",
    "request_bytes",
    "requests_fit_at_length",
    "requests_fit_at_max_model_len",
    "max_model_len_for_requests",
    "kv_cache_memory_bytes_needed",
    "gpu_memory_utilization_needed",
    "RequestKVNeed",
    "request_kv_need",
    "OffloadHostMemory",
    "offload_host_memory",
    "offload_host_bytes_for_tokens",
    "offload_tokens_per_rank",
    "node_kv_budget",
    "kv_budget_per_dp_group_gib",
    "live_tokens",
    "live_kv_gib",
]

GIB_BYTES = 2**30
#: RecomputeCPUOffloadConnector default ``cpu_bytes_to_use``: 8 GiB in total, divided by world size.
DEFAULT_OFFLOAD_CPU_BYTES = 8 * GIB_BYTES


def _positive(name: str, value: float) -> None:
    if value is None or value <= 0:
        raise ValueError(f"{name} must be > 0 (got {value!r})")


def _non_negative(name: str, value: float) -> None:
    if value is None or value < 0:
        raise ValueError(f"{name} must be >= 0 (got {value!r})")


def _padded_tokens(tokens: int, block_size: int | None) -> int:
    if block_size:
        return -(-int(tokens) // int(block_size)) * int(block_size)
    return int(tokens)


def bytes_per_token_from_log(available_kv_gib: float, kv_cache_tokens: int) -> float:
    """The measured figure ``Z · 2**30 / N`` from ``Available KV cache memory: Z GiB`` and
    ``GPU KV cache size: N tokens`` (its meaning depends on the vLLM version, §3.1)."""
    _positive("available_kv_gib", available_kv_gib)
    _positive("kv_cache_tokens", kv_cache_tokens)
    return available_kv_gib * GIB_BYTES / kv_cache_tokens


def pool_tokens_per_dp_group(available_kv_gib_per_rank: float, bytes_per_token: float) -> int:
    """Tokens the KV pool of one DP group holds: ``floor(Z · 2**30 / bytes_per_token)``.

    TP ranks each hold their slice of the same tokens (and PP stages their layers of the same
    tokens), so the per-rank count is the DP group's count.  With unequal ranks pass the smallest
    ``Z`` (vLLM takes the minimum over workers).
    """
    _non_negative("available_kv_gib_per_rank", available_kv_gib_per_rank)
    _positive("bytes_per_token", bytes_per_token)
    return math.floor(available_kv_gib_per_rank * GIB_BYTES / bytes_per_token)


def pool_tokens_total(available_kv_gib_per_rank: float, bytes_per_token: float,
                      dp_size: int) -> int:
    """Tokens across all DP groups: ``pool_tokens_per_dp_group × dp_size`` (each DP group has
    its own pool; a request lives in one group only)."""
    _positive("dp_size", dp_size)
    return pool_tokens_per_dp_group(available_kv_gib_per_rank, bytes_per_token) * int(dp_size)


def request_bytes(request_len_tokens: int, bytes_per_token: float,
                  fixed_bytes_per_request: float = 0.0, block_size: int | None = None) -> float:
    """Per-rank bytes one request of ``request_len_tokens`` occupies:
    ``bytes_per_token × L + fixed_bytes_per_request`` (``L`` rounded up to whole blocks when
    ``block_size`` is given)."""
    _non_negative("request_len_tokens", request_len_tokens)
    _non_negative("bytes_per_token", bytes_per_token)
    _non_negative("fixed_bytes_per_request", fixed_bytes_per_request)
    return bytes_per_token * _padded_tokens(request_len_tokens, block_size) + fixed_bytes_per_request


def requests_fit_at_length(available_kv_gib_per_rank: float, bytes_per_token: float,
                           request_len_tokens: int, fixed_bytes_per_request: float = 0.0,
                           block_size: int | None = None) -> float:
    """Concurrent requests of length ``L`` one DP group holds:
    ``Z · 2**30 / (bytes_per_token × L + fixed_bytes_per_request)``.

    A float, like vLLM's ``Maximum concurrency … : 7.40x``; ``math.floor`` it for whole requests.
    For a non-hybrid model (fixed = 0) this is ``pool_tokens / L``.
    """
    _non_negative("available_kv_gib_per_rank", available_kv_gib_per_rank)
    _positive("request_len_tokens", request_len_tokens)
    per_request = request_bytes(request_len_tokens, bytes_per_token, fixed_bytes_per_request,
                                block_size)
    _positive("bytes per request", per_request)
    return available_kv_gib_per_rank * GIB_BYTES / per_request


def requests_fit_at_max_model_len(available_kv_gib_per_rank: float, bytes_per_token: float,
                                  max_model_len_tokens: int, fixed_bytes_per_request: float = 0.0,
                                  block_size: int | None = None) -> float:
    """Requests at ``max_model_len`` that fit — what vLLM's ``Maximum concurrency for L tokens per
    request`` line reports (worst case: every request at full length)."""
    return requests_fit_at_length(available_kv_gib_per_rank, bytes_per_token,
                                  max_model_len_tokens, fixed_bytes_per_request, block_size)


def max_model_len_for_requests(available_kv_gib_per_rank: float, bytes_per_token: float,
                               num_requests: int, fixed_bytes_per_request: float = 0.0,
                               block_size: int | None = None) -> int:
    """Largest ``max_model_len`` such that ``num_requests`` full-length requests fit:
    ``floor((Z · 2**30 / n − fixed) / bytes_per_token)``, rounded down to whole blocks when
    ``block_size`` is given; 0 when not even the fixed part fits."""
    _non_negative("available_kv_gib_per_rank", available_kv_gib_per_rank)
    _positive("num_requests", num_requests)
    _positive("bytes_per_token", bytes_per_token)
    per_request = available_kv_gib_per_rank * GIB_BYTES / num_requests - fixed_bytes_per_request
    if per_request <= 0:
        return 0
    tokens = math.floor(per_request / bytes_per_token)
    if block_size:
        tokens = tokens // int(block_size) * int(block_size)
    return max(0, tokens)


def kv_cache_memory_bytes_needed(num_requests: int, request_len_tokens: int,
                                 bytes_per_token: float, fixed_bytes_per_request: float = 0.0,
                                 block_size: int | None = None) -> int:
    """Per-rank KV bytes for ``num_requests`` requests of ``request_len_tokens``:
    ``ceil(n × (bytes_per_token × L + fixed))`` — the value to pass as
    ``--kv-cache-memory-bytes`` (a per-GPU/NPU figure that skips memory profiling)."""
    _non_negative("num_requests", num_requests)
    return math.ceil(num_requests * request_bytes(request_len_tokens, bytes_per_token,
                                                  fixed_bytes_per_request, block_size))


def gpu_memory_utilization_needed(num_requests: int, request_len_tokens: int,
                                  bytes_per_token: float, device_memory_gib: float,
                                  non_kv_memory_gib: float, fixed_bytes_per_request: float = 0.0,
                                  block_size: int | None = None) -> float:
    """``--gpu-memory-utilization`` needed for ``num_requests`` requests of ``request_len_tokens``.

    vLLM gives KV ``Z = total × utilization − non_kv`` (§3.1), so
    ``utilization = (KV bytes + non_kv) / total``.  ``non_kv_memory_gib`` = weights + peak
    activation + non-torch memory (+ the CUDA-graph estimate, subtracted by default ≥0.20) per
    device; ``device_memory_gib`` = the device's total memory.  A result > 1 means it cannot fit.
    """
    _positive("device_memory_gib", device_memory_gib)
    _non_negative("non_kv_memory_gib", non_kv_memory_gib)
    kv = kv_cache_memory_bytes_needed(num_requests, request_len_tokens, bytes_per_token,
                                      fixed_bytes_per_request, block_size)
    return (kv + non_kv_memory_gib * GIB_BYTES) / (device_memory_gib * GIB_BYTES)


@dataclass(frozen=True)
class RequestKVNeed:
    """KV one typical (P99) request needs vs the worst-case reservation at ``max_model_len``."""

    p99_bytes: float
    max_model_len_bytes: float
    p99_gib: float
    max_model_len_gib: float
    worst_case_over_p99: float


def request_kv_need(bytes_per_token: float, p99_request_tokens: int, max_model_len_tokens: int,
                    fixed_bytes_per_request: float = 0.0,
                    block_size: int | None = None) -> RequestKVNeed:
    """Per-rank KV of a P99-length request vs one request at ``max_model_len``.

    ``max_model_len_bytes`` is what vLLM checks at startup ("To serve at least one request with
    the model's max seq len (L), (X GiB KV cache is needed …", §5 E1) — the "one request needs
    11 GB" alarm — while real requests of P99 length need only ``p99_bytes``.
    """
    p99 = request_bytes(p99_request_tokens, bytes_per_token, fixed_bytes_per_request, block_size)
    worst = request_bytes(max_model_len_tokens, bytes_per_token, fixed_bytes_per_request,
                          block_size)
    ratio = worst / p99 if p99 > 0 else math.inf
    return RequestKVNeed(p99, worst, p99 / GIB_BYTES, worst / GIB_BYTES, ratio)


@dataclass(frozen=True)
class OffloadHostMemory:
    """Host DRAM a CPU-offload connector reserves: per rank, per node and in total."""

    per_rank_bytes: float
    per_node_bytes: float
    total_bytes: float
    caveats: list[str] = field(default_factory=list)


def offload_host_memory(world_size: int, ranks_per_node: int | None = None,
                        cpu_bytes_to_use: float | None = None,
                        cpu_bytes_to_use_per_rank: float | None = None) -> OffloadHostMemory:
    """Host memory of vLLM-Ascend's ``RecomputeCPUOffloadConnector`` (§9).

    ``cpu_bytes_to_use`` is a **global** budget divided by ``world_size`` (default 8 GiB in
    total); ``cpu_bytes_to_use_per_rank`` is per rank.  Per node = per rank × ranks on the node
    (``ranks_per_node`` defaults to ``world_size``, i.e. one node).  When both keys are set the
    per-rank one is assumed to win (unverified).
    """
    _positive("world_size", world_size)
    ranks_per_node = int(ranks_per_node or world_size)
    caveats: list[str] = []
    if cpu_bytes_to_use_per_rank is not None:
        per_rank = float(cpu_bytes_to_use_per_rank)
        if cpu_bytes_to_use is not None:
            caveats.append("both cpu_bytes_to_use and cpu_bytes_to_use_per_rank set: the per-rank "
                           "value is assumed to take precedence (unverified)")
    else:
        total = float(DEFAULT_OFFLOAD_CPU_BYTES if cpu_bytes_to_use is None else cpu_bytes_to_use)
        per_rank = total / world_size
        caveats.append(
            f"cpu_bytes_to_use is GLOBAL: {total / GIB_BYTES:g} GiB ÷ world_size {world_size} = "
            f"{per_rank / GIB_BYTES:g} GiB per rank — to give every rank X, set "
            "cpu_bytes_to_use_per_rank = X (or cpu_bytes_to_use = X × world_size)"
        )
        if cpu_bytes_to_use is None:
            caveats.append("cpu_bytes_to_use not set: default 8 GiB in total")
    return OffloadHostMemory(per_rank, per_rank * ranks_per_node, per_rank * world_size, caveats)


def offload_host_bytes_for_tokens(offload_tokens_per_rank: int, bytes_per_token: float,
                                  ranks: int) -> float:
    """Host bytes needed to offload ``offload_tokens_per_rank`` tokens from each of ``ranks``
    ranks: ``tokens × bytes_per_token × ranks`` (``bytes_per_token`` per rank)."""
    _non_negative("offload_tokens_per_rank", offload_tokens_per_rank)
    _positive("ranks", ranks)
    return offload_tokens_per_rank * bytes_per_token * ranks


def offload_tokens_per_rank(per_rank_bytes: float, bytes_per_token: float) -> int:
    """Tokens a per-rank offload buffer holds: ``floor(per_rank_bytes / bytes_per_token)``."""
    _positive("bytes_per_token", bytes_per_token)
    return math.floor(per_rank_bytes / bytes_per_token)


def node_kv_budget(n_devices: int, device_gib: float, utilization: float,
                   kv_fraction: float) -> float:
    """KV memory of a node, in the unit of ``device_gib``:
    ``n_devices × device_gib × utilization × kv_fraction``.

    ``utilization`` = ``--gpu-memory-utilization``; ``kv_fraction`` = share of that budget left for
    KV after weights, activations and graphs (e.g. 0.6).  8 × 64 × 0.85 × 0.6 = 261.12.
    """
    _positive("n_devices", n_devices)
    _positive("device_gib", device_gib)
    if not 0 < utilization <= 1:
        raise ValueError("utilization must be in (0, 1]")
    if not 0 <= kv_fraction <= 1:
        raise ValueError("kv_fraction must be in [0, 1]")
    return n_devices * device_gib * utilization * kv_fraction


def kv_budget_per_dp_group_gib(node_kv_gib: float, dp_size: int) -> float:
    """A node's KV budget split over its DP groups: ``node_kv_gib / dp_size`` (all TP ranks of a
    group together hold one copy of each of its tokens)."""
    _positive("dp_size", dp_size)
    return node_kv_gib / dp_size


def live_tokens(concurrency: float, prompt_tokens: int, output_tokens: int,
                output_fraction_held: float) -> float:
    """Context tokens resident in KV for ``concurrency`` requests:
    ``concurrency × (prompt_tokens + output_tokens × output_fraction_held)``.

    ``output_fraction_held`` is explicit because it depends on the node role:

    * P node (prefill, ``kv_producer``): a request holds its prompt (+1 sampled token) until the
      KV is sent, so physically ≈ 0; a figure that counts P requests at their final length
      (prompt + whole output, fraction 1.0) is a worst case.
    * D node (decode, ``kv_consumer``): the prompt plus the output generated so far; averaged over
      a request's life the output held is half the output (0.5); 1.0 at the end (peak).
    """
    _non_negative("concurrency", concurrency)
    _non_negative("prompt_tokens", prompt_tokens)
    _non_negative("output_tokens", output_tokens)
    if not 0 <= output_fraction_held <= 1:
        raise ValueError("output_fraction_held must be in [0, 1]")
    return concurrency * (prompt_tokens + output_tokens * output_fraction_held)


def live_kv_gib(live_context_tokens: float, bytes_per_token: float,
                fixed_bytes_per_request: float = 0.0, concurrency: float = 0.0) -> float:
    """Per-rank KV GiB occupied by ``live_context_tokens`` (+ ``concurrency`` × fixed bytes)."""
    _non_negative("live_context_tokens", live_context_tokens)
    return (live_context_tokens * bytes_per_token + concurrency * fixed_bytes_per_request) / GIB_BYTES
