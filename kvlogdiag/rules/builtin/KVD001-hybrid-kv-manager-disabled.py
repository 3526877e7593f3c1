"""KVD001's figures: the per-rank KV bytes per token of the model with the hybrid KV cache manager on and off.

The built-in model catalogue (`derive/architecture.py`) predicts both; the rule's TOML decides when
the difference matters and says so. The insufficient-KV start-up error also implies a bytes per
token (needed GiB x 2**30 / max seq len, `bytes_per_token_from_error` of the analysis): when it is
the HMA-off figure and not the HMA-on one, the hybrid manager was off even if no line says so.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from kvlogdiag.derive.architecture import expected_kv, lookup_model
from kvlogdiag.extract.facts import LogFacts

CODE = "KVD001"
NAMES = {
    "hma_on_bpt_expected": "catalogue: per-rank KV bytes per context token with the hybrid KV cache manager ON (full/compressed layers only; SWA layers cost a fixed per-request window); null if unknown",
    "hma_off_bpt_expected": "catalogue: per-rank KV bytes per context token with the hybrid KV cache manager OFF (every layer full length); null if unknown",
    "error_bpt": "bytes per token implied by vLLM's insufficient-KV error (needed GiB x 2**30 / max seq len); null without that error",
    "error_bpt_hma_on_expected": "catalogue: what that error's figure would be with HMA on (one max-seq-len request incl. the sliding-window reservation, / its length)",
    "error_says_hma_off": "the error's figure is within 2 % of the HMA-off figure and not within 2 % of the HMA-on one: the hybrid manager was off",
}
#: the error prints GiB with 2 decimals; 2 % covers that rounding at any size the check reaches
_ERROR_MATCH = 0.02


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
    bpt_err = (analysis.get("kv_cache") or {}).get("bytes_per_token_from_error")
    length = ctx.get("error_max_seq_len")
    if not bpt_err or not length:
        return
    put("error_bpt", bpt_err)
    on = e.request_bytes(int(length)) / int(length)
    put("error_bpt_hma_on_expected", on)
    off = e.hma_off_bytes_per_token
    put("error_says_hma_off", bool(off) and abs(bpt_err / off - 1) <= _ERROR_MATCH and abs(bpt_err / on - 1) > _ERROR_MATCH,
        facts.insufficient_kv[0] if facts.insufficient_kv else None)
