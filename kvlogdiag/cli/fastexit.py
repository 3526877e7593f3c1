"""Ending the process without the interpreter's teardown, for commands that opt in (`allow`).

A normal exit frees every module and object one by one: ~30 ms of CPU after a small ``analyze``, a
seventh of its cost (measured in docs/performance.md, "Session 6"). `exit_now` does what that teardown
would have done that anyone can see — flush stdout and stderr, run the ``atexit`` handlers (the regex
cache writes its file there) — and then leaves with ``os._exit``. Only in the console script (`console`,
set by `kvlogdiag.cli.main.main`): the group calls `exit_now` just before its ``sys.exit``, and a process
that runs the group in-process (click's ``CliRunner``, tests) must never end there. A command allows it only when it holds
no open output of its own at that point (its files are written whole and closed by `write_atomic`) and
starts no thread or process that outlives it. When a flush fails, or another thread still runs, it
returns and the exit is the ordinary ``sys.exit``, so broken pipes and full disks end exactly as before.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

_allowed = False
_console = False


def console() -> None:
    """This process is the ``kvlogdiag`` console script (nothing runs after the command)."""
    global _console
    _console = True


def allow() -> None:
    """The running command ends cleanly with `exit_now` (see the module text for what that needs)."""
    global _allowed
    _allowed = True


def exit_now(code: int) -> None:
    """End the process with ``code`` now when allowed and nothing else runs; else return (the caller exits)."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if _allowed and _console and not others:
        try:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
        except Exception:  # noqa: BLE001 - the ordinary exit reports (or swallows) it as it always did
            return
        atexit._run_exitfuncs()
        try:
            for stream in (sys.stdout, sys.stderr):  # what an exit handler printed
                if stream is not None:
                    stream.flush()
        except Exception:  # noqa: BLE001 - nothing is left to report it to
            pass
        os._exit(code)
