"""The ``watch`` engine: live diagnosis behind a running server (``vllm serve ... 2>&1 | kvlogdiag watch``).

Every input byte is copied to stdout unchanged, so the operator still sees the server's log; the
figures (bytes per token, KV tokens, max concurrency) and the findings go to stderr as soon as the
log has decided them. There is no second engine here — the analysis is ``analyze``'s:

* bytes → lines: `kvlogdiag.input.incremental.StreamLines`, the reader's lines for bytes arriving in
  pieces (same numbering, envelopes, prefilter, hard-wrap rejoining; the line the input ends inside
  is ``unterminated``, so a cut number is never read);
* lines → `Analysis`: an `kvlogdiag.pipeline.Analyzer` session; a new run starts when the extractor
  sees the server start again, or when ``watch -f`` sees the file truncated or replaced
  (`Watcher.restart`). Figures and findings are those of the current run;
* re-evaluation is throttled by the line stream, not by a timer: after a start-up-complete line, a
  new run, every `EVAL_EVERY_LINES` fed lines (past as many KV figures in the run: every half their number
  again, so that a log of KV lines costs linear time), whenever the input has gone quiet (nothing more to read
  right now), and at the end;
* figures are printed only when the run's pairing of memory and token lines is complete
  (`pairing_complete`) — or when start-up completed, or at the end — and exactly as the `Analysis`
  states them (watch never pairs ranks itself);
* findings are the rules' findings (``--select/--ignore/--min-severity`` as for ``analyze``). The first
  time a rule fires in a run it is printed at once; when its finding changes later (KVD012's count of
  preemptions, KVD013's peak) it is repeated at most once per ``--repeat-after`` seconds (at once when
  its severity rose), the latest version, pending repeats before each summary.

Pass-through first, analysis beside it: each read is echoed on the reading thread, then handed to the
analysis thread through a bounded queue (`Pipeline`), so a slow or stuck rule never delays the echo (nor
does the GIL both threads need: `SWITCH_INTERVAL_S`, `ANALYSIS_PIECE`; the echo copies nothing with it held —
a read's complete lines go out beside the held partial line in one ``writev`` — and stdin's and stdout's pipes
are grown to `PIPE_BYTES`, so a read is one write). An
exception in the analysis is reported once and turns watch into ``cat`` (exit `ExitCode.INTERNAL_ERROR`,
3, at the end) instead of ending the pipe; so does an analysis that falls `QUEUE_MAX_BYTES` behind a pipe.
A signal that arrives while stdout's reader has stopped reading ends the blocked write (`_Signals`).

Several followed files (``-f A -f B``, ``-f 'logs/*.log'``) are a `FollowSet`: one `Watcher` and `Pipeline`
per file, one reading loop (`run_follow_many`). ``--metrics URL`` adds a `MetricsPoller` thread whose scrapes
reach the analysis as queue items of no size (`Watcher.add_metrics`; docs/metrics.md).

`Watcher` is the engine; `run_stdin`, `run_follow` and `run_follow_many` are the loops; `watch_main` takes options and file
descriptors and returns the exit code (the click command is `kvlogdiag.cli.watch`).
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import select
import signal
import stat
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from functools import partial, wraps
from typing import Any, Callable, ParamSpec

from kvlogdiag.cli.exit import ExitCode, quiet_stdout
from kvlogdiag.errors import KvlogdiagError
from kvlogdiag.extract.metrics import add_scrape
from kvlogdiag.extract.runs import command_only, server_starts
from kvlogdiag.input.incremental import StreamLines
from kvlogdiag.input.metrics import Scrape
from kvlogdiag.input.reader import NUMPY_AFTER_BYTES, Line
from kvlogdiag.modes.metrics_poll import MetricsPoller
from kvlogdiag.pipeline import Analyzer
from kvlogdiag.render.analysis import clean_json, error_lines, fmt_bpt, fmt_gib, fmt_num, metrics_text_lines
from kvlogdiag.render.caps import ROW_ENDS, SHOW_ALL, value_range
from kvlogdiag.render.json_stream import render_json_line
from kvlogdiag.result import Analysis, Finding, InputAnalysis, KVCache, Severity
from kvlogdiag.rules.engine import RuleLoadError

P = ParamSpec("P")

__all__ = ["EVAL_EVERY_LINES", "Emitter", "FollowFile", "Pipeline", "StdoutClosed", "StdoutFailed", "Watcher",
           "pairing_complete", "run_follow", "run_stdin", "watch_main"]

READ_BYTES = 1 << 20  # largest single os.read
EVAL_EVERY_LINES = 2000  # fed (candidate) lines between two evaluations while the input keeps coming
PARTIAL_FLUSH_S = 0.5  # a partial line (progress bar, prompt) is echoed after the input was quiet this long
ECHO_HOLD_MAX = 1 << 16  # ... or once it is longer than this
FOLLOW_POLL_S = 0.1  # --follow: how often an idle file is checked for new data, truncation, rotation
SIGNAL_GRACE_S = 1.0  # after SIGINT/SIGTERM: keep copying stdin until EOF for at most this long
QUEUE_MAX_BYTES = 64 << 20  # input the analysis may lag behind the echo on a pipe before it is given up
# from a regular file the reading side waits for the analysis anyway: a short queue keeps the memory flat (a
# 50 MB file of KV lines on stdin queued whole behind a slower analysis: +50 MB of RSS; issue 18)
WAIT_QUEUE_BYTES = 8 << 20
STUCK_S = 60.0  # at the end: an analysis step running this long is given up (a hang guard, not a budget)
FINISH_AFTER_SIGNAL_S = 5.0  # after a signal: how long the summary may take before watch exits without it
EMIT_LOCK_S = 2.0  # a stderr write waits this long for the other thread's write, then is dropped
EMIT_CHUNK = 1 << 16  # characters of a long JSON event written at once
METRICS_PENDING_MAX = 4  # watch --metrics: scrapes queued for a slow analysis before newer ones are dropped
# a live log grows for as long as the server runs: its bulk reads are searched with the fast finder from the first
# one (`reader.ChunkScanner`: Aho-Corasick, past `AHO_AFTER_BYTES`; without ahocorasick_rs numpy, ~4x the stdlib
# finder), not only after the 16 MiB that pay numpy's import in analyze
LIVE_SIZE_HINT = NUMPY_AFTER_BYTES + 1
ANALYSIS_PIECE = 128 << 10  # the analysis splits reads into pieces of at most this (`Watcher.analyse_bytes`)
SWITCH_INTERVAL_S = 0.0005  # the GIL is handed to a thread that waits for it after at most this (`_short_switch_interval`)


class StdoutClosed(KvlogdiagError):
    """The reader of stdout went away (EPIPE)."""


class StdoutFailed(KvlogdiagError):
    """Writing stdout failed otherwise (ENOSPC on ``> /dev/full``, EIO): a one-line error, exit 2."""


class StdoutStalled(Exception):
    """SIGINT/SIGTERM arrived while a write to stdout was blocked (its reader stopped reading)."""


class _Stop(Exception):
    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


# --- output -----------------------------------------------------------------------------------


_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # C0 (but \n), DEL, C1: never raw on a terminal


def _escape(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _escape_json(text: str) -> str:
    # json.dumps escapes C0 already; DEL and C1 (8-bit CSI \x9b) it leaves raw with ensure_ascii=False
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class Emitter:
    """Writes events to stderr: one JSON object per line, or plain text (rich colours on a TTY).

    Log text inside a message (a model name, a path) is printed with control characters escaped, so
    bytes from the log never drive the terminal (OSC titles, links, colours, BEL)."""

    def __init__(self, fmt: str, stream=None, prefix: str = "", lock: threading.Lock | None = None):
        self.fmt = fmt
        self.stream = stream or sys.stderr
        self.broken = False
        self.console = None
        self.prefix = prefix  # several followed files: "FILE: " after "kvlogdiag: " on every text event
        # both threads print (the analysis its events, the reading side --follow notes and a stuck analysis):
        # one lock, taken with a time limit so a stalled stderr cannot stall the pass-through (shared by the
        # emitters of several followed files, which write to the same stream)
        self.lock = lock or threading.Lock()
        if fmt == "text":
            try:
                tty = self.stream.isatty()
            except (AttributeError, ValueError):
                tty = False
            if tty and not os.environ.get("NO_COLOR"):
                from rich.console import Console

                self.console = Console(file=self.stream, highlight=False, soft_wrap=True)

    def _write(self, text: str) -> None:
        if self.broken or not self.lock.acquire(timeout=EMIT_LOCK_S):
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (BrokenPipeError, OSError, ValueError):
            self.broken = True
        finally:
            self.lock.release()

    def json(self, obj: dict) -> None:
        """One JSON line. A ``final`` or ``summary`` event holds whole analyses (every KV value: their lists
        are views) and is written piece by piece (`render_json_line`), never built as one string (issue 18)."""
        pieces = render_json_line(obj)
        first = next(pieces)
        buf = [first]
        size = len(first)
        for piece in pieces:
            if size >= EMIT_CHUNK:
                break
            buf.append(piece)
            size += len(piece)
        else:  # a small event (the usual case): one write, as before
            self._write(_escape_json("".join(buf)) + "\n")
            return
        buf.append(piece)
        if self.broken or not self.lock.acquire(timeout=EMIT_LOCK_S):
            return
        try:
            self.stream.write(_escape_json("".join(buf)))
            buf, size = [], 0
            for piece in pieces:
                buf.append(piece)
                size += len(piece)
                if size >= EMIT_CHUNK:
                    self.stream.write(_escape_json("".join(buf)))
                    buf, size = [], 0
            self.stream.write(_escape_json("".join(buf)) + "\n")
            self.stream.flush()
        except (BrokenPipeError, OSError, ValueError):
            self.broken = True
        except BaseException:
            try:  # the event failed half-way (the analysis guard reports it): the next event starts a line
                self.stream.write("\n")
            except (OSError, ValueError):
                self.broken = True
            raise
        finally:
            self.lock.release()

    def text(self, parts: list[tuple[str, str | None]]) -> None:
        """``parts``: (text, rich style or None); lines separated by "\\n" inside the text."""
        if self.prefix and parts and parts[0][0] == "kvlogdiag: ":
            parts = [parts[0], (self.prefix, "bold"), *parts[1:]]
        if self.console is not None and not self.broken:
            from rich.text import Text

            t = Text()
            for s, style in parts:
                t.append("\n".join(_escape(x) for x in s.split("\n")), style=style)
            if not self.lock.acquire(timeout=EMIT_LOCK_S):
                return
            try:
                self.console.print(t)
                self.stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.broken = True
            finally:
                self.lock.release()
            return
        self._write("\n".join(_escape(x) for x in "".join(s for s, _ in parts).split("\n")) + "\n")


_SEV_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


# --- what is decided ------------------------------------------------------------------------------


def pairing_complete(kv: KVCache) -> bool:
    """The run's memory and token lines are all paired, each line used once: the figures are final.

    While the ranks of a start are still reporting, the pairing of a prefix can combine one rank's
    memory with another rank's token count (TP2's 37.01 GiB with the first token line: 81,827 B/token
    instead of 81,919); such a prefix is never printed. Complete means: every memory line has its token
    line (as many token lines as memory lines — or, for V0, the executor's one block count after the
    workers' profiles), and no memory or token line is used in two pairings.
    """
    ranks = kv.ranks
    if not ranks:
        return False
    memory = [r.memory_line for r in ranks]
    tokens = [r.tokens_line for r in ranks]
    if len(set(memory)) != len(memory) or len(set(tokens)) != len(tokens):
        return False
    if kv.tokens:
        return len(kv.tokens) >= len(kv.available_gib or kv.kv_budget)
    return bool(kv.gpu_blocks)


def _smallest_concurrency(kv: KVCache) -> dict | None:
    return min(kv.max_concurrency, key=lambda c: c["concurrency"]) if kv.max_concurrency else None


def _capped(values: Any, make: Callable[[Any], Any], key: Callable[[Any], Any] | None, name: str,
            capped: dict[str, Any]) -> list[Any]:
    """Every entry of a list of up to `caps.SHOW_ALL`; of a longer one the first and last `caps.ROW_ENDS`, its
    count and range noted in ``capped[name]`` (a figures event is printed at every evaluation while KV lines
    keep coming: whole, a log of half a million KV lines made events of every value hundreds of times)."""
    n = len(values)
    if n <= SHOW_ALL:
        return [make(v) for v in values]
    lo, hi = value_range(values, key=key)
    capped[name] = {"count": n, "lowest": lo, "highest": hi}
    return [make(values[i]) for i in (*range(ROW_ENDS), *range(n - ROW_ENDS, n))]


def _rank_entry(r: Any) -> dict[str, Any]:
    return {"rank": r.rank, "available_gib": r.available_gib, "tokens": r.tokens, "bytes_per_token": r.bytes_per_token,
            "dp_group": r.dp_group, "run": r.run, "memory_line": r.memory_line, "tokens_line": r.tokens_line}


def _figures_event(a: Analysis) -> dict[str, Any]:
    kv = a.kv_cache
    budget_lo = min((b["gib"] for b in kv.kv_budget), default=None)
    capped: dict[str, Any] = {}
    ev = {
        "bytes_per_token": kv.bytes_per_token, "bytes_per_token_kind": kv.bytes_per_token_kind,
        "tokens_min": min(kv.tokens) if kv.tokens else None,
        "tokens": _capped(kv.tokens, _same_value, None, "tokens", capped),
        "gpu_blocks": _capped(kv.gpu_blocks, _same_value, None, "gpu_blocks", capped),
        "available_gib_min": min(kv.available_gib) if kv.available_gib else None,
        "kv_budget_gib_min": budget_lo,
        "max_concurrency": _smallest_concurrency(kv),
        "ranks": _capped(kv.ranks, _rank_entry, lambda r: r.bytes_per_token, "ranks", capped),
        "note": kv.bytes_per_token_note, "errors": error_lines(a),
    }
    if capped:  # only on a log with more than caps.SHOW_ALL of a kind: the event is as before otherwise
        ev["capped"] = capped
    return ev


def _same_value(v: Any) -> Any:
    return v


def _figures_text(ev: dict) -> str:
    parts = []
    if ev.get("bytes_per_token") is not None:
        kind = f" [{ev['bytes_per_token_kind']}]" if ev.get("bytes_per_token_kind") else ""
        parts.append(f"bytes/token {fmt_bpt(ev['bytes_per_token'])} per rank{kind}")
    else:
        parts.append("bytes/token —")
    if ev.get("tokens_min") is not None:
        n = (ev.get("capped") or {}).get("tokens", {}).get("count") or len(ev.get("tokens") or [])
        parts.append(f"KV cache {ev['tokens_min']:,} tokens" + (f" (smallest of {n})" if n > 1 else ""))
    elif ev.get("gpu_blocks"):
        blocks = (ev.get("capped") or {}).get("gpu_blocks")
        parts.append(f"{blocks['lowest'] if blocks else min(ev['gpu_blocks']):,} KV blocks")
    if ev.get("available_gib_min") is not None:
        parts.append(f"available {fmt_gib(ev['available_gib_min'])}")
    elif ev.get("kv_budget_gib_min") is not None:
        parts.append(f"KV budget {fmt_gib(round(ev['kv_budget_gib_min'], 4))}")
    conc = ev.get("max_concurrency")
    if conc:
        parts.append(f"max concurrency {conc['concurrency']:.2f}x @ {conc['tokens_per_request']:,} tokens")
    text = " · ".join(parts)
    if ev.get("note"):
        text += f" · note: {ev['note']}"
    for e in ev.get("errors") or []:
        text += f"\n    error: {e}"
    return text


@dataclass
class _Rate:
    """One rule in the current run: what was printed, when, and the newer finding held back."""

    printed: Finding
    last_report: float
    reports: int = 1
    pending: Finding | None = None


def _same(a: Finding, b: Finding) -> bool:
    return (a.severity, a.message, a.line, a.rank) == (b.severity, b.message, b.line, b.rank)


# --- input sources ----------------------------------------------------------------------------


HEAD_BYTES = 4096  # first bytes of a followed file compared to tell a rewrite


class FollowFile:
    """``tail -F`` for one path: new data, truncation (copytruncate) and rotation (rename + new file)."""

    def __init__(self, path: str, from_end: bool, note: Callable[[str], None]):
        self.path = path
        self.fd: int | None = None
        self.ident: tuple[int, int] | None = None
        self.note = note
        self.waiting_noted = False
        self.head = b""  # the file's first bytes as read: a rewrite from the start changes them
        self.rewritten = False
        self.skipped_bytes = 0  # bytes before the first read position: the start --from-end skipped
        self._open(from_end)

    def _open(self, at_end: bool) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            if not self.waiting_noted:
                self.note(f"{self.path}: does not exist (yet); waiting for it")
                self.waiting_noted = True
            return False
        except OSError as exc:
            if self.ident is None and self.fd is None:
                raise  # the first open: a clear error, exit 2
            if not self.waiting_noted:
                self.note(f"{self.path}: cannot open the new file ({exc.strerror or exc}); retrying")
                self.waiting_noted = True
            return False
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, f"{self.path}: not a regular file")
        where = os.lseek(fd, 0, os.SEEK_END) if at_end else 0
        first = self.ident is None
        self.fd, self.ident, self.waiting_noted = fd, (st.st_dev, st.st_ino), False
        self.head = os.pread(fd, min(HEAD_BYTES, where), 0) if where else b""
        if first:
            self.skipped_bytes = where
            self.note(f"{self.path}: following from {'the end (byte ' + format(where, ',') + ')' if at_end else 'the start'}")
        return True

    def read(self) -> bytes:
        """Bytes available now (b"" when there are none, or when the file was rewritten from its start).

        A restarted server that truncates its log and writes more than before between two polls leaves a
        file larger than our position: only its first bytes tell the truncation, so they are compared
        before every read (reading on from the old position would take the middle of the new start)."""
        if self.fd is None or self.rewritten:
            return b""
        if self.head and os.pread(self.fd, len(self.head), 0) != self.head:
            self.rewritten = True
            return b""
        pos = os.lseek(self.fd, 0, os.SEEK_CUR)
        data = os.read(self.fd, READ_BYTES)
        if data and len(self.head) < HEAD_BYTES and pos <= len(self.head):
            self.head = (self.head[:pos] + data)[:HEAD_BYTES]
        return data

    def check(self) -> tuple[str | None, bytes]:
        """At end of data: ('truncated' | 'rotated' | 'appeared' | None, last bytes of the old file).

        On rotation the old file is read to its end before the new one is opened (from its start).
        """
        if self.fd is None:
            return ("appeared" if self._open(False) else None), b""
        try:
            pos = os.lseek(self.fd, 0, os.SEEK_CUR)
            if self.rewritten or os.fstat(self.fd).st_size < pos:
                os.lseek(self.fd, 0, os.SEEK_SET)
                self.rewritten, self.head = False, b""
                return "truncated", b""
            st = os.stat(self.path)
        except FileNotFoundError:
            return None, b""  # renamed away, the new file is not there yet: keep reading the old one
        if (st.st_dev, st.st_ino) != self.ident:
            old = self.fd
            rest = []
            while True:
                data = os.read(old, READ_BYTES)
                if not data:
                    break
                rest.append(data)
            if rest:
                return None, b"".join(rest)  # the writer still appended: take that first, check again
            if self._open(False):
                os.close(old)
                return "rotated", b""
        return None, b""

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


class EchoSwitch:
    """Which followed file's bytes stdout shows now (``watch -f A -f B``): a header marks each switch."""

    def __init__(self) -> None:
        self.current: Any = None
        self.first = True


# --- the watcher ------------------------------------------------------------------------------


class Watcher:
    """Echo + incremental analysis of one stream of log bytes, on the shared pipeline."""

    def __init__(self, analyzer: Analyzer, emitter: Emitter, echo: bool = True, repeat_after: float = 300.0,
                 source: str = "-", out_fd: int = 1, clock: Callable[[], float] = time.monotonic):
        self.analyzer = analyzer
        self.opts = analyzer.options
        self.emit = emitter
        self.echo = echo
        self.repeat_after = repeat_after
        self.source = source
        self.out_fd = out_fd
        self.clock = clock
        self.session = analyzer.session(source)
        self.session.extractor.listeners.append(self._on_event)
        # the root cause of a failed start is reported the moment its line arrives, not at EOF
        self.session.extractor.startup.listeners.append(self._on_cause)
        self.cause_seen = False
        self.lines = StreamLines(analyzer.line_prefilter(), LIVE_SIZE_HINT)
        self.echo_tail = b""  # bytes of a partial line not echoed yet
        self.last_input = clock()
        self.position = 0  # the line the analysis has reached
        self.fed_since_eval = 0
        self.kv_facts = 0  # KV figures of the run at the last evaluation (see evaluate)
        self.dirty = False
        self.known_starts = 1  # server starts announced (`server_starts`: a run of only a pasted command folds)
        self._runs_seen = 1  # the extractor's runs when the starts were last counted
        self._last_folds = False  # the extractor's last run is (so far) no server start of its own
        self.run_lines = 0  # lines fed since the extractor's current run began
        self.startup_seen = False
        self.started_runs: set[int] = set()
        # an interleaved multi-container input (docker compose logs): the container analysed (the first
        # named), and the others seen — their lines pass through but are never merged into its analysis
        self.container: str | None = None
        self.other_containers: set[str] = set()
        self.analysis: Analysis | None = None  # the current run's latest evaluation
        self.figures_key: tuple | None = None
        self.rates: dict[str, _Rate] = {}  # rule code → rate state, current run
        self.reports = 0  # findings printed (all runs)
        self.rule_error_seen: set[str] = set()
        self.fatal = False
        self.failed: str | None = None  # the internal error that stopped the analysis
        self._fail_lock = threading.Lock()
        self.signals: _Signals | None = None  # set by watch_main: a signal can end a blocked stdout write
        # several followed files share stdout: a ``==> FILE <==`` header (as tail prints) when the echo switches
        self.echo_switch: EchoSwitch | None = None
        # watch --metrics: the endpoint, its poll interval, scrapes added, when a text metrics line was last shown
        self.metrics_url: str | None = None
        self.metrics_interval: float | None = None
        self.metrics_scrapes = 0
        self._metrics_text_at: float | None = None

    # -- bytes in --------------------------------------------------------------------------------

    def take(self, data: bytes) -> None:
        """One read's worth of input: echo it first, then analyse it (both on this thread)."""
        self.echo_bytes(data)
        self.analyse_bytes(data)

    def echo_bytes(self, data: bytes) -> None:
        """The pass-through half of `take`: the bytes to stdout (complete lines now, a partial one later)."""
        self.last_input = self.clock()
        if self.echo:
            self._echo(data)

    def analyse_bytes(self, data: bytes) -> None:
        """The analysis half of `take`, in pieces of at most `ANALYSIS_PIECE` bytes: the search for candidate
        lines runs in C and, with the numpy or regex finder, holds the GIL for a whole piece, the echo on the
        reading thread waits that long (ahocorasick_rs releases it while it searches)."""
        for i in range(0, len(data), ANALYSIS_PIECE):
            self._guard(self._feed_lines, partial(self.lines.feed, data[i: i + ANALYSIS_PIECE]))

    def idle(self) -> None:
        """Nothing more to read right now: bring the analysis up to date with what was read."""
        def settle() -> None:
            self._feed_lines(self.lines.settle)
            if self.dirty:
                self.position = max(self.position, self.lines.stats.lines)
                self.evaluate()

        self._guard(settle)

    def end_of_part(self) -> None:
        """The input (or the followed file's current content) ended: its last partial line is complete."""
        self.end_echo()
        self.end_lines()

    def end_echo(self) -> None:
        if self.echo:
            self.flush_partial_echo()

    def end_lines(self) -> None:
        self._guard(self._feed_lines, self.lines.end)

    def add_metrics(self, scrape: Scrape) -> None:
        """A ``/metrics`` scrape (`MetricsPoller`, analysis thread): its engines become runtime samples of the
        current run (`add_scrape`, citing the log line reached), a ``metrics`` event, and an evaluation —
        the rules read the samples when the run's log has no stats lines of its own."""
        def add() -> None:
            self.metrics_scrapes += 1
            n = self.metrics_scrapes
            at = self.position
            add_scrape(self.session.extractor.facts, scrape, self.metrics_url or "metrics", at_line=at,
                       interval_s=self.metrics_interval, label=f"{self.metrics_url} scrape {n} (at log line {at:,})")
            self._metrics_event(scrape, n, at)
            self.dirty = True
            self.evaluate()

        self._guard(add)

    def _metrics_event(self, scrape: Scrape, n: int, at: int) -> None:
        engines = [e.to_json() for e in scrape.engines]
        if self.emit.fmt == "json":
            self.emit.json({"event": "metrics", "source": self.source, "url": self.metrics_url, "scrape": n,
                            "line": at, "engines": engines})
            return
        now = self.clock()
        if self._metrics_text_at is not None and now < self._metrics_text_at + self.repeat_after:
            return  # text: the first scrape, then at most one line per --repeat-after
        self._metrics_text_at = now
        parts = []
        for e in engines:
            parts.append(f"engine {e['engine'] if e['engine'] is not None else '—'}: running {fmt_num(e['running'])}, "
                         f"waiting {fmt_num(e['waiting'])}, KV usage {fmt_num(e['kv_usage_pct'], 1)} %, "
                         f"preemptions {fmt_num(e['preemptions_total'])}")
        self.emit.text([("kvlogdiag: ", "dim"), (f"metrics (scrape {n}, at line {at:,}): ", "bold"),
                        ("; ".join(parts), None)])

    def restart(self, reason: str) -> None:
        """``watch -f``: the file was truncated or replaced — the server was restarted: a new run.

        It is announced (and the old one closed) once the new file shows vLLM output, as `server_starts`
        counts runs."""
        def new_run() -> None:
            if self.run_lines:
                self.session.new_run(reason, self.lines.stats.lines + 1)
                self.run_lines = 0

        self._guard(new_run)

    def _guard(self, fn: Callable, *args: Any) -> None:
        if self.failed is not None:
            return
        try:
            fn(*args)
        except (StdoutClosed, _Stop):
            raise
        except Exception as exc:  # noqa: BLE001 - the pass-through must outlive any analysis bug
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self.fail(f"{type(exc).__name__}: {exc}")

    def fail(self, why: str) -> None:
        """Stop the analysis for good (once, from either thread): one note, then watch is ``cat``."""
        with self._fail_lock:
            if self.failed is not None:
                return
            self.failed = why
        self.note(f"internal error at line {self.position:,} ({why}); passing the log through unchanged",
                  kind="internal_error")

    def _feed_lines(self, get: Callable[[], list[Line]]) -> None:
        for line in get():
            self._feed(line)

    def _feed(self, line: Line) -> None:
        name = line.meta.get("container") if line.meta else None
        if name is not None:
            if self.container is None:
                self.container = name
            elif name != self.container:
                if name not in self.other_containers:
                    self.other_containers.add(name)
                    self.note(f"the input interleaves another container ({name}); watch analyses one server, "
                              f"{self.container}: the other's lines pass through unanalysed (run one watch per "
                              "container, e.g. docker compose logs -f NAME)")
                return
        runs = self.session.runs
        before = len(runs)
        self.session.feed(line)
        self.position = line.number
        self.fed_since_eval += 1
        self.run_lines = 1 if len(runs) != before else self.run_lines + 1
        self.dirty = True
        if len(runs) != self._runs_seen or self._last_folds:
            starts = self._count_starts()
            if starts != self.known_starts:
                self._run_changed(starts)
        if self.startup_seen:
            self.startup_seen = False
            # vLLM prints three start-up markers (API server, Uvicorn, Application startup complete): one summary per run
            if self.known_starts - 1 not in self.started_runs:
                self.started_runs.add(self.known_starts - 1)
                self.summary("startup_complete", self.evaluate())
        if self.cause_seen:
            self.cause_seen = False
            self.evaluate()
        elif self.fed_since_eval >= EVAL_EVERY_LINES and self.fed_since_eval * 2 >= self.kv_facts:
            self.evaluate()

    def _count_starts(self) -> int:
        """Server starts so far, as `server_starts` counts them (only while a run might still fold)."""
        runs = self.session.runs
        self._runs_seen = len(runs)
        self._last_folds = len(runs) > 1 and command_only(runs[-1])
        return 1 + sum(1 for f in runs[1:] if not command_only(f))

    def _on_cause(self, verdict: dict[str, Any]) -> None:
        self.cause_seen = True

    def _on_event(self, kind: str, fact: Any) -> None:
        if kind == "startup_complete":
            self.startup_seen = True

    # -- echo ------------------------------------------------------------------------------------

    def _echo(self, data: bytes) -> None:
        tail = self.echo_tail
        cut = data.rfind(b"\n")
        if cut < 0:
            tail = tail + data if tail else data
            if len(tail) > ECHO_HOLD_MAX:
                self._write(tail)
                tail = b""
            self.echo_tail = tail
            return
        # the held partial line and the read's complete lines go out as they are, in one writev: joining them
        # copied the whole read (~1 MiB) on this thread first, with the GIL held, and cost a third of the echo
        lines = data if cut + 1 == len(data) else memoryview(data)[: cut + 1]
        if tail:
            self._write(tail, lines)
        else:
            self._write(lines)
        self.echo_tail = data[cut + 1:]

    def flush_partial_echo(self) -> None:
        if self.echo_tail:
            tail, self.echo_tail = self.echo_tail, b""
            self._write(tail)

    def _write(self, *parts: bytes | memoryview) -> None:
        sw = self.echo_switch
        if sw is not None and sw.current is not self:
            sw.current = None  # a header cut by an error is written again next time
            self._write_raw(f"{'' if sw.first else chr(10)}==> {self.source} <==\n".encode("utf-8", "replace"))
            sw.current, sw.first = self, False
        self._write_raw(*parts)

    def _write_raw(self, *parts: bytes | memoryview) -> None:
        """Write ``parts`` to stdout in order, whole (one ``os.writev`` for several, then what is left)."""
        fd = self.out_fd
        views = [memoryview(p) for p in parts if len(p)]
        sig = self.signals
        while views:
            try:
                # `writing` brackets only the system call: a signal that interrupts a write blocked on a
                # stalled reader raises StdoutStalled out of it (see _Signals), no other code is cut short
                if sig is not None:
                    sig.writing = True
                n = os.write(fd, views[0]) if len(views) == 1 else os.writev(fd, views)
                if sig is not None:
                    sig.writing = False
            except BrokenPipeError:
                raise StdoutClosed from None
            except BlockingIOError:
                select.select([], [fd], [])
                continue
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EBADF):
                    raise StdoutClosed from None
                raise StdoutFailed(f"stdout: cannot write ({exc.strerror or exc})") from None
            finally:
                if sig is not None:
                    sig.writing = False
            while n and n >= len(views[0]):
                n -= len(views.pop(0))
            if n:
                views[0] = views[0][n:]

    def stop_echo(self) -> None:
        """stdout is stalled and a signal asked to stop: nothing more is written there."""
        self.echo = False
        self.echo_tail = b""

    # -- timers ----------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When `tick` has something to do (monotonic time), or None."""
        ds = [d for d in (self.echo_deadline(), self.rate_deadline()) if d is not None]
        return min(ds) if ds else None

    def echo_deadline(self) -> float | None:
        return self.last_input + PARTIAL_FLUSH_S if self.echo_tail else None

    def rate_deadline(self) -> float | None:
        ds = [r.last_report + self.repeat_after for r in list(self.rates.values()) if r.pending is not None]
        return min(ds) if ds else None

    def tick(self, now: float | None = None) -> None:
        """Run whatever is due: an idle partial line, rule findings whose repeat interval is over."""
        now = self.clock() if now is None else now
        self.tick_echo(now)
        self.tick_rates(now)

    def tick_echo(self, now: float) -> None:
        if self.echo_tail and now >= self.last_input + PARTIAL_FLUSH_S:
            self.flush_partial_echo()

    def tick_rates(self, now: float) -> None:
        if self.failed is None:
            for r in list(self.rates.values()):
                if r.pending is not None and now >= r.last_report + self.repeat_after:
                    self._report(r.pending, now, r)

    # -- evaluation ------------------------------------------------------------------------------

    def _analyse(self, index: int) -> Analysis:
        """One server start's `Analysis` of the lines read so far (what `Session.analyses` gives for it)."""
        st = self.lines.stats
        s = self.session
        s.extractor.finish(st.lines, st.long_lines)
        try:
            return s.analyzer.analyze_facts(server_starts(s.runs)[index])
        except RuleLoadError as exc:  # --strict-rules
            self.note(str(exc), kind="error")
            self.fatal = True
            raise _Stop(int(ExitCode.ERROR)) from None

    def _rule_errors(self) -> None:
        errors = self.analyzer.rule_errors
        for e in errors:
            if e.message not in self.rule_error_seen:
                self.rule_error_seen.add(e.message)
                self.note(f"rule error: {e.message}", kind="rule_error")
        if errors and self.opts.strict_rules:
            self.fatal = True
        del errors[:]

    def evaluate(self, final: bool = False) -> Analysis:
        """Analyse the current run; print its figures and findings that are new or due."""
        a = self._analyse(-1)
        self.analysis = a
        self.dirty = False
        self.fed_since_eval = 0
        kv = a.kv_cache
        # an evaluation passes over the run's KV figures: past EVAL_EVERY_LINES of them, the next one waits for
        # half as many new lines again, so the evaluations of a log that repeats its KV lines cost a few
        # times one analysis, not one per EVAL_EVERY_LINES lines (issue 18: CPU linear in the KV lines)
        self.kv_facts = len(kv.available_gib) + len(kv.tokens) + len(kv.gpu_blocks) + len(kv.kv_budget)
        self._rule_errors()
        decided = final or a.run.index in self.started_runs
        self._figures(a, decided)
        now = self.clock()
        shown = a.visible_findings(self.opts.min_severity)
        fired = {f.rule for f in shown}
        for code in [c for c in self.rates if c not in fired]:
            self._withdraw(code)
        for f in shown:
            if f.line is None and not decided:
                continue  # usually about something the log has not reached yet ("ends before the KV sizing")
            r = self.rates.get(f.rule)
            if r is None:
                self._report(f, now, None)
            elif _same(f, r.printed):
                r.pending = None
            elif f.severity > r.printed.severity or now >= r.last_report + self.repeat_after:
                self._report(f, now, r)
            else:
                r.pending = f
        return a

    def _figures(self, a: Analysis, decided: bool, line: int | None = None) -> None:
        kv = a.kv_cache
        ev = _figures_event(a)
        if not (pairing_complete(kv) or ev["errors"] or (decided and (kv.ranks or kv.available_gib or kv.kv_budget
                                                                           or kv.tokens or kv.gpu_blocks))):
            return  # the ranks are still reporting: a partial pairing may mix them
        key = (a.run.index, json.dumps(clean_json(ev), sort_keys=True))
        if key == self.figures_key:
            return
        self.figures_key = key
        line = self.position if line is None else line
        if self.emit.fmt == "json":
            self.emit.json({"event": "figures", "source": self.source, "line": line, "run": a.run.index, **ev})
            return
        self.emit.text([("kvlogdiag: ", "dim"), (f"figures (at line {line:,}): ", "bold"),
                        (_figures_text(ev), None)])

    def _report(self, f: Finding, now: float, r: _Rate | None) -> None:
        """Print a rule finding: its first report in this run (``r`` None) or a repeat."""
        since = None if r is None else now - r.last_report
        if r is None:
            r = self.rates[f.rule] = _Rate(f, now)
        else:
            r.printed, r.last_report, r.pending = f, now, None
            r.reports += 1
        self.reports += 1
        run = self.analysis.run.index if self.analysis is not None else 0
        if self.emit.fmt == "json":
            self.emit.json({"event": "finding", "kind": "rule", "source": self.source, "run": run, **f.to_json(),
                            "repeat": r.reports - 1, "since_s": None if since is None else round(since, 3)})
            return
        loc = f" (line {f.line:,})" if f.line else ""
        again = f", again after {since:,.0f} s" if since is not None else ""
        parts = [("kvlogdiag: ", "dim"), (f"{f.rule} ", "bold"), (f"[{f.severity.label}] ", _SEV_STYLE.get(f.severity)),
                 (f"{f.name}{loc}{again}: ", "bold"), (f.message, None)]
        if f.fix and since is None:
            parts.append((f"\n    fix: {f.fix}", "dim"))
        self.emit.text(parts)

    def _withdraw(self, code: str) -> None:
        """A printed finding no longer holds (its rule read a line that came later, e.g. the KV error
        printed after 'EngineCore failed to start'): say so; if it fires again it is new."""
        r = self.rates.pop(code)
        f = r.printed
        msg = f"{code} {f.name} no longer holds at line {self.position:,}: the lines read since changed it"
        if self.emit.fmt == "json":
            self.emit.json({"event": "note", "kind": "withdrawn", "source": self.source, "rule": code, "name": f.name,
                            "line": self.position, "message": msg})
        else:
            self.note(msg, kind="withdrawn")

    def flush_pending(self) -> None:
        """Before a summary or a new run: the latest version of every finding the rate limit held back."""
        now = self.clock()
        for r in list(self.rates.values()):
            if r.pending is not None:
                self._report(r.pending, now, r)

    def _run_changed(self, starts: int) -> None:
        """A new server start (the extractor saw a restart, or `restart` after a truncation): close the
        old run with its complete figures and findings and a summary, then announce the new one."""
        old_index = self.known_starts - 1
        self.known_starts = starts
        old = self._analyse(old_index)  # complete: the last figures and findings of that start
        self._rule_errors()
        self.analysis = old
        self._figures(old, True, old.run.last_line)
        now = self.clock()
        for f in old.visible_findings(self.opts.min_severity):
            r = self.rates.get(f.rule)
            if r is None or not _same(f, r.printed):
                self._report(f, now, r)
        self.summary("run_end", old)
        new = server_starts(self.session.runs)[-1]
        self.rates = {}
        self.figures_key = None
        self.analysis = None
        self.fed_since_eval = 0
        self.kv_facts = 0
        started = new.started_by
        reason = started if started in ("truncated", "rotated") else "restart"
        if self.emit.fmt == "json":
            self.emit.json({"event": "run", "source": self.source, "index": new.run_index, "first_line": new.first_line,
                            "reason": reason, "started_by": started})
        else:
            why = {"truncated": "the followed file was truncated", "rotated": "the followed file was replaced"}.get(
                reason, f"the server started again ({started})")
            self.emit.text([("kvlogdiag: ", "dim"), (f"new run (server start {new.run_index + 1}) ", "bold"),
                            (f"at line {new.first_line:,}: {why}; figures and findings below are for this run", None)])

    # -- summary and exit ------------------------------------------------------------------------

    def summary(self, reason: str, a: Analysis | None, exit_code: int | None = None, final: bool = False,
                result: InputAnalysis | None = None) -> None:
        if a is None:
            return
        counts = {s.label: 0 for s in (Severity.ERROR, Severity.WARNING, Severity.INFO)}
        codes: list[str] = []
        for f in a.visible_findings(self.opts.min_severity):
            counts[f.severity.label] += 1
            if f.rule not in codes:
                codes.append(f.rule)
        rt = a.runtime
        kv = a.kv_cache
        c = a.config
        conc = _smallest_concurrency(kv)
        line = self.position if reason != "run_end" else a.run.last_line
        ev: dict[str, Any] = {
            "event": "summary", "reason": reason, "source": self.source, "line": line,
            "lines_read": self.lines.stats.lines, "runs": self.known_starts, "run": a.run.to_json(),
            "vllm": a.vllm.to_json(),
            "config": {k: c.get(k) for k in ("model", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                                             "max_model_len", "block_size", "gpu_memory_utilization", "kv_cache_dtype")},
            "bytes_per_token": kv.bytes_per_token, "bytes_per_token_kind": kv.bytes_per_token_kind,
            "tokens_min": min(kv.tokens) if kv.tokens else None,
            "max_concurrency": conc,
            "errors": a.errors,
            "findings": counts, "rules": codes,
            "runtime": {"stats_lines": rt.get("stats_lines", 0), "kv_usage_max_pct": rt.get("kv_usage_max_pct"),
                        "preemptions": rt.get("preemptions", 0) + rt.get("stats_preemptions_total", 0)
                        + rt.get("recompute_preemptions", 0), "kv_usage_high_lines": rt.get("kv_usage_high_lines", 0),
                        "single_running_with_queue_lines": rt.get("single_running_with_queue_lines", 0),
                        "findings_reported": self.reports},
        }
        if rt.get("metrics") is not None:
            ev["runtime"]["metrics"] = rt["metrics"]
        if final:
            ev["analysis"] = a.to_json(self.opts.min_severity, lazy=True)  # views: written piece by piece
        if result is not None:  # what `analyze --format json` prints for this input
            ev["result"] = result.to_json("last", self.opts.min_severity, lazy=True)
        if exit_code is not None:
            ev["exit_code"] = exit_code
        if self.emit.fmt == "json":
            self.emit.json(ev)
            return
        where = {"startup_complete": f"start-up complete at line {line:,}", "eof": "end of input",
                 "sigint": "interrupted (SIGINT)", "sigterm": "terminated (SIGTERM)",
                 "run_end": f"run {a.run.index + 1} ended at line {line:,}"}.get(reason, reason)
        if a.run.count > 1 and reason != "run_end":
            where += f", run {a.run.index + 1} of {a.run.count}"
        v = a.vllm
        par = "/".join(fmt_num(x) for x in a.parallel)
        lines = [f"vLLM {v.version or '?'} ({v.engine or '?'} engine, {v.platform or 'platform ?'}) · "
                 f"model {c.get('model') or '?'} · TP/PP/DP {par} · max_model_len {fmt_num(c.get('max_model_len'))}"]
        lines.append(_figures_text(_figures_event(a) | {"errors": []}))
        n_err, n_warn, n_info = counts["error"], counts["warning"], counts["info"]
        fl = f"findings: {n_err} error{'s' if n_err != 1 else ''}, {n_warn} warning{'s' if n_warn != 1 else ''}, {n_info} info"
        if codes:
            fl += f" ({', '.join(codes)})"
        lines.append(fl)
        if reason not in ("startup_complete", "run_end"):
            runs = self.known_starts
            lines.append(f"{self.lines.stats.lines:,} lines, {runs} run{'s' if runs != 1 else ''} · runtime: "
                         f"{ev['runtime']['stats_lines']:,} stats lines, max KV usage "
                         f"{fmt_num(rt.get('kv_usage_max_pct'), 1)} %, preemptions {ev['runtime']['preemptions']:,}")
        if exit_code is not None:
            lines[-1] += f" · exit {exit_code}"
        if rt.get("metrics") and reason not in ("startup_complete", "run_end"):
            lines.extend(x.lstrip() for x in metrics_text_lines(rt["metrics"]))
        parts: list[tuple[str, str | None]] = [("kvlogdiag: ", "dim"), (f"summary ({where})", "bold")]
        for ln in lines:
            parts.append(("\nkvlogdiag:   " + ln, None))
        self.emit.text(parts)

    def finish(self, reason: str, signal_code: int | None = None) -> int:
        """Final evaluation, held-back findings, one ``final`` event per run, the summary; the exit code."""
        code: int
        if self.failed is not None:
            code = signal_code if signal_code is not None else int(ExitCode.INTERNAL_ERROR)
            self.note(f"the analysis stopped at an internal error ({self.failed}); the log was passed through "
                      f"unchanged; exit {code}", kind="error")
            return code
        try:
            self.position = max(self.position, self.lines.stats.lines)
            self.evaluate(final=True)
            self.flush_pending()
            st = self.lines.stats
            runs = self.session.analyses(st.lines, st.long_lines)
            self._rule_errors()
        except (StdoutClosed, _Stop):
            raise
        except Exception as exc:  # noqa: BLE001 - same guard as while reading
            self._fail(exc)
            return self.finish(reason, signal_code)
        if signal_code is not None:
            code = signal_code
        elif self.fatal:
            code = int(ExitCode.ERROR)
        else:
            limit = Severity.threshold(self.opts.fail_on)
            code = int(ExitCode.FINDINGS if any(f.severity >= limit for r in runs for f in r.findings) else ExitCode.OK)
        if self.emit.fmt == "json":
            for r in runs:
                self.emit.json({"event": "final", "source": self.source, "run": r.run.to_json(),
                                "analysis": r.to_json(self.opts.min_severity, lazy=True)})
        self.summary(reason, runs[-1], exit_code=code, final=True, result=InputAnalysis(self.source, runs))
        return code

    def note(self, message: str, kind: str = "note") -> None:
        if self.emit.fmt == "json":
            self.emit.json({"event": "note", "kind": kind, "source": self.source, "message": message})
        elif kind == "internal_error":  # the message says what it is: "internal error at line N (...)"
            self.emit.text([("kvlogdiag: ", "dim"), (message, "bold red")])
        else:
            self.emit.text([("kvlogdiag: ", "dim"), (f"{kind.replace('_', ' ')}: " if kind != "note" else "note: ",
                                                    "bold red" if kind == "error" else "bold"), (message, None)])


# --- the loops --------------------------------------------------------------------------------


class _Signals:
    """SIGINT/SIGTERM set a flag and wake the select() through a self-pipe (no exception mid-read).

    One exception: a signal that arrives while a write to stdout is blocked (``writing``; the reader of
    stdout stopped reading, so the pipe is full) raises `StdoutStalled` out of the write, so watch can stop
    instead of waiting for a reader that may never come back. A signal that lands just before such a write
    blocks is re-delivered to the main thread every `KICK_S` while a write is still blocked (`_kick`)."""

    KICK_S = 0.2

    def __init__(self) -> None:
        self.received: list[int] = []
        self.writing = False
        self.kicks = 0  # re-deliveries sent and not yet seen by the handler (they are not new signals)
        self._kicker: threading.Thread | None = None
        self._main = threading.main_thread().ident
        self._closed = False
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)
        self.old_wakeup = signal.set_wakeup_fd(self.w, warn_on_full_buffer=False)
        self.old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def _handler(self, signum, frame) -> None:  # noqa: ARG002
        if self.kicks:
            self.kicks -= 1
        else:
            self.received.append(signum)
            if self._kicker is None:
                self._kicker = threading.Thread(target=self._kick, args=(signum,), daemon=True)
                self._kicker.start()
        if self.writing:
            self.writing = False
            raise StdoutStalled(signum)

    def _kick(self, signum: int) -> None:
        while not self._closed:
            time.sleep(self.KICK_S)
            if self.writing and not self._closed and self._main is not None:
                self.kicks += 1
                signal.pthread_kill(self._main, signum)

    def wake(self) -> None:
        """Wake the reading side's select() (the analysis thread stopped)."""
        try:
            os.write(self.w, b"\0")
        except OSError:
            pass

    def drain(self) -> None:
        try:
            while os.read(self.r, 512):
                pass
        except (BlockingIOError, OSError):
            pass

    def restore(self) -> None:
        self._closed = True
        for s, h in self.old.items():
            signal.signal(s, h)
        signal.set_wakeup_fd(self.old_wakeup)
        os.close(self.r)
        os.close(self.w)


def _signal_exit(signum: int) -> tuple[str, int]:
    if signum == signal.SIGINT:
        return "sigint", int(ExitCode.INTERRUPTED)
    return "sigterm", int(ExitCode.TERMINATED)


PIPE_BYTES = 1 << 20  # the pipe buffer asked for on stdin and stdout (Linux's default limit for a user)


def _grow_pipe(fd: int) -> None:
    """Ask Linux for a `PIPE_BYTES` buffer on the pipe ``fd`` (never a smaller one); harmless where unsupported
    (not a pipe, not Linux, over the user's pipe quota).

    On stdin: fewer, larger reads. On stdout: a read's echo (up to `READ_BYTES`) fits the pipe in one go —
    in the default 64 KiB pipe each write waited for the reader to empty it ~16 times."""
    try:
        import fcntl

        if fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) < PIPE_BYTES:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError, ValueError):  # AttributeError: no F_*PIPE_SZ (not Linux)
        pass


def _ready(fd: int) -> bool:
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def _read_batch(fd: int, w: Pipeline) -> tuple[bytes, bool, bool]:
    """What ``fd`` has now, up to READ_BYTES: one read, plus more while more is ready at once (a fast
    writer then gives large chunks). (data, eof, more ready)."""
    parts: list[bytes] = []
    total = 0
    while total < READ_BYTES:
        try:
            data = os.read(fd, READ_BYTES - total)
        except BlockingIOError:
            break
        except OSError as exc:
            w.note(f"reading stdin failed: {exc.strerror or exc}", kind="error")
            return b"".join(parts), True, False
        if not data:
            return b"".join(parts), True, False
        parts.append(data)
        total += len(data)
        if not _ready(fd):
            return (parts[0] if len(parts) == 1 else b"".join(parts)), False, False
    return (parts[0] if len(parts) == 1 else b"".join(parts)), False, True


class _Feed:
    """The bounded hand-over from the reading side to the analysis thread: items, each with a byte size."""

    def __init__(self, limit: int):
        self.limit = limit
        self.items: deque[tuple[tuple[str, Any], int]] = deque()
        self.size = 0
        self.cv = threading.Condition()

    def put(self, item: tuple[str, Any], size: int = 0, wait: Callable[[], bool] | None = None) -> bool:
        """Queue ``item``. Data that does not fit: False at once (``wait`` None), or wait while ``wait()``."""
        with self.cv:
            while size and self.size and self.size + size > self.limit:
                if wait is None or not wait():
                    return False
                self.cv.wait(0.1)
            if item[0] == "idle" and self.items and self.items[-1][0][0] == "idle":
                return True  # one pending "input went quiet" is as good as two
            self.items.append((item, size))
            self.size += size
            self.cv.notify_all()
            return True

    def get(self, timeout: float | None) -> tuple[str, Any] | None:
        with self.cv:
            if not self.items:
                self.cv.wait(timeout)
                if not self.items:
                    return None
            item, size = self.items.popleft()
            self.size -= size
            self.cv.notify_all()
            return item

    def more(self) -> bool:
        return bool(self.items)

    def drop_data(self) -> None:
        """The analysis is given up: free the bytes it will never read."""
        with self.cv:
            self.items = deque(x for x in self.items if x[0][0] != "data")
            self.size = 0
            self.cv.notify_all()


class Pipeline:
    """What the reading loops drive: the echo on the calling thread, the analysis on a thread of its own.

    The reading side never waits for the analysis. Reads are handed over through `_Feed`; when the input
    is a pipe or a terminal (a server writes into it) and the analysis falls more than `QUEUE_MAX_BYTES`
    behind, the analysis is given up (one note, exit `ExitCode.INTERNAL_ERROR` at the end) and the bytes
    keep flowing. From a regular file (``watch < file``, ``--follow``) nobody is stalled by waiting, so
    the reading side waits for the analysis instead and every line is analysed. An exception in the
    analysis is caught on its thread (`Watcher.fail`); at the end, an analysis step that has been running
    for `STUCK_S` (or `FINISH_AFTER_SIGNAL_S` after a signal) is given up."""

    def __init__(self, w: Watcher, sig: _Signals, wait_when_full: bool):
        self.w = w
        self.sig = sig
        self.wait_when_full = wait_when_full
        self.feed = _Feed(WAIT_QUEUE_BYTES if wait_when_full else QUEUE_MAX_BYTES)
        self.result: int | None = None
        self.stop: int | None = None  # the analysis ended the watch (--strict-rules): this exit code
        self.busy_since: float | None = None  # when the analysis step now running began
        self.done = threading.Event()
        self.poller: MetricsPoller | None = None  # watch --metrics
        self.metrics_pending = 0  # scrapes queued and not taken by the analysis yet
        self.metrics_dropped = 0
        self._metrics_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="kvlogdiag-analysis", daemon=True)
        self.thread.start()

    # -- the reading side ----------------------------------------------------------------------------

    def take(self, data: bytes) -> None:
        w = self.w
        w.echo_bytes(data)
        if w.failed is not None:
            return
        wait = (lambda: not self.sig.received and self.stop is None) if self.wait_when_full else None
        if not self.feed.put(("data", data), len(data), wait) and not self.wait_when_full:
            self.feed.drop_data()
            w.fail(f"the analysis fell more than {QUEUE_MAX_BYTES >> 20} MiB behind the input")

    def idle(self) -> None:
        self.feed.put(("idle", None))

    def metrics(self, scrape: Scrape) -> None:
        """From the poller's thread: a scrape for the analysis (an item of no size: never waits). While the
        analysis has `METRICS_PENDING_MAX` scrapes it has not taken yet (it is slow or stuck), newer ones are
        dropped, so memory stays bounded; the scrapes it does take are in order."""
        if self.w.failed is not None or self.done.is_set():
            return
        with self._metrics_lock:
            if self.metrics_pending >= METRICS_PENDING_MAX:
                self.metrics_dropped += 1
                return
            self.metrics_pending += 1
        self.feed.put(("metrics", scrape))

    def end_of_part(self) -> None:
        self.w.end_echo()
        self.feed.put(("end", None))

    def restart(self, reason: str) -> None:
        self.feed.put(("restart", reason))

    def note(self, message: str, kind: str = "note") -> None:
        self.w.note(message, kind)

    def tick(self) -> None:
        self.w.tick_echo(self.w.clock())

    def next_deadline(self) -> float | None:
        return self.w.echo_deadline()

    def stop_echo(self) -> None:
        self.w.stop_echo()

    def finish(self, reason: str, signal_code: int | None = None) -> int:
        """Hand the end over to the analysis and wait for its exit code (see the class for the limits)."""
        if self.poller is not None:
            self.poller.stop()
        self.feed.put(("finish", (reason, signal_code)))
        signals = len(self.sig.received)
        until = time.monotonic() + FINISH_AFTER_SIGNAL_S if signal_code is not None else None
        while not self.done.wait(0.1):
            now = time.monotonic()
            busy = self.busy_since
            why = None
            if len(self.sig.received) > signals:
                why = "a second signal"
            elif until is not None and now >= until:
                why = f"a signal, and the summary took longer than {FINISH_AFTER_SIGNAL_S:g} s"
            elif busy is not None and now - busy >= STUCK_S:
                why = f"one analysis step has run for {STUCK_S:g} s"
            if why is not None:
                code = signal_code if signal_code is not None else int(ExitCode.INTERNAL_ERROR)
                self.w.fail(f"the analysis did not finish: {why}")
                self.w.note(f"no summary: the analysis did not finish; exit {code}", kind="error")
                return code
        if self.stop is not None:
            return self.stop
        return int(ExitCode.INTERNAL_ERROR) if self.result is None else self.result

    @property
    def stuck(self) -> bool:
        return not self.done.is_set()

    # -- the analysis thread ------------------------------------------------------------------------

    def _step(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except _Stop:
            raise
        except Exception as exc:  # noqa: BLE001 - the pass-through must outlive any analysis bug
            self.w._fail(exc)

    def _run(self) -> None:
        w = self.w
        try:
            while True:
                due = w.rate_deadline()
                item = self.feed.get(None if due is None else max(0.0, due - w.clock()))
                self.busy_since = time.monotonic()
                if item is not None:
                    kind, arg = item
                    if kind == "finish":
                        try:
                            self.result = w.finish(*arg)
                        except _Stop:
                            raise
                        except Exception as exc:  # noqa: BLE001 - a renderer bug in the summary
                            w._fail(exc)
                            self.result = w.finish(*arg)
                        return
                    if kind == "data":
                        self._step(w.analyse_bytes, arg)
                    elif kind == "idle" and not self.feed.more():  # more input queued: it is not quiet
                        self._step(w.idle)
                    elif kind == "end":
                        self._step(w.end_lines)
                    elif kind == "restart":
                        self._step(w.restart, arg)
                    elif kind == "metrics":
                        with self._metrics_lock:
                            self.metrics_pending -= 1
                        self._step(w.add_metrics, arg)
                self._step(w.tick_rates, w.clock())
                self.busy_since = None
        except _Stop as stop:
            self.stop = stop.code
            self.sig.wake()
        except BaseException as exc:  # noqa: BLE001 - e.g. MemoryError: still never the pass-through's end
            self.w.fail(f"{type(exc).__name__}: {exc}")
        finally:
            self.busy_since = None
            self.done.set()


def run_stdin(w: Pipeline, in_fd: int, sig: _Signals) -> int:
    _grow_pipe(in_fd)
    stop_at: float | None = None
    stop_sig: int | None = None
    try:
        while w.stop is None:
            now = w.w.clock()
            deadline = w.next_deadline()
            if stop_at is not None:
                deadline = stop_at if deadline is None else min(deadline, stop_at)
            timeout = None if deadline is None else max(0.0, deadline - now)
            try:
                ready, _, _ = select.select([in_fd, sig.r], [], [], timeout)
            except ValueError:  # fd closed under us
                ready = [in_fd]
            if sig.r in ready:
                sig.drain()
            if sig.received:
                if stop_sig is not None and len(sig.received) > 1:
                    break  # second signal: stop now
                if stop_sig is None:
                    stop_sig = sig.received[0]
                    stop_at = w.w.clock() + SIGNAL_GRACE_S
            if in_fd in ready:
                data, eof, more = _read_batch(in_fd, w)
                if data:
                    w.take(data)
                if eof:
                    w.end_of_part()
                    break
                if not more:
                    w.idle()
            w.tick()
            if stop_at is not None and w.w.clock() >= stop_at:
                break
    except StdoutStalled as stalled:
        w.stop_echo()
        stop_sig = stop_sig or stalled.args[0]
    if w.stop is not None:
        return w.stop
    if stop_sig is not None:
        w.end_of_part()
        reason, code = _signal_exit(stop_sig)
        return w.finish(reason, code)
    return w.finish("eof")


def _follow_step(w: Pipeline, src: FollowFile) -> bool:
    """One step of following ``src``: True when something was read or happened (step again at once),
    False when the file has nothing new (the analysis was told the input went quiet)."""
    data = src.read()
    if data:
        w.take(data)
        w.tick()
        return True
    what, rest = src.check()
    if rest:
        w.take(rest)
        return True
    if what in ("truncated", "rotated"):
        w.end_of_part()
        w.note(f"{src.path}: {'truncated; reading from the start' if what == 'truncated' else 'replaced (rotated); following the new file'}")
        w.restart(what)
        return True
    if what == "appeared":
        return True
    w.idle()
    w.tick()
    return False


def _poll_wait(pipes: list[Pipeline], sig: _Signals) -> None:
    """Wait for the next poll of idle followed files: `FOLLOW_POLL_S`, less when an echo is due; a signal wakes it."""
    timeout = FOLLOW_POLL_S
    for p in pipes:
        d = p.next_deadline()
        if d is not None:
            timeout = min(timeout, max(0.0, d - p.w.clock()))
    ready, _, _ = select.select([sig.r], [], [], timeout)
    if ready:
        sig.drain()


def run_follow(w: Pipeline, src: FollowFile, sig: _Signals) -> int:
    try:
        while w.stop is None:
            if sig.received:
                break
            if _follow_step(w, src):
                continue
            _poll_wait([w], sig)
        if w.stop is not None:
            return w.stop
        # a signal: take what the file holds now, then stop
        while True:
            data = src.read()
            if not data:
                break
            w.take(data)
    except StdoutStalled:
        w.stop_echo()
    w.end_of_part()
    reason, code = _signal_exit(sig.received[0])
    return w.finish(reason, code)


GLOB_RESCAN_POLLS = 10  # several files: a glob is expanded again every this many idle polls (~1 s)


def is_glob(arg: str) -> bool:
    return any(c in arg for c in "*?[")


class FollowSet:
    """``watch -f A -f B`` / ``watch -f 'logs/*.log'``: every file followed like ``-f FILE``, each with its own
    analysis (a `Watcher` and `Pipeline` of its own: figures, findings, runs, summary per file), findings
    prefixed with the file, stdout the files' bytes with a ``==> FILE <==`` header at each switch. A glob is
    expanded again while following: a new file that matches is followed from its start."""

    def __init__(self, make: Callable[[str, bool], tuple[Pipeline, FollowFile]], args: list[str], from_end: bool,
                 note: Callable[[str], None]):
        self.make = make
        self.patterns = [a for a in args if is_glob(a)]
        self.note = note
        self.items: list[tuple[Pipeline, FollowFile]] = []
        self.seen: set[str] = set()
        for a in args:
            if is_glob(a):
                found = self._expand(a)
                if not found:
                    note(f"no file matches {a} yet; following what appears")
                for path in found:
                    self._add(path, from_end)
            else:
                self._add(a, from_end)

    @staticmethod
    def _expand(pattern: str) -> list[str]:
        import glob

        return sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))

    def _add(self, path: str, from_end: bool) -> None:
        key = os.path.realpath(path)
        if key in self.seen:
            return
        self.seen.add(key)
        self.items.append(self.make(path, from_end))

    def rescan(self) -> None:
        """New files matching a glob: followed from their start (one that cannot be opened: one note)."""
        for pat in self.patterns:
            for path in self._expand(pat):
                if os.path.realpath(path) not in self.seen:
                    self.note(f"{path}: a new file matches {pat}; following it from the start")
                    try:
                        self._add(path, False)
                    except OSError as exc:
                        self.note(f"{path}: cannot follow ({exc.strerror or exc}); not followed")

    @property
    def pipes(self) -> list[Pipeline]:
        return [p for p, _ in self.items]


def run_follow_many(fs: FollowSet, sig: _Signals) -> int:
    """`run_follow` over several files: one step per file per round, a poll wait when none had anything."""
    idle_polls = 0
    stopped: int | None = None
    try:
        while stopped is None:
            if sig.received:
                break
            progress = False
            for pipe, src in list(fs.items):
                if pipe.stop is not None:
                    stopped = pipe.stop
                    break
                progress = _follow_step(pipe, src) or progress
            if stopped is not None or progress:
                continue
            idle_polls += 1
            if fs.patterns and idle_polls % GLOB_RESCAN_POLLS == 0:
                fs.rescan()
            _poll_wait(fs.pipes, sig)
        if stopped is None:
            for pipe, src in fs.items:  # a signal: take what each file holds now, then stop
                while True:
                    data = src.read()
                    if not data:
                        break
                    pipe.take(data)
    except StdoutStalled:
        for pipe in fs.pipes:
            pipe.stop_echo()
    codes = []
    for pipe in fs.pipes:
        pipe.end_of_part()
        if stopped is not None:
            codes.append(pipe.finish("eof") if pipe.stop is None else pipe.stop)
        else:
            reason, code = _signal_exit(sig.received[0])
            codes.append(pipe.finish(reason, code))
    if stopped is not None:
        return stopped
    return codes[0] if codes else _signal_exit(sig.received[0])[1]


def _watch_many(analyzer: Analyzer, args: list[str], from_end: bool, echo: bool, fmt: str, repeat_after: float,
                out_fd: int, err_stream: io.TextIOBase | None, hard_exit: bool) -> int:
    """`watch_main` for several followed files (`FollowSet`, `run_follow_many`)."""
    import dataclasses

    stream = err_stream or sys.stderr
    lock = threading.Lock()
    top_emit = Emitter(fmt, stream, lock=lock)
    switch = EchoSwitch()
    sig = _Signals()
    code = int(ExitCode.ERROR)

    def note(message: str, kind: str = "note") -> None:
        if fmt == "json":
            top_emit.json({"event": "note", "kind": kind, "source": None, "message": message})
        else:
            top_emit.text([("kvlogdiag: ", "dim"), ("note: " if kind == "note" else f"{kind}: ", "bold"), (message, None)])

    def make(path: str, at_end: bool) -> tuple[Pipeline, FollowFile]:
        # each file its own analysis: its own options (what --from-end skipped differs per file) and rule errors
        a = Analyzer(dataclasses.replace(analyzer.options), analyzer.rules)
        w = Watcher(a, Emitter(fmt, stream, prefix=f"{path}: ", lock=lock), echo=echo, repeat_after=repeat_after,
                    source=path, out_fd=out_fd)
        w.signals = sig
        w.echo_switch = switch
        src = FollowFile(path, at_end, w.note)
        a.options.skipped_start_bytes = src.skipped_bytes or None
        return Pipeline(w, sig, wait_when_full=True), src

    fs: FollowSet | None = None
    try:
        try:
            fs = FollowSet(make, args, from_end, note)
        except OSError as exc:
            note(f"cannot follow ({exc.strerror or exc})" if not getattr(exc, "filename", None)
                 else f"{exc.filename}: cannot follow ({exc.strerror or exc})", kind="error")
            return int(ExitCode.ERROR)
        code = run_follow_many(fs, sig)
        return code
    except OSError as exc:  # reading a followed file failed (EIO, a file turned unreadable)
        note(f"{getattr(exc, 'filename', None) or 'a followed file'}: {exc.strerror or exc}", kind="error")
        code = int(ExitCode.ERROR)
        return code
    except StdoutClosed:
        quiet_stdout()
        code = int(ExitCode.BROKEN_PIPE)
        return code
    except StdoutFailed as exc:
        note(str(exc), kind="error")
        code = int(ExitCode.ERROR)
        return code
    finally:
        if fs is not None:
            for _, src in fs.items:
                src.close()
        sig.restore()
        if hard_exit and fs is not None and any(p.stuck for p in fs.pipes):
            try:
                sys.stdout.flush()
            except (OSError, ValueError):
                pass
            os._exit(code)


def _waits_for_analysis(fd: int) -> bool:
    """A regular file on stdin: nobody writes into it, so reading may wait for the analysis."""
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return False


def _short_switch_interval(fn: Callable[P, int]) -> Callable[P, int]:
    """Run ``fn`` with the interpreter's thread switch interval at `SWITCH_INTERVAL_S` (restored after).

    The reading thread takes the GIL a few times per read (the read, the echo's write, the hand-over), and
    each time a busy analysis thread would otherwise keep it for up to Python's default 5 ms: the echo then
    waited for the analysis after all (8 ms median, up to 28 ms, per line behind a 200 ms CPU-bound rule; the
    bench's 60 MB log echoed at ~120,000 lines/s instead of ~1 M)."""
    @wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        old = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        try:
            return fn(*args, **kwargs)
        finally:
            sys.setswitchinterval(old)

    return run


@_short_switch_interval
def watch_main(analyzer: Analyzer, *, follow: str | None = None, from_end: bool = False, echo: bool = True,
               fmt: str = "text", repeat_after: float = 300.0, in_fd: int | None = None, out_fd: int = 1,
               err_stream: io.TextIOBase | None = None, hard_exit: bool = False, metrics_url: str | None = None,
               metrics_interval: float = 10.0, metrics_timeout: float = 5.0, follows: list[str] | None = None) -> int:
    """Run watch over stdin (or ``in_fd``) or a followed file; returns the exit code (`ExitCode` values).

    ``hard_exit``: when the analysis thread is still running at the end (stuck), leave with ``os._exit``
    — a daemon thread blocked inside a stderr write could otherwise abort the interpreter's shutdown.
    ``metrics_url``: poll that Prometheus endpoint every ``metrics_interval`` s beside the log (`MetricsPoller`).
    ``follows``: several files or globs to follow, each with its own analysis (`FollowSet`).
    The thread switch interval is `SWITCH_INTERVAL_S` while it runs (`_short_switch_interval`)."""
    if echo:
        _grow_pipe(out_fd)
    if follows and (len(follows) > 1 or is_glob(follows[0])):
        return _watch_many(analyzer, follows, from_end, echo, fmt, repeat_after, out_fd, err_stream, hard_exit)
    if follows:
        follow = follows[0]
    emitter = Emitter(fmt, err_stream)
    w = Watcher(analyzer, emitter, echo=echo, repeat_after=repeat_after, source=follow or "-", out_fd=out_fd)
    w.metrics_url, w.metrics_interval = metrics_url, (metrics_interval if metrics_url else None)

    def start_metrics(p: Pipeline) -> None:
        if metrics_url:
            p.poller = MetricsPoller(metrics_url, metrics_interval, metrics_timeout, p.metrics,
                                     lambda m: w.note(m, kind="metrics"))
            p.poller.start()

    sig = _Signals()
    w.signals = sig
    pipe: Pipeline | None = None
    code = int(ExitCode.ERROR)
    try:
        if follow:
            try:
                src = FollowFile(follow, from_end, w.note)
            except OSError as exc:
                w.note(f"{follow}: cannot follow ({exc.strerror or exc})", kind="error")
                return int(ExitCode.ERROR)
            # the rules must know the start was skipped on purpose (KVD017 says so instead of 'incomplete')
            analyzer.options.skipped_start_bytes = src.skipped_bytes or None
            pipe = Pipeline(w, sig, wait_when_full=True)
            start_metrics(pipe)
            try:
                code = run_follow(pipe, src, sig)
                return code
            except OSError as exc:
                w.note(f"{follow}: {exc.strerror or exc}", kind="error")
                return int(ExitCode.ERROR)
            finally:
                src.close()
        if in_fd is None:
            try:
                in_fd = sys.stdin.fileno()
                os.fstat(in_fd)
            except (AttributeError, ValueError, OSError):  # stdin closed (`<&-`): an empty input
                in_fd = os.open(os.devnull, os.O_RDONLY)
        pipe = Pipeline(w, sig, wait_when_full=_waits_for_analysis(in_fd))
        start_metrics(pipe)
        code = run_stdin(pipe, in_fd, sig)
        return code
    except StdoutClosed:
        quiet_stdout()
        code = int(ExitCode.BROKEN_PIPE)
        return code
    except StdoutFailed as exc:
        w.note(str(exc), kind="error")
        code = int(ExitCode.ERROR)
        return code
    finally:
        if pipe is not None and pipe.poller is not None:
            pipe.poller.stop()
        sig.restore()
        if hard_exit and pipe is not None and pipe.stuck:
            try:
                sys.stdout.flush()
            except (OSError, ValueError):
                pass
            os._exit(code)
