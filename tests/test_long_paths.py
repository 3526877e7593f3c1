"""Session 7's long-log fast paths give what the plain code gives.

* `stats_batch.parse_stats` reads the head groups in one `m.groups()` call and converts the throughputs
  inline: the same tuple as reading each group by name and converting with `_float` (both batch and
  per-line paths use `parse_stats`, so their comparison in test_stats_batch.py cannot see this);
* `stats_batch._rounded` is ``float(f"{v:.3g}")``, type and sign included;
* the numpy finder's windows (`reader._window`) cover every keyword of a pair, and a finder with broken
  windows is caught by the comparison with the regex.
"""

from __future__ import annotations

import math
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as s

from kvlogdiag.extract import extractor as X
from kvlogdiag.extract import stats_batch as B
from kvlogdiag.input import reader as R

STATS = next(p for p in X._dispatch_tables()[0] if p.name == "stats").regex


def _reference(m: re.Match) -> tuple | None:
    e, agg, ptps, gtps, running_s, swapped, pending, waiting_s, rest = m.group(*B._HEAD_GROUPS)
    try:
        running = int(running_s)
        ws = waiting_s if waiting_s is not None else pending
        waiting = int(ws) if ws is not None else 0
        deferred, usages, preemptions, hit = 0, [], None, None
        if rest:
            for tm in B.STATS_TAIL.finditer(rest):
                p, device, usage, h, d = tm.group("preemptions", "device", "kv_usage", "hit", "deferred")
                if p:
                    preemptions = (preemptions or 0) + int(p)
                elif usage:
                    if device == "CPU" and swapped is not None:
                        continue
                    usages.append(float(usage))
                elif h:
                    hit = float(h)
                elif d:
                    deferred = int(d)
        engine = int(e) if e is not None else None
    except ValueError:
        return None
    return (engine, agg is not None, swapped is not None, running, waiting, deferred, preemptions,
            tuple(usages), hit, B._float(ptps), B._float(gtps))


_NUM = s.one_of(s.from_regex(r"\A[0-9]{1,6}(\.[0-9]{1,3})?\Z"), s.just("1.2.3"), s.just("9" * 45), s.just("." ),
                s.just("1e5"), s.just("0" * 39 + "1"))


@settings(max_examples=400, deadline=None)
@given(head=s.sampled_from(["", "Engine 003: ", "8 Engines Aggregated: "]), ptps=_NUM, gtps=_NUM,
       running=s.integers(0, 500), waiting=s.integers(0, 500), v0=s.booleans(),
       tail=s.lists(s.sampled_from(["Preemptions: 3", "GPU KV cache usage: 95.1%", "CPU KV cache usage: 2.0%",
                                    "Prefix cache hit rate: 35.5%", "Preemptions: 0", "GPU KV cache usage: 1.2.3%"]),
                    max_size=4))
def test_parse_stats_matches_the_by_name_reading(head, ptps, gtps, running, waiting, v0, tail):
    queue = f"Swapped: 0 reqs, Pending: {waiting} reqs" if v0 else f"Waiting: {waiting} reqs"
    text = (f"{head}Avg prompt throughput: {ptps} tokens/s, Avg generation throughput: {gtps} tokens/s, "
            f"Running: {running} reqs, {queue}" + "".join(", " + t for t in tail))
    m = STATS.search(text)
    if m is None:
        return
    assert B.parse_stats(m) == _reference(m)


def test_parse_stats_by_name_when_groups_move():
    # a pattern whose groups are not in _HEAD_GROUPS order is read by name
    moved = re.compile(r"(?P<rest>x)?(?P<engine>\d+) (?P<aggregated>a)?(?P<prompt_tps>[\d.]+) (?P<gen_tps>[\d.]+) "
                       r"(?P<running>\d+) (?P<swapped>s)?(?P<pending>p)?(?P<waiting>\d+)")
    m = moved.search("7 1.5 2.5 3 4")
    assert B.parse_stats(m) == (7, False, False, 3, 4, 0, None, (), None, 1.5, 2.5)
    assert B.parse_stats(STATS.search("Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, "
                                      "Running: 3 reqs, Waiting: 4 reqs")) == (None, False, False, 3, 4, 0, None, (), None,
                                                                                1.0, 2.0)


def test_rounded_is_the_formula():
    rnd = random.Random(7)
    values = [0, 0.0, -0.0, 64, 64.0, 123456, 1.23456, 99.95, 1e-7, 10**30, 5e-324]
    values += [rnd.random() * 10 ** rnd.randint(-3, 6) for _ in range(5000)] + list(range(3000))
    for v in values + values:  # the second time from the memo
        got, want = B._rounded(v), float(f"{v:.3g}")
        assert repr(got) == repr(want) and type(got) is type(want) and math.copysign(1, got) == math.copysign(1, want)


def test_window_is_inside_the_keyword():
    kws = [b"ab", b"abc", b"abcd", b"xabcdefgh", b"Avg prompt throughput", b"TPU", b"is not"]
    for kw in kws:
        for i in range(len(kw) - 1):
            w, width = R._window(i, kw)
            assert 0 <= w and w + width <= len(kw) and width == min(4, len(kw))


np = pytest.importorskip("numpy")


def _finder_lines(finder, chunk):
    return [(s_, e) for _, s_, e in finder.lines(chunk)[0]]


def test_bigram_windows_against_the_regex():
    # keywords sharing pairs (several per pair, short ones, one past WINDOWS), near misses and cut windows
    # pairs shared by several keywords (2, 3 and more than WINDOWS of them), short keywords, near misses, cut windows
    kws = [b"TPU", b"GPU KV", b"KV cache is", b"Recompute", b"You can try", b"is not", b"ab", b"zq",
           b"\x01\x02", b"\x01\x02A", b"\x01\x02AAAA", b"\x01\x03B", b"\x01\x03BBBBB",
           b"C\x04\x05", b"\x04\x05DDDD", b"EE\x04\x05", b"\x04\x05FFF",
           b"\x06\x07G1", b"\x06\x07G2", b"\x06\x07G3", b"\x06\x07G4", b"\x06\x07"]
    rx = re.compile(b"|".join(re.escape(k) for k in sorted(kws, key=len, reverse=True)))
    rnd = random.Random(3)
    pieces = kws + [k[:-1] for k in kws] + [k[1:] for k in kws] + [b"\n", b" ", b"KV", b"GP", b"Yo", b"is ", b"a", b"z",
                                                                   b"\x01", b"\x04", b"\x06", b"\x07"]
    finder = R._BigramFinder(np, kws, b"the quick brown fox jumps over the lazy dog\n" * 50)
    sizes = sorted(len(g) for g in finder.groups.values())
    assert sizes[-1] > R.WINDOWS and any(1 < n <= R.WINDOWS for n in sizes)  # every kind of pair is exercised
    for _ in range(60):
        chunk = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 400)))
        assert _finder_lines(finder, chunk) == R._regex_spans(chunk, rx), chunk
    # a broken window (wrong bytes for every keyword) is seen by the same comparison
    finder.want[:] = 0xFFFFFFFF
    finder.mask[:] = 0xFFFFFFFF
    bad = 0
    for _ in range(60):
        chunk = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(50, 400)))
        bad += _finder_lines(finder, chunk) != R._regex_spans(chunk, rx)
    assert bad
