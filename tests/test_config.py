"""Configuration and rule-file validation: typos are usage errors (exit 2) that name the place and suggest a fix.

Covers ``kvlogdiag.toml`` / ``[tool.kvlogdiag]`` (select, ignore, extend-select, extend-ignore,
``[params.CODE]`` names and types), how config and flags merge (ruff's rules: ``select`` replaces the
default set, ``extend-select`` adds to it; a flag replaces the same key of the file), and the keys of
a rule file's ``[[samples]]``.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import cli
from kvlogdiag.config import ConfigError, load_options
from kvlogdiag.rules.engine import RuleLoadError, load_rule, load_rules

LOG = (
    "(APIServer pid=7) INFO 07-03 14:17:08 [utils.py:328] non-default args: {'model_tag': 'Qwen/Qwen3-32B', "
    "'tensor_parallel_size': 4, 'gpu_memory_utilization': 0.995}\n"
    "(Worker_TP0 pid=9) INFO 07-03 14:19:40 [gpu_worker.py:276] Available KV cache memory: 20.0 GiB\n"
    "(EngineCore_DP0 pid=8) INFO 07-03 14:19:41 [kv_cache_utils.py:864] GPU KV cache size: 327,680 tokens\n"
)


def analyze(tmp_path, config_text: str | None, *flags: str, name: str = "kvlogdiag.toml"):
    log = tmp_path / "x.log"
    log.write_text(LOG, encoding="utf-8")
    args = ["analyze", "--format", "json", *flags, str(log)]
    if config_text is not None:
        cfg = tmp_path / name
        cfg.write_text(config_text, encoding="utf-8")
        args[1:1] = ["--config", str(cfg)]
    return CliRunner().invoke(cli, args)


def one_error_line(r) -> str:
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert r.stdout == ""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


def rules_fired(r) -> list[str]:
    return sorted({f["rule"] for a in json.loads(r.stdout)["analyses"] for f in a["findings"]})


# --- select / ignore in the file ---------------------------------------------------------------


@pytest.mark.parametrize("key", ["select", "ignore", "extend-select", "extend-ignore"])
def test_unknown_code_in_config_names_file_line_and_suggests(tmp_path, key):
    line = one_error_line(analyze(tmp_path, f'fail-on = "never"\n{key} = ["KVD004", "KVD099"]\n'))
    assert f"{tmp_path / 'kvlogdiag.toml'}:2:" in line
    assert "KVD099" in line and "did you mean" in line and "KVD009" in line


def test_unknown_name_in_pyproject_names_the_file(tmp_path):
    text = '[project]\nname = "x"\n\n[tool.kvlogdiag]\nignore = ["gpu-memory-utilisation-high"]\n'
    line = one_error_line(analyze(tmp_path, text, name="pyproject.toml"))
    assert f"{tmp_path / 'pyproject.toml'}:5:" in line
    assert "did you mean 'gpu-memory-utilization-high'" in line


def test_valid_prefixes_in_config_are_accepted(tmp_path):
    r = analyze(tmp_path, 'select = ["KVD0"]\nignore = ["KVD01"]\n')
    assert r.exit_code == 1 and rules_fired(r) == ["KVD004"]


# --- [params.CODE] ----------------------------------------------------------------------------


def test_params_for_unknown_rule(tmp_path):
    line = one_error_line(analyze(tmp_path, '[params.KVD999]\nwarn_at = 0.5\n'))
    assert f"{tmp_path / 'kvlogdiag.toml'}:1:" in line
    assert "KVD999" in line and "did you mean" in line


def test_params_unknown_name_suggests_the_right_one(tmp_path):
    line = one_error_line(analyze(tmp_path, 'fail-on = "never"\n\n[params.KVD004]\nwarnat = 0.5\n'))
    assert f"{tmp_path / 'kvlogdiag.toml'}:4:" in line
    assert "warnat" in line and "did you mean 'warn_at'" in line


@pytest.mark.parametrize("value", ['"high"', "true", "[0.5]"])
def test_params_of_wrong_type(tmp_path, value):
    line = one_error_line(analyze(tmp_path, f'[params.KVD004]\nwarn_at = {value}\n'))
    assert f"{tmp_path / 'kvlogdiag.toml'}:2:" in line
    assert "warn_at" in line and "number" in line


def test_params_int_for_a_float_default_is_fine(tmp_path):
    # KVD004's thresholds are floats: an integer is a number too (and every threshold at 1 keeps 0.995 quiet)
    floats = [k for k, v in load_rules().by_code()["KVD004"].params.items() if isinstance(v, float)]
    assert floats
    r = analyze(tmp_path, "[params.KVD004]\n" + "".join(f"{k} = 1\n" for k in floats))
    assert r.exit_code == 0, r.stderr
    assert "KVD004" not in rules_fired(r)


def test_params_code_is_case_insensitive_like_select(tmp_path):
    r = analyze(tmp_path, '[params.kvd004]\nerror_at = 0.999\n')
    assert r.exit_code != 2, r.stderr


def _bool_param_rule(tmp_path):
    d = tmp_path / "myrules"
    d.mkdir()
    (d / "ACME001-flag.toml").write_text(
        'code = "ACME001"\nname = "flag"\nsummary = "s"\nwhy = "w"\nfix = "f"\n'
        'condition = "params.on"\nmessage = "m {params.label}"\n[params]\non = false\nlabel = "x"\n')
    return str(d)


def test_params_bool_is_strict_and_str_is_str(tmp_path):
    d = _bool_param_rule(tmp_path)
    line = one_error_line(analyze(tmp_path, '[params.ACME001]\non = 1\n', "--rules", d))
    assert "'on'" in line and "true or false" in line
    line = one_error_line(analyze(tmp_path, '[params.ACME001]\nlabel = 3\n', "--rules", d))
    assert "'label'" in line and "string" in line
    r = analyze(tmp_path, '[params.ACME001]\non = true\nlabel = "y"\n', "--rules", d, "--select", "ACME")
    assert r.exit_code == 0 and rules_fired(r) == ["ACME001"]


def test_params_of_a_rule_from_a_config_rules_folder(tmp_path):
    d = _bool_param_rule(tmp_path)
    r = analyze(tmp_path, f'rules = ["{d}"]\nselect = ["ACME001"]\n[params.ACME001]\non = true\n')
    assert r.exit_code == 0 and rules_fired(r) == ["ACME001"], r.stderr


# --- merging file and flags (ruff's rules) -----------------------------------------------------


def _selected(tmp_path, config_text: str | None, **flags) -> list[str]:
    explicit = None
    if config_text is not None:
        cfg = tmp_path / "kvlogdiag.toml"
        cfg.write_text(config_text, encoding="utf-8")
        explicit = str(cfg)
    opts = load_options(explicit, **flags)
    return [r.code for r in load_rules(opts.rule_dirs).selected(opts.select, opts.ignore).rules]


def test_extend_select_adds_to_select(tmp_path):
    assert _selected(tmp_path, 'select = ["KVD004"]\nextend-select = ["KVD013"]\n') == ["KVD004", "KVD013"]


def test_extend_select_alone_keeps_the_default_set(tmp_path):
    assert len(_selected(tmp_path, 'extend-select = ["KVD013"]\n')) == len(load_rules().rules)


def test_cli_select_replaces_config_select_and_its_extension(tmp_path):
    cfg = 'select = ["KVD004"]\nextend-select = ["KVD013"]\n'
    assert _selected(tmp_path, cfg, select=("KVD012",)) == ["KVD012"]
    assert _selected(tmp_path, cfg, extend_select=("KVD012",)) == ["KVD004", "KVD012", "KVD013"]


def test_ignore_and_extend_ignore(tmp_path):
    cfg = 'select = ["KVD01"]\nignore = ["KVD010"]\nextend-ignore = ["KVD011"]\n'
    base = [r.code for r in load_rules().rules if r.code.startswith("KVD01") and r.code not in ("KVD010", "KVD011")]
    assert base[:2] == ["KVD012", "KVD013"]
    assert _selected(tmp_path, cfg) == base
    # --ignore replaces the file's ignore (and its extension); --extend-ignore adds
    assert _selected(tmp_path, cfg, ignore=(base[-1],)) == ["KVD010", "KVD011"] + base[:-1]
    assert _selected(tmp_path, cfg, extend_ignore=("KVD012",)) == base[1:]


def test_cli_extend_flags(tmp_path):
    r = analyze(tmp_path, None, "--select", "KVD013", "--extend-select", "KVD004")
    assert r.exit_code == 1 and rules_fired(r) == ["KVD004"]
    r = analyze(tmp_path, 'ignore = ["KVD013"]\n', "--extend-ignore", "KVD004")
    assert r.exit_code == 0 and rules_fired(r) == []
    line = one_error_line(analyze(tmp_path, None, "--extend-ignore", "KVD4"))
    assert line.startswith("kvlogdiag: error: --extend-ignore:") and "did you mean" in line


def test_load_options_raises_config_error_with_place(tmp_path):
    cfg = tmp_path / "kvlogdiag.toml"
    cfg.write_text('select = ["KVD04"]\n')
    with pytest.raises(ConfigError, match=r"kvlogdiag.toml:1: .*KVD04"):
        load_options(str(cfg))


# --- rule files: [[samples]] keys --------------------------------------------------------------

RULE = ('code = "ACME001"\nname = "x"\nsummary = "s"\nwhy = "w"\nfix = "f"\ncondition = "true"\nmessage = "m"\n'
        '[[samples]]\nfires = true\nlog = "a"\n')


def test_sample_keys_used_today_load():
    rule = load_rule("ACME001-x.toml", RULE + 'severity = "warning"\nline = 1\nmessage_contains = ["m"]\n'
                     'options = { p99_len = 1024 }\nallow_unknown = true\n')
    assert rule.samples[0]["line"] == 1


@pytest.mark.parametrize("extra,word", [
    ('fire = true\n', "fire"),
    ('message_contain = ["m"]\n', "message_contain"),
    ('severity = "fatal"\n', "severity"),
    ('message_contains = "m"\n', "message_contains"),
    ('line = "1"\n', "line"),
    ('options = { p99 = 1 }\n', "p99"),
])
def test_bad_sample_key_is_a_load_error_naming_file_and_key(extra, word):
    with pytest.raises(RuleLoadError) as exc:
        load_rule("ACME001-x.toml", RULE + extra)
    msg = str(exc.value)
    assert msg.startswith("ACME001-x.toml: ACME001:") and word in msg and "samples[0]" in msg


def test_every_builtin_sample_uses_known_keys():
    # load_rules validates the samples: the shipped rule files must all pass
    assert sum(len(r.samples) for r in load_rules().rules) > 50


def _both_lookups(monkeypatch, inputs):
    """find_config_for through its quick no-config check, and through the pathlib search alone."""
    from kvlogdiag import config

    def outcome():
        try:
            found, how, notes = config.find_config_for(inputs)
        except ConfigError as exc:
            return "ConfigError", str(exc)
        return (str(found[0]), found[1]) if found else None, how, notes

    quick = outcome()
    with monkeypatch.context() as m:
        m.setattr(config, "_surely_none", lambda inputs: False)
        full = outcome()
    return quick, full


@pytest.mark.parametrize("layout", ["none", "kvlogdiag", "pyproject-other", "pyproject-tool", "pyproject-bad", "inner"])
def test_the_quick_no_config_check_finds_what_the_pathlib_search_finds(tmp_path, monkeypatch, layout):
    root = tmp_path / "proj"
    (root / "logs" / "sub").mkdir(parents=True)
    (root / "logs" / "a.log").write_text("x\n")
    (root / "logs" / "sub" / "b.log").write_text("x\n")
    files = {"kvlogdiag": ("kvlogdiag.toml", 'fail-on = "info"\n'),
             "pyproject-other": ("pyproject.toml", '[project]\nname = "x"\n'),
             "pyproject-tool": ("pyproject.toml", '[tool.kvlogdiag]\nfail-on = "info"\n'),
             "pyproject-bad": ("pyproject.toml", "[tool.kvlogdiag\n"),
             "inner": ("logs/sub/kvlogdiag.toml", 'min-severity = "warning"\n')}
    if layout in files:
        name, text = files[layout]
        (root / name).write_text(text)
    monkeypatch.chdir(root / "logs")
    cases = [[], ["-"], ["a.log"], ["sub/b.log"], ["sub"], [str(root / "logs" / "a.log")], ["missing.log"],
             ["sub/missing/x.log"], ["../logs/a.log"], ["./a.log"], ["sub//b.log"], ["sub/"], ["*.log"], ["a.log", "sub/b.log"]]
    for inputs in cases:
        quick, full = _both_lookups(monkeypatch, inputs)
        assert quick == full, (layout, inputs)
    from kvlogdiag import config

    if layout in ("none", "pyproject-other"):  # the quick check itself answers (no pathlib needed)
        assert config._surely_none(("a.log",)) and config._surely_none(()) and config._surely_none(("sub",))
    else:
        assert not config._surely_none(("sub/b.log",))
