"""Coverage of vLLM's own format strings (issue 13): every harvested fact-bearing string is either
read correctly by the catalogue or listed in ``not_covered.json`` with why.

The harvested table comes from the released sdists (``tools/harvest_formats.py``). Values are drawn
by hypothesis with a fixed, small, derandomized budget: the same examples on every run.
"""

from __future__ import annotations

import json
import random

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlogdiag.catalogue import coverage as cov


@pytest.fixture(scope="module")
def harvest():
    return cov.load_harvest()


@pytest.fixture(scope="module")
def measured():
    return cov.measure()


def test_harvest_is_compact_and_well_formed(harvest):
    assert cov.HARVEST_FILE.stat().st_size < 2 * 2**20
    versions = harvest["versions"]
    assert "vllm 0.2.7" in versions and any(v.startswith("vllm-ascend") for v in versions)
    ids = set()
    for e in harvest["entries"]:
        assert e["id"] not in ids
        ids.add(e["id"])
        assert all(0 <= a <= b < len(versions) for a, b in e["in"])
        literal = "".join(x for x in e["t"] if isinstance(x, str)).lower()
        assert any(k in literal for k in harvest["keywords"][e["cat"]]), e
        assert all(isinstance(x, str) or (isinstance(x, list) and len(x) == 2) for x in e["t"])


def test_not_covered_list_is_current(harvest, measured):
    """Every listed string exists, has a reason, and is really not read (a stale entry fails)."""
    listed = json.loads(cov.NOT_COVERED_FILE.read_text(encoding="utf-8"))
    by_id = {e.id: e for e in measured.entries}
    for key, item in listed.items():
        assert key in by_id, f"{key} is listed but no longer harvested"
        assert item["reason"].strip()
        assert item["kind"] in cov.MISS_KINDS, item
        assert by_id[key].status != "covered", f"{key} is listed as not covered but the catalogue reads it: {item}"


def test_every_string_is_covered_or_listed(measured):
    """The gate: no harvested fact-bearing string is read with a wrong value, and none is silently missed."""
    wrong = [(e.id, e.example) for e in measured.entries if e.status == "mismatch"]
    assert not wrong, wrong
    missing = [(e.id, e.file, e.text) for e in measured.missing()]
    assert not missing, f"{len(missing)} strings neither covered nor listed in not_covered.json: {missing[:10]}"


def test_per_release_rows(measured, harvest):
    assert [r["release"] for r in measured.rows] == harvest["versions"]
    for r in measured.rows:
        assert r["strings"] == r["covered"] + r["listed"] + r["missing"]
        assert r["gaps"] <= r["listed"]
        assert r["strings"] > 0
    text = cov.coverage_text(cov=measured)
    assert "all releases:" in text and harvest["versions"][-1] in text


def test_mismatch_detection_can_fail():
    """A value the extractor reports that was not printed (a number cut at a separator) is flagged."""
    msg = "GPU KV cache size: 485,088 tokens"
    assert not cov._on_line(485, msg, cov._numbers(msg))
    assert cov._on_line(485088, msg, cov._numbers(msg))
    ok = cov.check_line("(EngineCore_DP0 pid=1) INFO 10-20 13:41:10 [kv_cache_utils.py:1] " + msg)
    assert ok.status == "covered" and 485088 in ok.values


@settings(max_examples=150, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_covered_strings_round_trip(data, harvest, measured):
    """Random values (separators, negative KV memory, long paths) in every prefix style of the oldest
    and newest release of a covered string: still read, nothing invented, the printed figure back."""
    covered = {e.id for e in measured.entries if e.status == "covered"}
    entries = [e for e in harvest["entries"] if e["id"] in covered]
    e = data.draw(st.sampled_from(entries))
    rnd = data.draw(st.randoms(use_true_random=False))
    msg, printed = cov.render(e["t"], rnd)
    releases = cov.entry_versions(e, harvest["versions"])
    for release in {releases[0], releases[-1]}:
        for style in cov.prefix_styles(release):
            line = cov.render_line(style, e["levels"][0], e["file"], msg)
            c = cov.check_line(line)
            assert c.status == "covered", (c.status, line, c.foreign)
            if e["cat"] in cov.VALUE_CATEGORIES:
                assert cov.value_read(c, printed), (line, printed, c.values)


def test_cli_prints_coverage():
    from kvlogdiag.cli.main import cli

    res = CliRunner().invoke(cli, ["patterns", "--coverage", "-v"])
    assert res.exit_code == 0, res.output
    assert "covered %" in res.output and "all releases:" in res.output


def test_render_uses_separators_and_negative_values():
    rnd = random.Random(1)
    seen = {cov.format_value(cov.sample_value("num_tokens", "!s:,", rnd), ":,") for _ in range(50)}
    assert any("," in s for s in seen)
    floats = [cov.sample_value("available_kv_cache_memory_gib", "%.2f", rnd) for _ in range(60)]
    assert any(f < 0 for f in floats) and any(f > 0 for f in floats)
