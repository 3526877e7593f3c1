"""KVD018's figures: the widest spread of KV memory or bytes per token among ranks that should agree.

Grouping the ranks (per run, DP group and pipeline stage) and finding the smallest and largest figure
of each group is beyond the condition language; the threshold and the wording are in the rule's TOML.
For each spread the provider gives the percentage and both ends: value, rank and line.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from kvlogdiag import recache
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

_PP_STAGE = recache.compile(r"(?:^|[_ (])PP(\d+)")


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


class _Ends:
    """The `_spread` of (value, where) items added one at a time, and their first smallest item: a group
    of ranks keeps O(1), however many lines it has (issue 18, memory O(ranks))."""

    __slots__ = ("n", "lo", "hi", "low")

    def __init__(self) -> None:
        self.n = 0
        self.lo: tuple[float, Any] | None = None
        self.hi: tuple[float, Any] | None = None
        self.low: tuple[float, Any] | None = None  # min(items, key=value): the first smallest, any sign

    def add(self, x: Any, where: Any) -> None:
        if self.low is None or x < self.low[0]:
            self.low = (x, where)
        if isinstance(x, (int, float)) and x > 0:
            self.n += 1
            if self.lo is None or x < self.lo[0]:
                self.lo = (x, where)
            if self.hi is None or x > self.hi[0]:
                self.hi = (x, where)

    def spread(self) -> tuple[float, tuple[float, Any], tuple[float, Any]] | None:
        """What `_spread` gives for the items added (the first smallest and first largest positive one)."""
        if self.n < 2 or self.lo is None or self.hi is None:
            return None
        return (self.hi[0] - self.lo[0]) / self.lo[0] * 100.0, self.lo, self.hi


def provide(facts: LogFacts, analysis: dict, ctx: Mapping[str, Any], put: Callable[..., None]) -> None:
    pp = ctx.get("pp") or 1
    groups: dict[tuple, _Ends] = {}
    for f in facts.available:
        groups.setdefault((f.run, f.dp, _pp_stage(f.rank), "available"), _Ends()).add(f.value, f)
    for f in facts.kv_budget:
        if f.value[0] in ("v0_profile", "ascend_bytes"):
            groups.setdefault((f.run, f.dp, _pp_stage(f.rank), f.value[0]), _Ends()).add(f.value[1], f)

    best = None
    for key, ends in groups.items():
        s = ends.spread()
        if s is not None and (best is None or s[0] > best[0][0]):
            best = (s, pp == 1 or key[2] is not None)  # every item of a group has the group's PP stage
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
    # the first smallest figure of each DP group of a run, over its groups in order (= min over their items)
    by_run: dict[int, dict[int, tuple[float, Fact]]] = {}
    for (run, dp, _stage, _kind), ends in groups.items():
        per_dp = by_run.setdefault(run, {})
        low = ends.low
        if low is not None and (dp not in per_dp or low[0] < per_dp[dp][0]):
            per_dp[dp] = low
    tok_ends: dict[int, dict[int, _Ends]] = {}
    for f in facts.tokens:
        tok_ends.setdefault(f.run, {}).setdefault(f.dp, _Ends()).add(f.value, f)
    tok_run = {run: {dp: e.low for dp, e in per_dp.items() if e.low is not None} for run, per_dp in tok_ends.items()}
    for source, unit in ((by_run, "gib"), (tok_run, "tokens")):
        for lows in source.values():
            if len(lows) < 2:
                continue
            s = _spread(list(lows.values()))
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
    pairings: dict[int, _Ends] = {}
    for p in analysis["kv_cache"].get("bytes_per_token_by_rank") or []:
        if p.get("bytes_per_token"):
            pairings.setdefault(p.get("run", 0), _Ends()).add(p["bytes_per_token"], p)
    for ends in pairings.values():
        spread = ends.spread()
        if spread is not None and (bpt_best is None or spread[0] > bpt_best[0]):
            bpt_best = spread
    if bpt_best is not None:
        pct, lo, hi = bpt_best
        put("run_bpt_spread_pct", pct)
        for end, (x, p) in (("lo", lo), ("hi", hi)):
            put(f"run_bpt_{end}_bytes", x)
            put(f"run_bpt_{end}_rank", p.get("rank") or None)
            put(f"run_bpt_{end}_lines", f"{p.get('memory_line')}/{p.get('tokens_line')}")
