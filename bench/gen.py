"""Deterministic generators for the benchmark inputs (stdlib only).

* `write_long_log` — a vLLM V1 0.13-style server log: a realistic start-up, then request lines,
  uvicorn access lines and periodic ``Engine 000: Avg prompt throughput ...`` stats lines, with a
  few preemptions. It returns the figures the analysis must report (``expected``), so the
  benchmark can check that speed never comes from skipping work.
* `write_archive` — many small start-up logs of mixed vLLM versions, about 20 % gzip-compressed.

Everything derives from a fixed seed: the same call writes the same bytes.
"""

from __future__ import annotations

import gzip
import os
import random
import time

GEN_VERSION = 4  # bump when the output changes, so cached inputs are rebuilt

_T0 = 1764405601  # 2025-11-29 08:40:01 UTC

MODEL = "Qwen/Qwen3-32B"
TP = 2
MAX_LEN = 32768
AVAIL_GIB = 37.01
KV_TOKENS = 303_184
CONCURRENCY = 9.25
GMU = 0.92
MAX_NUM_SEQS = 256

_WORDS = (
    "the of and to in is that for it as with was on be by this are or at from an which have not but "
    "they all one were we there can more if so what about when will up out would their into has time "
    "only other then these two may first any like now my such make over our even most after also did "
    "many before must through back years where much your way well down should because each just those "
    "people how too little state good very world still own see men work long get here between both life "
    "being under never day same another know while last might us great old year off come since against "
    "go came right used take three system answer question explain function value matrix vector prime "
    "integer triangle convex polygon array compute prove constant sequence graph cache memory token "
    "request server model batch latency throughput summary translate python code error list table"
).split()



def _truth(stats: int, kv_max, high: int, busy: int, single_q: int, preempt_total: int, preempt_lines: int) -> dict:
    """The figures every generated long log must read back as (its stats counts plus the fixed start-up)."""
    return {
        "stats_lines": stats,
        "kv_usage_max_pct": kv_max,
        "kv_usage_high_lines": high,
        "busy_stats_lines": busy,
        "single_running_with_queue_lines": single_q,
        "stats_preemptions_total": preempt_total,
        "stats_preemption_lines": preempt_lines,
        "available_gib": [AVAIL_GIB],
        "tokens": [KV_TOKENS],
        "max_concurrency": [{"tokens_per_request": MAX_LEN, "concurrency": CONCURRENCY}],
        "version": "0.13.0",
        "engine": "v1",
        "model": MODEL,
        "tensor_parallel_size": TP,
        "max_model_len": MAX_LEN,
        "gpu_memory_utilization": GMU,
    }

def _stamp(t: int, cache: dict) -> str:
    s = cache.get(t)
    if s is None:
        tm = time.gmtime(t)
        s = f"{tm.tm_mon:02d}-{tm.tm_mday:02d} {tm.tm_hour:02d}:{tm.tm_min:02d}:{tm.tm_sec:02d}"
        if len(cache) > 4096:
            cache.clear()
        cache[t] = s
    return s


def startup_v013(api: int, core: int, workers: tuple[int, ...], t: int, cache: dict) -> list[str]:
    """The start-up block of a vLLM 0.13 V1 server (TP=2, one local rank 0)."""
    A = f"(APIServer pid={api}) INFO "
    C = f"(EngineCore_DP0 pid={core}) INFO "
    W0 = f"(Worker_TP0 pid={workers[0]}) INFO "
    W1 = f"(Worker_TP1 pid={workers[1]}) INFO "

    def s(k: int) -> str:
        return _stamp(t + k, cache)

    return [
        f"{A}{s(0)} [api_server.py:1351] vLLM API server version 0.13.0",
        f"{A}{s(0)} [utils.py:253] non-default args: {{'model_tag': '{MODEL}', 'enable_log_requests': True, "
        f"'model': '{MODEL}', 'max_model_len': {MAX_LEN}, 'tensor_parallel_size': {TP}, "
        f"'gpu_memory_utilization': {GMU}, 'max_num_seqs': {MAX_NUM_SEQS}, 'enable_prefix_caching': True}}",
        f"{A}{s(9)} [model.py:631] Resolved architecture: Qwen3ForCausalLM",
        f"{A}{s(9)} [model.py:1745] Using max model len {MAX_LEN}",
        f"{A}{s(10)} [scheduler.py:216] Chunked prefill is enabled with max_num_batched_tokens=8192.",
        f"{C}{s(18)} [core.py:93] Initializing a V1 LLM engine (v0.13.0) with config: model='{MODEL}', "
        f"speculative_config=None, tokenizer='{MODEL}', skip_tokenizer_init=False, tokenizer_mode=auto, "
        f"revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
        f"max_seq_len={MAX_LEN}, download_dir=None, load_format=auto, tensor_parallel_size={TP}, "
        f"pipeline_parallel_size=1, data_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
        f"enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, structured_outputs_config="
        f"StructuredOutputsConfig(backend='auto', disable_fallback=False, disable_any_whitespace=False, "
        f"disable_additional_properties=False, reasoning_parser='', reasoning_parser_plugin='', "
        f"enable_in_reasoning=False), observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, "
        f"otlp_traces_endpoint=None, collect_detailed_traces=None), seed=0, served_model_name={MODEL}, "
        f"enable_prefix_caching=True, enable_chunked_prefill=True, pooler_config=None, "
        f"compilation_config={{'level': None, 'mode': 3, 'debug_dump_path': None, 'cache_dir': '', "
        f"'backend': 'inductor', 'custom_ops': ['none'], 'splitting_ops': ['vllm::unified_attention', "
        f"'vllm::unified_attention_with_output'], 'use_inductor_graph_partition': False, "
        f"'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'max_cudagraph_capture_size': 512}}",
        f"{C}{s(18)} [multiproc_executor.py:720] Creating {TP} workers with distributed_init_method tcp://127.0.0.1:41227",
        f"{W0}{s(26)} [parallel_state.py:1208] rank 0 in world size 2 is assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0",
        f"{W1}{s(26)} [parallel_state.py:1208] rank 1 in world size 2 is assigned as DP rank 0, PP rank 0, TP rank 1, EP rank 0",
        f"{W0}{s(27)} [gpu_model_runner.py:3559] Starting to load model {MODEL}...",
        f"{W0}{s(28)} [cuda.py:351] Using FLASH_ATTN attention backend out of potential backends: ('FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN')",
        f"{W0}{s(41)} [default_loader.py:308] Loading weights took 12.74 seconds",
        f"{W0}{s(42)} [gpu_model_runner.py:3658] Model loading took 30.5891 GiB memory and 14.210711 seconds",
        f"{W0}{s(58)} [backends.py:643] Using cache directory: /root/.cache/vllm/torch_compile_cache/7f3c2a91d4/rank_0_0/backbone for vLLM's torch.compile",
        f"{W0}{s(58)} [backends.py:703] Dynamo bytecode transform time: 15.62 s",
        f"{W0}{s(70)} [monitor.py:34] torch.compile takes 27.41 s in total",
        f"{W0}{s(72)} [gpu_worker.py:375] Available KV cache memory: {AVAIL_GIB} GiB",
        f"{C}{s(72)} [kv_cache_utils.py:1087] GPU KV cache size: {KV_TOKENS:,} tokens",
        f"{C}{s(72)} [kv_cache_utils.py:1091] Maximum concurrency for {MAX_LEN:,} tokens per request: {CONCURRENCY:.2f}x",
        f"{W0}{s(91)} [gpu_model_runner.py:4587] Graph capturing finished in 18 secs, took 0.88 GiB",
        f"{C}{s(92)} [core.py:259] init engine (profile, create kv cache, warmup model) took 95.31 seconds",
        f"{A}{s(94)} [api_server.py:1889] Starting vLLM API server 0 on http://0.0.0.0:8000",
        f"{A}{s(94)} [launcher.py:46] Available routes are:",
        f"{A}{s(94)} [launcher.py:54] Route: /v1/chat/completions, Methods: POST",
        f"(APIServer pid={api}) INFO:     Started server process [{api}]",
        f"(APIServer pid={api}) INFO:     Waiting for application startup.",
        f"(APIServer pid={api}) INFO:     Application startup complete.",
    ]


def _prompts(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        words = rng.choices(_WORDS, k=rng.randint(8, 220))
        body = " ".join(words)
        out.append(
            "<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n<|im_start|>user\\n"
            + body[:1].upper() + body[1:] + "?<|im_end|>\\n<|im_start|>assistant\\n"
        )
    return out


_PARAMS = (
    "SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
    "temperature={t}, top_p=0.95, top_k=20, min_p=0.0, seed=None, stop=[], stop_token_ids=[], "
    "bad_words=[], include_stop_str_in_output=False, ignore_eos=False, max_tokens={m}, min_tokens=0, "
    "logprobs=None, prompt_logprobs=None, skip_special_tokens=True, spaces_between_special_tokens=True, "
    "truncate_prompt_tokens=None, structured_outputs=None, extra_args=None)"
)


def write_long_log(path: str, target_bytes: int, seed: int = 20251129) -> dict:
    """Write a ~target_bytes vLLM 0.13 log to ``path``; return the figures the analysis must show."""
    rng = random.Random(seed)
    cache: dict = {}
    api, core = 2231, 2519
    workers = (2522, 2523)
    t = _T0
    lines = startup_v013(api, core, workers, t, cache)
    t += 100
    prompts = _prompts(rng, 4000)
    params = [_PARAMS.format(t=tt, m=mm) for tt in ("0.0", "0.6", "0.7", "1.0") for mm in (256, 1024, 4096, 32768)]
    A = f"(APIServer pid={api}) INFO "
    n_lines = len(lines)
    stats = 0
    busy = 0
    single_q = 0
    high = 0
    preempt_total = 0
    preempt_lines = 0
    kv_max = None
    usage = 0.0
    hit = 0.0
    running = 0
    waiting = 0
    buf: list[str] = []
    pending = 0  # bytes in buf

    def add(line: str) -> None:
        nonlocal pending
        buf.append(line)
        pending += len(line) + 1  # ASCII only

    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write("\n".join(lines) + "\n")
        written = sum(len(x) + 1 for x in lines)
        while written + pending < target_bytes:
            # a few requests arrive ...
            for _ in range(rng.randint(0, 4)):
                rid = f"chatcmpl-{rng.getrandbits(128):032x}"
                st = _stamp(t, cache)
                p = prompts[rng.randrange(len(prompts))]
                add(f"{A}{st} [logger.py:43] Received request {rid}: prompt: '{p}', "
                    f"params: {params[rng.randrange(len(params))]}, prompt_token_ids: None, "
                    f"prompt_embeds shape: None, lora_request: None.")
                add(f"{A}{st} [async_llm.py:325] Added request {rid}.")
                add(f"(APIServer pid={api}) INFO:     127.0.0.1:{rng.randint(50000, 59999)} - "
                    f"\"POST /v1/chat/completions HTTP/1.1\" 200 OK")
            # ... then the periodic stats line
            t += 10
            running = max(0, min(MAX_NUM_SEQS, running + rng.randint(-12, 14)))
            if running >= 200:
                waiting = max(0, waiting + rng.randint(-3, 6))
            else:
                waiting = max(0, waiting - rng.randint(0, 5))
            if rng.random() < 0.002:
                running, waiting = 1, rng.randint(1, 9)  # one request running with a queue behind it
            usage = min(100.0, max(0.0, usage + rng.uniform(-6.0, 6.5)))
            hit = min(95.0, max(0.0, hit + rng.uniform(-0.5, 0.6)))
            pre = rng.randint(1, 40) if (usage > 96.0 and rng.random() < 0.01) else 0
            u = f"{usage:.1f}"
            mid = f", Preemptions: {pre}" if pre else ""
            add(f"{A}{_stamp(t, cache)} [loggers.py:123] Engine 000: Avg prompt throughput: "
                f"{rng.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: {rng.uniform(0, 3000):.1f} tokens/s, "
                f"Running: {running} reqs, Waiting: {waiting} reqs{mid}, GPU KV cache usage: {u}%, "
                f"Prefix cache hit rate: {hit:.1f}%")
            stats += 1
            uf = float(u)
            kv_max = uf if kv_max is None or uf > kv_max else kv_max
            if uf >= 90.0:
                high += 1
            if running or waiting:
                busy += 1
            if running == 1 and waiting > 0:
                single_q += 1
            if pre:
                preempt_total += pre
                preempt_lines += 1
            if pending >= 8 << 20:
                fh.write("\n".join(buf) + "\n")
                written += pending
                n_lines += len(buf)
                buf.clear()
                pending = 0
        if buf:
            fh.write("\n".join(buf) + "\n")
            n_lines += len(buf)
    return {
        "bytes": os.path.getsize(path),
        "lines_read": n_lines,
        **_truth(stats, kv_max, high, busy, single_q, preempt_total, preempt_lines),
    }


# --- archive of small start-up logs ---------------------------------------------------------------


def _small_v06(rng: random.Random, t: int, cache: dict) -> list[str]:
    blocks = rng.choice((1011, 4096, 28047, 31284))
    gmu = rng.choice((0.9, 0.85, 0.95))
    mlen = rng.choice((4096, 8192, 32768))
    s = lambda k: _stamp(t + k, cache)  # noqa: E731
    lines = [
        f"INFO {s(0)} api_server.py:585] vLLM API server version 0.6.3.post1",
        f"INFO {s(0)} api_server.py:586] args: Namespace(subparser='serve', model_tag='meta-llama/Llama-3.1-8B-Instruct', "
        f"host=None, port=8000, model='meta-llama/Llama-3.1-8B-Instruct', max_model_len={mlen}, block_size=16, "
        f"gpu_memory_utilization={gmu}, tensor_parallel_size=1, max_num_seqs=256)",
        f"INFO {s(2)} llm_engine.py:237] Initializing an LLM engine (v0.6.3.post1) with config: "
        f"model='meta-llama/Llama-3.1-8B-Instruct', tokenizer='meta-llama/Llama-3.1-8B-Instruct', dtype=torch.bfloat16, "
        f"max_seq_len={mlen}, tensor_parallel_size=1, pipeline_parallel_size=1, device_config=cuda, seed=0",
        f"INFO {s(5)} model_runner.py:1056] Starting to load model meta-llama/Llama-3.1-8B-Instruct...",
        f"INFO {s(9)} model_runner.py:1067] Loading model weights took 14.9888 GB",
        f"INFO {s(11)} gpu_executor.py:122] # GPU blocks: {blocks}, # CPU blocks: 2048",
        f"INFO {s(11)} gpu_executor.py:126] Maximum concurrency for {mlen} tokens per request: {blocks * 16 / mlen:.2f}x",
        f"INFO {s(30)} model_runner.py:1523] Graph capturing finished in 19 secs.",
    ]
    return lines


def _small_v011(rng: random.Random, t: int, cache: dict) -> list[str]:
    avail = round(rng.uniform(2.0, 60.0), 2)
    tokens = int(avail * 2**30 / 131072) // 16 * 16
    mlen = rng.choice((8192, 32000, 65536))
    api, core = rng.randint(1000, 9999), rng.randint(1000, 9999)
    ansi = rng.random() < 0.5
    pre = (lambda x: f"\x1b[1;36m{x}\x1b[0;0m ") if ansi else (lambda x: f"{x} ")
    A, C, W = pre(f"(APIServer pid={api})"), pre(f"(EngineCore_DP0 pid={core})"), pre(f"(Worker pid={core + 40})")
    s = lambda k: _stamp(t + k, cache)  # noqa: E731
    lines = [
        f"INFO {s(0)} [__init__.py:216] Automatically detected platform cuda.",
        f"{A}INFO {s(1)} [api_server.py:1839] vLLM API server version 0.11.0",
        f"{A}INFO {s(1)} [utils.py:233] non-default args: {{'model': 'meta-llama/Meta-Llama-3.1-8B-Instruct', "
        f"'max_model_len': {mlen}, 'gpu_memory_utilization': 0.92, 'max_num_seqs': 128}}",
        f"{A}INFO {s(9)} [model.py:1510] Using max model len {mlen}",
        f"{C}INFO {s(15)} [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: "
        f"model='meta-llama/Meta-Llama-3.1-8B-Instruct', dtype=torch.bfloat16, max_seq_len={mlen}, "
        f"tensor_parallel_size=1, pipeline_parallel_size=1, kv_cache_dtype=auto, device_config=cuda, "
        f"enable_prefix_caching=True",
        f"{W}INFO {s(30)} [gpu_model_runner.py:2653] Model loading took 14.9889 GiB and 4.31 seconds",
        f"{W}INFO {s(52)} [gpu_worker.py:298] Available KV cache memory: {avail} GiB",
        f"{C}INFO {s(53)} [kv_cache_utils.py:1087] GPU KV cache size: {tokens:,} tokens",
        f"{C}INFO {s(53)} [kv_cache_utils.py:1091] Maximum concurrency for {mlen:,} tokens per request: {tokens / mlen:.2f}x",
        f"{C}INFO {s(70)} [core.py:210] init engine (profile, create kv cache, warmup model) took 40.12 seconds",
        f"{A}INFO:     Application startup complete.",
    ]
    return lines


def _small_v013(rng: random.Random, t: int, cache: dict) -> list[str]:
    lines = startup_v013(rng.randint(1000, 9999), rng.randint(1000, 9999), (rng.randint(1000, 9999), rng.randint(1000, 9999)), t, cache)
    return lines


def _small_ascend(rng: random.Random, t: int, cache: dict) -> list[str]:
    avail = rng.randint(10_000_000_000, 40_000_000_000)
    tokens = avail // 65536 // 128 * 128
    s = lambda k: _stamp(t + k, cache)  # noqa: E731
    lines = [
        f"INFO {s(0)} [__init__.py:220] Platform plugin ascend is activated",
        f"(APIServer pid=3300) INFO {s(1)} [api_server.py:1839] vLLM API server version 0.11.0rc0",
        f"(EngineCore_DP0 pid=3301) INFO {s(5)} [core.py:77] Initializing a V1 LLM engine (v0.11.0rc0) with config: "
        f"model='Qwen/Qwen2.5-7B-Instruct', max_seq_len=32768, tensor_parallel_size=1, device_config=npu",
        f"(Worker_TP0 pid=3302) INFO {s(40)} [worker_v1.py:256] Available memory: {avail}, total memory: 65452113920",
        f"(EngineCore_DP0 pid=3301) INFO {s(41)} [kv_cache_utils.py:1087] NPU KV cache size: {tokens:,} tokens",
    ]
    return lines


_KINDS = (_small_v06, _small_v011, _small_v013, _small_ascend)


def write_archive(folder: str, count: int, seed: int = 77) -> dict:
    """Write ``count`` small logs (~20 % gzip) into ``folder``; return a summary."""
    rng = random.Random(seed)
    cache: dict = {}
    os.makedirs(folder, exist_ok=True)
    gz = 0
    total = 0
    for i in range(count):
        kind = _KINDS[i % len(_KINDS)]
        lines = kind(rng, _T0 + i * 600, cache)
        # some noise lines between the interesting ones, as in real logs
        noise = [f"INFO {_stamp(_T0 + i * 600 + 5, cache)} [weight_utils.py:{rng.randint(100, 900)}] "
                 f"Loading safetensors checkpoint shards: {k}% Completed | {k // 25}/4" for k in range(0, 101, 25)]
        data = ("\n".join(lines[:4] + noise + lines[4:]) + "\n").encode()
        if rng.random() < 0.2:
            name = os.path.join(folder, f"run{i:05d}.log.gz")
            with open(name, "wb") as fh:
                fh.write(gzip.compress(data, compresslevel=6, mtime=0))
            gz += 1
        else:
            name = os.path.join(folder, f"run{i:05d}.log")
            with open(name, "wb") as fh:
                fh.write(data)
        total += len(data)
    return {"files": count, "gzip": gz, "bytes": total}


# --- long-log shapes (issue 17): where the per-line cost differs ---------------------------------

SHAPES = {
    # a server with request logging mostly off (a prompt logged for ~6 % of requests): ~170-byte lines, ~30 % stats
    "stats-dense": {"reqs": (0, 2), "received": 0.06, "engines": 1, "crlf": False, "ansi": False},
    # request logging on and a busy server: ~30 requests per stats line, long 'Received request' lines
    "request-heavy": {"reqs": (20, 40), "received": 1.0, "engines": 1, "crlf": False, "ansi": False},
    # a DP=8 deployment's API server: one stats line per engine every 10 s
    "dp8": {"reqs": (0, 4), "received": 1.0, "engines": 8, "crlf": False, "ansi": False},
    # the default shape as captured from a Windows/Docker terminal: CRLF line ends, ANSI-coloured prefixes
    "crlf-ansi": {"reqs": (0, 4), "received": 1.0, "engines": 1, "crlf": True, "ansi": True},
}


def write_shape_log(path: str, target_bytes: int, shape: str, seed: int = 20251201) -> dict:
    """Write a ~target_bytes log of one of `SHAPES` to ``path``; return the figures the analysis must show
    (the same keys as `write_long_log`, plus ``mean_line_bytes`` and ``stats_fraction``)."""
    opt = SHAPES[shape]
    rng = random.Random(seed)
    cache: dict = {}
    api, core = 2231, 2519
    t = _T0
    head = startup_v013(api, core, (2522, 2523), t, cache)
    t += 100
    prompts = _prompts(rng, 2000)
    params = [_PARAMS.format(t=tt, m=mm) for tt in ("0.0", "0.7") for mm in (256, 4096)]
    pid = f"(APIServer pid={api})"
    if opt["ansi"]:
        A = f"\x1b[1;36m{pid}\x1b[0;0m \x1b[32mINFO\x1b[0m "
        ACC = f"\x1b[1;36m{pid}\x1b[0;0m \x1b[32mINFO\x1b[0m:     "
        head = [f"\x1b[1;36m{ln[:ln.index(')') + 1]}\x1b[0;0m{ln[ln.index(')') + 1:]}" if ln.startswith("(") else ln for ln in head]
    else:
        A, ACC = f"{pid} INFO ", f"{pid} INFO:     "
    eol = "\r\n" if opt["crlf"] else "\n"
    lo, hi = opt["reqs"]
    engines = opt["engines"]
    n_lines = len(head)
    stats = busy = single_q = high = preempt_total = preempt_lines = 0
    kv_max = None
    state = [{"usage": 0.0, "hit": 0.0, "running": 0, "waiting": 0} for _ in range(engines)]
    buf: list[str] = []
    pending = 0
    total_bytes = 0

    def add(line: str) -> None:
        nonlocal pending
        buf.append(line)
        pending += len(line) + len(eol)

    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(eol.join(head) + eol)
        written = sum(len(x) + len(eol) for x in head)
        while written + pending < target_bytes:
            for _ in range(rng.randint(lo, hi)):
                rid = f"chatcmpl-{rng.getrandbits(128):032x}"
                st = _stamp(t, cache)
                if rng.random() < opt["received"]:
                    add(f"{A}{st} [logger.py:43] Received request {rid}: prompt: '{prompts[rng.randrange(len(prompts))]}', "
                        f"params: {params[rng.randrange(len(params))]}, prompt_token_ids: None, "
                        f"prompt_embeds shape: None, lora_request: None.")
                add(f"{A}{st} [async_llm.py:325] Added request {rid}.")
                add(f"{ACC}127.0.0.1:{rng.randint(50000, 59999)} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK")
            t += 10
            for e, s in enumerate(state):
                s["running"] = max(0, min(MAX_NUM_SEQS, s["running"] + rng.randint(-12, 14)))
                if s["running"] >= 200:
                    s["waiting"] = max(0, s["waiting"] + rng.randint(-3, 6))
                else:
                    s["waiting"] = max(0, s["waiting"] - rng.randint(0, 5))
                if rng.random() < 0.002:
                    s["running"], s["waiting"] = 1, rng.randint(1, 9)
                s["usage"] = min(100.0, max(0.0, s["usage"] + rng.uniform(-6.0, 6.5)))
                s["hit"] = min(95.0, max(0.0, s["hit"] + rng.uniform(-0.5, 0.6)))
                pre = rng.randint(1, 40) if (s["usage"] > 96.0 and rng.random() < 0.01) else 0
                u = f"{s['usage']:.1f}"
                mid = f", Preemptions: {pre}" if pre else ""
                add(f"{A}{_stamp(t, cache)} [loggers.py:123] Engine {e:03d}: Avg prompt throughput: "
                    f"{rng.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: {rng.uniform(0, 3000):.1f} tokens/s, "
                    f"Running: {s['running']} reqs, Waiting: {s['waiting']} reqs{mid}, GPU KV cache usage: {u}%, "
                    f"Prefix cache hit rate: {s['hit']:.1f}%")
                stats += 1
                uf = float(u)
                kv_max = uf if kv_max is None or uf > kv_max else kv_max
                high += uf >= 90.0
                busy += bool(s["running"] or s["waiting"])
                single_q += s["running"] == 1 and s["waiting"] > 0
                if pre:
                    preempt_total += pre
                    preempt_lines += 1
            if pending >= 8 << 20:
                fh.write(eol.join(buf) + eol)
                written += pending
                n_lines += len(buf)
                buf.clear()
                pending = 0
        if buf:
            fh.write(eol.join(buf) + eol)
            n_lines += len(buf)
    total_bytes = os.path.getsize(path)
    return {
        "shape": shape,
        "bytes": total_bytes,
        "lines_read": n_lines,
        "mean_line_bytes": round(total_bytes / n_lines, 1),
        "stats_fraction": round(stats / n_lines, 3),
        **_truth(stats, kv_max, high, busy, single_q, preempt_total, preempt_lines),
    }
