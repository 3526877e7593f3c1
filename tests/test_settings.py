"""Settings you can see: which kvlogdiag.toml is used (input folder, working directory, --config,
--isolated), ``--show-settings`` with each value's origin, and docs/configuration.md listing every key."""

from __future__ import annotations

import re
import shutil
from dataclasses import fields
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import cli
from kvlogdiag.config import KEYS, load_settings
from kvlogdiag.rules.context import DEFAULT_P99_LEN, Options

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "sample_logs" / "hma_disabled_swa.log"  # KVD001/KVD012/KVD013 warnings, KVD002/KVD005 info


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """cwd/ with its own config, logs/ (a log and a config next to it), other/ (a log, no config)."""
    for d in ("cwd", "logs", "other"):
        (tmp_path / d).mkdir()
    shutil.copy(LOG, tmp_path / "logs" / "server.log")
    shutil.copy(LOG, tmp_path / "other" / "server.log")
    (tmp_path / "cwd" / "kvlogdiag.toml").write_text('min-severity = "warning"\n')
    (tmp_path / "logs" / "kvlogdiag.toml").write_text('# next to the logs\nfail-on = "warning"\nignore = ["KVD012"]\n')
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def settings(*args) -> dict[str, tuple[str, str]]:
    res = run("analyze", "--show-settings", *args)
    assert res.exit_code == 0, res.stderr
    rows = {}
    for line in res.stdout.splitlines()[2:]:
        if not line.strip() or line.startswith("rules selected"):
            continue
        parts = re.split(r"\s{2,}", line.strip())
        rows[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return rows


def test_the_config_next_to_the_log_wins_over_the_working_directory(tree):
    s = settings(tree / "logs" / "server.log")
    assert s["config file"][0].startswith(str(tree / "logs" / "kvlogdiag.toml"))
    assert "first input" in s["config file"][0]
    assert s["fail-on"] == ("warning", f"{tree / 'logs' / 'kvlogdiag.toml'}:2")
    assert s["ignore"] == ("KVD012", f"{tree / 'logs' / 'kvlogdiag.toml'}:3")
    assert s["min-severity"] == ("info", "default")  # the cwd file is not merged in
    res = run("analyze", "--format", "json", tree / "logs" / "server.log")
    assert res.exit_code == 1  # fail-on warning from logs/kvlogdiag.toml
    assert "KVD012" not in res.stdout


def test_a_log_without_a_config_above_it_uses_the_working_directory(tree):
    s = settings(tree / "other" / "server.log")
    assert "working directory" in s["config file"][0]
    assert s["min-severity"] == ("warning", f"{tree / 'cwd' / 'kvlogdiag.toml'}:1")
    assert settings()["min-severity"][0] == "warning"  # stdin: the working directory


def test_a_folder_or_glob_argument_is_looked_up_from_itself(tree):
    for arg in (tree / "logs", f"{tree / 'logs'}/*.log"):
        res = run("scan", "--show-settings", arg)
        assert res.exit_code == 0 and "logs/kvlogdiag.toml" in res.stdout, res.stdout


def test_flags_win_and_say_so(tree):
    s = settings("--fail-on", "never", "--extend-ignore", "KVD013", tree / "logs" / "server.log")
    assert s["fail-on"] == ("never", "--fail-on")
    assert s["ignore"][0] == "KVD012, KVD013" and s["ignore"][1].endswith("kvlogdiag.toml:3 + --extend-ignore")


def test_isolated_reads_no_file(tree):
    s = settings("--isolated", tree / "logs" / "server.log")
    assert s["config file"][0] == "none (--isolated)"
    assert s["fail-on"] == ("error", "default") and s["min-severity"] == ("info", "default")
    assert run("analyze", "--isolated", "--format", "json", tree / "logs" / "server.log").exit_code == 0
    both = run("analyze", "--isolated", "--config", tree / "logs" / "kvlogdiag.toml", LOG)
    assert both.exit_code == 2 and "exclude each other" in both.stderr


def test_config_flag_names_the_file(tree):
    s = settings("--config", tree / "cwd" / "kvlogdiag.toml", tree / "logs" / "server.log")
    assert s["config file"][0] == f"{tree / 'cwd' / 'kvlogdiag.toml'} (--config)"
    assert s["fail-on"] == ("error", "default")


def test_params_show_their_line(tree):
    (tree / "logs" / "kvlogdiag.toml").write_text('fail-on = "warning"\n\n[params.KVD013]\nhigh_pct = 95\n')
    s = settings(tree / "logs" / "server.log")
    assert s["params.KVD013.high_pct"] == ("95", f"{tree / 'logs' / 'kvlogdiag.toml'}:4")


def test_inputs_below_different_configs_are_named(tree):
    (tree / "other" / "kvlogdiag.toml").write_text('fail-on = "info"\n')
    res = run("analyze", "--format", "json", tree / "logs" / "server.log", tree / "other" / "server.log")
    assert res.exit_code == 1
    warn = [ln for ln in res.stderr.splitlines() if ln.startswith("kvlogdiag: warning:")]
    assert len(warn) == 1 and "other" in warn[0] and "not used" in warn[0]


def test_show_settings_reads_no_log(tree):
    res = run("analyze", "--show-settings", tree / "no-such.log")
    assert res.exit_code == 0 and "rules selected: 18 of 19" not in res.stdout and "rules selected: 19 of 19" in res.stdout


def test_load_settings_reports_sources_for_every_file_key(tree):
    cfg = tree / "all.toml"
    cfg.write_text('select = ["KVD0"]\nextend-select = []\nignore = ["KVD012"]\nextend-ignore = []\nfail-on = "warning"\n'
                   'min-severity = "info"\nrules = []\nrole = "mixed"\np99-len = 1000\navg-prompt-len = 100\n'
                   'strict-rules = true\n[params.KVD013]\nhigh_pct = 95\n')
    sources: dict[str, str] = {}
    load_settings(str(cfg), sources=sources)
    for key in ("select", "ignore", "fail-on", "min-severity", "rules", "role", "p99-len", "avg-prompt-len", "strict-rules"):
        assert sources[key].startswith(f"{cfg}:"), key
    assert sources["params.KVD013.high_pct"] == f"{cfg}:13"


def doc_keys() -> dict[str, str]:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = text.split("## Keys", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\| `([a-z0-9-]+)` \| ([^|]+) \| ([^|]+) \|", line)
        if m:
            rows[m.group(1)] = m.group(3).strip()
    return rows


def test_docs_list_every_config_key_with_its_default():
    rows = doc_keys()
    assert set(rows) == set(KEYS), f"docs/configuration.md and config.py differ: {set(rows) ^ set(KEYS)}"
    assert all(rows.values())
    defaults = {f.name: f.default for f in fields(Options)}
    assert rows["fail-on"] == f'`"{defaults["fail_on"]}"`'
    assert rows["min-severity"] == f'`"{defaults["min_severity"]}"`'
    assert rows["strict-rules"] == f"`{str(defaults['strict_rules']).lower()}`"
    assert str(DEFAULT_P99_LEN) in rows["p99-len"]
