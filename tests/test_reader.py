"""reader.py: opening inputs (compression by magic bytes, errors), line splitting, envelopes."""

from __future__ import annotations

import bz2
import gzip
import io
import itertools
import lzma
import os
import tracemalloc

import pytest
import zstandard

from kvlogdiag.catalogue.patterns import prefilter_regex
from kvlogdiag.input import reader
from kvlogdiag.input.reader import InputError, LineStats, iter_lines, make_line, open_input

LOG = (
    b"INFO 07-03 14:17:08 [utils.py:328] non-default args: {'max_model_len': 65536}\n"
    b"INFO 07-03 14:19:02 [gpu_model_runner.py:2007] Model loading took 32.8874 GiB and 88.4 seconds\n"
    b"INFO 07-03 14:19:40 [gpu_worker.py:298] Available KV cache memory: 37.01 GiB\n"
    b"INFO 07-03 14:19:41 [kv_cache_utils.py:864] GPU KV cache size: 485,088 tokens\n"
)
LOG_TEXTS = [ln.decode() for ln in LOG.split(b"\n")[:-1]]

COMPRESSORS = {
    "gzip": gzip.compress,
    "bz2": bz2.compress,
    "xz": lzma.compress,
    "zstd": lambda d: zstandard.ZstdCompressor().compress(d),
}


def read_all(path, prefilter=None, max_bytes=reader.DEFAULT_MAX_BYTES):
    """(lines, stats) of a path through open_input + iter_lines."""
    st = LineStats()
    fh = open_input(str(path), max_bytes)
    try:
        lines = list(iter_lines(fh, str(path), prefilter, st))
    finally:
        fh.close()
    return lines, st


def lines_of(data: bytes, prefilter=None):
    st = LineStats()
    out = list(iter_lines(io.BytesIO(data), "mem", prefilter, st))
    return out, st


class TrickleStream(io.RawIOBase):
    """A raw stream over generated data that returns at most ``step`` bytes per read.

    ``parts`` is an iterable of bytes produced lazily, so a multi-megabyte input never exists
    in memory at once; short reads put chunk boundaries in awkward places.
    """

    def __init__(self, parts, step: int):
        self._it = iter(parts)
        self._buf = b""
        self._step = step
        self.max_request = 0

    def readable(self):
        return True

    def read(self, n=-1):
        if n is None or n < 0:
            n = 1 << 62
        self.max_request = max(self.max_request, n)
        want = min(n, self._step)
        while len(self._buf) < want:
            try:
                self._buf += next(self._it)
            except StopIteration:
                break
        out, self._buf = self._buf[:want], self._buf[want:]
        return out

    def readinto(self, b):
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


# --- compression ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_compression_detected_by_magic_not_name(tmp_path, kind):
    path = tmp_path / "server.txt"  # deliberately not .gz/.bz2/...
    path.write_bytes(COMPRESSORS[kind](LOG))
    assert reader.detect_compression(path.read_bytes()[:8]) == kind
    lines, st = read_all(path)
    assert [ln.text for ln in lines] == LOG_TEXTS
    assert [ln.number for ln in lines] == [1, 2, 3, 4]
    assert st.lines == 4


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_compressed_with_prefilter_keeps_numbers(tmp_path, kind):
    path = tmp_path / "server.log"
    path.write_bytes(COMPRESSORS[kind](LOG))
    lines, st = read_all(path, prefilter_regex())
    # line 1 (non-default args), 2 (Model loading took), 3 (Available), 4 (KV cache size)
    assert [ln.number for ln in lines] == [1, 2, 3, 4]
    assert st.lines == 4


def test_gz_named_plain_file_is_read_as_plain(tmp_path):
    path = tmp_path / "server.log.gz"
    path.write_bytes(LOG)
    lines, _ = read_all(path)
    assert [ln.text for ln in lines] == LOG_TEXTS


def test_concatenated_gzip_members(tmp_path):
    path = tmp_path / "rotated.gz"
    half = LOG.index(b"INFO 07-03 14:19:40")
    path.write_bytes(gzip.compress(LOG[:half]) + gzip.compress(LOG[half:]))
    lines, st = read_all(path)
    assert [ln.text for ln in lines] == LOG_TEXTS and st.lines == 4


def test_detect_compression_none_for_text():
    assert reader.detect_compression(b"INFO 07") is None
    assert reader.detect_compression(b"") is None
    assert reader.detect_compression(b"\x1f") is None  # half a gzip magic


@pytest.mark.parametrize("kind", ["gzip", "bz2", "xz", "zstd"])
def test_a_truncated_stream_ends_at_the_cut_with_a_note(tmp_path, kind):
    """A cut archive (still being written) is read up to the cut: a prefix of the lines, and a note."""
    data = b"".join(b"INFO 07-03 14:19:40 [x.py:1] line %d Available KV cache memory: 1 GiB\n" % i
                    for i in range(60000))  # > one bz2 block (900 kB), so the first blocks are whole
    comp = COMPRESSORS[kind](data)
    path = tmp_path / f"cut.{kind}"
    path.write_bytes(comp[: len(comp) // 2])
    fh = open_input(str(path))
    try:
        texts = [ln.raw for ln in iter_lines(fh, str(path))]
        note = reader.truncation(fh)
    finally:
        fh.close()
    whole = data.decode().splitlines()
    assert 0 < len(texts) < len(whole)
    assert texts[:-1] == whole[: len(texts) - 1]  # every line before the cut (the last may be cut itself)
    assert whole[len(texts) - 1].startswith(texts[-1])
    assert note is not None and note["reason"] == "cut" and "ends early" in note["message"]
    assert 0 < note["bytes_read"] < len(data)


def test_corrupt_gzip_body_raises_input_error(tmp_path):
    comp = bytearray(gzip.compress(LOG * 50))
    for i in range(20, len(comp) - 20):
        comp[i] ^= 0x5A
    path = tmp_path / "bad.gz"
    path.write_bytes(bytes(comp))
    with pytest.raises(InputError) as ei:
        read_all(path)
    assert str(path) in str(ei.value)


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_decompression_cap(tmp_path, kind):
    data = LOG * 100  # 100 * len(LOG) bytes decompressed
    path = tmp_path / "bomb.bin"
    path.write_bytes(COMPRESSORS[kind](data))
    fh = open_input(str(path), max_bytes=1000)  # a bomb: stopped at the cap, the lines before it read
    try:
        st = reader.LineStats()
        lines = list(iter_lines(fh, str(path), stats=st))
        note = reader.truncation(fh)
    finally:
        fh.close()
    assert st.bytes == 1000 and 0 < len(lines) and note == {
        "reason": "max_bytes", "bytes_read": 1000,
        "message": "stopped after 1,000 decompressed bytes (--max-bytes): the analysis covers the lines read before that"}
    # exactly the decompressed size is allowed
    lines, st = read_all(path, max_bytes=len(data))
    assert st.lines == 400


# --- errors opening -------------------------------------------------------------------------------


def test_missing_path(tmp_path):
    path = tmp_path / "nope" / "server.log"
    with pytest.raises(InputError) as ei:
        open_input(str(path))
    assert str(path) in str(ei.value)
    assert "no such file" in str(ei.value)


def test_directory(tmp_path):
    with pytest.raises(InputError) as ei:
        open_input(str(tmp_path))
    assert str(tmp_path) in str(ei.value)
    assert "directory" in str(ei.value)


def test_unreadable(tmp_path):
    path = tmp_path / "secret.log"
    path.write_bytes(LOG)
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as a user who can read mode-000 files (root)")
        with pytest.raises(InputError) as ei:
            open_input(str(path))
        assert str(path) in str(ei.value)
        assert "permission" in str(ei.value)
    finally:
        path.chmod(0o600)


def test_input_error_is_one_line(tmp_path):
    with pytest.raises(InputError) as ei:
        open_input(str(tmp_path / "missing.log"))
    assert "\n" not in str(ei.value)


# --- lines ----------------------------------------------------------------------------------------


def test_empty_file(tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    for pf in (None, prefilter_regex()):
        lines, st = read_all(path, pf)
        assert lines == [] and st.lines == 0 and st.bytes == 0


def test_empty_gzip(tmp_path):
    path = tmp_path / "empty.gz"
    path.write_bytes(gzip.compress(b""))
    lines, st = read_all(path)
    assert lines == [] and st.lines == 0


def test_last_line_without_newline():
    lines, st = lines_of(b"a\nb\nINFO GPU KV cache size: 10 tokens")
    assert [(ln.number, ln.text) for ln in lines] == [(1, "a"), (2, "b"), (3, "INFO GPU KV cache size: 10 tokens")]
    assert st.lines == 3
    lines, st = lines_of(b"a\nb\nINFO GPU KV cache size: 10 tokens", prefilter_regex())
    assert [(ln.number, ln.text) for ln in lines] == [(3, "INFO GPU KV cache size: 10 tokens")]
    assert st.lines == 3


def test_blank_lines_count():
    lines, st = lines_of(b"\n\n\nx\n\n")
    assert [(ln.number, ln.text) for ln in lines] == [(1, ""), (2, ""), (3, ""), (4, "x"), (5, "")]
    assert st.lines == 5


def test_crlf():
    lines, _ = lines_of(b"first\r\nsecond\r\nthird")
    assert [ln.text for ln in lines] == ["first", "second", "third"]
    assert [ln.raw for ln in lines] == ["first", "second", "third"]


def test_vllm_multiline_continuation():
    # NewLineFormatter: every \n inside a message becomes \r\n + the full head
    data = (
        b"(EngineCore_DP0 pid=2410) ERROR 07-03 14:19:41 [core.py:718] EngineCore failed to start.\r\n"
        b"(EngineCore_DP0 pid=2410) ERROR 07-03 14:19:41 [core.py:718] Traceback (most recent call last):\r\n"
        b"(EngineCore_DP0 pid=2410) ERROR 07-03 14:19:41 [core.py:718] ValueError: No available memory for the cache blocks.\n"
    )
    lines, _ = lines_of(data)
    assert [ln.text for ln in lines] == [
        "ERROR 07-03 14:19:41 [core.py:718] EngineCore failed to start.",
        "ERROR 07-03 14:19:41 [core.py:718] Traceback (most recent call last):",
        "ERROR 07-03 14:19:41 [core.py:718] ValueError: No available memory for the cache blocks.",
    ]
    assert {ln.rank for ln in lines} == {"EngineCore_DP0"}
    assert all("\r" not in ln.raw for ln in lines)


def test_progress_bar_carriage_returns_keep_last_frame():
    ln = make_line(1, b"Loading shards:   0% 0/4\rLoading shards:  50% 2/4\rLoading shards: 100% 4/4")
    assert ln.text == "Loading shards: 100% 4/4"


def test_invalid_utf8_replaced():
    lines, _ = lines_of(b"INFO \xff\xfe model='caf\xc3\xa9' \xc3\n")
    assert lines[0].text == "INFO \ufffd\ufffd model='caf\u00e9' \ufffd"


def test_nul_bytes_removed():
    lines, st = lines_of(b"\x00\x00\x00\nINFO 07-03 14:19:40 [gpu_worker.py:298] Available KV\x00 cache memory: 37.01 GiB\n")
    assert [ln.text for ln in lines] == ["", "INFO 07-03 14:19:40 [gpu_worker.py:298] Available KV cache memory: 37.01 GiB"]
    assert st.lines == 2


def test_ansi_prefix_stripped():
    ln = make_line(1, b"\x1b[1;36m(VllmWorkerProcess pid=1825469)\x1b[0;0m INFO 11-18 17:10:58 worker.py:232] x")
    assert ln.rank == "VllmWorkerProcess pid=1825469"
    assert ln.text == "INFO 11-18 17:10:58 worker.py:232] x"
    assert ln.raw == "(VllmWorkerProcess pid=1825469) INFO 11-18 17:10:58 worker.py:232] x"


def test_ansi_inside_message_and_031_colour():
    ln = make_line(1, b"\x1b[0;36m(EngineCore pid=4711)\x1b[0;0m \x1b[32mINFO\x1b[0m 11-29 08:42:01 [core.py:140] ok")
    assert ln.rank == "EngineCore"
    assert ln.text == "INFO 11-29 08:42:01 [core.py:140] ok"


@pytest.mark.parametrize(
    "prefix, rank, ip",
    [
        ("(APIServer pid=2231)", "APIServer", None),
        ("(EngineCore_DP0 pid=2410)", "EngineCore_DP0", None),
        ("(EngineCore pid=131)", "EngineCore", None),
        ("(EngineCore_0 pid=77)", "EngineCore_0", None),
        ("(Worker_DP1_TP3_EP7 pid=9012)", "Worker_DP1_TP3_EP7", None),
        ("(Worker_TP2 pid=2522)", "Worker_TP2", None),
        ("(Worker pid=19850)", "Worker pid=19850", None),
        ("(VllmWorker TP1 pid=5)", "VllmWorker TP1", None),
        ("(VllmWorker rank=2 pid=4148423)", "VllmWorker rank=2", None),
        ("(VllmWorkerProcess pid=1825469)", "VllmWorkerProcess pid=1825469", None),
        ("(RayWorkerWrapper pid=321, ip=10.0.0.1)", "RayWorkerWrapper pid=321", "10.0.0.1"),
    ],
)
def test_process_prefixes(prefix, rank, ip):
    body = "INFO 07-03 14:19:40 [gpu_worker.py:298] Available KV cache memory: 37.01 GiB"
    ln = make_line(1, f"{prefix} {body}".encode())
    assert ln.rank == rank
    assert ln.text == body
    assert (ln.meta or {}).get("ip") == ip


def test_no_prefix_line_has_no_rank():
    ln = make_line(3, b"INFO 07-03 14:19:41 [kv_cache_utils.py:864] GPU KV cache size: 485,088 tokens")
    assert (ln.number, ln.rank, ln.meta) == (3, None, None)
    assert ln.text == ln.raw


def test_pid_text_inside_message_is_not_a_prefix():
    text = "INFO 07-03 14:19:40 [multiproc.py:10] Killing (VllmWorkerProcess pid=77) now"
    ln = make_line(1, text.encode())
    assert ln.rank is None and ln.text == text


def test_docker_timestamp_envelope():
    ln = make_line(1, b"2026-11-29T08:00:00.123456789Z (APIServer pid=1) INFO 11-29 08:00:00 [api_server.py:1] hi")
    assert ln.meta == {"timestamp": "2026-11-29T08:00:00.123456789Z"}
    assert ln.rank == "APIServer"
    assert ln.text == "INFO 11-29 08:00:00 [api_server.py:1] hi"


@pytest.mark.parametrize("tag, partial", [("F", False), ("P", True)])
def test_cri_envelope(tag, partial):
    ln = make_line(1, f"2026-11-29T08:00:00.123456789+00:00 stdout {tag} INFO 11-29 08:00:00 [x.py:1] hi".encode())
    assert ln.meta == {"timestamp": "2026-11-29T08:00:00.123456789+00:00", "stream": "stdout", "partial": partial}
    assert ln.text == "INFO 11-29 08:00:00 [x.py:1] hi"


def test_cri_envelope_stderr_with_prefix():
    ln = make_line(1, b"2026-11-29T08:00:00.1+00:00 stderr F (Worker_TP0 pid=9) WARNING 11-29 08:00:00 [x.py:1] w")
    assert ln.meta["stream"] == "stderr"
    assert ln.rank == "Worker_TP0"
    assert ln.text == "WARNING 11-29 08:00:00 [x.py:1] w"


def test_syslog_envelope():
    ln = make_line(1, b"Nov 29 08:00:00 host vllm[123]: INFO 11-29 08:00:00 [x.py:1] hi")
    assert ln.meta == {"timestamp": "Nov 29 08:00:00", "host": "host", "ident": "vllm", "pid": 123}
    assert ln.text == "INFO 11-29 08:00:00 [x.py:1] hi"


def test_syslog_single_digit_day_and_process_prefix():
    ln = make_line(1, b"Nov  9 08:00:00 gpu-node-1.example vllm[77]: (EngineCore pid=5) INFO 11-09 08:00:00 [x.py:1] hi")
    assert ln.meta["host"] == "gpu-node-1.example" and ln.meta["pid"] == 77
    assert ln.rank == "EngineCore"
    assert ln.text == "INFO 11-09 08:00:00 [x.py:1] hi"


def test_level_words_are_not_taken_for_syslog():
    for head in ("INFO", "DEBUG", "WARNING", "ERROR", "CRITICAL"):
        text = f"{head} 11-29 08:00:00 [x.py:1] hi"
        ln = make_line(1, text.encode())
        assert ln.text == text and ln.meta is None


def test_vllm_logging_prefix_before_process_prefix():
    ln = make_line(1, b"[node-3] (Worker_TP0 pid=9) INFO 07-03 14:19:40 [gpu_worker.py:298] Available KV cache memory: 1 GiB")
    assert ln.rank == "Worker_TP0"
    assert ln.meta == {"prefix": "[node-3] "}
    assert ln.text == "INFO 07-03 14:19:40 [gpu_worker.py:298] Available KV cache memory: 1 GiB"


# --- line numbers, prefilter, chunking ------------------------------------------------------------


def _mixed_log(n: int) -> bytes:
    out = []
    for i in range(1, n + 1):
        if i % 7 == 0:
            out.append(b"(Worker_TP0 pid=1) INFO 07-03 14:19:40 [gpu_worker.py:298] Available KV cache memory: %d.5 GiB" % i)
        elif i % 11 == 0:
            out.append(b"INFO 07-03 14:19:41 [kv_cache_utils.py:864] GPU KV cache size: %d tokens\r" % i)
        elif i % 13 == 0:
            out.append(b"")
        else:
            out.append(b"INFO 07-03 14:19:00 [weight_utils.py:270] filler line number %d \xff" % i)
    return b"\n".join(out) + b"\n"


def test_line_numbers_exact_small():
    data = (b"filler\n"
            b"INFO GPU KV cache size: 1 tokens\n"
            b"\n"
            b"filler\n"
            b"INFO Available KV cache memory: 2 GiB\n"
            b"INFO Available KV cache memory: 3 GiB")
    lines, st = lines_of(data, prefilter_regex())
    assert [ln.number for ln in lines] == [2, 5, 6]
    assert st.lines == 6


@pytest.mark.parametrize("step", [1, 3, 17, 64, 999, 1 << 20])
def test_line_numbers_same_with_and_without_prefilter(step):
    data = _mixed_log(400)
    st_all, st_pf = LineStats(), LineStats()
    every = list(iter_lines(TrickleStream([data], step), "t", None, st_all))
    some = list(iter_lines(TrickleStream([data], step), "t", prefilter_regex(), st_pf))
    assert st_all.lines == st_pf.lines == 400
    assert len(every) == 400
    by_number = {ln.number: ln for ln in every}
    expected = [i for i in range(1, 401) if i % 7 == 0 or (i % 11 == 0)]
    assert [ln.number for ln in some] == expected
    for ln in some:
        assert ln.text == by_number[ln.number].text
        assert ln.rank == by_number[ln.number].rank


def test_prefilter_filters_candidates_only():
    data = _mixed_log(50)
    some, _ = lines_of(data, prefilter_regex())
    assert all(("Available KV cache memory" in ln.text or "KV cache size" in ln.text) for ln in some)


# --- over-long lines ------------------------------------------------------------------------------


def _long_line_parts(head: bytes, total: int, piece: int = 64 * 1024):
    """Generate ``head`` followed by 'x' up to ``total`` bytes, lazily."""
    yield head
    left = total - len(head)
    while left > 0:
        k = min(piece, left)
        yield b"x" * k
        left -= k


@pytest.mark.parametrize("step", [100, 4096, 65536])
def test_long_line_cut_in_the_middle(monkeypatch, step):
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 1000)
    big = 3 * 1024 * 1024

    def parts():
        yield b"first\n"
        yield from _long_line_parts(b"INFO Available KV cache memory: 5 GiB ", big)
        yield b"\nINFO GPU KV cache size: 10 tokens\nlast\n"

    for pf in (None, prefilter_regex()):
        st = LineStats()
        lines = list(iter_lines(TrickleStream(parts(), step), "t", pf, st))
        got = {ln.number: ln.text for ln in lines}
        assert len(got[2]) == 1000
        assert got[2].startswith("INFO Available KV cache memory: 5 GiB xxx")
        assert got[3] == "INFO GPU KV cache size: 10 tokens"
        assert st.lines == 4
        if pf is None:
            assert got[1] == "first" and got[4] == "last"


def test_long_line_memory_stays_flat(monkeypatch):
    """A 4 MB line is cut without holding it: traced peak stays far below its size."""
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 4096)
    big = 4 * 1024 * 1024
    parts = itertools.chain(_long_line_parts(b"INFO ", big, piece=8192), [b"\nnext\n"])  # lazy
    stream = TrickleStream(parts, 8192)
    tracemalloc.start()
    try:
        lines = list(iter_lines(stream, "t", None, LineStats()))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 512 * 1024, peak
    assert [len(ln.text) for ln in lines] == [4096, 4]


@pytest.mark.parametrize("step", [100, 4096, 1 << 20])
def test_long_last_line_without_newline_is_kept(monkeypatch, step):
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 1000)
    data = b"a\n" + b"y" * 5000
    st = LineStats()
    lines = list(iter_lines(TrickleStream([data], step), "t", None, st))
    assert [(ln.number, len(ln.text)) for ln in lines] == [(1, 1), (2, 1000)]
    assert st.lines == 2


@pytest.mark.parametrize("step", [7, 100, 4096])  # several reads per line: cut in iter_chunks
@pytest.mark.parametrize("use_prefilter", [False, True])
def test_long_lines_counted_whatever_the_chunking(monkeypatch, step, use_prefilter):
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 1000)
    data = (b"ok\n" + b"INFO GPU KV cache size: 1 tokens " + b"z" * 3000 + b"\n"
            + b"INFO GPU KV cache size: 2 tokens " + b"w" * 5000 + b"\nend\n")
    st = LineStats()
    pf = prefilter_regex() if use_prefilter else None
    lines = list(iter_lines(TrickleStream([data], step), "t", pf, st))
    assert st.lines == 4
    assert [len(ln.text) for ln in lines if "KV cache size" in ln.text] == [1000, 1000]
    assert st.long_lines == 2


def test_long_line_within_one_chunk_is_counted(monkeypatch):
    # whole input in one read: the cut happens in iter_lines and is counted
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 1000)
    data = b"ok\n" + b"q" * 1500 + b"\nend\n"
    st = LineStats()
    lines = list(iter_lines(io.BytesIO(data), "t", None, st))
    assert [len(ln.text) for ln in lines] == [2, 1000, 3]
    assert st.long_lines == 1


def test_line_of_exactly_max_bytes_is_not_long(monkeypatch):
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 1000)
    data = b"q" * 1000 + b"\n"
    for step in (10, 1 << 20):
        st = LineStats()
        lines = list(iter_lines(TrickleStream([data], step), "t", None, st))
        assert [len(ln.text) for ln in lines] == [1000]
        assert st.long_lines == 0


# --- stdin ----------------------------------------------------------------------------------------


def test_stdin_gzip(monkeypatch):
    class FakeStdin:
        buffer = io.BytesIO(gzip.compress(LOG))

    monkeypatch.setattr("sys.stdin", FakeStdin())
    fh = open_input("-")
    lines = list(iter_lines(fh, "<stdin>"))
    assert [ln.text for ln in lines] == LOG_TEXTS
