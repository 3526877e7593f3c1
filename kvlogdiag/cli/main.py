"""Command-line interface: the ``kvlogdiag`` group and `main`; each command lives in its own file here.

Linter conventions: ``--select/--ignore`` by code, prefix or name; ``--fail-on`` (what sets the
exit code) separate from ``--min-severity`` (what is shown). Commands return an `ExitCode`;
`KvlogdiagGroup.main` is the one place that exits: a `KvlogdiagError` becomes one
``kvlogdiag: error:`` line and exit 2, click's usage errors stay exit 2, Ctrl-C is 130 with a short
note, a closed stdout is 141, stdout that cannot be written (``> /dev/full``) one line and exit 2.
"""

from __future__ import annotations

import errno
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import click

from kvlogdiag import __version__
from kvlogdiag.cli.common import build_analyzer, err, fail_exit, quiet_stdout, report_rule_errors, rule_options
from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.cli.lazy import LazyCommands
from kvlogdiag.errors import KvlogdiagError
from kvlogdiag.render.redact import SafeText

if TYPE_CHECKING:
    from kvlogdiag.cli.rules import rule_text, rules_markdown  # imported on first use: __getattr__ below

__all__ = ["ExitCode", "build_analyzer", "cli", "err", "fail_exit", "main", "report_rule_errors", "rule_options",
           "rule_text", "rules_markdown"]


class KvlogdiagGroup(click.Group):
    """A click group whose commands return exit codes and whose errors are one line each; a command
    registered with `lazy_command` is imported only when it runs (or ``--help`` lists it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(self.commands)  # type: ignore[assignment]

    def lazy_command(self, name: str, target: str) -> None:
        """Register ``target`` (``"module:attribute"``, a click command) as ``name``, imported on first use."""
        self.commands.add_lazy(name, target)  # type: ignore[attr-defined]

    def invoke(self, ctx: click.Context) -> Any:
        # log text in any stdout output (model names, evidence, file names) is shown, never obeyed: OSC
        # titles and links, DCS, 8-bit CSI, BEL are escaped (watch's echo is os.write on fd 1, untouched)
        real_stdout = sys.stdout
        if real_stdout is not None and not isinstance(real_stdout, SafeText):
            sys.stdout = SafeText(real_stdout)  # type: ignore[assignment]
        try:
            rv = super().invoke(ctx)
        except KvlogdiagError as exc:
            err(str(exc))
            return ExitCode.ERROR
        except BrokenPipeError:  # the reader of stdout went away (| head): quietly, like a shell pipeline
            quiet_stdout()
            return ExitCode.BROKEN_PIPE
        except OSError as exc:
            if not _is_stdout_error(exc):
                raise
            # > /dev/full (ENOSPC), EIO, a quota: one line; what is still buffered goes to /dev/null
            quiet_stdout()
            err(f"stdout: cannot write ({exc.strerror or exc})")
            return ExitCode.ERROR
        finally:
            sys.stdout = real_stdout
        return ExitCode.OK if rv is None else rv

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        code = self.run(args, prog_name, complete_var, **extra)
        if standalone_mode:
            from kvlogdiag.cli.fastexit import exit_now

            exit_now(code)  # returns unless the console script runs a command that allows it (cli/fastexit.py)
            sys.exit(code)
        return code

    def run(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None, **extra: Any) -> int:
        """Parse ``args``, run the command, and return its exit code (never exits)."""
        with _Interrupts() as ctrl_c:
            try:
                rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            except click.exceptions.Abort as exc:
                if isinstance(exc.__cause__, EOFError):
                    err("unexpected end of input")
                    return ExitCode.ERROR
                return ctrl_c.caught()
            except KeyboardInterrupt:
                return ctrl_c.caught()
            except click.ClickException as exc:
                exc.show()
                return exc.exit_code
        return int(rv) if isinstance(rv, int) else ExitCode.OK


def _is_stdout_error(exc: OSError) -> bool:
    """An uncaught write error that names no file: stdout's (commands report their own files' errors)."""
    return exc.filename is None and exc.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG)


class _Interrupts:
    """Ctrl-C raises KeyboardInterrupt until `caught` is called.

    Python raises it wherever the main thread happens to be, and one raised inside a finalizer
    (``__del__`` during garbage collection) is printed and dropped: the command would then go on
    reading an open pipe forever. So the signal is delivered again every `REPEAT_S` until the top
    level has seen it, and the dropped one is not printed. Commands that handle signals themselves
    (watch, scan) install their own handlers.
    """

    REPEAT_S = 0.25

    def __init__(self) -> None:
        self.seen = False
        self.done = False
        self.previous: Any = None
        self.unraisable: Any = None

    def __enter__(self) -> "_Interrupts":
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._on_sigint)
            self.unraisable = sys.unraisablehook
            sys.unraisablehook = self._unraisable
        return self

    def __exit__(self, *exc: Any) -> None:
        self.done = True
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
            sys.unraisablehook = self.unraisable

    def _unraisable(self, info: Any) -> None:
        if info.exc_type is KeyboardInterrupt and self.seen:
            return  # our Ctrl-C, raised inside a finalizer: delivered again by _repeat
        self.unraisable(info)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.done:
            return
        if not self.seen:
            self.seen = True
            threading.Thread(target=self._repeat, args=(threading.main_thread().ident,), daemon=True).start()
        raise KeyboardInterrupt

    def _repeat(self, main_ident: int) -> None:
        while True:
            time.sleep(self.REPEAT_S)
            if self.done:
                return
            signal.pthread_kill(main_ident, signal.SIGINT)

    def caught(self) -> ExitCode:
        self.done = True
        click.echo("kvlogdiag: interrupted", err=True)
        return ExitCode.INTERRUPTED


@click.group(cls=KvlogdiagGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kvlogdiag")
def cli() -> None:
    """Read vLLM / vLLM-Ascend logs: exact KV-cache figures per rank, and the settings that are wrong.

    \b
    kvlogdiag analyze server.log            figures + findings for one or more logs
    vllm serve ... 2>&1 | kvlogdiag watch   live, behind a running server
    kvlogdiag scan /var/log/vllm/           an archive of logs → one row per run
    kvlogdiag report -                      paste a log, get a Markdown/HTML report
    kvlogdiag estimate --log server.log     what fits: expected vs measured bytes/token, what-if
    kvlogdiag rules / explain KVD002        the rule set
    kvlogdiag diff before.log after.log     what changed between two starts, and what it did
    kvlogdiag suggest server.log            the launch command with the findings' fixes applied
    """


# each command's module is imported only when that command runs (start-up of `analyze`: issue 17);
# a new command: cli.lazy_command("name", "kvlogdiag.cli.module:function") (cli.add_command works too, eagerly)
for _name, _target in (("analyze", "analyze:analyze"), ("watch", "watch:watch"), ("scan", "scan:scan"),
                       ("report", "report:report"), ("estimate", "estimate:estimate"), ("rules", "rules:rules_cmd"),
                       ("explain", "rules:explain"), ("patterns", "rules:patterns"),
                       ("deployment", "deployment:deployment"),  # deployment: issue 14
                       ("diff", "diff:diff"), ("suggest", "suggest:suggest")):  # the tuning loop: issue 15
    cli.lazy_command(_name, "kvlogdiag.cli." + _target)

_LAZY_NAMES = {"analyze": "analyze:analyze", "watch": "watch:watch", "scan": "scan:scan", "report": "report:report",
               "estimate": "estimate:estimate", "rules_cmd": "rules:rules_cmd", "explain": "rules:explain",
               "patterns": "rules:patterns", "rule_text": "rules:rule_text", "rules_markdown": "rules:rules_markdown"}


def __getattr__(name: str) -> Any:
    """The names this module imported eagerly before commands became lazy (``from kvlogdiag.cli.main import rules_markdown``)."""
    target = _LAZY_NAMES.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module, attr = target.split(":")
    return getattr(importlib.import_module("kvlogdiag.cli." + module), attr)


def main() -> None:
    """The ``kvlogdiag`` console script."""
    from kvlogdiag.cli import fastexit

    fastexit.console()  # the process is ours: a command may end it with os._exit (never under CliRunner)
    cli.main(prog_name="kvlogdiag")
