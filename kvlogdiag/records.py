"""`Record` and `FrozenRecord`: what the records on a small ``analyze``'s path kept of ``@dataclass``, written once.

Creating a dataclass costs ~0.3-1.2 ms at import on Python < 3.13 (``dataclass()`` writes each class's
``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__`` and ``__delattr__`` as text and ``exec``\\s
each: docs/performance.md, "Session 8 (2)" and "Session 9: small-analyze start-up"). A record class lists its
fields in ``_FIELDS`` (in order) and writes its own ``__init__`` (assigning every field, lists and dicts fresh per
instance); this base gives it what its dataclass did: the dataclass ``__repr__``, ``__eq__`` by the fields against
an instance of the same class only (``NotImplemented`` otherwise), ``__match_args__``; a mutable `Record` is
unhashable; a `FrozenRecord` refuses assignment and deletion (``dataclasses.FrozenInstanceError``) and hashes its
fields. Instances keep their fields in ``__dict__``, so ``vars()``, ``copy`` and ``pickle`` see what they saw of
the dataclass. `replace` is ``dataclasses.replace`` for them. ``dataclasses.fields``/``asdict`` do not apply: a
record whose callers need them stays a dataclass (tests/test_plain_records.py compares each record with a
dataclass of its fields).
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from operator import attrgetter
from typing import Any

__all__ = ["FrozenRecord", "Record", "replace"]


class Record:
    """Repr, equality (and ``__match_args__``) by the fields in `_FIELDS`, in order; unhashable."""

    __slots__ = ()
    _FIELDS: tuple[str, ...] = ()
    _GET: Any = None  # the fields' values as a tuple (an attrgetter: one C call for eq, hash and repr)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = cls.__dict__.get("_FIELDS")
        if fields:  # a record class (`FrozenRecord` declares none)
            setattr(cls, "__match_args__", fields)  # noqa: B010 - as a dataclass sets it (mypy knows no such class attribute)
            get = attrgetter(*fields)
            cls._GET = get if len(fields) > 1 else (lambda obj: (get(obj),))  # always a tuple

    def __repr__(self) -> str:
        return f"{self.__class__.__qualname__}({', '.join(f'{f}={v!r}' for f, v in zip(self._FIELDS, self._GET(self)))})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._GET(self) == other._GET(other)  # type: ignore[attr-defined]
        return NotImplemented

    # __eq__ without __hash__: Python makes the class unhashable, as a mutable dataclass is


class FrozenRecord(Record):
    """A `Record` set once in its ``__init__`` (through ``__dict__``): assignment and deletion refused, hashed by
    its fields."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self._GET(self))

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")


def replace(obj: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` for records: a new one with ``obj``'s fields but ``changes`` (TypeError for a name
    that is not a field)."""
    return obj.__class__(**{**dict(zip(obj._FIELDS, obj._GET(obj))), **changes})
