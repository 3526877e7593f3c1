"""Where a command's output goes and in which CI shape: ``-o/--output``, ``--quiet``, ``--statistics``,
``--format sarif|github|junit`` (the documents are built in ``kvlogdiag/render/{ci,sarif,github,junit}.py``).

`Output.emit` writes the text to stdout or, with ``-o FILE``, replaces FILE atomically
(`kvlogdiag.fileio.write_atomic`: a failed run leaves the previous file whole). The file gets the same
bytes stdout would (log control characters shown as escapes), never colour. ``--quiet`` prints nothing
on stdout: the exit code and the errors on stderr are the answer.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterable

import click

from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.fileio import write_atomic, write_atomic_pieces
from kvlogdiag.render.redact import SafeText, escape_controls

if TYPE_CHECKING:
    from kvlogdiag.render.ci import CILog, RuleInfo

CI_FORMATS = ("sarif", "github", "junit")


def output_options(with_output: bool = True, with_statistics: bool = True) -> Callable[[Callable], Callable]:
    """``-o/--output`` (unless the command has its own), ``--quiet`` and (for commands with findings) ``--statistics``."""

    def deco(func: Callable) -> Callable:
        opts = [click.option("-q", "--quiet", is_flag=True, default=False,
                             help="Print nothing on stdout: only the exit code and errors (stderr) tell.")]
        if with_statistics:
            opts.append(click.option("--statistics", is_flag=True, default=False,
                                     help="Print the number of findings per rule instead of the findings (text, or JSON with --format json)."))
        if with_output:
            opts.insert(0, click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
                                        help="Write the output to FILE instead of stdout (replaced atomically)."))
        for d in reversed(opts):
            func = d(func)
        return func

    return deco


class OutputError(Exception):
    """The output file cannot be written (the message names it)."""


def check_target(path: str | None, what: str = "--output") -> str | None:
    """Why ``path`` cannot be written, found before the work is done (else None)."""
    if not path:
        return None
    where = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{what} {path}: is a folder"
    if not os.path.isdir(where):
        return f"{what} {path}: the folder {where} does not exist"
    if not os.access(where, os.W_OK | os.X_OK):
        return f"{what} {path}: the folder {where} is not writable"
    return None


def use_colour() -> bool:
    """Colour only on a terminal, never with ``NO_COLOR`` (https://no-color.org) or ``TERM=dumb``."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    stream = sys.stdout
    inner = getattr(stream, "_inner", stream) if isinstance(stream, SafeText) else stream
    try:
        return bool(inner.isatty())
    except (AttributeError, ValueError):
        return False


class Output:
    """Where the command's main output goes (a plain class, not a dataclass: ~0.5 ms less at import; read by its
    attributes only)."""

    __slots__ = ("path", "quiet")

    def __init__(self, path: str | None = None, quiet: bool = False) -> None:
        self.path = path
        self.quiet = quiet

    def emit(self, text: str, colour: Callable[[str], Any] | None = None) -> None:
        """``text`` to the file or stdout; ``colour`` (text → a rich renderable) is used on a terminal only."""
        if self.path:
            try:
                write_atomic(self.path, escape_controls(text))
            except OSError as exc:
                raise OutputError(f"{self.path}: cannot write ({exc.strerror or exc}); the previous file is kept") from None
            return
        if self.quiet:
            return
        if colour is not None and use_colour():
            from kvlogdiag.render.colour import print_coloured

            print_coloured(text, colour)
            return
        click.echo(text, nl=False)

    def emit_pieces(self, pieces: Iterable[str]) -> None:
        """`emit` of the text the pieces make (no colour), written as they come: a long JSON document is
        never held whole (kvlogdiag/render/json_stream.py)."""
        if self.path:
            try:
                write_atomic_pieces(self.path, (escape_controls(p) for p in pieces))
            except OSError as exc:
                raise OutputError(f"{self.path}: cannot write ({exc.strerror or exc}); the previous file is kept") from None
            return
        if self.quiet:
            for _ in pieces:  # the same work (and errors) as without --quiet
                pass
            return
        buf: list[str] = []
        size = 0
        for p in pieces:  # joined into writes of ~1 MiB: click.echo flushes each one
            buf.append(p)
            size += len(p)
            if size >= 1 << 20:
                click.echo("".join(buf), nl=False)
                buf, size = [], 0
        if buf:
            click.echo("".join(buf), nl=False)


def statistics_text(logs: Iterable[CILog], fmt: str) -> str:
    from kvlogdiag.render.ci import all_findings, render_statistics, statistics  # on use: analyze's start-up

    rows = statistics(all_findings(logs))
    if fmt == "json":
        return json.dumps({"tool": "kvlogdiag", "statistics": rows}, indent=2) + "\n"
    return render_statistics(rows)


def ci_text(fmt: str, logs: list[CILog], rules: Iterable[RuleInfo], fail_on: str, command: str, exit_code: int) -> str:
    """The SARIF / GitHub / JUnit document of ``logs``."""
    if fmt == "sarif":
        from kvlogdiag.render.sarif import render_sarif

        return render_sarif(logs, rules, command, exit_code)
    if fmt == "github":
        from kvlogdiag.render.github import render_github

        return render_github(logs)
    from kvlogdiag.render.junit import render_junit

    return render_junit(logs, fail_on, command)


def statistics_format_error(fmt: str, statistics_flag: bool, allowed: tuple[str, ...] = ("text", "json", "table")) -> str | None:
    if statistics_flag and fmt not in allowed:
        return f"--statistics prints a count per rule as text or JSON, not --format {fmt}"
    return None


def finish(out: Output, text: str | Iterable[str], code: ExitCode, colour: Callable[[str], Any] | None = None) -> ExitCode:
    """Emit and return ``code``; a file that cannot be written is exit 2 (the error on stderr). ``text`` may
    be an iterable of pieces (`Output.emit_pieces`)."""
    from kvlogdiag.cli.common import err

    try:
        if isinstance(text, str):
            out.emit(text, colour)
        else:
            out.emit_pieces(text)
    except OutputError as exc:
        err(str(exc))
        return ExitCode.ERROR
    return code
