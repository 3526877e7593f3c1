"""The workload of a P/D deployment read from its stats lines, for the D-capacity rule (KVD108).

Used by ``kvlogdiag deployment`` when neither ``--avg-prompt-len`` nor ``--avg-output-len`` is given.
The figures rest on how vLLM computes its periodic stats line (``Avg prompt throughput: … tokens/s,
Avg generation throughput: … tokens/s, Running: N reqs, … GPU KV cache usage: U%``):

* each line covers one logging interval; the throughputs are the tokens of that interval divided by
  its length (vLLM 0.23.0 ``vllm/v1/metrics/loggers.py:150-155``, ``_update_stats`` ``:196-201``), so
  over lines of one node the sum of prompt throughputs over the sum of generation throughputs is
  prompt tokens over generated tokens;
* generated tokens count every new token of every request, the first one included
  (0.23.0 ``vllm/v1/metrics/stats.py:362-364``);
* prompt tokens: up to vLLM 0.15 the whole prompt of a request, counted when it produces its first
  token (0.14.1 ``vllm/v1/metrics/stats.py:268-270``, 0.15.1 ``loggers.py:139``); from vLLM 0.16.0 only
  the tokens computed locally — prefix-cache hits and KV received from a P node are not counted
  (0.16.0 ``loggers.py:140-141``, 0.23.0 ``loggers.py:144-145``);
* ``Running`` is the scheduler's running queue and ``GPU KV cache usage`` the share of the pool's
  blocks not free (0.23.0 ``vllm/v1/core/block_pool.py:505-516``), so usage × pool tokens ÷ running
  is the KV a running request holds on average (blocks shared by a prefix are counted once);
* vLLM's P/D proxies send the P node ``max_tokens = 1`` (vLLM 0.23.0
  ``examples/disaggregated/mooncake_connector/mooncake_connector_proxy.py:263``,
  ``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py:171``; vLLM-Ascend 0.23.0.post1
  ``examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py:801``): one generated
  token per request on P.

Two methods follow, both assuming a steady workload (requests of similar lengths arriving at a
steady rate, so running requests are on average half-way through their output):

* ``d-ratio`` (D on vLLM < 0.16, where D's prompt throughput counts each transferred prompt):
  r = Σ prompt ÷ Σ generation on D; live tokens per request c = p + o/2; o = c ÷ (r + 1/2), p = r × o.
* ``p-prompt`` (D on vLLM ≥ 0.16): p = Σ prompt ÷ Σ generation on the P nodes (one token per
  request; on vLLM ≥ 0.16 without P's own prefix-cache hits, so a lower bound when they hit);
  o = 2 × (c − p) with c from the D node.

Anything else — no D stats line with running requests, a model not known to be dense (a hybrid
one's sliding-window, compressed or mamba layers do not hold one token's KV per token), an unknown version,
no generated token, c ≤ p — gives no figure and says why (``reason``).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from kvlogdiag.derive.architecture import lookup_model

#: the first vLLM release whose prompt throughput leaves out cached and transferred prompt tokens
COMPUTED_ONLY_SINCE = (0, 16)


def _version(v: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", v or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def live_tokens_per_request(stats: dict[str, Any], pool: int) -> float | None:
    """usage × pool ÷ running over the lines (each line's usage is of its own engine's pool)."""
    if not stats or not stats.get("running_sum"):
        return None
    return stats["kv_usage_running_sum"] / 100 * pool / stats["running_sum"]


def infer_workload(producers: Sequence[Any], consumers: Sequence[Any]) -> dict[str, Any]:
    """Average prompt and output lengths from the nodes' stats lines, or None figures and a reason.

    ``producers`` / ``consumers`` are `DeploymentNode`s (P, D) with ``workload_stats``,
    ``pool_tokens_per_dp_group`` and ``vllm_version``."""
    out: dict[str, Any] = {"avg_prompt_len": None, "avg_output_len": None, "method": None, "stats_lines": 0,
                           "nodes": [], "live_tokens_per_request": None, "reason": None}
    ds = [n for n in consumers if n.workload_stats and n.pool_tokens_per_dp_group]
    if not ds:
        out["reason"] = "no D node's log has a stats line with running requests and its KV pool"
        return out
    # sliding-window / compressed / mamba layers: the blocks in use do not grow by one token's KV per token, and
    # vLLM's pool in tokens is its figure at max_model_len (docs/capacity.md), so usage x pool is no token count.
    # Only a model the architecture catalogue knows to be dense is read.
    models = sorted({n.model or "" for n in [*ds, *[p for p in producers if p.workload_stats]]})
    archs = {m: lookup_model(m) for m in models}
    hybrid = [m for m, a in archs.items() if a is not None and a.is_hybrid]
    unknown = [m or "(no model in the log)" for m, a in archs.items() if a is None]
    if hybrid:
        out["reason"] = (f"{', '.join(hybrid)} is a hybrid model: its KV usage is not proportional to the tokens "
                         "held, so the stats lines give no token figure")
        return out
    if unknown:
        out["reason"] = (f"{', '.join(unknown)} is not a model kvlogdiag knows to be dense (its architecture "
                         "catalogue): for a hybrid model the KV usage is not proportional to the tokens held")
        return out
    versions = {_version(n.vllm_version) for n in ds}
    if None in versions or len(versions) != 1:
        out["reason"] = ("the D nodes' vLLM version is unknown or not one: which prompt tokens the stats lines count "
                         "changed in vLLM 0.16")
        return out
    version = next(iter(versions))
    assert version is not None
    held = sum(n.workload_stats["kv_usage_running_sum"] / 100 * n.pool_tokens_per_dp_group for n in ds)
    running = sum(n.workload_stats["running_sum"] for n in ds)
    c = held / running
    d_lines = sum(n.workload_stats["lines"] for n in ds)
    out["live_tokens_per_request"] = round(c, 1)
    if version < COMPUTED_ONLY_SINCE:
        gen = sum(n.workload_stats["gen_tps_sum"] for n in ds)
        prompt = sum(n.workload_stats["prompt_tps_sum"] for n in ds)
        if gen <= 0:
            out["reason"] = "the D nodes' stats lines show no generated token"
            return out
        r = prompt / gen
        o = c / (r + 0.5)
        p = r * o
        out.update(method="d-ratio", stats_lines=d_lines, nodes=[n.name for n in ds])
    else:
        ps = [n for n in producers if n.workload_stats]
        gen = sum(n.workload_stats["gen_tps_sum"] for n in ps)
        if not ps or gen <= 0:
            out["reason"] = (f"on vLLM {version[0]}.{version[1]} a D node's prompt throughput leaves out the KV received "
                             "from P, and no P node's stats lines show requests to take the prompt length from")
            return out
        p = sum(n.workload_stats["prompt_tps_sum"] for n in ps) / gen
        o = 2 * (c - p)
        if o <= 0:
            out["reason"] = (f"the D nodes hold {c:,.0f} tokens per running request, not more than the P nodes' "
                             f"{p:,.0f}-token prompts: the stats lines are not of one steady workload")
            return out
        out.update(method="p-prompt", stats_lines=d_lines + sum(n.workload_stats["lines"] for n in ps),
                   nodes=[n.name for n in ps] + [n.name for n in ds])
    if p < 1 or o < 1:
        out["reason"] = "the stats lines give a prompt or output shorter than one token"
        out["method"] = None
        return out
    out["avg_prompt_len"], out["avg_output_len"] = round(p), round(o)
    return out


def describe(inf: dict[str, Any]) -> str:
    """One sentence on where the inferred workload comes from (for the KVD108 finding and the text)."""
    n, nodes = inf["stats_lines"], ", ".join(inf["nodes"])
    c = inf["live_tokens_per_request"]
    if inf["method"] == "d-ratio":
        how = (f"prompt : generated tokens on the D node(s) and their {c:,.0f} KV tokens per running request "
               "(vLLM < 0.16 counts each transferred prompt)")
    else:
        how = (f"the prompt tokens per request on the P node(s) (one generated token each, as vLLM's P/D proxies "
               f"ask; prefix-cache hits not counted) and the D node(s)' {c:,.0f} KV tokens per running request")
    return (f"workload inferred from {n} stats lines of {nodes}, not given: {how}, assuming a steady workload; "
            "pass --avg-prompt-len and --avg-output-len to override")
