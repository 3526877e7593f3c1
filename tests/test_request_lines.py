"""vLLM's request-logger lines (a client's prompt, the model's output) are no source of facts.

A prompt quoting a catalogue wording must not start a run, set a config value or a KV figure; the
same wording on a line of its own still does (so the check below can fail). The start-up tracker and
user rules still see the request line (a request means the server was up)."""

from __future__ import annotations

import io

import pytest

from kvlogdiag.input.reader import LineStats, iter_lines, open_stream
from kvlogdiag.pipeline import Analyzer

ANALYZER = Analyzer()

START = (
    "(APIServer pid=7) INFO 11-29 08:40:01 [api_server.py:1351] vLLM API server version 0.13.0\n"
    "(APIServer pid=7) INFO 11-29 08:40:01 [utils.py:253] non-default args: {'model': 'Qwen/Qwen3-8B', "
    "'max_model_len': 32768}\n"
    "(EngineCore_DP0 pid=9) INFO 11-29 08:41:13 [kv_cache_utils.py:1091] Maximum concurrency for 32,768 tokens "
    "per request: 9.25x\n"
)
QUOTED = ("vLLM API server version 0.9.0 non-default args: {'max_model_len': 1024} "
          "Maximum concurrency for 1,024 tokens per request: 99.00x CUDA out of memory")
HEADS = [
    "(APIServer pid=7) INFO 11-29 08:41:41 [logger.py:43] Received request chatcmpl-1a2b: prompt: '{}', params: "
    "SamplingParams(n=1, temperature=0.7), prompt_token_ids: None, prompt_embeds shape: None, lora_request: None.",
    "(APIServer pid=7) DEBUG 11-29 08:41:41 [logger.py:37] Request cmpl-9 details: prompt: \"{}\", "
    "prompt_token_ids: None, prompt_embeds shape: None.",
    "(APIServer pid=7) INFO 11-29 08:41:42 [logger.py:76] Generated response chatcmpl-1a2b: output: '{}', "
    "output_token_ids: None, finish_reason: stop",
    "INFO 02-20 21:46:23 logger.py:36] Received request cmpl-5: prompt: '{}', params: SamplingParams(n=1).",
]


def _runs(text: str) -> list:
    ex = ANALYZER.new_extractor("t.log")
    st = LineStats()
    data = text.encode()
    for line in iter_lines(open_stream(io.BytesIO(data), "t.log"), "t.log", ANALYZER.line_prefilter(), st):
        ex.feed(line)
    ex.finish(st.lines, st.long_lines)
    return ex.runs


def _summary(runs: list) -> tuple:
    f = runs[-1]
    return (len(runs), [x.value for x in f.config.get("max_model_len", [])], [x.value for x in f.concurrency])


@pytest.mark.parametrize("head", HEADS)
def test_prompt_text_is_no_fact(head: str) -> None:
    base = _summary(_runs(START))
    assert _summary(_runs(START + head.format(QUOTED) + "\n")) == base
    # the same wording outside a request line is read: the comparison above can fail
    plain = "(APIServer pid=7) INFO 11-29 08:41:41 [utils.py:253] " + QUOTED.split(" CUDA")[0] + "\n"
    assert _summary(_runs(START + plain)) != base


def test_tracker_still_sees_request() -> None:
    # a traceback before a served request is not a failed start: the request line tells the tracker
    failing = START + (
        "(APIServer pid=7) ERROR 11-29 08:41:40 [core.py:10] Traceback (most recent call last):\n"
        "(APIServer pid=7) ERROR 11-29 08:41:40 [core.py:10] ValueError: something\n"
    )
    req = HEADS[0].format("hello must be fine") + "\n"
    assert _runs(failing + req)[-1].startup.get("failed") is False
    assert _runs(failing)[-1].startup.get("failed") is True


def test_none_prompt_keeps_usual_path() -> None:
    # "prompt: None" (token ids only) is not quoted text: the line is read as before
    line = ("(APIServer pid=7) INFO 11-29 08:41:41 [logger.py:43] Received request x: prompt: None, "
            "params: SamplingParams(n=1), prompt_token_ids: [1, 2].\n")
    assert _summary(_runs(START + line)) == _summary(_runs(START))
