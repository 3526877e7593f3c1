"""Exit statuses of every kvlogdiag command, in one place.

A leaf module: it imports nothing from kvlogdiag, so any layer (modes, cli) can use it without a cycle.
The signal statuses follow the shell's 128 + signal number convention.
"""

from __future__ import annotations

import os
from enum import IntEnum


class ExitCode(IntEnum):
    """What the process exits with."""

    OK = 0  # no finding at or above --fail-on
    FINDINGS = 1  # findings at or above --fail-on
    ERROR = 2  # usage error, bad configuration or rules, an input that could not be read, output that could not be written
    INTERNAL_ERROR = 3  # watch: the analysis stopped (a bug, or it fell behind); the log was still passed through whole
    TRUNCATED = 4  # an input was read only in part (a cut compressed stream, --max-bytes); the output is of the lines read
    INTERRUPTED = 130  # Ctrl-C (SIGINT)
    BROKEN_PIPE = 141  # the reader of stdout went away (SIGPIPE)
    TERMINATED = 143  # SIGTERM (watch prints its summary first)


def quiet_stdout() -> None:
    """stdout's reader is gone: point fd 1 at /dev/null so the interpreter's final flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass
