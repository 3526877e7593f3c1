"""Settings read from a log (VLLM_* variables, key=value prose): the ones a line states, never the ones vLLM's advice names.

The independent oracle is the harvested ``raise`` texts of every released vLLM (kvlogdiag/catalogue/
failures_harvest.json): each one that names ``VLLM_X=value`` tells the operator what to set, so none of them may
come back as a set variable — while shell exports, command prefixes and env dumps still do.
"""

from __future__ import annotations

import re

import pytest

from kvlogdiag.catalogue.failures import harvested
from kvlogdiag.extract.extractor import Extractor
from kvlogdiag.input.reader import make_line


def _env(line: str) -> dict[str, str]:
    ex = Extractor("t")
    ex.feed(make_line(1, line.encode("utf-8")))
    return {k: f.value for k, f in ex.finish(1).env.items()}


_ADVICE = sorted({m["t"] for m in harvested()["messages"] if re.search(r"VLLM_[A-Z0-9_]+=", m["t"])})


def test_the_harvest_has_advice_to_check():
    assert len(_ADVICE) >= 20


# hand-read: the harvested texts whose VLLM_X= states the value the process has (not one to set), and that variable
_STATES = {
    "to be on the same node, but VLLM_RAY_DP_PACK_STRATEGY=fill": "VLLM_RAY_DP_PACK_STRATEGY",
    "Connector, but found envs.VLLM_USE_V1=": "VLLM_USE_V1",
    "LLMEngine, but envs.VLLM_USE_V1=": "VLLM_USE_V1",
    "VLLM_KV_CACHE_LAYOUT={requested} does not satisfy": "VLLM_KV_CACHE_LAYOUT",
    "VLLM_ROCM_AITER_MLA_DCP_VERIFY={verify_route}, but": "VLLM_ROCM_AITER_MLA_DCP_VERIFY",
    "VLLM_RUST_FRONTEND_PATH=auto but": "VLLM_RUST_FRONTEND_PATH",
    "VLLM_USE_V1=1 is not supported with": "VLLM_USE_V1",
    # vllm 0.34.0 platforms/interface.py:1480-1485: the value is os.environ's, the variable is set
    "VLLM_USE_V2_MODEL_RUNNER={value} is no longer supported": "VLLM_USE_V2_MODEL_RUNNER",
}


@pytest.mark.parametrize("text", _ADVICE)
def test_a_raise_text_sets_only_the_variable_it_states(text):
    line = "(APIServer pid=5) ERROR 12-04 01:38:42 [core.py:1] ValueError: " + text.replace("{", "").replace("}", "")
    assert set(_env(line)) == {v for k, v in _STATES.items() if k in text}


def test_a_stated_value_loses_the_sentences_full_stop():
    line = ("ValueError: Using V1 LLMEngine, but envs.VLLM_USE_V1=False. This should not happen. As a workaround, "
            "try using LLMEngine.from_vllm_config(...) or explicitly set VLLM_USE_V1=0 or 1 and report this issue")
    assert _env(line) == {"VLLM_USE_V1": "False"}


@pytest.mark.parametrize("line, want", [
    ("export VLLM_PREFIX_CACHE_RETENTION_INTERVAL=4096", {"VLLM_PREFIX_CACHE_RETENTION_INTERVAL": "4096"}),
    ("$ export VLLM_USE_V1=0", {"VLLM_USE_V1": "0"}),
    ("root@rocm:/app# VLLM_USE_TRITON_FLASH_ATTN=0 python benchmark_throughput.py", {"VLLM_USE_TRITON_FLASH_ATTN": "0"}),
    ("docker run -e VLLM_CPU_KVCACHE_SPACE=40 vllm/vllm-openai", {"VLLM_CPU_KVCACHE_SPACE": "40"}),
    ("VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 vllm serve m", {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}),
])
def test_a_line_that_sets_a_variable_still_does(line, want):
    assert _env(line) == want


@pytest.mark.parametrize("line, want", [
    # vllm's own INFO / WARNING lines (real logs: tests/data/failures_heldout47/r47_03, tests/data/failures)
    ("INFO 09-20 04:01:13 [vllm.py:1319] Auto-enabling VLLM_USE_BREAKABLE_CUDAGRAPH=1. Set VLLM_USE_BREAKABLE_CUDAGRAPH=0 "
     "to opt out.", {"VLLM_USE_BREAKABLE_CUDAGRAPH": "1"}),
    ("WARNING 12-01 10:33:14 [vllm.py:2160] There is a latency regression when using chunked local attention with the "
     "hybrid KV cache manager. Disabling it, by default. To enable it, set the environment "
     "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1.", {}),
    ("INFO 08-02 11:08:12 [gpu_worker.py:553] CUDA graph memory profiling is enabled (default since v0.21.0). To disable, "
     "set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.", {}),
    ("NotImplementedError: VLLM_USE_V1=1 is not supported with VLLM_ATTENTION_BACKEND=TRITON_ATTN_VLLM_V1.",
     {"VLLM_USE_V1": "1", "VLLM_ATTENTION_BACKEND": "TRITON_ATTN_VLLM_V1"}),
])
def test_vllm_lines_that_state_or_advise(line, want):
    assert _env(line) == want


def test_the_derived_max_model_len_error_sets_nothing():
    # vllm 0.30.0 config/model.py: "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
    line = ("(APIServer pid=5)   Value error, User-specified max_model_len (2048) is greater than the derived max_model_len "
            "(max_position_embeddings=0.0 or model_max_length=None in model's config.json). To allow overriding this "
            "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with "
            "extreme caution.")
    assert _env(line) == {}


def _prose_config(line: str) -> dict:
    ex = Extractor("t")
    ex.feed(make_line(1, line.encode("utf-8")))
    return {k: [f.value for f in col] for k, col in ex.finish(1).config.items() if any(f.source == "prose" for f in col)}


def test_no_raise_text_sets_a_prose_setting():
    """The same oracle for 'key=value' prose (gpu_memory_utilization, max_model_len, tensor_parallel_size): every
    harvested raise text that names one asks for a value ("Example: max_model_len=2048", "producers require
    tensor_parallel_size=1") — hand-read, none states the value the process has."""
    got = {}
    for m in harvested()["messages"]:
        text = re.sub(r"\{[^{}]*\}", "7", m["t"])
        cfg = _prose_config("(APIServer pid=5) ERROR 12-04 01:38:42 [core.py:1] ValueError: " + text)
        if cfg:
            got[text[:120]] = cfg
    assert got == {}


@pytest.mark.parametrize("line, want", [
    ("  max_model_len: 32768", {"max_model_len": [32768]}),
    ("I set max_model_len=32768 for the test", {"max_model_len": [32768]}),
])
def test_a_reported_prose_setting_is_still_read(line, want):
    assert _prose_config(line) == want
