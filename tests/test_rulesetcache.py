"""The loaded rule set cached as one pickle by content hash (`kvlogdiag.rules.setcache`): a hit gives the
same rules without loading a file; a corrupt, planted, foreign or stale file is ignored and rebuilt; edited
rule files, user rule folders, another version and another loader are other keys."""

from __future__ import annotations

import os
import pickle
import shutil

import pytest

import kvlogdiag
from kvlogdiag import pkgdata, tomlcache
from kvlogdiag.rules import engine, setcache
from kvlogdiag.rules.engine import RuleLoadError, load_rules

SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_logs")
USER_RULE = pkgdata.read_text("rules", "builtin", "KVD012-preemptions.toml").replace(
    'code = "KVD012"', 'code = "USR012"', 1)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    where = tmp_path / "cache"
    monkeypatch.setenv("KVLOGDIAG_CACHE_DIR", str(where))
    monkeypatch.setattr(tomlcache, "_disk", None)
    monkeypatch.setattr(tomlcache, "_used", {})
    monkeypatch.setattr(tomlcache, "_dirty", False)
    return where


@pytest.fixture
def loads(monkeypatch):
    """The rule files loaded one by one (a set-cache miss) are recorded here."""
    seen: list[str] = []
    real = engine.load_rule
    monkeypatch.setattr(engine, "load_rule", lambda path, *a, **k: seen.append(path) or real(path, *a, **k))
    return seen


def _files(where) -> list[str]:
    return sorted(p.name for p in where.iterdir() if p.name.startswith(setcache.PREFIX))


def _user_dir(tmp_path, text=USER_RULE, name="USR012-preemptions.toml"):
    d = tmp_path / "user"
    d.mkdir(exist_ok=True)
    (d / name).write_text(text)
    return d


def _same(a, b) -> None:
    assert a == b
    assert [r.names_used for r in a.rules] == [r.names_used for r in b.rules]
    assert a.line_patterns == b.line_patterns
    for x, y in zip(a.rules, b.rules):
        for cx, cy in zip([c for _, c in x.lets] + [c.when for c in x.checks],
                          [c for _, c in y.lets] + [c.when for c in y.checks]):
            assert (cx.source, cx.tree, cx.names, cx.functions) == (cy.source, cy.tree, cy.names, cy.functions)
            assert cx.null_guards == cy.null_guards and cx.check_guards == cy.check_guards


def test_a_second_load_reads_no_rule_file_and_gives_equal_rules(cache, loads):
    first = load_rules()
    assert len(loads) == 19 and len(_files(cache)) == 1
    loads.clear()
    second = load_rules()
    assert loads == []
    _same(first, second)
    assert second is not first and second.rules[0] is not first.rules[0]  # a fresh object each call
    second.rules[0].params["x"] = 1  # a caller changing its copy changes no later load
    assert "x" not in load_rules().rules[0].params


def test_the_cached_rules_evaluate_like_freshly_loaded_ones(cache):
    from kvlogdiag.pipeline import Analyzer

    logs = sorted(p for p in os.listdir(SAMPLES) if p.endswith(".log"))
    assert len(logs) > 5
    fresh = Analyzer(rules=load_rules())
    cached = Analyzer(rules=load_rules())
    for name in logs:
        path = os.path.join(SAMPLES, name)
        assert fresh.analyze_source(path).to_json() == cached.analyze_source(path).to_json(), name


@pytest.mark.parametrize("junk", [b"", b"garbage", b"\x80\x05K\x01.", None])
def test_a_corrupt_or_truncated_file_is_ignored_and_rebuilt(cache, loads, junk):
    first = load_rules()
    (path,) = [cache / n for n in _files(cache)]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if junk is None else junk)
    loads.clear()
    again = load_rules()
    assert len(loads) == 19  # loaded from the files
    _same(first, again)
    assert path.read_bytes() != (junk if junk is not None else data[: len(data) // 2])  # and stored again
    loads.clear()
    load_rules()
    assert loads == []


def test_a_planted_pickle_cannot_run_code(cache, loads, tmp_path):
    load_rules()
    (path,) = [cache / n for n in _files(cache)]
    key = setcache.key([(n, c, True) for n, c in engine.builtin_rule_files()])
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    path.write_bytes(pickle.dumps(("kvlogdiag-ruleset-v1", key, Evil())))
    loads.clear()
    load_rules()
    assert not marker.exists()
    assert len(loads) == 19


def test_a_file_filed_under_another_key_or_not_a_rule_set_is_ignored(cache, loads, tmp_path):
    load_rules()
    (path,) = [cache / n for n in _files(cache)]
    key = setcache.key([(n, c, True) for n, c in engine.builtin_rule_files()])
    for stored in (("kvlogdiag-ruleset-v1", "0" * 64, engine.RuleSet([])),  # another key's content
                   ("kvlogdiag-ruleset-v1", key, engine.RuleSet(["not a rule"])),  # type: ignore[list-item]
                   ("kvlogdiag-ruleset-v1", key, {"rules": []}),
                   ("other-magic", key, engine.RuleSet([]))):
        path.write_bytes(pickle.dumps(stored))
        assert setcache.get(key) is None
        loads.clear()
        assert len(load_rules().rules) == 19 and len(loads) == 19


def test_a_file_of_another_user_is_not_read(cache, loads, monkeypatch):
    load_rules()
    me = os.geteuid()
    monkeypatch.setattr(setcache.os, "geteuid", lambda: me + 1)
    loads.clear()
    load_rules()
    assert len(loads) == 19


def test_an_edited_user_rule_is_a_new_key_and_user_folders_are_keyed(cache, loads, tmp_path):
    load_rules()
    d = _user_dir(tmp_path)
    loads.clear()
    one = load_rules([str(d)])
    assert one.rules[-1].code == "USR012" and len(loads) == 20
    loads.clear()
    assert load_rules([str(d)]) == one and loads == []  # user rules come from the cache too
    (d / "USR012-preemptions.toml").write_text(USR := USER_RULE.replace('severity = "warning"', 'severity = "error"', 1))
    assert USR != USER_RULE
    loads.clear()
    two = load_rules([str(d)])
    assert len(loads) == 20 and two.rules[-1].severity == "error"
    loads.clear()
    assert len(load_rules().rules) == 19 and loads == []  # the built-in set alone: its own key, stored first
    assert len(_files(cache)) == 3


def test_a_bad_user_rule_is_never_stored_and_fails_every_time(cache, tmp_path):
    d = _user_dir(tmp_path, USER_RULE.replace('code = "USR012"', 'code = "KVD012"'), "KVD012-preemptions.toml")
    for _ in range(2):
        with pytest.raises(RuleLoadError, match="already defined"):
            load_rules([str(d)])
    assert not cache.exists() or _files(cache) == []


def test_another_version_or_an_edited_loader_is_a_miss(cache, loads, monkeypatch, tmp_path):
    load_rules()
    monkeypatch.setattr(kvlogdiag, "__version__", "999.0")
    loads.clear()
    load_rules()
    assert len(loads) == 19
    loader = tmp_path / "engine.py"
    loader.write_text("x = 1\n")
    real = setcache._loader_files
    monkeypatch.setattr(setcache, "_loader_files", lambda: real() + [str(loader)])
    loads.clear()
    load_rules()
    assert len(loads) == 19
    loads.clear()
    load_rules()
    assert loads == []
    loader.write_text("x = 22\n")  # another size: the loader's stamp changes
    loads.clear()
    load_rules()
    assert len(loads) == 19


def test_every_loader_module_is_in_the_key():
    names = {os.path.basename(p) for p in setcache._loader_files()}
    rules_dir = pkgdata.path("rules")
    assert {n for n in os.listdir(rules_dir) if n.endswith(".py")} <= names
    assert {"engine.py", "condition.py", "condcache.py", "context.py", "suggestion.py", "commands.py",
            "cli_args.json", "KVD001-hybrid-kv-manager-disabled.py"} <= names


def test_off_stores_nothing(tmp_path, monkeypatch, loads):
    monkeypatch.setenv("KVLOGDIAG_CACHE_DIR", "off")
    load_rules()
    load_rules()
    assert len(loads) == 38


def test_only_the_newest_rule_sets_are_kept(cache, tmp_path, loads):
    for i in range(setcache.KEEP + 3):
        d = tmp_path / f"u{i}"
        d.mkdir()
        (d / "USR012-preemptions.toml").write_text(USER_RULE + f"\n# {i}\n")
        load_rules([str(d)])
    assert len(_files(cache)) == setcache.KEEP
    loads.clear()
    load_rules([str(tmp_path / f"u{setcache.KEEP + 2}")])  # the newest is still there
    assert loads == []


def test_an_unwritable_cache_folder_still_loads(tmp_path, monkeypatch, loads):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("KVLOGDIAG_CACHE_DIR", str(blocker / "below-a-file"))
    assert len(load_rules().rules) == 19


def test_the_loaded_set_survives_a_copy_of_the_cache_folder(cache, tmp_path, loads, monkeypatch):
    first = load_rules()
    copy = tmp_path / "copy"
    shutil.copytree(cache, copy)
    monkeypatch.setenv("KVLOGDIAG_CACHE_DIR", str(copy))
    loads.clear()
    _same(load_rules(), first)
    assert loads == []


def test_the_guards_come_with_the_stored_set(cache, monkeypatch):
    from kvlogdiag.rules import guards

    fresh = load_rules()
    monkeypatch.setattr(guards, "guards", lambda tree: pytest.fail("guards worked out again"))
    monkeypatch.setattr(guards, "check_guards", lambda tree: pytest.fail("check guards worked out again"))
    cached = load_rules()
    lets = [c for r in cached.rules for _, c in r.lets]
    assert lets and all("null_guards" in c.__dict__ for c in lets)
    assert all("check_guards" in c.when.__dict__ for r in cached.rules for c in r.checks)
    assert [c.null_guards for r in fresh.rules for _, c in r.lets] == [c.null_guards for c in lets]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_in_place_of_the_file_neither_blocks_nor_is_read(cache, loads):
    load_rules()
    (path,) = [cache / n for n in _files(cache)]
    path.unlink()
    os.mkfifo(path)
    loads.clear()
    assert len(load_rules().rules) == 19 and len(loads) == 19  # a miss (and the FIFO is replaced by the new file)
