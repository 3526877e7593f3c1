"""Files as users expect them, and what a log may not do to the output (issue 18, items 2 and 5).

* ``scan -o`` and ``--state``: created with the process umask, an existing file keeps its mode, the write
  is atomic and a failed write leaves the old file; a state in a missing folder fails before the scan; a
  state or rule file that is a FIFO, a device or hand-edited with wrong types is a one-line error.
* redaction of the common secret formats (the table in docs/reliability.md);
* control sequences from the log never reach stdout raw; CSV cells are formula-safe;
* the rule language refuses huge rounding; stdout on a full disk is a one-line error in every command.
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.fileio import process_umask, read_regular, replace_atomically, write_atomic
from kvlogdiag.render.redact import Redactor, escape_controls

REPO = Path(__file__).resolve().parent.parent
TP4 = REPO / "sample_logs" / "v1_tp4_workers.log"
GUARD_S = 120  # hang guard for one subprocess
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def kvlogdiag(*args: str, cwd: Path = REPO, umask: int | None = None, **kw) -> subprocess.CompletedProcess:
    pre = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run([sys.executable, "-m", "kvlogdiag", *args], capture_output=True, timeout=GUARD_S,
                          cwd=cwd, preexec_fn=pre, **kw)


def one_line_error(p: subprocess.CompletedProcess) -> str:
    err = p.stderr.decode(errors="replace")
    assert "Traceback" not in err, err[-2000:]
    lines = [x for x in err.splitlines() if x.startswith("kvlogdiag: error:")]
    assert lines, err[-2000:]
    return lines[0]


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    (d / "a.log").write_bytes(TP4.read_bytes())
    return d


# --- item 2: modes, atomicity, failures ------------------------------------------------------------


@pytest.mark.parametrize("ext", [".csv", ".json", ".jsonl", ".md", ".parquet"])
@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_scan_outputs_and_state_are_created_with_the_umask(tmp_path, logs, ext, umask):
    if ext == ".parquet":
        pytest.importorskip("pyarrow")
    out, state = tmp_path / f"rows{ext}", tmp_path / "state.json"
    p = kvlogdiag("scan", str(logs), "-o", str(out), "--state", str(state), "--fail-on", "never", umask=umask)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    for f in (out, state):
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~umask, (f, oct(f.stat().st_mode))  # was 0600


def test_an_existing_output_keeps_its_mode_and_owner(tmp_path, logs):
    out, state = tmp_path / "rows.csv", tmp_path / "state.json"
    kvlogdiag("scan", str(logs), "-o", str(out), "--state", str(state), "--fail-on", "never")
    os.chmod(out, 0o640)
    os.chmod(state, 0o604)
    if ROOT:
        os.chown(out, 1234, 4321)
    p = kvlogdiag("scan", str(logs), "-o", str(out), "--state", str(state), "--fail-on", "never", umask=0o077)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert stat.S_IMODE(out.stat().st_mode) == 0o640 and stat.S_IMODE(state.stat().st_mode) == 0o604
    if ROOT:
        assert (out.stat().st_uid, out.stat().st_gid) == (1234, 4321)
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".kvlogdiag-")]  # no temp file left


def test_a_failed_write_leaves_the_old_file_intact(tmp_path):
    target = tmp_path / "rows.csv"
    target.write_text("old content\n")
    os.chmod(target, 0o644)

    def broken(fd: int, tmp: str) -> None:
        os.write(fd, b"half of the new")
        os.close(fd)
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        replace_atomically(str(target), ".tmp", broken)
    assert target.read_text() == "old content\n"
    assert [f.name for f in tmp_path.iterdir()] == ["rows.csv"]
    write_atomic(str(target), "new\n")
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == 0o644


@pytest.mark.skipif(ROOT, reason="root may write into a read-only folder")
def test_scan_state_that_cannot_be_written_is_one_line_and_keeps_the_old_state(tmp_path, logs):
    sdir = tmp_path / "s"
    sdir.mkdir()
    state = sdir / "state.json"
    kvlogdiag("scan", str(logs), "--state", str(state), "--fail-on", "never")
    before = state.read_bytes()
    (logs / "b.log").write_bytes(TP4.read_bytes())
    os.chmod(sdir, 0o500)
    try:
        p = kvlogdiag("scan", str(logs), "--state", str(state), "--fail-on", "never")
    finally:
        os.chmod(sdir, 0o700)
    assert p.returncode == ExitCode.ERROR
    assert "not writable" in one_line_error(p)
    assert state.read_bytes() == before


def test_a_state_write_failing_on_a_full_disk_keeps_the_old_state(tmp_path, logs, monkeypatch):
    from click.testing import CliRunner

    import kvlogdiag.fileio as fileio
    from kvlogdiag.cli.main import cli

    state = tmp_path / "state.json"
    assert kvlogdiag("scan", str(logs), "--state", str(state), "--fail-on", "never").returncode == 0
    before = state.read_bytes()
    (logs / "b.log").write_bytes(TP4.read_bytes())
    real = os.fsync

    def full(fd: int) -> None:
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(".kvlogdiag-"):
            raise OSError(28, "No space left on device")
        real(fd)

    monkeypatch.setattr(fileio.os, "fsync", full)
    r = CliRunner().invoke(cli, ["scan", str(logs), "--state", str(state), "--fail-on", "never", "-j", "1"])
    assert r.exit_code == ExitCode.ERROR, r.output
    assert "cannot write the state (No space left on device); the previous state is kept" in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert state.read_bytes() == before
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".kvlogdiag-")]


@pytest.mark.parametrize("opt", ["--state", "-o"])
def test_a_missing_folder_fails_before_the_scan(tmp_path, logs, opt):
    target = tmp_path / "no" / "such" / ("state.json" if opt == "--state" else "rows.csv")
    p = kvlogdiag("scan", str(logs), opt, str(target), "--format", "jsonl")
    assert p.returncode == ExitCode.ERROR
    assert "does not exist" in one_line_error(p)
    assert p.stdout == b""  # nothing scanned (it used to scan everything, then fail)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])  # a directory is click's usage error (exit 2)
def test_a_state_that_is_not_a_regular_file_is_refused(tmp_path, logs, kind):
    if kind == "fifo":
        state = tmp_path / "state.json"
        os.mkfifo(state)
    elif kind == "dev-zero":
        state = Path("/dev/zero")
        if not state.exists():
            pytest.skip("no /dev/zero")
    p = kvlogdiag("scan", str(logs), "--state", str(state))
    assert p.returncode == ExitCode.ERROR
    assert str(state) in one_line_error(p)


def test_a_state_larger_than_its_bound_is_refused_before_it_is_read(tmp_path, logs):
    from kvlogdiag.modes.scan import MAX_STATE_BYTES
    state = tmp_path / "state.json"
    with open(state, "wb") as fh:
        fh.truncate(MAX_STATE_BYTES + 1)  # sparse: no disk, and refused by its size before a byte is read
    p = kvlogdiag("scan", str(logs), "--state", str(state))
    assert p.returncode == ExitCode.ERROR
    err = one_line_error(p)
    assert str(state) in err and "larger than" in err
    assert state.stat().st_size == MAX_STATE_BYTES + 1  # the refused file is left as it was


@pytest.mark.parametrize("edit,why", [
    (lambda d: d["files"].update({k: 5 for k in d["files"]}), "must be an object"),
    (lambda d: [r.update(size="big") for r in d["files"].values()], ".size must be an integer"),
    (lambda d: [r.update(rows="x") for r in d["files"].values()], ".rows must be a list"),
    (lambda d: [row.update(tokens_min="lots") for r in d["files"].values() for row in r["rows"]],
     "tokens_min must be an integer or null"),
    (lambda d: [row.update(bytes_per_token=[1]) for r in d["files"].values() for row in r["rows"]],
     "bytes_per_token must be a number or null"),
    (lambda d: [row.update(model=7) for r in d["files"].values() for row in r["rows"]], "model must be text or null"),
], ids=["record", "size", "rows", "int-column", "float-column", "text-column"])
def test_a_hand_edited_state_with_wrong_types_is_one_line(tmp_path, logs, edit, why):
    state = tmp_path / "state.json"
    assert kvlogdiag("scan", str(logs), "--state", str(state), "--fail-on", "never").returncode == 0
    doc = json.loads(state.read_text())
    edit(doc)
    state.write_text(json.dumps(doc))
    p = kvlogdiag("scan", str(logs), "--state", str(state), "--fail-on", "never")
    assert p.returncode == ExitCode.ERROR
    line = one_line_error(p)
    assert why in line and str(state) in line, line


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge"])
def test_a_rule_file_that_is_not_a_small_regular_file_is_refused(tmp_path, kind):
    rules = tmp_path / "rules"
    rules.mkdir()
    f = rules / "X001-bad.toml"
    if kind == "fifo":
        os.mkfifo(f)
    elif kind == "dev-zero":
        if not Path("/dev/zero").exists():
            pytest.skip("no /dev/zero")
        f.symlink_to("/dev/zero")
    else:
        f.write_bytes(b"# " + b"x" * (2 << 20) + b"\n")
    p = kvlogdiag("analyze", "--rules", str(rules), str(TP4))  # a FIFO used to block here for good
    assert p.returncode == ExitCode.ERROR
    assert str(f) in one_line_error(p)


def test_read_regular_bounds(tmp_path):
    f = tmp_path / "x"
    f.write_bytes(b"12345")
    assert read_regular(str(f), 5) == b"12345"
    with pytest.raises(OSError, match="larger than"):
        read_regular(str(f), 4)
    assert 0 <= process_umask() <= 0o777


# --- stdout that cannot be written -----------------------------------------------------------------


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("args", [["analyze", str(TP4)], ["analyze", "--format", "json", str(TP4)],
                                  ["report", str(TP4)], ["rules"], ["explain", "KVD004"],
                                  ["estimate", "--log", str(TP4)], ["scan", str(TP4)], ["watch"]],
                         ids=lambda a: "-".join(x for x in a if not x.startswith("/"))[:30])
def test_a_full_disk_on_stdout_is_a_one_line_error(args):
    with open("/dev/full", "wb") as full:
        p = subprocess.run([sys.executable, "-m", "kvlogdiag", *args, *([] if args[0] in ("rules", "explain", "estimate") else ["--fail-on", "never"])],
                           stdin=open(TP4, "rb"), stdout=full, stderr=subprocess.PIPE, timeout=GUARD_S, cwd=REPO)
    err = p.stderr.decode()
    assert p.returncode == ExitCode.ERROR, err  # was a traceback and exit 1 (= "findings")
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert "stdout: cannot write (No space left on device)" in err, err


# --- redaction ---------------------------------------------------------------------------------------

# (text, the secret, the mask that replaces it) — the table in docs/reliability.md
SECRETS = [
    ("export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", "<api-key-1>"),
    ("temporary ASIAY34FZKBOKMUTVV7A used", "ASIAY34FZKBOKMUTVV7A", "<api-key-1>"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "AWS_SECRET_ACCESS_KEY=<api-key-1>"),
    ("'aws_session_token': 'FwoGZXIvYXdzEJr//////////wEaDHVzZXI='", "FwoGZXIvYXdzEJr", "<api-key-1>"),
    ("git token ghp_16C7e42F292c6912E7710c838347Ae178B4a12 set", "ghp_16C7e42F292c6912E7710c838347Ae178B4a12", "<api-key-1>"),
    ("oauth gho_16C7e42F292c6912E7710c838347Ae178B4a12", "gho_16C7e42F292c6912E7710c838347Ae178B4a12", "<api-key-1>"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ01234 used",
     "github_pat_11ABCDEFG0123456789", "<api-key-1>"),
    ("slack xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "xoxb-123456789012", "<api-key-1>"),
    ("webhook token xoxp-1111111111-2222222222-333333333333-abcdef", "xoxp-1111111111", "<api-key-1>"),
    ("maps key=AIzaSyA-1234567890abcdefghijklmnopqrstu", "AIzaSyA-1234567890abcdefghijklmnopqrstu", "<api-key-1>"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1234567890abcdef\n-----END RSA PRIVATE KEY-----",
     "MIIEpAIBAAKCAQEA1234567890abcdef", "<pem-1>"),
    ("cert -----BEGIN CERTIFICATE----- follows", "BEGIN CERTIFICATE", "<pem-1>"),
    ("jwt eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok",
     "eyJzdWIiOiIxMjM0NTY3ODkwIn0", "<api-key-1>"),
    ("cache_dir=~alice/.cache/huggingface", "alice", "~<user-1>/.cache"),
    ("eth0 link/ether 00:1a:2b:3c:4d:5e brd ff:ff:ff:ff:ff:ff", "00:1a:2b:3c:4d:5e", "<mac-1>"),
    ("NIC 00-1A-2B-3C-4D-5E up", "00-1A-2B-3C-4D-5E", "<mac-1>"),
]


@pytest.mark.parametrize("text,secret,mask", SECRETS, ids=[s[1][:18] for s in SECRETS])
def test_common_secret_formats_are_redacted(text, secret, mask):
    out = Redactor().redact(text)
    assert secret not in out, out
    assert mask in out, out


def test_a_pem_block_split_over_log_lines_is_masked_to_its_end():
    r = Redactor()
    lines = ["INFO key -----BEGIN OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
             "AAAAMwAAAAtzc2gtZWQyNTUxOQAAACBhYmNk", "-----END OPENSSH PRIVATE KEY-----", "INFO 12:00:01 KV cache 1234 tokens"]
    out = [r.redact(x) for x in lines]
    assert out[1] == out[2] == out[3] == "<pem-1>" and out[0] == "INFO key <pem-1>"
    assert out[4] == lines[4]  # after the END line, nothing more is masked


@pytest.mark.parametrize("text", ["~/models and ~30 GiB", "time 12:34:56.789", "version 0.10.1.1",
                                  "sha256:ab12cd34ef56ab12cd34ef56ab12cd34", "max_model_len=65536 AKIA"])
def test_look_alikes_are_kept(text):
    assert Redactor().redact(text) == text


# --- control sequences from the log ------------------------------------------------------------------

HOSTILE = b"\x1b]0;PWNED\x07\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\\x1bPq#0;2;0;0;0\x1b\\\xc2\x9b31m\x07"
RAW = (b"\x1b]", b"\x07", b"\x1bP", b"\xc2\x9b", b"\x1b\\")


@pytest.fixture
def hostile_log(tmp_path: Path) -> Path:
    d = tmp_path / "h"
    d.mkdir()
    f = d / "x.log"
    data = TP4.read_bytes().replace(b"Llama-3.1-70B", b"Llama" + HOSTILE + b"-3.1-70B")
    assert HOSTILE in data
    f.write_bytes(data)
    return f


@pytest.mark.parametrize("args", [["analyze"], ["analyze", "--format", "markdown"], ["analyze", "--format", "json"],
                                  ["report"], ["report", "--no-redact"], ["report", "--format", "html"],
                                  ["scan"], ["scan", "--format", "markdown"], ["scan", "--format", "csv"],
                                  ["estimate", "--log"], ["watch", "--no-echo"]], ids=lambda a: "-".join(a))
def test_control_sequences_from_the_log_never_reach_the_output_raw(hostile_log, args):
    target = str(hostile_log.parent) if args[0] == "scan" else str(hostile_log)
    cmd = [*args, target] if args[0] != "watch" else args
    tail = [] if args[0] == "estimate" else ["--fail-on", "never"]
    p = kvlogdiag(*cmd, *tail, stdin=open(hostile_log, "rb"))
    out = p.stdout + p.stderr
    assert p.returncode in (0, 1), p.stderr.decode(errors="replace")[-1500:]
    assert not [c for c in RAW if c in out], [c for c in RAW if c in out]
    if "json" in args:
        doc = json.loads(p.stdout)  # still valid JSON, the name's text kept (escaped)
        assert "PWNED" in json.dumps(doc)


def test_report_file_output_is_escaped_too(hostile_log, tmp_path):
    out = tmp_path / "r.md"
    p = kvlogdiag("report", str(hostile_log), "-o", str(out), "--fail-on", "never")
    assert p.returncode in (0, 1)
    assert not [c for c in RAW if c in out.read_bytes()]


def test_a_hostile_file_name_in_a_one_line_error_is_escaped(tmp_path):
    p = kvlogdiag("analyze", str(tmp_path / "no\x1b]0;PWNED\x07such.log"))
    assert p.returncode == ExitCode.ERROR
    assert b"\x1b" not in p.stderr and b"\x07" not in p.stderr and b"\\x1b]0;PWNED\\x07" in p.stderr


def test_escape_controls():
    assert escape_controls("plain text\tand tab\n") == "plain text\tand tab\n"
    assert escape_controls("a\x1b]0;t\x07b\x9bc\r") == "a\\x1b]0;t\\x07b\\u009bc\\x0d"


# --- CSV formula injection ---------------------------------------------------------------------------


def test_csv_cells_are_formula_safe_but_numbers_stay_numbers(tmp_path):
    from kvlogdiag.modes.scan import empty_row, render_rows

    rows = []
    for i, text in enumerate(["=HYPERLINK(\"http://evil\",\"x\")", "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)",
                              "-1.5", "plain", "\t=1"]):
        r = empty_row(f"f{i}.log", None)
        r["model"] = text
        r["tokens_min"] = -5 if i == 0 else None
        rows.append(r)
    cells = [r["model"] for r in csv.DictReader(io.StringIO(render_rows("csv", rows)))]
    assert cells == ["'=HYPERLINK(\"http://evil\",\"x\")", "'+1+cmd|' /C calc'!A0", "'-2+3", "'@SUM(A1)", "-1.5",
                     "plain", "'\t=1"]
    assert list(csv.DictReader(io.StringIO(render_rows("csv", rows))))[0]["tokens_min"] == "-5"


# --- the rule language -------------------------------------------------------------------------------


@pytest.mark.parametrize("cond", ["round(max_model_len, -999999999) > 0", "round(1, 999999999) > 0",
                                  "round(1, -21) > 0", "round(1, 0.5) > 0"])
def test_huge_rounding_is_refused_at_load(tmp_path, cond):
    from kvlogdiag.rules.condition import ConditionError, parse
    from kvlogdiag.rules.engine import FUNCTIONS

    with pytest.raises(ConditionError, match="decimals"):
        parse(cond, lambda n: True, FUNCTIONS)


def test_huge_rounding_from_a_figure_is_a_rule_error_not_a_hang():
    from kvlogdiag.rules.condition import EvaluationError, bounded_round, parse
    from kvlogdiag.rules.engine import FUNCTIONS

    assert bounded_round(1234.5678, 2) == 1234.57 and bounded_round(123456, -3) == 123000
    assert bounded_round("x", 2) is None
    cond = parse("round(1, n) > 0", lambda name: True, FUNCTIONS)
    with pytest.raises(EvaluationError, match="out of range"):
        cond.evaluate({"n": -999999999}, {"round": bounded_round})
