"""Line timestamps: when each log line was written, as an aware `datetime` (docs/time-windows.md).

Where a line's time comes from, in this order:

1. the docker / kubectl ``--timestamps`` or CRI envelope (RFC 3339, ``2025-12-31T23:59:59.123Z``: a full
   date with its UTC offset; `kvlogdiag.input.reader` keeps it as ``meta["timestamp"]``), unless the line
   also has vLLM's own head (2.), whose year and UTC offset the envelope then gives;
2. vLLM's record head ``INFO 12-31 23:59:59`` — ``_DATE_FORMAT = "%m-%d %H:%M:%S"`` in vllm/logger.py of
   every release (0.2.7 line 8 to 0.33.0 line 33; vllm_ascend/logger.py line 22 prints the same), no year,
   the server process's local time (logging's default ``time.localtime`` converter);
3. a Python-logging head of an application around vLLM, ``2025-12-31 23:59:59,123 - vllm - INFO - `` (full
   date, local time);
4. the journald/syslog envelope ``Dec 31 23:59:59 host ident[pid]: `` (no year, local time).

The year of a time without one: from the RFC 3339 envelope of the same line when there is one (the
candidate year whose time lies closest to the envelope's), else from the file's modification time (a log
is written before its mtime: the first dated line takes the mtime's year, or the year before when its
month-day is later than the mtime's), counting a year on when the month goes back by six or more (Dec
→ Jan). A time without a UTC offset is read in the ``log_tz`` zone (default: this machine's local zone);
with an RFC 3339 envelope, vLLM's head is read in the offset between the two (rounded to 15 minutes), so
the whole input is on one clock. A line without any time inherits the previous line's.
"""

from __future__ import annotations

import bisect
import re
from array import array
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

__all__ = ["LineClock", "TimeIndex", "TimeWindow", "WindowError", "parse_bound", "parse_tz", "parse_rfc3339"]

# vLLM's head (text starts with it once the envelope and process prefix are peeled); the optional
# fraction is a custom logging config's %(msecs)
_VLLM_HEAD = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))? ")
_PYLOG_HEAD = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))? - [\w.-]+ - [A-Z]+ - ")
_SYSLOG_TS = re.compile(r"([A-Z][a-z]{2}) ([ \d]\d) (\d\d):(\d\d):(\d\d)$")
_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:([Zz])|([+-])(\d\d):?(\d\d))?$")
_MONTHS = {m: i + 1 for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"))}
_QUARTER = 15 * 60
_MAX_OFFSET_S = 14 * 3600  # UTC offsets run from -12:00 to +14:00


class WindowError(ValueError):
    """A --since/--until/--log-tz value that cannot be read; the message says what is accepted."""


def parse_rfc3339(text: str) -> datetime | None:
    """``2025-12-31T23:59:59.123456789Z`` → datetime (nanoseconds cut to microseconds): aware when the
    text has an offset, naive otherwise. None when it is not such a time."""
    m = _RFC3339.match(text.strip())
    if m is None:
        return None
    y, mo, d, hh, mi, ss = (int(g) for g in m.groups()[:6])
    frac = m.group(7) or ""
    us = int((frac + "000000")[:6]) if frac else 0
    try:
        dt = datetime(y, mo, d, hh, mi, ss, us)
    except ValueError:
        return None
    if m.group(8):
        return dt.replace(tzinfo=timezone.utc)
    if m.group(9):
        off = int(m.group(10)) * 3600 + int(m.group(11)) * 60
        return dt.replace(tzinfo=timezone(timedelta(seconds=off if m.group(9) == "+" else -off)))
    return dt


def parse_tz(text: str | None) -> tzinfo | None:
    """``local`` / None (this machine's zone: returned as None), ``UTC``, ``+08:00``, or an IANA name."""
    if text is None or text.strip().lower() in ("", "local"):
        return None
    t = text.strip()
    if t.upper() in ("UTC", "Z", "GMT"):
        return timezone.utc
    m = re.fullmatch(r"(?:UTC)?([+-])(\d\d?)(?::?(\d\d))?", t)
    if m:
        off = int(m.group(2)) * 3600 + int(m.group(3) or 0) * 60
        if off > _MAX_OFFSET_S:
            raise WindowError(f"--log-tz {text}: an offset beyond ±14:00")
        return timezone(timedelta(seconds=off if m.group(1) == "+" else -off))
    try:
        from zoneinfo import ZoneInfo

        return ZoneInfo(t)
    except Exception:  # noqa: BLE001 - ZoneInfoNotFoundError, ValueError for odd names
        raise WindowError(f"--log-tz {text}: not a time zone (use local, UTC, +08:00 or a name such as Europe/Berlin)") from None


def _localize(naive: datetime, tz: tzinfo | None) -> datetime:
    """A wall-clock time in ``tz`` (None: this machine's local zone, its DST rules included) → aware."""
    if tz is None:
        return naive.astimezone()
    if hasattr(tz, "localize"):  # pragma: no cover - pytz-style zones are not produced here
        return tz.localize(naive)
    return naive.replace(tzinfo=tz)


# (?<![\d.]): a number starts only where no digit precedes it, so a long digit run is tried once (linear)
_RELATIVE_PART = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)(s|secs?|m|mins?|h|hrs?|hours?|d|days?|w|weeks?)", re.I)
_RELATIVE = re.compile(r"(?:" + _RELATIVE_PART.pattern + r")+", re.I)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_bound(text: str, now: datetime, tz: tzinfo | None, what: str = "--since") -> datetime:
    """An ISO 8601 time (``2025-12-31T23:30``, ``2025-12-31 23:30:00+08:00``, ``2025-12-31``, ``...Z``) or a
    time relative to ``now``: ``10m``, ``2h``, ``1d``, ``90s``, ``1w``, ``1h30m`` (that long ago, ``ago``
    may follow). A time without an offset is in ``tz`` (None: this machine's local zone). Raises `WindowError`."""
    t = text.strip()
    rel = re.sub(r"\s+", "", t[:-4] if t.lower().endswith(" ago") else t)
    if rel and _RELATIVE.fullmatch(rel):
        total = sum(float(n) * _UNIT_S[u[0].lower()] for n, u in _RELATIVE_PART.findall(rel))
        return now - timedelta(seconds=total)
    if re.fullmatch(r"\d{4}-\d\d-\d\d", t):
        t += "T00:00:00"
    elif re.fullmatch(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?:[Zz]|[+-]\d\d:?\d\d)?", t):
        t = t[:16] + ":00" + t[16:]
    dt = parse_rfc3339(t)
    if dt is None:
        raise WindowError(f"{what} {text!r}: use an ISO 8601 time (2025-12-31T23:30, 2025-12-31 23:30:00+08:00, "
                          "2025-12-31) or a time ago (10m, 2h, 1d, 1w)")
    return dt if dt.tzinfo is not None else _localize(dt, tz)


class TimeWindow:
    """``since <= t < until`` (either may be None: open); the bounds are aware datetimes."""

    def __init__(self, since: datetime | None, until: datetime | None, tz: tzinfo | None = None,
                 since_text: str | None = None, until_text: str | None = None):
        if since is not None and until is not None and until <= since:
            raise WindowError(f"--until {until_text or until.isoformat()} is not after --since {since_text or since.isoformat()}")
        self.since, self.until, self.tz = since, until, tz
        self.since_text, self.until_text = since_text, until_text

    def contains(self, t: datetime) -> bool:
        return (self.since is None or t >= self.since) and (self.until is None or t < self.until)

    def overlaps(self, start: datetime, end: datetime) -> bool:
        """Does [start, end] meet the window?"""
        return (self.until is None or start < self.until) and (self.since is None or end >= self.since)

    def to_json(self) -> dict[str, Any]:
        return {"since": self.since.isoformat() if self.since else None,
                "until": self.until.isoformat() if self.until else None}

    def fingerprint(self) -> str:
        return f"{self.since.isoformat() if self.since else ''}|{self.until.isoformat() if self.until else ''}"


class LineClock:
    """The time of each line of one input, in order (see the module docstring); keeps the previous time."""

    def __init__(self, reference: datetime, tz: tzinfo | None = None):
        """``reference``: the file's mtime (or now, for a pipe), aware; ``tz``: the zone of naive times."""
        self.tz = tz
        self.reference = reference
        self.last: datetime | None = None
        self.kind: str | None = None  # the clock of the last dated line: envelope, vllm, pylog, syslog
        self.kinds: dict[str, int] = {}
        self._year: int | None = None  # the year of month-day times read from the mtime
        self._last_md: tuple[int, int, int, int, int] | None = None
        self._offset: timezone | None = None  # vLLM head's UTC offset learnt from an RFC 3339 envelope

    def time_of(self, text: str, meta: dict | None) -> datetime | None:
        """The line's time (aware), or the previous line's when it has none (None before the first)."""
        t, kind = self._read(text, meta)
        if t is not None:
            self.last = t
            self.kind = kind
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
        return self.last

    def _read(self, text: str, meta: dict | None) -> tuple[datetime | None, str]:
        env = None
        ts = meta.get("timestamp") if meta else None
        if ts and ts[:1].isdigit():
            env = parse_rfc3339(ts)
            if env is not None and env.tzinfo is None:
                env = _localize(env, self.tz)
        m = _VLLM_HEAD.match(text)
        if m is not None:
            mo, d, hh, mi, ss = (int(g) for g in m.groups()[:5])
            us = int(((m.group(6) or "") + "000000")[:6])
            if env is not None:
                t = self._with_envelope(mo, d, hh, mi, ss, us, env)
                return t, "vllm"
            md = self._month_day(mo, d, hh, mi, ss, us)
            if md is not None:
                return md, "vllm"
        if env is not None:
            return env, "envelope"
        if " - " in text:
            pm = _PYLOG_HEAD.match(text)
            if pm is not None:
                y, mo, d, hh, mi, ss = (int(g) for g in pm.groups()[:6])
                try:
                    return _localize(datetime(y, mo, d, hh, mi, ss, int(((pm.group(7) or "") + "000000")[:6])), self.tz), "pylog"
                except ValueError:
                    pass
        if ts and not ts[:1].isdigit():
            sm = _SYSLOG_TS.match(ts)
            if sm is not None and sm.group(1) in _MONTHS:
                sy = self._month_day(_MONTHS[sm.group(1)], int(sm.group(2)), int(sm.group(3)), int(sm.group(4)),
                                     int(sm.group(5)), 0)
                if sy is not None:
                    return sy, "syslog"
        return None, ""

    def _with_envelope(self, mo: int, d: int, hh: int, mi: int, ss: int, us: int, env: datetime) -> datetime:
        """vLLM's month-day time with the year and UTC offset of the line's RFC 3339 envelope."""
        env_naive_utc = env.astimezone(timezone.utc).replace(tzinfo=None)
        best: tuple[float, datetime] | None = None
        for y in (env_naive_utc.year - 1, env_naive_utc.year, env_naive_utc.year + 1):
            try:
                cand = datetime(y, mo, d, hh, mi, ss, us)
            except ValueError:  # 02-29 of a year that has none
                continue
            diff = (cand - env_naive_utc).total_seconds()
            if best is None or abs(diff) < abs(best[0]):
                best = (diff, cand)
        if best is None or abs(best[0]) > _MAX_OFFSET_S + _QUARTER:
            return env  # vLLM's clock and the collector's disagree beyond any time zone: trust the collector
        off = round(best[0] / _QUARTER) * _QUARTER
        self._offset = timezone(timedelta(seconds=off))
        self._year = best[1].year  # later lines without an envelope continue from here
        self._last_md = (mo, d, hh, mi, ss)
        return best[1].replace(tzinfo=self._offset)

    def _month_day(self, mo: int, d: int, hh: int, mi: int, ss: int, us: int) -> datetime | None:
        md = (mo, d, hh, mi, ss)
        if self._year is None:
            ref = self.reference.astimezone(self._offset) if self._offset is not None else (
                self.reference.astimezone(self.tz) if self.tz is not None else self.reference.astimezone())
            ref_md = (ref.month, ref.day, ref.hour, ref.minute, ref.second)
            self._year = ref.year if md <= ref_md else ref.year - 1
        elif self._last_md is not None and md < self._last_md and self._last_md[0] - mo >= 6:
            self._year += 1  # Dec 31 → Jan 1
        self._last_md = md
        y = self._year
        try:
            naive = datetime(y, mo, d, hh, mi, ss, us)
        except ValueError:
            return None
        # after an RFC 3339 envelope taught vLLM's offset, lines without one stay on that clock
        return naive.replace(tzinfo=self._offset) if self._offset is not None else _localize(naive, self.tz)


class TimeIndex:
    """Line number → time, kept as the lines where the time changes (bisect to look up; compact arrays)."""

    def __init__(self) -> None:
        self.lines = array("q")
        self.stamps = array("d")  # POSIX seconds

    def add(self, line: int, t: datetime) -> None:
        ts = t.timestamp()
        if self.stamps and self.stamps[-1] == ts:
            return
        self.lines.append(line)
        self.stamps.append(ts)

    def at(self, line: int) -> float | None:
        """The time (POSIX seconds) of ``line``: that of the last dated line at or before it."""
        i = bisect.bisect_right(self.lines, line) - 1
        return self.stamps[i] if i >= 0 else None

    def after(self, line: int) -> float | None:
        """The first time at or after ``line`` (a run whose first lines carry no time)."""
        i = bisect.bisect_left(self.lines, line)
        return self.stamps[i] if i < len(self.lines) else None

    def span(self, first: int, last: int) -> tuple[float, float] | None:
        """(start, end) POSIX seconds of the lines first..last, or None when none of them is dated."""
        start = self.at(first)
        if start is None:
            start = self.after(first)
            if start is None or self.lines[bisect.bisect_left(self.lines, first)] > last:
                return None
        end = self.at(last)
        return (start, end if end is not None and end >= start else start)
