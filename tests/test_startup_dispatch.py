"""The extractor's keyword → patterns table kept in the regex cache (`kvlogdiag.extract.extractor._dispatch_tables`):
from the cache or worked out, it is the table the plain algorithm gives, pattern objects and order included."""

from __future__ import annotations

import pytest

from kvlogdiag import recache
from kvlogdiag.catalogue.patterns import catalogue
from kvlogdiag.extract import extractor

pytestmark = pytest.mark.skipif(recache._TYPECODE is None, reason="not CPython: recache is plain re.compile")


def _fresh(monkeypatch, where) -> None:
    monkeypatch.setenv("KVLOGDIAG_CACHE_DIR", str(where))
    monkeypatch.setattr(recache, "_disk", None)
    monkeypatch.setattr(recache, "_new", {})
    monkeypatch.setattr(recache, "_memo", {})
    monkeypatch.setattr(recache, "_writable", None)
    monkeypatch.setattr(extractor, "_TABLES", None)


def _reference(pats):
    own: dict = {}
    for p in pats:
        for kw in p.keywords:
            own.setdefault(kw, []).append(p)
    by_kw = {}
    for kw in own:
        lst = [p for k, ps in own.items() if k in kw for p in ps]
        by_kw[kw] = list({p.name: p for p in lst}.values())
    return by_kw


def _same(table, want) -> None:
    assert list(table) == list(want)
    for kw in want:
        assert [id(p) for p in table[kw]] == [id(p) for p in want[kw]], kw


def test_the_table_from_the_cache_is_the_worked_out_one(tmp_path, monkeypatch):
    want = _reference(catalogue())
    assert any(len(v) > 1 for v in want.values())  # some keyword lies inside another
    _fresh(monkeypatch, tmp_path / "c")
    pats, first, kw_re = extractor._dispatch_tables()
    _same(first, want)
    recache.flush()
    _fresh(monkeypatch, tmp_path / "c")
    calls = []
    real = recache.derived
    monkeypatch.setattr(recache, "derived", lambda name, key, compute, check: real(
        name, key, lambda: calls.append(name) or compute(), check))
    pats2, second, kw_re2 = extractor._dispatch_tables()
    assert calls == []  # read back from the cache file
    _same(second, want)
    assert kw_re2 == kw_re


def test_a_damaged_or_foreign_table_is_worked_out_again(tmp_path, monkeypatch):
    want = _reference(catalogue())
    _fresh(monkeypatch, tmp_path / "c")
    extractor._dispatch_tables()
    recache.flush()
    disk_key = next(k for k in recache._load() if k[0] == "d:dispatch-table")
    for junk in ([["no such keyword", []]], [[kw, ["no_such_pattern"]] for kw in want], "x", None):
        _fresh(monkeypatch, tmp_path / "c")
        recache._load()[disk_key] = [junk]
        _same(extractor._dispatch_tables()[1], want)


def test_patterns_sharing_a_name_are_never_mixed_up(monkeypatch):
    pats = catalogue()
    twin = type(pats[0])(pats[0].name, pats[0].versions, pats[1].keywords, pats[0].regex)
    monkeypatch.setattr(extractor, "catalogue", lambda: [*pats, twin])
    monkeypatch.setattr(extractor, "_TABLES", None)
    _same(extractor._dispatch_tables()[1], _reference([*pats, twin]))
