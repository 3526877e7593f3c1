"""--since/--until: line timestamps (vLLM heads, docker/CRI and journald envelopes), the year from the
envelope or the file's mtime, and what a window keeps (docs/time-windows.md).

The logs are sample_logs/long_running_stats.log (one start, 336 stats lines, 99 preemptions) with its vLLM
times rewritten by the test to run across midnight of Dec 31 → Jan 1; what a window must count is worked
out here from the times the test wrote, not from kvlogdiag's reading of them.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner
from conftest import SAMPLE_LOGS_DIR

from kvlogdiag.cli.main import cli
from kvlogdiag.input.timestamps import LineClock, TimeIndex, TimeWindow, WindowError, parse_bound, parse_tz

UTC = timezone.utc
PLUS8 = timezone(timedelta(hours=8))
SOURCE = SAMPLE_LOGS_DIR / "long_running_stats.log"
HEAD = re.compile(r"(INFO|WARNING|ERROR|DEBUG) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) ")
STATS_PRE = re.compile(r"Preemptions: (\d+)")


def shifted(start: datetime, tz=UTC, envelope: bool = False) -> tuple[str, list[tuple[datetime, str]]]:
    """The sample log with its first vLLM time moved to ``start`` (aware; heads printed in ``tz``), every
    later time by the same amount; ``envelope``: a docker ``--timestamps`` RFC 3339 UTC prefix on every line.
    Returns the text and (time, line) of every line (headless lines: the previous time)."""
    lines = SOURCE.read_text(encoding="utf-8").splitlines()
    first = None
    out, timed = [], []
    t = start
    for ln in lines:
        m = HEAD.search(ln)
        if m:
            orig = datetime(2026, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)), int(m.group(6)), tzinfo=UTC)
            first = first or orig
            t = start + (orig - first)
            local = t.astimezone(tz)
            ln = ln[:m.start()] + f"{m.group(1)} {local:%m-%d %H:%M:%S} " + ln[m.end():]
        if envelope:
            ln = t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000000000Z") + " stdout F " + ln
        out.append(ln)
        timed.append((t, ln))
    return "\n".join(out) + "\n", timed


def write(tmp_path, name: str, text: str, mtime: datetime | None) -> str:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    if mtime is not None:
        os.utime(p, (mtime.timestamp(), mtime.timestamp()))
    return str(p)


def expected(timed, since: datetime | None, until: datetime | None) -> tuple[int, int]:
    """(stats lines, V1 preemptions) of the lines whose time lies in [since, until)."""
    n = pre = 0
    for t, ln in timed:
        if "Avg prompt throughput" not in ln:
            continue
        if (since is None or t >= since) and (until is None or t < until):
            n += 1
            m = STATS_PRE.search(ln)
            pre += int(m.group(1)) if m else 0
    return n, pre


def analyze_json(path: str, *args: str) -> tuple[int, dict]:
    res = CliRunner().invoke(cli, ["analyze", path, "--format", "json", "--fail-on", "never", *args])
    analyses = json.loads(res.stdout)["analyses"] if res.stdout.strip() else []
    if not analyses:
        return res.exit_code, {"stderr": res.stderr}
    assert len(analyses) == 1
    return res.exit_code, analyses[0]


START = datetime(2025, 12, 31, 23, 40, 7, tzinfo=UTC)  # the 57-minute log then ends at 00:37 on Jan 1, 2026
MIDNIGHT = datetime(2026, 1, 1, tzinfo=UTC)


# --- the clock --------------------------------------------------------------------------------------


def test_vllm_heads_across_new_year_take_the_year_from_the_mtime():
    clock = LineClock(datetime(2026, 1, 1, 0, 40, tzinfo=UTC), UTC)
    assert clock.time_of("INFO 12-31 23:59:58 [x.py:1] a", None) == datetime(2025, 12, 31, 23, 59, 58, tzinfo=UTC)
    assert clock.time_of("Traceback (most recent call last):", None) == datetime(2025, 12, 31, 23, 59, 58, tzinfo=UTC)  # inherited
    assert clock.time_of("INFO 01-01 00:00:03 [x.py:1] b", None) == datetime(2026, 1, 1, 0, 0, 3, tzinfo=UTC)
    # a copy made months later (mtime in March) reads the same years
    clock = LineClock(datetime(2026, 3, 5, tzinfo=UTC), UTC)
    assert clock.time_of("INFO 12-31 23:59:58 [x.py:1] a", None).year == 2025
    assert clock.time_of("INFO 01-01 00:00:03 [x.py:1] b", None).year == 2026
    # out-of-order lines of two processes a second apart do not start a new year
    assert clock.time_of("INFO 01-01 00:00:02 [x.py:1] c", None).year == 2026


def test_vllm_heads_take_year_and_utc_offset_from_the_rfc3339_envelope():
    clock = LineClock(datetime(2031, 6, 1, tzinfo=UTC))  # a misleading mtime: the envelope decides
    t = clock.time_of("INFO 01-01 07:59:59 [x.py:1] a", {"timestamp": "2025-12-31T23:59:59.5Z"})
    assert t == datetime(2025, 12, 31, 23, 59, 59, tzinfo=UTC)  # vLLM printed +08:00 local time
    assert t.utcoffset() == timedelta(hours=8)
    # a later line without an envelope stays on vLLM's clock (+08:00) and in the envelope's year
    assert clock.time_of("INFO 01-01 08:10:00 [x.py:1] b", None) == datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    # a line with the envelope only
    assert clock.time_of("  File \"x.py\", line 1", {"timestamp": "2026-01-01T00:11:00.000000001Z"}) == datetime(2026, 1, 1, 0, 11, tzinfo=UTC)
    assert clock.kinds == {"vllm": 2, "envelope": 1}


def test_journald_envelope_year_from_the_mtime():
    clock = LineClock(datetime(2026, 1, 2, tzinfo=UTC), UTC)
    assert clock.time_of("Started vllm.service", {"timestamp": "Dec 31 23:59:00", "host": "h"}) == datetime(2025, 12, 31, 23, 59, tzinfo=UTC)
    assert clock.time_of("x", {"timestamp": "Jan  1 00:01:00", "host": "h"}) == datetime(2026, 1, 1, 0, 1, tzinfo=UTC)


def test_naive_times_are_read_in_the_log_tz():
    clock = LineClock(datetime(2026, 1, 2, tzinfo=UTC), PLUS8)
    assert clock.time_of("INFO 01-01 08:00:00 [x.py:1] a", None) == MIDNIGHT


def test_bounds():
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert parse_bound("2h", now, UTC) == datetime(2026, 1, 1, 10, tzinfo=UTC)
    assert parse_bound("10m", now, UTC) == datetime(2026, 1, 1, 11, 50, tzinfo=UTC)
    assert parse_bound("1d", now, UTC) == datetime(2025, 12, 31, 12, tzinfo=UTC)
    assert parse_bound("1h30m ago", now, UTC) == datetime(2026, 1, 1, 10, 30, tzinfo=UTC)
    assert parse_bound("2025-12-31T23:30", now, UTC) == datetime(2025, 12, 31, 23, 30, tzinfo=UTC)
    assert parse_bound("2025-12-31 23:30:00+08:00", now, UTC) == datetime(2025, 12, 31, 15, 30, tzinfo=UTC)
    assert parse_bound("2026-01-01T00:00Z", now, PLUS8) == MIDNIGHT
    assert parse_bound("2026-01-01", now, PLUS8) == datetime(2025, 12, 31, 16, tzinfo=UTC)
    for bad in ("yesterday", "12-31 23:00", "2h-ish", ""):
        with pytest.raises(WindowError, match="ISO 8601"):
            parse_bound(bad, now, UTC)
    assert parse_tz("+05:30").utcoffset(None) == timedelta(hours=5, minutes=30)
    assert parse_tz("UTC") is UTC and parse_tz("local") is None
    with pytest.raises(WindowError, match="not a time zone"):
        parse_tz("Mars/Olympus")
    with pytest.raises(WindowError, match="not after"):
        TimeWindow(MIDNIGHT, MIDNIGHT)


def test_time_index_spans():
    idx = TimeIndex()
    for line, sec in ((3, 10), (4, 10), (9, 20), (12, 30)):
        idx.add(line, datetime.fromtimestamp(sec, UTC))
    assert list(idx.lines) == [3, 9, 12]
    assert idx.at(2) is None and idx.at(3) == 10 and idx.at(11) == 20 and idx.at(99) == 30
    assert idx.span(1, 10) == (10, 20) and idx.span(10, 11) == (20, 20) and idx.span(1, 2) is None


# --- analyze over midnight and the year change -------------------------------------------------------


@pytest.mark.parametrize("mtime", [datetime(2026, 1, 1, 0, 40, tzinfo=UTC), datetime(2026, 2, 14, tzinfo=UTC)],
                         ids=["mtime-just-after", "mtime-weeks-later"])
def test_since_until_across_new_year_year_from_mtime(tmp_path, mtime):
    text, timed = shifted(START)
    path = write(tmp_path, "newyear.log", text, mtime)
    code, full = analyze_json(path, "--log-tz", "UTC")
    assert code == 0 and full["runtime"]["stats_lines"] == 336 and "window" not in full

    for since, until in ((MIDNIGHT, None), (None, MIDNIGHT), (datetime(2025, 12, 31, 23, 50, tzinfo=UTC), datetime(2026, 1, 1, 0, 10, tzinfo=UTC))):
        n, pre = expected(timed, since, until)
        assert 0 < n < 336
        args = ["--log-tz", "UTC"]
        if since:
            args += ["--since", since.strftime("%Y-%m-%dT%H:%M")]
        if until:
            args += ["--until", until.strftime("%Y-%m-%dT%H:%M")]
        code, doc = analyze_json(path, *args)
        assert code == 0, doc
        assert doc["runtime"]["stats_lines"] == n
        assert doc["runtime"]["stats_preemptions_total"] == pre
        assert doc["window"]["runtime_lines_outside"] == 336 - n
        assert doc["window"]["start"] == "2025-12-31T23:40:07Z"
        # the start-up facts of the run stay whatever the window
        assert doc["kv_cache"]["bytes_per_token"] == full["kv_cache"]["bytes_per_token"]
        assert doc["config"] == full["config"]


def test_naive_bounds_and_log_tz(tmp_path):
    """The log printed in +08:00: a naive --since is on the log's clock once --log-tz says +08:00."""
    text, timed = shifted(START, tz=PLUS8)
    path = write(tmp_path, "plus8.log", text, datetime(2026, 1, 1, 9, tzinfo=UTC))
    n, _ = expected(timed, MIDNIGHT, None)
    code, doc = analyze_json(path, "--log-tz", "+08:00", "--since", "2026-01-01T08:00")  # 08:00 +08:00 = midnight UTC
    assert code == 0 and doc["runtime"]["stats_lines"] == n
    code, doc = analyze_json(path, "--log-tz", "+08:00", "--since", "2026-01-01T00:00Z")
    assert code == 0 and doc["runtime"]["stats_lines"] == n
    # read as UTC, the same log is eight hours later: nothing before 2026-01-01T08:00Z
    code, doc = analyze_json(path, "--log-tz", "UTC", "--until", "2026-01-01T00:00Z")
    assert code == 2 and "no server start in the window" in doc["stderr"]


def test_docker_envelope_gives_the_year_despite_the_mtime(tmp_path):
    text, timed = shifted(START, tz=PLUS8, envelope=True)
    path = write(tmp_path, "docker.log", text, datetime(2031, 7, 1, tzinfo=UTC))  # an mtime that would say 2031
    n, pre = expected(timed, MIDNIGHT, None)
    code, doc = analyze_json(path, "--since", "2026-01-01T00:00Z")  # no --log-tz needed: the envelope is absolute
    assert code == 0, doc
    assert doc["runtime"]["stats_lines"] == n and doc["runtime"]["stats_preemptions_total"] == pre
    assert doc["window"]["clock"] == "vllm" and doc["window"]["start"] == "2025-12-31T23:40:07Z"
    code, doc = analyze_json(path, "--since", "2031-01-01T00:00Z")
    assert code == 2 and "2026-01-01T00:37" in doc["stderr"]  # the message says where the log's lines are


def test_relative_window_and_text_output(tmp_path):
    now = datetime.now(UTC).replace(microsecond=0)
    text, timed = shifted(now - timedelta(minutes=57, seconds=9), tz=UTC)
    path = write(tmp_path, "recent.log", text, None)
    res = CliRunner().invoke(cli, ["analyze", path, "--since", "10m", "--log-tz", "UTC", "--fail-on", "never"])
    assert res.exit_code == 0, res.output
    n, _ = expected(timed, now - timedelta(minutes=10), None)
    m = re.search(r"Runtime: ([\d,]+) stats lines", res.stdout)
    # the test's clock moves on between writing and reading: allow the lines of a few seconds (one per 10 s)
    assert m and n - 2 <= int(m.group(1).replace(",", "")) <= n
    assert "Window: " in res.stdout and "runtime lines outside it not counted" in res.stdout


def test_bad_values_are_one_line_errors(tmp_path):
    path = str(SOURCE)
    for args, msg in ((["--since", "yesterday"], "--since 'yesterday': use an ISO 8601 time"),
                      (["--log-tz", "Nowhere/City", "--since", "1h"], "not a time zone"),
                      (["--since", "2026-01-02", "--until", "2026-01-01"], "is not after")):
        res = CliRunner().invoke(cli, ["analyze", path, *args])
        assert res.exit_code == 2, res.output
        assert msg in res.output and res.output.count("\n") == 1


def test_a_log_without_times_cannot_be_windowed(tmp_path):
    path = write(tmp_path, "bare.log", "GPU KV cache size: 1,000 tokens\nAvailable KV cache memory: 1.00 GiB\n", None)
    res = CliRunner().invoke(cli, ["analyze", path, "--since", "1h"])
    assert res.exit_code == 2 and "no line carries a time" in res.output


def test_two_starts_the_window_keeps_the_run_it_meets(tmp_path):
    first, _ = shifted(datetime(2025, 12, 31, 10, 0, tzinfo=UTC))
    second, timed2 = shifted(datetime(2026, 1, 1, 10, 0, tzinfo=UTC))
    path = write(tmp_path, "two.log", first + second, datetime(2026, 1, 1, 11, tzinfo=UTC))
    code, doc = analyze_json(path, "--log-tz", "UTC")
    assert code == 0 and doc["runs"] == 2
    code, doc = analyze_json(path, "--log-tz", "UTC", "--since", "2026-01-01T00:00")
    assert code == 0 and "all_runs" not in doc  # one run left
    assert doc["run"]["index"] == 1 and doc["runtime"]["stats_lines"] == 336
    assert doc["window"]["start"] == "2026-01-01T10:00:00Z"
    code, doc = analyze_json(path, "--log-tz", "UTC", "--until", "2026-01-01T00:00")
    assert code == 0 and doc["run"]["index"] == 0


# --- scan and report ---------------------------------------------------------------------------------


def test_scan_rows_cover_the_window(tmp_path):
    text, timed = shifted(START)
    a = write(tmp_path, "a.log", text, datetime(2026, 1, 1, 1, tzinfo=UTC))
    old, _ = shifted(datetime(2025, 6, 1, tzinfo=UTC))
    write(tmp_path, "old.log", old, datetime(2025, 6, 2, tzinfo=UTC))
    res = CliRunner().invoke(cli, ["scan", str(tmp_path), "--format", "json", "--since", "2026-01-01T00:00", "--log-tz", "UTC",
                                   "-j", "1", "--fail-on", "never"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [r["source"] for r in rows] == [a]  # old.log has no start in the window: no row
    assert "1 file(s) have no server start in the --since/--until window" in res.stderr
    n, pre = expected(timed, MIDNIGHT, None)
    assert 0 < n < 336
    full = json.loads(CliRunner().invoke(cli, ["scan", a, "--format", "json", "-j", "1", "--fail-on", "never"]).stdout)
    assert rows[0]["bytes_per_token"] == full[0]["bytes_per_token"]  # start-up figures stay
    # KVD012 (preemptions) fires on the window's stats lines only
    assert "KVD012" in full[0]["findings"]
    assert ("KVD012" in (rows[0]["findings"] or "")) == (pre > 0)
    before = CliRunner().invoke(cli, ["scan", a, "--format", "json", "-j", "1", "--fail-on", "never", "--log-tz", "UTC",
                                      "--until", "2025-12-31T23:45"])
    n_before, pre_before = expected(timed, None, datetime(2025, 12, 31, 23, 45, tzinfo=UTC))
    assert pre_before == 0 and n_before > 0
    assert "KVD012" not in (json.loads(before.stdout)[0]["findings"] or "")


def test_scan_state_fingerprint_includes_the_window(tmp_path):
    text, _ = shifted(START)
    logs = tmp_path / "logs"
    logs.mkdir()
    write(logs, "a.log", text, datetime(2026, 1, 1, 1, tzinfo=UTC))
    state = str(tmp_path / "state.json")
    base = ["scan", str(logs), "--state", state, "--format", "json", "-j", "1", "--log-tz", "UTC", "--fail-on", "never"]
    r1 = CliRunner().invoke(cli, base + ["--since", "2026-01-01T00:00"])
    r2 = CliRunner().invoke(cli, base + ["--since", "2026-01-01T00:00"])
    r3 = CliRunner().invoke(cli, base + ["--since", "2026-01-01T00:20"])
    assert "1 read, 0 unchanged" in r1.stderr and "0 read, 1 unchanged" in r2.stderr and "1 read, 0 unchanged" in r3.stderr
    assert json.loads(r1.stdout) == json.loads(r2.stdout)


def test_report_takes_the_window(tmp_path):
    text, timed = shifted(START)
    path = write(tmp_path, "r.log", text, datetime(2026, 1, 1, 1, tzinfo=UTC))
    res = CliRunner().invoke(cli, ["report", path, "--since", "2026-01-01T00:00", "--log-tz", "UTC", "--fail-on", "never"])
    assert res.exit_code == 0, res.output
    n, _ = expected(timed, MIDNIGHT, None)
    assert f"runtime figures cover it ({n:,} stats lines in it, {336 - n:,} runtime lines outside)" in res.stdout


def test_windowed_json_matches_the_schema(tmp_path):
    import jsonschema

    text, _ = shifted(START, envelope=True)
    path = write(tmp_path, "s.log", text, None)
    res = CliRunner().invoke(cli, ["analyze", path, "--format", "json", "--fail-on", "never", "--since", "2026-01-01T00:00Z"])
    assert res.exit_code == 0, res.output
    schema = json.loads((SAMPLE_LOGS_DIR.parent / "docs" / "analysis.schema.json").read_text(encoding="utf-8"))
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, schema)
    assert doc["analyses"][0]["window"]["since"] == "2026-01-01T00:00:00+00:00"


def test_a_deployment_is_not_windowed():
    deployment = str(SAMPLE_LOGS_DIR / "deployments" / "healthy-1p1d")
    res = CliRunner().invoke(cli, ["analyze", "--deployment", deployment, "--since", "1h"])
    assert res.exit_code == 2 and "--since: not with --deployment" in res.stderr
    res = CliRunner().invoke(cli, ["report", deployment, "--until", "2026-01-01", "--log-tz", "UTC"])
    assert res.exit_code == 2 and "--until, --log-tz: not for a deployment report" in res.stderr


def test_diff_takes_the_window(tmp_path):
    text, timed = shifted(START)
    path = write(tmp_path, "d.log", text, datetime(2026, 1, 1, 1, tzinfo=UTC))
    res = CliRunner().invoke(cli, ["diff", path, path, "--format", "json", "--fail-on", "never", "--log-tz", "UTC",
                                   "--since", "2026-01-01T00:00"])
    assert res.exit_code == 0, res.output
    n, _ = expected(timed, MIDNIGHT, None)
    assert json.loads(res.stdout)["runtime"]["stats_lines"] == {"before": n, "after": n, "change": 0, "change_pct": 0.0}
