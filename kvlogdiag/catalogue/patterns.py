"""The catalogue of vLLM / vLLM-Ascend log lines kvlogdiag understands.

Each `Pattern` has a name, the vLLM versions it covers, one or more literal *keywords* (a line
is only tried against the pattern when a keyword occurs in it — this is also what the fast
reader uses to skip every other line without decoding it), a regular expression with named
groups, and real sample lines with the groups they must yield. ``tests/test_patterns.py``
checks every sample, so the catalogue documents itself and cannot rot silently.

Formats come from the facts document (``docs/vllm-log-format.md`` sections 2–11) and real logs.
"""

from __future__ import annotations

import re

from kvlogdiag import recache
from kvlogdiag.catalogue.failures import prefilter_keywords
from kvlogdiag.records import FrozenRecord


class Pattern(FrozenRecord):  # a plain record, not a dataclass: less to build per start (kvlogdiag/records.py)
    """One kind of log line."""

    _FIELDS = ("name", "versions", "keywords", "regex", "samples", "doc")
    name: str
    versions: str
    keywords: tuple[str, ...]
    regex: re.Pattern[str]
    samples: tuple[tuple[str, dict], ...] = ()
    doc: str = ""

    def __init__(self, name: str, versions: str, keywords: tuple[str, ...], regex: re.Pattern[str],
                 samples: tuple[tuple[str, dict], ...] = (), doc: str = "") -> None:
        d = self.__dict__
        d["name"] = name
        d["versions"] = versions
        d["keywords"] = keywords
        d["regex"] = regex
        d["samples"] = samples
        d["doc"] = doc


_NUM = r"-?\d+(?:\.\d+)?"
_CATALOGUE: list[Pattern] = []


def pat(name: str, versions: str, keywords: str | tuple[str, ...], regex: str, samples=(), doc: str = "") -> None:
    kws = (keywords,) if isinstance(keywords, str) else tuple(keywords)
    _CATALOGUE.append(Pattern(name, versions, kws, recache.compile(regex), tuple(samples), doc))


# --- identification (facts §2) -----------------------------------------------------------------
pat("api_server_version", "<=0.14 (openai server; gRPC server 0.14)", ("vLLM API server version", "vLLM gRPC server version"),
    r"vLLM (?:API|gRPC) server version (?P<version>[\w.+-]+)",
    [("INFO 07-03 14:17:08 api_server.py:712] vLLM API server version 0.6.3.post1", {"version": "0.6.3.post1"}),
     ("INFO 03-18 12:03:55 [api_server.py:1354] vLLM API server version 0.13.0+faa43dbf.nv26.01",
      {"version": "0.13.0+faa43dbf.nv26.01"}),
     # vllm 0.14.1 vllm/entrypoints/grpc_server.py:411
     ("INFO 01-20 10:00:00 [grpc_server.py:411] vLLM gRPC server version 0.14.1", {"version": "0.14.1"})])
pat("server_version", ">=0.16 (logo off)", "vLLM server version",
    r"vLLM server version (?P<version>[\w.+-]+), serving model (?P<model>\S+)",
    [("INFO 11-29 08:40:01 [api_server.py:1501] vLLM server version 0.33.0, serving model Qwen/Qwen3-32B",
      {"version": "0.33.0", "model": "Qwen/Qwen3-32B"})])
pat("logo_version", ">=0.16 (ASCII logo, 2nd line)", "  version ",
    r"(?<![\u2580-\u259f ]) *[\u2580-\u259f][\u2580-\u259f ]*\s{2}version (?P<version>[\w.+-]+)\s*$",
    [("INFO 06-13 20:03:12 [api_utils.py:339]  \u2584\u2584 \u2584\u2588 \u2588     \u2588     \u2588 \u2580\u2584\u2580 \u2588  version 0.22.1rc1.dev495+g2ecf7d0eb",
      {"version": "0.22.1rc1.dev495+g2ecf7d0eb"})])
pat("logo_model", ">=0.16 (ASCII logo, 3rd line)", "  model   ",
    r"(?<![\u2580-\u259f ]) *[\u2580-\u259f][\u2580-\u259f ]*\s{2}model\s{3}(?P<model>\S+)\s*$",
    [("INFO 06-13 20:03:12 [api_utils.py:339]   \u2588\u2584\u2588\u2580 \u2588     \u2588     \u2588     \u2588  model   Qwen/Qwen2.5-1.5B-Instruct",
      {"model": "Qwen/Qwen2.5-1.5B-Instruct"})])
pat("args_namespace", "<=0.8.5 (and benchmarks)", "Namespace(",
    r"(?:args: )?Namespace\((?P<body>.*)\)?\s*$",
    [("INFO 11-18 17:10:46 api_server.py:586] args: Namespace(subparser='serve', model_tag='m', max_model_len=None, block_size=16)",
      {"body": "subparser='serve', model_tag='m', max_model_len=None, block_size=16)"})])
pat("non_default_args", ">=0.9.0", "non-default args: ",
    r"non-default args: (?P<body>\{.*)$",
    [("(APIServer pid=2231) INFO 07-03 14:17:08 [utils.py:328] non-default args: {'model_tag': 'meta-llama/Llama-3.1-70B-Instruct', 'max_model_len': 65536}",
      {"body": "{'model_tag': 'meta-llama/Llama-3.1-70B-Instruct', 'max_model_len': 65536}"})])
pat("wrapper_config_dict", "any (a serving framework printing the engine kwargs it passes to vLLM)",
    ("model config: {", "engine_args: {", "engine kwargs: {", "vllm config: {", "vLLM config: {"),
    r"(?:model config|engine_args|engine kwargs|[Vv][Ll][Ll][Mm] config): (?P<body>\{.*)$",
    [("2024-03-11 02:55:27,501 xinference.model.llm.vllm.core 249 INFO     Loading internlm-chat-20b with following model config: {'tokenizer_mode': 'auto', 'tensor_parallel_size': 1, 'block_size': 16, 'gpu_memory_utilization': 0.9}",
      {"body": "{'tokenizer_mode': 'auto', 'tensor_parallel_size': 1, 'block_size': 16, 'gpu_memory_utilization': 0.9}"})])
pat("engine_config", "all (V0 'an LLM engine', 0.7-0.10 'a V0', >=0.7 'a V1')", " LLM engine ",
    r"Initializing (?P<kind>an|a V0|a V1) LLM engine(?: \(v(?P<version>[^)\s]+)\))? with config: (?P<body>.*)$",
    [("INFO 07-03 14:17:21 [core.py:76] Initializing a V1 LLM engine (v0.10.2) with config: model='m', max_seq_len=65536, tensor_parallel_size=4",
      {"kind": "a V1", "version": "0.10.2", "body": "model='m', max_seq_len=65536, tensor_parallel_size=4"}),
     ("INFO 01-16 09:11:23 llm_engine.py:70] Initializing an LLM engine with config: model='h2oai/x', tokenizer='h2oai/x'",
      {"kind": "an", "version": None, "body": "model='h2oai/x', tokenizer='h2oai/x'"})])
pat("v1_source_path", "0.10.2+ at DEBUG (file paths in the line head)", "[v1/",
    r"\[v1/[\w/.-]+\.py:\d+\]",
    [("DEBUG 09-01 10:00:00 [v1/worker/gpu_worker.py:290] Memory profiling takes 5.12 seconds.", {})])
pat("platform_detected", "all", ("detected platform", "Platform plugin"),
    r"(?:Automatically detected platform (?P<platform>\w+)\.|Platform plugin (?P<plugin>\w+) is activated)",
    [("INFO 05-01 10:00:00 [__init__.py:235] Automatically detected platform rocm.", {"platform": "rocm"}),
     ("INFO 08-20 10:10:00 [__init__.py:220] Platform plugin ascend is activated", {"plugin": "ascend"})])
pat("rocm_evidence", "all (ROCm builds print device_config=cuda)", ("ROCm", "rocm", "librccl", "on AMD GPUs"),
    r"(?P<evidence>Using ROCmFlashAttention|on ROCm|not supported on AMD GPUs|\[rocm\.py:|librccl|Automatically detected platform rocm|ROCm \d)",
    [("WARNING 03-08 08:22:21 [gpt_oss_triton_kernels_moe.py:56] Using legacy triton_kernels on ROCm", {"evidence": "on ROCm"}),
     ("INFO 05-01 05:25:26 selector.py:38] Using ROCmFlashAttention backend.", {"evidence": "Using ROCmFlashAttention"})])
pat("npu_evidence", "vLLM-Ascend (any version)", ("torch_npu", "torch.npu.", "vllm_ascend", "vllm-ascend", "[model_runner_v1.py:", "[worker_v1.py:", "NPU out of memory", "NPUWorkspaceAllocator"),
    # "vllm-ascend" only as an image, path or package name: the word in prose says nothing about this log
    r"(?P<evidence>torch_npu|torch\.npu\.|vllm_ascend|[/:]vllm-ascend\b|\bvllm-ascend(?=[:/=]|\s*==)|\[model_runner_v1\.py:|\[worker_v1\.py:|NPU out of memory|NPUWorkspaceAllocator)",
    [("(Worker_TP0 pid=2) ERROR 06-01 10:00:00 [multiproc_executor.py:824]     torch.npu.synchronize()", {"evidence": "torch.npu."}),
     ("INFO 06-01 10:00:00 [model_runner_v1.py:2233] Loading model weights took 28.4835 GB", {"evidence": "[model_runner_v1.py:"})])
pat("cpu_backend_evidence", "CPU backend (V0 cpu_executor, V1 cpu_worker/cpu_model_runner)", ("cpu_executor.py", "cpu_worker.py", "cpu_model_runner.py"),
    r"(?P<evidence>\bcpu_executor\.py:|\bcpu_worker\.py:|\bcpu_model_runner\.py:)",
    [("INFO 12-12 22:54:40 cpu_executor.py:186] # CPU blocks: 21845", {"evidence": "cpu_executor.py:"})])
pat("prose_setting", "any (a 'key: value' / 'key=value' setting in a YAML config, a table or a report)",
    ("gpu_memory_utilization", "gpu-memory-utilization", "max_model_len", "max-model-len", "tensor_parallel_size", "tensor-parallel-size"),
    r"(?<![\w.-])(?P<key>gpu[-_]memory[-_]utilization|max[-_]model[-_]len|tensor[-_]parallel[-_]size)\**\s*[:=]\s*`?(?P<value>0?\.\d+|1(?:\.0+)?|\d+)\b(?!\s*instead)",
    [("gpu-memory-utilization: 0.95", {"key": "gpu-memory-utilization", "value": "0.95"}),
     ("| `Available KV cache memory: 67.08 GiB` | gpu_memory_utilization=0.92 下 |", {"key": "gpu_memory_utilization", "value": "0.92"}),
     ("  max_model_len: 32768", {"key": "max_model_len", "value": "32768"})])
pat("prose_model", "any (a 'MODEL: org/name' line in a pasted report)", ("MODEL", "Model", "model:"),
    r"^\s*(?:[-*]\s+)?\**(?:MODEL|Model|model)\**\s*[:=]\s*\**`?(?P<model>[\w.-]+/[\w.-]+)`?\**\s*$",
    [("MODEL: meta-llama/Llama-3.1-8B-Instruct", {"model": "meta-llama/Llama-3.1-8B-Instruct"}),
     ("- **Model**: `Qwen/Qwen3-32B`", {"model": "Qwen/Qwen3-32B"})])
pat("llm_constructor", "offline use (a pasted Python LLM(...) call)", "LLM(",
    r"\bLLM\(\s*(?:model\s*=\s*(?P<q>[\"'])(?P<model>[^\"']+)(?P=q))?",
    [("llm = LLM(model=\"facebook/opt-125m\", gpu_memory_utilization=0.5)", {"model": "facebook/opt-125m"}),
     ("llm = LLM(", {"model": None})])
pat("llm_model_kwarg", "offline use (the model= argument of a multi-line LLM(...) call)", "model=",
    r"^\s+model\s*=\s*(?P<q>[\"'])(?P<model>[^\"']+)(?P=q),?\s*$",
    [('    model="facebook/opt-125m",', {"model": "facebook/opt-125m"})])
pat("user_command", "any (the launch command pasted above a log)", ("vllm serve", "api_server", "vllm.entrypoints", "benchmark_", "vllm-openai"),
    r"^\s*(?:[-*]\s+)?(?:\w[\w ]{0,30}:\s+)?(?:`\s*)?(?:\([\w.-]+\)\s+)?(?:\S*[#$>]\s+)?(?:(?:bash|sh|env)\s+)?(?:(?:export )?[^\s=]+=\S+ )*(?P<cmd>(?:(?:nohup|exec|time|sudo(?: -E)?|uv run|uvx|pipx run)\s+)*(?:(?:\S*/)?vllm serve|(?:\S*/)?python3?(?:\.\d+)? -m vllm\.entrypoints\.\S+|(?:\S*/)?python3?(?:\.\d+)? \S*(?:api_server|benchmark_\w+)\.py|docker run .*?vllm-openai\S*)(?:\s.*)?)$",
    [("$ vllm serve /home/models/Qwen3/Qwen3-4B --max-model-len 4096 --gpu-memory-utilization 0.8",
      {"cmd": "vllm serve /home/models/Qwen3/Qwen3-4B --max-model-len 4096 --gpu-memory-utilization 0.8"}),
     ("(qwen25vl) lzh@host:~/Code$ vllm serve /models/Qwen2.5-VL-72B --tensor-parallel-size 4",
      {"cmd": "vllm serve /models/Qwen2.5-VL-72B --tensor-parallel-size 4"}),
     ("- command: `vllm serve unsloth/X --tensor-parallel-size 4`", {"cmd": "vllm serve unsloth/X --tensor-parallel-size 4`"}),
     ("docker run --gpus all -p 8000:8000 vllm/vllm-openai:v0.8.5 --model Qwen/Qwen2.5-7B-Instruct -tp 2 \\",
      {"cmd": "docker run --gpus all -p 8000:8000 vllm/vllm-openai:v0.8.5 --model Qwen/Qwen2.5-7B-Instruct -tp 2 \\"})])
pat("command_model_line", "any (the model alone on the line after 'vllm serve \\')", " \\",
    r"^\s*(?P<model>[\w.~/][\w.@:/+-]*)\s*\\\s*$",
    [("  org/model-x \\", {"model": "org/model-x"})])
pat("advice_lead", "any (a reply that suggests settings: the command after it is advice, not the run)",
    ("For example", "for example", "e.g.", "you could try", "You could try", "you can try", "You can try", "Try running", "try running"),
    r"(?P<lead>[Ff]or example|e\.g\.|[Yy]ou (?:could|can) try|[Tt]ry running)",
    [("For example,", {"lead": "For example"})])
pat("command_continuation", "any (a launch command continued over several lines with '\\')",
    ("--max-model-len", "--tensor-parallel-size", "--gpu-memory-utilization", "--block-size", "--kv-cache-dtype",
     "--max-num-seqs", "--max-num-batched-tokens", "--pipeline-parallel-size", "--data-parallel-size", "-tp ", "-dp ", "-pp ",
     "--kv-transfer-config", "--additional-config", "hybrid-kv-cache-manager", "--model ", "--enable-prefix-caching",
     "--enforce-eager", "--prefix-cache-retention-interval", "--enable-chunked-prefill", "partial-prefills",
     "--long-prefill-token-threshold", "--kv-cache-memory", "--num-gpu-blocks-override", "--quantization", "  --", "\t--"),
    r"^\s*(?P<args>--?[A-Za-z][\w-]*(?:[= ](?:.*?\S)?)?)\s*(?:(?P<cont>\\)\s*)?$",
    [("    --max-model-len 32768 \\", {"args": "--max-model-len 32768", "cont": "\\"}),
     ("  --gpu-memory-utilization 0.9", {"args": "--gpu-memory-utilization 0.9", "cont": None})])
pat("vllm_env", "any (env dumps, shell exports, command prefixes)", "VLLM_",
    r"(?<![\w-])(?:export\s+)?(?P<name>VLLM_[A-Z0-9_]+)=(?P<value>\"[^\"]*\"|'[^']*'|[^\s,;)]+)",
    [("export VLLM_PREFIX_CACHE_RETENTION_INTERVAL=4096", {"name": "VLLM_PREFIX_CACHE_RETENTION_INTERVAL", "value": "4096"}),
     ("root@rocm:/app# VLLM_USE_TRITON_FLASH_ATTN=0 python benchmark_throughput.py", {"name": "VLLM_USE_TRITON_FLASH_ATTN", "value": "0"})])
pat("env_unknown", ">=0.17", "Unknown vLLM environment variable",
    r"Unknown vLLM environment variable detected: (?P<name>VLLM_[A-Z0-9_]+)",
    [("WARNING 11-29 08:40:00 [envs.py:1700] Unknown vLLM environment variable detected: VLLM_PREFIX_CACHE_RETENTION_INTERVAL",
      {"name": "VLLM_PREFIX_CACHE_RETENTION_INTERVAL"})])

# --- KV-cache startup lines (facts §3) -----------------------------------------------------------
pat("kv_available_gib", ">=0.9.1 (every worker 0.9.1-0.11; local rank 0 >=0.12)", "Available KV cache memory",
    r"Available KV cache memory: (?P<gib>" + _NUM + r") Gi?B",
    [("(Worker_TP2 pid=2522) INFO 07-03 14:19:40 [gpu_worker.py:298] Available KV cache memory: 37.01 GiB", {"gib": "37.01"}),
     ("INFO 09-01 10:00:00 [gpu_worker.py:276] Available KV cache memory: -1.66 GiB", {"gib": "-1.66"})])
pat("ascend_available_bytes", "vLLM-Ascend <= ~v0.14", "Available memory: ",
    r"Available memory: (?P<avail>-?\d+), total memory: (?P<total>\d+)",
    [("(Worker_TP0 pid=3301) INFO 10-21 09:00:01 [worker_v1.py:256] Available memory: 26165529804, total memory: 65452113920",
      {"avail": "26165529804", "total": "65452113920"})])
pat("kv_cache_size", ">=0.8 (device word varies >=0.30; merged with concurrency >=0.28)", " KV cache size: ",
    r"(?P<device>GPU|NPU|CPU|XPU|TPU|HPU)(?P<host> \+ host)? KV cache size: (?P<tokens>[\d,]+) tokens",
    [("INFO 07-03 14:19:41 [kv_cache_utils.py:864] GPU KV cache size: 485,088 tokens", {"device": "GPU", "tokens": "485,088"}),
     ("(EngineCore pid=131) INFO 11-29 08:41:13 [kv_cache_utils.py:1147] NPU KV cache size: 1,032,944 tokens, Maximum concurrency for 131,072 tokens per request: 7.88x",
      {"device": "NPU", "tokens": "1,032,944"})])
pat("max_concurrency", ">=0.6.3", "Maximum concurrency for ",
    r"Maximum concurrency for (?P<tokens>[\d,]+) tokens per request: (?P<concurrency>[\d.]+)x",
    [("INFO 07-03 14:17:32 executor_base.py:116] Maximum concurrency for 32768 tokens per request: 13.69x",
      {"tokens": "32768", "concurrency": "13.69"}),
     ("GPU KV cache size: 1,032,944 tokens, Maximum concurrency for 131,072 tokens per request: 7.88x",
      {"tokens": "131,072", "concurrency": "7.88"})])
pat("gpu_blocks", "V0 all; V1 prototype 0.6.6-0.7", " blocks: ",
    # the device word is any case ("# hpu blocks", "# cpu blocks" on Spyre); the trailing ", # CPU blocks: M"
    # (swap space) must never be read on its own, and a pasted "GPU blocks: N" without "# " still counts
    r"(?:(?<!, )# |(?<![#\w])(?<!# ))(?P<device>(?i:gpu|cuda|npu|rocm|tpu|hpu|xpu|neuron|cpu)) blocks: (?P<blocks>\d+)(?:, # CPU blocks: (?P<cpu_blocks>\d+))?",
    [("INFO 07-03 14:17:32 executor_base.py:111] # cuda blocks: 28047, # CPU blocks: 2048",
      {"device": "cuda", "blocks": "28047", "cpu_blocks": "2048"}),
     ("INFO 01-16 09:11:27 llm_engine.py:294] # GPU blocks: 1011, # CPU blocks: 2048", {"device": "GPU", "blocks": "1011"}),
     ("INFO 06-04 01:18:37 [executor_base.py:113] # hpu blocks: 6399, # CPU blocks: 256", {"device": "hpu", "blocks": "6399", "cpu_blocks": "256"}),
     ("GPU blocks: 1952, # CPU blocks: 2048", {"device": "GPU", "blocks": "1952"})])
pat("v0_profile_budget", "~0.6.4-0.10 V0", "total_gpu_memory (",
    r"total_gpu_memory \((?P<total>[\d.]+) ?GiB\) x gpu_memory_utilization \((?P<util>[\d.]+)\) = (?P<budget>[\d.]+) ?GiB",
    [("INFO 07-03 14:17:31 worker.py:232] the current vLLM instance can use total_gpu_memory (79.10GiB) x gpu_memory_utilization (0.90) = 71.19GiB",
      {"total": "79.10", "util": "0.90", "budget": "71.19"})])
pat("v0_profile_kv", "~0.6.5-0.10 V0", "reserved for KV Cache is",
    r"reserved for KV Cache is (?P<gib>" + _NUM + r") ?GiB",
    [("INFO 07-03 14:17:31 worker.py:232] model weights take 14.99GiB; non_torch_memory takes 0.19GiB; PyTorch activation peak memory takes 1.23GiB; the rest of the memory reserved for KV Cache is 54.78GiB.",
      {"gib": "54.78"})])
pat("v0_profile_results", "0.6.4 V0", "Memory profiling results:",
    r"Memory profiling results:.*?total_gpu_memory=(?P<total>[\d.]+)GiB.*?kv_cache_size=(?P<gib>" + _NUM + r")GiB(?:.*?gpu_memory_utilization=(?P<util>\d+(?:\.\d+)?))?",
    [("INFO 11-18 17:11:01 worker.py:232] Memory profiling results: total_gpu_memory=44.42GiB initial_memory_usage=8.19GiB peak_torch_memory=8.70GiB memory_usage_post_profile=8.26GiB non_torch_memory=0.73GiB kv_cache_size=30.55GiB gpu_memory_utilization=0.90",
      {"total": "44.42", "gib": "30.55", "util": "0.90"})])
pat("model_loading", "all (wording and unit vary)", (" took ",),
    r"(?:Model loading took|Loading model weights took) (?P<gib>[\d.]+) ?(?P<unit>GiB|GB)",
    [("INFO 07-03 14:19:02 [gpu_model_runner.py:2007] Model loading took 32.8874 GiB and 88.412113 seconds", {"gib": "32.8874"}),
     ("INFO 05-01 05:25:40 model_runner.py:175] Loading model weights took 13.4966 GB", {"gib": "13.4966", "unit": "GB"})])
pat("graph_capture", "all (GiB >=0.6.4)", "Graph capturing finished",
    r"Graph capturing finished in (?P<secs>[\d.]+) secs?(?:, took (?P<gib>" + _NUM + r") GiB)?",
    [("INFO 07-03 14:19:58 [gpu_model_runner.py:2708] Graph capturing finished in 12 secs, took 0.55 GiB", {"secs": "12", "gib": "0.55"})])
pat("init_engine", ">=0.8 V1", "init engine (profile",
    r"init engine \(profile, create kv cache, warmup model\) took (?P<secs>[\d.]+) s",
    [("INFO 07-03 14:20:05 [core.py:218] init engine (profile, create kv cache, warmup model) took 64.31 seconds", {"secs": "64.31"})])
pat("memory_profiling_v1", "V1 (DEBUG)", "Total non KV cache memory",
    r"Total non KV cache memory: (?P<non_kv>[\d.]+) ?GiB; (?:torch peak memory increase|total consumed \(from mem_get_info\)): (?P<peak>[\d.]+) ?GiB; non-torch forward increase memory: (?P<non_torch>[\d.]+) ?GiB; weights memory: (?P<weights>[\d.]+) ?GiB",
    [("DEBUG 07-03 14:19:40 [gpu_worker.py:290] Memory profiling takes 5.12 seconds. Total non KV cache memory: 34.2GiB; torch peak memory increase: 1.1GiB; non-torch forward increase memory: 0.2GiB; weights memory: 32.89GiB.",
      {"non_kv": "34.2", "peak": "1.1", "non_torch": "0.2", "weights": "32.89"})])
pat("free_memory_report", "0.10.2+ (INFO 0.10.2, DEBUG 0.11-0.25, INFO >=0.26)", "Desired GPU memory utilization is (",
    r"Free memory on device (?:\S+ )?\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup\. Desired GPU memory utilization is \((?P<util>[\d.]+), (?P<budget>[\d.]+) GiB\)\.(?: Actual usage is (?P<weights>[\d.]+) GiB for weight, (?P<peak>[\d.]+) GiB for peak activation, (?P<non_torch>[\d.]+) GiB for non-torch memory, and (?P<graph>[\d.]+) GiB for CUDAGraph memory)?",
    [("INFO 09-23 18:12:39 [gpu_worker.py:391] Free memory on device (78.66/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 14.08 GiB for weight, 1.97 GiB for peak activation, 0.07 GiB for non-torch memory, and 0.66 GiB for CUDAGraph memory.",
      {"free": "78.66", "total": "79.19", "util": "0.9", "budget": "71.27", "weights": "14.08", "graph": "0.66"})])
pat("kv_cache_memory_bytes", "0.10+ with --kv-cache-memory-bytes", "as specified by kv_cache_memory_bytes",
    r"Initial free memory (?P<free>[\d.]+) GiB, reserved (?P<gib>\d+(?:\.\d+)?) ?GiB (?:memory )?for KV Cache as specified by kv_cache_memory_bytes",
    [("INFO 10-01 10:00:00 [gpu_worker.py:270] Initial free memory 78.5 GiB, reserved 20.0 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling.",
      {"free": "78.5", "gib": "20.0"}),
     # vllm 0.10.2 vllm/v1/worker/gpu_worker.py:251 (and V0 worker.py:253): no space before "GiB"
     ("INFO 09-20 10:00:00 [gpu_worker.py:251] Initial free memory 78.50 GiB, reserved 20.00GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does does not respect the gpu_memory_utilization config.",
      {"free": "78.50", "gib": "20.00"})])
pat("cuda_graph_estimate", ">=0.19", "Estimated CUDA graph memory",
    r"Estimated CUDA graph memory: (?P<gib>[\d.]+) GiB total",
    [("INFO 11-29 08:41:10 [gpu_worker.py:330] Estimated CUDA graph memory: 1.25 GiB total", {"gib": "1.25"})])
pat("cuda_graph_equivalent", ">=0.19", ("is equivalent to --gpu-memory-utilization", "increase --gpu-memory-utilization from", "increasing --gpu-memory-utilization from"),
    r"(?:--gpu-memory-utilization=(?P<util>\d+(?:\.\d+)?) is equivalent to --gpu-memory-utilization=(?P<equivalent>\d+(?:\.\d+)?)|increas(?:e|ing) --gpu-memory-utilization from (?P<util2>\d+(?:\.\d+)?) to (?P<equivalent2>\d+(?:\.\d+)?))",
    [("INFO 11-29 08:41:10 [gpu_worker.py:340] CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9000 is equivalent to --gpu-memory-utilization=0.8842 without CUDA graph memory profiling.",
      {"util": "0.9000", "equivalent": "0.8842"}),
     # vllm 0.33.0 vllm/v1/worker/gpu_worker.py:804 (0.20.2+, with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0)
     ("WARNING 11-29 08:41:10 [gpu_worker.py:804] CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA graph memory is not accounted for during KV cache allocation, which may require lowering --gpu-memory-utilization to avoid OOM. Consider re-enabling it (the default as of v0.21.0) and increasing --gpu-memory-utilization from 0.9 to 0.9123.",
      {"util2": "0.9", "equivalent2": "0.9123"})])
pat("cpu_kv_budget", "CPU backend >=0.20", "GiB for KV cache on node",
    r"(?P<how>Auto|Explicitly) set \((?P<gib>[\d.]+)/(?P<total>[\d.]+)\) GiB for KV cache on node (?P<node>\d+)",
    [("(Worker pid=19850) INFO 06-13 20:03:57 [cpu_worker.py:235] Auto set (1.48/18.0) GiB for KV cache on node 0, with 5.4 GiB requested memory for the worker.",
      {"how": "Auto", "gib": "1.48", "total": "18.0", "node": "0"})])
pat("cpu_kvcache_space_default", "CPU backend <= ~0.19 ('(GB)' in 0.4-0.7)", ("VLLM_CPU_KVCACHE_SPACE (GiB)", "VLLM_CPU_KVCACHE_SPACE (GB)"),
    r"VLLM_CPU_KVCACHE_SPACE \(Gi?B\) for CPU backend is not set, using (?P<gib>\d+) by default",
    [("WARNING 05-01 10:00:00 cpu_executor.py:320] Environment variable VLLM_CPU_KVCACHE_SPACE (GiB) for CPU backend is not set, using 4 by default.",
      {"gib": "4"}),
     # vllm 0.7.3 vllm/platforms/cpu.py:78 (the same words in 0.4.3-0.6.6 cpu_executor.py)
     ("WARNING 02-20 10:00:00 [cpu.py:78] Environment variable VLLM_CPU_KVCACHE_SPACE (GB) for CPU backend is not set, using 4 by default.",
      {"gib": "4"})])
pat("cpu_kvcache_space_not_set", "CPU backend 0.13-0.19", "VLLM_CPU_KVCACHE_SPACE not set. Using ",
    r"VLLM_CPU_KVCACHE_SPACE not set\. Using (?P<gib>\d+(?:\.\d+)?) GiB for KV cache",
    # vllm 0.14.1 vllm/platforms/cpu.py:136 (format_gib), 0.13.0 cpu.py:157 (:.2f)
    [("WARNING 01-20 10:00:00 [cpu.py:136] VLLM_CPU_KVCACHE_SPACE not set. Using 5.4 GiB for KV cache.", {"gib": "5.4"}),
     ("WARNING 12-20 10:00:00 [cpu.py:157] VLLM_CPU_KVCACHE_SPACE not set. Using 4.00 GiB for KV cache.", {"gib": "4.00"})],
    doc="The KV budget the CPU backend chose when the variable is unset (a budget, like cpu_kvcache_space_default).")
pat("kv_group_sizes", ">=0.30 (only with >1 KV cache group)", ("kv cache group sizes", "kv lcm block sizes"),
    r"kv (?P<what>cache group|lcm block) sizes (?P<sizes>[\[(][\d, ]*[\])]|\d+\b)",
    [("INFO 11-29 08:41:12 [kv_cache_utils.py:1020] kv cache group sizes (16, 4096)", {"what": "cache group", "sizes": "(16, 4096)"}),
     # vllm 0.33.0 vllm/v1/core/kv_cache_utils.py:866 prints math.lcm(...) of the group sizes: one int
     ("INFO 11-29 08:41:12 [kv_cache_utils.py:866] kv lcm block sizes 4096", {"what": "lcm block", "sizes": "4096"})])
pat("num_gpu_blocks_override", "V1 all", "num_gpu_blocks_override",
    r"Overriding num_gpu_blocks=(?P<orig>\d+) with num_gpu_blocks_override=(?P<override>\d+)",
    [("INFO 10-01 10:00:00 [kv_cache_utils.py:700] Overriding num_gpu_blocks=30315 with num_gpu_blocks_override=512",
      {"orig": "30315", "override": "512"})])
pat("cp_multiply", "~0.11-0.20 with DCP/PCP > 1", "Multiplying the GPU KV cache size",
    r"Multiplying the GPU KV cache size by the cp_world_size (?P<cp>\d+)",
    [("INFO 10-01 10:00:00 [kv_cache_utils.py:1100] Multiplying the GPU KV cache size by the cp_world_size 4 (pcp_world_size 1 * dcp_world_size 4).",
      {"cp": "4"})])
pat("auto_fit", ">=0.14 (--max-model-len auto)", "Auto-fit max_model_len",
    r"Auto-fit max_model_len: (?:reduced from (?P<orig>\d+) to (?P<fitted>\d+)|full model context length (?P<full>\d+) fits"
    r"|attention-free model, using derived max_model_len=(?P<derived>\d+)|using max_model_len=(?P<kept>\d+), which fits)",
    [("INFO 11-29 08:41:13 [kv_cache_utils.py:900] Auto-fit max_model_len: reduced from 131072 to 98304 to fit in available GPU memory (12.5 GiB available for KV cache)",
      {"orig": "131072", "fitted": "98304"}),
     # vllm 0.33.0 vllm/v1/core/kv_cache_planning.py:1360: nothing to fit, the model's own length is kept
     ("INFO 11-29 08:41:13 [kv_cache_planning.py:1360] Auto-fit max_model_len: attention-free model, using derived max_model_len=1048576",
      {"derived": "1048576", "orig": None}),
     # vllm 0.34.0 vllm/v1/core/kv_cache_planning.py:1458: the length fitted again after CUDA graph capture and warmup
     # (extensible KV cache) still fits; a reduced one is the "reduced from" form above
     ("INFO 12-01 10:00:01 [kv_cache_planning.py:1458] Auto-fit max_model_len: using max_model_len=32768, which fits in the KV cache memory left after CUDA graph capture and warmup (12.50 GiB GPU).",
      {"kept": "32768", "orig": None})])
pat("block_size_set", "all (backend overrides, vLLM-Ascend)", ("block size to", "attention block size", "Block size is set to", "block size must be set to"),
    r"(?:Setting kv cache block size to (?P<a>\d+)|Forcing kv cache block size to (?P<b>\d+)|Setting attention block size to (?P<c>\d+) tokens|Block size is set to (?P<d>\d+) if prefix cache|block size must be set to (?P<e>\d+)|Setting block size to (?P<f>\d+) for better performance)",
    [("INFO 11-29 08:41:00 [cuda.py:200] Setting kv cache block size to 64 for FlashMLA backend(s).", {"a": "64"}),
     ("INFO 09-01 10:00:00 [config.py:100] Setting attention block size to 528 tokens to ensure that attention page size is >= mamba page size.", {"c": "528"}),
     ("WARNING 08-20 10:10:02 [platform.py:300] For deepseek_v4 model, block size should be 32, 64 or 128. Setting block size to 32 for better performance.", {"f": "32"})])
pat("api_server_count_default", ">=0.2x with DP (API server count follows the DP size; hybrid LB >=0.14: the local DP size)",
    "Defaulting api_server_count to data_parallel_size",
    r"Defaulting api_server_count to data_parallel_size(?P<local>_local)? \((?P<dp>\d+)\)",
    [("(APIServer pid=1) INFO 11-01 10:00:00 [api_server.py:1900] Defaulting api_server_count to data_parallel_size (8).", {"dp": "8", "local": None}),
     # vllm 0.33.0 vllm/entrypoints/cli/serve.py:119 (since 0.14.1): the value is args.data_parallel_size_local
     ("(APIServer pid=1) INFO 11-01 10:00:00 [serve.py:119] Defaulting api_server_count to data_parallel_size_local (4) for hybrid LB mode.",
      {"dp": "4", "local": "_local"})])
pat("using_max_model_len", "0.10-0.17", "Using max model len",
    r"Using max model len (?P<n>\d+)",
    [("(APIServer pid=508613) INFO 03-08 08:22:23 [model.py:1554] Using max model len 4096", {"n": "4096"})])
# the tpu-inference plugin's final block size (tpu_inference 0.32.0 platforms/tpu_platform.py:562,
# update_block_size_for_backend: it keeps cache_config.block_size instead of vLLM's hybrid alignment)
# tpu-inference logs the block size it settled on: 0.18.0 platforms/tpu_platform.py:234-235 ("Using KV cache block
# size: N", after the page size is chosen), 0.32.0 l. 562 ("Using cache_config.block_size: N instead of overriding …")
pat("tpu_block_size", "tpu-inference plugin", ("Using cache_config.block_size: ", "Using KV cache block size: "),
    r"Using (?:cache_config\.block_size: (?P<n>\d+) instead of overriding|KV cache block size: (?P<n2>\d+)\s*$)",
    [("(APIServer pid=1355885) INFO 04-04 21:50:07 [tpu_platform.py:182] Using KV cache block size: 256", {"n2": "256"}),
     ("(EngineCore pid=372) INFO 08-11 02:17:22 [tpu_platform.py:393] Using cache_config.block_size: 64 instead of overriding with _align_hybrid_block_size() since we set mamba_page_size_padded in kv_cache_manager.py",
      {"n": "64"})])
# "Starting to load model %s..." with self.model_config.model (0.6.6.post1 worker/model_runner.py, 0.10.2 …
# 0.32 v1/worker/gpu_model_runner.py / cpu_model_runner.py:68): the model a worker loads, in logs that print
# no engine config (an offline LLM(...) run, an excerpt)
pat("load_model_line", "0.6+", "Starting to load model ",
    r"Starting to load model (?P<model>\S+?)\.\.\.$",
    [("INFO 12-22 10:55:31 model_runner.py:1092] Starting to load model kaitchup/Phi-4-AutoRound-GPTQ-4bit...",
      {"model": "kaitchup/Phi-4-AutoRound-GPTQ-4bit"}),
     ("(EngineCore_DP0 pid=964370) INFO 03-09 09:32:13 [gpu_model_runner.py:4255] Starting to load model /models/Qwen3-8B...",
      {"model": "/models/Qwen3-8B"})])
# vllm/engine/arg_utils.py:641 (0.10.2 … 0.32): with HF_HUB_OFFLINE the model id is rewritten to its local
# snapshot path before the engine config is printed; the id is the model the operator asked for
pat("offline_model_path", "0.10+", "replace model_id [",
    r"HF_HUB_OFFLINE is True, replace model_id \[(?P<model_id>[^\]\s]+)\] to model_path \[(?P<path>[^\]]+)\]",
    [("(APIServer pid=964305) INFO 03-09 09:32:06 [arg_utils.py:640] HF_HUB_OFFLINE is True, replace model_id [Qwen/Qwen2.5-3B-Instruct] to model_path [/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-3B-Instruct/snapshots/aa8e7253]",
      {"model_id": "Qwen/Qwen2.5-3B-Instruct", "path": "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-3B-Instruct/snapshots/aa8e7253"})])
pat("fp8_kv_cache", "all", ("fp8 data type to store kv cache", "fp8_ds_mla KV cache format"),
    r"(?P<what>Using fp8 data type to store kv cache|Using DeepSeek's fp8_ds_mla KV cache format)",
    [("INFO 03-18 12:07:03 [cuda.py:300] Using fp8 data type to store kv cache. It reduces the GPU memory footprint", {"what": "Using fp8 data type to store kv cache"})])

# --- fatal KV-capacity errors (facts §5) ----------------------------------------------------------
pat("insufficient_kv", "0.7+ (GB <=0.7; estimate missing in 0.8.x; models's <=0.22)", "max seq len (",
    r"models?'s max seq len \((?P<max_seq_len>\d+)\),\s*\(?(?P<needed>" + _NUM + r") Gi?B KV cache is needed, which is larger than the available KV cache memory \((?P<available>" + _NUM + r") Gi?B\)(?:\.\s*(?:Based on the available memory,\s*)?(?:(?i:the estimated|estimated) maximum model length is (?P<estimate>\d+))?)?",
    [("ValueError: To serve at least one request with the models's max seq len (2048), (1.00 GiB KV cache is needed, which is larger than the available KV cache memory (0.26 GiB). Based on the available memory, the estimated maximum model length is 512. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
      {"max_seq_len": "2048", "needed": "1.00", "available": "0.26", "estimate": "512"}),
     ("ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache is needed, which is larger than the available KV cache memory (2.10 GiB). Based on the available memory,  Try increasing `gpu_memory_utilization`",
      {"max_seq_len": "32768", "needed": "4.00", "available": "2.10", "estimate": None}),
     ("ValueError: To serve at least one request with the model's max seq len (1048576), (4.38 GiB KV cache is needed, which is larger than the available KV cache memory (3.5 GiB). Based on the available memory, the estimated maximum model length is 838860. Try",
      {"max_seq_len": "1048576", "estimate": "838860"}),
     ("ValueError: To serve at least one request with the model's max seq len (1000000), 3.09 GiB KV cache is needed, which is larger than the available KV cache memory (0.24 GiB). Estimated maximum model length is 57344.",
      {"max_seq_len": "1000000", "needed": "3.09", "available": "0.24", "estimate": "57344"})])
pat("insufficient_kv_part", "newer vLLM and pastes (the insufficient-KV message over several lines)",
    ("max seq len", "KV cache is needed", "maximum model length is", "available KV cache memory (", "KV cache memory (",
     "memory (", "length is"),
    # a row of a paste hard-wrapped at ~80 columns may start inside the message: "memory (0.6 GiB). ..."
    # after "... the available KV cache", "length is 2832." after "... the estimated maximum model"
    r"(?P<part>models?'s max seq len|Gi?B KV cache is needed|maximum model length is \d+|KV cache memory \(" + _NUM
    + r" Gi?B\)|^memory \(" + _NUM + r" Gi?B\)|^(?:model )?length is \d+)",
    [("22.5 GiB KV cache is needed, which is larger than the available KV cache memory (17.39 GiB).", {"part": "GiB KV cache is needed"}),
     ("memory (0.6 GiB). Based on the available memory, the estimated maximum model", {"part": "memory (0.6 GiB)"}),
     ("length is 2832.", {"part": "length is 2832"})])
pat("insufficient_kv_v0", "V0 <=0.10", "is larger than the maximum number of tokens",
    r"max seq len \((?P<max_seq_len>\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((?P<kv_tokens>\d+)\)",
    [("ValueError: The model's max seq len (16000) is larger than the maximum number of tokens that can be stored in KV cache (2368). Try increasing `gpu_memory_utilization`",
      {"max_seq_len": "16000", "kv_tokens": "2368"})])
pat("no_available_memory", "all", "No available memory for the cache blocks",
    r"No available memory for the cache blocks",
    [("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.", {})])
pat("util_too_high_start", "V1 >=0.9, vLLM-Ascend", "is less than desired GPU memory utilization",
    r"Free memory on device (?:(?P<device>\S+) )?\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less than desired GPU memory utilization \((?P<util>[\d.]+), (?P<desired>[\d.]+) GiB\)",
    [("ValueError: Free memory on device cuda:0 (10.5/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
      {"device": "cuda:0", "free": "10.5", "total": "79.19", "util": "0.9", "desired": "71.27"})])
pat("auto_fit_failed", ">=0.14", "Cannot auto-fit max_model_len",
    r"Cannot auto-fit max_model_len: not enough GPU memory",
    [("ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token. Try increasing `gpu_memory_utilization`.", {})])
pat("memory_profiling_error", "all (GiB in V1; bytes in V0 0.7-0.10, XPU, vLLM-Ascend <= 0.13; no figures in 0.4)", "Error in memory profiling",
    r"Error in memory profiling\.(?: Initial (?:free|used) memory (?P<initial>\d+(?:\.\d+)?)(?: GiB)?, current(?:ly used| free) memory (?P<current>\d+(?:\.\d+)?))?",
    [("AssertionError: Error in memory profiling. Initial free memory 70.1 GiB, current free memory 72.3 GiB. This happens when other processes sharing the same container release GPU memory",
      {"initial": "70.1", "current": "72.3"}),
     # vllm 0.10.2 vllm/worker/worker.py:338 (V0, bytes, since 0.7)
     ("AssertionError: Error in memory profiling. Initial used memory 1073741824, currently used memory 2147483648. This happens when the GPU memory was not properly cleaned up before initializing the vLLM instance.",
      {"initial": "1073741824", "current": "2147483648"}),
     # vllm-ascend 0.13.0 vllm_ascend/worker/worker.py:286 (bytes)
     ("AssertionError: Error in memory profiling. Initial free memory 60129542144, current free memory 61203283968. This happens when the NPU memory was not properly cleaned up before initializing the vLLM instance.",
      {"initial": "60129542144", "current": "61203283968"}),
     # vllm 0.4.3 vllm/worker/worker.py:163
     ("AssertionError: Error in memory profiling. This happens when the GPU memory was not properly cleaned up before initializing the vLLM instance.",
      {"initial": None})])
pat("cpu_worker_over_budget", "CPU backend >=0.20", "of CPU memory reserved for it",
    r"The worker already uses (?P<used>[\d.]+) GiB .*?more than the (?P<reserved>[\d.]+) GiB of CPU memory reserved for it"
    r"(?: on node (?P<node>\d+))?(?:.*?increase `--gpu-memory-utilization` to more than (?P<util>[\d.]+))?",
    [("ValueError: The worker already uses 5.2 GiB (model weights and runtime), more than the 4.0 GiB of CPU memory reserved for it on node 0, increase",
      {"used": "5.2", "reserved": "4.0", "node": "0", "util": None}),
     # vllm 0.33.0 vllm/v1/worker/cpu_worker.py:229 (ValueError): reserved = total x --gpu-memory-utilization (:80)
     ("ValueError: The worker already uses 21.07 GiB (model weights and runtime), more than the 12.6 GiB of CPU memory reserved for it on node 0, leaving none for the KV cache. On the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of CPU memory reserved (despite its name). To resolve: increase `--gpu-memory-utilization` to more than 0.51, or set the KV cache size explicitly with `--kv-cache-memory-bytes` or VLLM_CPU_KVCACHE_SPACE.",
      {"used": "21.07", "reserved": "12.6", "node": "0", "util": "0.51"})])
pat("engine_failed", "V1", ("EngineCore failed to start", "Engine core initialization failed"),
    r"(?P<what>EngineCore failed to start|Engine core initialization failed)",
    [("ERROR 07-03 14:19:41 [core.py:718] EngineCore failed to start.", {"what": "EngineCore failed to start"})])
pat("block_exhaustion", "all", ("No free blocks", "no free blocks", "out of KV cache blocks", "Not enough free blocks"),
    r"(?P<what>[Nn]o free blocks|out of KV cache blocks|Not enough free blocks)",
    [("WARNING 11-29 09:00:00 [block_pool.py:300] No free blocks in the block pool; request 42 must wait.", {"what": "No free blocks"})])

# --- hybrid KV cache manager (facts §6) -----------------------------------------------------------
pat("hma_disabled_hybrid_model", ">=0.9.1", "Hybrid KV cache manager is disabled for this hybrid model",
    r"Hybrid KV cache manager is disabled for this hybrid model",
    [("WARNING 11-29 08:41:12 [kv_cache_planning.py:870] Hybrid KV cache manager is disabled for this hybrid model, This means we do not enable any optimizations for saving KV cache memory (e.g., dropping the KV cache outside the sliding window). The compute of layers like sliding window is still saved.", {})])
pat("hma_unify_failed", "<=0.26 / >=0.27", ("failed to convert the KV cache specs", "Failed to promote local KV cache specs"),
    r"(?:Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one unified type|Failed to promote local KV cache specs to one unified type)",
    [("ValueError: Failed to promote local KV cache specs to one unified type.", {})])
pat("hma_auto_off", "0.12-0.22 / >=0.23", "Turning off hybrid kv cache manager because",
    r"Turning off hybrid kv cache manager because (?P<rest>`?(?P<cause>--kv-transfer-config|--kv-events-config|connector \w+|[^` ]+)`?.*)",
    [("WARNING 11-29 08:40:02 [vllm.py:2267] Turning off hybrid kv cache manager because `--kv-transfer-config` selects a KV connector that does not support it. Impact: hybrid SSM models (e.g. Jamba, Bamba) require HMA",
      {"cause": "--kv-transfer-config"}),
     ("WARNING 10-01 10:00:00 [config.py:3900] Turning off hybrid kv cache manager because `--kv-transfer-config` is set. This will reduce the performance of vLLM on LLMs with sliding window attention or Mamba attention.",
      {"cause": "--kv-transfer-config"}),
     ("WARNING 11-01 10:00:00 [vllm.py:1471] Turning off hybrid kv cache manager because connector LMCacheConnectorV1 does not subclass `SupportsHMA`.",
      {"cause": "connector LMCacheConnectorV1"})])
pat("hma_chunked_local", ">=0.10 (Llama-4)", "chunked local attention with the hybrid KV cache manager",
    r"latency regression when using chunked local attention with the hybrid KV cache manager\. Disabling it",
    [("WARNING 06-01 10:00:00 [config.py:4800] There is a latency regression when using chunked local attention with the hybrid KV cache manager. Disabling it, by default. To enable it, set the environment VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1.", {})])
# vllm 0.27.1 vllm/v1/core/kv_cache_utils.py:1534-1565 _try_get_full_allocation_fallback_groups (docs/vllm-behaviour.md section 5)
pat("hma_swa_full_fallback", ">=0.27", "KV cache page sizes cannot be unified",
    r"KV cache page sizes cannot be unified; treating sliding-window layers as full attention",
    [("WARNING 03-02 10:00:00 [kv_cache_utils.py:1560] KV cache page sizes cannot be unified; treating sliding-window layers as full attention for cache allocation. Sliding-window attention compute is unchanged.", {})])
pat("hma_explicit_unsupported", "0.13-0.33", "Hybrid KV cache manager was explicitly enabled but is not supported",
    r"Hybrid KV cache manager was explicitly enabled but is not supported",
    [("WARNING 11-29 08:40:02 [vllm.py:2280] Hybrid KV cache manager was explicitly enabled but is not supported in this configuration. Consider omitting the --no-disable-hybrid-kv-cache-manager flag", {})])

# --- prefix caching / retention interval (facts §7) -----------------------------------------------
pat("retention_not_multiple", "0.23+", "must be non-negative and a multiple of scheduler_block_size",
    r"(?P<name>VLLM_PREFIX_CACHE_RETENTION_INTERVAL|prefix_cache_retention_interval) \((?P<value>-?\d+)\) must be non-negative and a multiple of scheduler_block_size \((?P<block>\d+)\)",
    [("ValueError: VLLM_PREFIX_CACHE_RETENTION_INTERVAL (2048) must be non-negative and a multiple of scheduler_block_size (4096).",
      {"name": "VLLM_PREFIX_CACHE_RETENTION_INTERVAL", "value": "2048", "block": "4096"})])
pat("retention_no_swa", "0.23+", ("no sliding-window KV cache group", "no sliding-window or Mamba KV cache group"),
    r"(?P<name>VLLM_PREFIX_CACHE_RETENTION_INTERVAL|prefix_cache_retention_interval) is set but this model has no sliding-window",
    [("ValueError: VLLM_PREFIX_CACHE_RETENTION_INTERVAL is set but this model has no sliding-window KV cache group, so retention has no effect.",
      {"name": "VLLM_PREFIX_CACHE_RETENTION_INTERVAL"})])
pat("retention_env_deprecated", "0.29", "Using VLLM_PREFIX_CACHE_RETENTION_INTERVAL environment variable is deprecated",
    r"Using VLLM_PREFIX_CACHE_RETENTION_INTERVAL environment variable is deprecated",
    [("WARNING 10-01 10:00:00 [envs.py:100] Using VLLM_PREFIX_CACHE_RETENTION_INTERVAL environment variable is deprecated and will be removed in v0.29. Please use prefix_cache_retention_interval instead.", {})])

# --- scheduler / chunked prefill (facts §8) -------------------------------------------------------
pat("chunked_prefill", "V0 and V1", "Chunked prefill is enabled with max_num_batched_tokens",
    r"Chunked prefill is enabled with max_num_batched_tokens=(?P<tokens>\d+)",
    [("INFO 07-03 14:17:08 [scheduler.py:222] Chunked prefill is enabled with max_num_batched_tokens=8192.", {"tokens": "8192"})])
pat("partial_prefills", "0.7-0.26", "Concurrent partial prefills enabled",
    r"Concurrent partial prefills enabled with max_num_partial_prefills=(?P<partial>\d+), max_long_partial_prefills=(?P<long>\d+), long_prefill_token_threshold=(?P<threshold>\d+)",
    [("INFO 05-01 10:00:00 config.py:1800] Concurrent partial prefills enabled with max_num_partial_prefills=2, max_long_partial_prefills=1, long_prefill_token_threshold=8192",
      {"partial": "2", "long": "1", "threshold": "8192"})])
pat("partial_prefill_errors", "0.7-0.26", ("max_num_partial_prefills > 1", "must be less than or equal to self.max_num_partial_prefills", "cannot be greater than the max_model_len"),
    r"(?P<what>Chunked prefill must be enabled to set max_num_partial_prefills > 1|max_long_partial_prefills=\d+ must be less than or equal to self\.max_num_partial_prefills=\d+|long_prefill_token_threshold \(\d+\) cannot be greater than the max_model_len \(\d+\))",
    [("ValueError: Chunked prefill must be enabled to set max_num_partial_prefills > 1.", {"what": "Chunked prefill must be enabled to set max_num_partial_prefills > 1"})])
pat("param_reset", "vLLM-Ascend", "Parameter is optimized for incompatible platform",
    r"Parameter is optimized for incompatible platform\. parameter=(?P<param>\w+), action: (?P<action>(?:.*?\S)?)\s*$",
    [("WARNING 08-20 10:10:02 [platform.py:200] Parameter is optimized for incompatible platform. parameter=max_num_partial_prefills, action: resetting to default (1). ",
      {"param": "max_num_partial_prefills", "action": "resetting to default (1)."})])
pat("batched_tokens_checks", "V1", ("exceeds max_num_seqs * max_model_len", "is smaller than max_model_len", "must be greater than or equal to max_num_seqs"),
    r"max_num_batched_tokens \((?P<tokens>\d+)\) (?P<what>exceeds max_num_seqs \* max_model_len|is smaller than max_model_len|must be greater than or equal to max_num_seqs) \((?P<other>\d+)\)",
    [("WARNING 10-01 10:00:00 [scheduler.py:200] max_num_batched_tokens (65536) exceeds max_num_seqs * max_model_len (32768). This may lead to unexpected behavior.",
      {"tokens": "65536", "what": "exceeds max_num_seqs * max_model_len", "other": "32768"})])
pat("ascend_additional_config", "vLLM-Ascend", "is set from additional_config with value",
    r"AscendConfig\.(?P<key>\w+) is set from additional_config with value (?P<value>(?:.*?\S)?)\.?\s*$",
    [("INFO 08-20 10:10:02 [ascend_config.py:80] AscendConfig.recompute_scheduler_enable is set from additional_config with value True.",
      {"key": "recompute_scheduler_enable", "value": "True"})])

# --- KV transfer / recompute (facts §9) -----------------------------------------------------------
pat("recompute_ignored_p_node", "vLLM-Ascend v0.23.0, >=v0.24.0rc1", "recompute_scheduler_enable is ignored on PD-disaggregated P nodes",
    r"recompute_scheduler_enable is ignored on PD-disaggregated P nodes",
    [("WARNING 08-20 10:10:02 [platform.py:900] recompute_scheduler_enable is ignored on PD-disaggregated P nodes (kv_role='kv_producer') and will be deprecated on P nodes in a future release.", {})])
pat("recompute_role_error", "vLLM-Ascend v0.19.1rc1+", "recompute_scheduler_enable can only be enabled",
    r"recompute_scheduler_enable can only be enabled (?:in PD-disaggregated mode|on PD-disaggregated D nodes)(?: \(kv_role='kv_consumer', but got kv_role=(?P<role>'?\w+'?)\))?",
    [("ValueError: recompute_scheduler_enable can only be enabled on PD-disaggregated D nodes (kv_role='kv_consumer', but got kv_role='kv_both'), and is not supported in PD-mixed mode.",
      {"role": "'kv_both'"})])
pat("recompute_deprecated_top_level", "vLLM-Ascend >=v0.25.1rc1", "additional_config.recompute_scheduler_enable is deprecated",
    r"additional_config\.recompute_scheduler_enable is deprecated",
    [("WARNING 08-20 10:10:02 [ascend_config.py:90] additional_config.recompute_scheduler_enable is deprecated; use additional_config.scheduler_config.recompute_scheduler_enable instead.", {})])
pat("recompute_offload_connector", "vLLM-Ascend >=v0.23", "RecomputeCPUOffloadConnector: role=",
    r"RecomputeCPUOffloadConnector: role=(?P<role>[\w.]+), per_rank=(?P<per_rank_gb>[\d.]+) GB, world_size=(?P<world_size>\d+), offload_prefix_caching=(?P<prefix>\w+)",
    [("INFO 08-20 10:11:00 [recompute_cpu_offload_connector.py:80] RecomputeCPUOffloadConnector: role=KVConnectorRole.WORKER, per_rank=0.50 GB, world_size=16, offload_prefix_caching=False",
      {"role": "KVConnectorRole.WORKER", "per_rank_gb": "0.50", "world_size": "16", "prefix": "False"})])
# vllm-ascend 0.23.0.post1 core/recompute_scheduler.py:297-345 prints the two D-node preemption lines without the
# "[RecomputeScheduler]" prefix, :872 the "Recompute triggered" warning with it (docs/vllm-behaviour.md)
pat("recompute_runtime", "vLLM-Ascend", ("[RecomputeScheduler]", "Recompute preemption ", "Recompute triggered for request"),
    r"(?:\[RecomputeScheduler\] )?(?P<what>(?<=\[RecomputeScheduler\] )Preempted request|Recompute preemption offload enabled for request|Recompute preemption falls back without offload for request|Recompute triggered for request) (?P<request>\S+?)[.,]?(?=\s|$)(?: running_count=(?P<running>\d+), token_budget=(?P<budget>-?\d+))?",
    [("INFO 08-20 11:00:00 [recompute_scheduler.py:400] [RecomputeScheduler] Preempted request cmpl-42-0. running_count=63, token_budget=120",
      {"what": "Preempted request", "request": "cmpl-42-0", "running": "63", "budget": "120"}),
     ("INFO 08-20 11:00:00 [recompute_scheduler.py:330] Recompute preemption offload enabled for request cmpl-7-0",
      {"what": "Recompute preemption offload enabled for request", "request": "cmpl-7-0"}),
     ("INFO 08-20 11:00:00 [recompute_scheduler.py:341] Recompute preemption falls back without offload for request cmpl-8-0",
      {"what": "Recompute preemption falls back without offload for request", "request": "cmpl-8-0"}),
     ("WARNING 08-20 11:00:01 [recompute_scheduler.py:872] [RecomputeScheduler] Recompute triggered for request cmpl-9-0",
      {"what": "Recompute triggered for request", "request": "cmpl-9-0"})])

# --- runtime (facts §10) --------------------------------------------------------------------------
pat("v0_preemption", "V0", "is preempted by",
    r"is preempted by (?P<mode>PreemptionMode\.\w+|\w+) mode because(?: there is not enough KV cache space)?.*?(?:total_num_cumulative_preemption=(?P<total>\d+))?$",
    [("WARNING 07-03 15:02:11 scheduler.py:1560] Sequence group 42 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=51",
      {"mode": "PreemptionMode.RECOMPUTE", "total": "51"})])
pat("stats", "V0 and V1, all", "Avg prompt throughput",
    r"(?:(?:Engine (?P<engine>\d+)|(?<!\d)(?P<aggregated>\d+) Engines Aggregated): )?Avg prompt throughput: (?P<prompt_tps>[\d.]+) tokens/s, Avg generation throughput: (?P<gen_tps>[\d.]+) tokens/s, Running: (?P<running>\d+) reqs, (?:Swapped: (?P<swapped>\d+) reqs, Pending: (?P<pending>\d+) reqs|Waiting: (?P<waiting>\d+) reqs)(?P<rest>.*)$",
    [("(APIServer pid=88) INFO 11-29 09:00:00 [loggers.py:340] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 512.3 tokens/s, Running: 64 reqs, Waiting: 12 reqs, Preemptions: 3, GPU KV cache usage: 99.1%, Prefix cache hit rate: 35.0%",
      {"engine": "000", "running": "64", "waiting": "12", "rest": ", Preemptions: 3, GPU KV cache usage: 99.1%, Prefix cache hit rate: 35.0%"}),
     ("INFO 11-18 17:11:21 metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.0%, CPU KV cache usage: 0.0%.",
      {"running": "0", "swapped": "0", "pending": "0"})])
pat("startup_complete", "all", ("Application startup complete", "Uvicorn running on", "Starting vLLM API server"),
    r"(?P<what>Application startup complete|Uvicorn running on|Starting vLLM API server)",
    [("INFO:     Application startup complete.", {"what": "Application startup complete"})])


# --- patterns for KVD001-KVD009 -------------------------------------------------------------------
pat("v1_fallback", "0.8-0.10 (V1 default, unsupported feature)", "is not supported by the V1 Engine",
    r"\] (?P<feature>[^\[\]]+?) is not supported by the V1 Engine\. Falling back to V0\.",
    [("WARNING 05-14 16:02:20 [arg_utils.py:1658] Concurrent Partial Prefill is not supported by the V1 Engine. Falling back to V0. ",
      {"feature": "Concurrent Partial Prefill"})],
    doc="vLLM silently running the old V0 engine because an option needs it (facts §8).")
pat("offload_per_rank_mismatch", "vLLM-Ascend RecomputeCPUOffload >=v0.23, vLLM SimpleCPUOffload", "!= cpu_bytes_to_use/world_size",
    r"cpu_bytes_to_use_per_rank \((?P<per_rank>[\d.]+) GB\) != cpu_bytes_to_use/world_size \((?P<derived>[\d.]+) GB\)",
    [("WARNING 08-20 10:11:00 [recompute_cpu_offload_connector.py:70] cpu_bytes_to_use_per_rank (16.00 GB) != cpu_bytes_to_use/world_size (1.00 GB). Using per-rank value.",
      {"per_rank": "16.00", "derived": "1.00"})],
    doc="Both offload sizes given and they disagree; the per-rank one wins (GB = 2**30 bytes).")


# --- patterns for KVD010-KVD018 -------------------------------------------------------------------
pat("block_pool_no_free", "V1 all (BlockPool.get_new_blocks) / V0 block manager v2 (NoFreeBlocksError)",
    ("free blocks from the pool", "NoFreeBlocksError"),
    r"(?:Cannot get (?P<blocks>\d+) free blocks from the pool|(?P<nofree>NoFreeBlocksError))",
    [("(EngineCore_DP0 pid=2410) ERROR 09-26 09:14:02 [core.py:790] ValueError: Cannot get 1 free blocks from the pool",
      {"blocks": "1", "nofree": None}),
     ("ERROR 12-13 08:58:11 engine.py:165] NoFreeBlocksError()", {"blocks": None, "nofree": "NoFreeBlocksError"})],
    doc="The KV block pool was empty when the scheduler allocated: the engine loop dies (facts §10).")
pat("prompt_exceeds_kv_capacity", "V0 (scheduler, AllocStatus.NEVER)", "exceeds the capacity of block_manager",
    r"Input prompt \((?P<tokens>\d+) tokens\)(?: \+ lookahead slots \((?P<lookahead>\d+)\))? is too long and exceeds the capacity of block_manager",
    [("WARNING 07-22 10:14:03 scheduler.py:1010] Input prompt (10854 tokens) is too long and exceeds the capacity of block_manager",
      {"tokens": "10854", "lookahead": None}),
     ("WARNING 11-18 17:20:41 scheduler.py:1133] Input prompt (40000 tokens) + lookahead slots (0) is too long and exceeds the capacity of block_manager",
      {"tokens": "40000", "lookahead": "0"})],
    doc="V0 ignored a prompt larger than the whole KV cache (the request finishes with no output).")
pat("v0_profile_breakdown", "~0.6.5-0.10 V0 (2nd line of the memory-profiling message)", "PyTorch activation peak memory takes",
    r"model weights take (?P<weights>" + _NUM + r") ?GiB; non_torch_memory takes (?P<non_torch>" + _NUM + r") ?GiB; PyTorch activation peak memory takes (?P<peak>" + _NUM + r") ?GiB",
    [("INFO 07-03 14:17:31 worker.py:232] model weights take 14.99GiB; non_torch_memory takes 0.19GiB; PyTorch activation peak memory takes 1.23GiB; the rest of the memory reserved for KV Cache is 54.78GiB.",
      {"weights": "14.99", "non_torch": "0.19", "peak": "1.23"})],
    doc="What V0 subtracted from total x utilization before sizing the KV cache (facts §4).")

# --- wordings found by the format-string harvest (docs/coverage.md) ----------------------------------
pat("engine_dump_version", "V1 0.9.2+ (the input dump after an engine crash)", "Dumping input data for V1 LLM engine",
    r"Dumping input data for V1 LLM engine \(v(?P<version>[^)\s]+)\) with config:",
    # vllm 0.33.0 vllm/logging_utils/dump_input.py:72 (same words since 0.9.2)
    [("(EngineCore_DP0 pid=2410) ERROR 09-26 09:14:02 [dump_input.py:72] Dumping input data for V1 LLM engine (v0.11.2) with config: model='Qwen/Qwen3-32B', speculative_config=None, ",
      {"version": "0.11.2"})],
    doc="The release, printed again when the engine dies (a crash log may have lost the start-up lines).")
pat("util_budget_error", "0.32+ (start-up errors after excluding external weights)",
    ("on startup is less than the engine's budget", "exceed the desired GPU memory utilization"),
    r"(?P<what>Free memory|Externally held weights) on device (?:(?P<device>\S+) )?\((?P<gib>[\d.]+)/(?P<total>[\d.]+) GiB\) (?:on startup is less than the engine's budget after excluding external process's weights|exceed the desired GPU memory utilization) \((?P<util>[\d.]+), (?P<budget>[\d.]+) GiB\)",
    # vllm 0.33.0 vllm/v1/worker/utils.py:731 and :741 (ValueError)
    [("ValueError: Free memory on device cuda:0 (10.5/79.19 GiB) on startup is less than the engine's budget after excluding external process's weights (0.9, 60.2 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
      {"what": "Free memory", "device": "cuda:0", "gib": "10.5", "total": "79.19", "util": "0.9", "budget": "60.2"}),
     ("ValueError: Externally held weights on device cuda:0 (20.1/79.19 GiB) exceed the desired GPU memory utilization (0.9, 71.27 GiB). Increase GPU memory utilization or reduce GPU memory used by other processes.",
      {"what": "Externally held weights", "gib": "20.1", "util": "0.9", "budget": "71.27"})],
    doc="vLLM >= 0.32 refuses to start: free (or externally held) memory against the utilization budget.")

pat("cpu_kv_over_available", "CPU backend 0.20+ (explicit KV size larger than the node's free memory)",
    "on kv cache allocation is less than requested memory for kv",
    r"Available memory on node (?P<node>\d+) \((?P<avail>[\d.]+)/(?P<total>[\d.]+) GiB\) on kv cache allocation is less than requested memory for kv \((?P<gib>[\d.]+) GiB\)",
    # vllm 0.33.0 vllm/v1/worker/cpu_worker.py:206 (ValueError, since 0.20.2)
    [("ValueError: Available memory on node 0 (10.0/18.0 GiB) on kv cache allocation is less than requested memory for kv (12.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes.",
      {"node": "0", "avail": "10.0", "total": "18.0", "gib": "12.0"})],
    doc="The CPU backend refuses to start: the KV size asked for does not fit in the node's free memory.")

pat("xpu_profile_before", "XPU V1 0.9-0.15 (MB = MiB)", "Before memory profiling run, total GPU memory: ",
    r"Before memory profiling run, total GPU memory: (?P<total>[\d.]+) MB, model load takes (?P<weights>[\d.]+) MB, free gpu memory is (?P<free>[\d.]+) MB",
    # vllm 0.14.1 vllm/v1/worker/xpu_worker.py:90 (figures are bytes / 1024**2, :85-88)
    [("(EngineCore_DP0 pid=123) INFO 01-20 10:00:00 [xpu_worker.py:90] Before memory profiling run, total GPU memory: 65536.00 MB, model load takes 15307.52 MB, free gpu memory is 49152.00 MB.",
      {"total": "65536.00", "weights": "15307.52", "free": "49152.00"})],
    doc="XPU's memory summary before profiling: device total and what the loaded model allocated.")
pat("xpu_profile_after", "XPU V1 0.9-0.15 (MB = MiB)", "After memory profiling run, peak memory usage is ",
    r"After memory profiling run, peak memory usage is (?P<peak>[\d.]+) MB, ?torch mem is (?P<torch>[\d.]+) MB, non-torch mem is (?P<non_torch>-?[\d.]+) MB, free gpu memory is (?P<free>[\d.]+) MB",
    # vllm 0.14.1 vllm/v1/worker/xpu_worker.py:126; KV memory = total x utilization - peak (:115), so peak is all non-KV memory
    [("(EngineCore_DP0 pid=123) INFO 01-20 10:00:00 [xpu_worker.py:126] After memory profiling run, peak memory usage is 17408.25 MB,torch mem is 15360.00 MB, non-torch mem is 512.00 MB, free gpu memory is 48000.00 MB.",
      {"peak": "17408.25", "torch": "15360.00", "non_torch": "512.00", "free": "48000.00"})],
    doc="XPU's profiling result: the peak (everything but the KV cache) and its non-torch part.")

# vllm_hpu_extension's format_bytes (profiler.py): 4 significant digits and a binary unit, "43.5 GiB", "512 MiB", "980 B"
_HPU_BYTES = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)? (?:[KMGT]i)?B"
pat("hpu_memory_summary", "HPU (Gaudi) V0 0.6.6-0.9", "reserved for HPUGraphs",
    r"Free device memory: (?P<free>" + _HPU_BYTES + r"), (?P<usable>" + _HPU_BYTES + r") usable \(gpu_memory_utilization=(?P<util>[\d.]+)\), "
    r"(?P<graphs>" + _HPU_BYTES + r") reserved for HPUGraphs \(VLLM_GRAPH_RESERVED_MEM=(?P<graph_frac>[\d.]+)\), (?P<kv>" + _HPU_BYTES + r") reserved for KV cache",
    # vllm 0.9.2 vllm/worker/hpu_worker.py:243: KV = free x utilization x (1 - VLLM_GRAPH_RESERVED_MEM), blocks = KV // block bytes
    [("INFO 06-04 01:18:30 hpu_worker.py:243] Free device memory: 62.53 GiB, 56.28 GiB usable (gpu_memory_utilization=0.9), 5.628 GiB reserved for HPUGraphs (VLLM_GRAPH_RESERVED_MEM=0.1), 50.65 GiB reserved for KV cache",
      {"free": "62.53 GiB", "usable": "56.28 GiB", "util": "0.9", "graphs": "5.628 GiB", "graph_frac": "0.1", "kv": "50.65 GiB"})],
    doc="The HPU worker's KV budget: what it reserved for the KV cache out of the free device memory.")
pat("hpu_weights_summary", "HPU (Gaudi) V0 0.6.6-0.9", "Loading model weights took in total ",
    r"Loading model weights took in total (?P<device>" + _HPU_BYTES + r") of device memory",
    # vllm 0.9.2 vllm/worker/hpu_model_runner.py:652 (vllm_hpu_extension HabanaMemoryProfiler.get_summary_string: consumed device memory first)
    [("INFO 06-04 01:17:02 hpu_model_runner.py:652] Loading model weights took in total 15.02 GiB of device memory (15.3 GiB/94.62 GiB used) and 1.137 GiB of host memory (89.4 GiB/1007 GiB used)",
      {"device": "15.02 GiB"})],
    doc="The memory the HPU model runner's weight load took (the V0 'Loading model weights took' of CUDA).")
pat("prefix_hit_rate_line", "V0 0.5.x (own line after the stats line; later releases put it in the stats line)", "Prefix cache hit rate: GPU: ",
    r"Prefix cache hit rate: GPU: (?P<gpu>-?[\d.]+)%, CPU: (?P<cpu>-?[\d.]+)%",
    # vllm 0.5.5 vllm/engine/metrics.py:367
    [("INFO 08-30 10:00:10 metrics.py:367] Prefix cache hit rate: GPU: 45.26%, CPU: 0.00%", {"gpu": "45.26", "cpu": "0.00"})],
    doc="The GPU prefix-cache hit rate of 0.5.x, printed on its own line.")

pat("prompt_longer_than_max_model_len", "all (per-request errors; vLLM-Ascend runtime assert)",
    ("is longer than the maximum model length of", "Sampled token IDs exceed the max model length"),
    r"(?:The (?P<ptype>\w+) prompt \(length (?P<length>\d+)\)(?: plus the number of requested output tokens \(at least 1\))? is longer than the maximum model length of (?P<mml>\d+)"
    r"|Prompt length of (?P<length0>\d+) is longer than the maximum model length of (?P<mml0>\d+)"
    r"|Sampled token IDs exceed the max model length\. Total number of tokens: (?P<tokens>\d+) > max_model_len: (?P<mml1>\d+))",
    # vllm 0.33.0 vllm/v1/engine/input_processor.py:588 and :598: the limit is max_model_len for a decoder
    # prompt, the encoder cache size for an encoder prompt (:569-572); 0.10.2 vllm/engine/llm_engine.py:1792;
    # 0.7.3 vllm/v1/engine/processor.py:251; vllm-ascend 0.23.0.post1 vllm_ascend/worker/model_runner_v1.py:2749
    [("VLLMValidationError: The decoder prompt (length 40123) is longer than the maximum model length of 32768. Make sure that `max_model_len` is no smaller than the number of text tokens.",
      {"ptype": "decoder", "length": "40123", "mml": "32768"}),
     ("ValueError: The decoder prompt (length 8192) plus the number of requested output tokens (at least 1) is longer than the maximum model length of 8192. Make sure that `max_model_len` is no smaller than the number of text tokens (prompt + requested output tokens).",
      {"ptype": "decoder", "length": "8192", "mml": "8192"}),
     ("ValueError: The encoder prompt (length 9000) is longer than the maximum model length of 8192. Make sure that `max_model_len` is no smaller than the number of text tokens plus multimodal tokens.",
      {"ptype": "encoder", "mml": "8192"}),
     ("ValueError: Prompt length of 5000 is longer than the maximum model length of 4096.", {"length0": "5000", "mml0": "4096"}),
     ("AssertionError: Sampled token IDs exceed the max model length. Total number of tokens: 32769 > max_model_len: 32768",
      {"tokens": "32769", "mml1": "32768"})],
    doc="A request longer than the server's max_model_len (decoder prompts; an encoder prompt's limit is another figure).")

# sub-fields of the stats line tail, parsed only when a stats line matched
STATS_TAIL = recache.compile(
    r"(?:Preemptions: (?P<preemptions>\d+)|(?P<device>GPU|NPU|CPU|XPU|TPU|HPU) KV cache usage: (?P<kv_usage>[\d.]+)%"
    r"|Prefix cache hit rate: (?:GPU: )?(?P<hit>[\d.]+)%|Deferred: (?P<deferred>\d+) reqs)"
)


def catalogue() -> list[Pattern]:
    """All patterns, in a stable order."""
    return list(_CATALOGUE)


def by_name() -> dict[str, Pattern]:
    return {p.name: p for p in _CATALOGUE}


def keyword_index() -> dict[str, list[Pattern]]:
    """keyword → patterns that need it."""
    out: dict[str, list[Pattern]] = {}
    for p in _CATALOGUE:
        for kw in p.keywords:
            out.setdefault(kw, []).append(p)
    return out


def prefilter_regex(extra: tuple[str, ...] = ()) -> re.Pattern[bytes]:
    """One bytes regex matching any keyword (with the start-up root-cause tracker's): the reader's line prefilter."""
    kws = sorted({kw for p in _CATALOGUE for kw in p.keywords} | set(extra) | set(prefilter_keywords()),
                 key=lambda k: (-len(k), k))  # ties by text: the same pattern in every process (kvlogdiag.recache)
    return recache.compile(b"|".join(re.escape(k.encode()) for k in kws))


def catalogue_markdown() -> str:
    """docs/patterns.md, generated from the catalogue (a test fails when the file is stale)."""
    out = ["# Log line catalogue", "",
           "Generated by `kvlogdiag patterns --format markdown` from `kvlogdiag/catalogue/patterns.py`; do not edit by hand.",
           "Every sample line below is checked by `tests/test_patterns.py`.", "",
           "| pattern | vLLM versions | keywords |", "|---|---|---|"]
    for p in _CATALOGUE:
        kws = ", ".join(f"`{k.strip()}`" for k in p.keywords)
        out.append(f"| [{p.name}](#{p.name.replace('_', '-')}) | {p.versions.replace('|', '/')} | {kws} |")
    for p in _CATALOGUE:
        out += ["", f"## {p.name}", "", f"vLLM: {p.versions}", "", "```text", *(s for s, _ in p.samples), "```"]
    return "\n".join(out) + "\n"
