#!/usr/bin/env python3
"""kvlogdiag performance benchmark: generates its inputs, measures, prints one table, writes docs.

    python bench/run.py            # full run (~5-8 min on 2 cores; inputs cached)
    python bench/run.py --quick    # small inputs, a smoke test of the script itself

Inputs are generated deterministically (fixed seeds, see ``bench/gen.py``) under ``bench/out/``
(git-ignored) and reused while their manifest matches. Every command runs as its own process; wall
time is measured around it and CPU time and peak RSS come from ``os.wait4`` (the process and the
children it waited for, e.g. the reader's worker processes). The table and the machine description
are written into ``docs/performance.md`` between the ``bench:begin``/``bench:end`` markers (the rest
of that file is prose and is kept). Stdlib and the project's dependencies only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import select
import shlex
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")
DOC = os.path.join(ROOT, "docs", "performance.md")
sys.path.insert(0, HERE)

import gen  # noqa: E402
from tabulate import tabulate  # noqa: E402

# an installed kvlogdiag starts from its .pyc files (pip compiles them); with this variable set (some
# sandboxes set it) every measured process would compile ~60 modules from source first (~0.1 s CPU)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# the parsed-rule / regex caches of this tree only: a user cache shared with other kvlogdiag trees or versions
# keeps being trimmed to their entries (a small analyze measured 290 ms instead of 222 ms CPU that way)
os.environ.setdefault("KVLOGDIAG_CACHE_DIR", os.path.join(OUT, "cache"))

BIN = os.path.dirname(sys.executable)
KVLOGDIAG = shutil.which("kvlogdiag", path=BIN) or shutil.which("kvlogdiag") or "kvlogdiag"
GREP_PATTERN = "KV cache|non-default args|preempt|Maximum concurrency|Initializing a V"
MB = 1_000_000

# targets (2-core machine): issue 17
T_GREP_RATIO = 3.0  # every long-log shape
T_RSS_MB = 100.0
T_WATCH_LPS = 500_000
T_LATENCY_S = 0.050
T_ECHO_S = 0.010  # issue 18 item 1: a slow rule adds at most this to the echo of a line
T_SCAN_FPS = 2000.0
T_SCAN_SPEEDUP = 1.7
T_DASK_RATIO = 1.3  # scan --engine dask (LocalCluster, 2 workers) wall / scan -j 2 wall
T_STARTUP_CPU_S = 0.100


# --- measuring ------------------------------------------------------------------------------------


class Run:
    """One finished process: wall and CPU seconds, peak RSS (MB), exit code, captured stdout."""

    def __init__(self, wall: float, cpu: float, rss_mb: float, rc: int, out: bytes = b"", err: bytes = b""):
        self.wall, self.cpu, self.rss, self.rc, self.out, self.err = wall, cpu, rss_mb, rc, out, err


GNU_TIME = "/usr/bin/time" if os.path.exists("/usr/bin/time") else None
TIME_OUT = os.path.join(OUT, "time.txt")


def run(cmd: list[str], stdin=None, capture: bool = False, drain: bool = False, env: dict | None = None,
        stderr_path: str | None = None, gnu_time: bool = True) -> Run:
    """Run ``cmd``; with ``drain`` its stdout goes through a pipe that is read and thrown away.

    Peak RSS and CPU come from GNU time (``/usr/bin/time``, which forks the command from its own
    small process), else (or with ``gnu_time=False``) from ``os.wait4`` — then the RSS of a small command
    also counts this script's memory, which the child shares until it calls exec. GNU time gives CPU in
    10 ms steps: too coarse for a ~100 ms command, whose rows use ``os.wait4`` (microseconds).
    """
    use_time = bool(GNU_TIME) and gnu_time
    full = [GNU_TIME, "-o", TIME_OUT, "-f", "%M %U %S", *cmd] if use_time else cmd
    errf = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL
    try:
        t0 = time.perf_counter()
        p = subprocess.Popen(full, stdin=stdin, stdout=subprocess.PIPE if (capture or drain) else subprocess.DEVNULL,
                             stderr=errf, env=env)
        out = b""
        if capture:
            out = p.stdout.read()
        elif drain:
            buf = bytearray(1 << 20)
            while p.stdout.readinto(buf):
                pass
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.stdout:
            p.stdout.close()
    finally:
        if stderr_path:
            errf.close()
    rss, cpu = ru.ru_maxrss / 1024.0, ru.ru_utime + ru.ru_stime
    if use_time:
        with open(TIME_OUT) as fh:
            fields = fh.read().split()
        # GNU time adds "Command exited with non-zero status N" before the format line
        rss, cpu = float(fields[-3]) / 1024.0, float(fields[-2]) + float(fields[-1])
    return Run(wall, cpu, rss, p.returncode, out)


def median_run(runs: list[Run]) -> Run:
    """The run with the median wall time (CPU and RSS from that same run; RSS: the maximum seen)."""
    runs = sorted(runs, key=lambda r: r.wall)
    mid = runs[len(runs) // 2]
    return Run(mid.wall, mid.cpu, max(r.rss for r in runs), mid.rc, mid.out)


def repeat(n: int, fn) -> Run:
    return median_run([fn() for _ in range(n)])


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


# --- inputs ---------------------------------------------------------------------------------------


def cached(name: str, make, key: dict) -> dict:
    """Build an input once: ``make(path)`` returns its facts; reuse while the manifest matches."""
    path = os.path.join(OUT, name)
    manifest = path + ".json"
    key = dict(key, gen_version=gen.GEN_VERSION)
    if os.path.exists(path) and os.path.exists(manifest):
        with open(manifest) as fh:
            m = json.load(fh)
        if m.get("key") == key:
            return dict(m["facts"], path=path)
    t0 = time.perf_counter()
    facts = make(path)
    print(f"  generated {name} in {time.perf_counter() - t0:.1f} s", flush=True)
    with open(manifest, "w") as fh:
        json.dump({"key": key, "facts": facts}, fh)
    return dict(facts, path=path)


def long_log(size: int) -> dict:
    return cached(f"long-{size // MB}MB.log", lambda p: gen.write_long_log(p, size), {"size": size})


def shape_log(shape: str, size: int) -> dict:
    return cached(f"shape-{shape}-{size // MB}MB.log", lambda p: gen.write_shape_log(p, size, shape), {"size": size, "shape": shape})


def archive(count: int) -> dict:
    def make(path):
        if os.path.isdir(path):
            shutil.rmtree(path)
        return gen.write_archive(path, count)

    return cached(f"archive-{count}", make, {"count": count})


# --- checks ---------------------------------------------------------------------------------------

MISMATCHES: list[str] = []  # figures that differ from the generator's truth: the run fails, loudly


def loud(where: str, wrong: list[str]) -> None:
    if wrong:
        MISMATCHES.append(f"{where}: " + "; ".join(wrong))
        print(f"!!! FIGURES DIFFER FROM THE GENERATOR'S TRUTH ({where}): " + "; ".join(wrong), file=sys.stderr, flush=True)


def check_analysis(out: bytes, want: dict) -> list[str]:
    """Differences between the JSON analysis and what the generator wrote (empty: all right)."""
    try:
        a = json.loads(out)["analyses"][0]
    except (ValueError, KeyError, IndexError) as exc:
        return [f"no analysis in the output ({exc})"]
    got = {
        "lines_read": a["lines_read"],
        "stats_lines": a["runtime"]["stats_lines"],
        "kv_usage_max_pct": a["runtime"]["kv_usage_max_pct"],
        "kv_usage_high_lines": a["runtime"].get("kv_usage_high_lines"),
        "busy_stats_lines": a["runtime"].get("busy_stats_lines"),
        "single_running_with_queue_lines": a["runtime"].get("single_running_with_queue_lines"),
        "stats_preemptions_total": a["runtime"].get("stats_preemptions_total"),
        "available_gib": a["kv_cache"]["available_gib"],
        "tokens": a["kv_cache"]["tokens"],
        "max_concurrency": a["kv_cache"]["max_concurrency"],
        "version": a["vllm"]["version"],
        "engine": a["vllm"]["engine"],
        "model": a["config"]["model"],
        "tensor_parallel_size": a["config"]["tensor_parallel_size"],
        "max_model_len": a["config"]["max_model_len"],
        "gpu_memory_utilization": a["config"]["gpu_memory_utilization"],
    }
    return [f"{k}: {got[k]!r} != {want[k]!r}" for k in got if got[k] != want[k]]


# --- sections -------------------------------------------------------------------------------------


def analyze_cmd(path: str) -> list[str]:
    return [KVLOGDIAG, "analyze", "--format", "json", path]


def section_long(rows: list, notes: list, log: dict, reps: int) -> dict:
    path = log["path"]
    size = os.path.getsize(path)
    label = f"{size / MB:,.0f} MB"
    kv = repeat(reps, lambda: run(analyze_cmd(path), capture=True))
    wrong = check_analysis(kv.out, log) if kv.rc in (0, 1) else [f"exit status {kv.rc}"]
    serial_env = dict(os.environ, KVLOGDIAG_READ_JOBS="0")
    kv1 = run(analyze_cmd(path), capture=True, env=serial_env)
    wrong1 = check_analysis(kv1.out, log) if kv1.rc in (0, 1) else [f"exit status {kv1.rc}"]
    loud(f"long log {label}", wrong + wrong1)
    grep_c = repeat(reps, lambda: run(["grep", "-cE", GREP_PATTERN, path], capture=True))
    grep_pipe = repeat(reps, lambda: run(["grep", "-E", GREP_PATTERN, path], drain=True))
    grep_null = repeat(reps, lambda: run(["grep", "-E", GREP_PATTERN, path]))
    cat = repeat(reps, lambda: run(["cat", path]))
    ratio = kv.wall / grep_pipe.wall
    mbps = size / MB / kv.wall
    rows += [
        ["long log", f"kvlogdiag analyze --format json ({label}), median of {reps}", kv.wall, kv.cpu, kv.rss,
         f"{mbps:,.0f} MB/s; {ratio:.2f}x grep, {kv.wall / grep_c.wall:.2f}x grep -c, {kv.wall / cat.wall:,.0f}x cat",
         f"<= {T_GREP_RATIO:g}x grep", verdict(ratio <= T_GREP_RATIO)],
        ["long log", "  same, one process (KVLOGDIAG_READ_JOBS=0)", kv1.wall, kv1.cpu, kv1.rss,
         f"{kv1.wall / grep_pipe.wall:.2f}x grep", "", ""],
        ["long log", "  analysis JSON matches the generated log", None, None, None,
         f"{log['stats_lines']:,} stats lines, {log['lines_read']:,} lines" if not (wrong or wrong1) else "; ".join(wrong + wrong1)[:120],
         "exact", verdict(not (wrong or wrong1))],
        ["long log", f"grep -E (output through a pipe) [reference], median of {reps}", grep_pipe.wall, grep_pipe.cpu, grep_pipe.rss, "", "", ""],
        ["long log", "grep -cE", grep_c.wall, grep_c.cpu, grep_c.rss, grep_c.out.decode().strip() + " lines", "", ""],
        ["long log", "grep -E > /dev/null", grep_null.wall, grep_null.cpu, grep_null.rss, "stops at the 1st match", "", ""],
        ["long log", "cat > /dev/null", cat.wall, cat.cpu, cat.rss, f"{size / MB / cat.wall:,.0f} MB/s", "", ""],
    ]
    notes.append("grep reference: GNU grep quits at the first match when its stdout is /dev/null, so "
                 "`grep -E ... > /dev/null` does not read the file; the ratio uses grep printing its matches "
                 "into a pipe that the harness drains (`grep -c` shown too).")
    return {"kv": kv, "grep": grep_pipe}


def section_shapes(rows: list, shapes: list[dict], reps: int) -> list[dict]:
    """Each long-log shape: analyze vs grep -E on the same file (output drained), figures checked."""
    out = []
    for log in shapes:
        path, shape = log["path"], log["shape"]
        size = os.path.getsize(path)
        kv = repeat(reps, lambda path=path: run(analyze_cmd(path), capture=True))
        wrong = check_analysis(kv.out, log) if kv.rc in (0, 1) else [f"exit status {kv.rc}"]
        loud(f"shape {shape}", wrong)
        grep_pipe = repeat(reps, lambda path=path: run(["grep", "-E", GREP_PATTERN, path], drain=True))
        ratio = kv.wall / grep_pipe.wall
        per_line_us = kv.cpu / log["lines_read"] * 1e6
        rows.append(["shapes", f"{shape} ({size / MB:,.0f} MB, {log['mean_line_bytes']:.0f} B/line, "
                     f"{log['stats_fraction'] * 100:.0f} % stats), median of {reps}", kv.wall, kv.cpu, kv.rss,
                     f"{ratio:.2f}x grep ({grep_pipe.wall:.2f} s); {per_line_us:.2f} us CPU/line",
                     f"<= {T_GREP_RATIO:g}x grep", verdict(ratio <= T_GREP_RATIO)])
        rows.append(["shapes", f"  {shape}: analysis JSON matches the generated log", None, None, None,
                     f"{log['stats_lines']:,} stats lines, {log['lines_read']:,} lines" if not wrong else "; ".join(wrong)[:120],
                     "exact", verdict(not wrong)])
        out.append({"shape": shape, "size": size, "cpu": kv.cpu, "wall": kv.wall, "grep": grep_pipe.wall,
                    "stats_fraction": log["stats_fraction"], "lines": log["lines_read"]})
    return out


def section_scaling(rows: list, logs: list[dict], big: Run | None, reps: int) -> list:
    pts = []
    for log in logs:
        path = log["path"]
        size = os.path.getsize(path)
        r = big if (big is not None and log is logs[-1]) else repeat(reps, lambda path=path: run(analyze_cmd(path), capture=True))
        pts.append((size, r))
    for size, r in pts:
        rows.append(["scaling", f"analyze {size / MB:,.0f} MB", r.wall, r.cpu, r.rss, f"{size / MB / r.wall:,.0f} MB/s", "", ""])
    # linear: the cost of each further MB (start-up excluded) does not rise with the size. It falls a
    # little from 10-100 MB to 100-1000 MB: the fixed costs of the large-file path (numpy import,
    # worker start) are in the first step, and the worker's parallel search pays off more on 1 GB.
    marginal = [(b.wall - a.wall) / ((sb - sa) / MB) for (sa, a), (sb, b) in zip(pts, pts[1:])]
    linear = all(0 < m for m in marginal) and all(b <= 1.3 * a for a, b in zip(marginal, marginal[1:]))
    rows.append(["scaling", "time grows linearly (cost of each further MB)", None, None, None,
                 " -> ".join(f"{m * 1000:.2f}" for m in marginal) + " ms/MB", "no rise > 30 %", verdict(linear)])
    rss = [r.rss for _, r in pts]
    # flat: no growth with the input between the two large sizes (same code path); the smallest
    # input reads without numpy (only worth importing from 16 MB on), so it needs ~15 MB less
    flat = rss[-1] <= rss[-2] + 10
    rows.append(["scaling", "peak RSS flat and small", None, None, None,
                 ", ".join(f"{m:.0f} MB at {sz / MB:,.0f} MB" for (sz, _), m in zip(pts, rss)),
                 f"<= {T_RSS_MB:g} MB, no growth", verdict(flat and max(rss) <= T_RSS_MB)])
    return pts


def has_command(name: str) -> bool:
    return run([KVLOGDIAG, name, "--help"]).rc == 0


def watch_through(path: str, cmd: list[str]) -> tuple[Run, float | None, float | None, bytes]:
    """``cat PATH | CMD``, its stdout read here: the run (wall from the start to the exit, CPU and RSS of CMD),
    when the first and the last byte came out of CMD's stdout (seconds after the start), and its stderr."""
    full = [GNU_TIME, "-o", TIME_OUT, "-f", "%M %U %S", *cmd] if GNU_TIME else cmd
    err_path = os.path.join(OUT, "watch.err")
    first = last = None
    with open(err_path, "wb") as errf:
        t0 = time.perf_counter()
        src = subprocess.Popen(["cat", path], stdout=subprocess.PIPE)
        p = subprocess.Popen(full, stdin=src.stdout, stdout=subprocess.PIPE, stderr=errf)
        src.stdout.close()
        fd = p.stdout.fileno()
        while os.read(fd, 1 << 20):  # each read returns what is there (a buffered read waits to fill)
            last = time.perf_counter() - t0
            if first is None:
                first = last
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.stdout.close()
        src.wait()
    rss, cpu = ru.ru_maxrss / 1024.0, ru.ru_utime + ru.ru_stime
    if GNU_TIME:
        with open(TIME_OUT) as fh:
            fields = fh.read().split()
        rss, cpu = float(fields[-3]) / 1024.0, float(fields[-2]) + float(fields[-1])
    with open(err_path, "rb") as fh:
        err = fh.read()
    return Run(wall, cpu, rss, os.waitstatus_to_exitcode(status)), first, last, err


def section_watch(rows: list, logs: list[dict], reps: int) -> None:
    """watch on long inputs (start-up is not the figure): the pass-through's steady rate (first to last byte
    out of its stdout), end to end (start to exit, the analysis finished), its CPU against analyze's on the
    same file; then the KV line's latency and the echo's latency behind a slow rule."""
    if not has_command("watch"):
        rows.append(["live pipe", "kvlogdiag watch", None, None, None, "not available (`kvlogdiag watch --help` fails)", "", "n/a"])
        return
    for log in logs:
        path, lines = log["path"], log["lines_read"]
        name = os.path.basename(path)
        res = sorted((watch_through(path, [KVLOGDIAG, "watch", "--fail-on", "never"]) for _ in range(reps)),
                     key=lambda x: x[0].wall)
        w, first, last, err = res[len(res) // 2]
        kv = repeat(reps, lambda path=path: run(analyze_cmd(path), capture=True))
        tokens = f"{log['tokens'][0]:,}".encode()
        ok = w.rc == 0 and tokens in err and b"internal error" not in err
        if not ok:
            loud(f"watch {name}", [f"exit {w.rc}, figure {tokens.decode()} {'' if tokens in err else 'not '}on stderr"])
        steady = lines / (last - first) if first is not None and last is not None and last > first else None
        rows.append(["live pipe", f"cat LOG | kvlogdiag watch: pass-through, first to last byte out ({name}, {lines:,} lines)",
                     None, None, None, f"{steady:,.0f} lines/s" if steady else "no output",
                     f">= {T_WATCH_LPS:,} lines/s", verdict(steady is not None and steady >= T_WATCH_LPS and ok)])
        rows.append(["live pipe", "  same, end to end: start to exit, the analysis finished (median of "
                     f"{reps})", w.wall, w.cpu, w.rss, f"{lines / w.wall:,.0f} lines/s; {lines / w.cpu:,.0f} lines per CPU s",
                     f">= {T_WATCH_LPS:,} lines/s", verdict(lines / w.wall >= T_WATCH_LPS and ok)])
        rows.append(["live pipe", "  kvlogdiag analyze --format json, same file", kv.wall, kv.cpu, kv.rss,
                     f"{lines / kv.cpu:,.0f} lines per CPU s; watch/analyze CPU {w.cpu / kv.cpu:.2f}x", "", ""])
    c = run(["cat", logs[0]["path"]])
    rows.append(["live pipe", "cat LOG > /dev/null", c.wall, c.cpu, c.rss, f"{logs[0]['lines_read'] / c.wall:,.0f} lines/s", "", ""])
    lat = [watch_latency() for _ in range(5)]
    ok = [x for x in lat if x is not None]
    med = statistics.median(ok) if len(ok) == len(lat) else None
    rows.append(["live pipe", "KV-size line written -> figure on stderr (median of 5)", None, None, None,
                 f"{med * 1000:.0f} ms" if med is not None else f"no figure within 3 s in {len(lat) - len(ok)} of 5",
                 f"<= {T_LATENCY_S * 1000:.0f} ms", verdict(med is not None and med <= T_LATENCY_S)])
    base, slow = echo_latency(0.0), echo_latency(SLOW_RULE_S)
    if base and slow:
        p95 = [sorted(x)[int(len(x) * 0.95)] for x in (base, slow)]
        extra = [statistics.median(slow) - statistics.median(base), p95[1] - p95[0]]
        figure = (f"median {statistics.median(slow) * 1000:.1f} ms, p95 {p95[1] * 1000:.1f} ms, max {max(slow) * 1000:.1f} ms; "
                  f"no slow rule: {statistics.median(base) * 1000:.1f} / {p95[0] * 1000:.1f} / {max(base) * 1000:.1f} ms; "
                  f"extra {extra[0] * 1000:.1f} / {extra[1] * 1000:.1f} ms")
    else:
        figure, extra = "no echo", [1.0, 1.0]
    rows.append(["live pipe", f"line written -> echoed on stdout, each evaluation a {SLOW_RULE_S * 1000:.0f} ms "
                 f"CPU-bound rule ({len(slow)} lines, one every 40 ms)", None, None, None, figure,
                 f"extra (median, p95) <= {T_ECHO_S * 1000:.0f} ms", verdict(max(extra) <= T_ECHO_S)])


# every evaluation spins this long in Python (holding the GIL, as a slow rule on a long run would): argv[1] s
SLOW_RULE_S = 0.2
SLOW_RULE = """
import sys, time
from kvlogdiag.pipeline import Analyzer
real = Analyzer.analyze_facts
spin = float(sys.argv.pop(1))
def slow(self, facts):
    t = time.perf_counter() + spin
    while time.perf_counter() < t:
        sum(range(100))
    return real(self, facts)
Analyzer.analyze_facts = slow
from kvlogdiag.cli.main import main
sys.argv = ['kvlogdiag', 'watch', '--fail-on', 'never']
main()
"""


def echo_latency(spin_s: float, n: int = 60) -> list[float]:
    """Seconds from writing each of ``n`` log lines into watch's stdin (40 ms apart: each one makes the input
    go quiet, so each starts an evaluation) to the same line on its stdout, each evaluation ``spin_s`` slower."""
    head = gen.startup_v013(2231, 2519, (2522, 2523), 1764405601, {})
    lines = [(x + "\n").encode() for x in (head * (n // len(head) + 1))[:n]]
    p = subprocess.Popen([sys.executable, "-c", SLOW_RULE, str(spin_s)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    out: list[float] = []
    try:
        fd = p.stdout.fileno()
        time.sleep(1.0)  # imports done: the first line is not the process start
        for line in lines:
            t0 = time.perf_counter()
            p.stdin.write(line)
            p.stdin.flush()
            got = b""
            while len(got) < len(line):
                if not select.select([fd], [], [], 3.0)[0]:
                    return out
                got += os.read(fd, len(line) - len(got))
            out.append(time.perf_counter() - t0)
            time.sleep(0.04)
        return out
    finally:
        p.stdin.close()
        p.kill()
        p.wait()


def watch_latency() -> float | None:
    """Seconds from writing a 'GPU KV cache size' line into watch's stdin to the figure on stderr."""
    head = gen.startup_v013(2231, 2519, (2522, 2523), 1764405601, {})
    kv = next(i for i, line in enumerate(head) if " KV cache size: " in line)
    tokens = f"{gen.KV_TOKENS:,}".encode()
    p = subprocess.Popen([KVLOGDIAG, "watch"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        p.stdin.write(("\n".join(head[:kv]) + "\n").encode())
        p.stdin.flush()
        # let it read the start-up and drop what it says about it: quiet for 0.3 s, and at least 1.5 s after
        # the start — the first analysis (imports, catalogues) of a fresh process must not be timed as the
        # latency of a KV line, which a real server prints tens of seconds after watch started
        started = time.perf_counter()
        deadline = started + 4.0
        while time.perf_counter() < deadline:
            if select.select([p.stderr], [], [], 0.3)[0]:
                if not os.read(p.stderr.fileno(), 1 << 16):
                    return None
            elif time.perf_counter() - started >= 1.5:
                break
        t0 = time.perf_counter()
        p.stdin.write((head[kv] + "\n").encode())
        p.stdin.flush()
        seen = b""
        while time.perf_counter() - t0 < 3.0:
            if select.select([p.stderr], [], [], 0.01)[0]:
                data = os.read(p.stderr.fileno(), 1 << 16)
                if not data:
                    return None
                seen += data
                if tokens in seen:
                    return time.perf_counter() - t0
        return None
    finally:
        try:
            p.stdin.close()
        except OSError:
            pass
        p.kill()
        p.wait()


def section_scan(rows: list, arch: dict) -> dict:
    if not has_command("scan"):
        rows.append(["archive", "kvlogdiag scan", None, None, None, "not available (`kvlogdiag scan --help` fails)", "", "n/a"])
        return {}
    folder, n = arch["path"], arch["files"]
    res = {}
    for j in (1, 2):  # best of 2: each run is long, and other work on the machine skews one easily
        r = min((run([KVLOGDIAG, "scan", "--no-progress", "--fail-on", "never", "-j", str(j), folder], drain=True)
                 for _ in range(2)), key=lambda x: x.wall)
        res[j] = r
        fps = n / r.wall
        rows.append(["archive", f"kvlogdiag scan -j {j} ({n:,} logs, {arch['gzip']:,} gzip), best of 2", r.wall, r.cpu, r.rss,
                     f"{fps:,.0f} logs/s" + ("" if r.rc in (0, 1) else f" (exit {r.rc})"),
                     f">= {T_SCAN_FPS:g} logs/s" if j == 2 else "", verdict(fps >= T_SCAN_FPS and r.rc in (0, 1)) if j == 2 else ""])
    speedup = res[1].wall / res[2].wall
    rows.append(["archive", "speed-up -j 2 / -j 1", None, None, None, f"{speedup:.2f}x", f">= {T_SCAN_SPEEDUP:g}x",
                 verdict(speedup >= T_SCAN_SPEEDUP)])
    return res


def section_dask(rows: list, arch: dict) -> Run | None:
    """scan --engine dask (a LocalCluster of 2 worker processes, started by the command) vs scan -j 2."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        rows.append(["archive", "kvlogdiag scan --engine dask -j 2", None, None, None,
                     "not measured: pip install 'kvlogdiag[dask]'", f"<= {T_DASK_RATIO:g}x scan -j 2", "n/a"])
        return None
    folder, n = arch["path"], arch["files"]
    loc = min((run([KVLOGDIAG, "scan", "--no-progress", "--fail-on", "never", "-j", "2", "--format", "jsonl", folder], capture=True)
               for _ in range(2)), key=lambda x: x.wall)
    das = min((run([KVLOGDIAG, "scan", "--no-progress", "--fail-on", "never", "-j", "2", "--engine", "dask", "--format", "jsonl",
                    folder], capture=True) for _ in range(2)), key=lambda x: x.wall)
    ratio = das.wall / loc.wall
    same = das.out == loc.out and das.rc == loc.rc
    if not same:
        loud("scan --engine dask", ["its rows differ from scan -j 2's"])
    rows.append(["archive", f"kvlogdiag scan --engine dask -j 2 ({n:,} logs; LocalCluster start included), best of 2",
                 das.wall, das.cpu, das.rss, f"{ratio:.2f}x scan -j 2 ({loc.wall:.2f} s); {n / das.wall:,.0f} logs/s",
                 f"<= {T_DASK_RATIO:g}x scan -j 2", verdict(ratio <= T_DASK_RATIO and das.rc in (0, 1))])
    rows.append(["archive", "  dask rows == scan -j 2 rows, byte for byte (--format jsonl)", None, None, None,
                 f"{len(das.out.splitlines()):,} rows" if same else "DIFFERENT", "identical", verdict(same)])
    return das


def section_startup(rows: list, notes: list, small: str) -> float:
    # what a user runs: a regular install (bench/installed.py), not this venv's editable one, whose import
    # finder costs every start; both are measured, interleaved, and the target applies to the installed one's
    # default text output (what a user reads; it also imports tabulate), --format json reported beside it
    import installed

    forms = {"text": ["analyze", small], "json": ["analyze", "--format", "json", small]}
    exes = {"editable": KVLOGDIAG}
    try:
        exes["installed"] = installed.kvlogdiag_script()
    except (OSError, subprocess.CalledProcessError, ValueError) as exc:  # e.g. no build backend offline
        print(f"  no wheel install ({exc}): the start-up rows measure the editable install", file=sys.stderr)
    cmds = {(kind, form): [exe, *args] for kind, exe in exes.items() for form, args in forms.items()}
    for cmd in cmds.values():
        run(cmd, capture=True, gnu_time=False)  # the first run writes the parsed-rule and regex caches
    both: dict[tuple[str, str], list[Run]] = {k: [] for k in cmds}
    for i in range(10):
        for k in (list(cmds) if i % 2 == 0 else list(cmds)[::-1]):
            both[k].append(run(cmds[k], capture=True, gnu_time=False))
    kind = "installed" if "installed" in exes else "editable"
    label = "installed wheel" if kind == "installed" else "editable install (no wheel)"
    cpu_of: dict[str, float] = {}
    for form, what in (("text", "analyze one small log"), ("json", "  the same, --format json")):
        runs = both[(kind, form)]
        r = median_run(runs)
        cpu = cpu_of[form] = statistics.median(x.cpu for x in runs)
        ed = both[("editable", form)]
        edc = statistics.median(x.cpu for x in ed)
        case = (f"{what} ({os.path.getsize(small):,} B), text (the default), {label}, median of 10" if form == "text"
                else f"{what}, {label}, median of 10")
        target, res = (f"<= {T_STARTUP_CPU_S * 1000:.0f} ms CPU", verdict(cpu <= T_STARTUP_CPU_S and r.rc in (0, 1))) \
            if form == "text" else ("", "")
        rows.append(["start-up", case, r.wall, cpu, r.rss,
                     f"{cpu * 1000:.0f} ms CPU (min {min(x.cpu for x in runs) * 1000:.0f}), {r.wall * 1000:.0f} ms wall; "
                     f"editable install {edc * 1000:.0f} ms CPU (min {min(x.cpu for x in ed) * 1000:.0f})", target, res])
    cpu = cpu_of["json"]  # the growth section's start-up: the analyses there are --format json
    bare = median_run([run([sys.executable, "-c", "pass"]) for _ in range(5)])
    imp = median_run([run([sys.executable, "-c", "import kvlogdiag.cli.main"]) for _ in range(5)])
    rows.append(["start-up", "  of which: python itself / importing the CLI and the analysis path", None, None, None,
                 f"{bare.cpu * 1000:.0f} ms / {imp.cpu * 1000:.0f} ms CPU", "", ""])
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "kvlogdiag", "analyze", "--format", "json", small],
                       capture_output=True, text=True)
    imports = []
    for line in p.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m:
            imports.append((int(m.group(2)), len(m.group(3)), m.group(4)))
    pandas = sorted({name for _, _, name in imports if name == "pandas" or name.startswith("pandas.")})
    rows.append(["start-up", "pandas not imported by analyze", None, None, None,
                 "imported: " + ", ".join(pandas[:3]) if pandas else f"{len(imports)} modules, no pandas", "no pandas",
                 verdict(not pandas)])
    heavy = sorted({name.split(".")[0] for _, _, name in imports if name.split(".")[0] in ("numpy", "rich", "tabulate", "pyarrow")})
    rows.append(["start-up", "no numpy/rich/tabulate/pyarrow on analyze --format json", None, None, None,
                 "imported: " + ", ".join(heavy) if heavy else "none of them", "none", verdict(not heavy)])
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "kvlogdiag", "analyze", small], capture_output=True, text=True)
    text_heavy = sorted({m.group(1).split(".")[0] for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \| *(\S+)", p.stderr, re.M)
                         if m.group(1).split(".")[0] in ("numpy", "rich", "pyarrow")})
    rows.append(["start-up", "no numpy/rich/pyarrow on analyze (text to a pipe: rich only colours a terminal)", None, None, None,
                 "imported: " + ", ".join(text_heavy) if text_heavy else "none of them", "none", verdict(not text_heavy)])
    top = sorted((i for i in imports if i[1] == 1), reverse=True)[:8]  # top-level imports, by cumulative time
    notes.append("top-level imports of `python -X importtime -m kvlogdiag analyze` (cumulative): "
                 + ", ".join(f"{name} {us / 1000:.0f} ms" for us, _, name in top))
    return cpu


# --- growth -------------------------------------------------------------------------------------

PLOT = os.path.join(ROOT, "docs", "performance-growth.png")


def growth(scaling: list, shapes: list[dict], files: list[tuple[int, Run]], base_cpu: float) -> list[str]:
    """The growth section (Markdown lines) and, with matplotlib, the plot beside docs/performance.md.
    Per-unit costs leave out the start-up (``base_cpu``: CPU of analyze on a small log)."""
    md = ["", f"**How the cost grows** (from the runs above; per unit: after the {base_cpu * 1000:.0f} ms CPU start-up of a small "
          "analyze, or between the two scans):", "", "| input | CPU s | per unit |", "|---|---|---|"]

    def net_per_mb(cpu: float, size: int) -> float:
        return max(0.0, cpu - base_cpu) / (size / MB) * 1000

    for size, r in scaling:
        md.append(f"| analyze, {size / MB:,.0f} MB (default shape) | {r.cpu:.2f} | {net_per_mb(r.cpu, size):.1f} ms CPU/MB |")
    for sh in sorted(shapes, key=lambda x: x["stats_fraction"]):
        md.append(f"| analyze, {sh['shape']} ({sh['stats_fraction'] * 100:.0f} % stats lines) | {sh['cpu']:.2f} | "
                  f"{max(0.0, sh['cpu'] - base_cpu) / sh['lines'] * 1e6:.2f} us CPU/line, {net_per_mb(sh['cpu'], sh['size']):.1f} ms CPU/MB |")
    for n, r in files:
        md.append(f"| scan -j 2, {n:,} small logs | {r.cpu:.2f} | {n / r.wall:,.0f} logs/s wall |")
    if len(files) == 2:
        (n0, r0), (n1, r1) = files
        md.append(f"| scan -j 2, each further small log | | {(r1.cpu - r0.cpu) / (n1 - n0) * 1000:.2f} ms CPU/log |")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        md.append("")
        md.append("(no plot: matplotlib is not installed — `pip install 'kvlogdiag[charts]'`)")
        return md
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    ax[0].plot([sz / MB for sz, _ in scaling], [r.cpu for _, r in scaling], "o-")
    ax[0].set(xscale="log", yscale="log", xlabel="log size (MB)", ylabel="analyze CPU (s)", title="log size")
    pts = sorted(shapes, key=lambda x: x["stats_fraction"])
    ax[1].plot([x["stats_fraction"] * 100 for x in pts], [net_per_mb(x["cpu"], x["size"]) for x in pts], "o")
    for x in pts:
        ax[1].annotate(x["shape"], (x["stats_fraction"] * 100, net_per_mb(x["cpu"], x["size"])), fontsize=8)
    ax[1].set(xlabel="stats lines (% of lines)", ylabel="CPU ms per MB (start-up excluded)", title="stats density")
    if files:
        ax[2].plot([n for n, _ in files], [r.wall for _, r in files], "o-", label="wall")
        ax[2].plot([n for n, _ in files], [r.cpu for _, r in files], "s--", label="CPU")
        ax[2].legend()
    ax[2].set(xlabel="small logs", ylabel="scan -j 2 (s)", title="number of files")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=90)
    plt.close(fig)
    md += ["", f"![cost against log size, stats density and number of files]({os.path.basename(PLOT)})"]
    return md


# --- report ---------------------------------------------------------------------------------------


def machine() -> dict:
    model = "?"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    except OSError:
        nproc = str(os.cpu_count())
    grep_v = subprocess.run(["grep", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return {"nproc": nproc, "cpu": model, "python": platform.python_version(), "os": platform.platform(),
            "grep": grep_v, "ram_gb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30}


def render(rows: list) -> list[list]:
    out = []
    for sec, case, wall, cpu, rss, figure, target, res in rows:
        out.append([sec, case, "" if wall is None else f"{wall:.2f}", "" if cpu is None else f"{cpu:.2f}",
                    "" if rss is None else f"{rss:.0f}", figure, target, res])
    return out


SECTIONS = ("long", "shapes", "scaling", "watch", "archive", "dask", "startup", "kv")  # for --only
HEADERS = ["section", "case", "wall s", "CPU s", "peak RSS MB", "figure", "target", "result"]


def write_doc(table_md: str, info: dict, notes: list, command: str, started: str, load: tuple, extra: list | None = None) -> None:
    block = [
        "<!-- bench:begin (written by bench/run.py; edit the text outside these markers) -->",
        f"Measured {started} with `{command}` "
        f"(inputs: {info['inputs']}).",
        "",
        f"Machine: {info['nproc']} CPUs (`nproc`), {info['cpu']}, {info['ram_gb']:.0f} GiB RAM, {info['os']}; "
        f"Python {info['python']}; {info['grep']}. Load average at start / end: "
        f"{load[0][0]:.2f} / {load[1][0]:.2f} (other work on the machine slows wall times; CPU s is less affected).",
        "",
        table_md,
        "",
        *[f"- {n}" for n in notes],
        *(extra or []),
        "<!-- bench:end -->",
    ]
    text = "\n".join(block)
    if os.path.exists(DOC):
        with open(DOC) as fh:
            old = fh.read()
        if "<!-- bench:begin" in old and "<!-- bench:end -->" in old:
            head, rest = old.split("<!-- bench:begin", 1)
            tail = rest.split("<!-- bench:end -->", 1)[1]
            text = head + text + tail
        else:
            text = old.rstrip() + "\n\n## Results\n\n" + text + "\n"
    else:
        text = "# Performance\n\n## Results\n\n" + text + "\n"
    with open(DOC, "w") as fh:
        fh.write(text)


def main() -> int:
    ap = argparse.ArgumentParser(description="kvlogdiag performance benchmark")
    ap.add_argument("--quick", action="store_true", help="small inputs (a smoke test of this script)")
    ap.add_argument("--no-doc", action="store_true", help="do not rewrite docs/performance.md")
    ap.add_argument("--only", metavar="SECTIONS", type=lambda v: set(v.split(",")), default=None,
                    help=f"run only these sections (comma-separated: {','.join(SECTIONS)}); implies --no-doc")
    args = ap.parse_args()
    if args.only and not args.only <= set(SECTIONS):
        ap.error(f"--only: unknown section(s) {', '.join(sorted(args.only - set(SECTIONS)))}; choose from {','.join(SECTIONS)}")
    want = args.only or set(SECTIONS)
    if args.only:
        args.no_doc = True  # a partial table must not replace the full one
    t_start = time.perf_counter()
    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    command = " ".join(shlex.quote(a) for a in [os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(ROOT) else sys.executable,
                                                 os.path.relpath(os.path.abspath(sys.argv[0]), ROOT), *sys.argv[1:]])
    load0 = os.getloadavg()
    os.makedirs(OUT, exist_ok=True)
    sizes = [1 * MB, 5 * MB, 60 * MB] if args.quick else [10 * MB, 100 * MB, 1000 * MB]
    n_archive = 500 if args.quick else 10_000
    reps = 1 if args.quick else 3
    print(f"kvlogdiag benchmark — {KVLOGDIAG}; inputs in {OUT}", flush=True)
    # watch's inputs: long enough that start-up is not the figure, and within what a pipe may run ahead of the
    # analysis (QUEUE_MAX_BYTES, 64 MiB) so every line is analysed
    watch_logs = [long_log(60 * MB), shape_log("stats-dense", 20 * MB)] if "watch" in want else []
    logs = [long_log(s) for s in sizes] if want & {"long", "scaling", "watch"} else []
    shape_size = 20 * MB if args.quick else 200 * MB
    shapes = [shape_log(name, shape_size) for name in gen.SHAPES] if "shapes" in want else []
    arch = archive(n_archive)
    arch_small = archive(n_archive // 10)
    small = os.path.join(arch["path"], "run00002.log")  # a vLLM 0.13 start-up log (gen._KINDS order)

    rows: list = []
    notes: list = []
    big: dict = {"kv": None}
    shape_res: list = []
    scaling: list = []
    scan_res: dict = {}
    if "long" in want:
        print("long log ...", flush=True)
        big = section_long(rows, notes, logs[-1], reps)
    if "shapes" in want:
        print("shapes ...", flush=True)
        shape_res = section_shapes(rows, shapes, reps)
    if "scaling" in want:
        print("scaling ...", flush=True)
        scaling = section_scaling(rows, logs, big["kv"], reps)
    if "watch" in want:
        print("live pipe ...", flush=True)
        section_watch(rows, watch_logs, reps)
    if "archive" in want:
        print("archive ...", flush=True)
        scan_res = section_scan(rows, arch)
        small_scan = run([KVLOGDIAG, "scan", "--no-progress", "--fail-on", "never", "-j", "2", arch_small["path"]], drain=True)
    if "dask" in want:
        print("dask ...", flush=True)
        section_dask(rows, arch)
    extra: list = []
    if "startup" in want:
        print("start-up ...", flush=True)
        base_cpu = section_startup(rows, notes, small)
    if "kv" in want:
        print("KV lines ...", flush=True)
        import kv_lines  # issue 18: memory of a log that repeats its KV lines (bench/kv_lines.py)

        kv_lines.section_kv_lines(rows, quick=args.quick)
    if not args.only:
        files = [(arch_small["files"], small_scan)] + ([(arch["files"], scan_res[2])] if 2 in scan_res else [])
        extra = growth(scaling, shape_res, files, base_cpu)

    table = render(rows)
    print()
    print(tabulate(table, headers=HEADERS, disable_numparse=True))
    for n in notes:
        print("-", n)
    elapsed = time.perf_counter() - t_start
    print(f"\nbenchmark took {elapsed:.0f} s")
    info = machine()
    sizes_txt = ", ".join(f"{os.path.getsize(log['path']) / MB:,.0f} MB" for log in logs)
    info["inputs"] = (f"long logs of {sizes_txt} (vLLM 0.13 V1, seed 20251129), "
                      f"{len(shapes)} shapes of {shape_size / MB:,.0f} MB ({', '.join(gen.SHAPES)}; seed 20251201), "
                      f"{arch['files']:,} small start-up logs ({arch['gzip']:,} gzip, seed 77)")
    if not args.no_doc:
        md_table = [[cell.replace("|", "\\|") for cell in row] for row in table]  # a | would split a cell
        write_doc(tabulate(md_table, headers=HEADERS, tablefmt="github", disable_numparse=True), info, notes, command,
                  started, (load0, os.getloadavg()), extra)
        print(f"wrote {os.path.relpath(DOC, ROOT)}")
    if MISMATCHES:
        print("\n!!! BENCHMARK INVALID: figures differ from the generator's truth:\n  " + "\n  ".join(MISMATCHES), file=sys.stderr)
        return 2
    return 0 if all(r[-1] in ("PASS", "", "n/a") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
