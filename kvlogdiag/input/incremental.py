"""Incremental line splitting: bytes arriving in pieces of any size → the `Line` objects of the file reader.

``watch`` reads a live pipe or a followed file, so its bytes come in pieces cut anywhere — inside a
line, inside a multi-byte UTF-8 character, between ``\\r`` and ``\\n``. `LineSplitter` turns them into
exactly the lines `kvlogdiag.input.reader.iter_lines` yields for the same bytes read from a file:

* the same numbering (every ``\\n`` counts, filtered or not; a last line without a newline counts);
* the same decoding and envelopes (`reader.make_line`: ANSI codes, ``\\r``, whatever stands before the
  vLLM record head, the vLLM process prefix as the rank, with the stream's own `reader.Envelopes`);
* the same prefilter: with one, only candidate lines are decoded (`reader.ChunkScanner`, the same
  lines the prefilter regex finds);
* the same cut of an over-long line: its first ``MAX_LINE_BYTES`` are kept, the rest is dropped while
  reading (never buffered), and the cut is counted in ``stats.long_lines``;
* the line the input ends inside is flagged ``unterminated`` (its last number may be cut: the
  extractor does not read it), and only `LineSplitter.end` yields it — never a piece of a line that
  is still being written.

`StreamLines` adds what `kvlogdiag.pipeline.Analyzer.read` does around the reader: a hard-wrapped
paste (`reader.detect_hard_wrap`) is judged from the head of the stream — its first ``CHUNK_BYTES``,
or less when the input ends (or the caller says it went quiet) first — and its rows are rejoined as
`reader.unwrap_lines` rejoins them.
"""

from __future__ import annotations

import codecs
import io
import re

from kvlogdiag.input.reader import (
    _LINE_START,
    CHUNK_BYTES,
    MAX_LINE_BYTES,
    WRAP_SLACK,
    ChunkScanner,
    Envelopes,
    Line,
    LineStats,
    detect_hard_wrap,
    detect_utf16,
    make_line,
)

__all__ = ["LineSplitter", "StreamLines", "Unwrapper"]


class LineSplitter:
    """Feed bytes with `feed`, close the input (or one file of a followed stream) with `end`.

    ``stats.lines`` is the number of lines so far (what ``lines_read`` reports), ``stats.long_lines``
    the over-long lines cut, ``stats.bytes`` the bytes fed. After `end` the next byte starts a new
    line and the numbering goes on (``watch -f`` after a truncation or rotation).
    """

    def __init__(self, prefilter: "re.Pattern[bytes] | None" = None, size_hint: int = -1):
        self.scan = ChunkScanner(prefilter, size_hint) if prefilter is not None else None
        self.stats = LineStats()
        self.envs = Envelopes()  # the envelopes this stream showed (to peel its lines without a head)
        self._carry = b""  # the kept start of the unfinished line (at most MAX_LINE_BYTES)
        self._skipping = False  # the unfinished line was cut: its tail is being dropped
        self._open = False  # bytes of an unfinished line were fed (kept or dropped)

    @property
    def pending(self) -> bool:
        """An unfinished line is waiting for its newline."""
        return self._open

    def feed(self, data: bytes) -> list[Line]:
        """The lines completed by ``data`` (candidate lines only, with a prefilter)."""
        if not data:
            return []
        self.stats.bytes += len(data)
        if self._skipping:
            nl = data.find(b"\n")
            if nl < 0:
                return []
            data = data[nl:]  # keep the newline so the cut line still ends
            self._skipping = False
        buf = self._carry + data if self._carry else data
        cut = buf.rfind(b"\n")
        if cut < 0:
            self._keep(buf)
            return []
        rest = buf[cut + 1:]
        out = self._lines(buf if cut + 1 == len(buf) else buf[: cut + 1])
        self._carry = b""
        self._open = False
        if rest:
            self._keep(rest)
        return out

    def end(self) -> list[Line]:
        """End of input: the unfinished line (its kept part, if it was cut), flagged ``unterminated``."""
        if not self._open:
            return []
        carry, self._carry = self._carry, b""
        self._skipping = self._open = False
        return self._lines(carry, terminated=False)

    def _keep(self, buf: bytes) -> None:
        self._open = True
        if len(buf) > MAX_LINE_BYTES:
            buf = buf[:MAX_LINE_BYTES]
            self._skipping = True
            self.stats.long_lines += 1
        self._carry = buf

    def _lines(self, chunk: bytes, terminated: bool = True) -> list[Line]:
        """Lines of ``chunk``: whole lines ending in ``\\n``, or (``terminated=False``) one last line without."""
        st = self.stats
        number = st.lines
        out: list[Line] = []
        if self.scan is None:
            parts = chunk.split(b"\n")
            if terminated:
                parts.pop()  # the empty piece after the last newline
            for part in parts:
                number += 1
                if len(part) > MAX_LINE_BYTES:
                    part = part[:MAX_LINE_BYTES]
                    st.long_lines += 1
                out.append(make_line(number, part, self.envs))
        else:
            found, newlines = self.scan(chunk)
            for before, start, end in found:
                part = chunk[start:end]
                if len(part) > MAX_LINE_BYTES:
                    part = part[:MAX_LINE_BYTES]
                    st.long_lines += 1
                out.append(make_line(number + before + 1, part, self.envs))
            number += newlines + (0 if terminated else 1)
        if not terminated and out and out[-1].number == number:
            out[-1].unterminated = True
        st.lines = number
        return out


class Unwrapper:
    """`reader.unwrap_lines` one row at a time: a row is released when the next one shows it is complete."""

    def __init__(self, width: int):
        self.width = width
        self.held: Line | None = None  # the first row of the line being rejoined
        # the rows joined onto it, joined once when the line is released: adding each row to a growing
        # string was quadratic (a 4 MB hard-wrapped base64 dump took 31 s); past MAX_LINE_BYTES the
        # rows are still consumed as part of the line but not kept, as the reader cuts a long line
        self._rows: list[str] = []
        self._size = 0
        self._unterminated = False

    def feed(self, line: Line) -> list[Line]:
        held = self.held
        if held is not None and (self._rows or len(held.raw) >= self.width - WRAP_SLACK) and not _LINE_START.match(line.raw):
            if self._size < MAX_LINE_BYTES:
                self._rows.append(line.raw[: MAX_LINE_BYTES - self._size])
                self._size += len(self._rows[-1])
            elif not self._rows:  # pragma: no cover - a first row of MAX_LINE_BYTES: keep the join marker
                self._rows.append("")
            self._unterminated = line.unterminated
            return []
        out = self._release()
        self.held, self._size = line, len(line.raw)
        return out

    def end(self) -> list[Line]:
        out = self._release()
        self.held = None
        return out

    def _release(self) -> list[Line]:
        held = self.held
        if held is None:
            return []
        if self._rows:
            joined = "".join(self._rows)
            held = Line(held.number, held.text + joined, held.rank, held.raw + joined, held.meta, self._unterminated)
            self._rows, self._unterminated = [], False
        return [held]


class StreamLines:
    """The lines ``analyze`` reads from the same bytes, for a stream that arrives in pieces.

    Until the head is judged (`CHUNK_BYTES` buffered, `settle`, or `end`) bytes are only buffered;
    then a hard-wrapped paste is split without the prefilter and rejoined, anything else is split with
    ``prefilter`` (None: every line). ``stats`` counts lines as the reader does. ``size_hint``: the bytes
    the stream is expected to bring, as `reader.ChunkScanner` takes it (which way of searching pays).
    """

    def __init__(self, prefilter: "re.Pattern[bytes] | None", size_hint: int = -1):
        self.prefilter = prefilter
        self.size_hint = size_hint
        self.head: list[bytes] | None = []
        self.head_bytes = 0
        self.wrap_width: int | None = None
        self.splitter: LineSplitter | None = None
        self.unwrap: Unwrapper | None = None
        self._stats = LineStats()  # until the head is judged
        self._decoder: "codecs.IncrementalDecoder | None" = None  # a UTF-16 stream, read as UTF-8 (as analyze does)

    @property
    def stats(self) -> LineStats:
        return self.splitter.stats if self.splitter is not None else self._stats

    def feed(self, data: bytes) -> list[Line]:
        if self.head is not None:
            self.head.append(data)
            self.head_bytes += len(data)
            self._stats.bytes += len(data)
            return self.settle() if self.head_bytes >= CHUNK_BYTES else []
        if self._decoder is not None:
            data = self._decoder.decode(data).encode("utf-8")
        return self._rows(self.splitter.feed(data))  # type: ignore[union-attr]

    def settle(self) -> list[Line]:
        """Judge the head now (the input went quiet): the lines buffered so far."""
        if self.head is None:
            return []
        head, self.head = b"".join(self.head), None
        encoding = detect_utf16(head)
        if encoding is not None:  # `reader.detect_utf16`, as analyze's reader judges it from the same head
            self._decoder = codecs.getincrementaldecoder(encoding)("replace")
            head = self._decoder.decode(head).encode("utf-8")
        fh = io.BufferedReader(io.BytesIO(head), CHUNK_BYTES)  # type: ignore[arg-type]
        self.wrap_width = detect_hard_wrap(fh) if head else None
        if self.wrap_width:
            self.splitter, self.unwrap = LineSplitter(None), Unwrapper(self.wrap_width)
        else:
            self.splitter = LineSplitter(self.prefilter, self.size_hint)
        return self._rows(self.splitter.feed(head))

    def end(self) -> list[Line]:
        """End of input (or of one followed file): every line left, the last one ``unterminated``."""
        out = self.settle()
        if self._decoder is not None:
            out += self._rows(self.splitter.feed(self._decoder.decode(b"", final=True).encode("utf-8")))  # type: ignore[union-attr]
        out += self._rows(self.splitter.end())  # type: ignore[union-attr]
        if self.unwrap is not None:
            out += self.unwrap.end()
        return out

    def _rows(self, lines: list[Line]) -> list[Line]:
        if self.unwrap is None:
            return lines
        out: list[Line] = []
        for ln in lines:
            out += self.unwrap.feed(ln)
        return out
