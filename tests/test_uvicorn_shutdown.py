"""uvicorn's "Shutting down" after an engine error: the server had started, so the error is a request-time one.

uvicorn 0.54.0 uvicorn/server.py:105-108 calls Server.shutdown (which logs "Shutting down", server.py:282) only
`if self.started`; vLLM starts uvicorn only once its engine is built (r38_01: vLLM-Ascend's V0 MQLLMEngine failing at
a chat's attention forward, then the server's shutdown).
"""

from __future__ import annotations

import pytest

from kvlogdiag.pipeline import Analyzer

ERROR = (
    "ERROR 03-03 16:00:46 [engine.py:141] Traceback (most recent call last):\n"
    'ERROR 03-03 16:00:46 [engine.py:141]   File "/x/vllm_ascend/attention.py", line 609, in forward\n'
    "ERROR 03-03 16:00:46 [engine.py:141]     raise RuntimeError(\n"
    "ERROR 03-03 16:00:46 [engine.py:141] RuntimeError: Prefix cache and chunked prefill are currently not supported.\n"
)
UVICORN_END = "INFO:     Shutting down\nINFO:     Waiting for application shutdown.\nINFO:     Application shutdown complete.\n"


def _startup(tmp_path, text: str) -> dict:
    path = tmp_path / "x.log"
    path.write_text(text)
    got = Analyzer().analyze_source_split(str(path))[0].runs[0].startup
    assert got is not None
    return got


def test_an_engine_error_then_uvicorn_shutting_down_is_no_failed_start(tmp_path):
    got = _startup(tmp_path, ERROR + UVICORN_END)
    assert got["failed"] is False and got["cause_line"] is None


def test_with_crlf_line_ends_too(tmp_path):
    got = _startup(tmp_path, (ERROR + UVICORN_END).replace("\n", "\r\n"))
    assert got["failed"] is False


@pytest.mark.parametrize("tail", [
    # no uvicorn line: the error stands as the start-up cause
    "",
    # vLLM's own prose, not uvicorn's level prefix
    "INFO 03-03 16:00:47 [launcher.py:1] Shutting down FastAPI HTTP server.\n",
    # uvicorn's start-up failing: Server.shutdown never ran
    "ERROR:    Application startup failed. Exiting.\n",
])
def test_without_uvicorns_shutdown_line_the_error_is_the_start_up_cause(tmp_path, tail):
    got = _startup(tmp_path, ERROR + tail)
    assert got["failed"] is True
    assert "Prefix cache and chunked prefill" in (got["cause_text"] or "")


def test_after_an_engine_start_failure_echo_the_shutdown_line_changes_nothing(tmp_path):
    echo = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    got = _startup(tmp_path, ERROR + echo + UVICORN_END)
    assert got["failed"] is True
