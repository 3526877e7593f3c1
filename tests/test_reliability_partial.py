"""Partial input is analysed, and a small compressed file never sits whole in memory (issue 18).

A compressed log still being written (a cut ``.gz``/``.zst``/``.xz``/``.bz2``) and any input that reaches
``--max-bytes`` (uncompressed too) are read up to the cut or the cap: every line read is analysed, the JSON
says ``truncated`` (docs/json-output.md), the text summary says so, and the exit code is
``ExitCode.TRUNCATED`` (4). zstd is streamed: a 16 KB ``.zst`` of 512 MiB keeps the reader's memory flat.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import random
import subprocess
import sys
from pathlib import Path

import click
import pytest
import zstandard
from click.testing import CliRunner

from kvlogdiag.cli.common import BYTES
from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
TP4 = ROOT / "sample_logs" / "v1_tp4_workers.log"
COMPRESS = {"gz": gzip.compress, "xz": lzma.compress, "bz2": bz2.compress,
            "zst": lambda b: zstandard.ZstdCompressor(write_checksum=True).compress(b)}


def run(args, stdin: bytes | None = None):
    return CliRunner().invoke(cli, args, input=stdin, catch_exceptions=False)


def _analyses(out: str) -> list[dict]:
    return json.loads(out)["analyses"]


@pytest.mark.parametrize("text,size", [
    ("1000000", 1_000_000), ("1e9", 10**9), ("512MiB", 512 << 20), ("16GiB", 16 << 30), ("16 GiB", 16 << 30),
    ("10MB", 10_000_000), ("2KiB", 2048), ("1.5GiB", 3 << 29), ("7b", 7), ("3k", 3000)])
def test_max_bytes_accepts_sizes(text, size):
    assert BYTES.convert(text, None, None) == size


@pytest.mark.parametrize("text", ["lots", "0", "-5", "12XB", "1e999", "", "GiB"])
def test_max_bytes_refuses_what_is_not_a_size(text):
    with pytest.raises(click.BadParameter):
        BYTES.convert(text, None, None)


def test_a_bad_size_is_a_usage_error_naming_the_option():
    r = CliRunner().invoke(cli, ["analyze", "--max-bytes", "lots", str(TP4)])
    assert r.exit_code == 2 and "--max-bytes" in r.output and "not a size" in r.output


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_max_bytes_caps_an_uncompressed_input_too(source, tmp_path):
    data = TP4.read_bytes()
    cap = len(data) // 2
    args = ["analyze", "--format", "json", "--fail-on", "never", "--max-bytes", str(cap)]
    r = run(args + [str(TP4)]) if source == "file" else run(args + ["-"], data)
    assert r.exit_code == ExitCode.TRUNCATED == 4
    a = _analyses(r.stdout)[0]
    assert a["truncated"] == {"reason": "max_bytes", "bytes_read": cap, "message":
                              f"stopped after {cap:,} bytes (--max-bytes): the analysis covers the lines read before that"}
    assert a["lines_read"] == data[:cap].count(b"\n") + (not data[:cap].endswith(b"\n"))
    whole = _analyses(run(["analyze", "--format", "json", "--fail-on", "never", str(TP4)]).stdout)[0]
    assert "truncated" not in whole  # additive: only an input read in part has the field
    assert whole["lines_read"] > a["lines_read"]
    # the figures of the lines read: a prefix of the whole log's KV lines
    assert whole["kv_cache"]["available_gib"][: len(a["kv_cache"]["available_gib"])] == a["kv_cache"]["available_gib"]


def test_an_input_exactly_at_the_cap_is_whole():
    size = TP4.stat().st_size
    r = run(["analyze", "--format", "json", "--fail-on", "never", "--max-bytes", str(size), str(TP4)])
    assert r.exit_code == 0 and "truncated" not in _analyses(r.stdout)[0]


@pytest.mark.parametrize("kind", sorted(COMPRESS))
def test_a_cut_archive_gives_the_analysis_of_the_lines_before_the_cut(kind, tmp_path):
    """The TP-4 log, then 2 MB of distinct lines (past a bz2 block and many zstd blocks), compressed and cut
    at 60 %: the KV lines before the cut are read."""
    rng = random.Random(18)
    filler = b"".join(b"INFO 07-03 14:30:%02d [loggers.py:1] request %d %016x\n" % (i % 60, i, rng.getrandbits(64))
                      for i in range(40_000))
    data = TP4.read_bytes() + filler + TP4.read_bytes()
    comp = COMPRESS[kind](data)
    path = tmp_path / f"server.log.{kind}"
    path.write_bytes(comp[: len(comp) * 3 // 5])
    r = run(["analyze", "--format", "json", "--fail-on", "never", str(path)])
    assert r.exit_code == ExitCode.TRUNCATED, r.stderr
    assert r.stderr == ""
    a = _analyses(r.stdout)[0]
    assert a["truncated"]["reason"] == "cut" and "ends early" in a["truncated"]["message"]
    read = a["truncated"]["bytes_read"]
    assert 0 < read < len(data)
    assert a["lines_read"] == data[:read].count(b"\n") + (not data[:read].endswith(b"\n"))
    assert a["kv_cache"]["available_gib"], "the KV lines before the cut are analysed"
    text = run(["analyze", "--fail-on", "never", str(path)])
    assert text.exit_code == 4 and "truncated: the compressed stream ends early" in text.stdout


def test_findings_of_a_truncated_input_still_exit_4():
    """TRUNCATED replaces OK and FINDINGS (the findings are printed); an unreadable input still wins (2)."""
    size = TP4.stat().st_size - 10
    r = run(["analyze", "--fail-on", "info", "--max-bytes", str(size), str(TP4)])
    assert r.exit_code == 4
    r = run(["analyze", "--max-bytes", str(size), str(TP4), str(TP4.with_name("missing.log"))])
    assert r.exit_code == 2


_RSS = r"""
import os, sys
from kvlogdiag.pipeline import Analyzer
an = Analyzer()
an.analyze_source(sys.argv[2])  # warm: imports, catalogue, rules
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")  # the peak RSS (VmHWM) starts again from here
base = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
a = an.analyze_source(sys.argv[1], int(sys.argv[3])).to_json()
peak = next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
print((peak - base) // 1024, a["lines_read"], (a.get("truncated") or {}).get("reason"))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc/self/clear_refs")
@pytest.mark.parametrize("cap", [256 << 20, 16 << 30])
def test_a_small_zstd_bomb_is_streamed_in_flat_memory(tmp_path, cap):
    """16 KB of zstd holding 512 MiB of NULs: memory stays flat, whether --max-bytes stops it or not."""
    path = tmp_path / "bomb.log.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=19).compress(b"\x00" * (512 << 20)))
    assert path.stat().st_size < 20_000
    proc = subprocess.run([sys.executable, "-c", _RSS, str(path), str(TP4), str(cap)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    growth_mib, lines, reason = proc.stdout.split()
    print(f"\nzstd bomb (cap {cap:,}): peak RSS +{growth_mib} MiB")
    assert int(growth_mib) < 64  # the whole frame is 512 MiB; before: one decompress() call held all of it
    assert int(lines) == 1
    assert reason == ("max_bytes" if cap < 512 << 20 else "None")
