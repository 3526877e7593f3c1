"""The console script's entry (`kvlogdiag.cli.entry`): the CLI imported with the collector paused, the
command run with it on again, nothing else different."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kvlogdiag.tomlcache import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PROBE = """
import gc, json, sys
collections = []
gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(info["generation"]))
if sys.argv[1] == "off":
    gc.disable()
from kvlogdiag.cli import fastexit
seen = {}
real = fastexit.console
def console():
    seen.update(enabled=gc.isenabled(), collections=len(collections) - before, frozen=gc.get_freeze_count(),
                main_loaded="kvlogdiag.cli.main" in sys.modules)
    real()
fastexit.console = console
from kvlogdiag.cli.entry import main
sys.argv = ["kvlogdiag", "--version"]
before = len(collections)
try:
    main()
except SystemExit as exc:
    seen["exit"] = exc.code
print(json.dumps(seen))
"""


def _probe(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    *_, last = out.stdout.strip().splitlines()
    assert "kvlogdiag, version" in out.stdout
    return json.loads(last)


def test_the_cli_is_imported_without_a_collection_and_runs_with_the_collector_on():
    seen = _probe("on")
    assert seen["main_loaded"] and seen["exit"] == 0
    assert seen["collections"] == 0  # the imports of kvlogdiag.cli.main ran no collection
    assert seen["frozen"] > 10_000  # what they made is out of later collections' reach
    assert seen["enabled"] is True  # the command runs with the collector as usual


def test_a_collector_that_was_off_stays_off():
    seen = _probe("off")
    assert seen["enabled"] is False and seen["exit"] == 0


def test_the_console_script_and_python_m_use_the_entry():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        scripts = tomllib.load(fh)["project"]["scripts"]
    assert scripts["kvlogdiag"] == "kvlogdiag.cli.entry:main"
    with open(os.path.join(ROOT, "kvlogdiag", "__main__.py"), encoding="utf-8") as fh:
        assert "from kvlogdiag.cli.entry import main" in fh.read()
    out = subprocess.run([sys.executable, "-m", "kvlogdiag", "--version"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0 and "kvlogdiag, version" in out.stdout
