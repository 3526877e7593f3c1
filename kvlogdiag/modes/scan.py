"""``kvlogdiag scan PATH...``: an archive of logs → one row per server start (run) of each input file.

* Paths are files, directories (walked recursively, symlinks followed, loops cut by a visited set
  of (st_dev, st_ino)) or glob patterns. Files found *inside directories* are kept when their name
  matches an ``--include`` glob (default `DEFAULT_INCLUDE`) and no ``--exclude`` glob; files named
  on the command line (or matched by a glob argument) are always kept unless excluded.
* Every file found becomes one row per server start (a file with no start at all is one row). A file that cannot be read (permission, corrupt or
  truncated compression, over ``--max-bytes``, not a regular file, broken symlink) is a row with
  ``error`` set; the scan goes on.
* Files are analysed in parallel (``-j``, processes, chunks of files per task); each worker builds
  one `Analyzer` — the same analysis path as ``kvlogdiag analyze``.
* ``--state FILE`` remembers each file's size, mtime_ns, a hash of its first 64 KiB and its row, so
  a re-scan only reads new or changed files; it is written atomically (`kvlogdiag.fileio.write_atomic`:
  temp file, fsync, rename; the mode of the file it replaces, or 0666 minus the umask), like ``-o``.

pandas (and pyarrow for Parquet) are imported inside the command only, so other commands start fast.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import sys
from typing import Any, Iterable

from kvlogdiag import __version__
from kvlogdiag.derive.figures import as_float
from kvlogdiag.errors import KvlogdiagError
from kvlogdiag.fileio import read_regular, replace_atomically, write_atomic
from kvlogdiag.input.reader import InputError, make_line, open_input
from kvlogdiag.modes.deployment import peer_record
from kvlogdiag.pipeline import Analyzer
from kvlogdiag.render.analysis import md_escape
from kvlogdiag.render.redact import escape_controls
from kvlogdiag.render.units import fmt_duration
from kvlogdiag.result import Analysis, Severity
from kvlogdiag.rules.engine import RuleLoadError, builtin_rule_files

DEFAULT_INCLUDE = ("*.log*", "*.out*", "*.txt*", "*.gz", "*.zst", "*.xz", "*.bz2")
HEAD_BYTES = 64 << 10
STATE_FORMAT = "kvlogdiag-scan-state"
STATE_VERSION = 1
ROW_SCHEMA = 5  # bump when the row columns change: old state rows are then re-computed
CHECKPOINT_S = 10.0  # --state: write progress this often during a long scan
DETAIL_KEY = "_detail"  # scan --html: a row's run details (kvlogdiag.modes.archive_report), stripped from every output

COLUMNS = (
    "source", "host", "pod", "container", "runs", "run", "run_first_line", "run_last_line", "lines_read", "vllm_version", "engine", "platform", "model",
    "tp", "pp", "dp", "max_model_len", "block_size", "gpu_memory_utilization", "kv_cache_dtype",
    "available_gib_min", "tokens_min", "bytes_per_token", "max_concurrency_min", "error_kinds",
    "startup_failed", "cause_class",
    "n_error", "n_warning", "n_info", "findings", "error",
)
INT_COLUMNS = ("runs", "run", "run_first_line", "run_last_line", "lines_read", "tp", "pp", "dp", "max_model_len", "block_size", "tokens_min",
               "n_error", "n_warning", "n_info")
BOOL_COLUMNS = ("startup_failed",)
FLOAT_COLUMNS = ("gpu_memory_utilization", "available_gib_min", "bytes_per_token", "max_concurrency_min")
OUTPUT_FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "jsonl",
                  ".ndjson": "jsonl", ".md": "markdown", ".markdown": "markdown"}


# --- discovery --------------------------------------------------------------------------------


class Entry:
    """One input found: where it is, its identity and stat data, or why it cannot be used."""

    __slots__ = ("source", "abspath", "size", "mtime_ns", "ident", "error", "head")

    def __init__(self, source: str, abspath: str, size: int | None = None, mtime_ns: int | None = None,
                 ident: tuple[int, int] | None = None, error: str | None = None):
        self.source, self.abspath, self.size, self.mtime_ns = source, abspath, size, mtime_ns
        self.ident, self.error = ident, error
        self.head: str | None = None  # head_hash, filled in when a --state is used


def _stat_error(path: str, exc: OSError) -> str:
    import errno as _errno

    if exc.errno == _errno.ELOOP:
        return "symlink loop"
    if isinstance(exc, FileNotFoundError):
        return "broken symlink" if os.path.islink(path) else "no such file"
    if isinstance(exc, PermissionError):
        return "permission denied"
    return f"cannot stat ({exc.strerror or exc})"


def _kind_name(mode: int) -> str:
    import stat

    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _matches(name: str, rel: str, patterns: Iterable[str]) -> bool:
    from fnmatch import fnmatch

    return any(fnmatch(name, p) or fnmatch(rel, p) for p in patterns)


class Finder:
    """Expand path arguments into entries (one per distinct file)."""

    def __init__(self, include: tuple[str, ...], exclude: tuple[str, ...]):
        self.include = include or DEFAULT_INCLUDE
        self.exclude = exclude
        self.entries: list[Entry] = []
        self.missing: list[str] = []
        self._files: dict[tuple[int, int], Entry] = {}
        self._dirs: set[tuple[int, int]] = set()

    def add_argument(self, arg: str) -> None:
        if os.path.isdir(arg):
            self._walk(arg)
        elif os.path.lexists(arg):
            self._file(arg, arg, explicit=True)
        elif "**" in arg:
            # glob's own ** follows directory symlinks into loops: walk the fixed prefix ourselves
            if not self._glob_walk(arg):
                self.missing.append(arg)
        elif any(ch in arg for ch in "*?["):
            import glob

            matches = sorted(glob.glob(arg))
            if not matches:
                self.missing.append(arg)
            for m in matches:
                if os.path.isdir(m):
                    self._walk(m)
                else:
                    self._file(m, m, explicit=True)
        else:
            self.missing.append(arg)

    def _file(self, path: str, rel: str, explicit: bool) -> None:
        name = os.path.basename(path)
        if self.exclude and _matches(name, rel, self.exclude):
            return
        if not explicit and not _matches(name, rel, self.include):
            return
        abspath = os.path.abspath(path)
        try:
            st = os.stat(path)
        except OSError as exc:
            self.entries.append(Entry(path, abspath, error=_stat_error(path, exc)))
            return
        import stat

        if not stat.S_ISREG(st.st_mode):
            if stat.S_ISDIR(st.st_mode):
                return  # reached through a symlink and walked elsewhere, or not an input
            self.entries.append(Entry(path, abspath, error=f"{_kind_name(st.st_mode)}, not a regular file"))
            return
        ident = (st.st_dev, st.st_ino)
        seen = self._files.get(ident)
        if seen is not None:
            # the same file again (symlink or hard link): one row, named by the real file rather than a link
            if os.path.islink(seen.source) and not os.path.islink(path):
                seen.source, seen.abspath = path, abspath
            return
        e = Entry(path, abspath, st.st_size, st.st_mtime_ns, ident)
        self._files[ident] = e
        self.entries.append(e)

    def _glob_walk(self, pattern: str) -> bool:
        """Files below the pattern's fixed prefix whose path matches it (``**`` = any number of folders)."""
        import re

        parts = pattern.split("/")
        fixed: list[str] = []
        for p in parts[:-1]:
            if any(ch in p for ch in "*?["):
                break
            fixed.append(p)
        base = "/".join(fixed) or ("/" if pattern.startswith("/") else ".")
        if not os.path.isdir(base):
            return False
        rx = re.compile(glob_regex(pattern))
        matched = 0

        def on_file(full: str, rel: str) -> None:
            nonlocal matched
            path = full[2:] if base == "." and full.startswith("./") else full
            if rx.fullmatch(path):
                matched += 1
                self._file(path, path, explicit=True)

        self._walk(base, on_file)
        return matched > 0

    def _walk(self, top: str, on_file=None) -> None:
        try:
            st = os.stat(top)
            self._dirs.add((st.st_dev, st.st_ino))
        except OSError:
            pass

        def onerror(exc: OSError) -> None:
            where = exc.filename or top
            self.entries.append(Entry(where, os.path.abspath(where), error=f"cannot list directory: {_stat_error(where, exc)}"))

        for dirpath, dirnames, filenames in os.walk(top, onerror=onerror, followlinks=True):
            keep = []
            for d in sorted(dirnames):
                full = os.path.join(dirpath, d)
                try:
                    dst = os.stat(full)
                except OSError as exc:
                    # a symlink to nowhere or to itself: os.walk lists looping links as directories on some systems
                    if not (self.exclude and _matches(d, os.path.relpath(full, top), self.exclude)) and _matches(d, os.path.relpath(full, top), self.include):
                        self.entries.append(Entry(full, os.path.abspath(full), error=_stat_error(full, exc)))
                    continue
                key = (dst.st_dev, dst.st_ino)
                if key in self._dirs:
                    continue  # a symlink loop or a directory reached twice
                self._dirs.add(key)
                keep.append(d)
            dirnames[:] = keep
            for f in sorted(filenames):
                full = os.path.join(dirpath, f)
                if on_file is not None:
                    on_file(full, os.path.relpath(full, top))
                else:
                    self._file(full, os.path.relpath(full, top), explicit=False)


def glob_regex(pattern: str) -> str:
    """A shell glob as a regex over '/'-separated paths: ``*`` and ``?`` stay within a folder, ``**/`` spans folders."""
    import re

    out = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 2)
            if j < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def head_hash(path: str) -> str | None:
    """sha256 of the first 64 KiB (raw bytes, compressed or not); None when the file cannot be read."""
    import hashlib

    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read(HEAD_BYTES)).hexdigest()
    except OSError:
        return None


# --- rows ------------------------------------------------------------------------------------

_K8S_PODS = None
_K8S_CONTAINERS = None


def path_identity(path: str) -> tuple[str | None, str | None]:
    """(host, pod) from well-known log paths: /var/log/pods/<ns>_<pod>_<uid>/…, /var/log/containers/<pod>_<ns>_<ctr>-<id>.log."""
    import re

    global _K8S_PODS, _K8S_CONTAINERS
    if _K8S_PODS is None:
        _K8S_PODS = re.compile(r"(?:^|/)pods/(?P<ns>[a-z0-9-]+)_(?P<pod>[a-z0-9][a-z0-9.-]*)_[0-9a-f-]{8,}/")
        _K8S_CONTAINERS = re.compile(r"(?:^|/)containers/(?P<pod>[a-z0-9][a-z0-9.-]*)_(?P<ns>[a-z0-9-]+)_[\w.-]+-[0-9a-f]{64}\.log")
    p = path.replace(os.sep, "/")
    m = _K8S_PODS.search(p) or _K8S_CONTAINERS.search(p)
    return None, (m.group("pod") if m else None)


def envelope_host(path: str, max_bytes: int) -> str | None:
    """The syslog/journald host of the first lines, if the log carries that envelope (cheap: 16 KiB)."""

    try:
        if _URL_LIKE.match(path):
            from kvlogdiag.input.remote import open_remote

            fh = open_remote(path, max_bytes)
        else:
            fh = open_input(path, max_bytes)
    except Exception:  # noqa: BLE001 - best effort
        return None
    try:
        head = fh.read(16 << 10)
    except Exception:  # noqa: BLE001
        return None
    finally:
        try:
            fh.close()
        except Exception:  # noqa: BLE001
            pass
    for i, raw in enumerate(head.split(b"\n")[:5]):
        meta = make_line(i + 1, raw).meta
        if meta and meta.get("host"):
            return str(meta["host"])
    return None


def fail_exit_rows(rows: list[dict], fail_on: str) -> int:
    """1 (findings) when a row counts a finding at or above ``fail_on``, else 0."""
    limit = Severity.threshold(fail_on)
    return int(any((r.get(f"n_{s.label}") or 0) > 0 for r in rows for s in Severity if s >= limit))


def empty_row(source: str, error: str | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {c: None for c in COLUMNS}
    row["source"] = source
    row["error"] = error
    host, pod = path_identity(source)
    row["host"], row["pod"] = host, pod
    return row


def row_from_analysis(source: str, a: Analysis) -> dict[str, Any]:
    """The flat row of one run's analysis (JSON-safe values only)."""
    row = empty_row(source)
    v, c, kv, e = a.vllm, a.config, a.kv_cache, a.errors
    conc = [m["concurrency"] for m in kv.max_concurrency if m.get("concurrency") is not None]
    kinds = [k for k, on in (("insufficient_kv", bool(e.get("insufficient_kv"))), ("no_available_memory", bool(e.get("no_available_memory"))),
                             ("startup_failed", bool(e.get("startup_failed")))) if on]
    fs = a.findings
    codes = list(dict.fromkeys(f.rule for f in fs))
    row.update({
        "runs": a.run.count, "run": a.run.index + 1, "run_first_line": a.run.first_line, "run_last_line": a.run.last_line,
        "lines_read": a.lines_read,
        "vllm_version": v.version, "engine": v.engine, "platform": v.platform,
        "model": c.get("model"), "tp": c.get("tensor_parallel_size"), "pp": c.get("pipeline_parallel_size"),
        "dp": c.get("data_parallel_size"), "max_model_len": c.get("max_model_len"), "block_size": c.get("block_size"),
        "gpu_memory_utilization": as_float(c.get("gpu_memory_utilization")), "kv_cache_dtype": c.get("kv_cache_dtype"),
        "available_gib_min": as_float(kv.kv_memory_gib_min),
        "tokens_min": min(kv.tokens) if kv.tokens else None,
        "bytes_per_token": as_float(kv.bytes_per_token),
        "max_concurrency_min": as_float(min(conc)) if conc else None,
        "error_kinds": ",".join(kinds) or None,
        "startup_failed": bool((a.startup or {}).get("failed")),
        "cause_class": (a.startup or {}).get("cause_class"),
        "n_error": sum(1 for f in fs if f.severity == Severity.ERROR),
        "n_warning": sum(1 for f in fs if f.severity == Severity.WARNING),
        "n_info": sum(1 for f in fs if f.severity == Severity.INFO),
        "findings": ",".join(codes) or None,
        "error": None,
        # not a column: the findings themselves, for scan --format sarif|github|junit (kvlogdiag/render/ci.py)
        "_findings": [{"rule": f.rule, "name": f.name, "severity": f.severity.label, "message": f.message,
                       "fix": f.fix, "line": f.line} for f in fs],
        # not a column: what `scan --group-by` groups on (modes/deployment.py, deployment_column)
        "deployment_peer": peer_record(a),
    })
    return row


def row_columns(rows: list[dict]) -> tuple[str, ...]:
    """The columns of these rows: `COLUMNS`, and ``deployment`` after them when ``--group-by`` set it."""
    return COLUMNS + ("deployment",) if any("deployment" in r for r in rows) else COLUMNS


# --- workers ---------------------------------------------------------------------------------

_WORKER: dict[str, Any] = {}
# set by the scan command's SIGTERM handler; the loops below stop at their next safe point (between files
# or batches), as Ctrl-C does — an exception raised from a signal handler could land in pool or fork code
STOP_REQUESTED: list[bool] = []
_FORKED_FROM: list = []  # the parent's Analyzer while it forks pool workers (only a fork child sees it)


def _die_with_parent(parent: int) -> None:
    """Linux: the kernel sends this worker SIGKILL when the scan process dies, however it dies (SIGKILL
    included), so no worker is left blocked in a pipe write holding the caller's stdout."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):  # pragma: no cover - not Linux: the pool's own EOF handling remains
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def freeze_heap() -> None:
    """Collect once, then move every object alive (modules, catalogue, rules, the Analyzer) out of the
    collector's generations (`gc.freeze`): a scan allocates cyclic garbage with every file (an extractor and its
    bound handlers), and each full collection it triggers would walk the whole long-lived heap again — ~0.6 ms
    of CPU per small log, a fifth of its cost (docs/performance.md, session 8). Only in a process the scan
    owns (its own, a pool worker, a worker of its LocalCluster): frozen objects are never freed."""
    import gc

    gc.collect()
    gc.freeze()


def _init_worker(options, max_bytes: int, window=None, timelines: bool = False, parent: int | None = None) -> None:
    """Process pool initialiser: one Analyzer per process (rules loaded once)."""
    import signal

    if parent is not None and sys.platform.startswith("linux"):
        _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ... and SIGTERM (it checkpoints, then ends the workers)
    parent_analyzer = _FORKED_FROM[0] if _FORKED_FROM else None
    if parent_analyzer is not None and parent_analyzer.options is options:
        # forked: the parent's loaded rules are in this process already (~30 ms of CPU per worker to load
        # again), the very ones `-j 1` evaluates
        _WORKER["analyzer"] = Analyzer(options, rules=parent_analyzer.rules)
    else:
        _WORKER["analyzer"] = Analyzer(options)
    _WORKER["analyzer"].window, _WORKER["analyzer"].timelines = window, timelines  # --since/--until, --html
    _WORKER["max_bytes"] = max_bytes
    freeze_heap()


def analyze_file(analyzer, source: str, path: str, max_bytes: int) -> list[dict[str, Any]]:
    """One file → one row per run (per container of an interleaved multi-container log, each its own
    analysis); never raises for a bad input (one row whose ``error`` says why)."""

    from kvlogdiag.timeline import WindowEmpty

    try:
        parts = _analyze_path(analyzer, path, max_bytes)
    except WindowEmpty as exc:  # --since/--until: no server start of this file in the window → no row
        return [empty_row(source, "no line timestamps: --since/--until cannot be applied")] if exc.no_times else []
    except InputError as exc:
        msg = str(exc)
        if msg.startswith(path + ": "):
            msg = msg[len(path) + 2:]
        return [empty_row(source, msg)]
    except RuleLoadError as exc:  # --strict-rules
        return [empty_row(source, f"rule error: {exc}")]
    except MemoryError:
        return [empty_row(source, "out of memory while reading")]
    except Exception as exc:  # noqa: BLE001 - one bad file must not stop an archive scan
        return [empty_row(source, f"internal error: {type(exc).__name__}: {exc}")]
    rows = []
    for a in parts:
        for run in a.runs:
            row = row_from_analysis(source, run)
            row["container"] = a.container
            if analyzer.timelines:  # scan --html: the run's timeline and findings ride along (never a column)
                from kvlogdiag.modes.archive_report import run_detail

                row[DETAIL_KEY] = run_detail(run, analyzer.last_feed)
            if run.extra.get("truncated"):  # read in part (a cut archive, --max-bytes): the figures are of the lines read
                row["error"] = "truncated: " + run.extra["truncated"]["message"]
            rows.append(row)
    host = None
    for row in rows:
        if row["host"] is None:
            host = host or envelope_host(path, max_bytes)
            row["host"] = host
    return rows


def _analyze_path(analyzer, path: str, max_bytes: int) -> list:
    """``analyzer.analyze_source_split``, for a URL through `kvlogdiag.input.remote` (fsspec)."""
    if not _URL_LIKE.match(path):
        return analyzer.analyze_source_split(path, max_bytes)
    from kvlogdiag.input.remote import open_remote

    fh = open_remote(path, max_bytes)
    try:
        return analyzer.analyze_stream_split(fh, path)
    finally:
        try:
            fh.close()
        except Exception:  # noqa: BLE001 - closing a broken stream must not hide the real error
            pass


_URL_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _work(batch: list[tuple[str, str]]) -> tuple[list[list[dict]], list[str]]:
    analyzer = _WORKER["analyzer"]
    rows = [analyze_file(analyzer, src, path, _WORKER["max_bytes"]) for src, path in batch]
    errors = [e.message for e in analyzer.rule_errors]
    del analyzer.rule_errors[:]
    return rows, errors


# --- state -----------------------------------------------------------------------------------


def fingerprint(analyzer, max_bytes: int) -> str:
    """What the rows depend on besides the file: kvlogdiag version, rules, options, --max-bytes."""
    import dataclasses
    import hashlib
    import json


    h = hashlib.sha256()
    h.update(f"{__version__}|{ROW_SCHEMA}|{max_bytes}|".encode())
    opts = dataclasses.asdict(analyzer.options)
    h.update(json.dumps(opts, sort_keys=True, default=str).encode())
    for name, content in builtin_rule_files():
        h.update(name.encode() + b"\0" + content + b"\0")
    for rule in analyzer.rules.rules:
        if not rule.builtin:
            try:
                with open(rule.path, "rb") as fh:
                    h.update(rule.path.encode() + b"\0" + fh.read() + b"\0")
            except OSError:
                h.update(rule.path.encode())
    h.update(",".join(r.code for r in analyzer.rules.rules).encode())
    window = getattr(analyzer, "window", None)
    if window is not None:  # --since/--until change what every row counts
        h.update(b"window|" + window.fingerprint().encode())
    return h.hexdigest()


class StateError(KvlogdiagError):
    pass


MAX_STATE_BYTES = 2 << 30  # a state of 1 M files is ~1.5 GB; beyond that it is not one of ours


def load_state(path: str) -> dict:
    """The previous state, or an empty one; StateError when the file exists but is not a state file
    (not a regular file, too large, not JSON, or fields of the wrong type: a hand-edited file)."""
    import json

    try:
        raw = read_regular(path, MAX_STATE_BYTES)
    except FileNotFoundError:
        return {"format": STATE_FORMAT, "version": STATE_VERSION, "fingerprint": None, "files": {}}
    except OSError as exc:
        raise StateError(f"{path}: cannot read the scan state ({exc.strerror or exc})") from None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise StateError(f"{path}: not a readable scan state ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != STATE_FORMAT or not isinstance(data.get("files"), dict):
        raise StateError(f"{path}: not a kvlogdiag scan state file")
    if data.get("version") != STATE_VERSION:
        return {"format": STATE_FORMAT, "version": STATE_VERSION, "fingerprint": None, "files": {}}
    if not isinstance(data.get("fingerprint"), (str, type(None))):
        raise StateError(f"{path}: not a valid scan state: 'fingerprint' must be text")
    for key, rec in data["files"].items():
        why = _bad_state_record(rec)
        if why:
            raise StateError(f"{path}: not a valid scan state: files[{key[:200]!r}]{why}")
    return data


def _bad_state_record(rec: Any) -> str | None:
    """What is wrong with one file's state record (None when it is well-formed)."""
    if not isinstance(rec, dict):
        return " must be an object"
    for k in ("size", "mtime_ns"):
        if not (isinstance(rec.get(k), int) and not isinstance(rec.get(k), bool)):
            return f".{k} must be an integer"
    if not isinstance(rec.get("head"), (str, type(None))):
        return ".head must be text or null"
    rows = rec.get("rows")
    if not isinstance(rows, list):
        return ".rows must be a list"
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            return f".rows[{i}] must be an object"
        for c, v in row.items():
            if v is None:
                continue
            if c == "_findings":
                if not isinstance(v, list) or not all(isinstance(d, dict) and isinstance(d.get("rule"), str)
                                                      and d.get("severity") in ("error", "warning", "info")
                                                      and isinstance(d.get("message", ""), str)
                                                      and (d.get("line") is None or (isinstance(d["line"], int)
                                                                                     and not isinstance(d["line"], bool)))
                                                      for d in v):
                    return f".rows[{i}]._findings must be a list of findings"
                continue
            if c in INT_COLUMNS:
                ok = isinstance(v, int) and not isinstance(v, bool)
                want = "an integer"
            elif c in FLOAT_COLUMNS:
                ok = isinstance(v, (int, float)) and not isinstance(v, bool)
                want = "a number"
            elif c in BOOL_COLUMNS:
                ok = isinstance(v, bool)
                want = "true or false"
            else:
                ok = isinstance(v, str)
                want = "text"
            if not ok:
                return f".rows[{i}].{c} must be {want} or null, not {json_type(v)}"
    return None


def json_type(v: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "text", list: "a list", dict: "an object"}.get(
        type(v), type(v).__name__)


def save_state(path: str, fp: str, files: dict[str, dict]) -> None:
    import json

    doc = {"format": STATE_FORMAT, "version": STATE_VERSION, "fingerprint": fp, "files": files}
    write_atomic(path, json.dumps(doc, ensure_ascii=False, allow_nan=False, sort_keys=True))


# --- output ----------------------------------------------------------------------------------


def to_frame(rows: list[dict]):
    import pandas as pd

    data: dict[str, Any] = {}
    columns = row_columns(rows)
    for c in columns:
        vals = [r.get(c) for r in rows]
        if c in INT_COLUMNS:
            data[c] = pd.array([None if v is None or isinstance(v, bool) else int(v) for v in vals], dtype="Int64")
        elif c in FLOAT_COLUMNS:
            data[c] = pd.array([float("nan") if v is None else float(v) for v in vals], dtype="float64")
        elif c in BOOL_COLUMNS:
            data[c] = pd.array([None if v is None else bool(v) for v in vals], dtype="boolean")
        else:
            data[c] = pd.array([None if v is None else str(v) for v in vals], dtype=object)
    return pd.DataFrame(data, columns=list(columns))


_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def formula_safe(df):
    """A copy of ``df`` whose text cells cannot be read as a spreadsheet formula: a cell starting with
    ``=``, ``+``, ``-``, ``@`` (or a tab / carriage return, which some spreadsheets skip) gets a leading
    ``'`` (OWASP's CSV-injection advice) — unless it is a plain number such as ``-1.5``."""
    out = df.copy()
    for c in out.columns:
        if c in INT_COLUMNS or c in FLOAT_COLUMNS or c in BOOL_COLUMNS:
            continue
        out[c] = out[c].map(lambda v: "'" + v if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r")
                            and not _NUMBER.fullmatch(v) else v)
    return out


def _markdown(rows: list[dict]) -> str:
    from tabulate import tabulate


    def cell(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return f"{v:.6g}"
        return escape_controls(md_escape(v))

    columns = row_columns(rows)
    body = tabulate([[cell(r.get(c)) for c in columns] for r in rows], headers=list(columns), tablefmt="github",
                    disable_numparse=True)
    return f"# kvlogdiag scan\n\n{len(rows)} files\n\n{body}\n"


def render_rows(fmt: str, rows: list[dict]) -> str:
    """The rows as text: csv, json (a list of objects), jsonl or markdown."""
    import json

    if fmt == "csv":
        return formula_safe(to_frame(rows)).to_csv(index=False)
    columns = row_columns(rows)  # once: per row it made a JSON output quadratic (10,000 rows: ~45 s of CPU)
    if fmt == "json":
        return json.dumps([{c: r.get(c) for c in columns} for r in rows], indent=2, ensure_ascii=False,
                          allow_nan=False) + "\n"
    if fmt == "jsonl":
        return "".join(json.dumps({c: r.get(c) for c in columns}, ensure_ascii=False, allow_nan=False) + "\n"
                       for r in rows)
    return _markdown(rows)


def write_output(path: str, fmt: str, rows: list[dict]) -> None:
    if fmt == "parquet":
        def write(fd: int, tmp: str) -> None:
            os.close(fd)
            to_frame(rows).to_parquet(tmp, index=False)

        replace_atomically(path, ".parquet", write)
    else:
        write_atomic(path, render_rows(fmt, rows))


def summary_tables(rows: list[dict], rules_by_code: dict, elapsed: float, counts: dict) -> str:
    """The terminal summary: runs by severity, top rules, bytes per token by model and version.

    Plain Python over the rows (pandas costs ~0.4 s of CPU to import, more than the scan of a few hundred
    small logs); the cells are those of the rows' typed columns (`to_frame`): counts as ints, bytes per
    token as floats (a missing or NaN one left out), text as ``str``."""
    from tabulate import tabulate

    def text(v: Any) -> str | None:
        return None if v is None else str(v)

    def count(v: Any) -> int:
        return 0 if v is None or isinstance(v, bool) else int(v)

    nfiles = len({text(r.get("source")) for r in rows} - {None})
    out = [f"{nfiles:,} files, {len(rows):,} server starts ({counts['analysed']:,} files read, {counts['cached']:,} unchanged from state"
           + (f", {counts['dropped']:,} dropped from state" if counts.get("dropped") else "")
           + f") in {fmt_duration(elapsed)}"]

    def worst(r: dict) -> str:
        if r.get("error") is not None:
            return "unreadable"
        for s in ("error", "warning", "info"):
            if count(r.get(f"n_{s}")) > 0:
                return s
        return "clean"

    if rows:
        w = [worst(r) for r in rows]
        order = ["error", "warning", "info", "clean", "unreadable"]
        table = [[k, f"{w.count(k):,}"] for k in order if w.count(k)]
        out += ["", "Runs by worst finding", tabulate(table, headers=["severity", "runs"], tablefmt="simple",
                                                      disable_numparse=True, colalign=("left", "right"))]
        counter: dict[str, int] = {}
        for r in rows:
            codes = text(r.get("findings"))
            if codes is None:
                continue
            for code in dict.fromkeys(codes.split(",")):
                counter[code] = counter.get(code, 0) + 1
        top = []
        for code, n in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])):
            rule = rules_by_code.get(code)
            top.append([code, rule.name if rule is not None else "", f"{n:,}"])
        if top:
            out += ["", "Top rules (runs in which each fired)",
                    tabulate(top[:15], headers=["rule", "name", "runs"], tablefmt="simple", disable_numparse=True,
                             colalign=("left", "left", "right"))]
        groups: dict[tuple[str, str], list[float]] = {}
        for r in rows:
            v = r.get("bytes_per_token")
            bpt = float("nan") if v is None else float(v)
            if math.isnan(bpt):
                continue
            model, version = text(r.get("model")), text(r.get("vllm_version"))
            groups.setdefault(("?" if model is None else model, "?" if version is None else version), []).append(bpt)
        if groups:
            table = [[model, version, f"{len(v):,}", f"{min(v):,.0f}", f"{statistics.median(v):,.0f}", f"{max(v):,.0f}"]
                     for (model, version), v in sorted(groups.items())[:30]]
            out += ["", "bytes per token (per rank) by model and vLLM version",
                    tabulate(table, headers=["model", "vLLM", "runs", "min", "median", "max"], tablefmt="simple",
                             disable_numparse=True, colalign=("left", "left", "right", "right", "right", "right"))]
        bad = [r for r in rows if r.get("error") is not None]
        if bad:
            unreadable = [[text(r.get("source")), text(r.get("error"))] for r in bad[:10]]
            out += ["", f"Unreadable ({len(bad):,})", tabulate(unreadable, headers=["file", "error"], tablefmt="simple",
                                                              maxcolwidths=[60, 70])]
            if len(bad) > 10:
                out.append(f"... and {len(bad) - 10:,} more (see --output)")
    return "\n".join(out) + "\n"


# --- running a scan (the command is kvlogdiag/cli/scan.py) ----------------------------------------


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _stderr_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _run(todo: list[Entry], analyzer, max_bytes: int, njobs: int, show: bool, rows: dict, remember, rule_errors: list,
         checkpoint, engine: str = "local", scheduler: str | None = None) -> bool:
    """Analyse ``todo`` (in-process for -j1 or a handful of files, else a process pool; ``engine="dask"``:
    `kvlogdiag.modes.scan_dask`). True when interrupted."""
    import time

    bar = None
    task = None
    last_cp = time.monotonic()

    def done(batch_entries: list[Entry], batch_rows: list[list[dict]]) -> None:
        nonlocal last_cp
        if STOP_REQUESTED:
            raise KeyboardInterrupt
        for e, file_rows in zip(batch_entries, batch_rows):
            rows[e.abspath] = file_rows
            remember(e, file_rows)
        if bar is not None:
            bar.advance(task, len(batch_rows))
        if time.monotonic() - last_cp >= CHECKPOINT_S:
            checkpoint()
            last_cp = time.monotonic()

    def start_bar():
        nonlocal bar, task
        if show and todo:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            bar = Progress(TextColumn("scan"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                           transient=True, console=_console())
            bar.start()
            task = bar.add_task("scan", total=len(todo))

    try:
        if engine == "dask":
            from kvlogdiag.modes.scan_dask import run_dask

            run_dask(todo, analyzer.options, max_bytes, njobs, scheduler, done, rule_errors, start_bar)
            return False
        if njobs <= 1 or len(todo) < 16:
            frozen = len(todo) >= 16  # a full collection costs a few ms: paid back after a few files
            if frozen:
                freeze_heap()
            start_bar()
            try:
                for e in todo:
                    done([e], [analyze_file(analyzer, e.source, e.abspath, max_bytes)])
            finally:
                if frozen:  # this process may be a caller's (the scan called as a library, the tests)
                    import gc

                    gc.unfreeze()
            rule_errors.extend(x.message for x in analyzer.rule_errors)
            return False
        return _run_pool(todo, analyzer, max_bytes, njobs, rule_errors, done, start_bar)
    except KeyboardInterrupt:
        return True
    finally:
        if bar is not None:
            bar.stop()


def _run_pool(todo, analyzer, max_bytes, njobs, rule_errors, done, start_bar) -> bool:
    """Batches on a process pool. A worker that dies (OOM kill, a crash in a C extension) breaks the whole
    `ProcessPoolExecutor`, failing every batch it held: so at most ``2 * njobs`` batches are in flight, a
    broken pool is replaced and the rest goes on, and the files of every failed batch are run again one at
    a time, each alone in a process (`_isolate`): an innocent file gets its real row, and only a file that
    kills its worker on its own becomes an error row."""
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    size = max(1, min(64, len(todo) // (njobs * 8) or 1))
    # biggest files first, so one large log does not finish last on its own
    order = sorted(todo, key=lambda e: -(e.size or 0))
    batches = _chunks(order, size)
    window = 2 * njobs
    suspects: list[Entry] = []
    pool = _new_pool(analyzer, max_bytes, min(njobs, len(batches)))
    try:
        queue = list(reversed(batches))
        futures: dict = {}
        preload = None
        started = False
        while queue or futures:
            while queue and len(futures) < window:
                b = queue.pop()
                try:
                    futures[pool.submit(_work, [(e.source, e.abspath) for e in b])] = b
                except BrokenProcessPool:  # broke between two waits: a new pool takes the rest
                    queue.append(b)
                    pool.shutdown(wait=False, cancel_futures=True)
                    pool = _new_pool(analyzer, max_bytes, min(njobs, len(batches)), preload)
            if not started:
                if PANDAS_AFTER:
                    # the workers exist now (fork start: all at the first submit); load pandas for a CSV / Parquet
                    # output meanwhile
                    import threading

                    preload = threading.Thread(target=_preload_pandas, daemon=True)
                    preload.start()
                start_bar()
                started = True
            finished, _ = wait(set(futures), timeout=0.5, return_when=FIRST_COMPLETED)
            if STOP_REQUESTED:
                raise KeyboardInterrupt
            broken = False
            for fut in finished:
                b = futures.pop(fut)
                try:
                    batch_rows, errs = fut.result()
                except Exception as exc:  # noqa: BLE001 - a worker died (or the task failed): run those files alone
                    broken = broken or isinstance(exc, BrokenProcessPool)
                    suspects.extend(b)
                    continue
                rule_errors.extend(errs)
                done(b, batch_rows)
            if broken:
                pool.shutdown(wait=False, cancel_futures=True)
                pool = _new_pool(analyzer, max_bytes, min(njobs, len(batches)), preload)
        pool.shutdown(wait=True)
        pool = None
        _isolate(suspects, analyzer, max_bytes, rule_errors, done, preload)
    except KeyboardInterrupt:
        if pool is not None:
            _kill_pool(pool)
        raise
    return False


def _new_pool(analyzer, max_bytes: int, workers: int, preload=None):
    import multiprocessing

    if preload is not None:
        # a fork while the preload thread holds an import lock would leave that lock held in the child for good
        preload.join()
    from concurrent.futures import ProcessPoolExecutor

    ctx: Any
    try:
        ctx = multiprocessing.get_context("fork")  # no threads exist yet: the progress bar starts after
    except ValueError:  # pragma: no cover - platforms without fork
        ctx = multiprocessing.get_context()
    _FORKED_FROM[:] = [analyzer] if ctx.get_start_method() == "fork" else []
    return ProcessPoolExecutor(max_workers=max(1, workers), mp_context=ctx, initializer=_init_worker,
                               initargs=(analyzer.options, max_bytes, analyzer.window, analyzer.timelines, os.getpid()))


def _kill_pool(pool) -> None:
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:  # their batches are lost anyway (not in the checkpoint): do not wait for them at exit
            proc.kill()
        except (OSError, AttributeError):
            pass


def _isolate(entries: list[Entry], analyzer, max_bytes: int, rule_errors: list, done, preload=None) -> None:
    """Each file of a failed batch again, alone in a one-process pool, one after the other: nothing else
    runs beside it, so a death now is that file's own (its error row), never a neighbour's."""
    from concurrent.futures.process import BrokenProcessPool

    pool = None
    try:
        for e in entries:
            if STOP_REQUESTED:
                raise KeyboardInterrupt
            if pool is None:
                pool = _new_pool(analyzer, max_bytes, 1, preload)
            try:
                batch_rows, errs = pool.submit(_work, [(e.source, e.abspath)]).result()
            except Exception as exc:  # noqa: BLE001 - it fails alone: that file's error row
                if isinstance(exc, BrokenProcessPool):
                    pool.shutdown(wait=False, cancel_futures=True)
                    pool = None
                batch_rows = [[empty_row(e.source, f"internal error: worker failed ({type(exc).__name__}: {exc})")]]
                errs = []
            rule_errors.extend(errs)
            done([e], batch_rows)
    except KeyboardInterrupt:
        if pool is not None:
            _kill_pool(pool)
            pool = None
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True)


PANDAS_AFTER = False  # set by the command when its output needs pandas (CSV, Parquet): imported during the scan


def _preload_pandas() -> None:
    try:
        import pandas  # noqa: F401
    except Exception:  # noqa: BLE001 - the main thread reports it when it needs pandas
        pass


def _console():
    from rich.console import Console

    return Console(stderr=True)
