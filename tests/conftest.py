"""Shared fixtures for the kvlogdiag core test suite.

Tests only read files inside the repository (``tests/data``, ``sample_logs``) and write to
pytest's ``tmp_path``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from kvlogdiag.pipeline import analyze_source

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
DATA_DIR = TESTS_DIR / "data"
SAMPLE_LOGS_DIR = REPO_ROOT / "sample_logs"

GIB = 2**30


def dedent_log(text: str) -> str:
    """Strip the common indentation of a triple-quoted log and its leading blank line."""
    import textwrap

    return textwrap.dedent(text).lstrip("\n")


@pytest.fixture
def write_log(tmp_path):
    """Write text or bytes to a fresh file under tmp_path; returns its path as str."""
    counter = itertools.count()

    def _write(content: str | bytes, name: str | None = None) -> str:
        data = content.encode("utf-8") if isinstance(content, str) else content
        path = tmp_path / (name or f"log{next(counter)}.log")
        path.write_bytes(data)
        return str(path)

    return _write


@pytest.fixture
def analyze_text(write_log):
    """``analyze_text(text | bytes) -> dict``: the full analysis of a log given as text."""

    def _analyze(content: str | bytes, name: str | None = None) -> dict:
        if isinstance(content, str):
            content = dedent_log(content)
        return analyze_source(write_log(content, name))

    return _analyze


@pytest.fixture(scope="session", autouse=True)
def _toml_cache_in_tmp(tmp_path_factory):
    """The parsed-TOML cache (kvlogdiag/tomlcache.py) of the tests and their subprocesses: a temporary folder, not ~/.cache."""
    import os

    old = os.environ.get("KVLOGDIAG_CACHE_DIR")
    os.environ["KVLOGDIAG_CACHE_DIR"] = str(tmp_path_factory.mktemp("kvlogdiag-cache"))
    yield
    if old is None:
        os.environ.pop("KVLOGDIAG_CACHE_DIR", None)
    else:
        os.environ["KVLOGDIAG_CACHE_DIR"] = old


_STARTUP_PREFILTER = None


def startup_verdict(lines: list[str]) -> dict:
    """The start-up tracker's verdict on the lines the reader's prefilter lets through, numbered from 1 (as
    `kvlogdiag analyze` feeds them)."""
    global _STARTUP_PREFILTER
    from kvlogdiag.catalogue.failures import prefilter_keywords
    from kvlogdiag.catalogue.patterns import prefilter_regex
    from kvlogdiag.extract.failures import StartupTracker
    from kvlogdiag.input.reader import make_line

    if _STARTUP_PREFILTER is None:
        _STARTUP_PREFILTER = prefilter_regex(prefilter_keywords())
    t = StartupTracker()
    for i, text in enumerate(lines, 1):
        if _STARTUP_PREFILTER.search(text.encode()):
            t.feed(make_line(i, text.encode()))
    return t.result()
