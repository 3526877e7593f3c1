"""``--since/--until/--log-tz``: the time-window options, for every command that reads whole logs.

`window_options` adds the options to a click command; `install_window` pops them from the command's
keyword arguments and sets ``analyzer.window`` (what the window keeps: `kvlogdiag.timeline`,
docs/time-windows.md). Used by ``analyze``, ``scan`` and ``report``; a new command adds the decorator
and one call.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

import click

from kvlogdiag.cli.common import OneLineUsageError

if TYPE_CHECKING:
    from kvlogdiag.input.timestamps import TimeWindow

SINCE_HELP = ("Only what the log shows from this time on: ISO 8601 (2025-12-31T23:30, 2025-12-31 23:30+08:00, 2025-12-31) "
              "or a time ago (10m, 2h, 1d). Runtime figures cover the window; runs outside it are left out.")
UNTIL_HELP = "Only what the log shows before this time (same forms as --since)."
TZ_HELP = ("Time zone of log times that carry no UTC offset (vLLM's 'INFO 12-31 23:59:59', syslog) and of --since/--until "
           "without one: local, UTC, +08:00 or a name [default: local].")


def window_options(func: Callable) -> Callable:
    for d in reversed([
        click.option("--since", default=None, metavar="TIME", help=SINCE_HELP),
        click.option("--until", default=None, metavar="TIME", help=UNTIL_HELP),
        click.option("--log-tz", default=None, metavar="ZONE", help=TZ_HELP),
    ]):
        func = d(func)
    return func


def window_from_options(since: str | None, until: str | None, log_tz: str | None,
                        now: datetime | None = None) -> TimeWindow | None:
    """The window of the options (None when neither bound is given); `OneLineUsageError` on a bad value."""
    if since is None and until is None and log_tz is None:
        return None  # what parse_tz(None) and no bound give, without importing the time parsing (a small analyze)
    from kvlogdiag.input.timestamps import TimeWindow, WindowError, parse_bound, parse_tz

    try:
        tz = parse_tz(log_tz)
        if since is None and until is None:
            return None
        now = now or datetime.now(timezone.utc)
        lo = parse_bound(since, now, tz, "--since") if since is not None else None
        hi = parse_bound(until, now, tz, "--until") if until is not None else None
        return TimeWindow(lo, hi, tz, since, until)
    except WindowError as exc:
        raise OneLineUsageError(str(exc)) from None


def install_window(analyzer: Any, kw: dict[str, Any]) -> TimeWindow | None:
    """Pop --since/--until/--log-tz from ``kw`` and set ``analyzer.window``; returns the window."""
    window = window_from_options(kw.pop("since", None), kw.pop("until", None), kw.pop("log_tz", None))
    analyzer.window = window
    return window


def window_given(kw: dict[str, Any]) -> str | None:
    """Pop the window options (a command path that does not take them); the options given, or None."""
    given = [name for name, key in (("--since", "since"), ("--until", "until"), ("--log-tz", "log_tz")) if kw.pop(key, None) is not None]
    return ", ".join(given) or None
