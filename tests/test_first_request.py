"""The first request-logger line reaches the start-up tracker (kvlogdiag/input/reader.py `first_request_span`).

A request line holds no prefilter keyword, so the reader drops it; the start-up tracker needs only the first one
(a request reached the engine: the server was up, so a later traceback is a request-time error, not a failed start).
"""

from __future__ import annotations

import pytest

from kvlogdiag.input import reader as R
from kvlogdiag.input.reader import first_request_span, iter_lines
from kvlogdiag.pipeline import Analyzer

# vLLM's record heads, as the released sources print them (vllm 0.6.6.post1 vllm/entrypoints/logger.py:38, 0.13.0
# entrypoints/logger.py "Received request %s: params: ...", v1/engine/async_llm.py "Added request %s.")
V06 = b"INFO 02-19 20:17:15 logger.py:39] Received request chatcmpl-e0db07a6: prompt: '<|begin_of_text|>hi', params: SamplingParams(n=1)"
V013 = b"(APIServer pid=7) INFO 11-29 08:40:09 [logger.py:43] Received request cmpl-5c1: params: SamplingParams(n=1), prompt_token_ids: None"
ADDED = b"(APIServer pid=7) INFO 11-29 08:40:09 [async_llm.py:325] Added request cmpl-5c1."

NEAR_MISSES = [
    # the words inside a client's prompt, not vLLM's record head
    b"WARNING 02-19 20:17:15 serving_chat.py:120] template says 'Received request x: prompt: y'",
    # the DEBUG request-details form (not "the request reached the engine" in the tracker's reading)
    b"DEBUG 11-29 08:40:09 [logger.py:37] Request cmpl-1 details: prompt: 'hi'",
    # "Added request" in prose, not a record of vLLM's engine
    b"INFO 11-29 08:40:09 [foo.py:1] Added request handlers to the router",
    b"Received request cmpl-1: prompt: 'no record head at all'",
]


@pytest.mark.parametrize("line", [V06, V013, ADDED])
def test_a_request_logger_line_is_found(line):
    chunk = b"INFO 01-01 00:00:00 [a.py:1] hello\n" + line + b"\nINFO 01-01 00:00:01 [a.py:1] bye\n"
    span, tries = first_request_span(chunk, 4)
    assert span is not None and chunk[span[0]:span[1]] == line
    assert tries == 4


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_a_near_miss_is_not_a_request_line(line):
    span, tries = first_request_span(line + b"\n", 4)
    assert span is None
    assert tries == 4 - (b"d request " in line or b"Received request " in line)


def test_near_misses_cost_tries_and_then_the_search_stops():
    chunk = b"\n".join([NEAR_MISSES[0]] * 3 + [V06]) + b"\n"
    assert first_request_span(chunk, 2) == (None, 0)
    span, _ = first_request_span(chunk, 4)
    assert span is not None and chunk[span[0]:span[1]] == V06


def _log(n_requests: int) -> bytes:
    rows = [b"INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.13.0"]
    for i in range(n_requests):
        rows.append(V013.replace(b"cmpl-5c1", b"cmpl-%d" % i))
        rows.append(b"INFO 01-01 00:00:01 [loggers.py:1] just a line without keywords %d" % i)
    return b"\n".join(rows) + b"\n"


def _read(path, first: bool) -> list[tuple[int, str]]:
    with open(path, "rb") as fh:
        return [(ln.number, ln.text) for ln in iter_lines(fh, str(path), Analyzer().line_prefilter(), first_request=first)]


def test_only_the_first_request_line_is_passed(tmp_path):
    path = tmp_path / "x.log"
    path.write_bytes(_log(50))
    plain = _read(path, False)
    got = _read(path, True)
    extra = [x for x in got if x not in plain]
    assert len(extra) == 1
    assert extra[0][0] == 2 and "Received request cmpl-0:" in extra[0][1]
    assert [x for x in got if x != extra[0]] == plain


def test_through_workers_every_request_line_passed_is_a_request_line(tmp_path, monkeypatch):
    path = tmp_path / "x.log"
    path.write_bytes(_log(15000))  # > 2 units of one chunk: the workers search it
    serial = _read(path, True)
    monkeypatch.setattr(R, "PARALLEL_MIN_BYTES", 1 << 18)
    monkeypatch.setattr(R, "UNIT_CHUNKS", 1)
    monkeypatch.setenv("KVLOGDIAG_READ_JOBS", "2")
    parallel = _read(path, True)
    assert serial[:2] == parallel[:2]  # the file's first request line, in order
    assert sum("Received request" in t for _, t in serial) == 1
    assert sum("Received request" in t for _, t in parallel) > 1  # each unit's first: the workers' path
    assert [x for x in parallel if "Received request" not in x[1]] == [x for x in serial if "Received request" not in x[1]]
    assert all(R._REQUEST_HEAD.search(t.encode()) for _, t in parallel if "Received request" in t)


TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/x/torch/utils/cpp_extension.py", line 2416, in _join_cuda_home\n'
    "    raise OSError('CUDA_HOME environment variable is not set. '\n"
    "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.\n"
)


@pytest.mark.parametrize("request_line, failed", [(V06.decode(), False), (NEAR_MISSES[0].decode(), True)])
def test_a_request_before_an_error_makes_it_a_request_time_error(tmp_path, request_line, failed):
    path = tmp_path / "x.log"
    path.write_text(request_line + "\n" + TRACEBACK)
    res = Analyzer().analyze_source_split(str(path))
    startup = res[0].runs[0].startup
    assert startup is not None and startup["failed"] is failed
