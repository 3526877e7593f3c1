"""Server starts (runs) of one input, as the analysis sees them.

The extractor opens a new run at every start-up line that shows the server started again (see
`Extractor.new_run`). A "run" that holds nothing vLLM printed — only a launch command or prose, such as
a command pasted under a failed start ("I then ran: vllm serve …") or a fix suggested in a reply — is
not a server start of its own: `server_starts` folds it into the run before it, without changing the
extractor's own lists (``watch`` asks again as more lines arrive, and that run may still start).
"""

from __future__ import annotations

import copy

from kvlogdiag.extract.facts import LogFacts
from kvlogdiag.records import replace

# config sources that are not vLLM's own output (see derive.figures._SOURCE_PRIORITY)
COMMAND_SOURCES = frozenset({"user_command", "prose"})


def command_only(f: LogFacts) -> bool:
    """True when the run states nothing vLLM printed: no banner, KV line, stats, event or logged config."""
    if (f.version or f.engine or f.available or f.kv_budget or f.tokens or f.blocks or f.concurrency
            or f.memory or f.events or f.insufficient_kv or f.preemption_warning_count or f.recompute_preemptions
            or f.stats.lines or f.kv_sized or f.startup_complete is not None):
        return False
    return all(x.source in COMMAND_SOURCES for facts in f.config.values() for x in facts)


def _fold(prev: LogFacts, extra: LogFacts) -> LogFacts:
    """A copy of ``prev`` with the command/prose facts of ``extra`` added after its own."""
    config = {k: list(v) for k, v in prev.config.items()}
    for k, v in extra.config.items():
        config.setdefault(k, []).extend(v)
    hits = copy.copy(prev.line_hits)  # keeps its type (the pipeline's LineHits with its stopped patterns)
    for p, (n, first) in extra.line_hits.items():
        n0, f0 = hits.get(p, (0, None))
        hits[p] = (n0 + n, f0 or first)
    for holder in (prev.line_hits, extra.line_hits):
        stopped = getattr(holder, "stopped", None)
        if stopped:  # a pattern stopped in either part leaves the folded run's count incomplete
            hits.stopped = {**getattr(hits, "stopped", {}), **stopped}  # type: ignore[attr-defined]
    launch = {**{k: dict(v) for k, v in extra.launch_args.items()}, **prev.launch_args}  # the run's own lines first
    return replace(prev, config=config, env={**extra.env, **prev.env}, platform=prev.platform + extra.platform,
                   line_hits=hits, last_line_of_run=max(prev.last_line_of_run, extra.last_line_of_run), launch_args=launch)


def server_starts(runs: list[LogFacts]) -> list[LogFacts]:
    """The runs that are server starts, renumbered 0..n-1, each with ``runs`` = n."""
    out: list[LogFacts] = []
    for f in runs:
        if out and command_only(f):
            out[-1] = _fold(out[-1], f)
        else:
            out.append(f)
    n = len(out)
    return [replace(f, run_index=i, runs=n) for i, f in enumerate(out)]
