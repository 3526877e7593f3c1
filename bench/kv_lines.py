#!/usr/bin/env python3
"""Benchmark section "KV lines": memory and CPU on a log that repeats its KV lines (issue 18).

    python bench/kv_lines.py            # 50,000 and 500,000 KV lines (~6 min on 2 cores)
    python bench/kv_lines.py --quick    # 5,000 and 50,000

The input is the issue's: pairs of ``Available KV cache memory: 30.03 GiB`` and ``GPU KV cache size:
2,918,003 tokens`` lines of one engine (written under ``bench/out/``, git-ignored). The JSON lists every
value and one ``bytes_per_token_by_rank`` entry per pairing (the contract), so its output grows with the
log; the memory of the process must not. Measured: ``analyze`` (text, ``--format json``), ``report``
(Markdown, HTML with its charts) and ``watch --format json`` (the log on stdin, echoed on stdout; its
events, whose ``final`` and ``summary`` events carry every value, to ``/dev/null``; at the smaller size to
a file that is checked). Targets at 500,000 KV lines: text-mode peak RSS ≤ 100 MB, JSON, report and watch
≤ 150 MB; CPU linear in the KV lines: the CPU per KV line (start-up CPU taken off) at the two sizes within
30 %. ``bench/run.py`` runs this section too (its table goes into docs/performance.md); run alone, it
prints its rows and changes no file but its inputs.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run as bench  # noqa: E402
from tabulate import tabulate  # noqa: E402

T_TEXT_RSS_MB = 100.0
T_JSON_RSS_MB = 150.0
T_REPORT_RSS_MB = 150.0  # report (each format): session 7
T_WATCH_RSS_MB = 150.0  # watch --format json: session 7
T_LINEAR = 0.30  # CPU per KV line at the two sizes within 30 %
GIB, TOKENS = 30.03, 2_918_003
PAIR = ("(EngineCore_DP0 pid=1) INFO 11-01 10:00:00 [gpu_worker.py:1] Available KV cache memory: 30.03 GiB\n"
        "(EngineCore_DP0 pid=1) INFO 11-01 10:00:00 [kv_cache_utils.py:1] GPU KV cache size: 2,918,003 tokens\n")


def kv_log(lines: int) -> str:
    """``bench/out/kv_lines_N.log``: ``lines`` KV lines (written once; the content depends on N alone)."""
    os.makedirs(bench.OUT, exist_ok=True)
    path = os.path.join(bench.OUT, f"kv_lines_{lines}.log")
    want = len(PAIR.encode()) * (lines // 2)
    if not os.path.exists(path) or os.path.getsize(path) != want:
        with open(path, "w", encoding="utf-8") as fh:
            for _ in range(lines // 2):
                fh.write(PAIR)
    return path


def _check(out: bytes, lines: int) -> list[str]:
    """What the JSON must say of the log (the speed must not come from skipping work)."""
    kv = json.loads(out)["analyses"][0]["kv_cache"]
    wrong = []
    if kv["available_gib"] != [GIB] * (lines // 2) or kv["tokens"] != [TOKENS] * (lines // 2):
        wrong.append("kv_cache lists")
    if len(kv["bytes_per_token_by_rank"]) != lines // 2 or round(kv["bytes_per_token"]) != round(GIB * 2**30 / TOKENS):
        wrong.append("pairings / bytes_per_token")
    return wrong


def _check_watch(path: str, lines: int) -> list[str]:
    """The ``final`` event of ``watch --format json`` holds what ``analyze --format json`` does."""
    with open(path, encoding="utf-8") as fh:
        final = [json.loads(x) for x in fh if x.startswith('{"event": "final"')]
    if len(final) != 1:
        return [f"{len(final)} final events"]
    return _check(json.dumps({"analyses": [final[0]["analysis"]]}).encode(), lines)


#: (label, command after ``kvlogdiag``, RSS target at the larger size, whether the log comes on stdin)
COMMANDS = (
    ("analyze text", ["analyze"], T_TEXT_RSS_MB, False),
    ("analyze json", ["analyze", "--format", "json"], T_JSON_RSS_MB, False),
    ("report markdown", ["report", "--fail-on", "never"], T_REPORT_RSS_MB, False),
    ("report html", ["report", "--format", "html", "--fail-on", "never"], T_REPORT_RSS_MB, False),
    ("watch json", ["watch", "--format", "json", "--fail-on", "never"], T_WATCH_RSS_MB, True),
)


def section_kv_lines(rows: list, quick: bool = False) -> None:
    """Rows of the "KV lines" section (the `bench.run` row format)."""
    sizes = (5_000, 50_000) if quick else (50_000, 500_000)
    tiny = kv_log(2)
    per_line: dict[str, list[float]] = {label: [] for label, *_ in COMMANDS}
    base: dict[str, float] = {}
    for label, args, _target, stdin in COMMANDS:  # start-up CPU of each command, taken off the per-line cost
        with open(tiny, "rb") as fh:
            cmd = [bench.KVLOGDIAG, *args] + ([] if stdin else [tiny])
            base[label] = bench.median_run([bench.run(cmd, stdin=fh if stdin else None, drain=True) for _ in range(3)]).cpu
    for n in sizes:
        path = kv_log(n)
        mb = os.path.getsize(path) / bench.MB
        for label, args, target, stdin in COMMANDS:
            cmd = [bench.KVLOGDIAG, *args] + ([] if stdin else [path])
            check = label in ("analyze json", "watch json") and n == sizes[0]
            events = os.path.join(bench.OUT, "kv_lines_watch.jsonl") if check and stdin else os.devnull
            with open(path, "rb") as fh:
                r = bench.run(cmd, stdin=fh if stdin else None, capture=check and not stdin, drain=not (check and not stdin),
                              stderr_path=events if stdin else None)
            if check:
                bench.loud(f"KV lines {n:,} {label}", _check_watch(events, n) if stdin else _check(r.out, n))
                if stdin:
                    os.remove(events)
            cost = (r.cpu - base[label]) / n * 1e6
            per_line[label].append(cost)
            last = n == sizes[-1]
            rows.append(["KV lines", f"{label}, {n:,} KV lines ({mb:,.0f} MB)", r.wall, r.cpu, r.rss,
                         f"{cost:.1f} µs CPU per KV line", f"<= {target:.0f} MB RSS" if last else "",
                         bench.verdict(r.rss <= target and r.rc in (0, 1)) if last else ""])
    for label, (lo, hi) in per_line.items():
        ratio = hi / lo if lo > 0 else float("inf")
        rows.append(["KV lines", f"{label}: CPU per KV line, {sizes[1]:,} vs {sizes[0]:,}", None, None, None,
                     f"x{ratio:.2f}", f"within {T_LINEAR:.0%}", bench.verdict(abs(ratio - 1) <= T_LINEAR)])


def main() -> int:
    rows: list = []
    section_kv_lines(rows, quick="--quick" in sys.argv)
    print(tabulate(bench.render(rows), headers=bench.HEADERS, disable_numparse=True))
    if bench.MISMATCHES:
        print("\n!!! BENCHMARK INVALID: " + "; ".join(bench.MISMATCHES), file=sys.stderr)
        return 2
    return 0 if all(r[-1] in ("PASS", "", "n/a") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
