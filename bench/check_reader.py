#!/usr/bin/env python3
"""Differential check: the reader's fast paths give exactly the lines of a plain reference.

The fast paths in `kvlogdiag.input.reader` — the keyword finders (`_Finder`, numpy `_BigramFinder`, the
Aho-Corasick `_AhoFinder`, as used by `iter_lines` and by `candidate_spans`), the parallel search of large files
(`_parallel_lines`) and the process-prefix cache in `split_envelope` — must not change a single
line, number, rank or counter. This script compares them with a straightforward reference
(the reader as it was before the performance work: one regex search per candidate, one chunk at a
time, the general envelope code), each way also with runs of stats lines (`stats_runs`) expanded to
their lines, on the real logs, on generated vLLM logs and on random inputs built from keywords,
keyword fragments, envelopes, control bytes and over-long lines, with small chunk, line and unit sizes
so that every boundary case is hit many times.

    python bench/check_reader.py [--seeds N]

Exit status 0 when everything matched. Not part of the test suite (it takes ~15 s).
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
# the random keyword sets' regexes and finder plans go to a cache of their own, not the user's (kvlogdiag/recache.py)
_CACHE = tempfile.TemporaryDirectory(prefix="kvlogdiag-check-reader-")
os.environ["KVLOGDIAG_CACHE_DIR"] = _CACHE.name

from kvlogdiag.input import reader  # noqa: E402
from kvlogdiag.input.reader import Line, LineStats  # noqa: E402
from kvlogdiag.pipeline import prefilter  # noqa: E402

# --- the reference ---------------------------------------------------------------------------------


def ref_split_envelope(raw: str, envs):
    """`split_envelope` without its fast paths (the process-prefix cache, the bare-head shortcut)."""
    return reader.split_envelope_general(raw, envs)


def ref_make_line(number: int, data: bytes, envs) -> Line:
    raw = data.decode("utf-8", "replace")
    if "\r" in raw:
        raw = raw.rstrip("\r")
        if "\r" in raw:
            tail = raw.rsplit("\r", 1)[1]
            raw = tail if tail.strip() else raw.replace("\r", " ")
    raw = reader.strip_ansi(raw)
    if "\x00" in raw:
        raw = raw.replace("\x00", "")
    if raw[:1] == "\ufeff":
        raw = raw[1:]
    text, rank, meta = ref_split_envelope(raw, envs)
    return Line(number, text, rank, raw, meta)


def ref_chunks(read, chunk_bytes: int, max_line: int, cuts: list):
    carry, skipping = b"", False
    while True:
        data = read(chunk_bytes)
        if not data:
            if carry:  # the last line without newline, cut or not
                yield carry
            return
        if skipping:
            nl = data.find(b"\n")
            if nl < 0:
                continue
            data, skipping = data[nl:], False
        buf = carry + data if carry else data
        cut = buf.rfind(b"\n")
        if cut < 0:
            if len(buf) > max_line:
                carry, skipping = buf[:max_line], True
                cuts.append(1)
            else:
                carry = buf
            continue
        carry = buf[cut + 1:]
        if len(carry) > max_line:
            carry, skipping = carry[:max_line], True
            cuts.append(1)
        yield buf[: cut + 1]


def ref_lines(read, pf, chunk_bytes: int, max_line: int):
    """(lines, (lines read, long lines, bytes)) as the reader computed them before."""
    out, number, long_lines, nbytes = [], 0, 0, 0
    envs = reader.Envelopes()
    cuts: list = []  # lines cut while reading (counted as long, like those cut inside a chunk)
    for chunk in ref_chunks(read, chunk_bytes, max_line, cuts):
        nbytes += len(chunk)
        if pf is None:
            parts = chunk.split(b"\n")
            if parts and parts[-1] == b"":
                parts.pop()
            for part in parts:
                number += 1
                if len(part) > max_line:
                    part, long_lines = part[:max_line], long_lines + 1
                out.append(ref_make_line(number, part, envs))
            continue
        pos = 0
        while True:
            m = pf.search(chunk, pos)
            if m is None:
                break
            start = chunk.rfind(b"\n", 0, m.start()) + 1
            end = chunk.find(b"\n", m.end())
            if end < 0:
                end = len(chunk)
            number += chunk.count(b"\n", pos, start)
            part = chunk[start:end]
            if len(part) > max_line:
                part, long_lines = part[:max_line], long_lines + 1
            out.append(ref_make_line(number + 1, part, envs))
            pos = end
        number += chunk.count(b"\n", pos)
        if not chunk.endswith(b"\n"):
            number += 1
    return out, (number, long_lines + len(cuts), nbytes)


# --- comparing ---------------------------------------------------------------------------------


def as_tuples(lines):
    return [(ln.number, ln.text, ln.rank, ln.raw, ln.meta) for ln in lines]


class Failure(Exception):
    pass


def compare(label: str, data: bytes, pf, chunk_bytes: int, max_line: int, path: str | None = None) -> int:
    """Check serial (finder forced on) and, for a file, parallel reading against the reference."""
    reader.MAX_LINE_BYTES = max_line
    reader.CHUNK_BYTES = chunk_bytes
    want, want_st = ref_lines(io.BytesIO(data).read, pf, chunk_bytes, max_line)
    want = as_tuples(want)
    big = sys.maxsize
    runs = [("serial, stdlib finder", 0, big, big, lambda: io.BytesIO(data))]
    if pf is not None:
        runs.append(("serial, regex", big, big, big, lambda: io.BytesIO(data)))
        runs.append(("serial, numpy finder", 0, 0, big, lambda: io.BytesIO(data)))
        runs.append(("serial, aho-corasick finder", 0, 0, 0, lambda: io.BytesIO(data)))
        if path is not None:
            runs.append(("parallel, numpy finder", 0, 0, big, lambda: open(path, "rb", buffering=chunk_bytes)))
            runs.append(("parallel, aho-corasick finder", 0, 0, 0, lambda: open(path, "rb", buffering=chunk_bytes)))
    # each way also with runs of stats lines (`stats_runs`, every stats line in a run), expanded to their lines
    for (how, finder_after, numpy_after, aho_after, opener), in_runs in [(r, f) for r in runs for f in (False, pf is not None)]:
        reader.FINDER_AFTER_BYTES, reader.NUMPY_AFTER_BYTES, reader.AHO_AFTER_BYTES = finder_after, numpy_after, aho_after
        reader._AHO_FINDERS.clear()
        if aho_after and pf is not None:  # off, for the parallel reader too (it builds its finder before forking)
            reader._AHO_FINDERS[(pf.pattern, pf.flags)] = None
        reader.RUN_MIN_LINES = 1
        reader._BIGRAM_FINDERS.clear()  # plan from this input's first chunk
        st = LineStats()
        fh = opener()
        if in_runs:
            how += ", stats runs"
        try:
            got = as_tuples(ln for it in reader.iter_lines(fh, label, pf, st, stats_runs=in_runs)
                            for ln in (it.lines() if isinstance(it, reader.StatsRun) else [it]))
        finally:
            fh.close()
        if got != want or (st.lines, st.long_lines, st.bytes) != want_st:
            bad = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            raise Failure(f"{label} [{how}, chunk {chunk_bytes}, max line {max_line}]: "
                          f"stats {(st.lines, st.long_lines, st.bytes)} vs {want_st}; {len(got)} vs {len(want)} lines; "
                          f"first difference at #{bad}: {got[bad:bad + 1]} vs {want[bad:bad + 1]}")
    if pf is not None:  # candidate_spans (used by watch) on line-aligned pieces of the input
        for numpy_after, aho_after in ((0, big), (big, big), (big, 0)):
            reader.NUMPY_AFTER_BYTES, reader.AHO_AFTER_BYTES = numpy_after, aho_after
            reader._BIGRAM_FINDERS.clear()
            reader._AHO_FINDERS.clear()
            for piece in ref_chunks(io.BytesIO(data).read, chunk_bytes, max_line, []):
                if reader.candidate_spans(piece, pf) != reader._regex_spans(piece, pf):
                    raise Failure(f"{label} [candidate_spans, numpy after {numpy_after}, aho after {aho_after}]: spans differ")
        reader._AHO_FINDERS.clear()
    return len(want)


# --- inputs ----------------------------------------------------------------------------------------

PREFIXES = ["", "", "", "(APIServer pid=2231) ", "(EngineCore_DP0 pid=7)", "(Worker_TP1 pid=88, ip=10.0.0.3) ",
            "(VllmWorkerProcess pid=12) ", "\x1b[1;36m(APIServer pid=9)\x1b[0;0m ", "(APIServer pid=", "(x) ",
            "(Worker pid=5 ", "2025-11-29T08:40:01.123456789Z ", "2025-11-29T08:40:01Z stdout F ",
            "Nov 29 08:40:01 host vllm[123]: ", "myprefix (Worker_TP0 pid=3) ", "(" + "a" * 320 + " pid=1) ",
            "INFO 11-29 08:40:01 [x.py:1] (Worker_TP0 pid=3) "]
NOISE = ["INFO 11-29 08:40:01 [loggers.py:123] ", "Received request chatcmpl-ab12: prompt: 'hello'", " took ",
         "blocks", "KV", "kv", "cache", "VLLM", "max_", "\r", "\x1b[0m", "\x00", "\xff\xfe", "é", "→", " ", "(", ")",
         "pid=", "Avg prompt", "throughput", "Engine 000: ", "xx", "zz"]


def random_log(rng: random.Random, keywords: list[bytes], n_lines: int, max_line: int) -> bytes:
    lines = []
    for _ in range(n_lines):
        parts = [rng.choice(PREFIXES).encode()]
        for _ in range(rng.randint(0, 6)):
            r = rng.random()
            if r < 0.25:
                parts.append(rng.choice(keywords))
            elif r < 0.45:
                k = rng.choice(keywords)
                i = rng.randint(0, len(k))
                parts.append(k[:i] if rng.random() < 0.5 else k[i:])  # fragments: near misses
            elif r < 0.55:
                k = rng.choice(keywords)
                i = rng.randrange(len(k))
                parts.append(k[:i] + bytes([rng.randrange(32, 127)]) + k[i + 1:])  # one byte off
            else:
                parts.append(rng.choice(NOISE).encode())
        line = b"".join(parts)
        if rng.random() < (0.03 if max_line < 10_000 else 0.1):
            line += (b"y" * rng.randint(max_line // 2, 3 * max_line)) + (rng.choice(keywords) if rng.random() < 0.5 else b"")
        lines.append(line)
    data = b"\n".join(lines)
    return data if rng.random() < 0.3 else data + b"\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=40, help="random inputs (default 40)")
    args = ap.parse_args()
    pf = prefilter()
    keywords = reader._literal_alternatives(pf)
    assert keywords, "the prefilter is not a literal alternation: the finder is off"
    saved = (reader.MAX_LINE_BYTES, reader.CHUNK_BYTES, reader.FINDER_AFTER_BYTES, reader.PARALLEL_MIN_BYTES,
             reader.UNIT_CHUNKS, reader.NUMPY_AFTER_BYTES, reader._NUMPY_MIN_CHUNK, reader.SPANS_FINDER_MIN,
             reader.AHO_AFTER_BYTES, reader.AHO_WINDOW, os.environ.get(reader._JOBS_ENV))
    checked = 0
    try:
        reader._NUMPY_MIN_CHUNK = 0  # numpy on every chunk, however small
        reader.SPANS_FINDER_MIN = 0  # candidate_spans: the stdlib finder on every chunk
        reader.AHO_WINDOW = 61  # the Aho-Corasick finder's windows: keywords straddle their boundaries often
        reader.PARALLEL_MIN_BYTES = 0
        os.environ[reader._JOBS_ENV] = "2"
        with tempfile.TemporaryDirectory() as tmp:
            def check(label, data, chunk, max_line, units=2):
                reader.UNIT_CHUNKS = units
                path = os.path.join(tmp, "in.log")
                with open(path, "wb") as fh:
                    fh.write(data)
                n = compare(label, data, pf, chunk, max_line, path)
                compare(label + " (no prefilter)", data, None, chunk, max_line)
                return n

            root = os.path.dirname(HERE)
            logs = sorted(glob.glob(os.path.join(root, "..", "shared", "real_logs", "*.log"))) + sorted(glob.glob(os.path.join(root, "sample_logs", "*.log")))
            logs += sorted(glob.glob(os.path.join(root, "tests", "**", "*.log"), recursive=True))
            for path in logs:
                with open(path, "rb") as fh:
                    data = fh.read()
                for chunk, max_line in ((1 << 20, 1 << 20), (4096, 4096), (997, 700)):
                    checked += check(os.path.basename(path), data, chunk, max_line)
            sys.path.insert(0, HERE)
            import gen

            gpath = os.path.join(tmp, "gen.log")
            gen.write_long_log(gpath, 3 << 20, seed=5)
            with open(gpath, "rb") as fh:
                data = fh.read()
            for chunk, max_line, units in ((1 << 16, 1 << 16, 3), (1 << 14, 3000, 2), (1 << 20, 1 << 20, 1)):
                checked += check("generated", data, chunk, max_line, units)
            rng = random.Random(999)  # lines longer than the parallel reader's first look-back window
            data = random_log(rng, keywords, 400, 200_000)
            checked += check("long lines", data, 1 << 16, 200_000, 2)
            for seed in range(args.seeds):
                rng = random.Random(seed)
                max_line = rng.choice((64, 200, 1000, 5000))
                chunk = rng.choice((max_line, max_line // 2 + 1, 4096, 65536))
                data = random_log(rng, keywords, rng.randint(50, 3000), max_line)
                checked += check(f"random seed {seed}", data, chunk, max_line, rng.choice((1, 2, 3)))
    except Failure as exc:
        print("MISMATCH:", exc)
        return 1
    finally:
        (reader.MAX_LINE_BYTES, reader.CHUNK_BYTES, reader.FINDER_AFTER_BYTES, reader.PARALLEL_MIN_BYTES,
         reader.UNIT_CHUNKS, reader.NUMPY_AFTER_BYTES, reader._NUMPY_MIN_CHUNK, reader.SPANS_FINDER_MIN,
         reader.AHO_AFTER_BYTES, reader.AHO_WINDOW, jobs) = saved
        reader._AHO_FINDERS.clear()
        if jobs is None:
            os.environ.pop(reader._JOBS_ENV, None)
        else:
            os.environ[reader._JOBS_ENV] = jobs
    print(f"ok: {checked} candidate lines identical (stdlib, numpy and Aho-Corasick finders, parallel search, prefix cache)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
