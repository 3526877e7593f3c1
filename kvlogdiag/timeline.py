"""The time layer of a read: line times, the ``--since/--until`` window, per-run timelines.

`TimedFeed` stands between the reader and a `Session` / `ContainerSessions` (``Analyzer.read`` installs it
when the analyzer has a window or is asked for timelines). For every line it reads the time
(`kvlogdiag.input.timestamps.LineClock`: vLLM's head, the docker/CRI/journald envelope, the previous
line's), and with a window it holds back the **runtime lines** outside the window — the catalogue's
``stats``, ``v0_preemption`` and ``recompute_runtime`` lines, found by their catalogue keywords — so that
every runtime figure and runtime rule (KVD012 preemptions, KVD013 KV usage, the busy-batch part of KVD005)
covers the window only. Every other line is fed as it is: run boundaries, configuration, KV sizing,
start-up errors stay those of the run. `apply` then keeps the runs whose time span meets the window and
adds a ``window`` object to each kept run's JSON (docs/time-windows.md).

With ``timelines`` on (``scan --html``), each run also gets a bounded timeline: fewer than 2 × `MAX_POINTS`
(time, KV usage %, preemptions) points (pairs of neighbours merged whenever it reaches that: the highest
usage and the sum of preemptions are kept) and hourly bins of the same.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any

from kvlogdiag.input.reader import InputError, Line
from kvlogdiag.input.timestamps import LineClock, TimeIndex, TimeWindow

__all__ = ["MAX_POINTS", "RunTimeline", "TimedFeed", "WindowEmpty", "file_reference", "runtime_keywords"]

MAX_POINTS = 96  # points kept per run: merged pairwise beyond 2x this
RUNTIME_PATTERNS = ("stats", "v0_preemption", "recompute_runtime")

_KEYWORDS: tuple[str, ...] | None = None


def runtime_keywords() -> tuple[str, ...]:
    """The catalogue keywords of the runtime patterns (a line holding none of them is not a runtime line)."""
    global _KEYWORDS
    if _KEYWORDS is None:
        from kvlogdiag.catalogue.patterns import catalogue

        _KEYWORDS = tuple(dict.fromkeys(k for p in catalogue() if p.name in RUNTIME_PATTERNS for k in p.keywords))
    return _KEYWORDS


def is_runtime_line(text: str) -> bool:
    if "Avg prompt throughput" in text:  # the usual one, first
        return True
    return any(k in text for k in runtime_keywords())


class WindowEmpty(InputError):
    """No server start of the input meets the --since/--until window (``no_times``: no line has a time)."""

    def __init__(self, message: str, no_times: bool = False):
        super().__init__(message)
        self.no_times = no_times


def file_reference(source: str) -> datetime:
    """The year reference of month-day times: the file's mtime, or now for a pipe / an unreadable path."""
    try:
        if source not in ("-", "stdin") and os.path.isfile(source):
            return datetime.fromtimestamp(os.stat(source).st_mtime, timezone.utc)
    except OSError:
        pass
    return datetime.now(timezone.utc)


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat().replace("+00:00", "Z")


class RunTimeline:
    """KV usage and preemptions of one run over time, bounded (see the module docstring)."""

    __slots__ = ("points", "hours", "stats_lines", "dropped")

    def __init__(self) -> None:
        self.points: list[list[Any]] = []  # [POSIX seconds, kv usage % | None, preemptions]
        self.hours: dict[int, list[Any]] = {}  # hour (POSIX seconds // 3600) → [max kv usage % | None, preemptions]
        self.stats_lines = 0
        self.dropped = 0  # runtime lines outside the window, not fed

    def add(self, ts: float, kv: float | None, pre: int) -> None:
        self.points.append([ts, kv, pre])
        if len(self.points) >= 2 * MAX_POINTS:
            merged = []
            for a, b in zip(self.points[0::2], self.points[1::2]):
                kvs = [v for v in (a[1], b[1]) if v is not None]
                merged.append([a[0], max(kvs) if kvs else None, a[2] + b[2]])
            self.points = merged
        h = self.hours.setdefault(int(ts // 3600), [None, 0])
        if kv is not None and (h[0] is None or kv > h[0]):
            h[0] = kv
        h[1] += pre

    def to_json(self) -> dict[str, Any]:
        return {"points": self.points, "hours": {str(k): v for k, v in sorted(self.hours.items())},
                "stats_lines": self.stats_lines}


class TimedFeed:
    """Feeds lines to ``target`` (a Session or ContainerSessions), reading their times on the way."""

    def __init__(self, target: Any, source: str, window: TimeWindow | None, timelines: bool, reference: datetime | None = None):
        self.target = target
        self.source = source
        self.window = window
        self.timelines = timelines
        self.clock = LineClock(reference or file_reference(source), window.tz if window is not None else None)
        self.index = TimeIndex()
        self.runs: dict[tuple[str | None, int], RunTimeline] = {}
        self.outside = 0

    def _session(self, line: Line):
        sessions = getattr(self.target, "sessions", None)
        if sessions is None:
            return self.target
        return sessions.get(line.meta.get("container") if line.meta else None)

    def feed(self, line: Line) -> None:
        t = self.clock.time_of(line.text, line.meta)
        if t is not None:
            self.index.add(line.number, t)
        runtime = (self.window is not None or self.timelines) and is_runtime_line(line.text)
        if not runtime:
            self.target.feed(line)
            return
        sess = self._session(line)
        if self.window is not None and t is not None and not self.window.contains(t):
            self.outside += 1
            if sess is not None:
                self._timeline(sess).dropped += 1
            return
        before = None
        if self.timelines and sess is not None:
            f = sess.extractor.facts
            before = (f, f.stats.kv_usage_samples, f.stats.lines, self._preemptions(f))
        self.target.feed(line)
        if not self.timelines or t is None:
            return
        sess = sess or self._session(line)
        if sess is None:
            return
        f = sess.extractor.facts
        samples, lines, pre = (before[1], before[2], before[3]) if before is not None and before[0] is f else (0, 0, 0)
        tl = self._timeline(sess)
        tl.stats_lines += f.stats.lines - lines
        new_kv = f.stats.kv_usage_last if f.stats.kv_usage_samples > samples else None
        new_pre = self._preemptions(f) - pre
        if new_kv is not None or new_pre:
            tl.add(t.timestamp(), new_kv, max(0, new_pre))

    @staticmethod
    def _preemptions(f) -> int:
        return f.stats.preemptions_total + f.preemption_warning_count + f.recompute_preemptions

    def _timeline(self, sess) -> RunTimeline:
        key = (sess.container, sess.extractor.facts.run_index)
        tl = self.runs.get(key)
        if tl is None:
            tl = self.runs[key] = RunTimeline()
        return tl

    # -- after the read ------------------------------------------------------------------------

    def apply(self, results: list) -> list:
        """Drop the runs outside the window; add ``window`` (and the span) to every kept run's JSON extra."""
        if self.window is not None and not len(self.index.lines):
            raise WindowEmpty(f"{self.source}: no line carries a time (vLLM's 'INFO MM-DD HH:MM:SS' head, a docker/CRI "
                              "or journald timestamp): --since/--until cannot be applied", no_times=True)
        kept_any = False
        for r in results:
            keep = []
            for a in r.runs:
                span = self.index.span(a.run.first_line, a.run.last_line)
                if self.window is not None:
                    if span is None or not self.window.overlaps(*(datetime.fromtimestamp(x, timezone.utc) for x in span)):
                        continue
                tl = self.runs.get((r.container, a.run.index))
                info: dict[str, Any] = {"start": _iso(span[0]) if span else None, "end": _iso(span[1]) if span else None,
                                        "clock": self.clock.kind}
                if self.window is not None:
                    info.update(self.window.to_json())
                    info["runtime_lines_outside"] = tl.dropped if tl is not None else 0
                a.extra["window" if self.window is not None else "time_span"] = info
                keep.append(a)
            r.runs = keep
            kept_any = kept_any or bool(keep)
        if self.window is not None:
            if not kept_any:
                first, last = self.index.stamps[0], self.index.stamps[-1]
                raise WindowEmpty(f"{self.source}: no server start in the window (its lines run from {_iso(first)} to {_iso(last)})")
            results = [r for r in results if r.runs]
        return results

    def timeline_of(self, container: str | None, run_index: int) -> dict[str, Any] | None:
        tl = self.runs.get((container, run_index))
        return tl.to_json() if tl is not None else None
