"""Inputs beyond this machine: ``s3://``, ``gs://``, ``az://``, ``https://`` … read through fsspec.

Optional: ``pip install 'kvlogdiag[remote]'`` (fsspec plus s3fs, gcsfs, adlfs, aiohttp). fsspec and the
protocol's package are imported only when an argument is a URL, so local scans never load them.
Credentials and endpoints come from each library's usual places (``AWS_PROFILE``, ``AWS_ENDPOINT_URL``,
``GOOGLE_APPLICATION_CREDENTIALS``, ``AZURE_STORAGE_CONNECTION_STRING``, fsspec's ``FSSPEC_<PROTOCOL>_<KEY>``
variables and config files); nothing is passed on the command line, so no secret lands in a shell history.

A remote file is read as a stream (never downloaded whole first) and goes through the same
decompression and text sniffing as a local one (`kvlogdiag.input.reader.open_stream`). Its identity
for ``scan --state`` is its size, modification time and ETag (or the store's checksum) as the store
lists them: no byte of an unchanged file is read again. A store that gives neither an ETag nor a
modification time (some HTTP servers) gets no identity, so such a file is read on every scan.
"""

from __future__ import annotations

import io
import re
from datetime import datetime
from typing import Any, BinaryIO

from kvlogdiag.input.reader import CHUNK_BYTES, DEFAULT_MAX_BYTES, InputError, open_input, open_stream
from kvlogdiag.modes.scan import Entry, _matches

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
INSTALL_HINT = "pip install 'kvlogdiag[remote]'"
_ETAG_KEYS = ("ETag", "etag", "md5Hash", "content_md5", "Content-MD5", "checksum", "crc32c")
_MTIME_KEYS = ("LastModified", "last_modified", "updated", "mtime", "Last-Modified", "modified", "created", "timeCreated")


def is_url(arg: str) -> bool:
    """True for ``scheme://…`` (``file://`` too; a local folder named like that is written ``./s3:/…``)."""
    return bool(_URL.match(arg))


class RemoteError(InputError):
    """A URL argument that cannot be used at all (extra missing, unknown protocol): exit 2."""


class RemoteEntry(Entry):
    """A remote object found by `add_url`: ``etag`` is what the store says identifies its content."""

    __slots__ = ("etag",)

    def __init__(self, url: str, size: int | None = None, mtime_ns: int | None = None, etag: str | None = None,
                 error: str | None = None):
        super().__init__(url, url, size, mtime_ns, None, error)
        self.etag = etag


def state_head(e: RemoteEntry) -> str | None:
    """What ``--state`` compares besides size and mtime: the ETag, or the mtime alone; None (read again) without both."""
    if e.etag:
        return "etag:" + e.etag
    if e.mtime_ns:
        return "mtime"
    return None


def _filesystem(url: str):
    try:
        import fsspec
    except ImportError:
        raise RemoteError(f"{url}: reading URLs needs fsspec: {INSTALL_HINT}") from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise RemoteError(f"{url}: this protocol needs a package that is missing ({exc}): {INSTALL_HINT}") from None
    except ValueError as exc:
        raise RemoteError(f"{url}: {exc}") from None


def _mtime_ns(info: dict) -> int | None:
    for k in _MTIME_KEYS:
        v = info.get(k)
        if v is None:
            continue
        if isinstance(v, datetime):
            return int(v.timestamp() * 1_000_000) * 1000
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return int(v * 1e9) if v < 1e11 else int(v)
        if isinstance(v, str):
            try:
                return int(datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp() * 1_000_000) * 1000
            except ValueError:
                from email.utils import parsedate_to_datetime

                try:
                    return int(parsedate_to_datetime(v).timestamp() * 1_000_000) * 1000
                except (TypeError, ValueError):
                    continue
    return None


def _etag(info: dict) -> str | None:
    for k in _ETAG_KEYS:
        v = info.get(k)
        if v:
            return str(v).strip('"')
    return None


def _entry(fs, path: str, info: dict) -> RemoteEntry:
    size = info.get("size")
    return RemoteEntry(fs.unstrip_protocol(path), int(size) if isinstance(size, (int, float)) else None,
                       _mtime_ns(info) or 0, _etag(info))


def _why(exc: BaseException) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    return f"cannot list ({type(exc).__name__}: {exc})"


def add_url(finder, url: str) -> None:
    """Add the objects a URL names to a `kvlogdiag.modes.scan.Finder`: one object, a glob, or a folder
    (prefix) walked recursively with the finder's ``--include``/``--exclude``. A URL that matches nothing
    goes to ``finder.missing``; one that cannot be listed is an error row. Raises `RemoteError`."""
    fs, path = _filesystem(url)
    seen = {e.abspath for e in finder.entries}

    def keep(e: RemoteEntry, rel: str, explicit: bool) -> None:
        name = rel.rsplit("/", 1)[-1]
        if finder.exclude and _matches(name, rel, finder.exclude):
            return
        if not explicit and not _matches(name, rel, finder.include):
            return
        if e.abspath not in seen:
            seen.add(e.abspath)
            finder.entries.append(e)

    try:
        if any(ch in path for ch in "*?["):
            found = fs.glob(path, detail=True)
            if not found:
                finder.missing.append(url)
            for p, info in sorted(found.items()):
                if info.get("type") != "directory":
                    keep(_entry(fs, p, info), p, explicit=True)
            return
        try:
            info = fs.info(path)
        except FileNotFoundError:
            finder.missing.append(url)
            return
        if info.get("type") != "directory":
            keep(_entry(fs, path, info), path, explicit=True)
            return
        base = path.rstrip("/")
        for p, pinfo in sorted(fs.find(base, detail=True).items()):
            if pinfo.get("type") != "directory":
                keep(_entry(fs, p, pinfo), p[len(base):].lstrip("/"), explicit=False)
    except (RemoteError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - credentials, network, a store's own errors: one row, the scan goes on
        finder.entries.append(RemoteEntry(url, error=_why(exc)))


class _Raw(io.RawIOBase):
    """An fsspec file as a raw stream (so that `io.BufferedReader` gives it ``peek``)."""

    def __init__(self, f: Any):
        self._f = f

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        data = self._f.read(len(buf))
        buf[: len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._f.close()
        finally:
            super().close()


def open_remote(url: str, max_bytes: int = DEFAULT_MAX_BYTES) -> BinaryIO:
    """A URL as a stream of decompressed bytes, like `open_input`; `InputError` naming the URL when it cannot be opened."""
    fs, path = _filesystem(url)
    try:
        f = fs.open(path, "rb")
    except PermissionError:
        raise InputError(f"{url}: permission denied") from None
    except FileNotFoundError:
        raise InputError(f"{url}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{url}: is a directory") from None
    except Exception as exc:  # noqa: BLE001 - network and store errors
        raise InputError(f"{url}: cannot open ({type(exc).__name__}: {exc})") from None
    return open_stream(io.BufferedReader(_Raw(f), CHUNK_BYTES), url, max_bytes)  # type: ignore[arg-type]


def open_any(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> BinaryIO:
    """`open_remote` for a URL, else `open_input`."""
    return open_remote(path, max_bytes) if is_url(path) else open_input(path, max_bytes)
