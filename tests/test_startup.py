"""Start-up of a small ``analyze`` (issue 17 item 2): lazy commands, no heavy module on the path, the
parsed-TOML cache. What is imported and what is cached is checked here; CPU time is measured in bench/."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys

import pytest
from conftest import SAMPLE_LOGS_DIR

from kvlogdiag import tomlcache
from kvlogdiag.rules.engine import builtin_rule_files, load_rules

SMALL = str(SAMPLE_LOGS_DIR / "v1_single_gpu.log")


def _modules_after(args: list[str]) -> set[str]:
    code = ("import sys\nfrom kvlogdiag.cli.main import cli\n"
            f"rc = cli.run({args!r})\n"
            "sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules)) + '\\n')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("MODULES ")]
    assert line, r.stderr
    return set(line[-1].split()[1:])


def test_small_json_analyze_loads_no_heavy_module_and_no_other_command():
    mods = _modules_after(["analyze", "--format", "json", SMALL])
    assert "kvlogdiag.cli.analyze" in mods and "kvlogdiag.pipeline" in mods
    for heavy in ("pandas", "numpy", "rich", "tabulate", "pyarrow", "fsspec", "distributed"):
        assert heavy not in mods, heavy
    for other in ("watch", "scan", "report", "estimate", "deployment", "rules"):
        assert f"kvlogdiag.cli.{other}" not in mods, other
        assert f"kvlogdiag.modes.{other}" not in mods, other


def test_text_analyze_loads_tabulate_only_for_its_tables():
    mods = _modules_after(["analyze", SMALL])
    assert "tabulate" in mods and "pandas" not in mods and "rich" not in mods and "kvlogdiag.cli.scan" not in mods


def test_help_lists_every_command_and_each_still_runs():
    from click.testing import CliRunner

    from kvlogdiag.cli.main import cli

    names = {"analyze", "watch", "scan", "report", "estimate", "rules", "explain", "patterns", "deployment"}
    assert names <= set(cli.commands)
    out = CliRunner().invoke(cli, ["--help"]).output
    listed = {ln.split()[0] for ln in out.split("Commands:")[1].splitlines() if ln.strip()}
    assert names <= listed
    assert CliRunner().invoke(cli, ["explain", "KVD002"]).exit_code == 0


def test_lazy_command_registration_and_old_public_names():
    import click

    import kvlogdiag.cli.main as m
    from kvlogdiag.cli.rules import rules_markdown

    assert m.rules_markdown is rules_markdown and callable(m.rule_text)
    with pytest.raises(AttributeError):
        m.no_such_name  # noqa: B018
    m.cli.lazy_command("zz-probe", "kvlogdiag.cli.rules:explain")
    try:
        assert "zz-probe" in m.cli.commands and isinstance(m.cli.commands["zz-probe"], click.Command)
    finally:
        del m.cli.commands["zz-probe"]
    assert "zz-probe" not in m.cli.commands


def _fresh_cache(monkeypatch, where) -> None:
    monkeypatch.setenv("KVLOGDIAG_CACHE_DIR", str(where))
    monkeypatch.setattr(tomlcache, "_disk", None)
    monkeypatch.setattr(tomlcache, "_used", {})
    monkeypatch.setattr(tomlcache, "_dirty", False)


def _cache_entries(path) -> dict:
    doc = marshal.loads(path.read_bytes())
    assert doc["tag"] == tomlcache.TAG
    return doc["entries"]


def test_toml_cache_gives_what_tomllib_gives(tmp_path, monkeypatch):
    _fresh_cache(monkeypatch, tmp_path / "c")
    first = load_rules()
    cache_file = tmp_path / "c" / tomlcache.FILE_NAME
    data = _cache_entries(cache_file)
    assert len(data) == 2 * len(builtin_rule_files())  # each file's TOML, and its parsed conditions (rules/condcache.py)
    _fresh_cache(monkeypatch, tmp_path / "c")
    calls = []
    real = tomlcache.tomllib.loads
    monkeypatch.setattr(tomlcache.tomllib, "loads", lambda text: calls.append(1) or real(text))
    second = load_rules()
    assert calls == []  # every rule came from the cache
    assert [(r.code, r.severity, r.summary, r.params, [n for n, _ in r.lets]) for r in first.rules] == \
        [(r.code, r.severity, r.summary, r.params, [n for n, _ in r.lets]) for r in second.rules]
    for _name, content in builtin_rule_files():
        text = content.decode()
        assert tomlcache.loads(text) == real(text)
        assert list(tomlcache.loads(text)) == list(real(text))  # key order too ([let] is sequential)


def test_toml_cache_edited_text_is_a_new_entry_and_a_corrupt_file_is_ignored(tmp_path, monkeypatch):
    _fresh_cache(monkeypatch, tmp_path / "c")
    assert tomlcache.loads('a = 1\n', remember=True) == {"a": 1}
    tomlcache.flush()
    assert tomlcache.loads('a = 2\n', remember=True) == {"a": 2}
    (tmp_path / "c" / tomlcache.FILE_NAME).write_text("{not json")
    _fresh_cache(monkeypatch, tmp_path / "c")
    assert tomlcache.loads('a = 1\n', remember=True) == {"a": 1}
    tomlcache.flush()
    assert _cache_entries(tmp_path / "c" / tomlcache.FILE_NAME)  # rewritten whole
    d = 'd = 1979-05-27\n'  # a TOML date does not survive JSON: parsed every time, never cached
    assert str(tomlcache.loads(d, remember=True)["d"]) == "1979-05-27"


def test_toml_cache_is_marshal_read_only_from_a_regular_file_of_this_user(tmp_path, monkeypatch):
    """toml-cache-v2.marshal (docs/performance.md, "Session 9: small-analyze start-up"): what a start reads is checked
    before ``marshal`` sees it; a file of the old JSON format, a truncated, foreign or planted one is a miss."""
    _fresh_cache(monkeypatch, tmp_path / "c")
    assert tomlcache.loads('a = 1\n', remember=True) == {"a": 1}
    tomlcache.flush()
    target = tmp_path / "c" / tomlcache.FILE_NAME
    good = target.read_bytes()
    assert tomlcache.FILE_NAME.endswith(".marshal") and len(_cache_entries(target)) == 1

    def hit() -> bool:
        _fresh_cache(monkeypatch, tmp_path / "c")
        calls = []
        real = tomlcache.tomllib.loads
        monkeypatch.setattr(tomlcache.tomllib, "loads", lambda text: calls.append(1) or real(text))
        assert tomlcache.loads('a = 1\n') == {"a": 1}
        monkeypatch.setattr(tomlcache.tomllib, "loads", real)
        return not calls

    assert hit()
    for bad in (good[: len(good) // 2], b"", json.dumps({k: v for k, v in _cache_entries(target).items()}).encode(),
                marshal.dumps({"tag": "other", "entries": _cache_entries(target)}),
                marshal.dumps({"tag": tomlcache.TAG, "entries": {1: 2}}), marshal.dumps([1, 2, 3])):
        target.write_bytes(bad)
        assert not hit(), bad[:40]
    target.write_bytes(good)
    uid = os.geteuid()
    monkeypatch.setattr(tomlcache.os, "geteuid", lambda: uid + 1)  # the file is another owner's now
    assert not hit()
    monkeypatch.setattr(tomlcache.os, "geteuid", lambda: uid)
    assert hit()
    target.unlink()
    os.mkfifo(target)  # a FIFO there: never read, never blocks
    assert not hit()
    target.unlink()
    (tmp_path / "c" / "toml-cache-v1.json").write_text(json.dumps({"x": "{}"}))  # the old file: not read, not needed
    assert not hit()
    assert tomlcache.loads('a = 1\n', remember=True) == {"a": 1}
    tomlcache.flush()
    assert _cache_entries(target) and hit()  # written again in the new format


def test_toml_cache_off_writes_nothing(tmp_path, monkeypatch):
    _fresh_cache(monkeypatch, "off")
    load_rules()
    assert tomlcache.cache_dir() is None
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    r = subprocess.run([sys.executable, "-m", "kvlogdiag", "analyze", "--format", "json", SMALL], capture_output=True,
                       env=dict(os.environ, KVLOGDIAG_CACHE_DIR="off"), timeout=120)
    assert r.returncode in (0, 1)
    assert not (tmp_path / ".cache").exists()
