"""Files shipped inside the kvlogdiag package (rule files, catalogues, model data), read from its folder.

`importlib.resources` costs ~15 ms of CPU to import and first use (it brings tempfile, shutil, random,
zipfile and their dependencies), a tenth of a small ``analyze``; the package is always installed as
plain files (``kvlogdiag/catalogue/failures.py`` reads its catalogue next to itself too), so the data is
read from the package's folder directly.
"""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.abspath(__file__))


def path(*parts: str) -> str:
    """The file ``kvlogdiag/<parts...>``."""
    return os.path.join(ROOT, *parts)


def read_bytes(*parts: str) -> bytes:
    with open(path(*parts), "rb") as fh:
        return fh.read()


def read_text(*parts: str) -> str:
    return read_bytes(*parts).decode("utf-8")


def names(*parts: str) -> list[str]:
    """The entries of the folder ``kvlogdiag/<parts...>``, sorted by name."""
    return sorted(os.listdir(path(*parts)))
