"""Mutations of the real sample logs: no traceback, valid JSON, one result whatever way the log arrives (issue 18).

Hypothesis mutates a real sample log with byte flips, cut lines, duplicated and contradicting KV lines,
huge numbers, invalid UTF-8, NUL bytes and 1 MB lines, and runs ``kvlogdiag analyze --format json`` on
it as a file, on stdin and gzip-compressed, and the file a second time. Every run must end without an
exception, print JSON that parses without NaN/Infinity, and the four results must be equal (apart from
the ``source`` names). The example count is bounded (25) so the suite stays fast; set
``KVLOGDIAG_SLOW_TESTS=1`` for a deeper run (400 examples).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlogdiag.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
LOGS = sorted((ROOT / "sample_logs").glob("*.log"))
EXAMPLES = 400 if os.environ.get("KVLOGDIAG_SLOW_TESTS") == "1" else 25
KV_WORDS = (b"KV cache", b"blocks:", b"Maximum concurrency", b"Available memory", b"non-default args", b"Namespace(")
DIGITS = re.compile(rb"\d+")


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


@st.composite
def mutated_log(draw) -> bytes:
    data = LOGS[draw(st.integers(0, len(LOGS) - 1))].read_bytes()
    for _ in range(draw(st.integers(1, 4))):
        lines = _lines(data)
        kv = [i for i, ln in enumerate(lines) if any(w in ln for w in KV_WORDS)] or [0]
        kind = draw(st.sampled_from(["flip", "cut", "dup", "contradict", "huge", "utf8", "nul", "long"]))
        i = draw(st.integers(0, len(lines) - 1))
        if kind == "flip" and data:
            pos = draw(st.integers(0, len(data) - 1))
            data = data[:pos] + bytes([data[pos] ^ draw(st.integers(1, 255))]) + data[pos + 1:]
            continue
        if kind == "cut":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        elif kind == "dup":
            j = draw(st.sampled_from(kv))
            lines.insert(draw(st.integers(0, len(lines))), lines[j])
        elif kind == "contradict":
            j = draw(st.sampled_from(kv))
            other = DIGITS.sub(lambda m: str(int(m.group()) * 3 + 1).encode(), lines[j], count=2)
            lines.insert(draw(st.integers(j, len(lines))), other)
        elif kind == "huge":
            j = draw(st.sampled_from(kv))
            big = draw(st.sampled_from([b"9" * 400, str(2**70).encode(), b"1" * 25, b"0" * 30]))
            lines[j] = DIGITS.sub(big.replace(b"\\", b"\\\\"), lines[j], count=1)
        elif kind == "utf8":
            pos = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:pos] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80", b"\xf0\x9f"])) + lines[i][pos:]
        elif kind == "nul":
            pos = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:pos] + b"\x00" * draw(st.integers(1, 4096)) + lines[i][pos:]
        elif kind == "long":
            lines.insert(i, draw(st.sampled_from([b"A", b" ", b"9", b"=", b"/"])) * (1 << 20))
        data = b"\n".join(lines)
    return data


def _strict_json(text: str):
    def bad(name):
        raise ValueError(f"{name} in the JSON output")
    return json.loads(text, parse_constant=bad)


def _without_sources(obj):
    if isinstance(obj, dict):
        return {k: _without_sources(v) for k, v in obj.items() if k != "source"}
    if isinstance(obj, list):
        return [_without_sources(v) for v in obj]
    return obj


def _analyze(args: list[str], stdin: bytes | None = None):
    r = CliRunner().invoke(cli, ["analyze", "--format", "json", "--fail-on", "never", *args], input=stdin,
                           catch_exceptions=False)  # an exception is a test failure, with its traceback
    assert r.exit_code == 0, (r.exit_code, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    return _without_sources(_strict_json(r.stdout))


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(mutated_log())
def test_a_mutated_real_log_is_read_the_same_every_way(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("mut")
    path = d / "server.log"
    path.write_bytes(data)
    gz = d / "server.log.gz"
    gz.write_bytes(gzip.compress(data, compresslevel=1))
    first = _analyze([str(path)])
    assert _analyze([str(path)]) == first, "the same file twice gave two results"
    assert _analyze(["-"], data) == first, "stdin differs from the file"
    assert _analyze([str(gz)]) == first, "the gzip-compressed file differs from the file"
