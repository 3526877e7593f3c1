"""What a small ``analyze`` imports and builds at start-up (issue 17 item 2, session 7): no
`importlib.metadata` (tabulate's version lookup), no `difflib` (only for "did you mean"), no `html` (session 10: not
for text either, tabulate gets a stand-in), no `gzip` for a plain-text log, and every
dataclass on its path has a docstring of its own (else Python < 3.13 runs `inspect.signature` to
write one: ~0.2 ms of CPU per class). CPU time itself is measured in bench/, never here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import SAMPLE_LOGS_DIR

SMALL = str(SAMPLE_LOGS_DIR / "v1_single_gpu.log")

_CHILD = r"""
import dataclasses, io, json, sys
created = []
_orig = dataclasses._process_class
def _record(cls, *args, **kwargs):
    created.append((cls.__module__ + "." + cls.__qualname__, cls.__dict__.get("__doc__") is not None))
    return _orig(cls, *args, **kwargs)
dataclasses._process_class = _record
from kvlogdiag.cli.main import cli
real = sys.stdout
sys.stdout = io.StringIO()
rc = cli.run(sys.argv[1:])
sys.stdout = real
print(json.dumps({"rc": rc, "modules": sorted(sys.modules), "created": created}))
"""


def _child(args: list[str]) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_small_analyze_imports_no_metadata_machinery(fmt: str) -> None:
    got = _child(["analyze", "--format", fmt, SMALL])
    assert got["rc"] in (0, 1)
    mods = set(got["modules"])
    for unneeded in ("importlib.metadata", "email.message", "difflib", "csv"):
        assert unneeded not in mods, unneeded
    assert ("tabulate" in mods) == (fmt == "text")
    assert "html" not in mods  # Markdown escaping only (tabulate's escape for HTML tables imports it on first use)
    assert "gzip" not in mods  # a plain-text log (a gzip one imports it)


def test_every_dataclass_on_the_analyze_path_has_its_own_docstring() -> None:
    got = _child(["analyze", SMALL])
    ours = [(name, has_doc) for name, has_doc in got["created"] if name.startswith("kvlogdiag.")]
    assert len(ours) >= 5  # the hook saw the classes (it must not pass by seeing none)
    assert [name for name, has_doc in ours if not has_doc] == []


def test_small_analyze_without_pathlib_ipaddress_gzip_html(tmp_path) -> None:
    """Session 10: neither form of a small analyze of a plain log, with no config file above it, imports pathlib
    (with urllib.parse and ipaddress), gzip or html. Run with ``-S`` and the site folders as plain path entries,
    as a wheel install starts (the editable install's import hook imports pathlib at every start)."""
    import os
    import site

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import io, json, sys\n"
            f"sys.path[:0] = [{root!r}]\n"
            f"sys.path += {site.getsitepackages()!r}\n"
            "from kvlogdiag.cli.main import cli\n"
            "real = sys.stdout\n"
            "mods = {}\n"
            "for fmt in ('text', 'json'):\n"
            "    sys.stdout = io.StringIO()\n"
            f"    rc = cli.run(['analyze', '--format', fmt, {SMALL!r}])\n"
            "    mods[fmt] = sorted(m for m in ('pathlib', 'urllib.parse', 'ipaddress', 'gzip', 'html') if m in sys.modules)\n"
            "sys.stdout = real\n"
            "print(json.dumps({'rc': rc, 'mods': mods}))\n")
    r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    assert got["rc"] in (0, 1)
    assert got["mods"] == {"text": [], "json": []}
