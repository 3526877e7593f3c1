"""KVD018's figures: the widest spread of KV memory or bytes per token among ranks that should agree.

Grouping the ranks (per run, DP group and pipeline stage) and finding the smallest and largest figure
of each group is beyond the condition language; the threshold and the wording are in the rule's TOML.
For each spread the provider gives the percentage and both ends: value, rank and line.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from kvlogdiag.extract.facts import Fact, LogFacts

CODE = "KVD018"
GIB = 1 << 30


def _ends(prefix: str, what: str, unit: str) -> dict[str, str]:
    return {
        f"{prefix}_lo_{unit}": f"{what}: the smallest figure ({unit})",
        f"{prefix}_lo_rank": "rank of the smallest figure (null when the line has no rank prefix)",
        f"{prefix}_lo_line": "line of the smallest figure",
        f"{prefix}_hi_{unit}": f"{what}: the largest figure ({unit})",
        f"{prefix}_hi_rank": "rank of the largest figure (null when the line has no rank prefix)",
        f"{prefix}_hi_line": "line of the largest figure",
    }


NAMES = {
    "rank_kv_spread_pct": "largest spread of per-rank KV memory (Available, V0 profile, Ascend bytes) within one group (run, DP group, PP stage when known), % of the smallest",
    **_ends("rank_kv", "that group", "gib"),
    "rank_kv_lost_tokens": "KV tokens the group loses because every rank gets the smallest rank's pool: (largest - smallest GiB) x 2^30 / bytes_per_token",
    "rank_kv_spread_stage_known": "that group is one PP stage for sure (PP = 1, or PP stage in every rank prefix)",
    "dp_kv_spread_pct": "largest spread across the DP groups of one run, of their KV memory (smallest per group) or of their KV tokens, % of the smallest; the _gib or the _tokens ends say which",
    **_ends("dp_kv", "DP groups compared by KV memory", "gib"),
    **{k: v for k, v in _ends("dp_kv", "DP groups compared by KV tokens", "tokens").items() if "_rank" not in k and "_line" not in k},
    "run_bpt_spread_pct": "largest spread of bytes per token across the pairings of one run, % of the smallest",
    "run_bpt_lo_bytes": "bytes per token of the smallest pairing",
    "run_bpt_lo_rank": "rank of the smallest pairing (null when unknown)",
    "run_bpt_lo_lines": "memory/tokens lines of the smallest pairing, as 'M/T'",
    "run_bpt_hi_bytes": "bytes per token of the largest pairing",
    "run_bpt_hi_rank": "rank of the largest pairing (null when unknown)",
    "run_bpt_hi_lines": "memory/tokens lines of the largest pairing, as 'M/T'",
}

_PP_STAGE = re.compile(r"(?:^|[_ (])PP(\d+)")


def _pp_stage(rank: str | None) -> int | None:
    m = _PP_STAGE.search(rank or "")
    return int(m.group(1)) if m else None


def _spread(items: list[tuple[float, Any]]) -> tuple[float, tuple[float, Any], tuple[float, Any]] | None:
    """(spread % of the smallest, smallest item, largest item) of (value, where) items, or None."""
    vals = [(x, f) for x, f in items if isinstance(x, (int, float)) and x > 0]
    if len(vals) < 2:
        return None
    lo = min(vals, key=lambda t: t[0])
    hi = max(vals, key=lambda t: t[0])
    return (hi[0] - lo[0]) / lo[0] * 100.0, lo, hi


def provide(facts: LogFacts, analysis: dict, ctx: Mapping[str, Any], put: Callable[..., None]) -> None:
    pp = ctx.get("pp") or 1
    groups: dict[tuple, list[tuple[float, Fact]]] = {}
    for f in facts.available:
        groups.setdefault((f.run, f.dp, _pp_stage(f.rank), "available"), []).append((f.value, f))
    for f in facts.kv_budget:
        if f.value[0] in ("v0_profile", "ascend_bytes"):
            groups.setdefault((f.run, f.dp, _pp_stage(f.rank), f.value[0]), []).append((f.value[1], f))

    best = None
    for items in groups.values():
        s = _spread(items)
        if s is not None and (best is None or s[0] > best[0][0]):
            best = (s, pp == 1 or all(_pp_stage(f.rank) is not None for _, f in items))
    if best is not None:
        (pct, lo, hi), stage_known = best
        put("rank_kv_spread_pct", pct)
        for end, (x, f) in (("lo", lo), ("hi", hi)):
            put(f"rank_kv_{end}_gib", x, f)
            put(f"rank_kv_{end}_rank", f.rank)
            put(f"rank_kv_{end}_line", f.line)
        put("rank_kv_spread_stage_known", stage_known)
        bpt = ctx.get("bytes_per_token")
        put("rank_kv_lost_tokens", (hi[0] - lo[0]) * GIB / bpt if bpt else None)

    dp_best = None
    by_run: dict[int, dict[int, list[tuple[float, Fact]]]] = {}
    for (run, dp, _stage, _kind), items in groups.items():
        by_run.setdefault(run, {}).setdefault(dp, []).extend(items)
    tok_run: dict[int, dict[int, list[tuple[float, Fact]]]] = {}
    for f in facts.tokens:
        tok_run.setdefault(f.run, {}).setdefault(f.dp, []).append((f.value, f))
    for source, unit in ((by_run, "gib"), (tok_run, "tokens")):
        for per_dp in source.values():
            if len(per_dp) < 2:
                continue
            s = _spread([min(items, key=lambda t: t[0]) for items in per_dp.values()])
            if s is not None and (dp_best is None or s[0] > dp_best[0][0]):
                dp_best = (s, unit)
    if dp_best is not None:
        (pct, lo, hi), unit = dp_best
        put("dp_kv_spread_pct", pct)
        for end, (x, f) in (("lo", lo), ("hi", hi)):
            put(f"dp_kv_{end}_{unit}", x, f)
            put(f"dp_kv_{end}_rank", f.rank)
            put(f"dp_kv_{end}_line", f.line)

    bpt_best = None
    pairings: dict[int, list[tuple[float, Any]]] = {}
    for p in analysis["kv_cache"].get("bytes_per_token_by_rank") or []:
        if p.get("bytes_per_token"):
            pairings.setdefault(p.get("run", 0), []).append((p["bytes_per_token"], p))
    for pairs in pairings.values():
        spread = _spread(pairs)
        if spread is not None and (bpt_best is None or spread[0] > bpt_best[0]):
            bpt_best = spread
    if bpt_best is not None:
        pct, lo, hi = bpt_best
        put("run_bpt_spread_pct", pct)
        for end, (x, p) in (("lo", lo), ("hi", hi)):
            put(f"run_bpt_{end}_bytes", x)
            put(f"run_bpt_{end}_rank", p.get("rank") or None)
            put(f"run_bpt_{end}_lines", f"{p.get('memory_line')}/{p.get('tokens_line')}")
