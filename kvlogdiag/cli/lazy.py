"""`LazyCommands`: the command table of the ``kvlogdiag`` group, whose commands are imported on first use.

``kvlogdiag analyze small.log`` should not pay for importing watch, scan, report, estimate and
deployment (and what they import). Click keeps a group's commands in ``group.commands`` and reads it
with ``get``, ``[]``, ``in`` and iteration; this mapping answers all of them, importing a lazily
registered command's module the first time it is looked up. Listing the names (``kvlogdiag --help``
looks each one up for its short help, so it imports them all) needs no import.
"""

from __future__ import annotations

import importlib
from collections.abc import MutableMapping
from typing import Any, Iterator


class LazyCommands(MutableMapping):
    """name → click command; entries added by `add_lazy` are ``"module:attribute"`` until looked up."""

    def __init__(self, loaded: "MutableMapping[str, Any] | None" = None):
        self._loaded: dict[str, Any] = dict(loaded or {})
        self._lazy: dict[str, str] = {}

    def add_lazy(self, name: str, target: str) -> None:
        self._loaded.pop(name, None)
        self._lazy[name] = target

    def __getitem__(self, name: str) -> Any:
        try:
            return self._loaded[name]
        except KeyError:
            target = self._lazy.get(name)
            if target is None:
                raise
        module, attr = target.split(":")
        cmd = getattr(importlib.import_module(module), attr)
        self._loaded[name] = cmd
        del self._lazy[name]
        return cmd

    def __setitem__(self, name: str, cmd: Any) -> None:
        self._lazy.pop(name, None)
        self._loaded[name] = cmd

    def __delitem__(self, name: str) -> None:
        if name in self._lazy:
            del self._lazy[name]
        else:
            del self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in self._loaded or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        yield from list(self._loaded)
        yield from list(self._lazy)

    def __len__(self) -> int:
        return len(self._loaded) + len(self._lazy)
