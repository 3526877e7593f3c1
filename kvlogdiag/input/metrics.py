"""Prometheus metrics as input: a saved ``/metrics`` scrape, or one fetched live by ``watch --metrics``.

vLLM serves its runtime state on ``/metrics`` in the Prometheus text exposition format. This module
recognises that format by content (`sniff`), parses it with ``prometheus_client``'s own parser
(`prometheus_client.parser.text_string_to_metric_families`, never by hand) and turns each scrape into
one `EngineSample` per vLLM engine (the ``engine`` label): the same figures a periodic stats line
states — running and waiting requests, KV cache usage, preemptions, prefix-cache hit rate — plus the
TTFT and inter-token-latency histograms. The extractor then adds the samples to the same runtime
aggregates the stats lines fill (`kvlogdiag.extract.facts.StatsSummary`), so the same rules read them.

Metric names, as the released vLLM source defines them (docs/metrics.md cites file:line):

* ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` (gauges; V0 and V1);
  ``vllm:num_requests_waiting_by_reason{reason="deferred"}`` (vLLM >= 0.20) is the deferred part of waiting;
* ``vllm:kv_cache_usage_perc`` (V1 >= 0.10; a fraction, 1 = 100 %), older ``vllm:gpu_cache_usage_perc``
  (V0, and V1 until 0.11 where it is hidden);
* ``vllm:num_preemptions_total`` (counter; V0 and V1);
* ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` (V1 >= 0.10), older
  ``vllm:gpu_prefix_cache_queries_total`` / ``..._hits_total``; V0's gauge ``vllm:gpu_prefix_cache_hit_rate``;
* ``vllm:time_to_first_token_seconds`` and ``vllm:inter_token_latency_seconds`` (older
  ``vllm:time_per_output_token_seconds``) histograms.
"""

from __future__ import annotations

import math
import re
from typing import Any

from kvlogdiag import recache
from kvlogdiag.records import Record

__all__ = ["EngineSample", "MetricsError", "Scrape", "histogram_quantile", "parse_scrape", "parse_scrapes", "sniff"]

#: bytes of the head `sniff` looks at
SNIFF_BYTES = 1 << 16

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_VALUE = r"[-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|[0-9]+\.|NaN|Nan|nan|[-+]?Inf|[-+]?inf)"
_SAMPLE_RE = recache.compile(rf"^{_NAME}(?:\{{.*\}})?[ \t]+{_VALUE}(?:[ \t]+-?[0-9]+)?[ \t]*$")
_COMMENT_RE = recache.compile(rf"^#[ \t]+(?:HELP|TYPE)[ \t]+{_NAME}(?:[ \t].*)?$|^#.*$")
_HELP_RE = recache.compile(rf"^#[ \t]+HELP[ \t]+({_NAME})")


class MetricsError(ValueError):
    """A text that looked like a Prometheus exposition but does not parse; the message names the line."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.line = line


def sniff(head: bytes) -> bool:
    """Is ``head`` (the first bytes of an input) a Prometheus text exposition?

    Every complete line of the head must be a ``# HELP``/``# TYPE``/comment line, a sample line
    (``name{labels} value [timestamp]``) or blank; there must be at least one ``# TYPE`` line and one
    sample. A log line (``INFO 12-01 15:20:48 ...``) is never a sample line, so one log line in the
    head is enough to say "not metrics"."""
    if not head:
        return False
    cut = head.rfind(b"\n")
    if cut >= 0 and not head.endswith(b"\n"):
        head = head[:cut]  # the last line may be cut by the head's end (or a pipe's first read)
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    samples = types = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if not _COMMENT_RE.match(line):
                return False
            types += line.split(None, 2)[1:2] == ["TYPE"]
            continue
        if not _SAMPLE_RE.match(line):
            return False
        samples += 1
    return samples > 0 and types > 0


class Histogram(Record):  # a plain record, not a dataclass: less to build per start (kvlogdiag/records.py)
    """One engine's cumulative histogram: (upper bound, cumulative count) pairs, the count and the sum."""

    _FIELDS = ("buckets", "count", "total")
    buckets: list[tuple[float, float]]
    count: float
    total: float

    def __init__(self, buckets: list[tuple[float, float]], count: float, total: float) -> None:
        self.buckets = buckets
        self.count = count
        self.total = total

    def quantile(self, q: float) -> float | None:
        return histogram_quantile(q, self.buckets)

    def to_json(self) -> dict[str, Any]:
        mean = self.total / self.count if self.count else None
        return {"count": int(self.count), "mean_s": _r(mean), "p50_s": _r(self.quantile(0.5)),
                "p90_s": _r(self.quantile(0.9)), "p99_s": _r(self.quantile(0.99))}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of a cumulative histogram, as Prometheus' ``histogram_quantile`` estimates it:
    linear interpolation inside the bucket the rank falls in; the highest finite bound when it falls in
    the ``+Inf`` bucket; None without observations."""
    bs = sorted(buckets)
    if not bs or bs[-1][1] <= 0:
        return None
    total = bs[-1][1]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in bs:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = (bound if not math.isinf(bound) else prev_bound), count
    return prev_bound


class EngineSample(Record):
    """One engine's figures in one scrape (``engine`` label; None when the exposition has no such label).

    ``lines`` maps each figure to (line in the scrape text, the sample line) for evidence."""

    _FIELDS = ("engine", "running", "waiting", "deferred", "kv_usage_pct", "kv_usage_metric", "preemptions_total",
               "prefix_queries", "prefix_hits", "prefix_hit_rate_pct", "ttft", "itl", "itl_metric", "model", "lines")
    engine: str | None
    running: int | None = None
    waiting: int | None = None
    deferred: int | None = None
    kv_usage_pct: float | None = None
    kv_usage_metric: str | None = None
    preemptions_total: int | None = None
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    prefix_hit_rate_pct: float | None = None  # V0 gauge
    ttft: Histogram | None = None
    itl: Histogram | None = None
    itl_metric: str | None = None
    model: str | None = None
    lines: dict[str, tuple[int, str]]

    def __init__(self, engine: str | None, running: int | None = None, waiting: int | None = None,
                 deferred: int | None = None, kv_usage_pct: float | None = None, kv_usage_metric: str | None = None,
                 preemptions_total: int | None = None, prefix_queries: float | None = None,
                 prefix_hits: float | None = None, prefix_hit_rate_pct: float | None = None,
                 ttft: Histogram | None = None, itl: Histogram | None = None, itl_metric: str | None = None,
                 model: str | None = None, lines: dict[str, tuple[int, str]] | None = None) -> None:
        self.engine = engine
        self.running = running
        self.waiting = waiting
        self.deferred = deferred
        self.kv_usage_pct = kv_usage_pct
        self.kv_usage_metric = kv_usage_metric
        self.preemptions_total = preemptions_total
        self.prefix_queries = prefix_queries
        self.prefix_hits = prefix_hits
        self.prefix_hit_rate_pct = prefix_hit_rate_pct
        self.ttft = ttft
        self.itl = itl
        self.itl_metric = itl_metric
        self.model = model
        self.lines = {} if lines is None else lines

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "model": self.model, "running": self.running, "waiting": self.waiting,
                "deferred": self.deferred, "kv_usage_pct": self.kv_usage_pct, "kv_usage_metric": self.kv_usage_metric,
                "preemptions_total": self.preemptions_total, "prefix_cache_queries": self.prefix_queries,
                "prefix_cache_hits": self.prefix_hits, "prefix_cache_hit_rate_pct": self.hit_rate_pct(),
                "ttft": self.ttft.to_json() if self.ttft else None, "itl": self.itl.to_json() if self.itl else None}

    def hit_rate_pct(self) -> float | None:
        if self.prefix_queries:
            return round(100.0 * (self.prefix_hits or 0.0) / self.prefix_queries, 2)
        return self.prefix_hit_rate_pct

    @property
    def has_figures(self) -> bool:
        return self.running is not None or self.kv_usage_pct is not None


class Scrape(Record):
    """One parsed exposition: its vLLM engines (in order of their engine label) and what else it held."""

    _FIELDS = ("engines", "first_line", "families", "vllm_families")
    engines: list[EngineSample]
    first_line: int  # line of the scrape's text where it starts (1-based)
    families: int  # metric families parsed
    vllm_families: int  # of them, vllm:* ones

    def __init__(self, engines: list[EngineSample], first_line: int, families: int, vllm_families: int) -> None:
        self.engines = engines
        self.first_line = first_line
        self.families = families
        self.vllm_families = vllm_families

    def to_json(self) -> dict[str, Any]:
        return {"first_line": self.first_line, "families": self.families, "vllm_families": self.vllm_families,
                "engines": [e.to_json() for e in self.engines]}


# family name (as the parser names it: counters without _total) → what it is
_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage_gpu",
    "vllm:gpu_prefix_cache_hit_rate": "hit_rate",
    "vllm:num_requests_waiting_by_reason": "waiting_by_reason",
}
_COUNTERS = {
    "vllm:num_preemptions": "preemptions",
    "vllm:prefix_cache_queries": "queries",
    "vllm:prefix_cache_hits": "hits",
    "vllm:gpu_prefix_cache_queries": "queries_gpu",
    "vllm:gpu_prefix_cache_hits": "hits_gpu",
}
_HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": "ttft",
    "vllm:inter_token_latency_seconds": "itl",
    "vllm:time_per_output_token_seconds": "itl_old",
}


def _split(text: str) -> list[tuple[int, str]]:
    """Concatenated scrapes (``curl .../metrics >> saved.txt`` in a loop) → (first line, text) of each.

    A scrape ends where a ``# HELP`` of a family already seen in it starts again."""
    out: list[tuple[int, str]] = []
    seen: set[str] = set()
    start = 0
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        m = _HELP_RE.match(line)
        if m is None:
            continue
        name = m.group(1)
        if name in seen:
            out.append((start + 1, "".join(lines[start:i])))
            start, seen = i, set()
        seen.add(name)
    out.append((start + 1, "".join(lines[start:])))
    return [(n, t) for n, t in out if t.strip()]


def parse_scrapes(text: str) -> list[Scrape]:
    """Every scrape of a saved text (one, or several concatenated); raises `MetricsError`."""
    return [parse_scrape(t, first) for first, t in _split(text)]


def parse_scrape(text: str, first_line: int = 1) -> Scrape:
    """One scrape's vLLM figures, per engine. Raises `MetricsError` (with the line) when it does not parse."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # noqa: BLE001 - the parser raises ValueError and others on bad input
        msg = str(exc) or type(exc).__name__
        raise MetricsError(f"not a valid Prometheus exposition ({msg[:200]})", _line_of(text, msg, first_line)) from None
    index = _SampleLines(text, first_line)
    engines: dict[str | None, EngineSample] = {}

    def eng(labels: dict[str, str]) -> EngineSample:
        key = labels.get("engine")
        e = engines.get(key)
        if e is None:
            e = engines[key] = EngineSample(key)
        if e.model is None and labels.get("model_name"):
            e.model = labels["model_name"]
        return e

    hist: dict[tuple[str, str | None], dict[str, Any]] = {}
    n_vllm = 0
    for fam in families:
        if fam.name.startswith("vllm:"):
            n_vllm += 1
        name = fam.name
        if name.endswith("_total") and name[:-6] in _COUNTERS:  # a counter sample without its # TYPE line
            name = name[:-6]
        gauge = _GAUGES.get(name)
        counter = _COUNTERS.get(name)
        histo = _HISTOGRAMS.get(fam.name)
        if gauge is None and counter is None and histo is None:
            continue
        for s in fam.samples:
            if not math.isfinite(s.value):
                continue
            if histo is not None:
                h = hist.setdefault((histo, s.labels.get("engine")), {"buckets": [], "count": 0.0, "sum": 0.0,
                                                                      "labels": s.labels})
                if s.name.endswith("_bucket") and "le" in s.labels:
                    h["buckets"].append((float(s.labels["le"]), s.value))
                elif s.name.endswith("_count"):
                    h["count"] = s.value
                elif s.name.endswith("_sum"):
                    h["sum"] = s.value
                continue
            if counter is not None and not s.name.endswith("_total"):
                continue  # the _created timestamp of a counter
            e = eng(s.labels)
            what = gauge or counter
            where = index.find(s.name, s.labels)
            if what == "running":
                e.running = int(s.value)
                e.lines["running"] = where
            elif what == "waiting":
                e.waiting = int(s.value)
                e.lines["waiting"] = where
            elif what == "waiting_by_reason":
                if s.labels.get("reason") == "deferred":
                    e.deferred = int(s.value)
            elif what == "kv_usage" or (what == "kv_usage_gpu" and e.kv_usage_metric != "vllm:kv_cache_usage_perc"):
                e.kv_usage_pct = round(100.0 * s.value, 4)
                e.kv_usage_metric = fam.name
                e.lines["kv_usage"] = where
            elif what == "hit_rate":
                if s.value >= 0:
                    e.prefix_hit_rate_pct = round(100.0 * s.value, 2)
            elif what == "preemptions":
                e.preemptions_total = int(s.value)
                e.lines["preemptions"] = where
            elif what in ("queries", "queries_gpu") and (what == "queries" or e.prefix_queries is None):
                e.prefix_queries = s.value
            elif what in ("hits", "hits_gpu") and (what == "hits" or e.prefix_hits is None):
                e.prefix_hits = s.value
    for (kind, _engine), h in hist.items():
        e = eng(h["labels"])
        hg = Histogram(h["buckets"], h["count"], h["sum"])
        if kind == "ttft":
            e.ttft = hg
        elif kind == "itl" or e.itl is None:
            e.itl = hg
            e.itl_metric = "vllm:inter_token_latency_seconds" if kind == "itl" else "vllm:time_per_output_token_seconds"
    ordered = sorted(engines.values(), key=lambda e: (e.engine is None, _engine_key(e.engine)))
    return Scrape([e for e in ordered if e.has_figures], first_line, len(families), n_vllm)


def _engine_key(engine: str | None) -> tuple[int, str]:
    if engine is not None and engine.isdigit():
        return (int(engine), "")
    return (1 << 30, engine or "")


class _SampleLines:
    """Where a sample stands in the scrape text (prometheus_client does not say): its line and text."""

    def __init__(self, text: str, first_line: int):
        self.by_name: dict[str, list[tuple[int, str]]] = {}
        for i, raw in enumerate(text.splitlines()):
            line = raw.strip()
            if line and not line.startswith("#"):
                name = re.split(r"[{ \t]", line, maxsplit=1)[0]
                self.by_name.setdefault(name, []).append((first_line + i, line))

    def find(self, name: str, labels: dict[str, str]) -> tuple[int, str]:
        cands = self.by_name.get(name) or []
        for n, line in cands:
            if all(f'{k}="{_escape_label(v)}"' in line for k, v in labels.items()):
                return n, line
        return cands[0] if cands else (0, name)


def _escape_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _line_of(text: str, msg: str, first_line: int) -> int | None:
    """The line a parser message quotes ("Invalid line: ..."), when it can be found."""
    m = re.search(r"(?:line|Invalid line)[^:]*: ?(.+)$", msg)
    if m:
        frag = m.group(1).strip().strip("'\"")[:80]
        if frag:
            for i, raw in enumerate(text.splitlines()):
                if frag in raw:
                    return first_line + i
    return None
