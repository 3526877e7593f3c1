"""Prometheus scrapes → runtime facts: each engine of a scrape is one runtime sample, like a stats line.

`add_scrape` puts the figures of one parsed scrape (`kvlogdiag.input.metrics.Scrape`) into a run's
`LogFacts.metrics` — a `StatsSummary`, the same aggregates the periodic stats lines fill, through the
same `StatsSummary.add_sample` — so the same rules (KVD005, KVD012, KVD013) read them, each figure's
fact naming the sample line it came from (source ``metrics``). Counters become per-sample figures the
way the stats line states them: ``vllm:num_preemptions_total`` is cumulative, a stats line's
``Preemptions: P`` counts the interval, so each sample adds the counter's increase since the previous
scrape of that engine (all of it at the first scrape; a counter that went down was reset by a restart).

The pipeline decides which samples the rules read (`use_metrics`): the log's stats lines when the
run has any (with the scrapes' preemption counter when it saw more), else the scrapes — two views of
the same scheduler state are never added together.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kvlogdiag.extract.facts import Fact, LogFacts
from kvlogdiag.input.metrics import EngineSample, Scrape
from kvlogdiag.records import replace  # LogFacts is a plain record (StatsSummary a dataclass)

__all__ = ["add_scrape", "metrics_json", "use_metrics"]

#: last scrapes kept per run, for the JSON (the aggregates themselves are constant-size)
KEEP_LAST = 1


def _engine_no(e: EngineSample) -> int | None:
    return int(e.engine) if e.engine is not None and e.engine.isdigit() else None


def add_scrape(facts: LogFacts, scrape: Scrape, source: str, *, at_line: int | None = None,
               interval_s: float | None = None, label: str | None = None) -> None:
    """Add one scrape's engines to ``facts.metrics``.

    ``at_line``: the facts cite this line (``watch``: the log line reached when the scrape was taken)
    instead of the sample's line in the scrape text; ``label`` prefixes the cited text (which scrape)."""
    info = facts.metrics_info
    if info is None:
        info = facts.metrics_info = {"source": source, "scrapes": 0, "samples": 0, "interval_s": interval_s,
                                     "counters": {}, "last": None, "kv_usage_metric": None, "itl_metric": None}
    info["scrapes"] += 1
    st = facts.metrics
    for e in scrape.engines:
        def fact(key: str, value: Any = None, e: EngineSample = e) -> Fact:
            line, text = e.lines.get(key) or next(iter(e.lines.values()), (0, ""))
            raw = f"{label}: {text}" if label else text
            return Fact(value, at_line if at_line is not None else line, None, raw, "metrics", facts.run_index,
                        _engine_no(e) or 0)

        main = fact("kv_usage" if "kv_usage" in e.lines else "running")
        delta = None
        if e.preemptions_total is not None:
            prev = info["counters"].get(e.engine)
            total = e.preemptions_total
            delta = total if prev is None or total < prev else total - prev
            info["counters"][e.engine] = total
        had_preemption, had_single = st.preemption_first is not None, st.single_running_first is not None
        hit = e.hit_rate_pct()
        # one decimal, as the stats line prints it ("KV cache usage: %.1f%%"), so both count alike
        usages = (round(e.kv_usage_pct, 1),) if e.kv_usage_pct is not None else ()
        st.add_sample(e.running or 0, e.waiting or 0, main, engine=_engine_no(e), preemptions=delta, usages=usages,
                      hit=hit, deferred=e.deferred or 0)
        if not had_preemption and st.preemption_first is not None:
            st.preemption_first = fact("preemptions", delta)  # the counter's line, not the usage line
        if not had_single and st.single_running_first is not None:
            st.single_running_first = fact("running", e.running)
        info["samples"] += 1
        info["kv_usage_metric"] = e.kv_usage_metric or info["kv_usage_metric"]
        info["itl_metric"] = e.itl_metric or info["itl_metric"]
    info["last"] = scrape.to_json()


def use_metrics(facts: LogFacts) -> LogFacts:
    """The facts the rules and figures read: the run's own when no scrape was added; a shallow copy whose
    runtime samples are the scrapes' when its log has no stats lines (`runtime_from` = ``metrics``).

    With both, the stats lines stay the samples, except the preemptions when the scrapes' counter saw more
    (`preemptions_from` = ``metrics``): released vLLM 0.11.2-0.33.0 never prints the stats line's
    ``Preemptions: P`` — ``LoggingStatLogger.log`` calls ``_update_stats``, whose ``_reset`` zeroes the
    interval's ``num_preemptions`` before ``if self.num_preemptions > 0`` formats it (0.32.0
    vllm/v1/metrics/loggers.py:149-156, :255-260, :276-312) — while ``vllm:num_preemptions_total`` counts
    every one (:739, :1259). Both count the same preemptions, so the larger total is taken, never a sum."""
    if not facts.metrics.lines:
        return facts
    if not facts.stats.lines:
        return replace(facts, stats=facts.metrics, runtime_from="metrics")
    m = facts.metrics
    if m.preemptions_total > facts.stats.preemptions_total:
        stats = dataclasses.replace(facts.stats, preemptions_total=m.preemptions_total, preemption_lines=m.preemption_lines,
                                    preemption_first=m.preemption_first)
        return replace(facts, stats=stats, preemptions_from="metrics")
    return facts


def metrics_json(facts: LogFacts) -> dict[str, Any] | None:
    """``runtime.metrics`` of the JSON: what the scrapes said (null when none was read)."""
    info = facts.metrics_info
    if info is None:
        return None
    st = facts.metrics
    return {
        "source": info["source"], "scrapes": info["scrapes"], "samples": info["samples"],
        "interval_s": info["interval_s"], "used_by_rules": facts.runtime_from == "metrics",
        "preemptions_used_by_rules": facts.runtime_from == "metrics" or facts.preemptions_from == "metrics",
        "kv_usage_metric": info["kv_usage_metric"], "itl_metric": info["itl_metric"],
        "kv_usage_max_pct": st.kv_usage_max, "running_max": st.running_max, "waiting_max": st.waiting_max,
        "preemptions": st.preemptions_total,
        "last": info["last"],
    }
