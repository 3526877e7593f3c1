"""The closing lines of ``analyze``'s text output: one line per input when several were analysed, then
the severity counts (the last line, as linters end theirs)."""

from __future__ import annotations

from typing import Iterable

from kvlogdiag.render.analysis import fmt_bpt
from kvlogdiag.result import Analysis, Severity


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 or word == "info" else f"{n:,} {word}s"


def counts(findings: Iterable) -> str:
    fs = list(findings)
    return ", ".join(plural(sum(1 for f in fs if f.severity == s), s.label)
                     for s in (Severity.ERROR, Severity.WARNING, Severity.INFO))


def summary_text(shown: list[Analysis], min_severity: str = "info", inputs: int = 1) -> str:
    """``Summary`` (per input: runs, bytes per token of its current run, findings) when several inputs or
    containers were analysed, and the last line with the severity counts of everything shown (nothing
    when no input could be read: the errors on stderr say it all)."""
    if not shown:
        return ""
    out: list[str] = []
    groups: dict[tuple[str, str | None], list[Analysis]] = {}
    for a in shown:
        groups.setdefault((a.source, a.container), []).append(a)
    if len(groups) > 1 or inputs > 1:
        out.append("Summary")
        width = max(len(src + (f" [container {c}]" if c else "")) for src, c in groups) if groups else 0
        for (src, container), runs in groups.items():
            where = src + (f" [container {container}]" if container else "")
            current = max(runs, key=lambda a: a.run.index)
            fs = [f for a in runs for f in a.visible_findings(min_severity)]
            out.append(f"  {where:<{width}}  {plural(len(runs), 'run')}, bytes/token {fmt_bpt(current.kv_cache.bytes_per_token)}"
                       f" — {counts(fs)}")
        out.append("")
    fs = [f for a in shown for f in a.visible_findings(min_severity)]
    logs = len({a.source for a in shown})
    starts = len(shown)
    total = f"{plural(len(fs), 'finding')} ({counts(fs)})" if fs else "No findings"
    out.append(f"{total} in {plural(logs, 'log')}, {plural(starts, 'server start')}.")
    return "\n" + "\n".join(out) + "\n"
