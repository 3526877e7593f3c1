"""The analyze / rules / explain / patterns commands through click's runner: options, config, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import ExitCode, cli

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
    r = run(["analyze", "--format", "json", "--select", "KVD999", log(HIGH_UTIL)])
    assert findings(r) == []
    r = run(["analyze", "--format", "json", "--select", "KVD004,KVD001", log(HIGH_UTIL)])
    assert [f["rule"] for f in findings(r)] == ["KVD004"]


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
    r = run(["patterns"])
    assert "kv_available_gib" in r.stdout


def test_stdin_dash(log):
    r = run(["analyze", "--format", "json", "-"], input=HIGH_UTIL.encode())
    a = json.loads(r.stdout)["analyses"][0]
    assert a["source"] == "-" and a["config"]["gpu_memory_utilization"] == 0.99
