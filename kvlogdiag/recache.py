"""Compiled regular expressions of kvlogdiag's own catalogues, cached across runs in the user cache directory.

A small ``analyze`` compiles several hundred regular expressions (the line catalogue, the failure
catalogue, the prefilter's alternation of ~300 keywords, the envelope and redaction patterns): ~70 ms of
CPU, a third of the start-up, because `re` parses and compiles every pattern in Python. The result of
that work is a list of integers (the SRE program) that depends only on the pattern, its flags and the
Python build. `compile` keeps that program by pattern text in ``re-cache-v3.marshal`` next to the parsed-TOML
cache (`kvlogdiag.tomlcache.cache_dir`) and, on the next run, builds the pattern object from it directly
(``_sre.compile``, what `re` itself calls last): the same object `re.compile` gives — equal to it, program
included (``Pattern.__eq__`` compares the programs) — for a fraction of the cost.

It is only an accelerator and is checked where it can be: a program is stored only when the object built
from it equals what `re.compile` returns; the file is tied to the exact interpreter (version string, SRE
magic, code size, byte order), so another Python ignores it; any problem reading, parsing or writing it
(read-only home, a corrupt or foreign file, an interpreter without ``_sre``) falls back to `re.compile`
silently. The file is `marshal` data (read in ~0.5 ms where its JSON took ~2.7 ms, docs/performance.md
"Session 8 (2)") holding each program as the raw bytes of its code words (v2 held them as base64 text, a JSON
leftover whose decoding was ~2 ms of a small analyze's ~250 patterns: "Session 10"); since `marshal` is not
meant for untrusted bytes, it is read only when it is a regular file owned by this user and not larger than `MAX_CACHE_BYTES`, and what it holds is checked entry by entry. ``KVLOGDIAG_CACHE_DIR=off`` disables it. New programs are written once, when the process exits;
what that process used is kept newest, and a file grown past `SOFT_BYTES` (every start reads all of it) keeps
only that. `derived` keeps small JSON values worked out from such patterns the same way.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import marshal
import os
import re
import stat
import sys
from typing import Any, AnyStr, Callable, Iterator

try:
    import _sre

    try:
        from re import _compiler as _sre_compile  # type: ignore[attr-defined]  # Python >= 3.11
        from re import _parser as _sre_parse  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_compile as _sre_compile  # type: ignore[no-redef]
        import sre_parse as _sre_parse  # type: ignore[no-redef]
    _TYPECODE = next((t for t in "IL" if array.array(t).itemsize == _sre.CODESIZE), None)
except (ImportError, AttributeError):  # pragma: no cover - not CPython
    _sre = None  # type: ignore[assignment]
    _TYPECODE = None

_re_compile = re.compile  # the real one, also while `serving` stands in for it

FILE_NAME = "re-cache-v3.marshal"
MARSHAL_VERSION = 4  # fixed, not marshal.version: the same bytes from every Python that reads them
MAX_ENTRIES = 4096
MAX_CACHE_BYTES = 32 << 20
SOFT_BYTES = 2 << 20  # ~5 ms to read at each start
TAG = (f"{sys.implementation.name} {sys.version} sre {getattr(_sre, 'MAGIC', None)}/{getattr(_sre, 'CODESIZE', None)} "
       f"{sys.byteorder}")

# (kind, pattern text, flags) → [flags, program (the bytes of its code words), groups, groupindex, indexgroup]; kind
# "s" (str) or "b" (bytes, held as latin-1 text); kind "d:NAME" holds a `derived` value (flags 0) as [value]
_disk: dict[tuple[str, str, int], list] | None = None
_new: dict[tuple[str, str, int], list] = {}
_used: set[tuple[str, str, int]] = set()  # entries of the file this process used
_memo: dict[tuple[str, str, int], re.Pattern] = {}  # this process's objects: a repeated call costs one lookup
_registered = False
_writable: bool | None = None


def _cache_file() -> str | None:
    from kvlogdiag.tomlcache import cache_dir

    d = cache_dir()
    return os.path.join(d, FILE_NAME) if d else None


def _load() -> dict[tuple[str, str, int], list]:
    global _disk
    if _disk is None:
        _disk = {}
        path = _cache_file() if _TYPECODE else None
        if path:
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO planted there never blocks
                with open(fd, "rb") as fh:
                    raw = fh.read(MAX_CACHE_BYTES + 1) if _trusted(os.fstat(fh.fileno())) else b""
                doc = marshal.loads(raw) if 0 < len(raw) <= MAX_CACHE_BYTES else None
                if isinstance(doc, dict) and doc.get("tag") == TAG and isinstance(doc.get("entries"), list):
                    _disk = {(e[0], e[1], e[2]): e[3] for e in doc["entries"]
                             if isinstance(e, list) and len(e) == 4 and isinstance(e[0], str) and isinstance(e[1], str)
                             and isinstance(e[2], int) and isinstance(e[3], list)}
            except Exception:  # noqa: BLE001 - a corrupt, truncated or foreign file of any kind is just a miss
                _disk = {}
    return _disk


def _trusted(st: os.stat_result) -> bool:
    if not stat.S_ISREG(st.st_mode):
        return False
    getuid = getattr(os, "geteuid", None)
    return getuid is None or st.st_uid == getuid()


def _build(pattern: AnyStr, entry: list) -> re.Pattern[AnyStr]:
    flags, code_bytes, groups, groupindex, indexgroup = entry
    code = array.array(_TYPECODE or "I", code_bytes).tolist()
    return _sre.compile(pattern, flags, code, groups, dict(groupindex), tuple(indexgroup))


def _program(pattern: AnyStr, flags: int) -> list:
    """What `re` computes for ``pattern``: the arguments of its final ``_sre.compile`` call."""
    parsed = _sre_parse.parse(pattern, flags)
    code = _sre_compile._code(parsed, flags)
    groupindex = dict(parsed.state.groupdict)
    indexgroup: list[Any] = [None] * parsed.state.groups
    for k, i in groupindex.items():
        indexgroup[i] = k
    return [flags | parsed.state.flags, array.array(_TYPECODE or "I", code).tobytes(), parsed.state.groups - 1, groupindex, indexgroup]


def compile(pattern: AnyStr, flags: int | re.RegexFlag = 0) -> re.Pattern[AnyStr]:  # noqa: A001 - re.compile's name
    """`re.compile(pattern, flags)`, built from the cached program when this exact pattern was compiled before."""
    flags = int(flags)
    if _TYPECODE is None or flags & re.DEBUG:
        return _re_compile(pattern, flags)
    if isinstance(pattern, str):
        key = ("s", pattern, flags)
    elif isinstance(pattern, bytes):
        key = ("b", pattern.decode("latin-1"), flags)
    else:
        return _re_compile(pattern, flags)
    done = _memo.get(key)
    if done is not None:
        return done
    entry = _load().get(key)
    if entry is not None:
        try:
            done = _memo[key] = _build(pattern, entry)
            _used.add(key)
            return done
        except Exception:  # noqa: BLE001 - a foreign or damaged entry: compile it the ordinary way
            pass
    compiled = _memo[key] = _re_compile(pattern, flags)
    if _cache_file() is None:
        return compiled
    try:
        program = _program(pattern, flags)
        built = _build(pattern, program)  # Pattern.__eq__ compares flags, text and program, not the group names
        ok = built == compiled and built.groups == compiled.groups and built.groupindex == compiled.groupindex
    except Exception:  # noqa: BLE001 - whatever the interpreter's internals do, re.compile's object is the answer
        ok = False
    if ok:
        _remember(key, program)
    return compiled


@contextlib.contextmanager
def serving() -> Iterator[None]:
    """While the block runs, ``re.compile`` is `compile`: for importing modules whose module-level patterns
    would otherwise be compiled by `re` at every start — the standard library's and click's under the CLI's
    import (`kvlogdiag.cli.entry`), tabulate's and textwrap's (`kvlogdiag.render.tables`), rich's
    (`kvlogdiag.render.colour`): ~2.5 ms of a small text analyze (docs/performance.md, "Session 10"). The
    objects are equal to what `re` builds (see the module text) but are not in `re`'s own cache (a later
    ``re.match`` of the same text compiles it there). Plain ``re.compile`` while another thread runs (it
    would get these objects too) or when someone else replaced it; the real function again when the block
    ends, however it ends."""
    threads = sys.modules.get("threading")  # not imported yet: no other thread either
    if _TYPECODE is None or re.compile is not _re_compile or (threads is not None and threads.active_count() > 1):
        yield  # not CPython, someone else's stand-in, or another thread that would get recache's objects too
        return
    _load()  # first: reading the file imports modules (kvlogdiag.tomlcache, json) that compile patterns themselves
    re.compile = _serve  # type: ignore[assignment]
    try:
        yield
    finally:
        re.compile = _re_compile


_serving_one = False


def _serve(pattern: AnyStr, flags: int | re.RegexFlag = 0) -> re.Pattern[AnyStr]:
    """`compile` as ``re.compile`` (`serving`); a pattern compiled by what `compile` itself runs goes to `re`."""
    global _serving_one
    if _serving_one:
        return _re_compile(pattern, flags)
    _serving_one = True
    try:
        return compile(pattern, flags)
    finally:
        _serving_one = False


def _remember(key: tuple[str, str, int], payload: list) -> None:
    global _registered
    _new[key] = payload
    if not _registered:
        _registered = True
        atexit.register(flush)


def writable() -> bool:
    """Whether what is computed now can be kept for the next run (the cache directory exists and is writable,
    or can be created)."""
    global _writable
    if _writable is None:
        path = _cache_file() if _TYPECODE else None
        d = os.path.dirname(path) if path else None
        while d and not os.path.lexists(d):  # the nearest existing ancestor must be a writable folder
            parent = os.path.dirname(d)
            d = None if parent == d else parent
        _writable = bool(d) and os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK)  # type: ignore[arg-type]
    return bool(_writable)


def cached(name: str, key: str) -> list | None:
    """``[value]`` when `derived` has a value for (``name``, ``key``) in the cache file, else None (nothing is computed)."""
    entry = _load().get(("d:" + name, key, 0)) if _TYPECODE else None
    if entry is None:
        entry = _new.get(("d:" + name, key, 0))
    return entry if entry is not None and len(entry) == 1 else None


def derived(name: str, key: str, compute: Callable[[], Any], check: Callable[[Any], bool]) -> Any:
    """``compute()``, a JSON value that depends only on ``key`` (and this interpreter), kept in the same file:
    e.g. the keywords of the prefilter regex, which `re`'s parser gives in ~10 ms. A cached value is used only
    when ``check`` accepts it; else it is computed again."""
    k = ("d:" + name, key, 0)
    entry = _load().get(k) if _TYPECODE else None
    if entry is not None and len(entry) == 1:
        try:
            if check(entry[0]):
                _used.add(k)
                return entry[0]
        except Exception:  # noqa: BLE001 - a damaged entry: compute it
            pass
    value = compute()
    if _TYPECODE and _cache_file() is not None:
        import json  # here: this module is imported before the CLI (cli/entry.py), whose json import is then served

        try:
            if json.loads(json.dumps(value)) == value:
                _remember(k, [value])
        except (TypeError, ValueError, RecursionError):
            pass
    return value


def flush() -> None:
    """Write the cache file when `compile` built new programs (atomically; errors are ignored)."""
    global _disk
    if not _new:
        return
    path = _cache_file()
    if not path:
        return
    # what this process used or built goes last (the newest); entries no run has used for a while fall off
    # the front, and when the file would outgrow SOFT_BYTES (each start reads all of it) only those are kept
    old = _load()
    merged = {k: v for k, v in old.items() if k not in _used and k not in _new}
    merged.update((k, old[k]) for k in _used if k in old and k not in _new)
    merged.update(_new)
    if len(merged) > MAX_ENTRIES:
        merged = dict(list(merged.items())[-MAX_ENTRIES:])
    try:
        data = marshal.dumps({"tag": TAG, "entries": [[*k, v] for k, v in merged.items()]}, MARSHAL_VERSION)
        if len(data) > SOFT_BYTES:
            merged = {k: v for k, v in merged.items() if k in _used or k in _new}
            data = marshal.dumps({"tag": TAG, "entries": [[*k, v] for k, v in merged.items()]}, MARSHAL_VERSION)
    except ValueError:  # a value marshal cannot hold (derived values are JSON, so none is expected)
        return
    _new.clear()
    try:
        from kvlogdiag.fileio import replace_atomically

        def write(fd: int, tmp: str) -> None:
            with os.fdopen(fd, "wb") as fh:  # no fsync: a file lost or cut short by a crash is only a miss
                fh.write(data)

        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        replace_atomically(path, ".tmp", write)
        _disk = merged
    except (OSError, ValueError, TypeError):
        pass
