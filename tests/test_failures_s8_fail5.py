"""Session-8 rounds 39-40 tracker rules: NIXL's request-time transfer failures, a pydantic item a paste broke
over lines, and a traceback shown without its header (the excerpt cut above it)."""

from __future__ import annotations

from kvlogdiag.extract.failures import StartupTracker
from kvlogdiag.input.reader import make_line


def run(lines: list[str]) -> dict:
    t = StartupTracker()
    for i, text in enumerate(lines, 1):
        t.feed(make_line(i, text.encode()))
    return t.result()


NIXL = ("(Worker_DP0 pid=7) ERROR 05-14 01:44:26 [worker.py:573] NIXL transfer failure: {} | Context: "
        "{{'failure_type': '{}', 'request_id': None, 'remote_engine_id': 'e1'}}")
ASSERT = "(Worker_DP0 pid=7) AssertionError: Local block size 16 is not divisible by remote block size 32 or vice versa."


def test_nixl_transfer_failure_record_means_the_server_was_serving():
    for ft in ("handshake_setup_failed", "handshake_failed", "transfer_failed", "transfer_exception",
               "notification_failed", "transfer_setup_failed"):
        r = run([NIXL.format(ft, ft), ASSERT])
        assert r["failed"] is False and r["runtime_crash_line"] == 1, ft


def test_nixl_near_misses_stay_start_up_failures():
    # another failure type, or the words without NIXL's record: the assertion is still a start-up cause
    for head in (NIXL.format("handshake_timeout", "handshake_timeout"), "NIXL transfer failure handshake_failed",
                 "(Worker_DP0 pid=7) INFO 05-14 01:44:26 [worker.py:1] NIXL compatibility check passed"):
        r = run([head, ASSERT])
        assert r["failed"] is True and r["cause_line"] == 2, head


VE = "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig"


def test_pydantic_item_broken_over_lines_is_joined():
    r = run([VE, "  Value error, The checkpoint you are trying to load has model type",
             "`gemma4` but Transformers does not recognize this architecture. [type=value_error, input_value=1, input_type=int]",
             "    For further information visit https://errors.pydantic.dev/2.14/v/value_error"])
    assert r["cause_class"] == "config" and r["cause_line"] == 2
    # the header names the config class (session 17); the item, joined, follows it
    assert r["cause_text"].startswith("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig: "
                                      "The checkpoint you are trying to load has model type `gemma4` but Transformers")
    assert r["details"].get("joined_lines") == "2-3"


def test_pydantic_whole_item_takes_no_next_line():
    whole = "  Value error, The checkpoint you are trying to load has model type `gemma4` but Transformers does not recognize this architecture."
    for item, nxt in ((whole + " [type=value_error, input_value=1, input_type=int]", "some prose of the reporter"),
                      (whole, "I tried transformers 4.57 too"),  # the tail dropped, but the sentence ends
                      ("  Value error, max_model_len is greater than the derived", "    For further information visit x"),
                      ("  Value error, max_model_len is greater than the derived",
                       'ERROR 05-14 01:44:26 [core.py:1] EngineCore failed to start.')):
        r = run([VE, item, nxt])
        assert r["cause_line"] == 2 and nxt.strip() not in r["cause_text"], (item, nxt)
        assert "joined_lines" not in r["details"]


def test_pydantic_join_needs_the_next_line():
    r = run([VE, "  Value error, max_model_len is greater than the derived", "", "max_model_len (4096)"])
    assert "(4096)" not in r["cause_text"]


ECHO = ["(APIServer pid=685)     with launch_core_engines(vllm_config, executor_class, log_stats) as (",
        '(APIServer pid=685)   File "/usr/lib/python3.11/site-packages/vllm/v1/engine/utils.py", line 984, in wait_for_engine_startup',
        "(APIServer pid=685)     raise RuntimeError(",
        "(APIServer pid=685) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        "(APIServer pid=685) sys:1: DeprecationWarning: builtin type swigvarlink has no __module__ attribute"]


def test_traceback_without_its_header_says_the_excerpt_is_cut():
    r = run(ECHO)
    assert r["failed"] and r["cause_id"] is None
    assert "at line 2 starts without its 'Traceback (most recent call last):' line" in r["not_in_excerpt_reason"]


def test_traceback_with_its_header_is_not_called_cut():
    r = run(["(APIServer pid=685) Traceback (most recent call last):"] + ECHO[1:])
    assert r["failed"] and r["cause_id"] is None
    assert "starts without its" not in r["not_in_excerpt_reason"]


def test_marlin_repack_tile_check_is_a_quantization_cause():
    for line in ("RuntimeError: size_n = 5152 is not divisible by tile_n_size = 64",
                 "RuntimeError: size_k = 2880 is not divisible by tile_k_size = 16"):
        r = run([line])
        assert r["failed"] and r["cause_class"] == "quant", line


def test_tile_words_without_marlins_check_are_not_quantization():
    for line in ("RuntimeError: size_n = 5152 is not divisible by tile_size = 64",
                 "RuntimeError: tile_n_size = 64 was chosen"):
        assert run([line])["cause_class"] != "quant", line
