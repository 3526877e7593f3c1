"""`tabulate`, imported without `importlib.metadata` when that is safe.

tabulate (since 0.10) starts with ``from importlib.metadata import version`` and looks its own version up
at import. Importing `importlib.metadata` pulls in the `email` package (for METADATA files), `csv`,
`zipfile` and more: ~25 ms of CPU, a seventh of a small text ``analyze``, for a string kvlogdiag never
reads (docs/performance.md, "Session 7: small-analyze start-up"). `load_tabulate` imports tabulate with
a stand-in for that one module that answers the only question tabulate asks — its own version — from the
name of its ``tabulate-VERSION.dist-info`` folder (the installed distribution's version, as
`importlib.metadata.version` would report it), and removes the stand-in as soon as tabulate is loaded,
so any later ``import importlib.metadata`` gets the real module.

It falls back to the plain import whenever the stand-in could be seen by anyone else or could give a
different answer: `importlib.metadata` already imported (nothing to save), another thread running (it
could import the module meanwhile), no single dist-info folder beside the package (an egg, a source
checkout, a vendored copy), or a tabulate whose import asks the stand-in for anything else (it is then
imported again, the ordinary way).

The same import, for the same reason, gets two more things that cost every small text ``analyze`` and
that it never uses (docs/performance.md, "Session 10"): tabulate's ``from html import escape`` (for its
HTML table formats) loads `html` and its 2,231-entry `html.entities` table, ~1.3 ms; while `html` is not
imported yet, it finds a stand-in whose ``escape`` imports the real `html` on its first call and hands
over to ``html.escape`` (the stand-in is gone from ``sys.modules`` by then) — a tabulate that takes
anything else from it, or keeps the module itself, is imported again the ordinary way. And the patterns
tabulate and `textwrap` compile at import come from `kvlogdiag.recache` (`recache.serving`), ~1.3 ms.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from typing import Any, Callable

_METADATA = "importlib.metadata"
_HTML = "html"


def load_tabulate() -> Callable[..., str]:
    """The `tabulate.tabulate` function, imported on first use (see the module text)."""
    loaded = sys.modules.get("tabulate")
    if loaded is None and _METADATA not in sys.modules and threading.active_count() == 1:
        version = installed_version("tabulate")
        if version is not None:
            stand_ins = {_METADATA: _stand_in("tabulate", version)}
            if _HTML not in sys.modules:
                stand_ins[_HTML] = _html_stand_in()
            from kvlogdiag import recache

            before = set(sys.modules)
            sys.modules.update(stand_ins)
            try:
                with recache.serving():
                    import tabulate
                new = {n: m for n, m in list(sys.modules.items()) if n not in before and n not in stand_ins}
                if any(v is st for m in new.values() for v in vars(m).values() for st in stand_ins.values()):
                    for n in new:  # a module kept a stand-in itself and may want more of it later: import anew
                        del sys.modules[n]
                else:
                    return tabulate.tabulate
            except (ImportError, AttributeError, TypeError):
                pass  # a tabulate that wants more of a stand-in: the failed import left nothing behind
            finally:
                for name, mod in stand_ins.items():
                    if sys.modules.get(name) is mod:
                        del sys.modules[name]
    import tabulate

    return tabulate.tabulate


def installed_version(name: str) -> str | None:
    """The version in the name of the one ``NAME-VERSION.dist-info`` folder beside package ``name``, else None."""
    from importlib.util import find_spec  # the search `import` does: the same folder

    try:
        spec = find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None or spec.submodule_search_locations is None:
        return None
    site = os.path.dirname(os.path.dirname(spec.origin))
    prefix = name + "-"
    try:
        found = [e for e in os.listdir(site) if e.startswith(prefix) and e.endswith(".dist-info")
                 and os.path.isfile(os.path.join(site, e, "METADATA"))]
    except OSError:
        return None
    if len(found) != 1:
        return None
    version = found[0][len(prefix):-len(".dist-info")]
    return version if version and "-" not in version else None


def _stand_in(name: str, version: str) -> types.ModuleType:
    """A module with the two names tabulate imports from `importlib.metadata`, knowing one distribution."""

    class PackageNotFoundError(ModuleNotFoundError):
        """As `importlib.metadata.PackageNotFoundError`: no such distribution."""

    def version_of(dist: str) -> str:
        if dist != name:
            raise PackageNotFoundError(dist)
        return version

    mod = types.ModuleType(_METADATA, "importlib.metadata stand-in for one import (kvlogdiag.render.tables)")
    mod_any: Any = mod
    mod_any.version = version_of
    mod_any.PackageNotFoundError = PackageNotFoundError
    return mod


def _html_stand_in() -> types.ModuleType:
    """A module with `html.escape` only, which imports the real `html` on its first call."""

    def escape(s: str, quote: bool = True) -> str:
        import html  # the real module: the stand-in left sys.modules when tabulate was loaded

        return html.escape(s, quote)

    mod = types.ModuleType(_HTML, "html stand-in for one import (kvlogdiag.render.tables)")
    mod_any: Any = mod
    mod_any.escape = escape
    return mod
