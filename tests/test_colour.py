"""The coloured text output on a terminal (`kvlogdiag.render.colour`): the plain text's characters with
styles, the same bytes whether rich's import-time patterns come from the regex cache or from `re`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from conftest import SAMPLE_LOGS_DIR

SMALL = str(SAMPLE_LOGS_DIR / "v1_single_gpu.log")

_CHILD = """
import io, json, re, sys
from kvlogdiag import recache
if sys.argv[1] == "plain-re":  # someone else's re.compile: recache.serving leaves it, rich compiles with re
    real = re.compile
    re.compile = lambda *a, **k: real(*a, **k)
served = []
real_serve = recache._serve
recache._serve = lambda *a: served.append(a) or real_serve(*a)
from kvlogdiag.cli.common import build_analyzer
from kvlogdiag.input.reader import DEFAULT_MAX_BYTES
from kvlogdiag.render.analysis import render_text
from kvlogdiag.render.colour import plain, print_coloured, style_text
from kvlogdiag.render.summary import summary_text
a = build_analyzer({}, [sys.argv[2]])
shown = [x for r in a.analyze_source_split(sys.argv[2], DEFAULT_MAX_BYTES) for x in r.select("all")]
text = render_text(shown) + summary_text(shown)
buf = io.StringIO()
sys.stdout = buf
print_coloured(text, style_text)
sys.stdout = sys.__stdout__
print(json.dumps({"coloured": buf.getvalue(), "plain": plain(text), "rich": "rich.console" in sys.modules,
                  "served": len(served)}))
"""


def _coloured(mode: str, cache: str) -> dict:
    env = dict(os.environ, KVLOGDIAG_CACHE_DIR=cache, TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    p = subprocess.run([sys.executable, "-c", _CHILD, mode, SMALL], capture_output=True, text=True, check=True, env=env,
                       timeout=120)
    return json.loads(p.stdout.splitlines()[-1])


def test_coloured_output_is_the_plain_text_styled_and_the_same_with_or_without_the_regex_cache(tmp_path):
    cache = str(tmp_path / "cache")
    first = _coloured("cache", cache)  # fills the cache
    cached = _coloured("cache", cache)
    plain_re = _coloured("plain-re", cache)
    assert cached["rich"] and "\x1b[" in cached["coloured"]
    assert cached["served"] > 0 and plain_re["served"] == 0
    assert cached["coloured"] == first["coloured"] == plain_re["coloured"]
    assert re.sub(r"\x1b\[[0-9;]*m", "", cached["coloured"]) == cached["plain"]  # only colour added
