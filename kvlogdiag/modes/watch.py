"""``kvlogdiag watch``: live diagnosis behind a running server (``vllm serve ... 2>&1 | kvlogdiag watch``).

Every input byte is copied to stdout unchanged, so the operator still sees the server's log; the
figures (bytes per token, KV tokens, max concurrency) and the findings go to stderr as soon as the
log has decided them, not at the end.

How it works — one analysis path, the same as ``analyze``:

* input is read with ``os.read`` on the raw file descriptor (stdin or a followed file); every read
  echoes its complete lines in one write (a partial line waits for its newline, at most
  ``PARTIAL_FLUSH_S`` when the input goes quiet, and is written at EOF);
* the reader's prefilter (`kvlogdiag.pipeline.prefilter`) finds candidate lines in each chunk, as
  `kvlogdiag.input.reader.iter_lines` does; only those are decoded (`reader.make_line`) and fed to the
  `Analyzer`'s extractor, which keeps aggregates only (memory stays flat over days);
* when the facts change, ``derive`` + rule evaluation run again on the current facts (debounced by
  ``DEBOUNCE_S``, so the four workers of a TP-4 start are one evaluation) and only findings not
  printed before (key: rule code + evidence line) are printed. Findings without an evidence line
  usually depend on something *missing* from the log, so they are decided at start-up completion
  or at the end only;
* runtime events (preemptions, KV usage at or above 90 %, ``Running: 1`` with a queue) come from
  the extractor's listener callbacks and are rate-limited per kind (``--repeat-after``).

Exit codes: 0/1 by ``--fail-on`` at end of input; 2 on bad options, rules or an unreadable
``--follow`` target; 130 after SIGINT, 143 after SIGTERM (both after the summary); 141 when the
reader of stdout goes away (``| head``), quietly.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import time
from typing import Any, Callable

import click

from kvlogdiag.input.reader import MAX_LINE_BYTES, make_line

READ_BYTES = 1 << 20  # largest single os.read
DEBOUNCE_S = 0.03  # facts changed → evaluate after this long (or earlier when the input is idle)
PARTIAL_FLUSH_S = 0.5  # a partial line (progress bar, prompt) is echoed after the input was quiet this long
ECHO_HOLD_MAX = 1 << 16  # ... or once it is longer than this
FOLLOW_POLL_S = 0.1  # --follow: how often an idle file is checked for new data, truncation, rotation
SIGNAL_GRACE_S = 1.0  # after SIGINT/SIGTERM: keep copying stdin until EOF for at most this long
KV_HIGH_PCT = 90.0

EXIT_SIGINT = 130
EXIT_SIGTERM = 143
EXIT_EPIPE = 141

_RUNTIME_KINDS = {
    "stats_preemptions": "preemption",
    "preemption_warning": "preemption",
    "recompute_preempted": "preemption",
    "kv_usage_high": "kv-usage-high",
    "single_running": "single-running-with-queue",
}
# the rule (by name) that decides whether a runtime kind is a problem; watch only decides when to repeat it
_RUNTIME_RULE = {"preemption": "preemptions", "kv-usage-high": "kv-usage-high",
                 "single-running-with-queue": "single-running-with-queue"}
_RUNTIME_FIX = {
    "preemption": "Give the KV cache more room (lower --max-num-seqs or --max-model-len, raise "
                  "--gpu-memory-utilization carefully, add TP/replicas) or reduce the load; check bytes per token.",
    "kv-usage-high": "KV usage this high precedes preemptions: lower --max-num-seqs, add replicas, or give the KV cache more memory.",
    "single-running-with-queue": "The KV cache fits one request at a time: lower --max-model-len, or give the KV cache more memory.",
}


class StdoutClosed(Exception):
    """The reader of stdout went away (EPIPE)."""


class _Stop(Exception):
    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


# --- output -----------------------------------------------------------------------------------


def _fmt_num(v: Any, digits: int = 0) -> str:
    from kvlogdiag.render.analysis import fmt_num

    return fmt_num(v, digits)


class Emitter:
    """Writes events to stderr: one JSON object per line, or plain text (rich colours on a TTY)."""

    def __init__(self, fmt: str, stream=None):
        self.fmt = fmt
        self.stream = stream or sys.stderr
        self.broken = False
        self.console = None
        if fmt == "text":
            try:
                tty = self.stream.isatty()
            except (AttributeError, ValueError):
                tty = False
            if tty and not os.environ.get("NO_COLOR"):
                from rich.console import Console

                self.console = Console(file=self.stream, highlight=False, soft_wrap=True)

    def _write(self, text: str) -> None:
        if self.broken:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (BrokenPipeError, OSError, ValueError):
            self.broken = True

    def json(self, obj: dict) -> None:
        self._write(json.dumps(_json_safe(obj), ensure_ascii=False, allow_nan=False) + "\n")

    def text(self, parts: list[tuple[str, str | None]]) -> None:
        """``parts``: (text, rich style or None); lines separated by "\\n" inside the text."""
        if self.console is not None and not self.broken:
            from rich.text import Text

            t = Text()
            for s, style in parts:
                t.append(s, style=style)
            try:
                self.console.print(t)
                self.stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.broken = True
            return
        self._write("".join(s for s, _ in parts) + "\n")


_SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
_SEV_ORDER = {"error": 0, "warning": 1, "info": 2}


def _json_safe(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats → None, tuples/sets → lists, other objects → str."""
    import math

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_json_safe(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    return str(obj)


# --- runtime rate limiting --------------------------------------------------------------------


class _Rate:
    """One runtime finding kind: its rule, when it was last reported and what happened since."""

    __slots__ = ("rule", "suppressed", "last_report", "pending", "amount", "peak", "fact", "total", "total_amount")

    def __init__(self, rule, suppressed: bool) -> None:
        self.rule = rule  # the loaded Rule that decides it, or None (watch's own report)
        self.suppressed = suppressed  # the rule exists but --select/--ignore left it out
        self.last_report: float | None = None
        self.pending = 0  # occurrences not reported yet
        self.amount = 0  # preemptions counted in those occurrences
        self.peak: float | None = None  # highest KV usage among them
        self.fact = None  # the latest one (its line is cited)
        self.total = 0
        self.total_amount = 0


# --- input sources ----------------------------------------------------------------------------


class FollowFile:
    """``tail -F`` for one path: new data, truncation (copytruncate) and rotation (rename + new file)."""

    def __init__(self, path: str, from_end: bool, note: Callable[[str], None]):
        self.path = path
        self.fd: int | None = None
        self.ident: tuple[int, int] | None = None
        self.note = note
        self.waiting_noted = False
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
        if not _is_regular(st.st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, f"{self.path}: not a regular file")
        where = os.lseek(fd, 0, os.SEEK_END) if at_end else 0
        first = self.ident is None
        self.fd, self.ident, self.waiting_noted = fd, (st.st_dev, st.st_ino), False
        if first:
            self.note(f"{self.path}: following from {'the end (byte ' + format(where, ',') + ')' if at_end else 'the start'}")
        return True

    def read(self) -> bytes:
        """Bytes available now (b"" when there are none)."""
        if self.fd is None:
            return b""
        return os.read(self.fd, READ_BYTES)

    def check(self) -> tuple[str | None, bytes]:
        """At end of data: ('truncated' | 'rotated' | 'appeared' | None, last bytes of the old file).

        On rotation the old file is read to its end before the new one is opened (from its start).
        """
        if self.fd is None:
            return ("appeared" if self._open(False) else None), b""
        try:
            pos = os.lseek(self.fd, 0, os.SEEK_CUR)
            if os.fstat(self.fd).st_size < pos:
                os.lseek(self.fd, 0, os.SEEK_SET)
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


def _is_regular(mode: int) -> bool:
    import stat

    return stat.S_ISREG(mode)


# --- the watcher ------------------------------------------------------------------------------


class Watcher:
    """Echo + incremental analysis of one stream of log bytes."""

    def __init__(self, analyzer, emitter: Emitter, echo: bool = True, repeat_after: float = 300.0,
                 source: str = "<stdin>", out_fd: int = 1, clock: Callable[[], float] = time.monotonic):
        from kvlogdiag.pipeline import prefilter

        self.analyzer = analyzer
        self.opts = analyzer.options
        self.emit = emitter
        self.echo = echo
        self.repeat_after = repeat_after
        self.source = source
        self.out_fd = out_fd
        self.clock = clock
        self.ex = analyzer.new_extractor(source)
        self.ex.listeners.append(self._on_event)
        self.pf = None if analyzer.needs_every_line else prefilter()
        self.spans = _span_finder()
        # line splitting (analysis side)
        self.number = 0  # complete lines seen
        self.long_lines = 0
        self.carry = b""  # partial line for the analysis (capped at MAX_LINE_BYTES)
        self.skipping = False  # inside the dropped tail of an over-long line
        # echo side
        self.echo_tail = b""  # bytes of a partial line not echoed yet
        self.last_input = clock()
        # evaluation
        self.dirty_since: float | None = None
        self.eval_cost = 0.0
        self.signature: tuple | None = None
        self.printed: set[tuple] = set()  # (rule, line) and (rule, severity, message) already printed
        self.figures_key: tuple | None = None
        self.summary_due: list[tuple[str, Any]] = []
        self.started_runs: set[int] = set()
        self.rule_error_seen: set[str] = set()
        self.analysis: dict | None = None
        self.runtime: dict[str, _Rate] = {}
        self._all_rule_names: set[str] | None = None
        self.runtime_findings: list[dict] = []  # runtime reports printed (counted in the summary)
        self.fatal = False

    # -- bytes in --------------------------------------------------------------------------------

    def take(self, data: bytes) -> None:
        """One read's worth of input: echo the complete lines, analyse the candidate lines."""
        now = self.clock()
        self.last_input = now
        if self.echo:
            self._echo(data)
        self._analyse(data)
        self._after_chunk(now)

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
        if tail:
            self._write(tail + data[: cut + 1])
        elif cut + 1 == len(data):
            self._write(data)
        else:
            self._write(memoryview(data)[: cut + 1])
        self.echo_tail = data[cut + 1:]

    def flush_partial_echo(self) -> None:
        if self.echo_tail:
            tail, self.echo_tail = self.echo_tail, b""
            self._write(tail)

    def _write(self, data) -> None:
        fd = self.out_fd
        view = memoryview(data)
        while view:
            try:
                n = os.write(fd, view)
            except BrokenPipeError:
                raise StdoutClosed from None
            except BlockingIOError:
                import select

                select.select([], [fd], [])
                continue
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EBADF):
                    raise StdoutClosed from None
                raise
            view = view[n:]

    def _analyse(self, data: bytes) -> None:
        if self.skipping:
            nl = data.find(b"\n")
            if nl < 0:
                return
            data = data[nl:]  # keep the newline so the cut line still ends
            self.skipping = False
        carry = self.carry
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = carry + data if carry else data
            if len(carry) > MAX_LINE_BYTES:
                carry = carry[:MAX_LINE_BYTES]
                self.skipping = True
            self.carry = carry
            return
        chunk = carry + data[: cut + 1] if carry else (data if cut + 1 == len(data) else data[: cut + 1])
        rest = data[cut + 1:]
        if len(rest) > MAX_LINE_BYTES:
            rest = rest[:MAX_LINE_BYTES]
            self.skipping = True
        self.carry = rest
        self._lines(chunk)

    def _lines(self, chunk: bytes) -> None:
        """Feed the candidate lines of ``chunk`` (complete lines, or the final partial one)."""
        feed = self.ex.feed
        number = self.number
        if self.pf is None:
            parts = chunk.split(b"\n")
            if parts and parts[-1] == b"":
                parts.pop()
            for part in parts:
                number += 1
                if len(part) > MAX_LINE_BYTES:
                    part = part[:MAX_LINE_BYTES]
                    self.long_lines += 1
                self.number = number
                feed(make_line(number, part))
                if self.summary_due:
                    self._summaries_due()
            self.number = number
            return
        count = chunk.count
        pos = 0
        for start, end in self.spans(chunk, self.pf):
            number += count(b"\n", pos, start)
            part = chunk[start:end]
            if len(part) > MAX_LINE_BYTES:
                part = part[:MAX_LINE_BYTES]
                self.long_lines += 1
            self.number = number + 1  # the line being fed (events read it)
            feed(make_line(number + 1, part))
            if self.summary_due:
                self._summaries_due()
            pos = end
        number += count(b"\n", pos)
        if not chunk.endswith(b"\n"):
            number += 1
        self.number = number

    def end_of_file_part(self) -> None:
        """The input (or the followed file's current content) ended: its last partial line is complete."""
        if self.echo:
            self.flush_partial_echo()
        if self.carry and not self.skipping:
            carry, self.carry = self.carry, b""
            self._lines(carry)
        self.carry = b""
        self.skipping = False
        self._after_chunk(self.clock())

    # -- events ----------------------------------------------------------------------------------

    def _on_event(self, kind: str, fact) -> None:
        if self.dirty_since is None:
            self.dirty_since = self.clock()
        rk = _RUNTIME_KINDS.get(kind)
        if rk is not None:
            self._runtime(rk, kind, fact)
        elif kind == "startup_complete" and fact.run not in self.started_runs:
            # vLLM prints three start-up markers (API server, Uvicorn, Application startup
            # complete): one summary per server start
            self.started_runs.add(fact.run)
            self.summary_due.append(("startup_complete", fact.line))

    def _summaries_due(self) -> None:
        """Between two lines: evaluate now and print the start-up summary (the facts are complete up to here)."""
        self.evaluate(final=False)
        for reason, line in self.summary_due:
            self.summary(reason, line)
        self.summary_due.clear()

    def _signature(self) -> tuple:
        f = self.ex.facts
        st = f.stats
        return (len(f.version), len(f.engine), len(f.platform), sum(len(v) for v in f.config.values()), len(f.env),
                len(f.available), len(f.kv_budget), len(f.tokens), len(f.blocks), len(f.concurrency),
                sum(len(v) for v in f.memory.values()), sum(f.event_counts.values()), len(f.insufficient_kv),
                f.preemption_warning_count, f.recompute_preemptions, st.preemptions_total, st.kv_usage_high_lines,
                st.single_running_with_queue, st.kv_usage_max, st.running_max, st.waiting_max, st.lines > 0,
                st.busy_lines > 0, st.prefix_hit_last is None, len(st.engines), f.startup_complete is None,
                tuple((k, v[0]) for k, v in f.line_hits.items()))

    def _after_chunk(self, now: float) -> None:
        sig = self._signature()
        if sig != self.signature:
            self.signature = sig
            if self.dirty_since is None:
                self.dirty_since = now
        if self.summary_due:
            self._summaries_due()

    def next_deadline(self) -> float | None:
        """When `tick` has something to do (monotonic time), or None."""
        ds = []
        if self.dirty_since is not None:
            ds.append(self.dirty_since + DEBOUNCE_S + min(self.eval_cost * 4, 0.05))
        if self.echo_tail:
            ds.append(self.last_input + PARTIAL_FLUSH_S)
        for r in self.runtime.values():
            if r.pending and r.last_report is not None:
                ds.append(r.last_report + self.repeat_after)
        return min(ds) if ds else None

    def tick(self, now: float | None = None) -> None:
        """Run whatever is due: a debounced evaluation, an idle partial line, rate-limited reports."""
        now = self.clock() if now is None else now
        if self.dirty_since is not None and now >= self.dirty_since + DEBOUNCE_S + min(self.eval_cost * 4, 0.05):
            self.evaluate(final=False)
        if self.echo_tail and now >= self.last_input + PARTIAL_FLUSH_S:
            self.flush_partial_echo()
        for name, r in self.runtime.items():
            if r.pending and r.last_report is not None and now >= r.last_report + self.repeat_after:
                self._report_runtime(name, r, now)

    # -- evaluation ------------------------------------------------------------------------------

    def evaluate(self, final: bool) -> dict:
        from kvlogdiag.rules.engine import RuleLoadError

        t0 = time.perf_counter()
        facts = self.ex.finish(self.number, self.long_lines)
        try:
            a = self.analyzer.analyze_facts(facts)
        except RuleLoadError as exc:  # --strict-rules
            self.note(str(exc), kind="error")
            self.fatal = True
            raise _Stop(2) from None
        self.eval_cost = time.perf_counter() - t0
        self.dirty_since = None
        self.analysis = a
        now = self.clock()
        for e in self.analyzer.rule_errors:
            if e.message not in self.rule_error_seen:
                self.rule_error_seen.add(e.message)
                self.note(f"rule error: {e.message}", kind="rule_error")
        if self.analyzer.rule_errors and self.opts.strict_rules:
            self.fatal = True
        del self.analyzer.rule_errors[:]
        self._figures(a, final)
        decided = final or self.ex.facts.startup_complete is not None
        for f in a["findings"]:
            if f["line"] is None and not decided:
                continue  # may depend on something the log has not reached yet
            key = (f["rule"], f["line"])
            same = (f["rule"], f["severity"], f["message"])
            if key in self.printed or same in self.printed:
                continue  # printed before (or the same words, now cited from a later line)
            self.printed.add(key)
            self.printed.add(same)
            self._finding(f, kind="rule")
        if self.runtime:
            self._rule_reported(a, now)
        return a

    def _figures(self, a: dict, final: bool = False) -> None:
        from kvlogdiag.render.analysis import error_lines

        kv = a["kv_cache"]
        bpt = kv["bytes_per_token"]
        conc = min(kv["max_concurrency"], key=lambda c: c["concurrency"]) if kv["max_concurrency"] else None
        budgets = [b["gib"] for b in kv["kv_budget"]]
        errors = error_lines(a)
        key = (None if bpt is None else round(bpt), tuple(kv["tokens"]), tuple(kv["gpu_blocks"]),
               None if conc is None else (conc["tokens_per_request"], conc["concurrency"]),
               tuple(kv["available_gib"]), tuple(budgets), tuple(errors), kv.get("bytes_per_token_note"))
        if key == self.figures_key:
            return
        if not kv["tokens"] and not kv["gpu_blocks"] and not errors and not (final and (kv["available_gib"] or budgets)):
            return  # a memory figure alone: wait for the token count (or an error) that follows it
        self.figures_key = key
        ev = {
            "event": "figures", "source": self.source, "line": self.number,
            "bytes_per_token": bpt, "bytes_per_token_kind": kv["bytes_per_token_kind"],
            "tokens_min": min(kv["tokens"]) if kv["tokens"] else None,
            "tokens": kv["tokens"], "gpu_blocks": kv["gpu_blocks"],
            "available_gib_min": min(kv["available_gib"]) if kv["available_gib"] else None,
            "kv_budget_gib_min": min(budgets) if budgets else None,
            "max_concurrency": conc,
            "ranks": [{"rank": r["rank"], "available_gib": r["available_gib"], "tokens": r["tokens"],
                       "bytes_per_token": r["bytes_per_token"], "dp_group": r["dp_group"], "run": r["run"]}
                      for r in kv["bytes_per_token_by_rank"]],
            "note": kv.get("bytes_per_token_note"), "errors": errors,
        }
        if self.emit.fmt == "json":
            self.emit.json(ev)
            return
        self.emit.text([("kvlogdiag: ", "dim"), (f"figures (at line {self.number:,}): ", "bold"),
                        (_figures_text(ev), None)])

    def _finding(self, f: dict, kind: str, count: int | None = None, since: float | None = None) -> None:
        if kind == "runtime":
            self.runtime_findings.append(f)
        if _SEV_ORDER.get(f["severity"], 2) > _SEV_ORDER.get(self.opts.min_severity, 2):
            return
        if self.emit.fmt == "json":
            ev = {"event": "finding", "kind": kind, "source": self.source, "rule": f.get("rule"), "name": f["name"],
                  "severity": f["severity"], "message": f["message"], "fix": f.get("fix"), "line": f.get("line"),
                  "rank": f.get("rank"), "evidence": f.get("evidence")}
            if kind == "runtime":
                ev["count"] = count
                ev["since_s"] = since
            self.emit.json(ev)
            return
        loc = f" (line {f['line']:,})" if f.get("line") else ""
        head = f"{f['rule']} " if f.get("rule") else "runtime "
        parts = [("kvlogdiag: ", "dim"), (head, "bold"), (f"[{f['severity']}] ", _SEV_STYLE.get(f["severity"])),
                 (f"{f['name']}{loc}: ", "bold"), (f["message"], None)]
        if f.get("fix"):
            parts.append((f"\n    fix: {f['fix']}", "dim"))
        self.emit.text(parts)

    def note(self, message: str, kind: str = "note") -> None:
        if self.emit.fmt == "json":
            self.emit.json({"event": "note", "kind": kind, "source": self.source, "message": message})
        else:
            self.emit.text([("kvlogdiag: ", "dim"), (f"{kind.replace('_', ' ')}: " if kind != "note" else "note: ",
                                                    "bold red" if kind == "error" else "bold"), (message, None)])

    # -- runtime findings ------------------------------------------------------------------------

    def _rule_for(self, name: str) -> tuple[Any, bool]:
        """(selected rule deciding this runtime kind or None, True when such a rule exists but was deselected)."""
        wanted = _RUNTIME_RULE.get(name)
        for rule in self.analyzer.rules.rules:
            if rule.name == wanted:
                return rule, False
        if self._all_rule_names is None:
            from kvlogdiag.rules.engine import RuleLoadError, load_rules

            try:
                self._all_rule_names = {r.name for r in load_rules(self.opts.rule_dirs).rules}
            except RuleLoadError:
                self._all_rule_names = set()
        return None, wanted in self._all_rule_names

    def _runtime(self, name: str, kind: str, fact) -> None:
        r = self.runtime.get(name)
        if r is None:
            rule, suppressed = self._rule_for(name)
            r = self.runtime[name] = _Rate(rule, suppressed)
        if r.suppressed:
            return
        r.pending += 1
        r.total += 1
        if kind == "stats_preemptions":
            n = int(fact.value or 0)
        elif kind in ("preemption_warning", "recompute_preempted"):
            n = 1
        else:
            n = 0
        r.amount += n
        r.total_amount += n
        if kind == "kv_usage_high":
            u = float(fact.value)
            r.peak = u if r.peak is None else max(r.peak, u)
        r.fact = fact
        if r.rule is None and r.last_report is None:
            self._report_runtime(name, r, self.clock())  # no rule decides it: report the first one at once
        # with a rule: the evaluation that follows (debounced) prints the rule's finding as the first report

    def _rule_reported(self, a: dict, now: float) -> None:
        """After an evaluation: a runtime rule that fired for the first time counts as its first report."""
        fired = {f["rule"] for f in a["findings"]}
        for r in self.runtime.values():
            if r.rule is not None and r.last_report is None and r.rule.code in fired:
                r.last_report = now
                r.pending = r.amount = 0
                r.peak = None

    def _report_runtime(self, name: str, r: _Rate, now: float) -> None:
        since = None if r.last_report is None else now - r.last_report
        count = r.pending
        fact = r.fact
        if name == "preemption":
            what = f"{r.amount:,} preemption{'s' if r.amount != 1 else ''}"
            if since is None:
                msg = f"vLLM preempted requests: {what} (the KV cache ran out of blocks; preempted requests are recomputed or swapped)"
            else:
                msg = (f"{r.amount:,} more preemption{'s' if r.amount != 1 else ''} in {count:,} line{'s' if count != 1 else ''} "
                       f"since the last report {since:,.0f} s ago; {r.total_amount:,} in total")
        elif name == "kv-usage-high":
            if since is None:
                msg = f"KV cache usage reached {r.peak:.1f} % (≥ {KV_HIGH_PCT:g} %): preemptions follow when it fills"
            else:
                msg = (f"KV cache usage ≥ {KV_HIGH_PCT:g} % in {count:,} more stats line{'s' if count != 1 else ''} since the last report {since:,.0f} s ago "
                       f"(peak {r.peak:.1f} %); {r.total:,} in total")
        else:
            if since is None:
                msg = "Running: 1 request while others wait: the KV cache admits only one request at a time"
            else:
                msg = (f"Running: 1 request with a queue in {count:,} more stats line{'s' if count != 1 else ''} since the last report "
                       f"{since:,.0f} s ago; {r.total:,} in total")
        severity = "warning"
        if r.rule is not None and self.analysis is not None:
            severity = next((f["severity"] for f in self.analysis["findings"] if f["rule"] == r.rule.code), r.rule.max_severity())
        f = {"rule": r.rule.code if r.rule is not None else None, "name": r.rule.name if r.rule is not None else name,
             "severity": severity, "message": msg, "fix": None if since is not None else _RUNTIME_FIX[name],
             "line": fact.line if fact is not None else None, "rank": fact.rank if fact is not None else None,
             "evidence": fact.raw if fact is not None else None}
        r.last_report = now
        r.pending = 0
        r.amount = 0
        r.peak = None
        self._finding(f, kind="runtime", count=count, since=since)

    def flush_runtime(self) -> None:
        """Before a summary: report what the rate limit held back (runtime kinds already reported once)."""
        now = self.clock()
        for name, r in self.runtime.items():
            if r.pending and r.last_report is not None:
                self._report_runtime(name, r, now)

    # -- summary and exit ------------------------------------------------------------------------

    def summary(self, reason: str, line: int | None = None, exit_code: int | None = None) -> None:
        a = self.analysis
        if a is None:
            return
        counts = {s: 0 for s in ("error", "warning", "info")}
        codes: list[str] = []
        for f in a["findings"]:
            counts[f["severity"]] = counts.get(f["severity"], 0) + 1
            if f["rule"] not in codes:
                codes.append(f["rule"])
        rt = a["runtime"]
        kv = a["kv_cache"]
        c = a["config"]
        conc = min(kv["max_concurrency"], key=lambda x: x["concurrency"]) if kv["max_concurrency"] else None
        ev: dict[str, Any] = {
            "event": "summary", "reason": reason, "source": self.source, "line": line if line is not None else self.number,
            "lines_read": self.number, "runs": a.get("runs", 1),
            "vllm": a["vllm"],
            "config": {k: c.get(k) for k in ("model", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                                             "max_model_len", "block_size", "gpu_memory_utilization", "kv_cache_dtype")},
            "bytes_per_token": kv["bytes_per_token"], "bytes_per_token_kind": kv["bytes_per_token_kind"],
            "tokens_min": min(kv["tokens"]) if kv["tokens"] else None,
            "max_concurrency": conc,
            "errors": a["errors"],
            "findings": counts, "rules": codes,
            "runtime": {"stats_lines": rt["stats_lines"], "kv_usage_max_pct": rt["kv_usage_max_pct"],
                        "preemptions": rt["preemptions"] + rt.get("stats_preemptions_total", 0) + rt.get("recompute_preemptions", 0),
                        "kv_usage_high_lines": rt.get("kv_usage_high_lines", 0),
                        "single_running_with_queue_lines": rt.get("single_running_with_queue_lines", 0),
                        "runtime_findings_reported": len(self.runtime_findings)},
        }
        if exit_code is not None:
            ev["exit_code"] = exit_code
        if self.emit.fmt == "json":
            self.emit.json(ev)
            return
        where = {"startup_complete": f"start-up complete at line {ev['line']:,}", "eof": "end of input",
                 "sigint": "interrupted (SIGINT)", "sigterm": "terminated (SIGTERM)"}.get(reason, reason)
        v = a["vllm"]
        par = "/".join(_fmt_num(c.get(k)) for k in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"))
        lines = [f"vLLM {v['version'] or '?'} ({v['engine'] or '?'} engine, {v['platform'] or 'platform ?'}) · "
                 f"model {c.get('model') or '?'} · TP/PP/DP {par} · max_model_len {_fmt_num(c.get('max_model_len'))}"]
        lines.append(_figures_text({"bytes_per_token": kv["bytes_per_token"], "bytes_per_token_kind": kv["bytes_per_token_kind"],
                                    "tokens_min": ev["tokens_min"], "tokens": kv["tokens"], "max_concurrency": conc,
                                    "available_gib_min": min(kv["available_gib"]) if kv["available_gib"] else None,
                                    "kv_budget_gib_min": min((b["gib"] for b in kv["kv_budget"]), default=None),
                                    "gpu_blocks": kv["gpu_blocks"], "errors": [], "note": None}))
        fl = f"findings: {counts['error']} error{'s' if counts['error'] != 1 else ''}, {counts['warning']} warning{'s' if counts['warning'] != 1 else ''}, {counts['info']} info"
        if codes:
            fl += f" ({', '.join(codes)})"
        if self.runtime_findings:
            fl += f"; {len(self.runtime_findings)} runtime report{'s' if len(self.runtime_findings) != 1 else ''}"
        lines.append(fl)
        if reason != "startup_complete":
            rtl = (f"{self.number:,} lines, {a.get('runs', 1)} run{'s' if a.get('runs', 1) != 1 else ''} · runtime: "
                   f"{rt['stats_lines']:,} stats lines, max KV usage {_fmt_num(rt['kv_usage_max_pct'], 1)} %, "
                   f"preemptions {ev['runtime']['preemptions']:,}")
            lines.append(rtl)
        if exit_code is not None:
            lines[-1] += f" · exit {exit_code}"
        parts: list[tuple[str, str | None]] = [("kvlogdiag: ", "dim"), (f"summary ({where})", "bold")]
        for ln in lines:
            parts.append(("\nkvlogdiag:   " + ln, None))
        self.emit.text(parts)

    def finish(self, reason: str, signal_code: int | None = None) -> int:
        """Final evaluation, pending runtime counts, the summary; returns the exit code."""
        from kvlogdiag.cli.main import ExitCode, fail_exit

        a = self.evaluate(final=True)
        self.flush_runtime()
        if signal_code is not None:
            code = signal_code
        elif self.fatal:
            code = int(ExitCode.ERROR)
        else:
            code = int(fail_exit([a], self.opts.fail_on))
        self.summary(reason, exit_code=code)
        return code


def _span_finder() -> Callable:
    """The reader's candidate-line finder (same lines as searching with the prefilter, much faster)."""
    from kvlogdiag.input import reader

    return reader.candidate_spans


def _figures_text(ev: dict) -> str:
    from kvlogdiag.render.analysis import fmt_bpt, fmt_gib

    parts = []
    if ev.get("bytes_per_token") is not None:
        kind = f" [{ev['bytes_per_token_kind']}]" if ev.get("bytes_per_token_kind") else ""
        parts.append(f"bytes/token {fmt_bpt(ev['bytes_per_token'])} per rank{kind}")
    else:
        parts.append("bytes/token —")
    if ev.get("tokens_min") is not None:
        n = len(ev.get("tokens") or [])
        parts.append(f"KV cache {ev['tokens_min']:,} tokens" + (f" (smallest of {n})" if n > 1 else ""))
    elif ev.get("gpu_blocks"):
        parts.append(f"{min(ev['gpu_blocks']):,} KV blocks")
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


# --- the loop ---------------------------------------------------------------------------------


class _Signals:
    """SIGINT/SIGTERM set a flag and wake the select() through a self-pipe (no exception mid-write)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)
        self.old_wakeup = signal.set_wakeup_fd(self.w, warn_on_full_buffer=False)
        self.old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def _handler(self, signum, frame) -> None:  # noqa: ARG002
        self.received.append(signum)

    def drain(self) -> None:
        try:
            while os.read(self.r, 512):
                pass
        except (BlockingIOError, OSError):
            pass

    def restore(self) -> None:
        for s, h in self.old.items():
            signal.signal(s, h)
        signal.set_wakeup_fd(self.old_wakeup)
        os.close(self.r)
        os.close(self.w)


def _signal_exit(signum: int) -> tuple[str, int]:
    return ("sigint", EXIT_SIGINT) if signum == signal.SIGINT else ("sigterm", EXIT_SIGTERM)


def _grow_pipe(fd: int) -> None:
    """Ask Linux for a 1 MiB pipe buffer (fewer, larger reads); harmless where unsupported."""
    try:
        import fcntl

        fcntl.fcntl(fd, 1031, 1 << 20)  # F_SETPIPE_SZ
    except (ImportError, OSError, ValueError):
        pass


def _read_batch(fd: int, w: Watcher) -> tuple[bytes, bool]:
    """What ``fd`` has now, up to READ_BYTES: one read, plus more while more is ready at once (a fast
    writer then gives large chunks, which the candidate-line finder searches fastest). (data, eof)."""
    import select

    parts: list[bytes] = []
    total = 0
    while total < READ_BYTES:
        try:
            data = os.read(fd, READ_BYTES - total)
        except BlockingIOError:
            break
        except OSError as exc:
            w.note(f"reading stdin failed: {exc.strerror or exc}", kind="error")
            return b"".join(parts), True
        if not data:
            return b"".join(parts), True
        parts.append(data)
        total += len(data)
        try:
            ready, _, _ = select.select([fd], [], [], 0)
        except (OSError, ValueError):
            break
        if not ready:
            break
    return (parts[0] if len(parts) == 1 else b"".join(parts)), False


def run_stdin(w: Watcher, in_fd: int, sig: _Signals) -> int:
    import select

    _grow_pipe(in_fd)
    stop_at: float | None = None
    stop_sig: int | None = None
    while True:
        now = w.clock()
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
                stop_at = w.clock() + SIGNAL_GRACE_S
        if in_fd in ready:
            data, eof = _read_batch(in_fd, w)
            if data:
                w.take(data)
            if eof:
                w.end_of_file_part()
                break
        w.tick()
        if stop_at is not None and w.clock() >= stop_at:
            break
    if stop_sig is not None:
        w.end_of_file_part()
        reason, code = _signal_exit(stop_sig)
        return w.finish(reason, code)
    return w.finish("eof")


def run_follow(w: Watcher, src: FollowFile, sig: _Signals) -> int:
    import select

    while True:
        if sig.received:
            break
        data = src.read()
        if data:
            w.take(data)
            w.tick()
            continue
        what, rest = src.check()
        if rest:
            w.take(rest)
            continue
        if what in ("truncated", "rotated"):
            w.end_of_file_part()
            w.note(f"{src.path}: {'truncated; reading from the start' if what == 'truncated' else 'replaced (rotated); following the new file'}")
            continue
        if what == "appeared":
            continue
        w.tick()
        now = w.clock()
        deadline = w.next_deadline()
        timeout = FOLLOW_POLL_S if deadline is None else max(0.0, min(FOLLOW_POLL_S, deadline - now))
        ready, _, _ = select.select([sig.r], [], [], timeout)
        if ready:
            sig.drain()
    # a signal: take what the file holds now, then stop
    while True:
        data = src.read()
        if not data:
            break
        w.take(data)
    w.end_of_file_part()
    reason, code = _signal_exit(sig.received[0])
    return w.finish(reason, code)


def _quiet_stdout() -> None:
    """stdout's reader is gone: point fd 1 at /dev/null so the interpreter's final flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


@click.command()
@click.option("-f", "--follow", "follow", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Follow FILE like tail -F (truncation and rotation included) instead of reading stdin.")
@click.option("--from-end", is_flag=True, help="With --follow: start at the end of the file (default: its beginning).")
@click.option("--no-echo", is_flag=True, help="Do not copy the input to stdout; print findings only.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="stderr events as text, or one JSON object per line.")
@click.option("--repeat-after", type=click.FloatRange(min=0), default=300.0, show_default=True, metavar="SECONDS",
              help="Report the same runtime finding (preemptions, KV usage ≥ 90 %, Running: 1 with a queue) at most once per this interval, with a count.")
def watch(follow: str | None, from_end: bool, no_echo: bool, fmt: str, repeat_after: float, **kw: Any) -> None:
    """Live: copy a running server's log to stdout and print figures and findings on stderr as they are decided.

    \b
    vllm serve ... 2>&1 | kvlogdiag watch
    kvlogdiag watch -f /var/log/vllm/server.log --no-echo --format json

    Exit: 0/1 by --fail-on at end of input, 2 on bad options, 130 after SIGINT, 143 after SIGTERM,
    141 when the reader of stdout goes away.
    """
    from kvlogdiag.cli.main import ExitCode, build_analyzer, err

    if from_end and not follow:
        err("--from-end needs --follow FILE")
        sys.exit(ExitCode.ERROR)
    analyzer = build_analyzer(kw)
    emitter = Emitter(fmt)
    source = follow or "<stdin>"
    w = Watcher(analyzer, emitter, echo=not no_echo, repeat_after=repeat_after, source=source)
    sig = _Signals()
    code: int
    try:
        if follow:
            try:
                src = FollowFile(follow, from_end, w.note)
            except OSError as exc:
                err(f"{follow}: cannot follow ({exc.strerror or exc})")
                sys.exit(ExitCode.ERROR)
            try:
                code = run_follow(w, src, sig)
            except OSError as exc:
                err(f"{follow}: {exc.strerror or exc}")
                code = int(ExitCode.ERROR)
            finally:
                src.close()
        else:
            try:
                in_fd = sys.stdin.fileno()
                os.fstat(in_fd)
            except (AttributeError, ValueError, OSError):  # stdin closed (`<&-`): an empty input
                in_fd = os.open(os.devnull, os.O_RDONLY)
            code = run_stdin(w, in_fd, sig)
    except StdoutClosed:
        _quiet_stdout()
        code = EXIT_EPIPE
    except _Stop as stop:
        code = stop.code
    finally:
        sig.restore()
    sys.exit(code)


def _attach_rule_options(cmd: click.Command) -> None:
    """The shared rule options of kvlogdiag.cli.main (imported here, after `watch` exists, so either module may load first)."""
    from kvlogdiag.cli.main import rule_options

    holder = rule_options(lambda: None)
    cmd.params.extend(reversed(holder.__click_params__))  # type: ignore[attr-defined]


_attach_rule_options(watch)
