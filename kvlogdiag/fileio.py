"""Reading small control files and replacing result files, the way users expect of a command-line tool.

* `read_regular` reads a rule or state file: only a regular file (a FIFO, a device such as ``/dev/zero``
  or a directory is refused without blocking on it) and at most a size limit.
* `replace_atomically` / `write_atomic` write a result (``scan -o``, the ``--state`` file): a temp file in
  the same directory, fsync, rename over the target, fsync of the directory — a crash leaves the old or the
  new content, never a mix, and a failed write leaves the old file as it was. The new file gets the mode
  (and, where the process may, the owner and group) of the file it replaces, or, for a new file, the mode
  a shell redirect gives: 0666 minus the process umask. `tempfile.mkstemp` alone would give 0600.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Callable, Iterable

__all__ = ["process_umask", "read_regular", "replace_atomically", "write_atomic", "write_atomic_pieces"]


def read_regular(path: str, limit: int) -> bytes:
    """The content of ``path``; OSError (with a plain ``strerror``) when it is not a regular file or is
    larger than ``limit`` bytes."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket")
            raise OSError(errno.EINVAL, f"not a regular file ({kind})")
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit:,} bytes ({st.st_size:,})")
        parts: list[bytes] = []
        total = 0
        while True:
            b = os.read(fd, min(1 << 20, limit + 1 - total))
            if not b:
                break
            parts.append(b)
            total += len(b)
            if total > limit:  # grew while being read
                raise OSError(errno.EFBIG, f"larger than {limit:,} bytes")
        return b"".join(parts)
    finally:
        os.close(fd)


def process_umask() -> int:
    """The process umask, read without changing it where Linux tells it (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def replace_atomically(path: str, suffix: str, write: Callable[[int, str], None]) -> None:
    """``write(fd, tmp)`` fills a temp file beside ``path``, which then replaces ``path`` (the temp file is
    removed on any failure, ``path`` is then untouched) and the directory entry is synced."""
    d = os.path.dirname(os.path.abspath(path))
    try:
        old: os.stat_result | None = os.stat(path)
    except OSError:
        old = None
    import tempfile  # on use: it imports shutil and random (~3 ms of a small analyze, which writes no file)

    fd, tmp = tempfile.mkstemp(prefix=".kvlogdiag-", suffix=suffix, dir=d)
    try:
        if old is not None and stat.S_ISREG(old.st_mode):
            os.fchmod(fd, stat.S_IMODE(old.st_mode))
            if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                try:
                    os.fchown(fd, old.st_uid, old.st_gid)
                except OSError:  # not ours to give away: keep at least the group when we may
                    try:
                        os.fchown(fd, -1, old.st_gid)
                    except OSError:
                        pass
        else:
            os.fchmod(fd, 0o666 & ~process_umask())
        write(fd, tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` with `replace_atomically`."""

    def write(fd: int, tmp: str) -> None:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())

    replace_atomically(path, ".tmp", write)


def write_atomic_pieces(path: str, pieces: Iterable[str]) -> None:
    """`write_atomic` of the text the pieces make, written as they come (a long JSON document is never
    held whole)."""

    def write(fd: int, tmp: str) -> None:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for piece in pieces:
                fh.write(piece)
            fh.flush()
            os.fsync(fh.fileno())

    replace_atomically(path, ".tmp", write)
