"""Terminal polish: colour on a terminal only (NO_COLOR, pipes and files get the plain bytes), the
closing severity counts and per-input summary, ``analyze DIR`` pointing to ``scan``, readable units."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import cli
from kvlogdiag.render.units import fmt_duration

ROOT = Path(__file__).resolve().parent.parent
SGR = re.compile(r"\x1b\[[0-9;]*m")
LOG = "sample_logs/hma_disabled_swa.log"


def on_pty(args: list[str], **env: str) -> bytes:
    """stdout of ``kvlogdiag ARGS`` written to a pseudo-terminal."""
    master, slave = pty.openpty()
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    full_env.update({"TERM": "xterm-256color", "COLUMNS": "80"}, **env)
    proc = subprocess.Popen([sys.executable, "-m", "kvlogdiag", *args], cwd=ROOT, stdout=slave,
                            stderr=subprocess.DEVNULL, env=full_env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    proc.wait(timeout=120)
    return out.replace(b"\r\n", b"\n")


def piped(args: list[str]) -> bytes:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    return subprocess.run([sys.executable, "-m", "kvlogdiag", *args], cwd=ROOT, capture_output=True, env=env,
                          timeout=120).stdout


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_colour_only_on_a_terminal_and_the_characters_are_the_same():
    args = ["analyze", LOG, "sample_logs/v1_single_gpu.log"]
    plain = piped(args)
    coloured = on_pty(args)
    assert b"\x1b[" not in plain
    assert b"\x1b[" in coloured and b"\x1b[33m[warning]" in coloured.replace(b"\x1b[0m", b"")
    assert SGR.sub("", coloured.decode()) == plain.decode()  # colour added, not a character changed
    assert on_pty(args, NO_COLOR="1") == plain
    assert on_pty([*args, "--format", "json"]) == piped([*args, "--format", "json"])  # only the text output is coloured


def test_last_line_counts_and_a_summary_line_per_input():
    res = CliRunner().invoke(cli, ["analyze", str(ROOT / LOG), str(ROOT / "sample_logs/v1_single_gpu.log")])
    lines = res.stdout.rstrip("\n").splitlines()
    assert lines[-1] == "7 findings (0 errors, 3 warnings, 4 info) in 2 logs, 2 server starts."
    i = lines.index("Summary")
    assert lines[i + 1].split()[0].endswith("hma_disabled_swa.log") and "0 errors, 3 warnings, 2 info" in lines[i + 1]
    assert "bytes/token 73,725 B" in lines[i + 1]
    assert "0 errors, 0 warnings, 2 info" in lines[i + 2]
    one = CliRunner().invoke(cli, ["analyze", str(ROOT / LOG)]).stdout
    assert "\nSummary\n" not in one and one.endswith("5 findings (0 errors, 3 warnings, 2 info) in 1 log, 1 server start.\n")
    quiet = CliRunner().invoke(cli, ["analyze", "--min-severity", "error", str(ROOT / "sample_logs/v1_single_gpu.log")])
    assert quiet.stdout.endswith("No findings in 1 log, 1 server start.\n")


def test_counts_follow_the_json_for_multirun_logs():
    log = str(ROOT / "tests/data/multirun") + "/"
    logs = sorted(str(p) for p in Path(log).glob("*.log"))[:3]
    doc = json.loads(CliRunner().invoke(cli, ["analyze", "--format", "json", *logs]).stdout)
    n = sum(len(r["findings"]) for a in doc["analyses"] for r in a["all_runs"])
    starts = sum(len(a["all_runs"]) for a in doc["analyses"])
    last = CliRunner().invoke(cli, ["analyze", *logs]).stdout.rstrip("\n").splitlines()[-1]
    assert re.match(rf"^(?:{n:,} findings? \(|No findings)", last) and f"{starts:,} server start" in last


def test_analyze_dir_points_to_scan(tmp_path):
    res = CliRunner().invoke(cli, ["analyze", str(ROOT / "sample_logs")])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "is a folder" in res.stderr and "kvlogdiag scan" in res.stderr


@pytest.mark.parametrize("seconds,text", [(0.0123, "12 ms"), (0.9994, "999 ms"), (0.9996, "1.0 s"), (3.21, "3.2 s"), (59.97, "59.9 s"),
                                          (65, "1 min 05 s"), (3599, "59 min 59 s"), (3600, "1 h 00 min"),
                                          (7384, "2 h 03 min"), (90061, "1 d 01 h"), (86400 * 1200, "1,200 d 00 h"),
                                          (None, "—"), (float("nan"), "—")])
def test_durations_read_in_units(seconds, text):
    assert fmt_duration(seconds) == text


def test_scan_summary_uses_units_and_separators():
    res = CliRunner().invoke(cli, ["scan", str(ROOT / "sample_logs"), "-j", "1", "--no-progress"])
    first = res.stdout.splitlines()[0]
    assert re.fullmatch(r"[\d,]+ files, [\d,]+ server starts \([\d,]+ files read, [\d,]+ unchanged from state\) in "
                        r"(\d+ ms|\d+\.\d s|\d+ min \d\d s)", first), first
