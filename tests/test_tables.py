"""`kvlogdiag.render.tables`: tabulate imported without `importlib.metadata`, and every fallback."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from kvlogdiag.render import tables


def _child(code: str) -> dict:
    """Run ``code`` in a fresh interpreter (nothing imported yet) and return the JSON it prints."""
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True)
    return json.loads(p.stdout)


def test_tabulate_loaded_without_importlib_metadata_and_same_version() -> None:
    got = _child("""
        import json, sys
        from kvlogdiag.render.tables import load_tabulate
        fn = load_tabulate()
        import tabulate
        after_load = "importlib.metadata" in sys.modules
        table = fn([["a", 1], ["bb", 22]], tablefmt="plain")
        import importlib.metadata as md  # the real module now, not the stand-in
        print(json.dumps({"after_load": after_load, "same_fn": fn is tabulate.tabulate,
                          "version": tabulate.__version__, "real": md.version("tabulate"),
                          "real_module": hasattr(md, "distributions"), "table": table}))
    """)
    assert got["after_load"] is False
    assert got["same_fn"] is True
    assert got["version"] == got["real"] != "unknown"
    assert got["real_module"] is True
    assert got["table"] == "a    1\nbb  22"


def test_plain_import_when_importlib_metadata_is_already_loaded() -> None:
    got = _child("""
        import json, sys, importlib.metadata as md
        from kvlogdiag.render.tables import load_tabulate
        load_tabulate()
        import tabulate
        print(json.dumps({"same": sys.modules["importlib.metadata"] is md, "version": tabulate.__version__,
                          "real": md.version("tabulate")}))
    """)
    assert got["same"] is True and got["version"] == got["real"]


def test_plain_import_while_another_thread_runs() -> None:
    got = _child("""
        import json, sys, threading
        from kvlogdiag.render.tables import load_tabulate
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        load_tabulate()
        stop.set(); t.join()
        print(json.dumps({"metadata": "importlib.metadata" in sys.modules}))
    """)
    assert got["metadata"] is True  # the ordinary import path ran


def _fake_package(site: Path, name: str, dist_infos: list[str]) -> None:
    (site / name).mkdir()
    (site / name / "__init__.py").write_text("")
    for d in dist_infos:
        (site / d).mkdir()
        (site / d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\n")


def test_installed_version_from_the_one_dist_info_folder(tmp_path: Path, monkeypatch) -> None:
    _fake_package(tmp_path, "kvdfakeone", ["kvdfakeone-1.2.3.dist-info", "other-9.dist-info"])
    _fake_package(tmp_path, "kvdfaketwo", ["kvdfaketwo-1.0.dist-info", "kvdfaketwo-2.0.dist-info"])
    _fake_package(tmp_path, "kvdfakenone", [])
    (tmp_path / "kvdfakebad-1.0.dist-info").mkdir()  # no METADATA: not an installed distribution
    _fake_package(tmp_path, "kvdfakebad", [])
    monkeypatch.syspath_prepend(str(tmp_path))
    assert tables.installed_version("kvdfakeone") == "1.2.3"
    assert tables.installed_version("kvdfaketwo") is None  # two candidates: no guess
    assert tables.installed_version("kvdfakenone") is None
    assert tables.installed_version("kvdfakebad") is None
    assert tables.installed_version("kvdfake_not_installed") is None
    assert tables.installed_version("json") is None  # the standard library has no dist-info


def test_stand_in_answers_only_for_its_distribution() -> None:
    mod = tables._stand_in("tabulate", "0.10.0")
    assert mod.version("tabulate") == "0.10.0"
    try:
        mod.version("click")
    except mod.PackageNotFoundError:
        pass
    else:
        raise AssertionError("the stand-in must not invent other versions")


def _load_fake_tabulate(tmp_path: Path, source: str, extra: str = "") -> dict:
    """In a child process, `load_tabulate()` with a fake tabulate package of ``source`` first on the path: what it
    returned (``out``), the file imported, and ``extra`` (more JSON fields, a Python expression body)."""
    site = tmp_path / "site"
    site.mkdir()
    _fake_package(site, "tabulate", ["tabulate-9.9.dist-info"])
    (site / "tabulate" / "__init__.py").write_text(source)
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(site)!r})
        from kvlogdiag.render.tables import load_tabulate
        fn = load_tabulate()
        import importlib.metadata as md
        print(json.dumps({{"out": fn(), "file": sys.modules["tabulate"].__file__, {extra}}}))
    """)], capture_output=True, text=True, check=True)
    got = json.loads(p.stdout)
    assert got["file"].startswith(str(site))
    return got


def test_a_tabulate_that_needs_more_of_importlib_metadata_is_imported_the_ordinary_way(tmp_path: Path) -> None:
    got = _load_fake_tabulate(tmp_path, "from importlib.metadata import version, distributions\n"
                                        "__version__ = version('tabulate') if False else 'fake'\n"
                                        "def tabulate(*args, **kwargs):\n    return 'fake table'\n",
                              extra='"real": hasattr(md, "distributions")')
    assert got["out"] == "fake table" and got["real"] is True


def test_html_is_not_loaded_for_tabulate_and_its_html_tables_are_unchanged() -> None:
    got = _child("""
        import json, sys
        from kvlogdiag.render.tables import load_tabulate
        fn = load_tabulate()
        loaded = {m: m in sys.modules for m in ("html", "html.entities")}
        rows = [["<b>&'\\"", 1]]
        ours = {f: fn(rows, headers=["a<", "b"], tablefmt=f) for f in ("html", "unsafehtml")}
        import html
        real = html.escape("<b>&'\\"") == "&lt;b&gt;&amp;&#x27;&quot;" and hasattr(html, "unescape")
        print(json.dumps({"loaded": loaded, "ours": ours, "real": real, "mods": sorted(sys.modules)}))
    """)
    assert got["loaded"] == {"html": False, "html.entities": False}
    assert got["real"] is True  # `import html` after the load is the real module
    ref = _child("""
        import html, json
        import tabulate
        rows = [["<b>&'\\"", 1]]
        print(json.dumps({f: tabulate.tabulate(rows, headers=["a<", "b"], tablefmt=f) for f in ("html", "unsafehtml")}))
    """)
    assert got["ours"] == ref and "&lt;b&gt;" in ref["html"]


def test_html_already_imported_is_the_one_tabulate_gets() -> None:
    got = _child("""
        import html, json
        from kvlogdiag.render.tables import load_tabulate
        load_tabulate()
        import tabulate
        print(json.dumps({"same": tabulate.htmlescape is html.escape}))
    """)
    assert got["same"] is True


def test_a_tabulate_that_keeps_the_html_module_is_imported_the_ordinary_way(tmp_path: Path) -> None:
    got = _load_fake_tabulate(tmp_path, "import html\n__version__ = 'fake'\n"
                                        "def tabulate(*args, **kwargs):\n    return html.unescape('&lt;table&gt;')\n")
    assert got["out"] == "<table>"
