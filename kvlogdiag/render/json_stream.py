"""The JSON document written piece by piece: the same text as `kvlogdiag.render.analysis.render_json`.

A log of half a million KV lines has half a million entries in each of the contract's lists (every value,
one ``bytes_per_token_by_rank`` entry per pairing: docs/json-output.md), ~100 MB of JSON. Building that
document as dicts and one string took ~900 MB. Here the analyses come as `Analysis.to_json(lazy=True)`
(their long lists are `kvlogdiag.derive.pairings` views), and `render_json_stream` yields the text in
pieces: the small parts of the document through `json.dumps`, each long list `CHUNK` entries at a time,
each chunk cleaned (`clean_json`) and dumped alone, then indented to its place. The result is the text
``json.dumps(json_document(...), indent=2, ensure_ascii=False, allow_nan=False)`` gives, byte for byte
(tests/test_json_stream.py): ``indent=2`` puts every list item and dict entry on its own line, and a JSON
string never holds a raw newline, so a chunk's lines can be shifted right as a whole.

`render_json_line` does the same for one JSON line (``watch --format json`` events, whose ``final`` and
``summary`` events carry whole analyses): the pieces of ``json.dumps(clean_json(obj), ensure_ascii=False,
allow_nan=False)``, without indentation.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from kvlogdiag import __version__
from kvlogdiag.derive.pairings import is_view
from kvlogdiag.render.analysis import clean_json

__all__ = ["CHUNK", "render_json_line", "render_json_stream"]

CHUNK = 2048  # list entries dumped at once: large enough that json.dumps does the work, small enough to stay flat


def _dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False)


def _long(obj: Any) -> bool:
    return is_view(obj) or (isinstance(obj, (list, tuple)) and len(obj) > CHUNK)


def _heavy(obj: Any, depth: int = 0) -> bool:
    """Whether ``obj`` holds a long list (or a view) somewhere: only then is it walked piece by piece."""
    if _long(obj):
        return True
    if depth > 8:
        return False
    if isinstance(obj, dict):
        return any(_heavy(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_heavy(v, depth + 1) for v in obj)
    return False


def _shift(text: str, level: int) -> str:
    return text.replace("\n", "\n" + "  " * level) if level else text


def _encode(obj: Any, level: int) -> Iterator[str]:
    """The text of ``obj`` (not yet cleaned) at indentation ``level``, as ``json.dumps`` would place it."""
    if not _heavy(obj):
        yield _shift(_dumps(clean_json(obj)), level)
        return
    pad = "\n" + "  " * (level + 1)
    if isinstance(obj, dict):
        items = [(str(k), v) for k, v in obj.items() if not str(k).startswith("_")]  # as clean_json
        if not items:
            yield "{}"
            return
        yield "{"
        for n, (k, v) in enumerate(items):
            yield ("," if n else "") + pad + _dumps(k) + ": "
            yield from _encode(v, level + 1)
        yield "\n" + "  " * level + "}"
        return
    seq: Sequence[Any] = obj
    if len(seq) == 0:
        yield "[]"
        return
    yield "["
    first = True
    if any(_heavy(v) for v in _sample(seq)):
        for v in seq:  # entries that hold long lists themselves (the analyses, all_runs)
            yield ("," if not first else "") + pad
            first = False
            yield from _encode(v, level + 1)
    else:
        for start in range(0, len(seq), CHUNK):
            part = seq[start:start + CHUNK]
            text = _dumps(clean_json(list(part)))  # "[\n  a,\n  b\n]"
            yield ("," if not first else "") + _shift(text[1:-2], level)
            first = False
    yield "\n" + "  " * level + "]"


def _sample(seq: Sequence[Any]) -> Sequence[Any]:
    # a long view holds flat entries (numbers, small dicts); a short list may hold analyses
    return seq[:1] if _long(seq) else seq


def render_json_stream(analyses: list[dict], extra: dict | None = None) -> Iterator[str]:
    """The pieces of `render_json(analyses, extra)` (analyses: ``to_json(lazy=True)`` dicts)."""
    doc: dict[str, Any] = {"tool": "kvlogdiag", "version": __version__, "analyses": analyses}
    if extra:
        doc.update(clean_json(extra))
    return _encode(doc, 0)


def _encode_line(obj: Any) -> Iterator[str]:
    """The one-line text of ``obj`` (not yet cleaned), as ``json.dumps`` with its default separators gives it."""
    if not _heavy(obj):
        yield json.dumps(clean_json(obj), ensure_ascii=False, allow_nan=False)
        return
    if isinstance(obj, dict):
        yield "{"
        n = 0
        for k, v in obj.items():
            if str(k).startswith("_"):  # as clean_json
                continue
            yield (", " if n else "") + json.dumps(str(k), ensure_ascii=False) + ": "
            n += 1
            yield from _encode_line(v)
        yield "}"
        return
    seq: Sequence[Any] = obj
    yield "["
    if any(_heavy(v) for v in _sample(seq)):
        for n, v in enumerate(seq):
            if n:
                yield ", "
            yield from _encode_line(v)
    else:
        for start in range(0, len(seq), CHUNK):
            text = json.dumps(clean_json(list(seq[start:start + CHUNK])), ensure_ascii=False, allow_nan=False)
            yield (", " if start else "") + text[1:-1]
    yield "]"


def render_json_line(obj: Any) -> Iterator[str]:
    """The pieces of ``json.dumps(clean_json(obj), ensure_ascii=False, allow_nan=False)`` (``obj`` may hold
    the views of ``to_json(lazy=True)``); a small ``obj`` is one piece."""
    return _encode_line(obj)
