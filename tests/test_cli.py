"""The analyze / rules / explain / patterns commands through click's runner: options, config, exit codes."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.cli.main import cli

HIGH_UTIL = (
    "(APIServer pid=7) INFO 07-03 14:17:08 [utils.py:328] non-default args: {'model_tag': 'Qwen/Qwen3-32B', "
    "'tensor_parallel_size': 4, 'gpu_memory_utilization': 0.99}\n"
    # a complete start-up (KV sized), so only the utilization rule has something to say
    "(Worker_TP0 pid=9) INFO 07-03 14:19:40 [gpu_worker.py:276] Available KV cache memory: 20.0 GiB\n"
    "(EngineCore_DP0 pid=8) INFO 07-03 14:19:41 [kv_cache_utils.py:864] GPU KV cache size: 327,680 tokens\n"
)
WARN_UTIL = HIGH_UTIL.replace("0.99", "0.98")  # KVD004: error from 0.99, warning from 0.98 (version unknown)


def run(args, input=None, cwd=None):
    runner = CliRunner()
    if cwd is not None:
        with runner.isolated_filesystem(temp_dir=cwd):
            return runner.invoke(cli, args, input=input)
    return runner.invoke(cli, args, input=input)


@pytest.fixture
def log(tmp_path):
    def make(text: str, name: str = "x.log") -> str:
        p = tmp_path / name
        p.write_text(text, encoding="utf-8")
        return str(p)
    return make


def findings(result):
    return [f for a in json.loads(result.stdout)["analyses"] for f in a["findings"]]


def test_exit_code_enum_values():
    assert [int(ExitCode.OK), int(ExitCode.FINDINGS), int(ExitCode.ERROR)] == [0, 1, 2]
    assert [int(ExitCode.INTERRUPTED), int(ExitCode.BROKEN_PIPE), int(ExitCode.TERMINATED)] == [130, 141, 143]


def test_exit_module_is_a_leaf_and_the_only_definition():
    import ast
    import re

    root = Path(__file__).resolve().parent.parent / "kvlogdiag"
    tree = ast.parse((root / "cli" / "exit.py").read_text(encoding="utf-8"))
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.startswith("kvlogdiag")]
    for path in root.rglob("*.py"):
        if path == root / "cli" / "exit.py":
            continue
        text = path.read_text(encoding="utf-8")
        assert "class ExitCode" not in text, path
        assert not re.search(r"^\s*\w*EXIT\w*\s*=\s*\d+", text, re.M), f"{path}: an exit status of its own"
        assert not re.search(r"\bexit\(\s*\d", text), f"{path}: an exit status written as a number"


def test_every_project_exception_has_one_base():
    from kvlogdiag.config import ConfigError
    from kvlogdiag.derive.architecture import UnknownArchitecture
    from kvlogdiag.errors import KvlogdiagError
    from kvlogdiag.input.reader import InputError
    from kvlogdiag.modes.estimate import EstimateError
    from kvlogdiag.modes.report import ReportError
    from kvlogdiag.modes.scan import StateError
    from kvlogdiag.rules.condition import ConditionError, EvaluationError
    from kvlogdiag.rules.context import ProviderError
    from kvlogdiag.rules.engine import RuleLoadError, UnknownRuleError

    for exc in (ConfigError, InputError, StateError, RuleLoadError, UnknownRuleError, ConditionError, EvaluationError,
                UnknownArchitecture, EstimateError, ReportError, ProviderError):
        assert issubclass(exc, KvlogdiagError), exc


def test_error_finding_exits_1_by_default(log):
    r = run(["analyze", "--format", "json", log(HIGH_UTIL)])
    assert r.exit_code == 1
    assert [f["rule"] for f in findings(r)] == ["KVD004"]
    assert findings(r)[0]["severity"] == "error"
    assert findings(r)[0]["line"] == 1


def test_warning_does_not_fail_unless_fail_on_warning(log):
    path = log(WARN_UTIL)
    assert run(["analyze", "--format", "json", path]).exit_code == 0
    assert run(["analyze", "--format", "json", "--fail-on", "warning", path]).exit_code == 1
    assert run(["analyze", "--format", "json", "--fail-on", "never", log(HIGH_UTIL, "h.log")]).exit_code == 0


def test_min_severity_hides_but_fail_on_still_counts(log):
    r = run(["analyze", "--format", "json", "--min-severity", "error", "--fail-on", "warning", log(WARN_UTIL)])
    assert findings(r) == []
    assert r.exit_code == 1


@pytest.mark.parametrize("spec", ["KVD004", "KVD00", "gpu-memory-utilization-high", "kvd004"])
def test_ignore_by_code_prefix_or_name(log, spec):
    r = run(["analyze", "--format", "json", "--ignore", spec, log(HIGH_UTIL)])
    assert r.exit_code == 0
    assert findings(r) == []


def test_select_limits_rules(log):
    r = run(["analyze", "--format", "json", "--select", "KVD013", log(HIGH_UTIL)])
    assert findings(r) == []
    r = run(["analyze", "--format", "json", "--select", "KVD004,KVD001", log(HIGH_UTIL)])
    assert [f["rule"] for f in findings(r)] == ["KVD004"]


@pytest.mark.parametrize("args,bad,suggestion", [
    (["--select", "KVD999"], "KVD999", "KVD009"),
    (["--select", "KVD04"], "KVD04", "KVD004"),  # a prefix of no rule (KVD01 is one of KVD010-KVD018)
    (["--select", "KVD004,KVD00x"], "KVD00x", "KVD001"),  # ties: the first few, in code order
    (["--ignore", "foo"], "foo", None),
    (["--ignore", "gpu-memory-utilisation-high"], "gpu-memory-utilisation-high", "gpu-memory-utilization-high"),
    (["--extend-select", "KVD0999"], "KVD0999", "KVD009"),
])
def test_unknown_rule_spec_is_usage_error_with_suggestion(log, args, bad, suggestion):
    r = run(["analyze", "--format", "json", *args, log(HIGH_UTIL)])
    assert r.exit_code == 2 and r.stdout == ""
    lines = [ln for ln in r.stderr.splitlines() if ln]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"kvlogdiag: error: {args[0]}: ") and repr(bad) in lines[0]
    if suggestion:
        assert f"did you mean {suggestion!r}" in lines[0]
    else:
        assert "did you mean" not in lines[0]


@pytest.mark.parametrize("cmd", [["report"], ["scan"], ["watch", "--no-echo", "-f"]])
def test_unknown_rule_spec_rejected_by_every_rule_command(log, cmd):
    r = run([cmd[0], "--select", "KVD999", *cmd[1:], log(HIGH_UTIL)])
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert "'KVD999'" in r.stderr and "did you mean" in r.stderr


@pytest.mark.parametrize("spec", ["KVD0", "KVD01", "ALL", "all", "kvd00"])
def test_valid_prefixes_accepted(log, spec):
    r = run(["analyze", "--format", "json", "--select", spec, log(HIGH_UTIL)])
    assert r.exit_code in (0, 1), r.stderr


def test_missing_input_is_one_line_error_and_others_still_analysed(log):
    good = log(WARN_UTIL)
    r = run(["analyze", "--format", "json", "/nonexistent/x.log", good])
    assert r.exit_code == 2
    err = [ln for ln in r.stderr.splitlines() if ln]
    assert err == ["kvlogdiag: error: /nonexistent/x.log: no such file"]
    assert [a["source"] for a in json.loads(r.stdout)["analyses"]] == [good]


def test_config_file_sets_options_and_flags_win(tmp_path, log):
    path = log(WARN_UTIL)
    (tmp_path / "kvlogdiag.toml").write_text('fail-on = "warning"\n[params.KVD004]\nwarn_at = 0.99\ninfo_at = 0.99\nerror_at = 0.995\n')
    r = run(["analyze", "--format", "json", "--config", str(tmp_path / "kvlogdiag.toml"), path])
    assert findings(r) == [] and r.exit_code == 0  # 0.98 is below the raised thresholds
    (tmp_path / "kvlogdiag.toml").write_text('fail-on = "warning"\n')
    r = run(["analyze", "--format", "json", "--config", str(tmp_path / "kvlogdiag.toml"), path])
    assert r.exit_code == 1
    r = run(["analyze", "--format", "json", "--config", str(tmp_path / "kvlogdiag.toml"), "--fail-on", "error", path])
    assert r.exit_code == 0


def test_pyproject_tool_section_found_from_cwd(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.kvlogdiag]\nignore = ["KVD004"]\n')
    (tmp_path / "x.log").write_text(HIGH_UTIL)
    runner = CliRunner()
    import os
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        r = runner.invoke(cli, ["analyze", "--format", "json", "x.log"])
    finally:
        os.chdir(old)
    assert r.exit_code == 0 and findings(r) == []


def test_broken_config_is_exit_2_naming_file_and_line(tmp_path, log):
    cfg = tmp_path / "kvlogdiag.toml"
    cfg.write_text('fail-on = "warning"\nselect = [\n')
    r = run(["analyze", "--config", str(cfg), log(WARN_UTIL)])
    assert r.exit_code == 2
    assert f"{cfg}:2: invalid TOML" in r.stderr
    cfg.write_text('fail_on = "warning"\n')
    r = run(["analyze", "--config", str(cfg), log(WARN_UTIL)])
    assert r.exit_code == 2 and "unknown key" in r.stderr


def test_bad_rule_folder_is_exit_2(tmp_path, log):
    d = tmp_path / "myrules"
    d.mkdir()
    (d / "ACME001-bad.toml").write_text(
        'code = "ACME001"\nname = "bad"\nsummary = "s"\nwhy = "w"\nfix = "f"\n'
        'condition = "__import__(\'os\')"\nmessage = "m"\n')
    r = run(["analyze", "--rules", str(d), log(WARN_UTIL)])
    assert r.exit_code == 2
    assert "ACME001-bad.toml" in r.stderr and "ACME001" in r.stderr and "column" in r.stderr


def test_user_rule_with_line_regex(tmp_path, log):
    d = tmp_path / "myrules"
    d.mkdir()
    (d / "ACME001-oom-seen.toml").write_text(
        'code = "ACME001"\nname = "oom-seen"\nseverity = "warning"\nsummary = "CUDA OOM in the log"\n'
        'why = "w"\nfix = "f"\ncondition = "count(\'CUDA out of memory\') >= 2"\n'
        'message = "{params.what} seen"\nevidence = ["line:CUDA out of memory"]\n[params]\nwhat = "OOM"\n')
    text = "INFO a\nERROR torch.OutOfMemoryError: CUDA out of memory. Tried\nINFO b\nCUDA out of memory again\n"
    r = run(["analyze", "--format", "json", "--rules", str(d), "--select", "ACME", log(text)])
    fs = findings(r)
    assert [(f["rule"], f["line"], f["message"]) for f in fs] == [("ACME001", 2, "OOM seen")]


def test_text_and_markdown_formats(log):
    path = log(HIGH_UTIL)
    r = run(["analyze", path])
    assert "KVD004 [error]" in r.stdout and f"{path}:1" in r.stdout
    r = run(["analyze", "--format", "markdown", path])
    assert "**KVD004 gpu-memory-utilization-high** (error, line 1)" in r.stdout


def test_rules_explain_patterns():
    r = run(["rules", "--format", "json"])
    codes = [x["code"] for x in json.loads(r.stdout)]
    assert "KVD004" in codes and codes == sorted(codes)
    r = run(["explain", "KVD004"])
    assert r.exit_code == 0 and "Why it matters" in r.stdout and "warn_at = 0.9" in r.stdout
    r = run(["explain", "NOPE1"])
    assert r.exit_code == 2
    r = run(["explain", "KVD0004"])
    assert r.exit_code == 2 and "did you mean 'KVD004'" in r.stderr
    r = run(["patterns"])
    assert "kv_available_gib" in r.stdout


def test_stdin_dash(log):
    r = run(["analyze", "--format", "json", "-"], input=HIGH_UTIL.encode())
    a = json.loads(r.stdout)["analyses"][0]
    assert a["source"] == "-" and a["config"]["gpu_memory_utilization"] == 0.99


def test_explain_ambiguous_prefix_lists_candidates():
    r = run(["explain", "KVD00"])
    assert r.exit_code == 2 and r.stdout == ""
    assert "ambiguous" in r.stderr
    for code in [f"KVD00{n}" for n in range(1, 10)]:
        assert code in r.stderr


@pytest.mark.parametrize("spec", ["KVD001", "kvd001", "hybrid-kv-manager-disabled"])
def test_explain_by_code_or_name(spec):
    r = run(["explain", spec])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("KVD001 hybrid-kv-manager-disabled")


def test_explain_unique_prefix_and_exact_code_wins_over_prefix(tmp_path):
    d = tmp_path / "myrules"
    d.mkdir()
    for code, name in (("ACME001", "one"), ("ACME0010", "ten")):
        (d / f"{code}-{name}.toml").write_text(
            f'code = "{code}"\nname = "{name}"\nsummary = "s"\nwhy = "w"\nfix = "f"\n'
            'condition = "true"\nmessage = "m"\n')
    r = run(["explain", "--rules", str(d), "ACME001"])  # also a prefix of ACME0010
    assert r.exit_code == 0 and r.stdout.startswith("ACME001 one"), r.stderr
    r = run(["explain", "--rules", str(d), "ACME00"])
    assert r.exit_code == 2 and "ACME001" in r.stderr and "ACME0010" in r.stderr
    r = run(["explain", "--rules", str(d), "ACME0010"])
    assert r.exit_code == 0 and r.stdout.startswith("ACME0010 ten")
    r = run(["explain", "KVD01"])  # KVD010-KVD018
    assert r.exit_code == 2 and "KVD018" in r.stderr


ROOT = Path(__file__).resolve().parent.parent


def _unread(fd: int) -> int:
    """Bytes waiting in a pipe (FIONREAD on our copy of its read end)."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


@pytest.mark.parametrize("cmd", [["analyze"], ["analyze", "--format", "json"], ["report"]])
def test_ctrl_c_while_reading_an_open_pipe_exits_130(tmp_path, cmd):
    r_fd, w_fd = os.pipe()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "kvlogdiag", *cmd, "-"], stdin=r_fd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path, env=env)
    try:
        os.write(w_fd, HIGH_UTIL.encode() * 20)
        # the marker: the command has read what we wrote, so it runs its own code (not interpreter start-up);
        # the pipe stays open, as behind a live server. The deadline only guards against a hang.
        deadline = time.monotonic() + 120
        while _unread(r_fd) > 0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command never read its input"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(w_fd)
        os.close(r_fd)
        if proc.poll() is None:
            proc.kill()
    text = err.decode()
    assert proc.returncode == 130, text
    assert "kvlogdiag: interrupted" in text
    assert "Aborted" not in text and "Traceback" not in text
    assert out == b""


def test_main_returns_through_one_exit(tmp_path, log):
    path = log(HIGH_UTIL)
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def rc(*args):
        return subprocess.run([sys.executable, "-m", "kvlogdiag", *args], cwd=tmp_path, env=env,
                              capture_output=True, timeout=120)

    assert rc("analyze", path).returncode == 1
    assert rc("analyze", "--fail-on", "never", path).returncode == 0
    p = rc("analyze", "--format", "yaml", path)  # click's own usage errors stay exit 2
    assert p.returncode == 2 and b"Invalid value" in p.stderr
    p = rc("--help")
    assert p.returncode == 0 and b"analyze" in p.stdout
    p = rc("--version")
    assert p.returncode == 0 and b"kvlogdiag" in p.stdout
    p = rc("rules")
    assert p.returncode == 0 and b"KVD004" in p.stdout
    p = rc("analyze", "--select", "KVD999", path)
    assert p.returncode == 2 and p.stderr.count(b"\n") == 1


def test_engines_have_no_click_and_only_the_group_exits():
    import re

    root = Path(__file__).resolve().parent.parent / "kvlogdiag"
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path.parent.name != "cli":
            assert not re.search(r"^\s*(import click|from click)", text, re.M), f"{path}: click outside kvlogdiag/cli"
            assert "kvlogdiag.cli.main" not in text or path.name == "__main__.py", f"{path}: imports the command line"
        exits = re.findall(r"\bsys\.exit\(", text)
        assert not exits or path == root / "cli" / "main.py", f"{path}: calls sys.exit (commands return an ExitCode)"
    assert (root / "cli" / "main.py").read_text(encoding="utf-8").count("sys.exit(") == 1


def test_checkout_runs_without_install(tmp_path):
    # PYTHONPATH=. python -m kvlogdiag rules from the checkout: the built-in rules are package data
    p = subprocess.run([sys.executable, "-m", "kvlogdiag", "rules", "--format", "json"], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH="."), capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "KVD001" in {r["code"] for r in json.loads(p.stdout)}


def test_closed_stdout_exits_141_quietly(tmp_path):
    # the reader of stdout is gone before anything is written (| head that already exited)
    logs = [str(p) for p in sorted((ROOT / "sample_logs").glob("*.log"))] * 3
    r_fd, w_fd = os.pipe()
    os.close(r_fd)
    try:
        p = subprocess.run([sys.executable, "-m", "kvlogdiag", "analyze", "--format", "json", "--fail-on", "never", *logs],
                           stdout=w_fd, stderr=subprocess.PIPE, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                           timeout=300)
    finally:
        os.close(w_fd)
    assert p.returncode == 141, p.stderr
    assert p.stderr == b""


@pytest.mark.parametrize("args", [["rules"], ["rules", "--format", "json"], ["explain", "KVD002"], ["explain", "KVD101"],
                                  ["patterns"], ["patterns", "--format", "markdown"]])
def test_every_listing_command_writes_to_a_file_or_stays_quiet(args, tmp_path):
    plain = CliRunner().invoke(cli, args)
    out = tmp_path / "out.txt"
    written = CliRunner().invoke(cli, [*args, "-o", str(out)])
    quiet = CliRunner().invoke(cli, [*args, "--quiet"])
    assert plain.exit_code == written.exit_code == quiet.exit_code == 0
    assert written.stdout == "" and quiet.stdout == "" and out.read_text() == plain.stdout and plain.stdout


def test_watch_writes_its_events_to_a_file_and_still_passes_the_log_through(tmp_path):
    log = ROOT / "sample_logs" / "v1_tp4_workers.log"
    events = tmp_path / "events.jsonl"
    r = subprocess.run([sys.executable, "-m", "kvlogdiag", "watch", "--format", "json", "-o", str(events)],
                       stdin=log.open("rb"), capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == log.read_bytes() and b"KVD005" not in r.stderr
    kinds = [json.loads(line)["event"] for line in events.read_text().splitlines()]
    assert "finding" in kinds and "summary" in kinds
