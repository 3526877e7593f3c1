"""Stats lines in batches: the runtime lines of a long log read into `StatsSummary` a batch at a time.

A long log is mostly ``Avg prompt throughput: ...`` stats lines (one per engine every 10 s). Read one at
a time, each line built a `Fact`, went through `StatsSummary.add_sample` / ``add_kv_usage`` /
``add_samples`` and six dict updates: ~14 µs of Python per line. `StatsBatch` keeps the matches of up
to `BATCH_LINES` consecutive stats lines of one run (the extractor flushes it before any other line, a
new run and the end of the input, so nothing else ever sees a half-fed summary) and folds them into the
summary in one pass over local variables:

* `Fact` objects are built only for the lines the summary keeps (the first and last line of each KV-usage
  step touched, a new peak, the first preemption, ...), one per line at most, shared as before;
* each figure's distribution (``StatsSummary.series``) is counted per batch (`collections.Counter`),
  unless the batch could reach `SERIES_MAX_VALUES` distinct values, where values are rounded one by
  one in line order exactly as ``add_samples`` does.

Both paths read a match through `stats_values`, so a figure is converted the same way; the per-line
path (``Extractor._h_stats``) stays for ``watch`` (its listeners hear every peak as it happens) and
the timelines of ``scan --html``, and is the oracle of ``tests/test_stats_batch.py``.

`read_run` reads a run of consecutive stats lines the reader hands over as bytes (`reader.StatsRun`, no
`Line` per line) with a few ``findall`` calls over their joined text and converts the figures a column at a
time; its lines join the batch as (run, index), and a kept line's `Fact` is made from its bytes (`run_raw`).
`fold` works a figure (a column) at a time. ``tests/test_stats_runs.py`` holds both to the per-line path.
"""

from __future__ import annotations

import collections
import math
import re
from collections import Counter
from functools import reduce
from itertools import chain, compress
from math import isfinite as _isfinite
from operator import add, itemgetter
from typing import Any, Callable

from kvlogdiag.catalogue.patterns import STATS_TAIL
from kvlogdiag.extract.facts import KV_USAGE_STEPS, SERIES, SERIES_MAX_VALUES, Fact, LogFacts, UsageBucket
from kvlogdiag.input.reader import _ANSI, RECORD_WINDOW, proc_prefix

BATCH_LINES = 1024  # lines held at most (each with its Line, or its run's bytes): memory stays flat (~1 MB)

_HEAD_GROUPS = ("engine", "aggregated", "prompt_tps", "gen_tps", "running", "swapped", "pending", "waiting", "rest")


def _float(text: str | None) -> float | None:
    # vLLM prints ASCII digits; float() also reads '٣٠' or '３０' (Arabic-Indic, fullwidth): damage, not a figure
    if text is None or len(text) > 40 or not text.isascii():
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


_VALUES: dict[str, tuple | None] = {}  # matched text -> its figures: idle engines print the same line for hours
_VALUES_MAX = 4096


def stats_values(m: Any) -> tuple | None:
    """The figures of one stats-line match: (engine, aggregated, v0, running, waiting, deferred,
    preemptions, usages, hit, prompt_tps, gen_tps); None when a count or a percentage of the line is
    damaged (``1.2.3 %``, a run of thousands of digits): such a line is no sample.

    The figures are a function of the matched text alone (the pattern's one look-behind only decides
    whether a match may start where it does), so they are kept by that text."""
    key = m.group(0)
    got = _VALUES.get(key, False)
    if got is not False:
        return got  # type: ignore[return-value]
    if len(_VALUES) >= _VALUES_MAX:
        _VALUES.clear()
    got = _VALUES[key] = parse_stats(m)
    return got


_GROUPS_IN_ORDER: list = [None, False]  # (pattern, its groups are exactly _HEAD_GROUPS in order) of the last match


def _head(m: Any) -> tuple:
    rx = m.re
    if _GROUPS_IN_ORDER[0] is not rx:
        _GROUPS_IN_ORDER[:] = [rx, rx.groups == len(_HEAD_GROUPS)
                               and all(rx.groupindex.get(n) == i + 1 for i, n in enumerate(_HEAD_GROUPS))]
    return m.groups() if _GROUPS_IN_ORDER[1] else m.group(*_HEAD_GROUPS)


def parse_stats(m: Any) -> tuple | None:
    """`stats_values` without its cache."""
    return _parse(*_head(m))


def _parse(e: str | None, agg: str | None, ptps: str | None, gtps: str | None, running_s: str, swapped: str | None,
           pending: str | None, waiting_s: str | None, rest: str | None) -> tuple | None:
    """The figures of a stats line from its head groups (None: a group that took no part)."""
    try:
        running = int(running_s)
        ws = waiting_s if waiting_s is not None else pending
        waiting = int(ws) if ws is not None else 0
        deferred = 0
        usages: list[float] = []
        preemptions = None
        hit = None
        if rest:
            v0 = swapped is not None
            # findall gives "" for a group that took no part: none of these can match empty
            for p, device, usage, h, d in (STATS_TAIL.findall(rest) if _TAIL_FINDALL else _tail_groups(rest)):
                if p:
                    preemptions = (preemptions or 0) + int(p)
                elif usage:
                    if device == "CPU" and v0:
                        continue  # V0 'CPU KV cache usage' is the swap space, not the KV pool (KVD013)
                    usages.append(float(usage))
                elif h:
                    hit = float(h)
                elif d:
                    deferred = int(d)
        engine = int(e) if e is not None else None
    except ValueError:
        return None
    # _float, inlined: two calls a line
    try:
        pv = float(ptps) if ptps is not None and len(ptps) <= 40 else None
    except ValueError:
        pv = None
    try:
        gv = float(gtps) if gtps is not None and len(gtps) <= 40 else None
    except ValueError:
        gv = None
    return (engine, agg is not None, swapped is not None, running, waiting, deferred, preemptions,
            tuple(usages), hit, pv if pv is None or _isfinite(pv) else None, gv if gv is None or _isfinite(gv) else None)


_TAIL_NAMES = ("preemptions", "device", "kv_usage", "hit", "deferred")
# STATS_TAIL.findall yields exactly these groups, in this order (else: by name, below)
_TAIL_FINDALL = STATS_TAIL.groups == 5 and all(STATS_TAIL.groupindex.get(n) == i + 1 for i, n in enumerate(_TAIL_NAMES))


def _tail_groups(rest: str) -> list[tuple]:
    return [tuple(g or "" for g in tm.group(*_TAIL_NAMES)) for tm in STATS_TAIL.finditer(rest)]


def _usage_step(pct: float) -> int:
    # facts.usage_step, inlined for the hot loop (tests/test_stats_batch.py checks they agree)
    if not pct > 0:
        return 0
    if pct >= 100:
        return KV_USAGE_STEPS
    step = math.floor(pct * 10 + 1e-6)
    return step if step < KV_USAGE_STEPS else KV_USAGE_STEPS


def fold(facts: LogFacts, batch: list, fact_of: Callable[[Any], Fact]) -> None:
    """Fold ``batch`` — (values of `stats_values`, line) pairs of consecutive stats lines, in log order —
    into ``facts.stats`` exactly as one ``Extractor._h_stats`` call per line would (listeners aside: the
    batch is used only when nobody listens). ``fact_of(line)`` builds a line's `Fact`.

    The batch is folded a figure (a column) at a time: maxima with ``max``, counts with ``count``, first and
    last lines with ``index`` and dicts built from (key, index) pairs, the float sums added in line order
    (``functools.reduce``: ``sum()`` of floats is compensated from Python 3.12 and would change the figures)."""
    if not batch:
        return
    st = facts.stats
    made: dict[int, Fact] = {}

    def fact(i: int) -> Fact:
        f = made.get(i)
        if f is None:
            f = made[i] = fact_of(batch[i][1])
        return f

    n = len(batch)
    engine, aggregated, v0, running, waiting, deferred, preemptions, usages, hit, ptps, gtps = zip(*map(_first, batch))
    v0_engine = v0.index(True) if True in v0 and not facts.engine else None
    st.lines += n
    engines = set(engine)
    engines.discard(None)
    st.engines.update(engines)
    m = max(running)
    if st.running_max is None or m > st.running_max:
        st.running_max = m
    m = max(waiting)
    if st.waiting_max is None or m > st.waiting_max:
        st.waiting_max = m
    st.busy_lines += n - list(zip(running, waiting)).count((0, 0))
    if preemptions.count(None) != n:
        got = [p for p in preemptions if p is not None]
        st.preemptions_total += sum(got)  # ints: exact in any order
        nonzero = len(got) - got.count(0)
        st.preemption_lines += nonzero
        if nonzero and st.preemption_first is None:
            st.preemption_first = fact(next(i for i, p in enumerate(preemptions) if p))
    # the usages, flat, with the index of their line; each line's last usage (the line's `usage`)
    if set(map(len, usages)) == {1}:
        flat: list = [u for (u,) in usages]
        where: Any = range(n)
        usage: Any = flat
    else:
        flat = list(chain.from_iterable(usages))
        where = [i for i, us in enumerate(usages) for _ in us]
        usage = [us[-1] if us else None for us in usages]
    if flat:
        st.kv_usage_samples += len(flat)
        st.kv_usage_last = flat[-1]
        m = max(flat)  # the first of the greatest, as a running "u > kmax" keeps it
        if st.kv_usage_max is None or m > st.kv_usage_max:
            st.kv_usage_max = m
            st.kv_usage_max_fact = fact(where[flat.index(m)])
        steps: list = list(map(_STEPS.get, flat))
        if None in steps:
            steps = [s if s is not None else _step(u) for s, u in zip(steps, flat)]
        hist = st.kv_usage_hist
        last_at = dict(zip(steps, where))
        first_at = dict(zip(reversed(steps), reversed(where)))
        for step, count in Counter(steps).items():  # first-touch order: new buckets as add_kv_usage adds them
            b = hist.get(step)
            if b is None:
                hist[step] = UsageBucket(count, fact(first_at[step]), fact(last_at[step]))
            else:
                b.count += count
                b.last = fact(last_at[step])
    if hit.count(None) != n:
        st.prefix_hit_last = next(h for h in reversed(hit) if h is not None)
    st.deferred_lines += n - deferred.count(0)
    if 1 in running:
        i = -1
        while True:
            try:
                i = running.index(1, i + 1)
            except ValueError:
                break
            if waiting[i] - deferred[i] > 0:
                st.single_running_with_queue += 1
                if st.single_running_first is None:
                    st.single_running_first = fact(i)
                u = usage[i]
                if u is not None and (st.single_running_kv_usage_max is None or u > st.single_running_kv_usage_max):
                    st.single_running_kv_usage_max = u
    # one engine's V1 line with a usage and requests running: the workload sums
    if True not in v0 and True not in aggregated and None not in usage:
        wl = list(compress(range(n), running))
    else:
        wl = [i for i in range(n) if running[i] and usage[i] is not None and not v0[i] and not aggregated[i]]
    if wl:
        st.workload_lines += len(wl)
        p = list(map(ptps.__getitem__, wl))
        g = list(map(gtps.__getitem__, wl))
        st.prompt_tps_sum = reduce(add, p if None not in p else [x or 0.0 for x in p], st.prompt_tps_sum)
        st.gen_tps_sum = reduce(add, g if None not in g else [x or 0.0 for x in g], st.gen_tps_sum)
        st.running_sum = reduce(add, map(running.__getitem__, wl), st.running_sum)
        st.kv_usage_running_sum = reduce(add, map(usage.__getitem__, wl), st.kv_usage_running_sum)
        if st.workload_first is None:
            st.workload_first = fact(wl[0])
        st.workload_last = fact(wl[-1])
    # distributions over active lines only (running, waiting or a throughput)
    active = list(compress(range(n), map(any, zip(running, waiting, ptps, gtps))))
    if active:
        cols = (ptps, gtps, running, waiting, usage, hit)
        if len(active) < n:
            pick = [list(map(c.__getitem__, active)) for c in cols]
        else:
            pick = [list(c) for c in cols]
        _count_series(st.series, pick)
    if v0_engine is not None:
        f = fact(v0_engine)
        facts.engine.append(Fact("v0", f.line, f.rank, f.raw, "v0_stats", f.run, f.dp))


def _count_in_python(counts: dict, values: Any) -> None:
    for v in values:
        counts[v] = counts.get(v, 0) + 1


# the C loop behind collections.Counter (stdlib, 3.10-3.13): `_count_in_python` where an interpreter lacks it
_count_elements = getattr(collections, "_count_elements", _count_in_python)
_first = itemgetter(0)
_STEPS: dict[float, int] = {}  # usage -> its histogram step: a usage is printed with one decimal, so they repeat


def _step(u: float) -> int:
    if len(_STEPS) >= 4096:
        _STEPS.clear()
    s = _STEPS[u] = _usage_step(u)
    return s


def _count_series(series: dict, cols: list) -> None:
    """``StatsSummary.add_samples`` for each active line, one figure at a time: ``cols`` holds each figure's
    values over those lines, in `SERIES` order (None: the line has no such figure)."""
    if not series:
        series.update((name, {}) for name in SERIES)
    for name, col in zip(SERIES, cols):
        counts = series[name]
        if None in col:
            col = [v for v in col if v is not None]
        k = 0
        if len(counts) + len(col) > SERIES_MAX_VALUES:
            # one value at a time until the cap is reached; from then on (a dict never shrinks) every value
            # is rounded, as add_samples rounds it
            while k < len(col) and len(counts) < SERIES_MAX_VALUES:
                v = col[k]
                counts[v] = counts.get(v, 0) + 1
                k += 1
            # float(f"{v:.3g}") for the rest of the column (as _rounded: a zero of either sign or type gives its
            # float); a comprehension: faster than map with str.format
            col = [float(f"{v:.3g}") for v in col[k:]]
        # counts[v] = counts.get(v, 0) + 1 for each value in order (what add_samples does), in C
        _count_elements(counts, col)


_ROUNDED: dict[float, float] = {}  # value -> float(f"{v:.3g}"): the figures of a busy server repeat
_ROUNDED_MAX = 4096


def _rounded(v: float) -> float:
    """``float(f"{v:.3g}")`` (how ``add_samples`` rounds a value past the cap), remembered by value; a zero is its
    own rounding, as a float (0.0 and -0.0 are one key of a dict; an int figure rounds to a float)."""
    r = _ROUNDED.get(v)
    if r is None:
        if not v:
            return float(v)
        if len(_ROUNDED) >= _ROUNDED_MAX:
            _ROUNDED.clear()
        r = _ROUNDED[v] = float(f"{v:.3g}")
    return r


# -- a run of stats lines read as one text (`kvlogdiag.input.reader.StatsRun`) ------------------------------
# The lines of a run are joined and read with a few `findall` calls over the whole text, the figures converted a
# column at a time. This is exact only for lines the per-line reader would hand over unchanged, so a run is read
# so only when its text is ASCII, has no ANSI code left, no carriage return inside a line, no alignment spaces,
# tab or '#' (what `normalise_message` rewrites), every line starts with a vLLM process prefix or a bare record
# head (`split_envelope`'s fast paths: no envelope learnt, no metadata but the IP) and holds the keyword exactly
# once. Then:
#
# * the tail (the pattern after its optional head) starts with that keyword, a literal `re` finds at C speed,
#   and cannot cross a line (nothing in it matches a newline; in MULTILINE form its `$` ends each line): n
#   matches are the n lines' matches, in order, and each starts at the line's only keyword, where the per-line
#   leftmost match has its tail;
# * the head ("Engine N: " / "N Engines Aggregated: ", right before the keyword) is read from the reversed text,
#   where it follows the keyword (`_REV_HEAD`, the head of `STATS_HEAD` read backwards; the aggregated count's
#   look-behind becomes a look-ahead); the char before a line's text in the run (a prefix's ")" or " ", a
#   newline) is no digit, as nothing is before it in the line;
# * the tail's rest in vLLM V1's usual form (", [Preemptions: N, ]GPU KV cache usage: X%, Prefix cache hit rate:
#   Y%") is read by the same findall (`_V1_REST`: the rest group captures the same text), any other rest with
#   `STATS_TAIL` as `parse_stats` does.

STATS_HEAD = r"(?:(?:Engine (?P<engine>\d+)|(?<!\d)(?P<aggregated>\d+) Engines Aggregated): )?Avg prompt throughput: "
_KEY = "Avg prompt throughput: "
_REV_HEAD = re.compile(re.escape(_KEY[::-1]) + r"(?: :(\d+) enignE| :detagerggA senignE (\d+)(?!\d))?")
_V1_REST = r"(?P<rest>(?:, Preemptions: (\d+))?, GPU KV cache usage: ([\d.]+)%, Prefix cache hit rate: ([\d.]+)%|.*)$"
_PROC_HEADS = re.compile(r"\n(\([^)\n]{0,%d}\))" % (RECORD_WINDOW - 2))  # split_envelope: ")" found before RECORD_WINDOW
_BARE_HEADS = re.compile(r"\n(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d ")  # reader._HEAD
_LINE_SAFE = ("\\s", "\\S", "\\D", "\\W", "[^", "^", "\\Z", "\\n", "(?P<rest>")  # could cross or anchor a line
_TAIL_GROUPS = ("prompt_tps", "gen_tps", "running", "swapped", "pending", "waiting", "rest")
_RUN_RX: list = [None, None]  # (stats regex, its tail's MULTILINE form, or None: runs are read line by line) of the last call


def _run_regex(rx: re.Pattern) -> re.Pattern | None:
    if _RUN_RX[0] is rx:
        return _RUN_RX[1]
    tail = rx.pattern[len(STATS_HEAD):]
    ok = (rx.pattern.startswith(STATS_HEAD) and tail.endswith("(?P<rest>.*)$")
          and not rx.flags & (re.DOTALL | re.VERBOSE | re.IGNORECASE | re.ASCII)
          and not any(t in tail[: -len("(?P<rest>.*)$")] for t in _LINE_SAFE))
    brx = None
    if ok:
        brx = re.compile(re.escape(_KEY) + tail[: -len("(?P<rest>.*)$")] + _V1_REST, rx.flags | re.M)
        if brx.groups != len(_TAIL_GROUPS) + 3 or any(brx.groupindex.get(n) != i + 1 for i, n in enumerate(_TAIL_GROUPS)):
            brx = None
    _RUN_RX[:] = [rx, brx]
    return brx


def read_run(rx: re.Pattern, parts: list[bytes]) -> list | None:
    """The figures (`stats_values`, None for a damaged line) of each line of a run of stats lines (their bytes,
    without newlines), as the per-line path reads them; None when the run is not in the plain form read here."""
    brx = _run_regex(rx)
    if brx is None:
        return None
    blob = b"\n".join(parts)
    if not blob.isascii():
        return None
    if b"\r" in blob:  # CRLF line ends (make_line strips the trailing \r); a \r left is a progress bar's
        blob = blob.replace(b"\r\n", b"\n")
        if blob.endswith(b"\r"):
            blob = blob[:-1]
        if b"\r" in blob:
            return None
    text = "\n" + blob.decode("ascii")
    if "\x1b" in text:
        text = _ANSI.sub("", text)  # no ANSI code spans a newline
    if "  " in text or "\t" in text or "#" in text or "\x00" in text:
        return None
    n = len(parts)
    if text.count("Avg prompt throughput") != n:
        return None
    heads = _PROC_HEADS.findall(text)  # a line has one or the other (a process prefix starts with "(")
    if len(heads) < n and len(heads) + len(_BARE_HEADS.findall(text)) != n:
        return None
    if not all(proc_prefix(k) for k in set(heads)):
        return None
    rows = brx.findall(text)
    if len(rows) != n:
        return None
    heads = _REV_HEAD.findall(text[::-1])
    if len(heads) != n:
        return None
    heads.reverse()
    cols = list(zip(*rows))
    got = _columns(cols, heads) if all(cols[8]) and not any(cols[3]) else None
    if got is not None:
        return got
    out = []
    for (e, agg), row in zip(heads, rows):
        # findall gives "" for a group that took no part; none of these can match empty
        ptps, gtps, running, swapped, pending, waiting, rest = row[:7]
        out.append(_parse(e[::-1] or None, agg[::-1] or None, ptps, gtps, running, swapped or None, pending or None,
                          waiting or None, rest))
    return out


def _columns(cols: list, heads: list) -> list | None:
    """`read_run`'s figures of V1 lines with the usual rest, a column at a time (None: a figure needs the
    per-line reading, e.g. a damaged number)."""
    ptps, gtps, running_s, _swapped, _pending, waiting_s, _rest, pre_s, usage_s, hit_s = cols
    n = len(ptps)
    if max(map(len, ptps)) > 40 or max(map(len, gtps)) > 40:
        return None
    try:
        running = list(map(int, running_s))
        waiting = list(map(int, waiting_s))
        pv = list(map(float, ptps))
        gv = list(map(float, gtps))
        usages = list(zip(map(float, usage_s)))
        hit = list(map(float, hit_s))
        pre = [int(p) if p else None for p in pre_s] if any(pre_s) else [None] * n
        erev, arev = zip(*heads)
        engine = list(map(_ENGINES.get, erev))  # the few engine numbers of a log, remembered
        if None in engine:
            engine = [x if x is not None else _engine(e) for x, e in zip(engine, erev)]
    except ValueError:
        return None
    agg = [a != "" for a in arev] if any(arev) else [False] * n
    false, zero = [False] * n, [0] * n
    return list(zip(engine, agg, false, running, waiting, zero, pre, usages, hit, pv, gv))


_ENGINES: dict[str, int | None] = {"": None}  # an "Engine N: " head's digits, reversed -> N ("": no such head)


def _engine(rev: str) -> int | None:
    if len(_ENGINES) >= 4096:
        _ENGINES.clear()
        _ENGINES[""] = None
    v = _ENGINES[rev] = int(rev[::-1]) if rev else None
    return v


def run_raw(part: bytes) -> tuple[str, str | None]:
    """(raw, rank) of `make_line` for a line of a run `read_run` read (ASCII, at most a trailing carriage return,
    a vLLM process prefix or none): what a kept line's `Fact` needs, without the rest of `make_line`."""
    raw = part.decode("ascii")
    if raw[-1:] == "\r":
        raw = raw[:-1]
    if "\x1b" in raw:
        raw = _ANSI.sub("", raw)
    if raw[:1] == "(":
        hit = proc_prefix(raw[: raw.find(")", 1, RECORD_WINDOW) + 1])
        assert isinstance(hit, tuple)  # read_run took the run only so
        return raw, hit[0]
    return raw, None
