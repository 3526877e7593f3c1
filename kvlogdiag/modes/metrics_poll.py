"""``watch --metrics URL``: poll vLLM's Prometheus endpoint on a thread of its own, beside the log.

`MetricsPoller` fetches ``URL`` every ``interval`` seconds with a time limit on the whole request
(connect, every read, and the total: a server that trickles its answer is cut off too) and a size
limit, checks that the answer is a Prometheus exposition (`kvlogdiag.input.metrics.sniff`), parses it
with prometheus_client's parser and hands the `Scrape` to ``deliver`` — in ``watch`` that queues it for
the analysis thread, which never blocks. Nothing here can stop or slow the log's pass-through: the
poller runs on a daemon thread, every failure (refused, HTTP 500, timeout, not Prometheus, no vLLM
metrics) is one note through ``note`` — the first of its kind, then again only when the kind changes
or the endpoint answers again — and the poller goes on polling.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Callable

from kvlogdiag.input.metrics import MetricsError, Scrape, parse_scrape, sniff

__all__ = ["MAX_BYTES", "MetricsPoller", "fetch_scrape", "parse_interval"]

MAX_BYTES = 16 << 20  # a /metrics answer larger than this is not read (vLLM's is ~100 KB)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_interval(text: str) -> float:
    """``10s``, ``500ms``, ``1m``, ``2h`` or plain seconds (``10``, ``2.5``) → seconds (> 0)."""
    t = text.strip().lower()
    for unit in ("ms", "s", "m", "h"):
        if t.endswith(unit) and t[: -len(unit)].strip():
            num, scale = t[: -len(unit)].strip(), _UNITS[unit]
            break
    else:
        num, scale = t, 1.0
    try:
        value = float(num) * scale
    except ValueError:
        raise ValueError(f"{text!r}: not a duration (use e.g. 10s, 500ms, 1m)") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{text!r}: the interval must be more than 0")
    return value


class FetchError(Exception):
    """Why one poll gave no scrape; ``kind`` groups repeats of the same failure."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def fetch_scrape(url: str, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> Scrape:
    """One GET of ``url`` → its parsed `Scrape`, or `FetchError`. At most ``timeout_s`` per socket
    operation and about that in total (checked between reads), at most `MAX_BYTES`."""
    deadline = clock() + timeout_s
    req = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4", "User-Agent": "kvlogdiag"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - the user's own endpoint
            parts: list[bytes] = []
            size = 0
            while True:
                left = deadline - clock()
                if left <= 0:
                    raise FetchError("timeout", f"no complete answer within {timeout_s:g} s")
                chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_BYTES:
                    raise FetchError("too_large", f"the answer is larger than {MAX_BYTES >> 20} MiB; not read")
                parts.append(chunk)
    except FetchError:
        raise
    except urllib.error.HTTPError as exc:
        raise FetchError(f"http_{exc.code}", f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            raise FetchError("timeout", f"no answer within {timeout_s:g} s") from None
        raise FetchError("unreachable", f"cannot connect ({getattr(reason, 'strerror', None) or reason})") from None
    except TimeoutError:
        raise FetchError("timeout", f"no answer within {timeout_s:g} s") from None
    except (OSError, ValueError) as exc:  # reset connection, bad URL, a malformed HTTP answer
        raise FetchError("error", f"{type(exc).__name__}: {exc}") from None
    body = b"".join(parts)
    if not sniff(body[: 1 << 16]):
        raise FetchError("not_prometheus", "the answer is not a Prometheus text exposition")
    try:
        scrape = parse_scrape(body.decode("utf-8"))
    except (MetricsError, UnicodeDecodeError) as exc:
        raise FetchError("not_prometheus", f"the answer does not parse: {exc}") from None
    if not scrape.engines:
        raise FetchError("no_vllm", "a Prometheus exposition without vLLM's metrics (vllm:num_requests_running, "
                                    "vllm:kv_cache_usage_perc)")
    return scrape


class MetricsPoller:
    """Polls ``url`` every ``interval_s`` on a daemon thread until `stop`; see the module docstring."""

    def __init__(self, url: str, interval_s: float, timeout_s: float, deliver: Callable[[Scrape], None],
                 note: Callable[[str], None], fetch: Callable[[str, float], Scrape] = fetch_scrape):
        self.url = url
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.deliver = deliver
        self.note = note
        self.fetch = fetch
        self.polls = 0
        self.scrapes = 0
        self.failures = 0
        self.last_kind: str | None = None  # the failure kind last reported (None: the endpoint answers)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kvlogdiag-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop polling; never waits for a request in flight (the thread is a daemon)."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def poll_once(self) -> bool:
        """One poll: deliver the scrape (True) or report the failure (False, noted when its kind is new)."""
        self.polls += 1
        try:
            scrape = self.fetch(self.url, self.timeout_s)
        except FetchError as exc:
            self.failures += 1
            if exc.kind != self.last_kind:
                self.note(f"{self.url}: {exc}; the log is still passed through and analysed, polling goes on")
                self.last_kind = exc.kind
            return False
        except Exception as exc:  # noqa: BLE001 - a poller bug must never reach the pass-through
            self.failures += 1
            if self.last_kind != "internal":
                self.note(f"{self.url}: {type(exc).__name__}: {exc}; polling goes on")
                self.last_kind = "internal"
            return False
        if self._stop.is_set():
            return False
        if self.last_kind is not None:
            self.note(f"{self.url}: answers again")
            self.last_kind = None
        self.scrapes += 1
        self.deliver(scrape)
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            if self._stop.wait(self.interval_s):
                return
