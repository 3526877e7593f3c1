"""Numbers out of range in a log never divide by zero or print nonsense: the figure is null, with a reason."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import cli

HEAD = "(EngineCore_DP0 pid=9) INFO 07-03 14:19:40 [gpu_worker.py:298] "


def analyse(text: str) -> dict:
    r = CliRunner().invoke(cli, ["analyze", "--format", "json", "--fail-on", "never", "-"], input=text.encode())
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["analyses"][0]


@pytest.mark.parametrize("gib,tokens,why", [
    ("-1.66", "1,000", "zero or negative"),
    ("0.00", "1,000", "zero or negative"),
    ("12.5", "0", "zero or negative"),
    ("99999999999999999999.0", "16", "outside any real model"),
    ("0.000001", "999,999,999", "outside any real model"),
])
def test_out_of_range_pairs_give_null_with_note(gib, tokens, why):
    a = analyse(f"{HEAD}Available KV cache memory: {gib} GiB\n{HEAD}GPU KV cache size: {tokens} tokens\n")
    assert a["kv_cache"]["bytes_per_token"] is None
    assert why in a["kv_cache"]["bytes_per_token_note"]


@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "NaN"])
def test_non_numeric_values_are_not_read_as_numbers(value):
    a = analyse(f"{HEAD}Available KV cache memory: {value} GiB\n{HEAD}GPU KV cache size: 1,000 tokens\n")
    assert a["kv_cache"]["available_gib"] == []
    assert a["kv_cache"]["bytes_per_token"] is None


def test_sane_pair_is_exact():
    a = analyse(f"{HEAD}Available KV cache memory: 37.01 GiB\n{HEAD}GPU KV cache size: 485,088 tokens\n")
    # 37.01 × 1073741824 / 485088 = 39739182366.24 / 485088 = 81921.6...
    assert a["kv_cache"]["bytes_per_token"] == pytest.approx(37.01 * 1073741824 / 485088, rel=1e-12)
    assert 81921 < a["kv_cache"]["bytes_per_token"] < 81922
