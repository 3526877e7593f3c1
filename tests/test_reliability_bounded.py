"""Work bounded by the input, counted in characters, not timed (issue 18, item 5).

Rejoining a hard-wrapped paste (``reader.unwrap_lines`` / ``incremental.Unwrapper``) used to add each row
to a growing string: a 4 MB base64 dump wrapped at 80 columns took 31 s of CPU (1 MB: 3 s), now 1.4 s.
The test counts the characters of every `Line` built while rejoining: linear in the input, whatever its
size, and a rejoined line is cut at ``MAX_LINE_BYTES`` like any long line.
"""

from __future__ import annotations

import base64
import random

import pytest

from kvlogdiag.input import incremental, reader
from kvlogdiag.input.reader import MAX_LINE_BYTES, Line


def _rows(n: int, width: int = 80) -> list[Line]:
    blob = "INFO 07-03 14:19:40 [x.py:1] dump " + base64.b64encode(random.Random(n).randbytes(n * width)).decode()
    return [Line(i + 1, blob[o:o + width], None, blob[o:o + width]) for i, o in enumerate(range(0, n * width, width))]


@pytest.fixture
def built(monkeypatch) -> list[int]:
    """Characters of text + raw of every Line built by the rejoining code."""
    sizes: list[int] = []
    real = reader.Line

    def counting(*args, **kw):
        line = real(*args, **kw)
        sizes.append(len(line.text) + len(line.raw))
        return line
    monkeypatch.setattr(reader, "Line", counting)
    monkeypatch.setattr(incremental, "Line", counting)
    return sizes


@pytest.mark.parametrize("n", [2_000, 8_000])
def test_rejoining_a_wrapped_dump_builds_linear_text(built, n):
    rows = _rows(n)
    out = list(reader.unwrap_lines(iter(rows), 80))
    total = sum(len(r.raw) for r in rows)
    assert len(out) == 1 and out[0].raw == "".join(r.raw for r in rows)  # one line, exactly the rows joined
    assert sum(built) <= 2 * total + 1000  # before: every row rebuilt the whole line so far (n^2/2 rows)


def test_the_incremental_rejoiner_is_linear_and_the_same(built):
    rows = _rows(4_000)
    u = incremental.Unwrapper(80)
    out = [x for r in rows for x in u.feed(r)] + u.end()
    assert [x.raw for x in out] == [x.raw for x in reader.unwrap_lines(iter(rows), 80)]
    assert sum(built) <= 4 * sum(len(r.raw) for r in rows) + 1000  # both rejoinings counted


def test_a_rejoined_line_is_cut_at_max_line_bytes():
    rows = _rows(MAX_LINE_BYTES // 80 + 5_000)
    out = list(reader.unwrap_lines(iter(rows), 80))
    assert len(out) == 1 and len(out[0].raw) == MAX_LINE_BYTES
    assert out[0].raw == "".join(r.raw for r in rows)[:MAX_LINE_BYTES]
