"""A bare NIXL status name right after UCX's own ERROR record: the UCX record is the cause (r38_22).

NIXL's UCX backend maps every UCX status it has no name for to NIXL_ERR_BACKEND (ai-dynamo/nixl
src/plugins/ucx/ucx_enums.cpp `ucxStatusToNixlStatus`), so the status name says only that UCX failed.
"""

from __future__ import annotations

import pytest

from kvlogdiag.pipeline import Analyzer

UCX = ("[1744963752.379059] [oneasia-gpu-node1:14252:0]            sock.c:334  UCX  ERROR   "
       "connect(fd=120, dest_addr=10.244.13.0:34313) failed: Connection refused\n")
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/opt/venv/lib/python3.12/site-packages/vllm/engine/multiprocessing/engine.py", line 509, in run_mp_engine\n'
    "    engine = MQLLMEngine.from_engine_args(engine_args=engine_args,\n"
    '  File "/opt/venv/lib/python3.12/site-packages/vllm/engine/llm_engine.py", line 423, in __init__\n'
    "    self._nixl_agents_names = self._initialize_nixl()\n"
)


def _startup(tmp_path, text: str) -> dict:
    path = tmp_path / "x.log"
    path.write_text(text)
    got = Analyzer().analyze_source_split(str(path))[0].runs[0].startup
    assert got is not None
    return got


def test_the_ucx_record_before_a_bare_nixl_status_is_the_cause(tmp_path):
    got = _startup(tmp_path, UCX + "NIXL_ERR_BACKEND\n" + TRACEBACK)
    assert got["failed"] is True
    assert got["cause_line"] == 1 and "Connection refused" in got["cause_text"]


@pytest.mark.parametrize("text, line", [
    # the UCX record too far above the status (another event of the run)
    (UCX + "INFO x\n" * 8 + "NIXL_ERR_BACKEND\n" + TRACEBACK, 10),
    # no UCX record
    ("NIXL_ERR_BACKEND\n" + TRACEBACK, 1),
])
def test_otherwise_the_nixl_line_stays_the_cause(tmp_path, text, line):
    got = _startup(tmp_path, text)
    assert got["failed"] is True and got["cause_line"] == line and "NIXL_ERR_BACKEND" in got["cause_text"]
