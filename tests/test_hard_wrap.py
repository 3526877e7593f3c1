"""Pastes cut into fixed-width rows are rejoined; ordinary logs are left alone."""

from __future__ import annotations

import io

from kvlogdiag.input.reader import detect_hard_wrap
from kvlogdiag.pipeline import Analyzer

HEAD = "(Worker_TP0 pid=1) INFO 09-03 04:37:10 [gpu_worker.py:276] "
LOG = (
    "(APIServer pid=121) INFO 09-03 04:36:09 [utils.py:326] non-default args: {'model_tag': 'Qwen2-7B-Instruct', "
    "'port': 8081, 'model': 'Qwen2-7B-Instruct', 'max_model_len': 16384, 'tensor_parallel_size': 2, "
    "'gpu_memory_utilization': 0.5}\n"
    + HEAD + "Available KV cache memory: 11.03 GiB\n"
    + "(EngineCore_0 pid=9) INFO 09-03 04:37:11 [kv_cache_utils.py:849] GPU KV cache size: 412,992 tokens\n"
    + "(EngineCore_0 pid=9) INFO 09-03 04:37:11 [kv_cache_utils.py:853] Maximum concurrency for 16,384 tokens per request: 25.21x\n"
)


# a real paste has many long lines, so many rows of the full width
NOISE = "".join(
    f"(APIServer pid=121) INFO 09-03 04:38:{i:02d} [logger.py:43] Received request cmpl-{i:04d}: prompt: "
    f"'{'lorem ipsum ' * 20}', params: SamplingParams(n=1, temperature=0.{i}, max_tokens={100 + i})\n"
    for i in range(8))
LOG = LOG + NOISE


def wrap(text: str, width: int) -> str:
    rows = []
    for line in text.splitlines():
        rows.extend(line[i:i + width] for i in range(0, max(len(line), 1), width))
    return "\n".join(rows) + "\n"


def analyse(text: str) -> dict:
    return Analyzer().analyze_stream(io.BufferedReader(io.BytesIO(text.encode())), "x").to_json()


def test_wrapped_paste_is_rejoined():
    whole = analyse(LOG)
    for width in (80, 120, 147):
        a = analyse(wrap(LOG, width))
        assert a["kv_cache"]["available_gib"] == [11.03], width
        assert a["kv_cache"]["tokens"] == [412992]
        assert a["config"]["tensor_parallel_size"] == 2 and a["config"]["gpu_memory_utilization"] == 0.5
        assert a["kv_cache"]["bytes_per_token"] == whole["kv_cache"]["bytes_per_token"]
        assert a["lines_read"] == wrap(LOG, width).count("\n")  # physical rows are still counted


def test_repeated_identical_long_lines_are_not_a_wrap():
    stats = "(APIServer pid=1) INFO 09-03 04:40:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, " \
            "Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%\n"
    text = LOG.splitlines(keepends=True)[1] + stats * 10
    assert detect_hard_wrap(io.BufferedReader(io.BytesIO(text.encode()))) is None
    assert analyse(text)["runtime"]["stats_lines"] == 10


def test_very_wide_equal_rows_are_not_a_wrap():
    row = "x" * 2000 + "\n"
    assert detect_hard_wrap(io.BufferedReader(io.BytesIO((row * 5).encode()))) is None


def test_a_table_of_equal_rows_is_not_a_wrap():
    # `kubectl get pods` rows share their width by design; before, they were joined as a 64-column wrap and
    # the shell error under them ("sh: 1: X: not found", a failed start's cause) was lost inside the join
    table = (
        "NAME                        READY   STATUS    RESTARTS      AGE\n"
        "qwen-multinode-0-vllm-0-0   0/1     Running   0             54s\n"
        "qwen-multinode-0-vllm-0-1   0/1     Error     3 (31s ago)   54s\n"
        "qwen-multinode-0-vllm-1-0   0/1     Running   0             54s\n"
        "qwen-multinode-0-vllm-1-1   0/1     Error     3 (30s ago)   54s\n"
        "sh: 1: Leader_Node_Address: not found\n"
    )
    assert detect_hard_wrap(io.BufferedReader(io.BytesIO(table.encode()))) is None
    # the same width cut through text (no shared gutter) is still a wrap
    assert detect_hard_wrap(io.BufferedReader(io.BytesIO(wrap(LOG, 64).encode()))) == 64
