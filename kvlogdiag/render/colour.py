"""Colour for the text output on a terminal (rich), added on top of the plain text.

The plain text is made first and is what a pipe, a file or ``NO_COLOR`` gets, byte for byte; on a
terminal the same characters are printed with styles (a line's characters never change, only their
colour). Log text is escaped exactly as on the plain path before styling, and rich is given a `Text`
(no markup parsing), so a log line cannot style or drive the terminal.
"""

from __future__ import annotations

import functools
import io
import re
import sys
from typing import TYPE_CHECKING, Callable

from kvlogdiag.render.redact import SafeText

if TYPE_CHECKING:  # rich is imported only when colour is printed: a piped run never loads it
    from rich.text import Text


@functools.cache
def _styles() -> tuple[tuple[re.Pattern[str], str], ...]:
    """What is styled how; compiled on first use (only a terminal gets colour; a pipe never needs them)."""
    return (
        (re.compile(r"^== .*$", re.M), "bold"),
        (re.compile(r"^(?:KV cache|Errors|Summary|Findings \(\d[\d,]*\)|Runtime:)", re.M), "bold"),
        (re.compile(r"\[error\]"), "bold red"),
        (re.compile(r"\[warning\]"), "yellow"),
        (re.compile(r"\[info\]"), "cyan"),
        (re.compile(r"^ {6}fix: ", re.M), "green"),
        (re.compile(r"^No findings\.?", re.M), "green"),
        (re.compile(r"\b[1-9][\d,]* errors?\b"), "bold red"),
        (re.compile(r"\b[1-9][\d,]* warnings?\b"), "yellow"),
        (re.compile(r"\b[1-9][\d,]* info\b"), "cyan"),
        (re.compile(r"^ {2}start-up failed.*$", re.M), "bold red"),
    )


def plain(text: str) -> str:
    """``text`` as stdout's `SafeText` writes it (control characters escaped, log colour codes dropped)."""
    buf = io.StringIO()
    SafeText(buf).write(text)
    return buf.getvalue()


def style_text(text: str) -> "Text":
    """The text output with the colours of severities, headings and fixes."""
    from rich.text import Text

    t = Text(plain(text), no_wrap=True, end="")
    for pattern, style in _styles():
        t.highlight_regex(pattern, style)
    return t


def print_coloured(text: str, styler: Callable[[str], "Text"]) -> None:
    """Print ``styler(text)`` on the terminal behind stdout (past `SafeText`, which would drop the colour)."""
    from kvlogdiag import recache

    with recache.serving():  # rich's import-time patterns (~0.7 ms of a coloured analyze) from the regex cache
        from rich.console import Console

    stream = sys.stdout
    inner = stream._inner if isinstance(stream, SafeText) else stream  # noqa: SLF001 - our own wrapper
    console = Console(file=inner, force_terminal=True, soft_wrap=True, highlight=False, markup=False, emoji=False)
    console.print(styler(text), end="")
    inner.flush()
