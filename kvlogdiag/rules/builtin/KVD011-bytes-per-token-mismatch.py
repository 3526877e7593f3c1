"""KVD011's figures: the bytes per token the model catalogue predicts for this run, and the likely cause of a gap.

`derive/architecture.py` computes the expected ``Z·2^30/N`` figure from the model's layers and the
run's TP/PP/dtype/HMA, and `explain_mismatch` names the known factor a ratio matches. The tolerance
and every sentence of the finding are in the rule's TOML.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from kvlogdiag import recache
from kvlogdiag.derive.architecture import expected_kv, explain_mismatch, lookup_model
from kvlogdiag.extract.facts import LogFacts

CODE = "KVD011"
NAMES = {
    "bpt_measured": "measured per-rank bytes per token compared with the catalogue (bytes_per_token, x cp size when vLLM multiplied N by it)",
    "expected_bytes_per_token": "catalogue: the Z*2^30/N figure this log should show (ExpectedKV.log_figure); null when the model is not in the catalogue or the figure cannot be predicted",
    "bpt_ratio": "bpt_measured / expected_bytes_per_token",
    "bpt_mismatch_cause": "first likely cause from architecture.explain_mismatch (text)",
    "bpt_expected_model": "catalogue entry the logged model name matched",
    "bpt_expected_assumed": "the catalogue figure had to assume max_num_batched_tokens (sliding-window reservation of a hybrid model): it is only an estimate",
    "bpt_expected_verified": "false when the catalogue figure rests on unverified config facts or estimates",
}
# settings the expected figure depends on: when the run logs two values for one, there is no single expectation
_RELEVANT = {"model", "tensor_parallel_size", "pipeline_parallel_size", "kv_cache_dtype", "max_model_len", "block_size"}


def provide(facts: LogFacts, analysis: dict, ctx: Mapping[str, Any], put: Callable[..., None]) -> None:
    measured = ctx.get("bytes_per_token")
    cps = facts.events.get("cp_multiply")
    cp = cps[0] if cps else None
    if measured is not None and cp is not None and isinstance(cp.value, int) and cp.value > 1:
        measured = measured * cp.value
    evidence = min(facts.tokens, key=lambda f: f.value) if facts.tokens else None
    put("bpt_measured", measured, evidence)
    conflicts = analysis["config"].get("conflicts") or {}
    if not (measured and measured > 0 and ctx.get("model")) or _RELEVANT & set(conflicts):
        return
    arch = lookup_model(ctx["model"])
    if arch is None:
        return
    kvd = ctx.get("kv_cache_dtype") or ("fp8" if facts.event_count("fp8_kv_cache") else "auto")
    hd = ctx.get("hma_disabled")
    try:
        e = expected_kv(arch, tp=int(ctx.get("tp") or 1), pp=int(ctx.get("pp") or 1), kv_cache_dtype=str(kvd),
                        hma_enabled=None if hd is None else not hd, max_model_len=ctx.get("max_model_len"),
                        max_num_batched_tokens=ctx.get("max_num_batched_tokens"), block_size=ctx.get("block_size"),
                        vllm_version=ctx.get("vllm_version"), platform=ctx.get("platform") or "cuda")
    except ValueError:  # a logged setting the catalogue cannot price (e.g. an unknown kv_cache_dtype): no expectation
        return
    put("bpt_expected_model", arch.name)
    put("bpt_expected_verified", bool(e.verified))
    put("bpt_expected_assumed", any("max_num_batched_tokens unknown" in a for a in e.assumptions))
    if not (e.log_figure and e.log_figure > 0):
        return
    expected = float(e.log_figure)
    put("expected_bytes_per_token", expected)
    put("bpt_ratio", measured / expected, evidence)
    causes = explain_mismatch(measured, e)
    cause = causes[0] if causes else None
    if cause and cause.startswith("measured ") and "(ratio " in cause:
        # drop explain_mismatch's "measured X vs expected Y (ratio r)" prefix: the rule prints the figures
        cause = cause.split(")", 1)[1].lstrip(" :") or cause
        cause = recache.compile(r"^≈ [^:]*: ").sub("", cause)
    put("bpt_mismatch_cause", cause)
