"""Parsed TOML (the rule files, the failure catalogue) cached by content hash in the user cache directory.

Parsing the ~20 built-in rule files and the failure catalogue with tomllib costs ~25 ms of CPU on every
start; reading the same documents back as JSON costs ~2 ms. The cache is keyed by a hash of the
text (BLAKE2b-256, with the Python minor version), so an edited rule file is simply a new entry: the cache can never
give a stale rule. It is only an accelerator — any problem reading or writing it (read-only home, a
corrupt or foreign file) falls back to tomllib silently. Only documents that survive a JSON round trip
unchanged are cached (a TOML date would not).

The file (``toml-cache-v2.marshal``) is `marshal` data: the key → JSON text table, whose ~40 texts (~0.4 MB: every
rule file and its conditions, the catalogues) a start reads for the two or three it parses; as JSON
(``toml-cache-v1.json``, no longer read) that table took ~2-3 ms to decode at each start, as `marshal` ~1, most of it reading the file
(docs/performance.md, "Session 9: small-analyze start-up"). `marshal` is not meant for damaged or hostile bytes,
so, as for the regex cache (`kvlogdiag.recache`), the file is read only when it is a regular file owned by this
user and at most `MAX_CACHE_BYTES`, and only a table of strings to strings with this format's tag is used;
anything else is a miss, and the file is rewritten.

Location: ``$KVLOGDIAG_CACHE_DIR``, else ``$XDG_CACHE_HOME/kvlogdiag``, else ``~/.cache/kvlogdiag``;
``KVLOGDIAG_CACHE_DIR=off`` disables it. At most `MAX_ENTRIES` documents are kept (the newest).
"""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import stat
import sys
import types
from typing import Any

try:  # CPython's built-in BLAKE2: hashlib would load OpenSSL (~3 ms of CPU at every start); its built-in sha256
    # is ~3x slower than BLAKE2 on the ~0.5 MB of rule and catalogue text hashed per start (~2.4 ms against ~0.8)
    from _blake2 import blake2b as _blake2b  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - an interpreter without it
    from hashlib import blake2b as _blake2b


def _lazy(name: str) -> types.ModuleType:
    """``import name``, run on first attribute access (importlib's LazyLoader): a start whose documents all
    come from the cache never imports the TOML parser (~8 ms of CPU: it compiles its regexes at import)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:  # pragma: no cover - the dependency is declared
        return importlib.import_module(name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


#: the TOML parser (``tomllib``, ``tomli`` before 3.11), imported when first used; also for `kvlogdiag.config`
#: and `kvlogdiag.rules.engine`, whose ``except tomllib.TOMLDecodeError`` imports it only when something failed
tomllib = _lazy("tomllib" if sys.version_info >= (3, 11) else "tomli")

MAX_ENTRIES = 256
MAX_CACHE_BYTES = 16 << 20
FILE_NAME = "toml-cache-v2.marshal"
MARSHAL_VERSION = 4  # fixed, not marshal.version: the same bytes from every Python that reads them
TAG = "kvlogdiag toml-cache v2"

_disk: dict[str, str] | None = None  # hash → JSON text, as read from the cache file
_used: dict[str, str] = {}  # entries looked up or added by `loads(..., remember=True)` since the last flush
_dirty = False


def cache_dir() -> str | None:
    d = os.environ.get("KVLOGDIAG_CACHE_DIR")
    if d:
        return None if d.lower() in ("off", "0", "no", "false") else d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kvlogdiag")


def _key(text: str) -> str:
    data = f"{sys.version_info[0]}.{sys.version_info[1]}\0".encode() + text.encode("utf-8", "surrogatepass")
    return _blake2b(data, digest_size=32).hexdigest()


def _load_disk() -> dict[str, str]:
    global _disk
    if _disk is None:
        _disk = {}
        d = cache_dir()
        if d:
            try:
                fd = os.open(os.path.join(d, FILE_NAME), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO never blocks
                with open(fd, "rb") as fh:
                    raw = fh.read(MAX_CACHE_BYTES + 1) if trusted(os.fstat(fh.fileno())) else b""
                doc = marshal.loads(raw) if 0 < len(raw) <= MAX_CACHE_BYTES else None
                if isinstance(doc, dict) and doc.get("tag") == TAG and isinstance(doc.get("entries"), dict):
                    _disk = {k: v for k, v in doc["entries"].items() if isinstance(k, str) and isinstance(v, str)}
            except Exception:  # noqa: BLE001 - a missing, corrupt, truncated or foreign file of any kind is just a miss
                _disk = {}
    return _disk


def trusted(st: os.stat_result) -> bool:
    """A cache file ``marshal`` may read: a regular file owned by this user."""
    if not stat.S_ISREG(st.st_mode):
        return False
    getuid = getattr(os, "geteuid", None)
    return getuid is None or st.st_uid == getuid()


def loads(text: str, remember: bool = False) -> dict[str, Any]:
    """``tomllib.loads(text)``, from the cache when this exact text was parsed before. Raises what
    tomllib raises. With ``remember``, the result is kept for the next `flush`."""
    global _dirty
    key = _key(text)
    hit = _load_disk().get(key) or _used.get(key)
    if hit is not None:
        try:
            data = json.loads(hit)
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict):
            if remember:
                _used[key] = hit
            return data
    data = tomllib.loads(text)
    if remember:
        try:
            enc = json.dumps(data, ensure_ascii=False)  # key order kept: a rule's [let] names are sequential
            if json.loads(enc) == data:
                _used[key] = enc
                _dirty = True
        except (TypeError, ValueError, RecursionError):
            pass  # a value JSON cannot carry (a TOML date): parsed every time
    return data


def get_json(text: str) -> Any:
    """A value stored with `put_json` under ``text`` (e.g. a rule file's parsed conditions), or None; kept
    for the next `flush` like a `loads` entry looked up with ``remember``."""
    key = _key("\0json\0" + text)
    hit = _load_disk().get(key) or _used.get(key)
    if hit is None:
        return None
    try:
        value = json.loads(hit)
    except (ValueError, RecursionError):
        return None
    _used[key] = hit
    return value


def put_json(text: str, value: Any) -> None:
    """Keep ``value`` (plain JSON data) under ``text`` in the cache file, written by the next `flush`."""
    global _dirty
    try:
        enc = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return
    _used[_key("\0json\0" + text)] = enc
    _dirty = True


def flush() -> None:
    """Write the cache file when `loads` parsed something new (atomically; errors are ignored)."""
    global _dirty, _disk
    if not _dirty:
        return
    _dirty = False
    d = cache_dir()
    if not d:
        return
    merged = dict(_load_disk())
    for k in _used:
        merged.pop(k, None)
    merged.update(_used)  # the entries in use now are the newest: kept when the cache is trimmed
    if len(merged) > MAX_ENTRIES:
        merged = dict(list(merged.items())[-MAX_ENTRIES:])
    try:
        from kvlogdiag.fileio import replace_atomically

        data = marshal.dumps({"tag": TAG, "entries": merged}, MARSHAL_VERSION)

        def write(fd: int, tmp: str) -> None:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())

        os.makedirs(d, mode=0o700, exist_ok=True)
        replace_atomically(os.path.join(d, FILE_NAME), ".tmp", write)
        _disk = merged
    except (OSError, ValueError):
        pass
