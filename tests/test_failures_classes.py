"""Session 8: the classes of start-up causes follow the published class definitions (docs/failures.md
"Classes: what each one means"), and the causes stated in prose or vendor records are read — on
format-exact lines of the libraries that print them, with near misses that must stay as they were.
"""

from __future__ import annotations

import pytest

from kvlogdiag.catalogue.failures import prefilter_keywords
from kvlogdiag.extract.failures import StartupTracker
from kvlogdiag.input.reader import make_line

KW = [k.encode() for k in prefilter_keywords()]


def run(lines: list[str], keep: list[bytes] | None = None) -> dict:
    t = StartupTracker()
    for i, text in enumerate(lines, 1):
        b = text.encode()
        if b and (keep is None or any(k in b for k in keep)):
            t.feed(make_line(i, b))
    return t.result()


@pytest.mark.parametrize("line, cls", [
    # torch_npu's copy synchronising the stream: an earlier NPU kernel's error code (definition: kernel)
    ("RuntimeError: ACL stream synchronize failed, error code:507014", "kernel"),
    # a compiled operator library missing (vLLM-Ascend's camem importing vllm_ascend_C): kernel, not driver
    ("2025-06-07T08:10:41.790Z ERROR camem: Failed to import vllm_ascend_C:libvllm_ascend_kernels.so: cannot open "
     "shared object file: No such file or directory", "kernel"),
    # ... while the runtime's own libraries stay driver
    ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory", "driver"),
    # torch's own libraries are no driver's (session 10): a torch backend build missing or of another platform
    ("ImportError: libtorch_npu.so: cannot open shared object file: No such file or directory", "kernel"),
    ("ImportError: libtorch_hip.so: cannot open shared object file: No such file or directory", "kernel"),
    # ENOMEM mapping a checkpoint: host memory, not the model's files
    ("RuntimeError: unable to mmap 16933256392 bytes from file </m/model.safetensors>: Cannot allocate memory (12)", "memory"),
    ("OSError: [Errno 12] Cannot allocate memory", "memory"),
    # V1's worker: more local ranks than visible devices
    ("AssertionError: local_world_size (16) must be less than or equal to the number of visible devices (8).", "devices"),
    # a forced attention backend the platform refuses for this model: a vLLM argument
    ("ValueError: Selected backend AttentionBackendEnum.FLASHINFER is not valid for this configuration. "
     "Reason: ['head_size not supported']", "config"),
    # Marlin's tile: the quantization method (its message also names tensor_parallel_size)
    ("ValueError: Weight input_size_per_partition = 10944 is not divisible by min_thread_k = 128. Consider reducing "
     "tensor_parallel_size or running with --quantization gptq.", "quant"),
    # the checkpoint's multimodal processor called as another transformers release does
    ("TypeError: Qwen2_5_VLProcessor.__init__() got multiple values for argument 'image_processor'", "model"),
    # a dependency's submodule missing (its parent imported): another version of the package
    ("ModuleNotFoundError: No module named 'outlines.fsm'", "config"),
    # ... while vLLM's own modules, kernel libraries and connectors keep their classes; a top-level package not installed
    # at all is the launch environment's (session 10: every hand-read log with one was labeled config — pydantic,
    # modelscope, fastsafetensors)
    ("ModuleNotFoundError: No module named 'vllm.entrypoints'", "kernel"),
    ("ModuleNotFoundError: No module named 'aiter.jit.module_aiter_core'", "kernel"),
    ("ModuleNotFoundError: No module named 'lmcache.experimental'", "connector"),
    ("ModuleNotFoundError: No module named 'outlines'", "config"),
    # a kernel library refusing this GPU generation: kernel ("not built for this device"), not the model's architecture
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.", "kernel"),
    # EACCES on a path of the launch environment: config; on a model file: the model's
    ("PermissionError: [Errno 13] Permission denied: '/tmp/XXX-XXX-7b-chat.lock'", "config"),
    ("PermissionError: [Errno 13] Permission denied: '/models/x/model-00001-of-00002.safetensors'", "model"),
    # near misses: another ACL call's code, a safetensors file that is corrupt (not ENOMEM), a backend refused elsewhere
    ("RuntimeError: ACL stream create failed, error code:507033", "unknown"),
    ("safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge", "model"),
    ("TypeError: Foo.__init__() got multiple values for argument 'x'", "unknown"),
])
def test_classes_follow_the_definitions(line, cls):
    assert run([line])["cause_class"] == cls


@pytest.mark.parametrize("lines, cls", [
    # torch's lazy init in a forked child: the multiprocessing start method (launch environment), not the devices
    (["RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the "
      "'spawn' start method"], "config"),
    # ... while torch/cuda's own device errors keep the library's class
    (["RuntimeError: No CUDA GPUs are available"], "devices"),
    # torch.ops.load_library failing inside torch_npu's ATB op plugin: an operator library that cannot be loaded
    (["Traceback (most recent call last):",
      '  File "/v/lib/python3.10/site-packages/torch_npu/op_plugin/atb/_atb_ops.py", line 86, in _register_atb_extensions',
      "    torch.ops.load_library(path)",
      '  File "/v/lib/python3.10/site-packages/torch/_ops.py", line 1444, in load_library',
      '    raise OSError(f"Could not load this library: {path}") from e',
      "OSError: [Errno None] "], "kernel"),
])
def test_class_hints_of_session_8(lines, cls):
    assert run(lines)["cause_class"] == cls


def test_registry_inspection_error_is_the_inspection_failure_not_an_unsupported_architecture():
    r = run(["ERROR 10-23 23:20:26 registry.py:272] Error in inspecting model architecture 'LlamaForCausalLM'"])
    assert r["cause_id"] == "architecture_inspection_failed" and r["cause_class"] == "model"
    assert r["details"].get("architectures") == "LlamaForCausalLM"


@pytest.mark.parametrize("line, text, cls", [
    # typographic double quotes around the pasted error, with the spaces an editor leaves inside them
    ("It throws an error \u201c ValueError: No tokenizer registered for tokenizer_mode='deepseek_v32'\u201d.",
     "ValueError: No tokenizer registered for tokenizer_mode='deepseek_v32'", "tokenizer"),
    # CPython's argument-binding TypeError in a sentence, unquoted: it ends at the argument's closing quote
    ("but i got TypeError: Glm4vProcessor.__init__() got multiple values for argument 'tokenizer', vllm transformers are "
     "install like requirments.txt", "TypeError: Glm4vProcessor.__init__() got multiple values for argument 'tokenizer'",
     "tokenizer"),
    ("then TypeError: Foo.__init__() missing 2 required positional arguments: 'a' and 'b' appears",
     "TypeError: Foo.__init__() missing 2 required positional arguments: 'a' and 'b'", "unknown"),
    ("and AttributeError: 'Qwen2Config' object has no attribute 'rope_theta' is printed",
     "AttributeError: 'Qwen2Config' object has no attribute 'rope_theta'", "model"),
    # an exception's repr inside a sentence ends at the quote that closes the call
    ("it's always same error - ValueError(\"type fp8e4nv not supported in this architecture. The supported fp8 dtypes are "
     "('fp8e4b15', 'fp8e5')\"). Without KV cache quantization it works fine.",
     "ValueError(\"type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')\")",
     "dtype"),
    # the interpreter's AttributeError text at the start of a pasted line, without its name
    ("'InternVLChatConfig' object has no attribute 'num_attention_heads' same error",
     "'InternVLChatConfig' object has no attribute 'num_attention_heads'", "model"),
])
def test_errors_quoted_in_prose_are_read_to_where_the_interpreter_ends_them(line, text, cls):
    r = run([line])
    assert r["failed"] and r["cause_text"] == text and r["cause_class"] == cls
    assert r["details"].get("quoted_in_prose") == "yes" or r["exception"] == "AttributeError"


@pytest.mark.parametrize("line", [
    # prose naming an exception without a message the interpreter shapes, or with an unclosed quote / repr
    "I think a TypeError: happens somewhere around the processor",
    "There was a ValueError(\"type fp8e4nv not supported and the rest is cut",
    "It throws an error \u201c ValueError: the quote is never closed",
    # the attribute text inside a sentence (not leading it), without any exception name
    "it said 'Foo' object has no attribute 'bar' somewhere",
])
def test_prose_without_a_complete_interpreter_message_is_no_cause(line):
    r = run([line])
    assert r["cause_line"] is None and not r["failed"]


def test_a_log_line_wins_over_an_error_quoted_in_prose():
    r = run(["but i got TypeError: Glm4vProcessor.__init__() got multiple values for argument 'tokenizer', then",
             "ERROR 01-01 00:00:00 [core.py:1] ValueError: max_model_len is too large"])
    assert r["cause_line"] == 2


def test_v05_worker_exception_record_relays_the_message_when_the_traceback_is_cut():
    # vLLM 0.5.5 executor/multiproc_worker_utils.py:226-228: "Exception in worker %s while processing method %s: %s, %s"
    p = "(VllmWorkerProcess pid=307) ERROR 01-19 03:55:24 multiproc_worker_utils.py:233] "
    r = run([p + "Exception in worker VllmWorkerProcess while processing method init_device: Cannot re-initialize CUDA in "
                 "forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method, Traceback "
                 "(most recent call last):",
             p + '  File "/x/vllm/worker/worker.py", line 166, in init_device',
             p + "    torch.cuda.set_device(self.device)"])
    assert r["cause_line"] == 1 and r["cause_text"].startswith("Cannot re-initialize CUDA in forked subprocess.")
    assert r["cause_text"].endswith("'spawn' start method") and r["cause_class"] == "config"
    # 0.6's wording carries no message: nothing to relay, the cut traceback is said
    r = run([p + "Exception in worker VllmWorkerProcess while processing method init_device.",
             p + "Traceback (most recent call last):", p + '  File "/x/vllm/worker/worker.py", line 166, in init_device'])
    assert r["cause_line"] is None and r["failed"]


def test_a_relayed_message_that_is_itself_quoted_keeps_its_quotes():
    r = run(["RuntimeError: Worker failed with error ''RMSNormGated' object has no attribute 'activation''"])
    assert r["cause_text"] == "'RMSNormGated' object has no attribute 'activation'"


def test_an_exception_right_after_cjk_text_starts_the_pasted_line():
    r = run(["，报错ValueError: Currently, MiniCPMV only supports versions 2.0, 2.5, 2.6, 4.0. Got version: (4, 5),是不是没来得及更新"])
    assert r["failed"] and r["cause_text"].startswith("ValueError: Currently, MiniCPMV only supports versions")
    # Latin text glued to an exception name is not a lead
    assert run(["fooValueError: something is wrong here"])["cause_line"] is None


def test_an_atb_operation_that_cannot_be_set_up_is_a_kernel_cause():
    # torch_npu's ATB op plugin: the C10 record behind a progress dot and the rank prefix, then c10::Error's backtrace
    r = run([".[rank0]:[E903 07:21:23.263967696 compiler_depend.ts:429] RopeOperation setup failed!",
             "Exception raised from OperationSetup at build/third_party/op-plugin/op_plugin/CMakeFiles/op_plugin_atb.dir/"
             "compiler_depend.ts:151 (most recent call first):"])
    assert r["cause_line"] == 1 and r["cause_id"] == "ascend_operator_failed" and r["cause_class"] == "kernel"
    assert r["details"].get("op") == "RopeOperation"
    # a sentence about an operation that is not an ATB operation name
    assert run(["the operation setup failed! again"])["cause_id"] != "ascend_operator_failed"


def test_macos_dyld_symbol_not_found_is_the_undefined_symbol_of_a_broken_build():
    warn = ("WARNING 03-19 00:20:58 [_custom_ops.py:21] Failed to import from vllm._C with ImportError('dlopen(/u/vllm/"
            "_C.abi3.so, 0x0002): Symbol not found: __ZNK3c1011StorageImpl27throw_data_ptr_access_errorEv\\n  Referenced "
            "from: <06FB8B4B> /u/vllm/_C.abi3.so\\n  Expected in:     <1F2C> /t/torch/lib/libc10.dylib')")
    cut = ["[rank0]: Traceback (most recent call last):", '[rank0]:   File "<frozen runpy>", line 198, in _run_module_as_main']
    # vLLM warns and goes on (0.10.2 _custom_ops.py:17-20); the extension's own binary not loading fails the start only
    # where one of its ops is called: a traceback cut before its exception is not shown to be that failure
    r = run([warn, *cut], keep=KW)
    assert r["failed"] and r["cause_line"] is None and "cut" in r["not_in_excerpt_reason"]
    # ... the op's failure names the module: then the warning is the first statement of it
    op = "[rank0]: AttributeError: '_OpNamespace' '_C' object has no attribute 'rms_norm'"
    r = run([warn, *cut, op], keep=KW)
    assert r["cause_line"] == 1 and r["cause_id"] == "kernel_missing" and r["cause_class"] == "kernel"
    assert r["numbers"] == {} and r["details"].get("symbol", "").startswith("__ZNK3c10")
    # the same dyld line raised (not warned about) is a cause by itself
    r = run(["ImportError: dlopen(/u/vllm/_C.abi3.so, 0x0002): Symbol not found: __ZNK3c1011StorageImplEv"], keep=KW)
    assert r["cause_id"] == "kernel_missing"
    r = run([warn, "INFO 03-19 00:21:00 [api_server.py:1] Application startup complete."], keep=KW)
    assert r["cause_line"] is None and not r["failed"]


def test_import_warning_of_a_missing_system_library_stays_the_cause_of_what_fails_next():
    # libcuda.so.1 missing fails vLLM's platform detection as well as the import: the traceback that follows (argument
    # parsing on an UnspecifiedPlatform) is that library's failure (rounds 13, 17, 20)
    warn = ("WARNING 11-20 18:08:11 [_custom_ops.py:20] Failed to import from vllm._C with ImportError('libcudart.so.12: "
            "cannot open shared object file: No such file or directory')")
    cut = ["Traceback (most recent call last):", '  File "/x/vllm/entrypoints/openai/cli_args.py", line 263, in make_arg_parser',
           "    parser = AsyncEngineArgs.add_cli_args(parser)"]
    r = run([warn, *cut], keep=KW)
    assert r["cause_line"] == 1


@pytest.mark.parametrize("line", [
    # vLLM 0.5.5 attention/backends/torch_sdpa.py, relayed by V0's worker (0.5.5 executor/multiproc_worker_utils.py)
    "ERROR 09-06 10:00:00 multiproc_worker_utils.py:226] Exception in worker VllmWorkerProcess while processing method "
    "load_model: Torch SPDA does not support logits soft cap., Traceback (most recent call last):",
    # vLLM 0.6.6.post1 attention/backends/placeholder_attn.py (the message's missing space kept, as 0.5.1 printed it)
    "ValueError: Please use Flashinfer backend for models withlogits_soft_cap (i.e., Gemma-2). Otherwise, the output might "
    "be wrong. Set Flashinfer backend by export VLLM_ATTENTION_BACKEND=FLASHINFER.",
    "ValueError: XFormers does not support attention logits soft capping.",
    "NotImplementedError: FlexAttention does not support logits soft cap yet.",
])
def test_an_attention_backend_without_logits_soft_capping_is_kernel(line):
    r = run([line])
    assert r["cause_line"] == 1 and r["cause_class"] == "kernel", r


def test_soft_cap_words_elsewhere_do_not_make_a_kernel_class():
    # the model's setting named in a config error stays config
    r = run(["ValueError: Invalid value for final_logit_softcapping: -1"])
    assert r["cause_class"] != "kernel"


def test_config_mapping_keyerror_in_transformers_autoconfig_is_the_model():
    tb = ["Traceback (most recent call last):",
          '  File "/usr/local/lib/python3.10/dist-packages/transformers/models/auto/configuration_auto.py", line 1155, '
          "in from_pretrained",
          '    config_class = CONFIG_MAPPING[config_dict["model_type"]]',
          '  File "/usr/local/lib/python3.10/dist-packages/transformers/models/auto/configuration_auto.py", line 852, '
          "in __getitem__",
          "    raise KeyError(key)",
          "KeyError: 'dbrx'"]
    r = run(tb)
    assert r["cause_line"] == 6 and r["cause_class"] == "model"
    # the same KeyError raised from another function (a dict lookup in vLLM's own code): no class from the frame
    other = [tb[0], '  File "/x/vllm/engine/llm_engine.py", line 400, in _init_tokenizer',
             "    x = table[name]", "KeyError: 'dbrx'"]
    assert run(other)["cause_class"] == "unknown"


def test_bad_marshal_data_is_a_corrupt_environment():
    # CPython's marshal.c on a corrupt .pyc; here as GPUStack's wrapper prints it (its record, then the error's own line)
    r = run(["2025-06-05T18:05:48+08:00 - gpustack.worker.backends.vllm - ERROR - Failed to derive max model length: "
             "Failed to import modelscope.utils.hf_util because of the following error (look up to see its traceback):",
             "bad marshal data (unknown type code)",
             "Traceback (most recent call last):",
             '  File "/v/bin/vllm", line 5, in <module>'], keep=KW)
    assert r["cause_line"] == 2 and r["cause_id"] == "corrupt_bytecode" and r["cause_class"] == "config"
    assert "__pycache__" in r["fix"]
    assert run(["ValueError: bad marshal data"], keep=KW)["cause_id"] != "corrupt_bytecode"


def test_torch_npu_without_the_operator_is_kernel():
    r = run(["AttributeError: module 'torch_npu' has no attribute 'npu_rope'"])
    assert r["cause_class"] == "kernel" and r["raised_in"] is None  # not vLLM's module __getattr__ (nixl_utils)
    # another module's missing attribute gets no class from it
    assert run(["AttributeError: module 'numpy' has no attribute 'float'"])["cause_class"] != "kernel"


def test_a_failed_hf_processor_call_is_the_model():
    r = run(["ValueError: Failed to apply Qwen2VLProcessor on data={'text': '<|imgpad|><|video_pad|>'} with kwargs={}"])
    assert r["cause_line"] == 1 and r["cause_class"] == "model"
