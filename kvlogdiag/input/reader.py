"""Reading inputs: files, stdin, compressed streams, and line envelopes.

Everything that turns bytes on disk (or a pipe) into clean `Line` objects lives here:

* inputs are paths or ``-`` (stdin); gzip, bz2, xz and zstd are detected by their magic bytes,
  never by the file name;
* reading is streaming, in large binary chunks, so memory stays flat whatever the file size;
  over-long lines are cut at ``MAX_LINE_BYTES`` (the rest of the line is skipped, not buffered);
* an optional *prefilter* (a compiled bytes regex) lets the caller skip, in C, every line that
  cannot matter — only candidate lines are decoded and turned into `Line` objects, while line
  numbers stay exact; a prefilter made of literal keywords is searched by keyword finders (stdlib,
  or numpy on large inputs) rather than by the regex, and a large file by a worker process too —
  always with the lines the regex would give (see "fast candidate search" below and
  ``docs/performance.md``);
* decoding never fails (invalid UTF-8 is replaced), UTF-16 text (with or without byte-order mark)
  is read as UTF-8, the ``\\r`` left by vLLM's multi-line formatter and by CRLF files is dropped,
  ANSI colour codes are removed;
* whatever stands before the vLLM record head — collector timestamps, container and pod prefixes,
  quotes, bullets, line numbers, prompts, table cells (docs/envelopes.md) — is removed and kept as
  metadata; the vLLM process prefix (``(Worker_DP1_TP3_EP7 pid=N)``) becomes the line's ``rank``;
  inside the message, locale thousands separators, alignment runs of spaces and a trailing
  ``# remark`` are normalised away (`normalise_message`).
"""

from __future__ import annotations

import array
import bisect
import codecs
import io
import json
import os
import re
import signal
import stat
import struct
import sys
import weakref
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator

from kvlogdiag import recache
from kvlogdiag.catalogue.failures import prefilter_keywords as failure_keywords
from kvlogdiag.catalogue.patterns import catalogue
from kvlogdiag.errors import KvlogdiagError

CHUNK_BYTES = 1 << 20
MAX_LINE_BYTES = 1 << 20
DEFAULT_MAX_BYTES = 16 << 30  # decompressed bytes per input before it is called a bomb

_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)


class InputError(KvlogdiagError):
    """An input that cannot be opened or read; the message names it."""


@dataclass(slots=True)
class Line:
    """One log line after the envelope was removed.

    ``number`` is 1-based in the (decompressed) input; ``text`` is the line without outer
    collector prefixes and without the vLLM process prefix; ``raw`` is the decoded line with
    only ANSI codes and trailing ``\\r`` removed (what evidence shows).
    """

    number: int
    text: str
    rank: str | None = None
    raw: str = ""
    meta: dict | None = None
    unterminated: bool = False  # the input ended inside this line: its last value may be cut


# --- envelopes -----------------------------------------------------------------------------
#
# One rule peels every envelope (docs/envelopes.md): find the vLLM record head — the process prefix,
# the level + date head of any version, or failing those a logging-module head — and whatever stands
# before it is the envelope: collector timestamps, container and pod prefixes, quotes, bullets, line
# numbers, prompts, comments, table cells, inline code. The envelope is kept as metadata, with its
# recognised parts (timestamp, stream, host, container) under their own keys. A line without a head
# (a traceback frame, a print) is peeled when it starts with the shape of an envelope this input
# already showed before a head (`Envelopes`), or with envelope characters followed by a known message
# start (a catalogue keyword, a traceback, an exception). Inside the message, `normalise_message`
# undoes what a paste adds: locale thousands separators, alignment runs of spaces, a trailing remark.

_ANSI = recache.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>]")
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# docker/kubectl --timestamps: RFC 3339 with nanoseconds; CRI adds "stdout F ".
_DOCKER_TS = recache.compile(
    r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)) "
    r"(?:(?P<stream>stdout|stderr) (?P<tag>[FP]) )?"
)
_SYSLOG = recache.compile(
    r"(?P<ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) (?P<host>[\w.-]+) "
    r"(?P<ident>[\w./@-]+?)(?:\[(?P<pid>\d+)\])?: "
)
# docker compose logs: "name  | " (names padded to one width); kubectl logs --prefix: "[pod/p/c] "
_COMPOSE = recache.compile(r"(?P<container>[A-Za-z0-9][\w.@-]*) *\| ")
_COMPOSE_NAMED = recache.compile(r"[A-Za-z0-9][\w.-]*[-_]\d+ +\| ")  # compose's names: project-service-N (v1: _N)
_KUBE_PREFIX = recache.compile(r"\[pod/(?P<pod>[^/\]\s]+)/(?P<container>[^\]\s]+)\] ")
# vLLM process prefixes, all versions (see docs/vllm-log-format.md, 1.2).
_PROC_BODY = (
    r"\((?P<name>APIServer(?:_\d+)?|EngineCore(?:_DP\d+|_\d+)?|Worker(?:_[A-Z]+\d+)*"
    r"|VllmWorker(?: rank=\d+| [A-Z0-9_]+)?|VllmWorkerProcess|RayWorkerWrapper|MainProcess"
    r"|[A-Za-z][\w-]*(?:Worker|Engine|Server|Process)[\w-]*)"
    r" pid=(?P<pid>\d+)(?:, ip=(?P<ip>[\w.:-]+))?\) ?"
)
_PROC = recache.compile(_PROC_BODY)
# the vLLM line head (any version): used to find where a VLLM_LOGGING_PREFIX ends
_HEAD = recache.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d ")
# the vLLM record head: a process prefix, or the level + date head (<= 0.7 "file.py:N]", later "[file.py:N]")
_RECORD_HEAD = recache.compile(
    r"(?P<proc>" + _PROC_BODY + r")"
    r"|(?<![\w-])(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? "
)
RECORD_WINDOW = 300  # a head further into the line is text the message quotes, not its head
# the head of a line logged through Python's logging by an application around vLLM
_PYLOG_HEAD = recache.compile(
    r"(?<!\d)\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)? - [\w.-]+ - (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - "
)
# characters that stand before a message in pastes and tool output, when no head says where it starts
_ENV_CHARS = recache.compile(
    r"(?:[ \t]+|>+ ?|[-*+\u2022] |#+ |[$%] |\|+ ?|`+|\d+(?:[:\t]|-(?=\D)| (?= ))|[\w./-]+:\d+[:-]"
    r"|\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)? |\[(?!rank\d+\]:)[^\]\s][^\]]{0,80}\] ?"
    r"|(?!(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) )[A-Za-z0-9][\w.@-]* *\| )+"
)
_KNOWN_START_FIXED = (
    r"Traceback \(most recent call last\)|File \"|raise\s|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s"
    r"|(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Failure|Fault|Interrupt)(?::|$)"
    # Ascend CANN's error records open with their code: "EH9999: Inner Error!", "EZ9999: [PID: 412] …", "E19999: …"
    r"|E[0-9A-Z]\d{4}: "
)
_KNOWN_START: list["re.Pattern[str]"] = []  # built on first use, from the catalogue's keywords
_KEYWORD_RX: list["re.Pattern[str]"] = []
_MARKS = ">|*-+#$%`\u2022]"  # marks a separator space follows (the space belongs to the envelope)
_CLOSERS = "|`\"'"  # an envelope that opens with one of these closes the line with it too
_SHAPE_TOKENS = recache.compile(r"\d+| +|[^\d ]")


# process prefix text -> (rank, ip), or False when it is not a prefix (split_envelope's fast path)
_PREFIX_CACHE: dict[str, tuple[str, str | None] | bool] = {}


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (colours, cursor moves)."""
    if "\x1b" not in text:
        return text
    return _ANSI.sub("", text)


def rank_label(name: str, pid: str | None) -> str:
    """Turn a process prefix into a rank label.

    Named ranks (``Worker_TP3``) are unique within a run; anonymous worker processes
    (``VllmWorkerProcess``, ``RayWorkerWrapper``) are told apart by their pid.
    """
    if name in ("VllmWorkerProcess", "RayWorkerWrapper", "MainProcess", "VllmWorker", "Worker"):
        return f"{name} pid={pid}"
    return name


class Envelopes:
    """The envelope shapes one input has shown before a vLLM record head.

    A line without a head (a traceback frame, a ``print``) inside the same envelope — the same
    container prefix, quote, bullet, timestamp format — is peeled the same way. A shape is the
    envelope with digit runs generalised (timestamps and line numbers change from line to line);
    the most recent `MAX_SHAPES` are kept.
    """

    MAX_SHAPES = 16
    __slots__ = ("shapes", "_seen")

    def __init__(self) -> None:
        self.shapes: dict[str, "re.Pattern[str]"] = {}
        self._seen = ""  # the last envelope learnt (most lines repeat it)

    def learn(self, env: str) -> None:
        if env == self._seen or len(env) > RECORD_WINDOW:
            return
        self._seen = env
        for rx in self.shapes.values():
            if rx.fullmatch(env):
                return
        tokens = _SHAPE_TOKENS.findall(env)
        # the last run of spaces is the separator, kept exact: more spaces are the message's indentation
        key = "".join(r"\d+" if t[0].isdigit() else " +" if t[0] == " " and i < len(tokens) - 1 else re.escape(t)
                      for i, t in enumerate(tokens))
        if key.startswith(" +"):
            key = " *" + key[2:]  # right-aligned line numbers: the padding shrinks as they grow
        if len(self.shapes) >= self.MAX_SHAPES:
            del self.shapes[next(iter(self.shapes))]
        self.shapes[key] = re.compile(key)

    def peel(self, raw: str) -> int:
        """Length of a learnt envelope at the start of ``raw`` (the longest), else 0."""
        best = 0
        for rx in self.shapes.values():
            m = rx.match(raw)
            if m is not None and m.end() > best:
                best = m.end()
        return best if best < len(raw) else 0


def _keywords() -> list[str]:
    # longest first (an alternation tries them in order); ties by text, so the pattern is the same in every
    # process (a set's order changes with the hash seed) and its compiled program can be cached (kvlogdiag.recache)
    return sorted({kw for p in catalogue() for kw in p.keywords} | set(failure_keywords()), key=lambda k: (-len(k), k))


def _known_start() -> "re.Pattern[str]":
    """A catalogue keyword, a traceback, an exception or a uvicorn level at this position."""
    if not _KNOWN_START:
        starts = {k.strip() for k in _keywords()}
        alts = [k for k in sorted(starts, key=lambda k: (-len(k), k)) if len(k) >= 5 and k not in _LEVELS]
        _KNOWN_START.append(recache.compile(_KNOWN_START_FIXED + "|" + "|".join(re.escape(k) for k in alts)))
    return _KNOWN_START[0]


def _keyword_rx() -> "re.Pattern[str]":
    """Any catalogue (or start-up tracker) keyword: a remark holding one may be vLLM's own text."""
    if not _KEYWORD_RX:
        _KEYWORD_RX.append(recache.compile("|".join(re.escape(k) for k in _keywords())))
    return _KEYWORD_RX[0]


def _headless_envelope(raw: str, envs: "Envelopes | None") -> int:
    """Where the message of a line without a record head starts (0: no envelope)."""
    if envs is not None and envs.shapes:
        n = envs.peel(raw)
        if n:
            return n
    # a container prefix in compose's own naming (project-service-N) or kubectl's is one without a head;
    # any other "name  | " only as part of the envelope before a known message start (not a table row)
    m = _COMPOSE_NAMED.match(raw) or _KUBE_PREFIX.match(raw)
    base = m.end() if m else 0
    m = _ENV_CHARS.match(raw, base)
    if m is None or m.end() >= len(raw):
        return base
    end = m.end()
    mark = len(raw[:end].rstrip(" \t"))  # the envelope's last mark; the indentation after it is the message's
    if mark <= base:
        return base
    if not _known_start().match(raw, end):
        # an unknown message still counts when the envelope closes the line (`...`, | ... |)
        opened = [c for c in raw[base:mark] if c in "|`"]
        if not opened or not raw.rstrip().endswith(opened[0]) or len(raw.rstrip()) <= end:
            return base
    sep = raw[mark: mark + 1]
    return mark + 1 if sep == "\t" or (sep == " " and raw[mark - 1] in _MARKS) else mark


def envelope_meta(env: str) -> dict:
    """Metadata of an envelope: its recognised parts under their own keys, the rest as ``prefix``."""
    meta: dict[str, Any] = {}
    rest = env
    m = _COMPOSE.match(rest)
    if m and m.group("container") not in _LEVELS:
        meta["container"] = m.group("container")
        rest = rest[m.end():]
    else:
        m = _KUBE_PREFIX.match(rest)
        if m:
            meta["container"] = f"{m.group('pod')}/{m.group('container')}"
            rest = rest[m.end():]
    if rest[:1].isdigit():
        m = _DOCKER_TS.match(rest)
        if m:
            meta["timestamp"] = m.group("ts")
            if m.group("stream"):
                meta["stream"] = m.group("stream")
                meta["partial"] = m.group("tag") == "P"
            rest = rest[m.end():]
    elif rest[:1].isupper() and rest[3:4] == " ":
        m = _SYSLOG.match(rest)
        if m:
            meta.update(timestamp=m.group("ts"), host=m.group("host"), ident=m.group("ident"))
            if m.group("pid"):
                meta["pid"] = int(m.group("pid"))
            rest = rest[m.end():]
    if rest.strip():
        meta["prefix"] = rest
    return meta


def _close(text: str, env: str) -> str:
    """Drop from the end of ``text`` what closes the envelope's openers (`` `...` ``, ``| ... |``)."""
    opened = [c for c in env if c in _CLOSERS]
    if not opened:
        return text
    for c in list(dict.fromkeys(opened))[:2]:  # the outermost closes last: strip it first
        t = text.rstrip()
        if t.endswith(c) and (c != "'" or t.count("'") % 2 == 1) and (c != '"' or t.count('"') % 2 == 1):
            text = t[:-1].rstrip() if c == "|" else t[:-1]
    return text


def proc_prefix(key: str) -> tuple[str, str | None] | bool:
    """(rank, ip) of a line's leading ``(...)`` (``key``, up to its first ``)``) when it is a vLLM process
    prefix, else False (`split_envelope` then takes its general path); remembered by ``key``."""
    hit = _PREFIX_CACHE.get(key)
    if hit is None:
        if len(_PREFIX_CACHE) >= 4096:
            _PREFIX_CACHE.clear()
        m = _PROC.match(key)
        hit = _PREFIX_CACHE[key] = (
            (rank_label(m.group("name"), m.group("pid")), m.group("ip")) if m and m.end() == len(key) else False
        )
    return hit


def split_envelope(raw: str, envs: "Envelopes | None" = None) -> tuple[str, str | None, dict | None]:
    """Split a decoded, ANSI-free line into (message text, rank, metadata).

    ``envs`` (one per input) learns the envelopes seen before record heads, to peel lines without
    one; without it a headless line is peeled only before a known message start.
    """
    if raw[:1] == "(":
        # the usual vLLM line: a process prefix at the very start, the same on thousands of lines
        j = raw.find(")", 1, RECORD_WINDOW)
        if j > 0:
            key = raw[: j + 1]
            hit: tuple[str, str | None] | bool | None = _PREFIX_CACHE.get(key)
            if hit is None:
                hit = proc_prefix(key)
            if hit is not False:  # what the general path below finds for a prefix at position 0
                end = j + 2 if raw[j + 1: j + 2] == " " and j + 1 < RECORD_WINDOW else j + 1
                assert isinstance(hit, tuple)
                return normalise_message(raw[end:]), hit[0], ({"ip": hit[1]} if hit[1] else None)
    elif raw[:1] in "DIWEC" and _HEAD.match(raw):
        return normalise_message(raw), None, None  # a bare vLLM line
    return split_envelope_general(raw, envs)


def split_envelope_general(raw: str, envs: "Envelopes | None" = None) -> tuple[str, str | None, dict | None]:
    """`split_envelope` without its fast paths (what they must agree with)."""
    rank = None
    meta: dict | None = None
    m = _RECORD_HEAD.search(raw, 0, RECORD_WINDOW)
    if m is None and " - " in raw:
        m = _PYLOG_HEAD.search(raw, 0, RECORD_WINDOW)
    if m is not None:
        start = m.start()
        if m.re is _RECORD_HEAD and m.group("proc") is not None:
            rank = rank_label(m.group("name"), m.group("pid"))
            if m.group("ip"):
                meta = {"ip": m.group("ip")}
            text = raw[m.end():]
        else:
            text = raw[start:]
        if start and envs is not None:
            envs.learn(raw[:start])
    else:
        start = _headless_envelope(raw, envs)
        text = raw[start:]
        if start and envs is not None and not envs.shapes and (_COMPOSE.match(raw) or _KUBE_PREFIX.match(raw)):
            # a container's first lines carry no record head (a native library's error before vLLM logs): the
            # prefix, verified by the known message start after it, peels the container's next headless lines too
            envs.learn(raw[:start])
    if start:
        env = raw[:start]
        got = envelope_meta(env)
        if got:
            meta = dict(got, **meta) if meta else got
        text = _close(text, env)
    return normalise_message(text), rank, meta


# --- inside the message ---------------------------------------------------------------------

# a number grouped with a locale's thousands separator ("2.918.000", "2 918 000", "2'918'000", narrow
# no-break space); the comma is left alone: vLLM prints "485,088" itself and the patterns read it,
# while "[512,504,496]" is a list, and a single ",ddd" may be a decimal comma ("1,234 GiB")
_GROUPED = recache.compile(
    r"(?<![\w.,'\u2019\u202f\u00a0\u2009])\d{1,3}(?P<sep>[.'\u2019\u202f\u00a0\u2009 ])\d{3}(?:(?P=sep)\d{3})*"
    r"(?![\w\u202f\u00a0\u2009]|[.,'\u2019]\d)"
)
_COUNT_UNIT = recache.compile(r" (?:tokens|blocks|reqs|requests|seqs|sequences)\b")  # units of whole numbers
_GROUP_HINT = recache.compile("[0-9][.'\u2019\u202f\u00a0\u2009 ][0-9]{3}")
NUMBER_WINDOW = 400  # a grouped number is looked for this far into the line: the figures' lines are short
# longer lines are dumps vLLM formats itself (config, args, request prompts): their numbers and spacing
# are left alone (a trailing remark is still dropped)
NORMALISE_MAX_CHARS = 1000
REMARK_MAX_CHARS = 200
# the end of the vLLM (or uvicorn) head inside a line's text, and the message's own indentation after it
_MSG_START = recache.compile(
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? (?:\[[^\]]*\]|[\w.-]+:\d+\])? ?"
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[ \t]+)?[ \t]*"
)
_ALIGN = recache.compile(r"(?<=\S)(?:[ \t]{2,}|\t)(?=\S)")
_REMARK = recache.compile(r"(?<=\S)[ \t]+#[ \t].*$")
_LOGO = recache.compile("[\u2580-\u259f]")  # vLLM's ASCII logo: its alignment is what the logo patterns read


def _ungroup(m: "re.Match[str]") -> str:
    s, sep = m.group(0), m.group("sep")
    if sep == ".":
        parts = s.split(".")
        if len(parts) == 4 and all(int(p) <= 255 for p in parts):
            return s  # an IPv4 address
        if len(parts) == 2 and not _COUNT_UNIT.match(m.string, m.end()):
            return s  # one dot is a decimal point, unless a count follows ("485.088 tokens")
    elif sep == " ":
        text, a, b = m.string, m.start(), m.end()
        if re.match(r" ?[A-Za-z%]", text[b: b + 2]) is None or re.search(r"\d[ ,]$", text[max(0, a - 2): a]):
            return s  # only a count before its unit ("2 918 000 tokens"), never one of a list of numbers
    return s.replace(sep, "")


def normalise_message(text: str) -> str:
    """The message as the patterns expect it: thousands separators of any locale removed, runs of
    spaces used for alignment collapsed to one, a trailing ``# remark`` dropped.

    The head and the message's own indentation (tracebacks, code) are kept, and so is the alignment
    of vLLM's ASCII logo. The numbers of the lines vLLM prints by the thousand (stats) are not looked
    at, a grouped number is looked for in the first `NUMBER_WINDOW` characters, and lines over
    `NORMALISE_MAX_CHARS` keep their numbers and spacing (their remark is looked for in their tail).
    """
    n = len(text)
    if n > NORMALISE_MAX_CHARS:
        spaced = False
        tail = n - REMARK_MAX_CHARS  # a long line is searched for its remark in its tail only
        if text.find(" #", tail) < 0 and text.find("\t#", tail) < 0:
            return text
    else:
        tail = 0
        if "Avg prompt throughput" not in text and _GROUP_HINT.search(text, 0, NUMBER_WINDOW):
            text = _GROUPED.sub(_ungroup, text)
        spaced = "  " in text or "\t" in text
        # "#" alone is found by memchr; the two-character searches are 3-4x slower (the usual line has no "#")
        if not spaced and ("#" not in text or " #" not in text and "\t#" not in text):
            return text
    k = _MSG_START.match(text).end()  # type: ignore[union-attr]  # (it can match empty)
    body = text[k:]
    if spaced and ("  " in body or "\t" in body) and not _LOGO.search(body):
        body = _ALIGN.sub(" ", body)
    if " #" in body or "\t#" in body:
        m = _REMARK.search(body, max(0, tail - k))
        if m is not None and m.start() > 0 and _keyword_rx().search(m.group(0)) is None:
            body = body[: m.start()]
    return text[:k] + body if k else body


def make_line(number: int, data: bytes, envs: "Envelopes | None" = None) -> Line:
    """Decode one raw line (without its newline) into a `Line`; ``envs``: the input's `Envelopes`."""
    raw = data.decode("utf-8", "replace")
    if "\r" in raw:
        raw = raw.rstrip("\r")
        if "\r" in raw:
            # progress bars redraw with a bare \r: keep what the terminal would show last,
            # unless that part is empty
            tail = raw.rsplit("\r", 1)[1]
            raw = tail if tail.strip() else raw.replace("\r", " ")
    if "\x1b" in raw:
        raw = _ANSI.sub("", raw)  # strip_ansi, without a call for the usual line
    if "\x00" in raw:
        raw = raw.replace("\x00", "")
    if raw[:1] == "\ufeff":
        raw = raw[1:]  # a byte-order mark (an editor's UTF-8 file, or what a UTF-16 one decodes to)
    text, rank, meta = split_envelope(raw, envs)
    return Line(number, text, rank, raw, meta)


# --- opening -------------------------------------------------------------------------------


class Truncation:
    """Why an input was read only in part (None while it is read whole): filled in by `_CappedReader`."""

    __slots__ = ("reason", "message", "bytes_read")

    def __init__(self) -> None:
        self.reason: str | None = None  # "cut" (a compressed stream ends early) or "max_bytes"
        self.message = ""
        self.bytes_read = 0

    def to_json(self) -> dict[str, Any] | None:
        if self.reason is None:
            return None
        return {"reason": self.reason, "message": self.message, "bytes_read": self.bytes_read}


_TRUNCATIONS: "weakref.WeakKeyDictionary[Any, Truncation]" = weakref.WeakKeyDictionary()


def truncation(fh: BinaryIO) -> dict[str, Any] | None:
    """The ``truncated`` note of a stream `open_input` returned, once it has been read: None when whole."""
    t = _TRUNCATIONS.get(fh)
    return t.to_json() if t is not None else None


class _CappedReader(io.RawIOBase):
    """Stop reading after ``limit`` bytes (a decompression bomb, ``--max-bytes``), and end a compressed
    stream that is cut mid-way (a log still being written) where it ends: both are recorded in ``note``
    and read as the end of the input, so every line read is analysed."""

    def __init__(self, inner: BinaryIO, limit: int, name: str, note: Truncation, compressed: bool):
        self._inner, self._left, self._limit, self._name = inner, limit, limit, name
        self._note, self._compressed = note, compressed
        # read1: one decompression step per call, so what was decompressed before a cut is never lost
        self._read = getattr(inner, "read1", inner.read)

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self._note.reason is not None:
            return 0
        try:
            data = self._read(min(len(buf), self._left + 1))
        except EOFError:
            self._note.reason = "cut"
            self._note.message = (f"the compressed stream ends early (truncated after {self._note.bytes_read:,} "
                                  "decompressed bytes): the analysis covers the lines before the cut")
            return 0
        if len(data) > self._left:
            data = data[: self._left]
            self._note.reason = "max_bytes"
            what = "decompressed bytes" if self._compressed else "bytes"
            self._note.message = (f"stopped after {self._limit:,} {what} (--max-bytes): "
                                  "the analysis covers the lines read before that")
        self._left -= len(data)
        self._note.bytes_read += len(data)
        buf[: len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


class _ZstdReader(io.RawIOBase):
    """zstd frames one after another, streamed; EOFError when the input ends inside a frame.

    (zstandard's ``stream_reader`` returns a truncated stream as a shorter one, silently.) Its
    ``decompressobj`` has no output limit, so the compressed input is fed in slices of `ZSTD_FEED_BYTES`:
    one slice decompresses to at most ~8 MiB (an RLE block of 4 bytes is 128 KiB), whatever the file
    holds, and no more is fed until that output was read — a small zstd bomb never sits whole in memory."""

    ZSTD_FEED_BYTES = 256

    def __init__(self, fh: BinaryIO, zstandard):
        self._fh, self._z = fh, zstandard
        self._dobj = zstandard.ZstdDecompressor().decompressobj()
        self._buf, self._pos = b"", 0  # decompressed, not yet read
        self._input, self._ipos = b"", 0  # compressed, not yet fed
        self._fed = False  # bytes went into the current frame

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while self._pos >= len(self._buf):
            if self._ipos >= len(self._input):
                self._input, self._ipos = self._fh.read(CHUNK_BYTES), 0
                if not self._input:
                    if self._fed and not self._dobj.eof:
                        raise EOFError("zstd frame ends early")
                    return 0
            if self._dobj.eof:  # the next frame of a multi-frame file
                self._dobj = self._z.ZstdDecompressor().decompressobj()
                self._fed = False
            piece = self._input[self._ipos:self._ipos + self.ZSTD_FEED_BYTES]
            self._ipos += len(piece)
            self._buf, self._pos = self._dobj.decompress(piece), 0
            self._fed = True
            if self._dobj.eof and self._dobj.unused_data:  # a frame ended inside the slice: the rest is the next one's
                self._ipos -= len(self._dobj.unused_data)
        n = min(len(buf), len(self._buf) - self._pos)
        buf[:n] = self._buf[self._pos:self._pos + n]
        self._pos += n
        return n

    def close(self) -> None:
        try:
            self._fh.close()
        finally:
            super().close()


class _Utf16Reader(io.RawIOBase):
    """A UTF-16 stream (a PowerShell ``>`` redirect, Notepad's "Unicode") read as UTF-8.

    Invalid sequences become U+FFFD as in UTF-8 input; a byte-order mark is dropped."""

    def __init__(self, inner: BinaryIO, encoding: str):
        self._inner = inner
        self._dec = codecs.getincrementaldecoder(encoding)("replace")
        self._buf = b""
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while not self._buf and not self._eof:
            data = self._inner.read(CHUNK_BYTES)
            self._eof = not data
            self._buf = self._dec.decode(data, final=self._eof).encode("utf-8", "replace")
        n = min(len(buf), len(self._buf))
        buf[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


UTF16_SNIFF_BYTES = 4096


def detect_utf16(head: bytes) -> str | None:
    """``utf-16`` (with a byte-order mark), ``utf-16-le`` / ``utf-16-be`` (without one, when the
    text is mostly ASCII: every other byte is NUL), or None for any other input."""
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") and head[:4] != b"\xff\xfe\x00\x00":
        return "utf-16"
    sample = head[: UTF16_SNIFF_BYTES & ~1]
    if len(sample) < 16:
        return None
    even, odd = sample[0::2], sample[1::2]
    half = len(sample) // 2
    if odd.count(0) >= 0.9 * half and even.count(0) <= 0.1 * half:
        return "utf-16-le"
    if even.count(0) >= 0.9 * half and odd.count(0) <= 0.1 * half:
        return "utf-16-be"
    return None


def _text_stream(fh: BinaryIO, name: str) -> BinaryIO:
    """``fh`` itself, or — for UTF-16 text — a UTF-8 view of it (judged from its buffered head)."""
    try:
        head = fh.peek(UTF16_SNIFF_BYTES)[:UTF16_SNIFF_BYTES] if hasattr(fh, "peek") else b""
    except OSError as exc:
        fh.close()
        raise InputError(f"{name}: cannot read ({exc.strerror or exc})") from None
    encoding = detect_utf16(head)
    if encoding is None:
        return fh
    return io.BufferedReader(_Utf16Reader(fh, encoding), CHUNK_BYTES)  # type: ignore[arg-type,return-value]


class _SniffedText(io.RawIOBase):
    """A decompressed stream that may hold UTF-16 text: judged on the first read, so that a truncated
    archive still fails while it is read (with the lines before the damage), not when it is opened."""

    def __init__(self, inner: BinaryIO):
        self._inner = inner
        self._read: Any = None  # the readinto of what the head showed the stream to be

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self._read is None:
            head = self._inner.read(UTF16_SNIFF_BYTES)
            encoding = detect_utf16(head)
            rest = io.BufferedReader(_Prefixed(head, self._inner), CHUNK_BYTES)  # type: ignore[arg-type]
            self._read = (_Utf16Reader(rest, encoding) if encoding else rest).readinto
        return self._read(buf)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


class _Prefixed(io.RawIOBase):
    """``head`` (bytes already read), then the rest of ``inner``."""

    def __init__(self, head: bytes, inner: BinaryIO):
        self._head, self._inner = head, inner

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self._head:
            n = min(len(buf), len(self._head))
            buf[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._inner.read(len(buf))
        buf[: len(data)] = data
        return len(data)


def detect_compression(head: bytes) -> str | None:
    """Name the compression of a stream from its first bytes, or None."""
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    return None


def open_input(source: str, max_bytes: int = DEFAULT_MAX_BYTES) -> BinaryIO:
    """Open a path or ``-`` as a binary stream of decompressed bytes.

    Raises `InputError` with a one-line message naming the source when it cannot be opened.
    """
    name = "<stdin>" if source == "-" else source
    try:
        if source == "-":
            fh: BinaryIO = io.BufferedReader(sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer, CHUNK_BYTES)  # type: ignore[arg-type,type-var]
        else:
            if os.path.isdir(source):
                raise InputError(f"{name}: is a directory")
            fh = open(source, "rb", buffering=CHUNK_BYTES)  # noqa: SIM115
    except InputError:
        raise
    except FileNotFoundError:
        raise InputError(f"{name}: no such file") from None
    except PermissionError:
        raise InputError(f"{name}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{name}: cannot open ({exc.strerror or exc})") from None
    return open_stream(fh, name, max_bytes)


def open_stream(fh: BinaryIO, name: str, max_bytes: int = DEFAULT_MAX_BYTES) -> BinaryIO:
    """An opened binary stream (with ``peek``; `open_input`'s file or a remote object's reader) as a stream
    of decompressed bytes; closes ``fh`` and raises `InputError` naming ``name`` when its head cannot be read."""
    try:
        head = fh.peek(8)[:8] if hasattr(fh, "peek") else b""
    except OSError as exc:
        fh.close()
        raise InputError(f"{name}: cannot read ({exc.strerror or exc})") from None
    kind = detect_compression(head)
    note = Truncation()
    if kind is None:
        if 0 <= _file_size(fh) <= max_bytes:
            out = _text_stream(fh, name)  # a regular file within the cap: read as it is (the parallel reader)
        else:  # a pipe, or a file larger than the cap: read up to the cap
            out = _text_stream(io.BufferedReader(_CappedReader(fh, max_bytes, name, note, False), CHUNK_BYTES), name)  # type: ignore[arg-type]
        _TRUNCATIONS[out] = note
        return out
    if kind == "gzip":
        import gzip  # on use: with zlib and _compression ~0.7 ms of every start, and most logs are plain text

        inner: BinaryIO = gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[assignment]
    elif kind == "bz2":
        import bz2  # on use, like gzip and lzma

        inner = bz2.BZ2File(fh, mode="rb")  # type: ignore[assignment]
    elif kind == "xz":
        import lzma

        inner = lzma.LZMAFile(fh, mode="rb")  # type: ignore[assignment]
    else:
        try:
            import zstandard
        except ImportError:  # pragma: no cover - zstandard is a dependency
            fh.close()
            raise InputError(f"{name}: zstd-compressed, but the zstandard package is missing") from None
        inner = _ZstdReader(fh, zstandard)  # type: ignore[assignment]
    capped = io.BufferedReader(_CappedReader(inner, max_bytes, name, note, True), CHUNK_BYTES)  # type: ignore[arg-type]
    out = io.BufferedReader(_SniffedText(capped), CHUNK_BYTES)  # type: ignore[arg-type]
    _TRUNCATIONS[out] = note
    return out


def _read_error(name: str, exc: BaseException) -> InputError:
    kind = type(exc).__name__
    msg = str(exc) or kind
    if isinstance(exc, EOFError):
        msg = "compressed stream ends early (truncated)"
    return InputError(f"{name}: {msg}")


# --- line iteration ------------------------------------------------------------------------


class LineStats:
    """Counters the reader keeps while it runs (lines read, over-long lines cut)."""

    __slots__ = ("lines", "long_lines", "bytes")

    def __init__(self) -> None:
        self.lines = 0
        self.long_lines = 0
        self.bytes = 0


def iter_chunks(fh: BinaryIO, name: str, chunk_bytes: int | None = None, stats: "LineStats | None" = None) -> Iterator[bytes]:
    """Yield chunks that each end at a line boundary (except possibly the last one).

    Reads ``chunk_bytes`` (default `CHUNK_BYTES`) at a time. An over-long line is cut: its first
    ``MAX_LINE_BYTES`` are kept and the rest is dropped while reading, so a 100 MB line costs no
    more memory than a short one.
    """
    return _chunks(fh.read, name, chunk_bytes or CHUNK_BYTES, stats=stats)


def _chunks(read, name: str, chunk_bytes: int, carry: bytes = b"", skipping: bool = False,
            final: bool = True, stats: "LineStats | None" = None) -> Iterator[bytes]:
    """`iter_chunks` on a ``read(n)`` function, from a given state (the parallel reader resumes
    mid-file): ``carry`` is the kept start of the unfinished line, ``skipping`` says its tail is being
    dropped. With ``final=False`` the end of ``read`` is not the end of the input (no last chunk)."""
    while True:
        try:
            data = read(chunk_bytes)
        except InputError:
            raise
        except Exception as exc:  # OSError, EOFError, ValueError, lzma.LZMAError, zstandard.ZstdError and friends
            raise _read_error(name, exc) from None
        if not data:
            if carry and final:  # the last line, without newline (its kept part, if it was cut)
                yield carry
            return
        if skipping:
            nl = data.find(b"\n")
            if nl < 0:
                continue
            data = data[nl:]  # keep the newline so the cut line still ends
            skipping = False
        buf = carry + data if carry else data
        cut = buf.rfind(b"\n")
        if cut < 0:
            if len(buf) > MAX_LINE_BYTES:
                carry = buf[:MAX_LINE_BYTES]
                skipping = True
                if stats is not None:
                    stats.long_lines += 1
            else:
                carry = buf
            continue
        carry = buf[cut + 1:]
        if len(carry) > MAX_LINE_BYTES:
            carry = carry[:MAX_LINE_BYTES]
            skipping = True
            if stats is not None:
                stats.long_lines += 1
        yield buf[: cut + 1]


# --- fast candidate search ------------------------------------------------------------------
#
# The prefilter is an alternation of ~100 literal keywords. `re` tries every alternative at every
# byte (~10 MB/s), and one `bytes.find` pass per keyword would read a 1 GB log a hundred times.
# Two finders locate the keywords instead, with exactly the same lines as the regex:
#
# * `_Finder` (stdlib): each keyword is looked up through one of its bytes, its *pivot*; keywords
#   sharing a pivot are found together. A rare pivot is located with ``bytes.find`` (memchr) and each
#   occurrence checked in C by one anchored regex match; a common pivot gets one `re` pass whose
#   pattern starts with it (the fast literal-prefix scan). About 8 passes: ~250 MB/s.
# * `_BigramFinder` (numpy, on large inputs): each keyword is looked up through its rarest *pair of
#   bytes* in the input; one table lookup per byte position finds every such pair in a chunk, a
#   4-byte window next to the pair drops most near misses, and each hit left is checked with the
#   anchored regex. Newlines are found in the same vectorised way. ~1 GB/s.
# * `_AhoFinder` (ahocorasick_rs, a runtime dependency with wheels for every platform; from 1 MiB on, before
#   numpy): one Aho-Corasick DFA of all the keywords (Rust's aho-corasick crate), searched in windows of
#   `AHO_WINDOW` bytes. Every match is a keyword occurrence, so nothing is confirmed afterwards, and no numpy is
#   imported: ~450 MB/s on the 60 MB log, with the line and newline bookkeeping in Python (docs/performance.md,
#   "Session 9: keyword search"). Without the library the stdlib and numpy finders are used as before.
#
# The anchored patterns are ``pivot`` + the rest of each keyword (as a trie) + a look-behind for the
# whole keyword, so a match is a real keyword occurrence; every occurrence of every pivot is tried,
# so no line is missed. The choice of pivots (greedy weighted set cover over typical byte
# frequencies, or pair counts in a sample of the input) only costs time when it is a poor guess.

# fraction of bytes in typical vLLM logs (startup + request/access/stats lines); others ~2e-4
_BYTE_FREQ = {
    " ": .11, "e": .089, "t": .062, "o": .051, "r": .047, "s": .046, "n": .045, "a": .045, "i": .034,
    "p": .032, "0": .03, "1": .028, "l": .025, "m": .024, "u": .023, "c": .022, ",": .021, "_": .021,
    "h": .021, "d": .02, ":": .019, "2": .017, "\\": .016, "=": .016, "g": .013, "y": .013, "3": .013,
    ".": .012, "4": .011, "w": .011, "b": .01, "6": .0092, "/": .0092, "9": .0088, "8": .0088,
    "k": .0087, "5": .0085, "f": .0085, "[": .0081, "v": .0079, "7": .0078, "(": .0074, "N": .0073,
    ")": .0073, "-": .0065, "|": .0059, "I": .0056, "P": .0052, "]": .0049, "C": .0048, "F": .0048,
    "\n": .0045, "A": .0044, "'": .0043, "q": .0041, "O": .0039, "E": .0037, ";": .0037, "\x1b": .0036,
    "S": .0033, "T": .003, ">": .0029, "<": .0029, "x": .0029, "^": .0027, "D": .0025, "U": .0023,
    "R": .0022, "L": .0021, '"': .0021, "%": .0017, "}": .0017, "{": .0017, "W": .0015, "M": .0013,
    "\r": .0013, "z": .0013, "G": .0012, "V": .00093, "K": .00088, "B": .0008, "+": .00075,
}
_RARE_FREQ = 2e-4
# cost model, ns per input byte: a `re` pass, a memchr pass, and the work per pivot occurrence
_RE_PASS, _RE_HIT, _FIND_PASS, _FIND_HIT = 0.25, 40.0, 0.03, 250.0
FINDER_AFTER_BYTES = 256 << 10  # before: the prefilter regex (a finder costs ~20 ms to build)
NUMPY_AFTER_BYTES = 16 << 20  # after: the numpy finder (importing numpy costs ~0.1 s)
AHO_AFTER_BYTES = 1 << 20  # after: the Aho-Corasick finder, on every chunk (its DFA costs ~7 ms to build, 1 ms to import)
AHO_WINDOW = 64 << 10  # bytes of a chunk searched at once: bounds the match list of a dense chunk (~3 MB at worst)
_NUMPY_MIN_CHUNK = 64 << 10  # smaller chunks: numpy's per-call overhead does not pay
SPANS_FINDER_MIN = 16 << 10  # candidate_spans: smaller chunks use the regex
_KEYWORDS: dict = {}
_FINDERS: dict = {}
_CHEAP: dict = {}  # prefilter → whether its finder comes from the cache (`_finder_is_cheap`)
_BIGRAM_FINDERS: dict = {}
_AHO_FINDERS: dict = {}


def _literal_alternatives(rx: "re.Pattern[bytes]") -> list[bytes] | None:
    """The keywords of a prefilter that is an alternation of literals, or None for any other regex."""
    if not isinstance(rx.pattern, bytes) or rx.flags & (re.IGNORECASE | re.VERBOSE):
        return None
    try:
        from re import _parser as sre_parse  # type: ignore[attr-defined]  # Python >= 3.11
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_parse  # type: ignore[no-redef]
    try:
        tree = sre_parse.parse(rx.pattern, rx.flags)
    except Exception:  # noqa: BLE001 - anything unusual: keep the regex
        return None
    LIT, BRANCH, SUB, IN = sre_parse.LITERAL, sre_parse.BRANCH, sre_parse.SUBPATTERN, sre_parse.IN

    def expand(items) -> list[bytes] | None:
        outs = [b""]
        for op, av in items:
            if op is LIT:
                alts = [bytes([av])]
            elif op is BRANCH:
                alts = []
                for sub in av[1]:
                    got = expand(sub)
                    if got is None:
                        return None
                    alts += got
            elif op is SUB and not av[1] and not av[2]:  # (?:...) or (...) without flags
                inner = expand(av[3])
                if inner is None:
                    return None
                alts = inner
            elif op is IN and all(o is LIT for o, _ in av):
                alts = [bytes([v]) for _, v in av]
            else:
                return None
            if alts is None:
                return None
            outs = [a + b for a in outs for b in alts]
            if len(outs) > 4096:
                return None
        return outs

    kws = expand(list(tree))
    if not kws or any(not k or b"\n" in k for k in kws):
        return None
    return sorted(set(kws))


def _anchored(pivot: bytes, entries: list[tuple[int, bytes]]) -> bytes:
    """Regex (its text) matching at an occurrence of ``pivot`` that sits at offset ``i`` of keyword ``kw``,
    for each (i, kw): the rest of the keyword (as a trie), then a look-behind for all of it."""
    root: dict = {}
    for i, kw in entries:
        node = root
        for b in kw[i + len(pivot):]:
            node = node.setdefault(b, {})
        node.setdefault(None, set()).add(kw)

    def emit(node: dict) -> bytes:
        alts = [re.escape(bytes([b])) + emit(node[b]) for b in sorted(k for k in node if k is not None)]
        if None in node:
            alts += [b"(?<=" + re.escape(kw) + b")" for kw in sorted(node[None])]
        return alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"

    return re.escape(pivot) + emit(root)


def _plan_key(keywords: list[bytes]) -> str:
    return json.dumps(sorted({k.decode("latin-1") for k in keywords}))


def _is_plan(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(p, list) and len(p) == 3 and isinstance(p[0], int) and 0 <= p[0] < 256
                                       and isinstance(p[1], bool) and isinstance(p[2], str) for p in v)


def _plan(keywords: list[bytes]) -> list[list]:
    """`_Finder`'s passes: [pivot byte, found with memchr, pattern (latin-1 text)] — a greedy weighted set cover of
    the keywords by their bytes, cheapest cost per newly covered keyword."""
    freq = {ord(k): v for k, v in _BYTE_FREQ.items()}
    left = set(keywords)
    chosen: list[tuple[int, bool, list[bytes]]] = []  # (pivot, use memchr, keywords)
    while left:
        best: tuple[float, int, bool, list[bytes]] | None = None
        for b in sorted(set().union(*left)):
            cover = sorted(k for k in left if b in k)
            f = freq.get(b, _RARE_FREQ)
            find_cost = _FIND_PASS + f * _FIND_HIT
            re_cost = _RE_PASS + f * _RE_HIT
            score = min(find_cost, re_cost) / len(cover)
            if best is None or score < best[0]:
                best = (score, b, find_cost <= re_cost, cover)
        assert best is not None
        _, b, memchr, cover = best
        chosen.append((b, memchr, cover))
        left.difference_update(cover)
    return [[b, memchr, _anchored(bytes([b]), [(k.index(b), k) for k in cover]).decode("latin-1")]
            for b, memchr, cover in chosen]


class _Finder:
    """Finds, in a chunk, the lines in which any of a set of literal keywords occurs (stdlib only)."""

    __slots__ = ("passes", "probes")

    def __init__(self, keywords: list[bytes]):
        self.passes: list["re.Pattern[bytes]"] = []
        self.probes: list[tuple[bytes, "re.Pattern[bytes]"]] = []
        # the plan (pivot bytes and their patterns) depends only on the keywords: cached (~20 ms to work out)
        for b, memchr, pattern in recache.derived("finder-plan", _plan_key(keywords), lambda: _plan(keywords), _is_plan):
            rx = recache.compile(pattern.encode("latin-1"))
            if memchr:
                self.probes.append((bytes([b]), rx))
            else:
                self.passes.append(rx)

    def spans(self, chunk: bytes) -> list[tuple[int, int]]:
        """(start, end) of each line of ``chunk`` holding a keyword, in order (end: its ``\\n``)."""
        hits: list[int] = []
        for rx in self.passes:
            hits += [m.start() for m in rx.finditer(chunk)]
        for pivot, rx in self.probes:
            find, match = chunk.find, rx.match
            p = find(pivot)
            while p >= 0:
                if match(chunk, p):
                    hits.append(p)
                p = find(pivot, p + 1)
        if not hits:
            return []
        hits.sort()
        out = []
        rfind, find = chunk.rfind, chunk.find
        end = -1
        for p in hits:
            if p < end:
                continue  # another keyword on a line already taken
            start = rfind(b"\n", 0, p) + 1
            end = find(b"\n", p)
            if end < 0:
                end = len(chunk)
            out.append((start, end))
        return out


class _BigramFinder:
    """Numpy version of `_Finder` for large inputs; also finds the newlines.

    ``sample`` (a chunk of the input) decides which pair of bytes stands for each keyword: the one
    that occurs least in it.
    """

    def __init__(self, np, keywords: list[bytes], sample: bytes):
        self.np = np
        counts = self._pair_counts(sample)
        freq = {ord(k): v for k, v in _BYTE_FREQ.items()}
        groups: dict[int, list[tuple[int, bytes]]] = {}
        for kw in keywords:
            i = min(range(len(kw) - 1), key=lambda i: (int(counts[kw[i] | kw[i + 1] << 8]),
                                                      freq.get(kw[i], _RARE_FREQ) * freq.get(kw[i + 1], _RARE_FREQ)))
            groups.setdefault(kw[i] | kw[i + 1] << 8, []).append((i, kw))
        self.table = np.zeros(65536, dtype=bool)  # pairs that stand for a keyword
        self.window = np.zeros(65536, dtype=bool)  # every keyword of the pair has a window check
        # up to WINDOWS keywords per pair, each with its window: start - pair start, bytes (little-endian), mask
        self.delta = np.zeros((WINDOWS, 65536), dtype=np.int8)  # -4 .. 2 (`_window`)
        self.want = np.zeros((WINDOWS, 65536), dtype=np.uint32)
        self.mask = np.zeros((WINDOWS, 65536), dtype=np.uint32)
        self.slot = np.zeros((WINDOWS, 65536), dtype=bool)
        self.groups = groups
        self.match: dict[int, object] = {}  # compiled when the pair first occurs (most never do)
        for code, entries in groups.items():
            self.table[code] = True
            if len(entries) > WINDOWS:
                continue  # every occurrence of the pair is confirmed by its pattern
            self.window[code] = True
            for k, (i, kw) in enumerate(entries):
                w, width = _window(i, kw)
                self.slot[k, code] = True
                self.delta[k, code] = w - i
                self.want[k, code] = int.from_bytes(kw[w: w + width], "little")
                self.mask[k, code] = (1 << 8 * width) - 1

    def _pair_counts(self, data: bytes):
        np = self.np
        a = np.frombuffer(data, dtype=np.uint8)
        n = len(a)
        counts = np.zeros(65536, dtype=np.int64)
        # in slices: bincount widens its input to intp (8 bytes a pair), and a freed multi-MB temporary raises
        # malloc's mmap threshold, so later buffers of that size stay in the heap (peak RSS)
        for lo in range(0, n, PAIR_SLICE):
            part = a[lo: lo + PAIR_SLICE + 1]
            m = len(part)
            counts += np.bincount(part[: m // 2 * 2].view("<u2"), minlength=65536)
            counts += np.bincount(part[1: 1 + (m - 1) // 2 * 2].view("<u2"), minlength=65536)
        return counts

    def lines(self, chunk: bytes) -> tuple[list[tuple[int, int, int]], int]:
        """(newlines before it, start, end) of each candidate line of ``chunk``, and its newlines."""
        np = self.np
        n = len(chunk)
        a = np.frombuffer(chunk, dtype=np.uint8)
        nl = np.flatnonzero(a == 10)
        take = self.table.take
        pos = np.concatenate((np.flatnonzero(take(a[: n // 2 * 2].view("<u2"))) * 2,
                              np.flatnonzero(take(a[1: 1 + (n - 1) // 2 * 2].view("<u2"))) * 2 + 1))
        if not len(pos):
            return [], len(nl)
        codes = a[pos].astype(np.intp) | a[pos + 1].astype(np.intp) << 8
        if n >= 4:  # drop the near misses whose windows all differ (vectorised)
            keep = ~self.window[codes]
            for k in range(WINDOWS):
                slot = self.slot[k, codes]
                if not slot.any():
                    break  # slots are filled from the first: no pair has a keyword in this one
                w = pos + self.delta[k, codes]
                wc = np.clip(w, 0, n - 4)
                got = (a[wc].astype(np.uint32) | a[wc + 1].astype(np.uint32) << 8
                       | a[wc + 2].astype(np.uint32) << 16 | a[wc + 3].astype(np.uint32) << 24)
                # a window cut by the chunk's end (w != wc) is not checked here: the pattern decides
                keep |= slot & ((w != wc) | (got & self.mask[k, codes] == self.want[k, codes]))
            pos, codes = pos[keep], codes[keep]
        order = np.argsort(pos, kind="stable")
        pos, codes = pos[order], codes[order]
        line_of = np.searchsorted(nl, pos)  # a position's line = newlines before it
        match: dict[int, Any] = self.match
        found = []
        taken = -1
        for p, c, ln in zip(pos.tolist(), codes.tolist(), line_of.tolist()):
            if ln == taken:
                continue  # this line is a candidate already
            m = match.get(c)
            if m is None:
                m = match[c] = re.compile(_anchored(bytes([c & 255, c >> 8]), self.groups[c])).match
            if m(chunk, p):
                found.append(ln)
                taken = ln
        if not found:
            return [], len(nl)
        idx = np.array(found, dtype=np.intp)
        bounds = np.concatenate(([-1], nl, [n]))  # line i runs from bounds[i] + 1 to bounds[i + 1]
        return list(zip(found, (bounds[idx] + 1).tolist(), bounds[idx + 1].tolist())), len(nl)


PAIR_SLICE = 1 << 16  # bytes of the sample counted at a time (even: the pairs at even offsets stay at even offsets)
WINDOWS = 3  # keywords sharing one pair whose windows are checked in the vectorised pass (more: the pattern)


def _window(i: int, kw: bytes) -> tuple[int, int]:
    """(start, width) of the bytes of ``kw`` checked next to its pair at ``i``: 4 bytes after the pair, else before it,
    else the keyword's last 4; a keyword of 2-3 bytes is checked whole (a 2-byte one is the pair itself)."""
    if i + 6 <= len(kw):
        return i + 2, 4
    if i >= 4:
        return i - 4, 4
    if len(kw) >= 4:
        return len(kw) - 4, 4
    return 0, len(kw)


class _AhoFinder:
    """Finds the candidate lines of a chunk with one Aho-Corasick automaton of all the keywords (ahocorasick_rs).

    The chunk is searched in windows of `AHO_WINDOW` bytes, each extended by the longest keyword less one byte so
    that an occurrence starting in the window lies inside it; only matches starting in the window are taken (the
    next window finds the others). Matches are non-overlapping, but a line holding an occurrence that starts in a
    window always gets a reported match starting in that window or the next: a match never crosses a newline (no
    keyword holds one), and the search, restarting where the last match ended, reports the match that ends first
    among those starting at or after the restart, which lies in that line (tests/test_aho_finder.py). A window
    that starts inside a line already taken begins after that line instead.
    """

    __slots__ = ("find", "reach")

    def __init__(self, ahocorasick_rs: Any, keywords: list[bytes]):
        # the DFA, not the library's default (a contiguous NFA for this many keywords): 0.14 s against 0.34 s on the 60 MB log
        ac = ahocorasick_rs.BytesAhoCorasick(keywords, implementation=ahocorasick_rs.Implementation.DFA)
        self.find = ac.find_matches_as_indexes
        self.reach = max(map(len, keywords)) - 1

    def lines(self, chunk: bytes) -> tuple[list[tuple[int, int, int]], int]:
        """(newlines before it, start, end) of each candidate line of ``chunk``, and its newlines."""
        n = len(chunk)
        view = memoryview(chunk)
        find, count, rfind, nl_at = self.find, chunk.count, chunk.rfind, chunk.find
        reach, window = self.reach, max(AHO_WINDOW, 1)
        out = []
        newlines = counted = 0  # newlines in chunk[:counted]
        end = -1  # the newline (or the chunk's end) of the last line taken
        pos = 0
        while pos < n:
            stop = pos + window
            for _, s, _ in find(view[pos: stop + reach]):
                s += pos
                if s >= stop:
                    break  # matches come in order: the rest start in the next window too
                if s < end:
                    continue  # another keyword on a line already taken
                lo = end + 1
                start = rfind(b"\n", lo, s) + 1 or lo
                newlines += count(b"\n", counted, start)
                counted = start
                end = nl_at(b"\n", s)
                if end < 0:
                    end = n
                out.append((newlines, start, end))
            pos = stop if end < stop else end + 1
        return out, newlines + count(b"\n", counted)


def _aho_finder_for(prefilter: "re.Pattern[bytes]") -> _AhoFinder | None:
    """The Aho-Corasick finder of a literal prefilter, or None without ahocorasick_rs (or for another regex)."""
    key = (prefilter.pattern, prefilter.flags)
    if key not in _AHO_FINDERS:
        finder = None
        kws = _keywords_for(prefilter)
        if kws:
            try:
                import ahocorasick_rs
            except ImportError:  # a runtime dependency, but a broken or partial install still reads: numpy, stdlib
                pass
            else:
                finder = _AhoFinder(ahocorasick_rs, kws)
        _AHO_FINDERS[key] = finder
    return _AHO_FINDERS[key]


def _keywords_for(prefilter: "re.Pattern[bytes]") -> list[bytes] | None:
    key = (prefilter.pattern, prefilter.flags)
    if key not in _KEYWORDS:
        if isinstance(prefilter.pattern, bytes):  # parsing the ~300-keyword alternation costs ~10 ms: cached by its text
            def compute() -> list[str] | None:
                kws = _literal_alternatives(prefilter)
                return None if kws is None else [k.decode("latin-1") for k in kws]

            got = recache.derived("prefilter-keywords", _keywords_key(prefilter), compute, _is_text_list_or_none)
            _KEYWORDS[key] = None if got is None else [k.encode("latin-1") for k in got]
        else:
            _KEYWORDS[key] = _literal_alternatives(prefilter)
    return _KEYWORDS[key]


def _keywords_key(prefilter: "re.Pattern[bytes]") -> str:
    return f"{prefilter.flags}\0" + prefilter.pattern.decode("latin-1")


def _is_text_list_or_none(v: Any) -> bool:
    return v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v))


def _finder_for(prefilter: "re.Pattern[bytes]") -> _Finder | None:
    key = (prefilter.pattern, prefilter.flags)
    if key not in _FINDERS:
        kws = _keywords_for(prefilter)
        _FINDERS[key] = _Finder(kws) if kws else None
    return _FINDERS[key]


def _finder_is_cheap(prefilter: "re.Pattern[bytes]") -> bool:
    """Whether `_finder_for` costs next to nothing now: built already, or its keywords and plan are in the
    compiled-regex cache (then a small log is searched with it rather than with the prefilter regex, which
    tries every alternative at every byte: ~1.5 ms for a 5 KB start-up log against ~0.1 ms), or they will be
    from the next run on (the cache is writable: this run works them out once, ~30 ms)."""
    key = (prefilter.pattern, prefilter.flags)
    if key in _FINDERS:
        return _FINDERS[key] is not None
    if key not in _CHEAP:
        cached = recache.cached("prefilter-keywords", _keywords_key(prefilter)) if isinstance(prefilter.pattern, bytes) else None
        _CHEAP[key] = bool(cached and isinstance(cached[0], list) and _is_text_list_or_none(cached[0])
                           and recache.cached("finder-plan", _plan_key([k.encode("latin-1") for k in cached[0]])) is not None) \
            or (isinstance(prefilter.pattern, bytes) and recache.writable())
    return _CHEAP[key]


def _bigram_finder_for(prefilter: "re.Pattern[bytes]", sample: bytes) -> _BigramFinder | None:
    """The numpy finder (built from the first ``sample`` it is asked with), or None without numpy."""
    key = (prefilter.pattern, prefilter.flags)
    if key not in _BIGRAM_FINDERS:
        finder = None
        kws = _keywords_for(prefilter)
        if kws and all(len(k) >= 2 for k in kws):
            try:
                import numpy
            except ImportError:  # numpy comes with pandas; without it the stdlib finder is used
                pass
            else:
                finder = _BigramFinder(numpy, kws, sample)
        _BIGRAM_FINDERS[key] = finder
    return _BIGRAM_FINDERS[key]


def _regex_spans(chunk: bytes, prefilter: "re.Pattern[bytes]") -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    search, find, rfind = prefilter.search, chunk.find, chunk.rfind
    pos = 0
    while True:
        m = search(chunk, pos)
        if m is None:
            return out
        start = rfind(b"\n", 0, m.start()) + 1
        end = find(b"\n", m.end())
        if end < 0:
            end = len(chunk)
        out.append((start, end))
        pos = end


def candidate_spans(chunk: bytes, prefilter: "re.Pattern[bytes]") -> list[tuple[int, int]]:
    """(start, end) of every line of ``chunk`` in which ``prefilter`` matches, in order.

    ``end`` is the index of the line's ``\\n`` (or ``len(chunk)``). The same lines as searching with
    the regex. Chunks of `SPANS_FINDER_MIN` bytes or more use the stdlib finder (built once per
    process, ~20 ms), and once this process has read `NUMPY_AFTER_BYTES`, chunks of 64 KiB or more
    use numpy; once it has read `AHO_AFTER_BYTES`, every chunk uses the Aho-Corasick finder when
    ahocorasick_rs is installed. (`ChunkScanner` does the same for a stream and also counts the newlines.)
    """
    global _scanned
    _scanned += len(chunk)
    if _scanned > AHO_AFTER_BYTES:
        aho = _aho_finder_for(prefilter)
        if aho is not None:
            return [(start, end) for _, start, end in aho.lines(chunk)[0]]
    if len(chunk) >= _NUMPY_MIN_CHUNK and _scanned > NUMPY_AFTER_BYTES:
        bigrams = _bigram_finder_for(prefilter, chunk)
        if bigrams is not None:
            return [(start, end) for _, start, end in bigrams.lines(chunk)[0]]
    finder = _finder_for(prefilter) if len(chunk) >= SPANS_FINDER_MIN else None
    return finder.spans(chunk) if finder is not None else _regex_spans(chunk, prefilter)


class ChunkScanner:
    """The candidate lines of the successive chunks of one stream, found the fastest way that pays.

    ``scan(chunk)`` returns ``([(newlines before the line, start, end), ...], newlines in chunk)``
    for the lines of ``chunk`` in which ``prefilter`` matches (``end``: the line's ``\\n`` or the end
    of the chunk) — always the lines the regex itself would find. Which way depends on how much this
    process has scanned (all streams: ``scan`` reads thousands of small files) plus ``size_hint``
    (what this stream will give, when known): the regex up to `FINDER_AFTER_BYTES` (building a
    finder costs ~20 ms) unless the finder's plan is cached (`_finder_is_cheap`), then `_Finder`, and from `NUMPY_AFTER_BYTES` numpy for chunks of 64 KiB or
    more (importing numpy costs ~0.1 s) — unless ahocorasick_rs is installed: then from `AHO_AFTER_BYTES` on, the
    Aho-Corasick finder for every chunk (faster than both, and no numpy import).
    """

    def __init__(self, prefilter: "re.Pattern[bytes]", size_hint: int = -1, first_request: bool = False):
        self.prefilter = prefilter
        self.expect = _scanned + max(size_hint, 0)  # this process's bytes once the stream is read
        self.finder: _Finder | None = None
        self.bigrams: _BigramFinder | None = None
        self.no_numpy = False
        self.aho: _AhoFinder | None = None
        self.no_aho = False
        # with ``first_request``: the first request-logger line is a candidate too (`first_request_span`)
        self.request_tries = REQUEST_TRIES if first_request else 0

    def __call__(self, chunk: bytes) -> tuple[list[tuple[int, int, int]], int]:
        global _scanned
        _scanned += len(chunk)
        total = max(_scanned, self.expect)
        if self.aho is None and not self.no_aho and total > AHO_AFTER_BYTES:
            self.aho = _aho_finder_for(self.prefilter)
            self.no_aho = self.aho is None  # no ahocorasick_rs (or not a literal prefilter): the other finders
        if self.aho is not None:
            return self._with_request(chunk, self.aho.lines(chunk))
        big = len(chunk) >= _NUMPY_MIN_CHUNK
        if big and self.bigrams is None and not self.no_numpy and total > NUMPY_AFTER_BYTES:
            self.bigrams = _bigram_finder_for(self.prefilter, chunk)
            self.no_numpy = self.bigrams is None  # no numpy (or not a literal prefilter): stop asking
        if self.finder is None and (total > FINDER_AFTER_BYTES or _finder_is_cheap(self.prefilter)):
            self.finder = _finder_for(self.prefilter)
        if big and self.bigrams is not None:
            return self._with_request(chunk, self.bigrams.lines(chunk))
        spans = self.finder.spans(chunk) if self.finder is not None else _regex_spans(chunk, self.prefilter)
        out = []
        count = chunk.count
        newlines = pos = 0
        for start, end in spans:
            newlines += count(b"\n", pos, start)
            out.append((newlines, start, end))
            pos = end
        return self._with_request(chunk, (out, newlines + count(b"\n", pos)))

    def _with_request(self, chunk: bytes, got: tuple[list[tuple[int, int, int]], int]) -> tuple[list[tuple[int, int, int]], int]:
        if not self.request_tries:
            return got
        span, self.request_tries = first_request_span(chunk, self.request_tries)
        if span is None:
            return got
        self.request_tries = 0  # one line is enough: the start-up tracker needs only the first
        out, newlines = got
        start, end = span
        at = bisect.bisect_left(out, start, key=lambda t: t[1])
        if at < len(out) and out[at][1] == start:
            return got  # a candidate already
        out.insert(at, (chunk.count(b"\n", 0, start), start, end))
        return out, newlines


_scanned = 0  # bytes ChunkScanner has seen in this process

# The start-up tracker reads a request reaching the engine as "the server was up" (kvlogdiag/extract/failures.py
# `_REQUEST_SEEN`: vllm 0.10.2 vllm/entrypoints/logger.py:40 "Received request %s: prompt: %r, ...", 0.19.1
# v1/engine/async_llm.py "Added request %s."), but a request-logger line holds no prefilter keyword and a long log
# is mostly such lines: passing them all costs ~9x the CPU of the read. The first one is enough (once the server is
# seen up the tracker reads nothing more), so the scanner looks for it with a plain find per chunk until it is found
# (or after REQUEST_TRIES lines that hold the words but not vLLM's record head, e.g. a prompt quoting them).
_REQUEST_WORDS = (b"Received request ", b"Added request ")
_REQUEST_HEAD = re.compile(rb"\bINFO\b[^\n]{0,80}?\] (?:Received request \S+: (?:prompt|params)|Added request \S+\.\r?$)")
REQUEST_TRIES = 64


def first_request_span(chunk: bytes, tries: int) -> tuple[tuple[int, int] | None, int]:
    """(start, end) of the first line of ``chunk`` logged by vLLM's request logger (`_REQUEST_HEAD`), or None;
    and the tries left (each line holding the words but not the record head costs one)."""
    find, rfind = chunk.find, chunk.rfind
    pos = 0
    while tries > 0:
        hits = [i for i in (find(w, pos) for w in _REQUEST_WORDS) if i >= 0]
        if not hits:
            return None, tries
        i = min(hits)
        start = rfind(b"\n", 0, i) + 1
        end = find(b"\n", i)
        if end < 0:
            end = len(chunk)
        if _REQUEST_HEAD.search(chunk, start, end) is not None:
            return (start, end), tries
        tries -= 1
        pos = end
    return None, 0


def iter_lines(
    fh: BinaryIO,
    name: str,
    prefilter: "re.Pattern[bytes] | None" = None,
    stats: LineStats | None = None,
    stats_runs: bool = False,
    first_request: bool = False,
) -> Iterator[Line]:
    """Yield `Line` objects; with a prefilter, only lines in which it matches (and, with ``first_request``, the
    first line of vLLM's request logger: `first_request_span`; in a file searched in parallel, each unit's first).

    With ``stats_runs`` (and a prefilter), consecutive candidate lines of one chunk that all hold the stats
    line's keyword come as one `StatsRun` instead of `Line` objects (`StatsRun.lines` makes the same lines).

    Line numbers count every ``\\n`` in the input, filtered or not. A line longer than
    ``MAX_LINE_BYTES`` inside one chunk is cut to that length. A large regular file read with a
    prefilter is searched by worker processes (`_parallel_lines`); the lines are the same.
    """
    st = stats or LineStats()
    envs = Envelopes()
    chunks, number = None, 0  # number: lines completed before the current chunk
    if prefilter is not None:
        setup = _parallel_setup(fh, prefilter)
        if setup is not None:
            chunks, number = yield from _parallel_lines(fh, name, prefilter, st, *setup, envs=envs, stats_runs=stats_runs,
                                                        first_request=first_request)
    if chunks is None:
        chunks = iter_chunks(fh, name, stats=st)
    scan = ChunkScanner(prefilter, _file_size(fh), first_request) if prefilter is not None else None
    for chunk in chunks:
        st.bytes += len(chunk)
        if scan is None:
            parts = chunk.split(b"\n")
            if parts and parts[-1] == b"":
                parts.pop()
            last = len(parts) - 1 if not chunk.endswith(b"\n") else -1
            for i, part in enumerate(parts):
                number += 1
                if len(part) > MAX_LINE_BYTES:
                    part = part[:MAX_LINE_BYTES]
                    st.long_lines += 1
                line = make_line(number, part, envs)
                if i == last:
                    line.unterminated = True
                yield line
        elif stats_runs:
            found, newlines = scan(chunk)
            yield from _with_runs(chunk, found, number, st, envs)
            number += newlines
            if not chunk.endswith(b"\n"):
                number += 1
        else:
            found, newlines = scan(chunk)
            for before, start, end in found:
                part = chunk[start:end]
                if len(part) > MAX_LINE_BYTES:
                    part = part[:MAX_LINE_BYTES]
                    st.long_lines += 1
                line = make_line(number + before + 1, part, envs)
                if end == len(chunk) and not chunk.endswith(b"\n"):
                    line.unterminated = True
                yield line
            number += newlines
            if not chunk.endswith(b"\n"):
                number += 1  # the last line has no newline; it still counts
        st.lines = number


# --- stats lines in runs ---------------------------------------------------------------------------
#
# A long log is mostly stats lines. `iter_lines(..., stats_runs=True)` hands a run of consecutive candidate
# lines that all hold the stats keyword over as their bytes and numbers (`StatsRun`), without a `Line` or a
# decode per line; the extractor reads the whole run at once (`kvlogdiag.extract.stats_batch.read_run`) or, when
# the run is not in the plain form it reads, asks for the `Line` objects (`StatsRun.lines`: what the per-line
# reader yields). A run never crosses a chunk (memory stays bounded); a cut or unterminated line is no part of one.

STATS_KEY = b"Avg prompt throughput: "
RUN_MIN_LINES = 4  # shorter runs come as lines: reading a run has a fixed cost of a few lines


class StatsRun:
    """Consecutive candidate lines holding the stats keyword: ``numbers`` (1-based) and ``parts`` (their
    bytes, without the newline); ``envs`` is the input's `Envelopes` (for `lines`)."""

    __slots__ = ("numbers", "parts", "envs")

    def __init__(self, numbers: list[int], parts: list[bytes], envs: "Envelopes | None") -> None:
        self.numbers = numbers
        self.parts = parts
        self.envs = envs

    def line(self, i: int) -> Line:
        """The `Line` of the run's ``i``-th line, as `make_line` makes it."""
        return make_line(self.numbers[i], self.parts[i], self.envs)

    def lines(self) -> list[Line]:
        """The run's lines, as `iter_lines` yields them without ``stats_runs``."""
        envs = self.envs
        return [make_line(n, p, envs) for n, p in zip(self.numbers, self.parts)]


def _flush_run(numbers: list[int], parts: list[bytes], envs: "Envelopes | None") -> Iterator[Any]:
    if len(numbers) >= RUN_MIN_LINES:
        yield StatsRun(numbers, parts, envs)
    else:
        for n, p in zip(numbers, parts):
            yield make_line(n, p, envs)


def _with_runs(chunk: bytes, found: list, number: int, st: LineStats, envs: "Envelopes | None") -> Iterator[Any]:
    """`iter_lines`'s candidate lines of one chunk, runs of stats lines as `StatsRun`."""
    numbers: list[int] = []
    parts: list[bytes] = []
    clen = len(chunk)
    open_end = not chunk.endswith(b"\n")
    for before, start, end in found:
        part = chunk[start:end]
        if STATS_KEY in part and len(part) <= MAX_LINE_BYTES and not (open_end and end == clen):
            numbers.append(number + before + 1)
            parts.append(part)
            continue
        if numbers:
            yield from _flush_run(numbers, parts, envs)
            numbers, parts = [], []
        if len(part) > MAX_LINE_BYTES:
            part = part[:MAX_LINE_BYTES]
            st.long_lines += 1
        line = make_line(number + before + 1, part, envs)
        if end == clen and open_end:
            line.unterminated = True
        yield line
    if numbers:
        yield from _flush_run(numbers, parts, envs)


def _record_runs(blob: bytes, nums: Any, ends: Any, number: int, st: LineStats, envs: "Envelopes | None") -> Iterator[Any]:
    """`_parallel_lines`'s candidate lines of one unit's record, runs of stats lines as `StatsRun`."""
    numbers: list[int] = []
    parts: list[bytes] = []
    begin = 0
    for n, stop in zip(nums, ends):
        part = blob[begin:stop]
        begin = stop
        if STATS_KEY in part and len(part) <= MAX_LINE_BYTES:
            numbers.append(number + n)
            parts.append(part)
            continue
        if numbers:
            yield from _flush_run(numbers, parts, envs)
            numbers, parts = [], []
        if len(part) > MAX_LINE_BYTES:
            part = part[:MAX_LINE_BYTES]
            st.long_lines += 1
        yield make_line(number + n, part, envs)
    if numbers:
        yield from _flush_run(numbers, parts, envs)


# --- parallel search of a large file -------------------------------------------------------------
#
# Searching is most of the time on a long log, and it needs no state but the line boundaries, so a
# large regular file is cut into units of whole chunks, searched by worker processes (fork, `pread`
# on the inherited descriptor), and the main process only decodes and feeds the candidate lines, in
# order. A worker starts a unit in the exact state `iter_chunks` would be in at that offset (the
# unfinished line carried over, cut or not), so chunks, lines, numbers and over-long-line cuts are
# the same as reading serially. What was appended after the start (a live file) is read serially.

PARALLEL_MIN_BYTES = 48 << 20  # smaller files: starting workers does not pay
UNIT_CHUNKS = 8  # chunks per work unit
_JOBS_ENV = "KVLOGDIAG_READ_JOBS"  # worker processes; 0 reads serially


def _read_jobs() -> int:
    """Worker processes for the search: `KVLOGDIAG_READ_JOBS` (0: read serially), else one per CPU
    beside the main process's own, at most two — the main process, which decodes and feeds the
    lines, is the slower stage: one worker keeps up with it on a 2-CPU machine."""
    env = os.environ.get(_JOBS_ENV, "").strip()
    if env.isdigit():
        return int(env)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - platforms without affinity
        cpus = os.cpu_count() or 1
    return min(cpus - 1, 2)


def _parallel_setup(fh: BinaryIO, prefilter: "re.Pattern[bytes]") -> tuple[int, int, int, int] | None:
    """(fd, start offset, units, jobs) when ``fh`` should be searched in parallel, else None."""
    if not sys.platform.startswith("linux"):
        return None
    size = _file_size(fh)
    if size < PARALLEL_MIN_BYTES or _keywords_for(prefilter) is None:  # the size first: a small file needs no keywords
        return None
    fd, start = fh.fileno(), fh.tell()
    jobs = _read_jobs()
    units = size // (CHUNK_BYTES * UNIT_CHUNKS)
    if jobs < 1 or units < 2:
        return None
    import multiprocessing
    import threading

    if multiprocessing.parent_process() is not None or threading.active_count() > 1:
        return None  # a worker already (scan -j), or threads that a fork would not carry over
    # build the finder the workers will use before they fork: Aho-Corasick, else numpy (from the first chunk)
    if _aho_finder_for(prefilter) is None:
        try:
            _bigram_finder_for(prefilter, _pread_exact(fd, min(CHUNK_BYTES, size), start))
        except OSError:
            return None
    return fd, start, units, jobs


def _file_size(fh: BinaryIO) -> int:
    """Bytes left in ``fh`` when it is a regular file, else -1 (pipes, decompressed streams)."""
    try:
        info = os.fstat(fh.fileno())
        return info.st_size - fh.tell() if stat.S_ISREG(info.st_mode) else -1
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return -1


def _pread_exact(fd: int, size: int, offset: int) -> bytes:
    data = os.pread(fd, size, offset)
    while len(data) < size:
        more = os.pread(fd, size - len(data), offset + len(data))
        if not more:
            raise OSError(f"file shrank while reading (at byte {offset + len(data)})")
        data += more
    return data


def _state_at(fd: int, start: int, offset: int) -> tuple[bytes, bool]:
    """`iter_chunks`'s (carry, skipping) at chunk boundary ``offset`` of a file read from ``start``."""
    lo = max(start, offset - min(MAX_LINE_BYTES + 1, 64 << 10))  # lines are short: look back a little
    window = _pread_exact(fd, offset - lo, lo)
    nl = window.rfind(b"\n")
    if nl < 0 and lo > start and offset - lo < MAX_LINE_BYTES + 1:
        lo = max(start, offset - MAX_LINE_BYTES - 1)
        window = _pread_exact(fd, offset - lo, lo)
        nl = window.rfind(b"\n")
    if nl >= 0:
        return window[nl + 1:], False
    line_start = lo
    while line_start > start:  # the unfinished line began before the window: find its start
        lo = max(start, line_start - CHUNK_BYTES)
        nl = _pread_exact(fd, line_start - lo, lo).rfind(b"\n")
        if nl >= 0:
            line_start = lo + nl + 1
            break
        line_start = lo
    if offset - line_start <= MAX_LINE_BYTES:
        return _pread_exact(fd, offset - line_start, line_start), False
    return _pread_exact(fd, MAX_LINE_BYTES, line_start), True


_RECORD = struct.Struct("<6q")  # newlines, bytes read, candidate lines, blob bytes, error bytes, lines cut


def _search_unit(fd: int, name: str, prefilter: "re.Pattern[bytes]", start: int, unit: int, first_request: bool = False) -> bytes:
    """Worker: one unit's record — a `_RECORD` header, then per candidate line its number within
    the unit and its end in the blob (int64 each), then the blob of the lines themselves."""
    try:
        pos = start + unit * UNIT_CHUNKS * CHUNK_BYTES
        end = pos + UNIT_CHUNKS * CHUNK_BYTES
        carry, skipping = _state_at(fd, start, pos)
    except OSError as exc:
        raise _read_error(name, exc) from None

    def read(n: int) -> bytes:
        nonlocal pos
        n = min(n, end - pos)
        if n <= 0:
            return b""
        data = _pread_exact(fd, n, pos)
        pos += n
        return data

    numbers = array.array("q")  # per candidate line: its number within the unit, its end in the blob
    ends = array.array("q")
    parts = []
    newlines = nbytes = size = 0
    scan = ChunkScanner(prefilter, size_hint=sys.maxsize // 2, first_request=first_request)  # a large file: the numpy finder
    cut = LineStats()
    for chunk in _chunks(read, name, CHUNK_BYTES, carry, skipping, final=False, stats=cut):
        nbytes += len(chunk)
        found, n = scan(chunk)
        for before, s, e in found:
            numbers.append(newlines + before + 1)
            parts.append(chunk[s:e])
            size += e - s
            ends.append(size)
        newlines += n
    return b"".join([_RECORD.pack(newlines, nbytes, len(numbers), size, 0, cut.long_lines), numbers.tobytes(), ends.tobytes(), *parts])


def _worker(fd: int, name: str, prefilter: "re.Pattern[bytes]", start: int, units: range, out: int,
            first_request: bool = False) -> None:
    """Forked worker: write the records of ``units`` to the pipe ``out``, in order, then exit."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C is the main process's to handle
        with os.fdopen(out, "wb", buffering=CHUNK_BYTES) as pipe:
            for unit in units:
                try:
                    record = _search_unit(fd, name, prefilter, start, unit, first_request)
                except Exception as exc:  # noqa: BLE001 - reported by the main process, in order
                    text = str(exc) if isinstance(exc, InputError) else f"{name}: reader process failed: {exc!r}"
                    msg = text.encode("utf-8", "replace")
                    pipe.write(_RECORD.pack(0, 0, 0, 0, len(msg), 0) + msg)
                    break
                pipe.write(record)
    except BaseException:  # noqa: BLE001 - e.g. the main process stopped reading: just exit
        code = 1
    finally:
        os._exit(code)  # no atexit handlers, no flushing of the parent's buffers


def _read_record(src: BinaryIO, name: str, st: LineStats) -> tuple[int, int, array.array, array.array, bytes]:
    head = src.read(_RECORD.size)
    if len(head) < _RECORD.size:
        raise InputError(f"{name}: a reader process stopped unexpectedly")
    newlines, nbytes, count, size, err, cuts = _RECORD.unpack(head)
    st.long_lines += cuts
    if err:
        raise InputError(src.read(err).decode("utf-8", "replace"))
    numbers, ends = array.array("q"), array.array("q")
    numbers.frombytes(src.read(8 * count))
    ends.frombytes(src.read(8 * count))
    blob = src.read(size)
    if len(numbers) != count or len(ends) != count or len(blob) != size:
        raise InputError(f"{name}: a reader process stopped unexpectedly")
    return newlines, nbytes, numbers, ends, blob


def _parallel_lines(fh: BinaryIO, name: str, prefilter: "re.Pattern[bytes]", st: LineStats,
                    fd: int, start: int, units: int, jobs: int, envs: "Envelopes | None" = None,
                    stats_runs: bool = False, first_request: bool = False):
    """Yield the candidate lines of the first ``units`` units; return (chunks of the rest, lines so far).

    Worker ``k`` searches units k, k + jobs, ... and writes their records to its own pipe; the pipes
    are read in unit order, and a full pipe holds a worker back, so memory stays flat.
    """
    workers: list[tuple[int, BinaryIO]] = []
    number = 0
    try:
        for k in range(jobs):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child never returns
                os.close(r)
                for _, other in workers:  # the pipes of the workers forked before this one
                    os.close(other.fileno())
                _worker(fd, name, prefilter, start, range(k, units, jobs), w, first_request)
            os.close(w)
            workers.append((pid, os.fdopen(r, "rb", buffering=CHUNK_BYTES)))
        for unit in range(units):
            newlines, nbytes, numbers, ends, blob = _read_record(workers[unit % jobs][1], name, st)
            st.bytes += nbytes
            begin = 0
            if stats_runs:
                yield from _record_runs(blob, numbers, ends, number, st, envs)
                number += newlines
                st.lines = number
                continue
            for n, stop in zip(numbers, ends):
                part = blob[begin:stop]
                begin = stop
                if len(part) > MAX_LINE_BYTES:
                    part = part[:MAX_LINE_BYTES]
                    st.long_lines += 1
                yield make_line(number + n, part, envs)
            number += newlines
            st.lines = number
    finally:
        for pid, src in workers:
            src.close()
            try:
                os.kill(pid, signal.SIGTERM)  # still working when we stop early; harmless when done
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
    offset = start + units * UNIT_CHUNKS * CHUNK_BYTES
    try:
        carry, skipping = _state_at(fd, start, offset)
        fh.seek(offset)
    except OSError as exc:
        raise _read_error(name, exc) from None
    return _chunks(fh.read, name, CHUNK_BYTES, carry, skipping, stats=st), number


# --- hard-wrapped pastes -------------------------------------------------------------------------
#
# A log copied out of a terminal or a web page may be cut into rows of a fixed width: a KV line
# becomes "... Available KV cache me" + "mory: 11.03 GiB". Such a paste shows many lines of exactly
# the longest length. It is read without the prefilter (the pieces hold no keyword) and every row of
# (nearly) full width is joined with the rows after it, unless a row looks like the start of a line.

WRAP_MIN_WIDTH = 60
WRAP_MAX_WIDTH = 400  # terminals and web views wrap at 80-320 columns; longer equal rows are repeats
WRAP_MIN_ROWS = 3  # distinct rows of exactly the widest length
WRAP_SLACK = 25  # a row this much shorter than the width may still have been wrapped (at a word)
_LINE_START = recache.compile(
    r"""^(?:\s*$|\s{2,}|\t|[`#>|*-]|\(|\[|\{|\d{4}-\d\d-\d\d|[A-Z][a-z]{2}\ [\ \d]\d\ \d\d:
    |(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\b|Traceback|Loading|Capturing|Processed|Adding|[\w.-]+\s+\|)""",
    re.X,
)


def detect_hard_wrap(fh: BinaryIO, name: str = "<input>") -> int | None:
    """The row width of a hard-wrapped paste, judged from the buffered head of ``fh``; else None.

    Raises `InputError` when the head cannot be read (a truncated or corrupt archive)."""
    try:
        head = fh.peek(CHUNK_BYTES) if hasattr(fh, "peek") else b""
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - gzip/lzma/zstd errors differ; all are input errors
        raise _read_error(name, exc) from None
    rows = head.split(b"\n")[:-1] if b"\n" in head else []
    if len(rows) < WRAP_MIN_ROWS:
        return None
    lens = [len(r.rstrip(b"\r").decode("utf-8", "replace")) for r in rows]
    width = max(lens)
    if not WRAP_MIN_WIDTH <= width <= WRAP_MAX_WIDTH:
        return None
    widest = {r for r, n in zip(rows, lens) if n == width}
    if len(widest) < WRAP_MIN_ROWS:
        return None
    # rows of one width with a gutter of spaces at the same column are a table (`kubectl get pods`, `ray
    # status`, `nvidia-smi`), not a wrap: a terminal cuts text wherever the width falls
    texts = [r.rstrip(b"\r").decode("utf-8", "replace") for r in widest]
    gutters = set.intersection(*({i for i in range(len(t) - 1) if t[i] == " " == t[i + 1]} for t in texts))
    return None if gutters else width


def unwrap_lines(lines: Iterator[Line], width: int) -> Iterator[Line]:
    """Join the rows of a hard-wrapped paste back into lines (numbered by their first row): `incremental.Unwrapper`."""
    from kvlogdiag.input.incremental import Unwrapper  # (it imports this module)

    joiner = Unwrapper(width)
    for line in lines:
        yield from joiner.feed(line)
    yield from joiner.end()
