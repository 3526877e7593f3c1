"""derive.py through the whole pipeline: synthetic but realistic logs → analysis dict.

Expected figures are typed from hand calculations (exact rational arithmetic, GiB = 2**30),
never taken from the code's output.
"""

from __future__ import annotations

import pytest

from kvlogdiag.derive.figures import parse_version

REL = 1e-9

ENGINE_V1_0102 = (
    "(EngineCore_DP0 pid=2410) INFO 07-03 14:17:21 [core.py:76] Initializing a V1 LLM engine (v0.10.2) with config: "
    "model='meta-llama/Llama-3.1-70B-Instruct', speculative_config=None, tokenizer='meta-llama/Llama-3.1-70B-Instruct', "
    "dtype=torch.bfloat16, max_seq_len={max_seq_len}, download_dir=None, load_format=auto, tensor_parallel_size=4, "
    "pipeline_parallel_size=1, data_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
    "enforce_eager=False, kv_cache_dtype=auto, device_config={device}, seed=0, "
    "served_model_name=meta-llama/Llama-3.1-70B-Instruct, enable_prefix_caching=True, chunked_prefill_enabled=True, "
    "pooler_config=None, compilation_config={{\"level\":3,\"cudagraph_capture_sizes\":[8,4,2,1]}}"
)


def engine_line(max_seq_len=65536, device="cuda", version="0.10.2", extra=""):
    line = ENGINE_V1_0102.format(max_seq_len=max_seq_len, device=device)
    if version != "0.10.2":
        line = line.replace("(v0.10.2)", f"(v{version})")
    return line + extra


def approx(x):
    return pytest.approx(x, rel=REL)


def pairs(a):
    return [(p["available_gib"], p["tokens"]) for p in a["kv_cache"]["bytes_per_token_by_rank"]]


# --- bytes per token: arithmetic -----------------------------------------------------------------


def test_single_pair_37_01_gib_485088_tokens(analyze_text):
    a = analyze_text("\n".join([
        engine_line(),
        "(Worker_TP2 pid=2522) INFO 07-03 14:19:40 [gpu_worker.py:298] Available KV cache memory: 37.01 GiB",
        "(EngineCore_DP0 pid=2410) INFO 07-03 14:19:41 [kv_cache_utils.py:864] GPU KV cache size: 485,088 tokens",
        "(EngineCore_DP0 pid=2410) INFO 07-03 14:19:41 [kv_cache_utils.py:868] Maximum concurrency for 65,536 tokens per request: 7.40x",
    ]) + "\n")
    kv = a["kv_cache"]
    # 37.01 * 1073741824 / 485088 = 39739184906.24 / 485088
    assert kv["bytes_per_token"] == approx(81921.5995989181344)
    assert kv["available_gib"] == [37.01]
    assert kv["tokens"] == [485088]
    assert kv["max_concurrency"] == [{"tokens_per_request": 65536, "concurrency": 7.40}]
    assert kv["ranks_disagree"] is False
    assert kv["bytes_per_token_note"] is None
    assert kv["bytes_per_token_kind"] == "pool"  # 0.10.2 < 0.21: N is the pool size
    (r,) = kv["bytes_per_token_by_rank"]
    assert (r["rank"], r["available_gib"], r["tokens"]) == ("Worker_TP2", 37.01, 485088)
    assert r["bytes_per_token"] == approx(81921.5995989181344)
    assert (r["memory_source"], r["memory_line"], r["tokens_line"], r["dp_group"], r["run"]) == ("available", 2, 3, 0, 0)
    assert a["lines_read"] == 4


V02_KV_LINES = """
\x1b[1;36m(VllmWorker rank=0 pid=4148421)\x1b[0;0m INFO 08-07 11:12:30 [gpu_worker.py:255] Available KV cache memory: 52.21 GiB
\x1b[1;36m(VllmWorker rank=3 pid=4148424)\x1b[0;0m INFO 08-07 11:12:30 [gpu_worker.py:255] Available KV cache memory: 52.58 GiB
\x1b[1;36m(VllmWorker rank=2 pid=4148423)\x1b[0;0m INFO 08-07 11:12:30 [gpu_worker.py:255] Available KV cache memory: 52.11 GiB
\x1b[1;36m(VllmWorker rank=1 pid=4148422)\x1b[0;0m INFO 08-07 11:12:30 [gpu_worker.py:255] Available KV cache memory: 52.11 GiB
INFO 08-07 11:12:30 [kv_cache_utils.py:833] GPU KV cache size: 855,344 tokens
INFO 08-07 11:12:30 [kv_cache_utils.py:837] Maximum concurrency for 131,072 tokens per request: 6.53x
INFO 08-07 11:12:30 [kv_cache_utils.py:833] GPU KV cache size: 853,808 tokens
INFO 08-07 11:12:30 [kv_cache_utils.py:837] Maximum concurrency for 131,072 tokens per request: 6.51x
INFO 08-07 11:12:30 [kv_cache_utils.py:833] GPU KV cache size: 853,808 tokens
INFO 08-07 11:12:30 [kv_cache_utils.py:837] Maximum concurrency for 131,072 tokens per request: 6.51x
INFO 08-07 11:12:31 [kv_cache_utils.py:833] GPU KV cache size: 861,488 tokens
INFO 08-07 11:12:31 [kv_cache_utils.py:837] Maximum concurrency for 131,072 tokens per request: 6.57x
"""


def test_four_workers_pair_smallest_with_smallest(analyze_text):
    """Shape of real_logs/v02.log (0.10.0, TP=4): four Available lines, four token lines.

    Smallest memory with smallest count gives (52.11, 853808) twice, (52.21, 855344),
    (52.58, 861488); here that is also the worker-rank order (rank 0 = 52.21 ↔ first line 855,344).
    """
    a = analyze_text(V02_KV_LINES)
    kv = a["kv_cache"]
    assert kv["available_gib"] == [52.21, 52.58, 52.11, 52.11]
    assert kv["tokens"] == [855344, 853808, 853808, 861488]
    assert sorted(pairs(a)) == [(52.11, 853808), (52.11, 853808), (52.21, 855344), (52.58, 861488)]
    by_rank = {r["rank"]: r for r in kv["bytes_per_token_by_rank"]}
    assert set(by_rank) == {"VllmWorker rank=0", "VllmWorker rank=1", "VllmWorker rank=2", "VllmWorker rank=3"}
    expected = {  # rank: (GiB, tokens, GiB * 2**30 / tokens)
        "VllmWorker rank=0": (52.21, 855344, 65540.9526822424662),
        "VllmWorker rank=1": (52.11, 853808, 65533.1016442104080),
        "VllmWorker rank=2": (52.11, 853808, 65533.1016442104080),
        "VllmWorker rank=3": (52.58, 861488, 65534.6854580911168),
    }
    for rank, (gib, tokens, bpt) in expected.items():
        r = by_rank[rank]
        assert (r["available_gib"], r["tokens"]) == (gib, tokens), rank
        assert r["bytes_per_token"] == approx(bpt), rank
    assert sorted(r["tokens_line"] for r in by_rank.values()) == [5, 7, 9, 11]
    assert by_rank["VllmWorker rank=0"]["tokens_line"] == 5 and by_rank["VllmWorker rank=3"]["tokens_line"] == 11
    # all four agree within 1 %: the figure is their median
    assert kv["ranks_disagree"] is False
    assert kv["bytes_per_token"] == approx(65533.8935511507624)


def test_dp_groups_pair_within_their_group(analyze_text):
    a = analyze_text("""
        (Worker_DP0_TP0 pid=11) INFO 09-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 30.0 GiB
        (Worker_DP0_TP1 pid=12) INFO 09-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 31.0 GiB
        (Worker_DP1_TP0 pid=21) INFO 09-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 20.0 GiB
        (Worker_DP1_TP1 pid=22) INFO 09-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 21.0 GiB
        (EngineCore_DP0 pid=10) INFO 09-01 10:00:01 [kv_cache_utils.py:864] GPU KV cache size: 100,000 tokens
        (EngineCore_DP1 pid=20) INFO 09-01 10:00:01 [kv_cache_utils.py:864] GPU KV cache size: 70,000 tokens
        """)
    by_rank = a["kv_cache"]["bytes_per_token_by_rank"]
    got = sorted((r["dp_group"], r["rank"], r["available_gib"], r["tokens"]) for r in by_rank)
    assert got == [(0, "Worker_DP0_TP0", 30.0, 100000), (1, "Worker_DP1_TP0", 20.0, 70000)]
    bpt = {r["dp_group"]: r["bytes_per_token"] for r in by_rank}
    assert bpt[0] == approx(322122.5472)  # 30 * 2**30 / 100000
    assert bpt[1] == approx(306783.378285714286)  # 20 * 2**30 / 70000


def test_runs_pair_within_their_run(analyze_text):
    a = analyze_text(f"""
        {engine_line(max_seq_len=4096)}
        (EngineCore_DP0 pid=1) INFO 09-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 10.0 GiB
        (EngineCore_DP0 pid=1) INFO 09-01 10:00:01 [kv_cache_utils.py:864] GPU KV cache size: 100,000 tokens
        {engine_line(max_seq_len=4096)}
        (EngineCore_DP0 pid=2) INFO 09-01 11:00:00 [gpu_worker.py:298] Available KV cache memory: 20.0 GiB
        (EngineCore_DP0 pid=2) INFO 09-01 11:00:01 [kv_cache_utils.py:864] GPU KV cache size: 200,000 tokens
        """)
    assert a["runs"] == 2
    # each run pairs its own lines; the top level is the current (last) run, every run is in all_runs
    assert [(r["run"], r["available_gib"], r["tokens"]) for r in a["kv_cache"]["bytes_per_token_by_rank"]] == [
        (1, 20.0, 200000)]
    assert [[(r["run"], r["available_gib"], r["tokens"]) for r in x["kv_cache"]["bytes_per_token_by_rank"]]
            for x in a["all_runs"]] == [[(1, 20.0, 200000)], [(0, 10.0, 100000)]]
    assert a["kv_cache"]["bytes_per_token"] == approx(107374.1824)
    assert a["kv_cache"]["ranks_disagree"] is False
    assert a["kv_cache"]["tokens"] == [100000, 200000]  # the input's KV lines, every run, in log order
    assert a["config"]["max_model_len"] == 4096
    assert a["config"]["conflicts"] == {}


V0_LOG = """
INFO 11-18 17:10:46 api_server.py:586] vLLM API server version 0.6.3.post1
INFO 11-18 17:10:46 api_server.py:587] args: Namespace(subparser='serve', model_tag='meta-llama/Llama-3.1-8B-Instruct', host=None, port=8000, model='meta-llama/Llama-3.1-8B-Instruct', max_model_len=32768, {block}gpu_memory_utilization=0.9, tensor_parallel_size=1, enable_prefix_caching=False)
INFO 11-18 17:10:50 llm_engine.py:237] Initializing an LLM engine (v0.6.3.post1) with config: model='meta-llama/Llama-3.1-8B-Instruct', speculative_config=None, tokenizer='meta-llama/Llama-3.1-8B-Instruct', dtype=torch.bfloat16, max_seq_len=32768, download_dir=None, load_format=LoadFormat.AUTO, tensor_parallel_size=1, pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, seed=0, served_model_name=meta-llama/Llama-3.1-8B-Instruct, enable_prefix_caching=False, use_async_output_proc=True
INFO 11-18 17:11:01 worker.py:232] the current vLLM instance can use total_gpu_memory (79.10GiB) x gpu_memory_utilization (0.90) = 71.19GiB
INFO 11-18 17:11:01 worker.py:232] model weights take 14.99GiB; non_torch_memory takes 0.19GiB; PyTorch activation peak memory takes 1.23GiB; the rest of the memory reserved for KV Cache is 54.78GiB.
INFO 11-18 17:11:02 executor_base.py:111] # cuda blocks: 28047, # CPU blocks: 2048
INFO 11-18 17:11:02 executor_base.py:116] Maximum concurrency for 32768 tokens per request: 13.69x
"""


def test_v0_blocks_times_block_size_with_v0_budget(analyze_text):
    a = analyze_text(V0_LOG.replace("{block}", "block_size=16, "))
    kv = a["kv_cache"]
    assert a["vllm"] == {"version": "0.6.3.post1", "engine": "v0", "platform": "cuda"}
    assert a["config"]["block_size"] == 16
    assert kv["gpu_blocks"] == [28047]
    assert kv["tokens"] == []  # V0 prints blocks, not tokens
    assert kv["available_gib"] == []
    assert kv["kv_budget"] == [{"source": "v0_profile", "gib": 54.78, "line": 5}]
    assert pairs(a) == [(54.78, 448752)]  # 28047 * 16
    assert kv["bytes_per_token_by_rank"][0]["memory_source"] == "v0_profile"
    assert kv["bytes_per_token"] == approx(131073.682387421115)  # 54.78 * 2**30 / 448752
    assert kv["bytes_per_token_kind"] == "pool"
    assert a["config"]["gpu_memory_utilization"] == 0.9


def test_v0_blocks_without_block_size_give_no_figure(analyze_text):
    a = analyze_text(V0_LOG.replace("{block}", ""))
    kv = a["kv_cache"]
    assert a["config"]["block_size"] is None
    assert kv["bytes_per_token"] is None
    assert "block size" in kv["bytes_per_token_note"]


def test_ascend_bytes(analyze_text):
    a = analyze_text("""
        INFO 10-21 08:59:00 [__init__.py:220] Platform plugin ascend is activated
        (Worker_TP0 pid=3301) INFO 10-21 09:00:01 [worker_v1.py:256] Available memory: 26954181529, total memory: 65452113920
        (EngineCore_DP0 pid=3200) INFO 10-21 09:00:05 [kv_cache_utils.py:1000] GPU KV cache size: 182,784 tokens
        """)
    kv = a["kv_cache"]
    assert a["vllm"]["platform"] == "npu"
    assert kv["available_gib"] == []  # bytes lines are never mixed into available_gib
    assert kv["kv_budget"] == [{"source": "ascend_bytes", "gib": 25.103038, "line": 2}]
    assert kv["bytes_per_token"] == 26954181529 / 182784  # exact: the GiB detour is by a power of two
    assert kv["bytes_per_token"] == approx(147464.666103160014)
    assert kv["bytes_per_token_by_rank"][0]["memory_source"] == "ascend_bytes"


def test_cpu_auto_set_budget(analyze_text):
    a = analyze_text("""
        (Worker pid=19850) INFO 06-13 20:03:57 [cpu_worker.py:235] Auto set (1.48/18.0) GiB for KV cache on node 0, with 5.4 GiB requested memory for the worker.
        (EngineCore pid=19800) INFO 06-13 20:03:58 [kv_cache_utils.py:1147] CPU KV cache size: 55,424 tokens, Maximum concurrency for 4,096 tokens per request: 13.53x
        """)
    kv = a["kv_cache"]
    assert a["vllm"]["platform"] == "cpu"
    assert kv["kv_budget"] == [{"source": "cpu_auto", "gib": 1.48, "line": 1}]
    assert kv["tokens"] == [55424]
    assert kv["max_concurrency"] == [{"tokens_per_request": 4096, "concurrency": 13.53}]
    assert kv["bytes_per_token"] == approx(28672.3783833718245)  # 1.48 * 2**30 / 55424
    assert kv["bytes_per_token_by_rank"][0]["memory_source"] == "cpu_auto"


def test_disagreement_over_one_percent_gives_median(analyze_text):
    a = analyze_text("""
        (VllmWorker rank=0 pid=1) INFO 08-07 11:12:30 [gpu_worker.py:255] Available KV cache memory: 10.00 GiB
        (VllmWorker rank=1 pid=2) INFO 08-07 11:12:30 [gpu_worker.py:255] Available KV cache memory: 10.00 GiB
        INFO 08-07 11:12:30 [kv_cache_utils.py:833] GPU KV cache size: 100,000 tokens
        INFO 08-07 11:12:30 [kv_cache_utils.py:833] GPU KV cache size: 120,000 tokens
        """)
    kv = a["kv_cache"]
    assert sorted(r["bytes_per_token"] for r in kv["bytes_per_token_by_rank"]) == [
        approx(89478.4853333333333), approx(107374.1824)]
    assert kv["ranks_disagree"] is True
    assert kv["bytes_per_token"] == approx(98426.3338666666667)


def test_agreement_within_one_percent(analyze_text):
    a = analyze_text("""
        (VllmWorker rank=0 pid=1) INFO 08-07 11:12:30 [gpu_worker.py:255] Available KV cache memory: 10.00 GiB
        (VllmWorker rank=1 pid=2) INFO 08-07 11:12:30 [gpu_worker.py:255] Available KV cache memory: 10.00 GiB
        INFO 08-07 11:12:30 [kv_cache_utils.py:833] GPU KV cache size: 100,000 tokens
        INFO 08-07 11:12:30 [kv_cache_utils.py:833] GPU KV cache size: 100,900 tokens
        """)
    kv = a["kv_cache"]
    assert kv["ranks_disagree"] is False
    # median of 107374.1824 and 10 * 2**30 / 100900 = 106416.434489593657
    assert kv["bytes_per_token"] == approx((107374.1824 + 106416.434489593657) / 2)


def test_zero_tokens_gives_null_with_note(analyze_text):
    a = analyze_text("""
        (EngineCore_DP0 pid=1) INFO 09-01 10:00:00 [gpu_worker.py:276] Available KV cache memory: 1.00 GiB
        (EngineCore_DP0 pid=1) INFO 09-01 10:00:00 [kv_cache_utils.py:864] GPU KV cache size: 0 tokens
        """)
    kv = a["kv_cache"]
    assert kv["bytes_per_token"] is None
    assert kv["bytes_per_token_by_rank"][0]["bytes_per_token"] is None
    assert "zero or negative" in kv["bytes_per_token_note"]


def test_negative_gib_gives_null_with_note(analyze_text):
    a = analyze_text("""
        (EngineCore_DP0 pid=1) INFO 09-01 10:00:00 [gpu_worker.py:276] Available KV cache memory: -1.66 GiB
        (EngineCore_DP0 pid=1) INFO 09-01 10:00:00 [kv_cache_utils.py:864] GPU KV cache size: 1,000 tokens
        (EngineCore_DP0 pid=1) ERROR 09-01 10:00:00 [core.py:700] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.
        """)
    kv = a["kv_cache"]
    assert kv["available_gib"] == [-1.66]
    assert kv["bytes_per_token"] is None
    assert "zero or negative" in kv["bytes_per_token_note"]
    assert a["errors"]["no_available_memory"] is True
    assert a["errors"]["insufficient_kv"] is None


def test_negative_gib_alone(analyze_text):
    a = analyze_text("""
        INFO 09-01 10:00:00 [gpu_worker.py:276] Available KV cache memory: -1.66 GiB
        ERROR 09-01 10:00:00 [core.py:700] EngineCore failed to start.
        """)
    kv = a["kv_cache"]
    assert kv["available_gib"] == [-1.66]
    assert kv["bytes_per_token"] is None and kv["bytes_per_token_by_rank"] == []
    assert a["errors"]["startup_failed"] is True


def test_num_gpu_blocks_override_gives_null(analyze_text):
    a = analyze_text("""
        INFO 10-01 10:00:00 [gpu_worker.py:276] Available KV cache memory: 20.00 GiB
        INFO 10-01 10:00:00 [kv_cache_utils.py:700] Overriding num_gpu_blocks=30315 with num_gpu_blocks_override=512
        INFO 10-01 10:00:00 [kv_cache_utils.py:864] GPU KV cache size: 8,192 tokens
        """)
    kv = a["kv_cache"]
    assert kv["bytes_per_token"] is None
    assert "num_gpu_blocks_override" in kv["bytes_per_token_note"]


def test_tokens_without_memory_figure(analyze_text):
    a = analyze_text("""
        INFO 05-01 10:00:00 [core.py:58] Initializing a V1 LLM engine (v0.8.5.post1) with config: model='m', max_seq_len=4096, tensor_parallel_size=1, device_config=cuda
        INFO 05-01 10:00:10 [kv_cache_utils.py:634] GPU KV cache size: 83,792 tokens
        INFO 05-01 10:00:10 [kv_cache_utils.py:637] Maximum concurrency for 4,096 tokens per request: 20.46x
        """)
    kv = a["kv_cache"]
    assert kv["bytes_per_token"] is None and kv["bytes_per_token_by_rank"] == []
    assert "no KV memory figure" in kv["bytes_per_token_note"]
    assert a["vllm"] == {"version": "0.8.5.post1", "engine": "v1", "platform": "cuda"}


def test_deepseek_v4_on_0_20_gives_null(analyze_text):
    a = analyze_text("""
        INFO 09-01 10:00:00 [core.py:76] Initializing a V1 LLM engine (v0.20.1) with config: model='deepseek-ai/DeepSeek-V4-Flash', max_seq_len=131072, tensor_parallel_size=8, device_config=cuda
        INFO 09-01 10:01:00 [gpu_worker.py:276] Available KV cache memory: 40.0 GiB
        INFO 09-01 10:01:00 [kv_cache_utils.py:864] GPU KV cache size: 1,000,000 tokens
        """)
    assert a["kv_cache"]["bytes_per_token"] is None
    assert "DeepSeek-V4" in a["kv_cache"]["bytes_per_token_note"]


def test_kind_effective_from_0_21(analyze_text):
    a = analyze_text("""
        INFO 06-13 20:03:12 [api_utils.py:339]  \u2584\u2584 \u2584\u2588 \u2588     \u2588     \u2588 \u2580\u2584\u2580 \u2588  version 0.22.1
        INFO 06-13 20:04:00 [gpu_worker.py:276] Available KV cache memory: 10.0 GiB
        INFO 06-13 20:04:01 [kv_cache_utils.py:1147] GPU KV cache size: 100,000 tokens, Maximum concurrency for 4,096 tokens per request: 24.41x
        """)
    assert a["vllm"]["version"] == "0.22.1"
    assert a["vllm"]["engine"] == "v1"
    assert a["kv_cache"]["bytes_per_token_kind"] == "effective"
    assert a["kv_cache"]["bytes_per_token"] == approx(107374.1824)


def test_cp_multiply_note(analyze_text):
    a = analyze_text("""
        INFO 10-01 10:00:00 [gpu_worker.py:276] Available KV cache memory: 10.0 GiB
        INFO 10-01 10:00:00 [kv_cache_utils.py:1100] Multiplying the GPU KV cache size by the cp_world_size 4 (pcp_world_size 1 * dcp_world_size 4).
        INFO 10-01 10:00:00 [kv_cache_utils.py:864] GPU KV cache size: 400,000 tokens
        """)
    assert a["kv_cache"]["bytes_per_token"] == approx(26843.5456)  # 10 * 2**30 / 400000
    assert "cp size" in a["kv_cache"]["bytes_per_token_note"]


def test_insufficient_kv_error_object(analyze_text):
    a = analyze_text("""
        (EngineCore_DP0 pid=2410) ERROR 07-03 14:19:41 [core.py:718] ValueError: To serve at least one request with the models's max seq len (131072), (40.00 GiB KV cache is needed, which is larger than the available KV cache memory (37.01 GiB). Based on the available memory, the estimated maximum model length is 121248. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
        """)
    assert a["errors"]["insufficient_kv"] == {
        "max_seq_len": 131072, "needed_gib": 40.0, "available_gib": 37.01, "estimated_max_len": 121248}


# --- config resolution ----------------------------------------------------------------------------


def test_args_beat_engine_config_for_gpu_memory_utilization(analyze_text):
    a = analyze_text(
        "(APIServer pid=1) INFO 07-03 14:17:08 [utils.py:328] non-default args: {'model_tag': 'm', 'gpu_memory_utilization': 0.95}\n"
        + engine_line(extra=", gpu_memory_utilization=0.8") + "\n"
        "(Worker_TP0 pid=3) INFO 09-23 18:12:39 [gpu_worker.py:391] Free memory on device (78.66/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB).\n"
    )
    assert a["config"]["gpu_memory_utilization"] == 0.95


def test_gpu_memory_utilization_from_free_memory_report_alone(analyze_text):
    a = analyze_text(
        "(Worker_TP0 pid=3) INFO 09-23 18:12:39 [gpu_worker.py:391] Free memory on device (78.66/79.19 GiB) on startup. "
        "Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 14.08 GiB for weight, 1.97 GiB for peak "
        "activation, 0.07 GiB for non-torch memory, and 0.66 GiB for CUDAGraph memory.\n")
    assert a["config"]["gpu_memory_utilization"] == 0.9
    assert a["memory"]["weights_gib"] == [14.08]
    assert a["memory"]["cuda_graph_gib"] == [0.66]


def test_engine_max_seq_len_beats_args_max_model_len(analyze_text):
    a = analyze_text(
        "(APIServer pid=1) INFO 07-03 14:17:08 [utils.py:328] non-default args: {'model_tag': 'm', 'max_model_len': 65536, 'tensor_parallel_size': 4}\n"
        + engine_line(max_seq_len=32768) + "\n")
    assert a["config"]["max_model_len"] == 32768
    assert a["config"]["tensor_parallel_size"] == 4
    assert a["config"]["model"] == "meta-llama/Llama-3.1-70B-Instruct"  # the engine's resolved model wins
    assert a["config"]["kv_cache_dtype"] == "auto"
    assert a["config"]["enable_prefix_caching"] is True


def test_args_max_model_len_when_no_engine_line(analyze_text):
    a = analyze_text(
        "(APIServer pid=1) INFO 07-03 14:17:08 [utils.py:328] non-default args: {'model_tag': 'm', 'max_model_len': 65536}\n")
    assert a["config"]["max_model_len"] == 65536
    assert a["config"]["model"] == "m"


def test_two_runs_with_different_max_model_len_keep_their_own(analyze_text):
    a = analyze_text(f"""
        {engine_line(max_seq_len=4096)}
        (EngineCore_DP0 pid=1) INFO 09-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 10.0 GiB
        (EngineCore_DP0 pid=1) INFO 09-01 10:00:01 [kv_cache_utils.py:864] GPU KV cache size: 100,000 tokens
        {engine_line(max_seq_len=8192)}
        (EngineCore_DP0 pid=2) INFO 09-01 11:00:00 [gpu_worker.py:298] Available KV cache memory: 10.0 GiB
        (EngineCore_DP0 pid=2) INFO 09-01 11:00:01 [kv_cache_utils.py:864] GPU KV cache size: 100,000 tokens
        """)
    assert a["runs"] == 2
    # two starts with different lengths are two runs, each with its own value (no conflict inside a run)
    assert a["config"]["max_model_len"] == 8192
    assert a["config"]["conflicts"] == {}
    assert [x["config"]["max_model_len"] for x in a["all_runs"]] == [8192, 4096]
    assert a["config"]["tensor_parallel_size"] == 4


def test_block_size_line_beats_args(analyze_text):
    a = analyze_text(
        "(APIServer pid=1) INFO 07-03 14:17:08 [utils.py:328] non-default args: {'model_tag': 'm', 'block_size': 16}\n"
        "(EngineCore pid=2) INFO 11-29 08:41:00 [cuda.py:200] Setting kv cache block size to 64 for FlashMLA backend(s).\n")
    assert a["config"]["block_size"] == 64


def test_user_command_fills_what_logs_do_not(analyze_text):
    a = analyze_text(
        "$ vllm serve /models/Qwen3-4B --max-model-len 4096 --gpu-memory-utilization 0.8 -tp 2 --enable-prefix-caching\n"
        "INFO 05-01 10:00:00 [gpu_worker.py:276] Available KV cache memory: 10.0 GiB\n")
    cfg = a["config"]
    assert (cfg["model"], cfg["max_model_len"], cfg["gpu_memory_utilization"], cfg["tensor_parallel_size"],
            cfg["enable_prefix_caching"]) == ("/models/Qwen3-4B", 4096, 0.8, 2, True)


def test_kv_transfer_config_and_additional_config(analyze_text):
    a = analyze_text(
        "(APIServer pid=1) INFO 08-20 10:10:00 [utils.py:328] non-default args: {'model_tag': 'm', "
        "'kv_transfer_config': KVTransferConfig(kv_connector='MultiConnector', kv_role='kv_consumer', "
        "kv_connector_extra_config={'connectors': [{'kv_connector': 'MooncakeConnectorV1'}, "
        "{'kv_connector': 'RecomputeCPUOffloadConnector'}]}), "
        "'additional_config': {'scheduler_config': {'recompute_scheduler_enable': True}}}\n")
    assert a["config"]["kv_transfer_config"]["kv_role"] == "kv_consumer"
    assert a["config"]["additional_config"] == {"scheduler_config": {"recompute_scheduler_enable": True}}
    assert a["kv_transfer"] == {
        "connector": "MultiConnector", "kv_role": "kv_consumer",
        "children": ["MooncakeConnectorV1", "RecomputeCPUOffloadConnector"],
        "all_connectors": ["MultiConnector", "MooncakeConnectorV1", "RecomputeCPUOffloadConnector"]}


def test_env_vars(analyze_text):
    a = analyze_text("""
        export VLLM_PREFIX_CACHE_RETENTION_INTERVAL=4096
        root@host:/app# VLLM_USE_TRITON_FLASH_ATTN=0 VLLM_LOGGING_LEVEL="DEBUG" python benchmark_throughput.py
        """)
    assert a["config"]["env"] == {"VLLM_LOGGING_LEVEL": "DEBUG", "VLLM_PREFIX_CACHE_RETENTION_INTERVAL": "4096",
                                  "VLLM_USE_TRITON_FLASH_ATTN": "0"}


# --- version / engine / platform ------------------------------------------------------------------

LOGO_0221 = ("INFO 06-13 20:03:12 [api_utils.py:339]  \u2584\u2584 \u2584\u2588 \u2588     \u2588     \u2588 \u2580\u2584\u2580 \u2588"
             "  version 0.22.1rc1.dev495+g2ecf7d0eb")
API_VERSION = "INFO 06-13 20:03:10 [api_server.py:1354] vLLM API server version {v}"


def test_version_logo_beats_engine_and_api_lines(analyze_text):
    a = analyze_text("\n".join([API_VERSION.format(v="0.22.0"), LOGO_0221,
                                engine_line(version="0.22.1")]) + "\n")
    assert a["vllm"]["version"] == "0.22.1rc1.dev495+g2ecf7d0eb"


def test_version_engine_line_beats_api_line(analyze_text):
    a = analyze_text("\n".join([API_VERSION.format(v="0.10.1"), engine_line(version="0.10.1.1")]) + "\n")
    assert a["vllm"]["version"] == "0.10.1.1"


def test_version_api_line_alone(analyze_text):
    a = analyze_text("INFO 07-03 14:17:08 api_server.py:712] vLLM API server version 0.6.3.post1\n")
    assert a["vllm"]["version"] == "0.6.3.post1"


def test_server_version_line(analyze_text):
    a = analyze_text("INFO 11-29 08:40:01 [api_server.py:1501] vLLM server version 0.33.0, serving model Qwen/Qwen3-32B\n")
    assert a["vllm"]["version"] == "0.33.0"
    assert a["vllm"]["engine"] is None  # the log shows no engine line: not inferred from the version (JSON contract: no guesses)
    assert a["config"]["model"] == "Qwen/Qwen3-32B"


def test_no_version(analyze_text):
    a = analyze_text("hello\n")
    assert a["vllm"] == {"version": None, "engine": None, "platform": None}
    assert a["lines_read"] == 1


@pytest.mark.parametrize("text, expected", [
    ("0.11.1rc3.dev29+g3fa", (0, 11, 1)), ("0.6.3.post1", (0, 6, 3)), ("v0.10", (0, 10)),
    ("0.22.1rc1.dev495+g2ecf7d0eb", (0, 22, 1)), ("abc", None), (None, None), ("", None)])
def test_parse_version(text, expected):
    assert parse_version(text) == expected


def test_platform_rocm_evidence_beats_device_config_cuda(analyze_text):
    a = analyze_text("\n".join([
        engine_line(device="cuda"),
        "INFO 05-01 05:25:26 selector.py:38] Using ROCmFlashAttention backend.",
    ]) + "\n")
    assert a["vllm"]["platform"] == "rocm"


def test_platform_rocm_detected_line_beats_device_config_cuda(analyze_text):
    a = analyze_text("INFO 05-01 10:00:00 [__init__.py:235] Automatically detected platform rocm.\n"
                     + engine_line(device="cuda") + "\n")
    assert a["vllm"]["platform"] == "rocm"


def test_platform_cuda(analyze_text):
    a = analyze_text(engine_line(device="cuda") + "\n")
    assert a["vllm"]["platform"] == "cuda"
    assert a["vllm"]["engine"] == "v1"


def test_platform_npu_from_device_config(analyze_text):
    a = analyze_text(engine_line(device="npu") + "\n")
    assert a["vllm"]["platform"] == "npu"


# --- hybrid KV cache manager ----------------------------------------------------------------------


def test_hma_flag_true(analyze_text):
    a = analyze_text("(APIServer pid=1) INFO 11-29 08:40:00 [utils.py:328] non-default args: "
                     "{'model_tag': 'google/gemma-3-27b-it', 'disable_hybrid_kv_cache_manager': True}\n")
    assert a["config"]["disable_hybrid_kv_cache_manager"] is True


def test_hma_warning_true(analyze_text):
    a = analyze_text(
        "(APIServer pid=88) WARNING 11-29 08:40:02 [vllm.py:2267] Turning off hybrid kv cache manager because "
        "`--kv-transfer-config` selects a KV connector that does not support it. Impact: hybrid SSM models\n")
    assert a["config"]["disable_hybrid_kv_cache_manager"] is True


def test_hma_explicitly_enabled_refusal_is_not_hma_off(analyze_text):
    # a ValueError at configuration time (vllm 0.32.0 vllm/config/vllm.py:2198-2204): the server never
    # ran with HMA off, so the flag as given (False) stands (issue 12; docs/vllm-behaviour.md section 5)
    a = analyze_text(
        "(APIServer pid=1) INFO 11-29 08:40:00 [utils.py:328] non-default args: {'disable_hybrid_kv_cache_manager': False}\n"
        "ValueError: Hybrid KV cache manager was explicitly enabled but is not "
        "supported in this configuration. Consider omitting the --no-disable-hybrid-kv-cache-manager flag\n")
    assert a["config"]["disable_hybrid_kv_cache_manager"] is False


def test_hma_group_sizes_false(analyze_text):
    a = analyze_text("(EngineCore pid=131) INFO 11-29 08:41:12 [kv_cache_utils.py:1020] kv cache group sizes (16, 4096)\n")
    assert a["config"]["disable_hybrid_kv_cache_manager"] is False


def test_hma_group_sizes_list_form_false(analyze_text):
    a = analyze_text("(EngineCore pid=131) INFO 11-29 08:41:12 [kv_cache_utils.py:1020] kv cache group sizes [16, 4096]\n")
    assert a["config"]["disable_hybrid_kv_cache_manager"] is False


def test_hma_unknown(analyze_text):
    a = analyze_text("INFO 11-29 08:41:12 [gpu_worker.py:276] Available KV cache memory: 10.0 GiB\n")
    assert a["config"]["disable_hybrid_kv_cache_manager"] is None


# --- runtime --------------------------------------------------------------------------------------


def test_runtime_counters(analyze_text):
    a = analyze_text("""
        (APIServer pid=88) INFO 11-29 09:00:00 [loggers.py:340] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 512.3 tokens/s, Running: 64 reqs, Waiting: 12 reqs, Preemptions: 3, GPU KV cache usage: 99.1%, Prefix cache hit rate: 35.0%
        (APIServer pid=88) INFO 11-29 09:00:10 [loggers.py:340] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 100.0 tokens/s, Running: 1 reqs, Waiting: 5 reqs, Preemptions: 2, GPU KV cache usage: 45.0%, Prefix cache hit rate: 35.0%
        (APIServer pid=88) INFO 11-29 09:00:20 [loggers.py:340] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 35.0%
        WARNING 07-03 15:02:11 scheduler.py:1560] Sequence group 42 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=51
        """)
    assert a["runtime"] == {
        "preemptions": 1, "stats_lines": 3, "kv_usage_max_pct": 99.1, "stats_preemptions_total": 5,
        "recompute_preemptions": 0, "kv_usage_high_lines": 1, "single_running_with_queue_lines": 1,
        "busy_stats_lines": 2}
