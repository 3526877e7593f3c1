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
"""

from __future__ import annotations

import os
import sys
import threading
import types
from typing import Any, Callable

_METADATA = "importlib.metadata"


def load_tabulate() -> Callable[..., str]:
    """The `tabulate.tabulate` function, imported on first use (see the module text)."""
    loaded = sys.modules.get("tabulate")
    if loaded is None and _METADATA not in sys.modules and threading.active_count() == 1:
        version = installed_version("tabulate")
        if version is not None:
            stand_in = _stand_in("tabulate", version)
            sys.modules[_METADATA] = stand_in
            try:
                import tabulate

                return tabulate.tabulate
            except (ImportError, AttributeError, TypeError):
                pass  # a tabulate that wants more of importlib.metadata: the failed import left nothing behind
            finally:
                if sys.modules.get(_METADATA) is stand_in:
                    del sys.modules[_METADATA]
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
