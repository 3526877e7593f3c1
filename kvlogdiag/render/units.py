"""Numbers and durations as people read them: ``1,234,567``, ``850 ms``, ``4 min 05 s``, ``2 h 03 min``."""

from __future__ import annotations

import math


def fmt_int(n: int) -> str:
    return f"{n:,}"


def fmt_duration(seconds: float | None) -> str:
    """A duration in the largest unit that keeps it short: ms below 1 s, s below 1 min, then min+s,
    h+min, d+h (rounded down in the smaller unit, so ``59.9 s`` never reads ``1 min 00 s`` too early)."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    if seconds < 0:
        return "-" + fmt_duration(-seconds)
    if seconds < 0.9995:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 59.95 else "59.9 s"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400:,} d {s % 86400 // 3600:02d} h"
