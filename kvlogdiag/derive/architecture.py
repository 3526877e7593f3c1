"""Expected KV-cache bytes per token from a model's architecture.

The log gives a *measured* figure, ``Z · 2**30 / N`` (``Available KV cache memory: Z GiB`` over
``GPU KV cache size: N tokens``).  This module computes what that figure *should* be for a model
(a Hugging Face ``config.json`` or an entry of the built-in catalogue ``data/models.toml``) under
a given parallel layout, KV-cache dtype, hybrid-manager setting and vLLM version.

Formulas (``docs/capacity.md``; ``docs/vllm-log-format.md`` §12, §12.1, §3.1, §6, §7), per layer, per
rank, ``dt`` = bytes per element:

* standard attention (MHA/GQA/MQA): ``2 × max(1, num_kv_heads // TP) × head_dim × dt``;
* MLA (DeepSeek-V2/V3/R1): ``(kv_lora_rank + qk_rope_head_dim) × dt``, **not divided by TP**;
  with ``fp8_ds_mla`` 656 B (+132 B indexer for DeepSeek-V3.2 sparse layers);
* sliding-window layers: with the hybrid manager (HMA) on, a fixed per-request reservation of
  ``(cdiv(min(window − 1 + in_flight, L), block) + 1) × block`` tokens; with HMA off they cost
  like full attention;
* DeepSeek-V4: compressed states of 584 B (``fp8_ds_mla``) or 1024 B (bf16) per ``ratio`` tokens,
  an indexer of 132 B per state on ratio-4 layers, plus a 128-token sliding window on every layer;
* PP splits the layers (vLLM's ``get_pp_indices``); the stage with the most bytes per token is
  reported because it bounds ``N`` (the engine takes the minimum over workers).

Pure Python, no network.  Everything is per rank.
"""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from kvlogdiag import pkgdata, recache
from kvlogdiag.errors import KvlogdiagError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "GIB_BYTES",
    "DEFAULT_IN_FLIGHT_TOKENS",
    "KIND_FULL",
    "KIND_SLIDING",
    "KIND_MLA",
    "KIND_MLA_SPARSE",
    "KIND_DSV4",
    "KIND_MAMBA",
    "UnknownArchitecture",
    "LayerSpec",
    "LayerGroup",
    "ModelArch",
    "ExpectedKV",
    "CatalogueEntry",
    "from_hf_config",
    "read_hf_config",
    "load_hf_config",
    "load_catalogue",
    "catalogue_entries",
    "normalise_model_name",
    "lookup_model",
    "kv_dtype_bytes",
    "pp_layer_ranges",
    "swa_reserved_tokens",
    "parse_vllm_version",
    "expected_kv",
    "explain_mismatch",
]

GIB_BYTES = 2**30
#: in-flight tokens assumed per request for sliding-window reservations when
#: ``max_num_batched_tokens`` is unknown (the V1 default on ≥70 GiB devices, §8).
DEFAULT_IN_FLIGHT_TOKENS = 8192

KIND_FULL = "full"  # standard full attention (MHA / GQA / MQA)
KIND_SLIDING = "sliding"  # sliding-window attention
KIND_MLA = "mla"  # DeepSeek multi-head latent attention
KIND_MLA_SPARSE = "mla_sparse"  # DeepSeek-V3.2 sparse MLA (+ lightning indexer)
KIND_DSV4 = "dsv4"  # DeepSeek-V4 compressed attention (+ sliding window on every layer)
KIND_MAMBA = "mamba"  # SSM / linear-attention layer: a fixed state per request

# §12 / §12.1 byte constants (upstream CUDA layouts).
DSV32_FP8_DS_MLA_BYTES = 656  # 512 fp8 + 16 B scales + 64 bf16 RoPE = 656 B per token per layer
DSV32_INDEXER_BYTES = 132  # 128 fp8 + 4 B scale
DSV4_FP8_DS_MLA_STATE_BYTES = 584  # 448 fp8 + 128 B bf16 RoPE + 8 B scales
DSV4_BF16_STATE_BYTES = 1024  # 512 × 2
DSV4_INDEXER_FP8_BYTES = 132
#: vLLM-Ascend (A2/A3) DSv4 indexer state: 128 int8 + one fp16 scale = 130 B — vllm-ascend 0.23.0.post1
#: vllm_ascend/models/deepseek_v4.py:567-575 (k_dtype int8 unless A5), :152-169 (scale_dim 1, fp16),
#: vllm_ascend/core/kv_cache_interface.py:117-121 (page = head_size × dtype + scale_dim × scale dtype).
DSV4_ASCEND_INDEXER_BYTES = 130

_FP8_NAMES = {"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "int8"}
_DTYPE_BYTES = {
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float32": 4,
    "fp32": 4,
    "float": 4,
    **{name: 1 for name in _FP8_NAMES},
}


class UnknownArchitecture(KvlogdiagError, ValueError):
    """The config (or model name) does not describe an architecture this module can size."""


# ---------------------------------------------------------------------------------------------
# Data model
# ---------------------------------------------------------------------------------------------


def _frozen(self: Any, name: str, value: Any = None) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


# The records below were dataclasses; written out as plain classes (creating ~6 dataclasses cost ~3 ms of each
# start, docs/performance.md "Session 8 (2)") with only what is used of the dataclass machinery: the frozen ones
# refuse assignment, LayerSpec compares and hashes by value (`ModelArch.layer_groups` counts equal specs in a dict),
# ModelArch keeps its fields, and only them, in its __dict__ (`catalogue_entries` rebuilds one from it).


class LayerSpec:
    """KV-relevant facts of one decoder layer.

    ``kind`` is one of ``full``, ``sliding``, ``mla``, ``mla_sparse``, ``dsv4``, ``mamba``.
    Standard/sliding layers use ``num_kv_heads`` and ``head_dim``; sliding layers also
    ``sliding_window`` (tokens).  MLA layers use ``kv_lora_rank`` and ``qk_rope_head_dim``.
    DeepSeek-V4 layers use ``compress_ratio`` (0 = sliding window only, 4 = CSA, 128 = HCA),
    ``has_indexer`` and ``sliding_window``.  Mamba/linear-attention layers carry
    ``state_bytes_per_request`` (whole model, before TP; ``None`` = unknown).
    """

    kind: str
    num_kv_heads: int
    head_dim: int
    sliding_window: int | None
    kv_lora_rank: int
    qk_rope_head_dim: int
    compress_ratio: int
    has_indexer: bool
    state_bytes_per_request: int | None

    def __init__(self, kind: str, num_kv_heads: int = 0, head_dim: int = 0, sliding_window: int | None = None,
                 kv_lora_rank: int = 0, qk_rope_head_dim: int = 0, compress_ratio: int = 0, has_indexer: bool = False,
                 state_bytes_per_request: int | None = None) -> None:
        d = self.__dict__
        d["kind"] = kind
        d["num_kv_heads"] = num_kv_heads
        d["head_dim"] = head_dim
        d["sliding_window"] = sliding_window
        d["kv_lora_rank"] = kv_lora_rank
        d["qk_rope_head_dim"] = qk_rope_head_dim
        d["compress_ratio"] = compress_ratio
        d["has_indexer"] = has_indexer
        d["state_bytes_per_request"] = state_bytes_per_request

    __setattr__ = __delattr__ = _frozen

    def _key(self) -> tuple[Any, ...]:
        return (self.kind, self.num_kv_heads, self.head_dim, self.sliding_window, self.kv_lora_rank,
                self.qk_rope_head_dim, self.compress_ratio, self.has_indexer, self.state_bytes_per_request)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._key() == other._key()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def describe(self) -> str:
        """Short human-readable description (``"full 8×128"``, ``"sliding 4096"``, …)."""
        if self.kind == KIND_FULL:
            return f"full attention {self.num_kv_heads} KV heads × {self.head_dim}"
        if self.kind == KIND_SLIDING:
            return (
                f"sliding window {self.sliding_window} ({self.num_kv_heads} KV heads × "
                f"{self.head_dim})"
            )
        if self.kind in (KIND_MLA, KIND_MLA_SPARSE):
            extra = " + indexer" if self.kind == KIND_MLA_SPARSE else ""
            return f"MLA {self.kv_lora_rank}+{self.qk_rope_head_dim}{extra}"
        if self.kind == KIND_DSV4:
            if self.compress_ratio == 0:
                return f"DSv4 sliding window {self.sliding_window} only"
            idx = " + indexer" if self.has_indexer else ""
            return f"DSv4 compress ratio {self.compress_ratio}{idx} + window {self.sliding_window}"
        if self.kind == KIND_MAMBA:
            return f"SSM/linear state {self.state_bytes_per_request} B/request"
        return self.kind


class LayerGroup:
    """A run-length summary: ``count`` layers sharing one :class:`LayerSpec`."""

    spec: LayerSpec
    count: int

    def __init__(self, spec: LayerSpec, count: int) -> None:
        self.__dict__.update(spec=spec, count=count)

    __setattr__ = __delattr__ = _frozen


class ModelArch:
    """KV-relevant architecture of a model.

    ``layers`` has one :class:`LayerSpec` per decoder layer in order (PP splits by index);
    ``num_kv_heads``/``head_dim`` are the model-level values (for MLA: 1 latent "head" of
    ``kv_lora_rank + qk_rope_head_dim``).  ``num_mtp_layers`` MTP (next-token-prediction)
    layers use ``mtp_layer``.  ``default_dtype`` is the checkpoint dtype (``torch_dtype``).
    ``auto_kv_cache_dtype`` is the cache dtype vLLM forces for ``--kv-cache-dtype auto`` on CUDA
    (DeepSeek-V4: ``fp8_ds_mla``), else ``None``.  ``verified`` is False when the config facts
    were not cross-checked against a public copy of the config.
    """

    name: str
    family: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    layers: tuple[LayerSpec, ...]
    num_mtp_layers: int
    mtp_layer: LayerSpec | None
    default_dtype: str
    auto_kv_cache_dtype: str | None
    max_position_embeddings: int | None
    num_attention_heads: int | None
    verified: bool
    source: str
    notes: tuple[str, ...]

    def __init__(self, name: str, family: str, num_layers: int, num_kv_heads: int, head_dim: int,
                 layers: tuple[LayerSpec, ...], num_mtp_layers: int = 0, mtp_layer: LayerSpec | None = None,
                 default_dtype: str = "bfloat16", auto_kv_cache_dtype: str | None = None,
                 max_position_embeddings: int | None = None, num_attention_heads: int | None = None,
                 verified: bool = True, source: str = "", notes: tuple[str, ...] = ()) -> None:
        self.__dict__.update(
            name=name, family=family, num_layers=num_layers, num_kv_heads=num_kv_heads, head_dim=head_dim,
            layers=layers, num_mtp_layers=num_mtp_layers, mtp_layer=mtp_layer, default_dtype=default_dtype,
            auto_kv_cache_dtype=auto_kv_cache_dtype, max_position_embeddings=max_position_embeddings,
            num_attention_heads=num_attention_heads, verified=verified, source=source, notes=notes)
        if len(layers) != num_layers:
            raise ValueError(f"{name}: {len(layers)} layer specs for num_layers={num_layers}")

    __setattr__ = __delattr__ = _frozen

    @property
    def layer_groups(self) -> tuple[LayerGroup, ...]:
        """Distinct layer specs with their counts, in order of first appearance."""
        counts: dict[LayerSpec, int] = {}
        for spec in self.layers:
            counts[spec] = counts.get(spec, 0) + 1
        return tuple(LayerGroup(spec, n) for spec, n in counts.items())

    @property
    def kind_counts(self) -> dict[str, int]:
        """Number of layers per attention kind (``{"full": 18, "sliding": 18}``)."""
        out: dict[str, int] = {}
        for spec in self.layers:
            out[spec.kind] = out.get(spec.kind, 0) + 1
        return out

    @property
    def is_hybrid(self) -> bool:
        """True when the model mixes windowed/state layers with full-length ones (needs HMA)."""
        kinds = set(self.kind_counts)
        windowed = KIND_SLIDING in kinds or KIND_DSV4 in kinds
        if KIND_DSV4 in kinds:
            return True
        full_like = bool(kinds & {KIND_FULL, KIND_MLA, KIND_MLA_SPARSE})
        return (windowed and full_like) or (KIND_MAMBA in kinds and len(kinds) > 1)


class ExpectedKV:
    """What the KV cache of one model should cost per rank.

    ``bytes_per_token`` — per context token, per rank, on the largest PP stage, with the
    hybrid manager as resolved (sliding layers excluded when HMA is on).
    ``fixed_bytes_per_request`` — per request regardless of its length: sliding-window
    reservations (HMA on) and SSM states.
    ``hma_off_bytes_per_token`` — every layer treated as full attention (HMA off, and the
    ≤0.20 startup figure).
    ``log_figure`` — what ``Z·2**30/N`` should read for the given vLLM version (``None`` when it
    cannot be predicted; see ``assumptions``).
    """

    model: str
    tp: int
    pp: int
    kv_cache_dtype: str
    dtype_bytes: int
    block_size: int
    in_flight_tokens: int
    hma_enabled: bool
    bytes_per_token: float
    fixed_bytes_per_request: float
    hma_off_bytes_per_token: float
    log_figure: float | None
    per_stage_bytes_per_token: tuple[float, ...]
    breakdown: dict[str, float]
    window_terms: tuple[tuple[int, float], ...]
    state_bytes_per_request: float
    max_model_len: int | None
    vllm_version: str | None
    assumptions: list[str]
    verified: bool
    #: False when TP does not divide the attention heads (vLLM refuses that layout); None if unknown
    tp_divides_heads: bool | None

    def __init__(self, model: str, tp: int, pp: int, kv_cache_dtype: str, dtype_bytes: int, block_size: int,
                 in_flight_tokens: int, hma_enabled: bool, bytes_per_token: float, fixed_bytes_per_request: float,
                 hma_off_bytes_per_token: float, log_figure: float | None,
                 per_stage_bytes_per_token: tuple[float, ...] = (), breakdown: dict[str, float] | None = None,
                 window_terms: tuple[tuple[int, float], ...] = (), state_bytes_per_request: float = 0.0,
                 max_model_len: int | None = None, vllm_version: str | None = None,
                 assumptions: list[str] | None = None, verified: bool = True,
                 tp_divides_heads: bool | None = None) -> None:
        self.model = model
        self.tp = tp
        self.pp = pp
        self.kv_cache_dtype = kv_cache_dtype
        self.dtype_bytes = dtype_bytes
        self.block_size = block_size
        self.in_flight_tokens = in_flight_tokens
        self.hma_enabled = hma_enabled
        self.bytes_per_token = bytes_per_token
        self.fixed_bytes_per_request = fixed_bytes_per_request
        self.hma_off_bytes_per_token = hma_off_bytes_per_token
        self.log_figure = log_figure
        self.per_stage_bytes_per_token = per_stage_bytes_per_token
        self.breakdown = {} if breakdown is None else breakdown
        self.window_terms = window_terms
        self.state_bytes_per_request = state_bytes_per_request
        self.max_model_len = max_model_len
        self.vllm_version = vllm_version
        self.assumptions = [] if assumptions is None else assumptions
        self.verified = verified
        self.tp_divides_heads = tp_divides_heads

    def request_bytes(self, tokens: int) -> float:
        """Bytes (per rank) one request of ``tokens`` context tokens occupies.

        Full-length layers: ``bytes_per_token × cdiv(tokens, block)·block``; sliding layers (when
        they count as a fixed cost) reserve ``swa_reserved_tokens(window, in_flight, block,
        tokens)``; plus SSM state.  At ``tokens = max_model_len`` this is vLLM's "X GiB KV cache is
        needed" figure (§5 E1).
        """
        if tokens <= 0:
            return 0.0
        padded = _cdiv(tokens, self.block_size) * self.block_size
        total = self.bytes_per_token * padded
        for window, per_token in self.window_terms:
            total += per_token * swa_reserved_tokens(
                window, self.in_flight_tokens, self.block_size, tokens
            )
        return total + self.state_bytes_per_request


class CatalogueEntry:
    """One entry of ``data/models.toml`` (``arch`` built from its ``config`` table)."""

    name: str
    aliases: tuple[str, ...]
    verified: bool
    source: str
    arch: ModelArch

    def __init__(self, name: str, aliases: tuple[str, ...], verified: bool, source: str, arch: ModelArch) -> None:
        self.__dict__.update(name=name, aliases=aliases, verified=verified, source=source, arch=arch)

    __setattr__ = __delattr__ = _frozen


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str = "bfloat16") -> int:
    """Bytes per KV element for a ``--kv-cache-dtype`` value.

    ``fp8``/``fp8_e4m3``/``fp8_e5m2``/``fp8_inc``/``fp8_ds_mla`` → 1; ``bfloat16``/``float16``
    → 2; ``auto`` → the model dtype, where a float32 checkpoint is assumed to be served in 16-bit
    (vLLM downcasts fp32 for ``--dtype auto``).  Raises ``ValueError`` for unknown names.
    """
    name = _norm_dtype(kv_cache_dtype)
    if name == "auto":
        model = _norm_dtype(model_dtype or "bfloat16")
        if model in _FP8_NAMES:
            return 1
        return 2
    if name not in _DTYPE_BYTES:
        raise ValueError(f"unsupported kv_cache_dtype {kv_cache_dtype!r}")
    return _DTYPE_BYTES[name]


def _norm_dtype(value: str) -> str:
    text = str(value).strip().lower()
    if text.startswith("torch."):
        text = text[len("torch.") :]
    return text


def pp_layer_ranges(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """``[start, end)`` layer ranges per PP stage, as vLLM's ``get_pp_indices`` splits them.

    Each stage gets ``num_layers // pp``; the remainder goes one layer each to the stages
    *before the last* (``partitions[-2]``, ``partitions[-3]``, …).  ``VLLM_PP_LAYER_PARTITION``
    overrides this in vLLM and is not modelled.
    """
    if pp < 1:
        raise ValueError("pp must be >= 1")
    per = num_layers // pp
    parts = [per] * pp
    remaining = num_layers % pp
    for i in range(2, remaining + 2):
        parts[-i] += 1
    out = []
    start = 0
    for n in parts:
        out.append((start, start + n))
        start += n
    return out


def swa_reserved_tokens(
    window: int, in_flight_tokens: int, block_size: int, max_model_len: int | None = None
) -> int:
    """Tokens one request reserves in a sliding-window layer with the hybrid manager on.

    vLLM ``SlidingWindowSpec.max_memory_usage_bytes``: ``num_tokens = min(window − 1 +
    in_flight, max_model_len)``, then ``(cdiv(num_tokens, block) + 1)`` blocks (+1 because the
    window need not start at a block boundary).
    """
    tokens = window - 1 + in_flight_tokens
    if max_model_len is not None:
        tokens = min(tokens, max_model_len)
    return (_cdiv(tokens, block_size) + 1) * block_size


def parse_vllm_version(version: str | None) -> tuple[int, int, int] | None:
    """``"0.10.2"``, ``"v0.11.1rc3"``, ``"0.13.0+faa43dbf.nv26.01"`` → ``(0, 10, 2)`` etc."""
    if not version:
        return None
    # (?<!\d): the leftmost match starts where a digit run starts, so starting inside one is never
    # tried (the same match; without it a 20,000-digit run costs ~10^8 steps: issue 18, ReDoS)
    m = recache.compile(r"(?<!\d)(\d+)\.(\d+)(?:\.(\d+))?").search(str(version))
    if not m or max(len(g or "") for g in m.groups()) > 18:
        return None  # a version number of 19+ digits is damage (int() refuses 4,300+ digits)
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


# ---------------------------------------------------------------------------------------------
# Hugging Face config → ModelArch
# ---------------------------------------------------------------------------------------------

_STANDARD_TYPES = {
    "llama": "llama",
    "mistral": "mistral",
    "mixtral": "mistral",
    "qwen2": "qwen2",
    "qwen2_moe": "qwen2",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3",
    "phi3": "phi3",
}
_ARCH_TO_TYPE = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Gemma3ForConditionalGeneration": "gemma3",
    "GptOssForCausalLM": "gpt_oss",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "DeepseekV32ForCausalLM": "deepseek_v32",
    "DeepseekV4ForCausalLM": "deepseek_v4",
}
_MLA_TYPES = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"}
_LAYER_TYPE_KINDS = {
    "full_attention": KIND_FULL,
    "attention": KIND_FULL,
    "global_attention": KIND_FULL,
    "sliding_attention": KIND_SLIDING,
    "sliding_window_attention": KIND_SLIDING,
    "local_attention": KIND_SLIDING,
    "linear_attention": KIND_MAMBA,
    "mamba": KIND_MAMBA,
    "mamba2": KIND_MAMBA,
}


def _flatten_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Merge a multimodal ``text_config`` over the top level when the top level has no layers."""
    cfg = dict(config)
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and "num_hidden_layers" not in cfg:
        merged = {k: v for k, v in cfg.items() if k != "text_config"}
        merged["_outer_model_type"] = cfg.get("model_type")
        merged.update(text)
        cfg = merged
    return cfg


def _model_type(cfg: Mapping[str, Any]) -> str:
    mt = cfg.get("model_type")
    if mt:
        return str(mt).lower()
    for arch in cfg.get("architectures") or ():
        if arch in _ARCH_TO_TYPE:
            return _ARCH_TO_TYPE[arch]
    return ""


def _req_int(cfg: Mapping[str, Any], key: str, model_type: str) -> int:
    value = cfg.get(key)
    if value is None:
        raise UnknownArchitecture(
            f"config for model_type {model_type or '?'!r} has no {key!r}; cannot size its KV cache"
        )
    return int(value)


def _heads_and_dim(cfg: Mapping[str, Any], model_type: str) -> tuple[int, int]:
    heads = _req_int(cfg, "num_attention_heads", model_type)
    kv = cfg.get("num_key_value_heads")
    kv_heads = int(kv) if kv is not None else heads
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        head_dim = _req_int(cfg, "hidden_size", model_type) // heads
    return kv_heads, int(head_dim)


def _layers_from_types(
    layer_types: Sequence[str], kv_heads: int, head_dim: int, window: int | None, model_type: str,
    state_bytes: int | None = None,
) -> list[LayerSpec]:
    full = LayerSpec(KIND_FULL, kv_heads, head_dim)
    out: list[LayerSpec] = []
    for t in layer_types:
        kind = _LAYER_TYPE_KINDS.get(str(t).lower())
        if kind is None:
            raise UnknownArchitecture(
                f"layer type {t!r} in layer_types of model_type {model_type!r} is not supported"
            )
        if kind == KIND_FULL:
            out.append(full)
        elif kind == KIND_SLIDING:
            if not window:
                raise UnknownArchitecture(
                    f"model_type {model_type!r} has sliding layers but no sliding_window size"
                )
            out.append(LayerSpec(KIND_SLIDING, kv_heads, head_dim, sliding_window=int(window)))
        else:
            out.append(LayerSpec(KIND_MAMBA, state_bytes_per_request=state_bytes))
    return out


def _linear_attention_state_bytes(cfg: Mapping[str, Any]) -> int | None:
    """Gated-DeltaNet style state per layer per request (conv + recurrent), 2-byte estimate."""
    keys = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
            "linear_value_head_dim", "linear_conv_kernel_dim")
    if not all(cfg.get(k) for k in keys):
        return None
    kh, vh, kd, vd, kern = (int(cfg[k]) for k in keys)
    conv = (kern - 1) * (2 * kh * kd + vh * vd) * 2
    recurrent = vh * kd * vd * 2
    return conv + recurrent


def from_hf_config(config: Mapping[str, Any], name: str | None = None) -> ModelArch:
    """Build a :class:`ModelArch` from a Hugging Face ``config.json`` dict.

    Supported: Llama / Mistral / Mixtral / Qwen2(-MoE) / Qwen3(-MoE) / Phi-3 (``sliding_window``
    on every layer for Mistral-style configs; Qwen2/3 only when ``use_sliding_window`` is true and
    then for layers ``>= max_window_layers``, as in HF), Gemma-2 (even layers sliding), Gemma-3
    (``sliding_window_pattern``, default 6: every 6th layer global), gpt-oss and any config with a
    ``layer_types`` list, DeepSeek-V2/V3/R1 (MLA; ``num_nextn_predict_layers`` MTP layers),
    DeepSeek-V3.2 (sparse MLA + indexer), DeepSeek-V4 (``compress_ratios``).  Multimodal configs
    with a ``text_config`` are read from it.  Anything else raises :class:`UnknownArchitecture`.
    """
    if not isinstance(config, Mapping):
        raise UnknownArchitecture("config must be a mapping (the parsed config.json)")
    cfg = _flatten_config(config)
    mt = _model_type(cfg)
    arch_names = list(cfg.get("architectures") or [])
    label = name or str(cfg.get("_name_or_path") or (arch_names[0] if arch_names else mt or "?"))
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").replace("torch.", "")
    max_pos = cfg.get("max_position_embeddings")
    max_pos = int(max_pos) if max_pos is not None else None
    n_layers = _req_int(cfg, "num_hidden_layers", mt)
    heads_total = cfg.get("num_attention_heads")
    common: dict[str, Any] = dict(name=label, default_dtype=dtype, max_position_embeddings=max_pos,
                                  num_attention_heads=int(heads_total) if heads_total else None)

    if mt == "deepseek_v4" or "DeepseekV4ForCausalLM" in arch_names:
        return _dsv4_from_config(cfg, n_layers, common)

    if mt in _MLA_TYPES or (cfg.get("kv_lora_rank") and cfg.get("use_mla", True)):
        rank = _req_int(cfg, "kv_lora_rank", mt)
        rope = _req_int(cfg, "qk_rope_head_dim", mt)
        sparse = mt == "deepseek_v32" or "DeepseekV32ForCausalLM" in arch_names
        spec = LayerSpec(KIND_MLA_SPARSE if sparse else KIND_MLA, 1, rank + rope,
                         kv_lora_rank=rank, qk_rope_head_dim=rope, has_indexer=sparse)
        n_mtp = int(cfg.get("num_nextn_predict_layers") or 0)
        return ModelArch(family="deepseek-mla", num_layers=n_layers, num_kv_heads=1,
                         head_dim=rank + rope, layers=(spec,) * n_layers, num_mtp_layers=n_mtp,
                         mtp_layer=spec if n_mtp else None, **common)

    known = mt in _STANDARD_TYPES or mt in {"gemma2", "gemma3", "gemma3_text", "gpt_oss"}
    layer_types = cfg.get("layer_types")
    if not known and not layer_types:
        raise UnknownArchitecture(
            f"unsupported architecture: model_type={mt or None!r}, architectures={arch_names}; "
            "supported: llama, mistral, mixtral, qwen2(_moe), qwen3(_moe), phi3, gemma2, gemma3, "
            "gpt_oss, deepseek_v2/v3/v32/v4, or any config with a layer_types list"
        )
    kv_heads, head_dim = _heads_and_dim(cfg, mt)
    window = cfg.get("sliding_window")
    window = int(window) if window else None
    full = LayerSpec(KIND_FULL, kv_heads, head_dim)

    def swa() -> LayerSpec:
        if not window:
            raise UnknownArchitecture(f"model_type {mt!r} needs a sliding_window size")
        return LayerSpec(KIND_SLIDING, kv_heads, head_dim, sliding_window=window)

    if layer_types:
        if len(layer_types) < n_layers:
            raise UnknownArchitecture(
                f"layer_types has {len(layer_types)} entries for {n_layers} layers"
            )
        state = _linear_attention_state_bytes(cfg)
        layers = _layers_from_types(layer_types[:n_layers], kv_heads, head_dim, window, mt, state)
        family = {"gpt_oss": "gpt-oss", "gemma2": "gemma2", "gemma3": "gemma3",
                  "gemma3_text": "gemma3"}.get(mt, _STANDARD_TYPES.get(mt, "generic"))
    elif mt == "gemma2":
        layers = [swa() if i % 2 == 0 else full for i in range(n_layers)]
        family = "gemma2"
    elif mt in ("gemma3", "gemma3_text"):
        pattern = int(cfg.get("sliding_window_pattern") or 6)
        layers = [full if (i + 1) % pattern == 0 else swa() for i in range(n_layers)]
        family = "gemma3"
    elif mt == "gpt_oss":
        layers = [swa() if i % 2 == 0 else full for i in range(n_layers)]
        family = "gpt-oss"
    elif mt in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        if cfg.get("use_sliding_window") and window:
            first = int(cfg.get("max_window_layers") or 0)
            layers = [swa() if i >= first else full for i in range(n_layers)]
        else:
            layers = [full] * n_layers
        family = _STANDARD_TYPES[mt]
    else:  # llama, mistral, mixtral, phi3
        layers = [swa() if window else full for _ in range(n_layers)]
        family = _STANDARD_TYPES[mt]
    return ModelArch(family=family, num_layers=n_layers, num_kv_heads=kv_heads,
                     head_dim=head_dim, layers=tuple(layers), **common)


def _dsv4_from_config(cfg: Mapping[str, Any], n_layers: int, common: dict) -> ModelArch:
    ratios = cfg.get("compress_ratios")
    if not ratios or len(ratios) < n_layers:
        raise UnknownArchitecture(
            "DeepSeek-V4 config needs a compress_ratios list with one entry per layer"
        )
    window = int(cfg.get("sliding_window") or cfg.get("window_size") or 128)
    head_dim = int(cfg.get("head_dim") or 512)
    rope = int(cfg.get("qk_rope_head_dim") or 64)

    def spec(ratio: int) -> LayerSpec:
        ratio = int(ratio)
        return LayerSpec(KIND_DSV4, 1, head_dim, sliding_window=window, kv_lora_rank=head_dim - rope,
                         qk_rope_head_dim=rope, compress_ratio=ratio, has_indexer=ratio == 4)

    layers = tuple(spec(r) for r in ratios[:n_layers])
    n_mtp = int(cfg.get("num_nextn_predict_layers") or 0)
    mtp_ratio = ratios[n_layers] if len(ratios) > n_layers else 0
    return ModelArch(family="deepseek-v4", num_layers=n_layers, num_kv_heads=1, head_dim=head_dim,
                     layers=layers, num_mtp_layers=n_mtp, mtp_layer=spec(mtp_ratio) if n_mtp else None,
                     auto_kv_cache_dtype="fp8_ds_mla", **common)


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """Read a local ``config.json`` (a file, or a model directory containing one). Never network."""
    from pathlib import Path  # here: a small analyze never imports pathlib (with urllib.parse ~3 ms)

    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    with p.open("r", encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise UnknownArchitecture(f"{p}: not a JSON object")
    return data


def load_hf_config(path: str | Path, name: str | None = None) -> ModelArch:
    """:func:`from_hf_config` of a local ``config.json`` file or model directory.

    The model is named ``name``, else the directory name.
    """
    from pathlib import Path

    p = Path(path)
    label = name or (p.name if p.is_dir() else p.parent.name) or str(p)
    return from_hf_config(read_hf_config(p), name=label)


# ---------------------------------------------------------------------------------------------
# Catalogue and name lookup
# ---------------------------------------------------------------------------------------------

_DROP_TOKENS = {
    "instruct", "chat", "it", "hf", "base", "fp8", "fp16", "bf16", "awq", "gptq", "int4",
    "int8", "w4a16", "w8a8", "w8a16", "w4a8", "dynamic", "static", "quantized", "gguf", "mlx",
    "4bit", "8bit", "bnb", "nf4", "mxfp4", "nvfp4", "fp4", "marlin", "exl2", "latest",
    "thinking", "turbo",
}
_DATE_TOKEN = recache.compile(r"^\d{4}$")
_HF_CACHE = recache.compile(r"models--[^/\\]+--([^/\\]+)")
_DISTILL_QWEN = recache.compile(r"^deepseek-r1-distill-qwen-(\d+(?:\.\d+)?)b$")
_DISTILL_LLAMA = recache.compile(r"^deepseek-r1-distill-llama-(\d+)b$")


def normalise_model_name(name: str) -> str:
    """Normalise a logged model name or path to a lookup key.

    Takes the basename (or the repo name of an HF cache path ``models--org--name``), lower-cases
    it, turns ``___`` (ModelScope's escaped dot) into ``.``, ``_``/spaces/``:`` into ``-``, and
    drops suffix tokens such as ``Instruct``, ``Chat``, ``it``, ``FP8``, ``AWQ``, ``GPTQ``,
    ``Int4``, ``bnb``/``4bit``, ``Base`` and 4-digit date tokens (``0528``), plus a leading
    ``Meta-`` before ``Llama``.  ``meta-llama/Meta-Llama-3.1-8B-Instruct`` → ``llama-3.1-8b``.
    """
    text = str(name).strip().strip("'\"")
    m = _HF_CACHE.search(text)
    if m:
        text = m.group(1)
    else:
        text = recache.compile(r"[/\\]").split(text.rstrip("/\\"))[-1]
    text = text.lower().replace("___", ".")
    text = recache.compile(r"[_\s:]+").sub("-", text)
    tokens = [t for t in text.split("-") if t]
    kept = [t for t in tokens if t not in _DROP_TOKENS and not _DATE_TOKEN.match(t)]
    if len(kept) > 1 and kept[0] == "meta" and kept[1].startswith("llama"):
        kept = kept[1:]
    return "-".join(kept)


def _data_text(filename: str) -> str:
    return pkgdata.read_text("data", filename)


@lru_cache(maxsize=1)
def _catalogue_items() -> tuple[dict[str, Any], ...]:
    """The ``[[models]]`` tables of ``kvlogdiag/data/models.toml``, as parsed."""
    from kvlogdiag import tomlcache

    data = tomlcache.loads(_data_text("models.toml"), remember=True)  # parsed once, then read back as JSON
    tomlcache.flush()
    return tuple(data.get("models", []))


def _aliases(item: dict[str, Any]) -> tuple[str, ...]:
    aliases = {normalise_model_name(item["name"])}
    aliases.update(normalise_model_name(a) for a in item.get("aliases", ()))
    return tuple(sorted(aliases))


@lru_cache(maxsize=None)
def _entry(index: int) -> CatalogueEntry:
    """Entry ``index`` of the catalogue, built once (`catalogue_entries` and `lookup_model` share it)."""
    item = _catalogue_items()[index]
    name = item["name"]
    verified = bool(item.get("verified", False))
    source = str(item.get("source", ""))
    arch = from_hf_config(item["config"], name=name)
    notes = tuple(item.get("notes", ()))
    arch = ModelArch(**{**arch.__dict__, "verified": verified, "source": source,
                        "notes": notes})
    return CatalogueEntry(name, _aliases(item), verified, source, arch)


@lru_cache(maxsize=1)
def catalogue_entries() -> tuple[CatalogueEntry, ...]:
    """All entries of the built-in catalogue ``kvlogdiag/data/models.toml``."""
    return tuple(_entry(i) for i in range(len(_catalogue_items())))


@lru_cache(maxsize=1)
def _alias_index() -> dict[str, int]:
    """Lookup key → the first catalogue entry (in file order) with that name or alias: `lookup_model` builds only
    the entry a log names (building all ~25 cost ~1 ms of every small ``analyze``: docs/performance.md, "Session 9:
    small-analyze start-up")."""
    index: dict[str, int] = {}
    for i, item in enumerate(_catalogue_items()):
        for alias in _aliases(item):
            index.setdefault(alias, i)
    return index


def load_catalogue() -> dict[str, ModelArch]:
    """The built-in catalogue as ``{name: ModelArch}``."""
    return {e.name: e.arch for e in catalogue_entries()}


def lookup_model(name_from_log: str) -> ModelArch | None:
    """Match a logged model name or path to a catalogue entry, or ``None``.

    Matching is on :func:`normalise_model_name` equality with an entry's name or aliases, so
    ``Qwen3-VL-32B`` does not match ``Qwen3-32B``.  ``DeepSeek-R1-Distill-Qwen-NB`` maps to the
    Qwen2.5 entry of that size and ``DeepSeek-R1-Distill-Llama-NB`` to the Llama entry (the
    distills are Qwen2/Llama architectures, not MLA).
    """
    if not name_from_log:
        return None
    key = normalise_model_name(name_from_log)
    m = _DISTILL_QWEN.match(key)
    if m:
        key = f"qwen2.5-{m.group(1)}b"
    m = _DISTILL_LLAMA.match(key)
    if m:
        key = "llama-3.3-70b" if m.group(1) == "70" else f"llama-3.1-{m.group(1)}b"
    i = _alias_index().get(key)  # the first entry whose aliases hold the key, as a scan of catalogue_entries()
    return None if i is None else _entry(i).arch


# ---------------------------------------------------------------------------------------------
# Expected KV bytes
# ---------------------------------------------------------------------------------------------


class _LayerCost:
    """What one layer adds per token: bytes at full context, bytes in a window, and the window."""

    __slots__ = ("context", "window_bytes", "window", "state")

    def __init__(self, context: float = 0.0, window_bytes: float = 0.0, window: int | None = None,
                 state: float = 0.0) -> None:
        self.context = context  # bytes per context token at full length
        self.window_bytes = window_bytes  # bytes per token of a windowed cache
        self.window = window
        self.state = state  # bytes per request


def _layer_cost(spec: LayerSpec, tp: int, dt: int, kv_dtype: str, platform: str,
                notes: set[str]) -> _LayerCost:
    if spec.kind in (KIND_FULL, KIND_SLIDING):
        per = 2 * max(1, spec.num_kv_heads // tp) * spec.head_dim * dt
        if spec.kind == KIND_FULL:
            return _LayerCost(context=per)
        return _LayerCost(window_bytes=per, window=spec.sliding_window)
    if spec.kind == KIND_MLA:
        if kv_dtype == "fp8_ds_mla":
            return _LayerCost(context=DSV32_FP8_DS_MLA_BYTES)
        return _LayerCost(context=(spec.kv_lora_rank + spec.qk_rope_head_dim) * dt)
    if spec.kind == KIND_MLA_SPARSE:
        main = (DSV32_FP8_DS_MLA_BYTES if kv_dtype == "fp8_ds_mla"
                else (spec.kv_lora_rank + spec.qk_rope_head_dim) * dt)
        return _LayerCost(context=main + DSV32_INDEXER_BYTES)
    if spec.kind == KIND_DSV4:
        if platform == "npu":
            state, indexer = DSV4_BF16_STATE_BYTES, DSV4_ASCEND_INDEXER_BYTES
            notes.add("DeepSeek-V4 on vLLM-Ascend A2/A3: bf16 main cache (1024 B/state), int8 indexer "
                      "+ fp16 scale (130 B/state) — vllm-ascend 0.23.0.post1 models/deepseek_v4.py; "
                      "A5 (fp8 cache) is not modelled")
        elif kv_dtype == "fp8_ds_mla" or dt == 1:
            state, indexer = DSV4_FP8_DS_MLA_STATE_BYTES, DSV4_INDEXER_FP8_BYTES
        else:
            state, indexer = DSV4_BF16_STATE_BYTES, DSV4_INDEXER_FP8_BYTES
        ctx = 0.0
        if spec.compress_ratio > 0:
            ctx = state / spec.compress_ratio
            if spec.has_indexer:
                ctx += indexer / spec.compress_ratio
        return _LayerCost(context=ctx, window_bytes=state, window=spec.sliding_window)
    if spec.kind == KIND_MAMBA:
        if spec.state_bytes_per_request is None:
            notes.add("SSM/linear-attention state size unknown: not included in "
                      "fixed_bytes_per_request")
            return _LayerCost()
        notes.add("SSM/linear-attention state per request is an estimate (2-byte state, "
                  "divided by TP); unverified")
        return _LayerCost(state=spec.state_bytes_per_request / tp)
    raise UnknownArchitecture(f"unknown layer kind {spec.kind!r}")


def _resolve_platform(platform: str | None) -> str:
    p = (platform or "cuda").strip().lower()
    if p in ("npu", "ascend", "vllm-ascend", "vllm_ascend"):
        return "npu"
    return p


def expected_kv(
    arch: ModelArch,
    tp: int = 1,
    pp: int = 1,
    kv_cache_dtype: str = "auto",
    hma_enabled: bool | None = None,
    max_model_len: int | None = None,
    max_num_batched_tokens: int | None = None,
    block_size: int | None = None,
    vllm_version: str | None = None,
    platform: str = "cuda",
    *,
    include_mtp: bool = False,
    concurrent_batches: int | None = None,
) -> ExpectedKV:
    """Expected per-rank KV cost of ``arch`` under a serving configuration.

    ``hma_enabled`` ``None`` = let vLLM decide: on for ≥0.9.1 (off before 0.9.1, and on
    vLLM-Ascend before 0.10.2); a KV connector may turn it off (§6) — pass ``False`` if the log
    says so.  ``block_size`` ``None`` = 16 (CUDA), 64 for MLA / DeepSeek-V4 on CUDA, 128 on
    vLLM-Ascend (``platform="npu"``).  ``include_mtp`` adds the MTP layer(s) (MTP / EAGLE
    drafting with the model's own next-token layers; placed on the last PP stage).
    ``concurrent_batches`` multiplies ``max_num_batched_tokens`` for the sliding-window in-flight
    reservation (≥0.26: 2 with async scheduling, PP size with PP); default 1 (PP size with PP
    ≥0.26).  See the module docstring for the formulas.
    """
    if tp < 1 or pp < 1:
        raise ValueError("tp and pp must be >= 1")
    notes: set[str] = set()
    assumptions: list[str] = []
    platform = _resolve_platform(platform)
    version = parse_vllm_version(vllm_version)
    verified = arch.verified
    if not arch.verified:
        assumptions.append(f"{arch.name}: config facts not cross-checked ({arch.source or 'no source'})")

    # KV cache dtype
    kv_name = _norm_dtype(kv_cache_dtype or "auto")
    if kv_name == "auto" and arch.auto_kv_cache_dtype and platform != "npu":
        kv_name = arch.auto_kv_cache_dtype
        assumptions.append(f"kv_cache_dtype auto → {kv_name} (forced for {arch.family} on CUDA)")
    dt = kv_dtype_bytes(kv_name, arch.default_dtype)
    if kv_name == "auto":
        assumptions.append(f"kv_cache_dtype auto = model dtype {arch.default_dtype} → {dt} B/element")

    # block size
    mla_like = arch.family in ("deepseek-mla", "deepseek-v4")
    if block_size is None:
        if platform == "npu":
            block_size = 128
        elif mla_like:
            block_size = 64
        else:
            block_size = 16
        assumptions.append(f"block_size {block_size} assumed (platform default)")
    if block_size < 1:
        raise ValueError("block_size must be >= 1")

    # in-flight tokens for sliding-window reservations
    if max_num_batched_tokens is None:
        batched = DEFAULT_IN_FLIGHT_TOKENS
        batched_note = (f"max_num_batched_tokens unknown: {DEFAULT_IN_FLIGHT_TOKENS} assumed "
                        "for sliding-window in-flight tokens")
    else:
        batched = int(max_num_batched_tokens)
        batched_note = ""
    if concurrent_batches is None:
        concurrent_batches = pp if (pp > 1 and version is not None and version >= (0, 26, 0)) else 1
    in_flight = batched * max(1, int(concurrent_batches))

    # layers and PP stages
    layers = list(arch.layers)
    ranges = pp_layer_ranges(arch.num_layers, pp)
    stage_layers = [layers[a:b] for a, b in ranges]
    if include_mtp and arch.num_mtp_layers and arch.mtp_layer is not None:
        stage_layers[-1] = stage_layers[-1] + [arch.mtp_layer] * arch.num_mtp_layers
        assumptions.append(f"{arch.num_mtp_layers} MTP layer(s) included (on the last PP stage)")
    elif include_mtp and not arch.num_mtp_layers:
        assumptions.append("include_mtp requested but the model has no MTP layers")
    if pp > 1:
        sizes = [b - a for a, b in ranges]
        assumptions.append(
            f"PP={pp}: layers split {sizes} (vLLM get_pp_indices; largest stage = "
            f"ceil({arch.num_layers}/{pp}) = {_cdiv(arch.num_layers, pp)} layers); figures are for "
            "the stage with the most bytes per token, which bounds N; Z in the log comes from "
            "node-local rank 0, so Z/N can differ between stages"
        )

    # hybrid manager
    kinds = set(arch.kind_counts)
    hybrid = arch.is_hybrid
    if hma_enabled is None:
        if version is not None and version < (0, 9, 1):
            hma = False
            if hybrid:
                assumptions.append("vLLM < 0.9.1: no hybrid KV cache manager (sliding layers full)")
        elif platform == "npu" and version is not None and version < (0, 10, 2):
            hma = False
            if hybrid:
                assumptions.append("vLLM-Ascend before v0.10.2rc1: hybrid manager unsupported (off)")
        else:
            hma = True
            if hybrid:
                assumptions.append("hybrid KV cache manager assumed ON (vLLM default); a KV "
                                   "connector or --disable-hybrid-kv-cache-manager turns it off")
    else:
        hma = bool(hma_enabled)
        if hma and version is not None and version < (0, 9, 1):
            hma = False
            assumptions.append("hma_enabled ignored: the hybrid manager exists only from 0.9.1")
    if hybrid and not hma and KIND_MAMBA in kinds:
        assumptions.append("SSM/Mamba hybrids need the hybrid manager; vLLM fails to start "
                           "without it")
    if hybrid and not hma and KIND_DSV4 in kinds:
        assumptions.append("DeepSeek-V4 with HMA off: sliding/state caches assumed promoted to "
                           "full length (+~25 KB/token); startup may instead fail (unverified)")
        verified = False

    tp_divides_heads = None if not arch.num_attention_heads else arch.num_attention_heads % tp == 0
    if tp_divides_heads is False:
        # vllm 0.23.0 vllm/config/model.py:1185-1196 ModelConfig.verify_with_parallel_config
        assumptions.append(f"TP={tp} does not divide the {arch.num_attention_heads} attention heads: vLLM refuses to "
                           f"start ('Total number of attention heads ({arch.num_attention_heads}) must be divisible "
                           f"by tensor parallel size ({tp})'); the figures are for a layout that cannot run")
        verified = False
    if tp > arch.num_kv_heads and kinds & {KIND_FULL, KIND_SLIDING}:
        assumptions.append(f"TP={tp} > {arch.num_kv_heads} KV heads: heads replicated, 1 per rank")
    if kinds & {KIND_MLA, KIND_MLA_SPARSE, KIND_DSV4} and tp > 1:
        assumptions.append("MLA / DeepSeek-V4 latent caches are replicated on every TP rank "
                           "(not divided by TP)")

    stage_results = []
    for stage in stage_layers:
        costs = [_layer_cost(s, tp, dt, kv_name, platform, notes) for s in stage]
        ctx = sum(c.context for c in costs)
        win = sum(c.window_bytes for c in costs)
        state = sum(c.state for c in costs)
        windows: dict[int, float] = {}
        for c in costs:
            if c.window_bytes and c.window:
                windows[c.window] = windows.get(c.window, 0.0) + c.window_bytes
        hma_off = ctx + win
        window_is_fixed = bool(windows) and (hma or not hybrid)
        if window_is_fixed:
            bpt = ctx
            terms = tuple(sorted(windows.items()))
            fixed = sum(per * swa_reserved_tokens(w, in_flight, block_size, max_model_len)
                        for w, per in terms) + state
        else:
            bpt = hma_off
            terms = ()
            fixed = state
        breakdown: dict[str, float] = {}
        for s, c in zip(stage, costs):
            if c.context:
                breakdown[s.kind] = breakdown.get(s.kind, 0.0) + c.context
            if c.window_bytes:
                key = "sliding" if s.kind == KIND_SLIDING else f"{s.kind}_window"
                breakdown[key] = breakdown.get(key, 0.0) + c.window_bytes
        stage_results.append((bpt, fixed, hma_off, terms, state, breakdown, window_is_fixed))
    best = max(range(len(stage_results)), key=lambda i: (stage_results[i][0], stage_results[i][1]))
    bpt, fixed, hma_off, terms, state, breakdown, uses_window = stage_results[best]
    if uses_window:
        if batched_note:
            assumptions.append(batched_note)
        for w, _per in terms:
            tokens = swa_reserved_tokens(w, in_flight, block_size, max_model_len)
            assumptions.append(
                f"window {w}: each request reserves (cdiv(min({w}-1+{in_flight}, L), {block_size})"
                f"+1)×{block_size} = {tokens} tokens in those layers"
            )
    if hybrid and not uses_window and KIND_SLIDING in kinds:
        assumptions.append("hybrid manager off: sliding-window layers stored at full length")
    if kinds == {KIND_SLIDING}:
        assumptions.append("every layer is sliding-window: the spec stays windowed even with "
                           "HMA off (uniform spec); the pool is bounded per request by the window")

    # what Z·2^30/N should read
    log_figure: float | None
    version_label = ".".join(map(str, version)) if version else None
    if version is None:
        assumptions.append("vLLM version unknown: log figure assumes ≥0.21 semantics "
                           "(N = max_concurrency × max_model_len)")
    if version is not None and version < (0, 21, 0):
        if KIND_DSV4 in kinds:
            log_figure = None
            assumptions.append("DeepSeek-V4 with vLLM 0.20.x: the old N formula makes Z/N "
                               "meaningless (§12.1)")
        else:
            log_figure = hma_off
            if hybrid and hma:
                padded = _grouping_padded_layers(arch)
                assumptions.append(
                    "≤0.20 with the hybrid manager on: N divides by the number of KV-cache "
                    "groups, so Z/N ≈ the all-layers (HMA-off) figure"
                    + (f"; equal-size grouping may pad it up to ~{padded}/{arch.num_layers} of "
                       "that" if padded and padded != arch.num_layers else "")
                )
    else:
        if max_model_len:
            padded_len = _cdiv(max_model_len, block_size) * block_size
            log_figure = (bpt * padded_len + fixed) / max_model_len
        elif fixed:
            log_figure = None
            assumptions.append("≥0.21 log figure of a hybrid model depends on max_model_len: "
                               "pass max_model_len")
        else:
            log_figure = bpt
    assumptions.extend(sorted(notes))
    if any("ESTIMATE" in n or "unverified" in n for n in notes):
        verified = False

    return ExpectedKV(
        model=arch.name, tp=tp, pp=pp, kv_cache_dtype=kv_name, dtype_bytes=dt,
        block_size=block_size, in_flight_tokens=in_flight, hma_enabled=hma,
        bytes_per_token=bpt, fixed_bytes_per_request=fixed, hma_off_bytes_per_token=hma_off,
        log_figure=log_figure, per_stage_bytes_per_token=tuple(r[0] for r in stage_results),
        breakdown=breakdown, window_terms=terms, state_bytes_per_request=state,
        max_model_len=max_model_len, vllm_version=version_label or vllm_version,
        assumptions=assumptions, verified=verified, tp_divides_heads=tp_divides_heads,
    )


def _grouping_padded_layers(arch: ModelArch) -> int | None:
    """Layer slots after vLLM's equal-size KV-cache grouping (group size = smallest kind count)."""
    counts = [n for k, n in arch.kind_counts.items() if k in (KIND_FULL, KIND_SLIDING)]
    if len(counts) < 2:
        return None
    g = min(counts)
    return sum(_cdiv(n, g) * g for n in counts)


# ---------------------------------------------------------------------------------------------
# Mismatch explanation
# ---------------------------------------------------------------------------------------------


def explain_mismatch(
    measured: float,
    expected: ExpectedKV,
    *,
    tolerance: float = 0.25,
    close: float = 0.10,
) -> list[str]:
    """Likely causes when a measured ``Z·2**30/N`` differs from the expectation.

    Compares with ``expected.log_figure`` (else ``bytes_per_token``).  Within 3 %: block padding
    and Z's 2-decimal rounding.  Within ``tolerance`` (25 %): minor causes.  Beyond it, each ratio
    that is within ``close`` (10 %) of a known factor is reported: ≈2 (bf16 cache where fp8 was
    expected, or TP half the assumed), ≈0.5 (fp8 cache where bf16 was expected, or a
    double-counted device: N counted over two devices / DCP·PCP multiplying N), ≈ HMA-off/expected
    (hybrid manager off), ≈ expected/HMA-off (hybrid manager on, ≥0.21 figure), ≈TP (TP misread or
    KV heads replicated), ≈1/TP.
    """
    reference = expected.log_figure if expected.log_figure else expected.bytes_per_token
    if not reference or reference <= 0 or measured <= 0:
        return ["cannot compare: expected or measured bytes per token is not positive"]
    ratio = measured / reference
    dev = abs(ratio - 1.0)
    where = f"measured {measured:,.0f} B/token vs expected {reference:,.0f} (ratio {ratio:.3f})"
    if dev < 0.03:
        return [f"{where}: within 3 % — block padding (cdiv to whole blocks) and the 2-decimal "
                "rounding of the GiB figure explain the residual"]
    if dev <= tolerance:
        return [f"{where}: within {tolerance:.0%} — likely max_model_len/max_num_batched_tokens "
                "(the ≥0.21 figure of hybrid models depends on them), KV-cache group padding, or "
                "PP stages with different layer counts"]

    def near(target: float) -> bool:
        return target > 0 and abs(ratio / target - 1.0) <= close

    causes: list[str] = []
    if near(2.0):
        causes.append(f"{where} ≈ 2: KV cache stored in bf16/fp16 while fp8 was expected "
                      "(check --kv-cache-dtype), or the real TP is half the assumed TP")
    if near(0.5):
        causes.append(f"{where} ≈ 0.5: fp8 KV cache in use while bf16 was expected, or a "
                      "double-counted device (N counted over two devices/ranks, DCP/PCP "
                      "multiplying N, or TP twice the assumed)")
    hma_off = expected.hma_off_bytes_per_token
    if hma_off and abs(hma_off - reference) / reference > 0.03:
        if near(hma_off / reference):
            causes.append(f"{where} ≈ HMA-off/expected = {hma_off / reference:.2f}: hybrid KV cache "
                          "manager is off (sliding-window layers stored at full length), or the "
                          "vLLM version is ≤0.20 (old N formula)")
    if expected.bytes_per_token and hma_off and expected.bytes_per_token < hma_off * 0.97:
        low = (expected.bytes_per_token + (expected.fixed_bytes_per_request /
               expected.max_model_len if expected.max_model_len else 0.0)) / reference
        if abs(low - 1.0) > 0.03 and near(low):
            causes.append(f"{where} ≈ {low:.2f}: the hybrid manager is on with ≥0.21 semantics "
                          "(N = concurrency × max_model_len), so only full-attention layers scale "
                          "with N — check the vLLM version")
    tp = expected.tp
    if tp > 1 and near(float(tp)):
        causes.append(f"{where} ≈ TP={tp}: TP misread (the figure looks like TP=1) or KV heads "
                      "replicated across ranks (TP > num_kv_heads), or an MLA model mistaken for "
                      "a GQA one")
    if tp > 1 and near(1.0 / tp):
        causes.append(f"{where} ≈ 1/TP: the expected figure was computed for too small a TP, or N "
                      "is summed over all TP ranks")
    if not causes:
        causes.append(f"{where}: no single known factor — check the model identification, "
                      "kv_cache_dtype, TP/PP, num_gpu_blocks_override and --kv-cache-memory-bytes")
    return causes
