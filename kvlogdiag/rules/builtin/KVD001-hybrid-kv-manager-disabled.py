"""KVD001's figures: the per-rank KV bytes per token of the model with the hybrid KV cache manager on and off.

The built-in model catalogue (`derive/architecture.py`) predicts both; the rule's TOML decides when
the difference matters and says so.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from kvlogdiag.derive.architecture import expected_kv, lookup_model
from kvlogdiag.extract.facts import LogFacts

CODE = "KVD001"
NAMES = {
    "hma_on_bpt_expected": "catalogue: per-rank KV bytes per context token with the hybrid KV cache manager ON (full/compressed layers only; SWA layers cost a fixed per-request window); null if unknown",
    "hma_off_bpt_expected": "catalogue: per-rank KV bytes per context token with the hybrid KV cache manager OFF (every layer full length); null if unknown",
}


def provide(facts: LogFacts, analysis: dict, ctx: Mapping[str, Any], put: Callable[..., None]) -> None:
    model = ctx.get("model")
    arch = lookup_model(model) if model else None
    if arch is None or not arch.is_hybrid:
        return
    try:
        e = expected_kv(arch, tp=int(ctx.get("tp") or 1), pp=int(ctx.get("pp") or 1),
                        kv_cache_dtype=str(ctx.get("kv_cache_dtype") or "auto"), hma_enabled=True,
                        max_model_len=ctx.get("max_model_len"), max_num_batched_tokens=ctx.get("max_num_batched_tokens"),
                        block_size=ctx.get("block_size"), vllm_version=ctx.get("vllm_version"),
                        platform=ctx.get("platform") or "cuda")
    except ValueError:  # a logged setting the catalogue cannot price (e.g. an unknown kv_cache_dtype): no figure
        return
    put("hma_on_bpt_expected", e.bytes_per_token)
    put("hma_off_bpt_expected", e.hma_off_bytes_per_token)
