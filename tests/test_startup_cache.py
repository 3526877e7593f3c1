"""Start-up caches of session 6: parsed rule conditions kept with the parsed rule files
(`kvlogdiag.rules.condcache`), and the quick exit of ``analyze`` (`kvlogdiag.cli.fastexit`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvlogdiag import tomlcache
from kvlogdiag.rules import condcache, condition, engine, setcache
from kvlogdiag.rules.engine import FUNCTIONS, NAMES, builtin_rule_files, load_rules


def _fresh_cache(monkeypatch, where) -> None:
    monkeypatch.setenv("KVLOGDIAG_CACHE_DIR", str(where))
    monkeypatch.setattr(tomlcache, "_disk", None)
    monkeypatch.setattr(tomlcache, "_used", {})
    monkeypatch.setattr(tomlcache, "_dirty", False)
    monkeypatch.setattr(setcache, "get", lambda key: None)  # these tests are about what a rule-set cache miss does


def _conditions(ruleset) -> list:
    out = []
    for r in ruleset.rules:
        out += [c for _, c in r.lets] + [c.when for c in r.checks]
        for c in r.checks:
            if c.suggest is not None:
                out += [v for v in vars(c.suggest).values() if isinstance(v, condition.Condition)]
    return out


def test_second_load_parses_no_condition_and_gives_the_same_trees(tmp_path, monkeypatch):
    _fresh_cache(monkeypatch, tmp_path / "c")
    first = load_rules()
    _fresh_cache(monkeypatch, tmp_path / "c")
    parsed = []
    real = condition.parse
    monkeypatch.setattr(condcache._c, "parse", lambda *a: parsed.append(a[0]) or real(*a))
    second = load_rules()
    assert parsed == []  # every condition came from the cache
    a, b = _conditions(first), _conditions(second)
    assert len(a) == len(b) > 200
    for x, y in zip(a, b):
        assert (x.source, x.tree, x.names, x.functions) == (y.source, y.tree, y.names, y.functions)
        # what the cached properties would compute from the restored tree
        fresh = condition.Condition(y.source, y.tree)
        assert (fresh.names, fresh.functions) == (y.names, y.functions)


def test_every_builtin_condition_round_trips_through_json():
    for r in load_rules().rules:
        for c in [c for _, c in r.lets] + [c.when for c in r.checks]:
            data = json.loads(json.dumps(condcache.encode(c.tree)))
            back = condcache.restore(c.source, data, set(NAMES) | set(c.names), FUNCTIONS)
            assert back is not None and back.tree == c.tree, (r.code, c.source)
            assert type(back.tree) is type(c.tree)
            for n1, n2 in zip(condition._walk(back.tree), condition._walk(c.tree)):
                if isinstance(n1, condition.Literal):  # 1 stays int, 1.0 float, True bool
                    assert type(n1.value) is type(n2.value)


def test_a_stored_tree_is_not_used_when_its_names_or_functions_no_longer_hold():
    known = {"a", "b"}
    c = condition.parse("a + b > 1 and max(a, b) < 3", known, FUNCTIONS)
    data = condcache.encode(c.tree)
    assert condcache.restore(c.source, data, known, FUNCTIONS).tree == c.tree
    assert condcache.restore(c.source, data, {"a"}, FUNCTIONS) is None  # b is no longer a name
    assert condcache.restore(c.source, data, lambda n: n == "a", FUNCTIONS) is None
    assert condcache.restore(c.source, data, known, {k: v for k, v in FUNCTIONS.items() if k != "max"}) is None
    tight = dict(FUNCTIONS, max=condition.FunctionSpec(1, 1))
    assert condcache.restore(c.source, data, known, tight) is None  # max now takes one argument
    for junk in (["z", 1], ["l"], ["l", {"x": 1}, 0], ["b", "+", ["n", "a", 0]], "x", None, 5):
        assert condcache.restore("a", junk, known, FUNCTIONS) is None


def test_corrupt_stored_trees_fall_back_to_the_parser_and_its_errors(tmp_path, monkeypatch):
    _fresh_cache(monkeypatch, tmp_path / "c")
    name, content = builtin_rule_files()[0]
    good = engine.load_rule(name, content, True, cache=True)
    tomlcache.flush()
    text = content.decode()
    key = f"{condcache._parser_key()}\0{text}"
    stored = tomlcache.get_json(key)
    assert stored and all(isinstance(k, str) for k in stored)
    tomlcache.put_json(key, {k: ["n", "no_such_name", 0] for k in stored})  # a tree the checks refuse
    again = engine.load_rule(name, content, True, cache=True)
    assert [c.when.tree for c in again.checks] == [c.when.tree for c in good.checks]
    tomlcache.put_json(key, ["not", "a", "table"])
    again = engine.load_rule(name, content, True, cache=True)
    assert [c.when.tree for c in again.checks] == [c.when.tree for c in good.checks]
    src = good.checks[0].when.source.encode()
    bad = content.replace(src, b"unknown_thing and " + src, 1)
    assert bad != content
    with pytest.raises(engine.RuleLoadError, match="unknown name 'unknown_thing'"):  # an edited file: parsed again
        engine.load_rule(name, bad, True, cache=True)


def test_an_edited_parser_is_a_new_key(tmp_path, monkeypatch):
    key = condcache._parser_key()
    real = condcache.os.stat

    class St:
        st_size, st_mtime_ns = 1, 2

    monkeypatch.setattr(condcache.os, "stat", lambda p: St() if p == condition.__file__ else real(p))
    assert condcache._parser_key() != key


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_quick_exit_flushes_and_runs_exit_handlers():
    r = _run("import atexit, sys\nfrom kvlogdiag.cli import fastexit\nfastexit.console()\nfastexit.allow()\n"
             "atexit.register(lambda: print('handler'))\nprint('out', end='')\n"
             "sys.stderr.write('err')\nfastexit.exit_now(4)\nprint('not reached')\nsys.exit(9)\n")
    assert (r.returncode, r.stdout, r.stderr) == (4, "outhandler\n", "err")


def test_quick_exit_only_when_allowed_and_no_other_thread_runs():
    # not allowed: it returns, and the ordinary exit runs an object's finaliser as before
    fin = "import sys\nclass F:\n    def __del__(self): print('finalised')\nf = F()\nfrom kvlogdiag.cli import fastexit\n"
    r = _run(fin + "fastexit.exit_now(3)\nprint('returned')\nsys.exit(3)\n")
    assert (r.returncode, r.stdout) == (3, "returned\nfinalised\n")
    r = _run(fin + "fastexit.console()\nfastexit.allow()\nfastexit.exit_now(3)\nprint('not reached')\n")
    assert (r.returncode, r.stdout) == (3, "")
    r = _run(fin + "fastexit.allow()\nfastexit.exit_now(3)\nprint('in-process')\nsys.exit(3)\n")  # not the console script
    assert (r.returncode, r.stdout) == (3, "in-process\nfinalised\n")
    # a non-daemon thread still running: it returns, and the ordinary exit waits for the thread
    r = _run("import sys, threading, time\nfrom kvlogdiag.cli import fastexit\nfastexit.console()\nfastexit.allow()\n"
             "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done'))).start()\n"
             "fastexit.exit_now(5)\nsys.exit(5)\n")
    assert (r.returncode, r.stdout) == (5, "thread done\n")


def test_analyze_ends_quickly_and_other_commands_do_not(tmp_path):
    import os

    from conftest import SAMPLE_LOGS_DIR

    log = str(SAMPLE_LOGS_DIR / "v1_single_gpu.log")
    probe = ("import os, sys\nfrom kvlogdiag.cli import fastexit\nreal = os._exit\n"
             "def spy(code):\n    sys.stderr.write('QUICK %d\\n' % code); sys.stderr.flush(); real(code)\n"
             "os._exit = spy\nsys.argv = ['kvlogdiag'] + sys.argv[1:]\nfrom kvlogdiag.cli.main import main\nmain()\n")
    env = dict(os.environ, KVLOGDIAG_CACHE_DIR=str(tmp_path / "c"))
    a = subprocess.run([sys.executable, "-c", probe, "analyze", "--format", "json", log], capture_output=True, text=True,
                       timeout=120, env=env)
    assert a.returncode in (0, 1) and json.loads(a.stdout) and f"QUICK {a.returncode}" in a.stderr
    e = subprocess.run([sys.executable, "-c", probe, "explain", "KVD002"], capture_output=True, text=True, timeout=120, env=env)
    assert e.returncode == 0 and "KVD002" in e.stdout and "QUICK" not in e.stderr


def test_the_group_by_choices_of_the_light_option_module_are_the_deployment_ones():
    from kvlogdiag.cli.deployment_options import GROUP_BY
    from kvlogdiag.deployment_result import GROUP_BY as REAL

    assert GROUP_BY == REAL


def test_no_time_window_option_imports_no_time_parsing():
    from kvlogdiag.cli.timewindow import window_from_options
    from kvlogdiag.input.timestamps import parse_tz

    assert window_from_options(None, None, None) is None and parse_tz(None) is None  # the same answer either way
    assert window_from_options(None, None, "UTC") is None
    with pytest.raises(Exception, match="log-tz"):
        window_from_options(None, None, "+15:00")


def test_analyze_under_cli_runner_never_ends_the_process():
    from click.testing import CliRunner
    from conftest import SAMPLE_LOGS_DIR

    from kvlogdiag.cli.main import cli

    r = CliRunner().invoke(cli, ["analyze", "--format", "json", str(SAMPLE_LOGS_DIR / "v1_single_gpu.log")])
    assert r.exit_code in (0, 1) and json.loads(r.output)  # still here: no os._exit outside the console script
