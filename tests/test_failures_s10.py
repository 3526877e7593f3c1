"""Session-10 general rules of the start-up tracker, each from a wrong or missed cause of blind rounds 41-42
(docs/failures.md "Session 10: general rules"): lines vLLM logs for an exception it recovers from, the API server
announcing it serves, the logger's copy of an exception stated before the exception line, vLLM's own module missing
for a plugin, a one-word flag quoted in a message, vLLM-Ascend's custom_ops package, CANN's error-manager records and a
compose container whose first lines carry no vLLM head."""

from __future__ import annotations

import json

from click.testing import CliRunner
from conftest import startup_verdict as run

from kvlogdiag.cli.main import cli

API = "(APIServer pid=1) "
EC = "(EngineCore_DP0 pid=853) "
ECHO = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"


def test_retried_attempt_is_no_cause_and_no_failure():
    # with_retry's "%s: %s, retrying %d of %d" (vllm 0.11.0 transformers_utils/config.py:278)
    retry = ("Error retrieving safetensors: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
             "'/models/m'. Use `repo_type` argument if needed., retrying 1 of 2")
    r = run([retry])
    assert r["failed"] is False and r["cause_line"] is None
    r = run([API + "ERROR 07-01 10:00:00 [config.py:278] " + retry, API + ECHO])
    assert r["failed"] is True and r["cause_line"] is None  # the failure is shown, its cause is not this line
    r = run(["ERROR 07-01 10:00:00 [repo_utils.py:126] Error parsing config for /m: [Errno 2] No such file, retrying 1 of 2",
             "ERROR 07-01 10:00:04 [repo_utils.py:123] Error parsing config for /m: [Errno 2] No such file",
             "Traceback (most recent call last):", '  File "/v/vllm/transformers_utils/config.py", line 927, in get_config',
             "FileNotFoundError: [Errno 2] No such file", API + ECHO])
    # the last attempt is raised, logged first as "<msg>: <e>" right above its traceback (vllm 0.13.0
    # transformers_utils/repo_utils.py:62-64 `logger.error("%s: %s", log_msg, e)` then `raise`): that record is the
    # exception's first statement, the exception's text the cause
    assert r["failed"] is True and r["cause_line"] == 2 and r["cause_text"] == "FileNotFoundError: [Errno 2] No such file"
    # the safetensors probe catches its last attempt too (0.11.0 config.py:984-988)
    assert run(["Error retrieving safetensors: 401 Client Error"])["failed"] is False
    # near miss: the same repo-id error without the retry is the cause
    r = run(["huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
             "'namespace/repo_name': '/models/m'. Use `repo_type` argument if needed."])
    assert r["failed"] is True and r["cause_line"] == 1 and r["cause_class"] == "model"


def test_api_server_starting_means_the_engine_was_built():
    # "Starting vLLM API server %d on %s" is logged once the engine client is built (0.11.0 api_server.py:1902-1915)
    for started in ("INFO 07-02 20:30:45 [api_server.py:1349] Starting vLLM API server 0 on http://0.0.0.0:30024",
                    "INFO 07-02 20:30:45 [entry.py:139] Starting vLLM server on http://0.0.0.0:8000"):
        r = run([started, "Traceback (most recent call last):"])
        assert r["failed"] is False, started
    # only a port still fails the start after it
    r = run(["INFO 07-02 20:30:45 [api_server.py:1912] Starting vLLM API server 0 on http://0.0.0.0:8000",
             "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use"])
    assert r["failed"] is True and r["cause_class"] == "port"
    # near miss: before the line, the same traceback is a failed start
    assert run(["Traceback (most recent call last):", ECHO])["failed"] is True


def test_logger_copy_before_the_exception_line_is_the_cause_line():
    msg = "The input size is not aligned with the quantized weight shape. This can be caused by too large tensor parallel size."
    r = run(["ERROR 02-22 00:01:41 engine.py:400] " + msg, "ValueError: " + msg])
    assert r["cause_line"] == 1 and r["cause_class"] == "parallel"
    # near misses: another message, or a record of another process, leaves the exception line the cause
    r = run(["ERROR 02-22 00:01:41 engine.py:400] something else failed", "ValueError: " + msg])
    assert r["cause_line"] == 2
    r = run(["(Worker pid=7) ERROR 02-22 00:01:41 engine.py:400] " + msg, "ValueError: " + msg])
    assert r["cause_line"] == 2


def _import_tb(importer: str, module: str) -> list[str]:
    return ["Traceback (most recent call last):",
            '  File "/venv/bin/vllm", line 4, in <module>',
            f'  File "{importer}", line 4, in <module>',
            f"    from {module} import X",
            f"ModuleNotFoundError: No module named '{module}'"]


def test_vllm_module_missing_for_a_plugin_is_a_version_mismatch():
    r = run(_import_tb("/venv/lib/python3.12/site-packages/vllm_omni/patch.py", "vllm.inputs.data"))
    assert r["cause_line"] == 5 and r["cause_class"] == "config"
    # near misses: imported by vLLM's own code (a broken install), or a compiled extension: a build's failure
    r = run(_import_tb("/venv/lib/python3.12/site-packages/vllm/entrypoints/cli/main.py", "vllm.inputs.data"))
    assert r["cause_class"] == "kernel"
    r = run(_import_tb("/venv/lib/python3.12/site-packages/vllm_omni/patch.py", "vllm._C"))
    assert r["cause_class"] == "kernel"


def test_quoted_one_word_flag_names_a_setting():
    r = run(["ValueError: With `vllm serve`, you should provide the model as a positional argument or in a config file "
             "instead of via the `--model` option."])
    assert r["cause_line"] == 1 and r["cause_class"] == "config"


def test_ascend_custom_ops_package_missing_is_a_kernel_library():
    r = run([EC + "ERROR 11-17 02:43:01 [core.py:708]     import custom_ops  # type: ignore # noqa",
             EC + "ERROR 11-17 02:43:01 [core.py:708] ModuleNotFoundError: No module named 'custom_ops'"])
    assert r["cause_line"] == 2 and r["cause_class"] == "kernel"


def test_cann_error_manager_record_states_the_cause():
    lines = ["EH9999: Inner Error!",
             "        rtDeviceSynchronizeWithTimeout execute failed, reason=[sdma copy error][FUNC:FuncErrorReason]"
             "[FILE:error_message_manage.cc][LINE:53]",
             "EH9999: [PID: 412] 2025-09-18-12:15:27.156.464 wait for compute device to finish failed, runtime result = "
             "507013.[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:161]",
             API + "Traceback (most recent call last):",
             API + '  File "/vllm/vllm/entrypoints/cli/main.py", line 54, in main']
    r = run(lines)
    assert r["failed"] is True and r["cause_line"] == 2 and r["cause_class"] == "kernel"
    assert r["cause_text"] == "rtDeviceSynchronizeWithTimeout execute failed, reason=[sdma copy error]"
    # the message on the code's own line
    r = run(["EZ9999: wait for compute device to finish failed, runtime result = 507013.[FUNC:ReportCallError]"
             "[FILE:log_inner.cpp][LINE:161]", API + ECHO])
    assert r["cause_line"] == 1 and r["cause_class"] == "kernel"
    # near miss: an error-code head on a healthy start states no failure
    assert run(["EH9999: Inner Error!", "        something[FUNC:f][FILE:x.cc][LINE:1]"])["failed"] is False


def test_compose_container_first_lines_without_a_head_stay_in_the_container(tmp_path):
    log = tmp_path / "compose.log"
    log.write_text("\n".join([
        "vllm-ascend  | EH9999: Inner Error!",
        "vllm-ascend  |         rtDeviceSynchronizeWithTimeout execute failed, reason=[sdma copy error][FUNC:FuncErrorReason]"
        "[FILE:error_message_manage.cc][LINE:53]",
        "vllm-ascend  | (APIServer pid=1) Traceback (most recent call last):",
        'vllm-ascend  | (APIServer pid=1)   File "/vllm-workspace/vllm/vllm/entrypoints/cli/main.py", line 54, in main',
        "vllm-ascend  | (APIServer pid=1) " + ECHO]) + "\n")
    out = CliRunner().invoke(cli, ["analyze", "--run", "all", "--format", "json", str(log)])
    analyses = json.loads(out.output)["analyses"]
    assert [a.get("container") for a in analyses] == ["vllm-ascend"]
    assert analyses[0]["startup"]["cause_line"] == 2 and analyses[0]["startup"]["cause_class"] == "kernel"


def test_cublas_status_and_graph_capture_refusals_are_kernel_failures():
    for msg in ("RuntimeError: CUDA error: CUBLAS_STATUS_INVALID_VALUE when calling `cublasGemmEx( handle, opa, opb, m, n, k)`",
                "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
                "torch.AcceleratorError: HIP error: operation not permitted when stream is capturing"):
        r = run([EC + "ERROR 01-01 00:00:00 [core.py:708] " + msg, ECHO])
        assert r["cause_class"] == "kernel", msg
    # near miss: cuBLAS failing to allocate is left to the memory entries, not called a kernel failure
    r = run([EC + "ERROR 01-01 00:00:00 [core.py:708] RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
             "`cublasCreate(handle)`", ECHO])
    assert r["failed"] is True and r["cause_class"] != "kernel"


def test_abstract_class_of_a_plugin_is_a_version_mismatch():
    for msg in ("TypeError: Can't instantiate abstract class FlashMLAImpl without an implementation for abstract methods "
                "'forward_mha', 'forward_mqa'",
                "TypeError: Can't instantiate abstract class MetaxPlatform with abstract method get_attn_backend_cls"):
        r = run([EC + "ERROR 01-01 00:00:00 [core.py:708] " + msg, ECHO])
        assert r["cause_class"] == "config", msg
    # near miss: another TypeError stays unknown
    r = run([EC + "ERROR 01-01 00:00:00 [core.py:708] TypeError: can't multiply sequence by non-int of type 'float'", ECHO])
    assert r["cause_class"] == "unknown"


def test_round45_hints_name_the_class():
    # torch's FP8 matmul refusing the device: the quantization (the checkpoint's fp8) does not run here
    r = run(["RuntimeError: Error in model execution (input dumped to /tmp/x.pkl): torch._scaled_mm "
             "is only supported on CUDA devices with compute capability >= 9.0 or 8.9, or ROCm MI300+", ECHO])
    assert r["cause_class"] == "quant"
    # torch_npu's check of an operator call with a runtime error code
    r = run([EC + "ERROR 11-17 02:43:01 [core.py:708] RuntimeError: copy_between_host_and_device_opapi:build/CMakeFiles/"
             "torch_npu.dir/compiler_depend.ts:56 NPU function error: SUSPECT REMOTE ERROR, error code is 507057", ECHO])
    assert r["cause_class"] == "kernel"
    # a package the arguments need is not installed — even one whose name holds a model word ('safetensors')
    for mod in ("fastsafetensors", "modelscope", "pandas"):
        r = run([EC + f"ERROR 03-18 11:27:27 [core.py:866] ModuleNotFoundError: No module named '{mod}'", ECHO])
        assert r["cause_class"] == "config", mod
    # near misses: kernel libraries and KV connectors keep their classes
    for mod, cls in (("flash_attn", "kernel"), ("lmcache", "connector")):
        r = run([EC + f"ERROR 03-18 11:27:27 [core.py:866] ModuleNotFoundError: No module named '{mod}'", ECHO])
        assert r["cause_class"] == cls, mod


def test_cpu_backend_autobind_lscpu_failure_is_the_launch_environment():
    tb = [EC + "ERROR 11-05 07:33:26 [core.py:708] Traceback (most recent call last):",
          EC + 'ERROR 11-05 07:33:26 [core.py:708]   File "/v/vllm/v1/worker/cpu_worker.py", line 49, in init_device',
          EC + 'ERROR 11-05 07:33:26 [core.py:708]   File "/v/vllm/v1/worker/cpu_worker.py", line 116, in _get_autobind_cpu_ids',
          EC + 'ERROR 11-05 07:33:26 [core.py:708]   File "/v/vllm/platforms/cpu.py", line 284, in get_allowed_cpu_core_node_list',
          EC + 'ERROR 11-05 07:33:26 [core.py:708]   File "/usr/lib/python3.12/json/decoder.py", line 355, in raw_decode',
          EC + "ERROR 11-05 07:33:26 [core.py:708] json.decoder.JSONDecodeError: Expecting value: line 6 column 18 (char 79)", ECHO]
    r = run(tb)
    assert r["cause_line"] == 6 and r["cause_class"] == "config"
    # near miss: the same exception elsewhere stays unknown
    r = run([x for x in tb if "cpu" not in x])
    assert r["cause_class"] == "unknown"


def test_python_wording_copied_by_vllm_is_no_sign_of_vllm():
    # vllm 0.32.0 utils/humming.py raises CPython's own AttributeError wording: a bare line of it (protobuf's noise on
    # import) is no log output of vLLM, so the traceback after it states the cause
    noise = "AttributeError: 'MessageFactory' object has no attribute 'GetPrototype'"
    r = run([noise, noise, "Traceback (most recent call last):",
             '  File "/v/vllm/model_executor/model_loader/weight_utils.py", line 193, in get_quant_config',
             "ValueError: Cannot find the config file for awq", ECHO])
    assert r["cause_line"] == 5
    # near miss: alone, the line is still what the paste shows
    assert run([noise])["cause_line"] == 1


def test_round44_entries():
    r = run(["/srv/.venv/bin/python: Error while finding module specification for 'vllm.entrypoints.openai.api_server' "
             "(ModuleNotFoundError: No module named 'vllm')"])
    assert r["cause_id"] == "vllm_not_installed" and r["cause_class"] == "config"
    # near miss: a submodule of an installed vLLM missing stays a broken install
    r = run(["/srv/.venv/bin/python: Error while finding module specification for 'vllm.entrypoints.openai.api_server' "
             "(ModuleNotFoundError: No module named 'vllm.entrypoints')"])
    assert r["cause_id"] == "kernel_missing"
    r = run([EC + "ERROR 01-12 01:44:55 [core.py:866] AssertionError: Error in memory profiling. Initial free memory "
             "62.7452392578125 GiB, current free memory 63.12884521484375 GiB. This happens when other processes sharing "
             "the same container release GPU memory while vLLM is profiling during initialization.", ECHO])
    assert r["cause_id"] == "memory_profiling_free_memory_grew" and r["cause_class"] == "memory"
    assert abs(r["numbers"]["initial_free_gib"] - 62.745) < 1e-3
    for line in ("zsh: command not found: vllm", "vllm: command not found"):
        r = run([line])
        assert r["cause_id"] == "shell_command_not_found", line
    # near miss: a sentence that merely ends the same way
    assert run(["the tool said that the vllm: command not found"])["cause_id"] != "shell_command_not_found"
    for msg, cls in (("RuntimeError: UVA is not available", "driver"),
                     ("torch.AcceleratorError: CUDA error: operation not permitted", "kernel"),
                     ("RuntimeError: Failed to find C compiler. Please specify via CC environment variable.", "kernel")):
        r = run([EC + "ERROR 01-01 00:00:00 [core.py:708] " + msg, ECHO])
        assert r["cause_class"] == cls, msg


def test_extension_import_warning_explains_the_error_naming_it():
    r = run(["WARNING 02-28 20:57:36 _core_ext.py:180] Failed to import from vllm._core_C with "
             "ImportError('libtorch_hip.so: cannot open shared object file: No such file or directory')",
             "Traceback (most recent call last):", '  File "/v/vllm/_core_ext.py", line 182, in <module>',
             "RuntimeError: Tried to instantiate class '_core_C.ScalarType', but it does not exist! Ensure that it is "
             "registered via torch::class_"])
    assert r["cause_line"] == 1 and r["cause_class"] == "kernel"
    # near miss: an error that does not name the extension keeps its own line
    r = run(["WARNING 02-28 20:57:36 _core_ext.py:180] Failed to import from vllm._core_C with "
             "ImportError('libtorch_hip.so: cannot open shared object file: No such file or directory')",
             "Traceback (most recent call last):", '  File "/v/vllm/config.py", line 18, in <module>',
             "RuntimeError: something else entirely failed here"])
    assert r["cause_line"] == 4
    # the driver's library missing stays the driver's
    assert run(["ImportError: libcuda.so.1: cannot open shared object file: No such file or directory"])["cause_class"] == "driver"


def test_closed_zmq_socket_and_asyncio_task_records_are_echoes():
    task = ["Task exception was never retrieved",
            "future: <Task finished name='Task-2' coro=<MQLLMEngineClient.run_output_handler_loop() done, defined at "
            "/v/vllm/engine/multiprocessing/client.py:178> exception=ZMQError('Operation not supported')>",
            "Traceback (most recent call last):",
            '  File "/v/vllm/engine/multiprocessing/client.py", line 184, in run_output_handler_loop',
            '  File "/v/zmq/_future.py", line 400, in poll',
            "    raise _zmq.ZMQError(_zmq.ENOTSUP)",
            "zmq.error.ZMQError: Operation not supported"]
    r = run([*task, "RuntimeError: Engine process failed to start. See stack trace for the root cause."])
    assert r["failed"] is True and r["cause_line"] is None and r["not_in_excerpt_reason"]
    # near miss: the same error raised elsewhere (not a poll of a closed socket) is a cause
    r = run(["Traceback (most recent call last):", '  File "/v/vllm/engine/multiprocessing/client.py", line 90, in __init__',
             "zmq.error.ZMQError: Operation not supported", "RuntimeError: Engine process failed to start."])
    assert r["cause_line"] == 3


def test_resource_tracker_at_shutdown_ends_a_start():
    r = run([EC + "INFO 05-08 00:37:15 [gpu_model_runner.py:2602] Loading model from scratch...",
             "/x/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leaked "
             "semaphore objects to clean up at shutdown"])
    assert r["failed"] is True and r["cause_line"] is None and r["not_in_excerpt_reason"]
    # near miss: after the server came up, the same line is its shutdown
    r = run(["INFO:     Application startup complete.", "INFO:     Uvicorn running on http://0.0.0.0:8000",
             "/x/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leaked "
             "semaphore objects to clean up at shutdown"])
    assert r["failed"] is False


def test_signal_during_start_up_is_a_stopped_start():
    tb = ["Traceback (most recent call last):",
          '  File "/v/vllm/entrypoints/openai/api_server.py", line 1856, in <module>',
          '  File "/v/vllm/entrypoints/openai/api_server.py", line 1775, in signal_handler',
          '    raise KeyboardInterrupt("terminated")']
    r = run([*tb, "KeyboardInterrupt: terminated"])
    assert r["failed"] is True and r["cause_line"] is None
    assert "SIGTERM" in r["not_in_excerpt_reason"] and r["died"][0]["signal"] == "SIGTERM"
    r = run([*tb[:2], "KeyboardInterrupt"])
    assert r["failed"] is True and r["died"][0]["signal"] == "SIGINT"
    # near misses: after the server came up it is a shutdown; a bare KeyboardInterrupt line (no traceback) is no death
    assert run(["INFO:     Application startup complete.", *tb, "KeyboardInterrupt: terminated"])["failed"] is False
    assert run(["KeyboardInterrupt"])["failed"] is False


def test_registry_inspection_failure_is_explained_by_the_subprocess_error():
    rec = "(APIServer pid=1) ERROR 06-10 23:08:47 [registry.py:963] "
    lines = [rec + "Error in inspecting model architecture 'Gemma4ForConditionalGeneration'",
             rec + "Traceback (most recent call last):",
             rec + "RuntimeError: Error raised in subprocess:",
             rec + "Traceback (most recent call last):",
             rec + 'File "/v/vllm/vllm_flash_attn/__init__.py", line 12, in <module>',
             rec + "ImportError: vllm.vllm_flash_attn requires the CUDA flash attention extensions (_vllm_fa2_C or _vllm_fa3_C).",
             "(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig"]
    r = run(lines)
    assert r["cause_line"] == 6 and r["cause_id"] == "kernel_missing" and r["cause_class"] == "kernel"
    # near miss: an uncatalogued error in the subprocess leaves the registry's record the cause
    r = run([*lines[:5], rec + "ImportError: something nobody catalogued", lines[-1]])
    assert r["cause_line"] == 1 and r["cause_id"] == "architecture_inspection_failed"


def test_jax_indivisible_sharding_is_a_parallel_size():
    r = run([EC + "ERROR 09-26 23:22:02 [core.py:1434] jax._src.sharding.IndivisibleError: One of pjit outputs with "
             "pytree key path result was given the sharding NamedSharding(mesh=Mesh('data': 1, 'model': 4), spec=P(None, "
             "'model')) implies that array axis 1 is partitioned 4 times, but the dimension size is 22 (full shape: "
             "(128, 22, 1, 2816), per-dimension tiling factors: (1, 4, 1, 1) should evenly divide the shape)", ECHO])
    assert r["cause_class"] == "parallel"


def test_triton_driver_error_is_a_kernel_failure():
    r = run([EC + "ERROR 11-20 10:00:00 [core.py:708] RuntimeError: Triton Error [CUDA]: device kernel image is invalid", ECHO])
    assert r["cause_class"] == "kernel"
    # near miss: Triton's out-of-memory is not called a kernel failure
    r = run([EC + "ERROR 11-20 10:00:00 [core.py:708] RuntimeError: Triton Error [CUDA]: out of memory", ECHO])
    assert r["failed"] is True and r["cause_class"] != "kernel"
