"""`kvlogdiag estimate` through click's runner.

Every expected number is a hand calculation written out in a comment (GiB = 2**30 =
1,073,741,824 B); none is copied from the command's own output.  Per rank = per DP group.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
TP4_LOG = str(ROOT / "sample_logs" / "v1_tp4_workers.log")
DSV4_D_LOG = str(ROOT / "sample_logs" / "ascend_dsv4_d_node.log")
MULTIRUN = ROOT / "tests" / "data" / "multirun"
GIB = 1_073_741_824
LLAMA70B = "meta-llama/Llama-3.1-70B-Instruct"
SEED = ["--devices", "8", "--gpu-memory-gib", "64", "--gpu-memory-utilization", "0.85", "--kv-fraction", "0.6",
        "--dp", "2", "--tp", "4", "--prompt-len", "10000", "--output-len", "2000"]


def run(*args: str):
    return CliRunner().invoke(cli, ["estimate", *args])


def run_json(*args: str) -> dict:
    result = run(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ------------------------------------------------------------------------------ numbers only


NUMBERS = ["--available-gib", "37.01", "--bytes-per-token", "81920", "--max-model-len", "65536", "--p99-len", "8192"]


def test_numbers_only_json():
    d = run_json(*NUMBERS)
    c = d["capacity"]
    # Z = 37.01 × 1,073,741,824 = 39,739,184,906.24 B
    # pool = floor(39,739,184,906.24 / 81,920) = floor(485,097.47) = 485,097 tokens (DP 1 → same total)
    assert c["pool_tokens_per_dp_group"] == 485_097 == math.floor(37.01 * 2**30 / 81920)
    assert c["pool_tokens_total"] == 485_097
    # at max_model_len: 39,739,184,906.24 / (81,920 × 65,536 = 5,368,709,120 = 5 GiB) = 37.01 / 5 = 7.402
    assert c["requests_fit_at_max_model_len"] == pytest.approx(7.402)
    # at P99 8,192: 39,739,184,906.24 / (81,920 × 8,192 = 671,088,640 = 0.625 GiB) = 37.01 / 0.625 = 59.216
    assert c["requests_fit_at_workload_len"] == pytest.approx(59.216)
    # one request: 0.625 GiB at P99 vs 5 GiB at max_model_len → worst case 65,536 / 8,192 = 8×
    rk = c["request_kv"]
    assert rk["p99_bytes"] == 671_088_640 and rk["p99_gib"] == pytest.approx(0.625)
    assert rk["max_model_len_bytes"] == 5_368_709_120 and rk["max_model_len_gib"] == pytest.approx(5.0)
    assert rk["worst_case_over_p99"] == pytest.approx(8.0)
    # TP/PP/DP default to 1: KV per DP group = 37.01 × 1 × 1
    assert c["kv_gib_per_dp_group"] == pytest.approx(37.01)
    assert d["inputs"]["tp"] == {"value": 1, "source": "default", "line": None, "detail": "TP 1"}
    # the basis is the given figure, reported as measured from the flag
    assert c["basis"] == "measured" and c["bytes_per_token"] == 81920
    assert d["measured"]["bytes_per_token"] == 81920 and d["measured"]["source"] == "--bytes-per-token"
    # no model: expected is null with a reason, no crash
    assert d["expected"]["bytes_per_token"] is None and "--model" in d["expected"]["reason"]
    assert d["comparison"]["ratio"] is None
    # no N: the figures that need it are null with the reason
    assert c["max_model_len_for_target_requests"] is None
    assert "--requests" in c["missing"]["max_model_len_for_target_requests"]
    # no device memory: utilization needed is null
    assert c["gpu_memory_utilization_for_target"] is None


def test_numbers_only_table():
    result = run(*NUMBERS)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "485,097" in out  # pool tokens, as above
    assert "7.40x" in out  # 37.01 / 5
    assert "59.22x" in out  # 37.01 / 0.625 = 59.216
    assert "0.625 GiB" in out and "5.000 GiB" in out  # P99 vs worst-case reservation
    assert "—" in out  # missing figures shown as a dash …
    assert "needs a target concurrency" in out  # … with the reason


# ------------------------------------------------------------------------------ model → expected


def test_catalogue_model_expected():
    d = run_json("--model", LLAMA70B, "--tp", "4")
    e = d["expected"]
    # Llama-3.1-70B: 80 layers, 8 KV heads, head_dim 128, bf16; TP4 → 2 heads per rank:
    # 80 × 2 (K and V) × 2 × 128 × 2 B = 81,920 B per token per rank
    assert e["bytes_per_token"] == 81_920
    assert e["fixed_bytes_per_request"] == 0  # not hybrid
    assert e["log_figure"] == 81_920
    assert e["architecture"] == "Llama-3.1-70B"
    assert e["model_source"] == "--model"
    assert any("block_size 16" in a for a in e["assumptions"])
    # nothing measured, no KV memory: capacity figures that need Z are null, with a reason
    assert d["measured"]["bytes_per_token"] is None
    assert d["capacity"]["pool_tokens_per_dp_group"] is None
    assert "--available-gib" in d["capacity"]["missing"]["pool_tokens_per_dp_group"]


def test_unknown_model_is_null_not_an_error():
    d = run_json("--model", "NoSuchModel-7B", "--available-gib", "10")
    assert d["expected"]["bytes_per_token"] is None
    assert "not in the built-in catalogue" in d["expected"]["reason"]


def test_local_model_config(tmp_path):
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 24,
           "num_attention_heads": 16, "num_key_value_heads": 4, "hidden_size": 2048, "torch_dtype": "bfloat16"}
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg), encoding="utf-8")
    d = run_json("--model-config", str(path), "--tp", "2", "--available-gib", "12")
    # head_dim = 2048 / 16 = 128; TP2 → 4 / 2 = 2 KV heads per rank:
    # 24 × 2 × 2 × 128 × 2 B = 24,576 B per token per rank
    assert d["expected"]["bytes_per_token"] == 24_576
    assert d["expected"]["model_source"].startswith("config.json")
    # pool = floor(12 × 1,073,741,824 / 24,576) = floor(12,884,901,888 / 24,576) = 524,288
    assert d["capacity"]["pool_tokens_per_dp_group"] == 524_288
    assert d["capacity"]["basis"] == "expected"


def test_bad_model_config_exits_2(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "no-such-arch", "num_hidden_layers": 2}', encoding="utf-8")
    result = run("--model-config", str(path))
    assert result.exit_code == 2
    assert "--model-config" in result.stderr and len(result.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------------ from a log


def test_log_measured_vs_expected():
    d = run_json("--log", TP4_LOG, "--requests", "32", "--p99-len", "12000")
    m, e, cmp_ = d["measured"], d["expected"], d["comparison"]
    # the four ranks, smallest memory paired with smallest count (×1,073,741,824):
    #   37.01 / 485,088 = 81,921.600   37.05 / 485,648 = 81,915.574
    #   37.12 / 486,512 = 81,924.591   37.12 / 486,576 = 81,913.815
    # median = (81,915.574 + 81,921.600) / 2 = 81,918.587
    assert m["bytes_per_token"] == pytest.approx(81_918.587, abs=0.01)
    assert m["origin"] == "log" and "line 118" in m["source"]
    assert m["logged_tokens"] == 485_088 and m["logged_tokens_line"] == 126
    # expected from the catalogue, model read from the log (line 10): 81,920 (see above)
    assert e["bytes_per_token"] == 81_920
    assert e["model"] == LLAMA70B and e["model_source"] == "log line 10"
    # ratio 81,918.587 / 81,920 = 0.999983 — a match, no causes
    assert cmp_["ratio"] == pytest.approx(0.999983, abs=1e-6)
    assert cmp_["within_tolerance"] is True and cmp_["causes"] == []
    # inputs carry their log lines
    assert d["inputs"]["tp"] == {"value": 4, "source": "log", "line": 3, "detail": None}
    assert d["inputs"]["available_gib_per_rank"]["value"] == 37.01
    assert d["inputs"]["available_gib_per_rank"]["line"] == 118
    c = d["capacity"]
    # the log confirms the architecture → exact 81,920: pool = floor(39,739,184,906.24 / 81,920) = 485,097
    assert c["basis"] == "expected" and c["pool_tokens_per_dp_group"] == 485_097
    # KV of the DP group: 37.01 × TP 4 = 148.04 GiB
    assert c["kv_gib_per_dp_group"] == pytest.approx(148.04)
    # non-KV = budget 72.85 − Z 37.01 = 35.84 GiB; device 79.18 GiB (both from the log)
    assert c["non_kv_gib"] == pytest.approx(35.84) and c["gpu_memory_gib"] == 79.18
    # 32 × 12,000 × 81,920 = 31,457,280,000 B = 29.296875 GiB → --kv-cache-memory-bytes 31457280000
    assert c["kv_cache_memory_bytes_for_target"] == 31_457_280_000
    # utilization = (29.296875 + 35.84) / 79.18 = 65.136875 / 79.18 = 0.822643
    assert c["gpu_memory_utilization_for_target"] == pytest.approx(0.822643, abs=1e-6)
    assert c["target_fits"] is True
    # max_model_len for 32: floor(39,739,184,906.24 / 32 / 81,920) = floor(15,159.3) = 15,159
    assert c["max_model_len_for_target_requests"] == 15_159


def test_log_table_shows_sources():
    result = run("--log", TP4_LOG)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "log line 10" in out  # the model
    assert "log line 118" in out  # Z
    assert "81,918.6 B" in out and "81,920.00 B" in out
    assert "485,097" in out and "the log says 485,088" in out


def test_flags_override_log_and_mismatch_is_explained():
    d = run_json("--log", TP4_LOG, "--tp", "8")
    assert d["inputs"]["tp"]["source"] == "flag"
    # TP8 → 1 KV head per rank: 80 × 2 × 1 × 128 × 2 = 40,960 B
    assert d["expected"]["bytes_per_token"] == 40_960
    # ratio 81,918.587 / 40,960 = 1.99996 → > 25 % apart, explain_mismatch names the factor 2
    cmp_ = d["comparison"]
    assert cmp_["ratio"] == pytest.approx(1.99996, abs=1e-4)
    assert cmp_["within_tolerance"] is False
    assert any("≈ 2" in c for c in cmp_["causes"])
    # disagreement → capacity uses the measured figure
    assert d["capacity"]["basis"] == "measured"


def test_what_if_utilization_with_a_log():
    d = run_json("--log", TP4_LOG, "--gpu-memory-utilization", "0.95")
    z = d["inputs"]["available_gib_per_rank"]
    # non-KV from the log 72.85 − 37.01 = 35.84; Z' = 79.18 × 0.95 − 35.84 = 75.221 − 35.84 = 39.381
    assert z["source"] == "computed" and z["value"] == pytest.approx(39.381)
    assert any("what-if" in n for n in d["notes"])


def test_missing_log_exits_2(tmp_path):
    result = run("--log", str(tmp_path / "nope.log"))
    assert result.exit_code == 2
    assert "no such file" in result.stderr


# ------------------------------------------------------------------------------ docs §5 figures


def test_utilization_for_a_target_load():
    d = run_json("--model", LLAMA70B, "--tp", "4", "--gpu-memory-gib", "80", "--non-kv-gib", "36",
                 "--requests", "32", "--p99-len", "12000")
    c = d["capacity"]
    # 32 × 12,000 × 81,920 = 31,457,280,000 B = 29.296875 GiB; (29.296875 + 36) / 80 = 0.816211
    assert c["kv_cache_memory_bytes_for_target"] == 31_457_280_000
    assert c["gpu_memory_utilization_for_target"] == pytest.approx(0.816211, abs=1e-6)


def test_one_request_needs_11_gb():
    result = run("--model", LLAMA70B, "--tp", "4", "--max-model-len", "131072", "--p99-len", "12000")
    assert result.exit_code == 0, result.output
    out = result.stdout
    # 81,920 × 131,072 = 10,737,418,240 B = 10.0 GiB = 10.74 GB; P99 81,920 × 12,000 = 983,040,000 B = 0.916 GiB
    assert "10.00 GiB" in out and "10.74 GB" in out
    assert "0.916 GiB" in out and "983,040,000 B" in out
    # 131,072 / 12,000 = 10.92× the real need
    assert "10.9× the P99 need" in out


def test_hybrid_model_fixed_part():
    d = run_json("--model", "openai/gpt-oss-120b", "--max-model-len", "131072", "--max-num-batched-tokens", "8192",
                 "--vllm-version", "0.21.0", "--block-size", "16", "--p99-len", "16384", "--available-gib", "60")
    e, c = d["expected"], d["capacity"]
    # 18 full layers × 2 × 8 × 64 × 2 = 36,864 B/token; 18 SWA layers reserve
    # (cdiv(127 + 8,192, 16) + 1) × 16 = 8,336 tokens × 18 × 2,048 B = 307,298,304 B per request
    assert e["bytes_per_token"] == 36_864 and e["fixed_bytes_per_request"] == 307_298_304
    # ≥0.21 log figure: 36,864 + 307,298,304 / 131,072 = 36,864 + 2,344.5 = 39,208.5
    assert e["log_figure"] == pytest.approx(39_208.5)
    assert c["basis"] == "expected" and c["fixed_bytes_per_request"] == 307_298_304
    rk = c["request_kv"]
    # P99: 36,864 × 16,384 + 307,298,304 = 603,979,776 + 307,298,304 = 911,278,080 B
    assert rk["p99_bytes"] == 911_278_080
    # max_model_len: 36,864 × 131,072 + 307,298,304 = 4,831,838,208 + 307,298,304 = 5,139,136,512 B
    assert rk["max_model_len_bytes"] == 5_139_136_512
    # 60 GiB = 64,424,509,440 B / 5,139,136,512 = 12.536 requests at max_model_len
    assert c["requests_fit_at_max_model_len"] == pytest.approx(12.536, abs=1e-3)


# ------------------------------------------------------------------------------ the seed example


def test_seed_prefill_node_prints_the_numbers():
    result = run(*SEED, "--concurrency", "4", "--role", "prefill")
    assert result.exit_code == 0, result.output
    out = result.stdout
    # node KV 8 × 64 × 0.85 × 0.6 = 512 × 0.85 × 0.6 = 435.2 × 0.6 = 261.12 (≈261 GB)
    assert "261.12" in out
    # per DP group 261.12 / 2 = 130.56 (≈130 GB); per card 261.12 / 8 = 32.64
    assert "130.56" in out and "32.64" in out
    # P node: 4 × (10,000 + 2,000) = 48,000 ("≈50K", each request at final length);
    # physically held: 4 × 10,000 = 40,000
    assert "48,000" in out and "40,000" in out


def test_seed_decode_node_prints_the_numbers():
    result = run(*SEED, "--concurrency", "48", "--role", "decode")
    assert result.exit_code == 0, result.output
    # D node: 48 × (10,000 + 2,000 / 2) = 48 × 11,000 = 528,000; peak 48 × 12,000 = 576,000
    assert "528,000" in result.stdout and "576,000" in result.stdout


def test_seed_json_and_against_the_pool():
    d = run_json(*SEED, "--concurrency", "48", "--role", "decode", "--model", "Qwen/Qwen3-32B")
    c = d["capacity"]
    nb = c["node_budget"]
    assert nb["node_kv_gib"] == pytest.approx(261.12)
    assert nb["per_dp_group_gib"] == pytest.approx(130.56)
    assert nb["per_device_gib"] == pytest.approx(32.64)
    # Z per card = 64 × 0.85 × 0.6 = 32.64 GiB; per DP group 32.64 × TP 4 = 130.56; total × DP 2 = 261.12
    assert c["available_gib_per_rank"] == pytest.approx(32.64)
    assert c["kv_gib_per_dp_group"] == pytest.approx(130.56)
    assert c["kv_gib_total"] == pytest.approx(261.12)
    # Qwen3-32B TP4: 64 × 2 × (8 / 4) × 128 × 2 = 65,536 B/token
    assert d["expected"]["bytes_per_token"] == 65_536
    # pool = floor(32.64 × 2^30 / 65,536) = floor(32.64 × 16,384) = floor(534,773.76) = 534,773
    assert c["pool_tokens_per_dp_group"] == 534_773
    live = c["live"]
    assert live["role"] == "decode" and live["tokens"] == 528_000
    avg, peak = live["estimates"]
    # 528,000 × 65,536 = 34,603,008,000 B = 32.2265625 GiB; / 32.64 = 98.73 % of the pool
    assert avg["kv_gib_per_rank"] == pytest.approx(32.2265625)
    assert avg["share_of_pool"] == pytest.approx(0.98734, abs=1e-5)
    assert peak["tokens"] == 576_000
    # non-KV = 64 × 0.85 × 0.4 = 21.76; 48 × 12,000 × 65,536 = 37,748,736,000 B = 35.15625 GiB
    # utilization = (35.15625 + 21.76) / 64 = 56.91625 / 64 = 0.889316
    assert c["non_kv_gib"] == pytest.approx(21.76)
    assert c["gpu_memory_utilization_for_target"] == pytest.approx(0.889316, abs=1e-6)
    # max_model_len for 48: floor(534,773.76 / 48) = floor(11,141.12) = 11,141
    assert c["max_model_len_for_target_requests"] == 11_141


# ------------------------------------------------------------------------------ offload


def test_offload_flags():
    d = run_json("--tp", "4", "--dp", "4", "--cpu-bytes-to-use", "64GiB", "--bytes-per-token", "6880")
    o = d["capacity"]["offload"]
    # cpu_bytes_to_use is global per engine: 64 GiB ÷ world_size (TP 4 × PP 1) = 16 GiB per rank
    assert o["world_size"] == 4 and o["per_rank_gib"] == pytest.approx(16.0)
    # 16 ranks on the node (TP 4 × DP 4): 16 × 16 = 256 GiB of host memory
    assert o["ranks_per_node"] == 16 and o["per_node_gib"] == pytest.approx(256.0)
    # floor(17,179,869,184 / 6,880) = floor(2,497,074.009) = 2,497,074 tokens per rank
    assert o["tokens_per_rank"] == 2_497_074
    assert any("GLOBAL" in cv for cv in o["caveats"])


def test_offload_and_role_from_an_ascend_log():
    d = run_json("--log", DSV4_D_LOG)
    o = d["capacity"]["offload"]
    # cpu_bytes_to_use 68,719,476,736 = 64 GiB; the connector's line says world_size=4 → 16 GiB per rank
    assert o["cpu_bytes_to_use"] == 68_719_476_736 and o["world_size"] == 4
    assert o["per_rank_gib"] == pytest.approx(16.0) and o["logged_per_rank_gb"] == 16.0
    assert d["inputs"]["role"]["value"] == "decode" and d["inputs"]["role"]["source"] == "log"


# ------------------------------------------------------------------------------ server starts (runs)


def analyze_run(log: str, which: str) -> dict:
    """``analyze --format json --run WHICH``: the selected run, with its own KV lines."""
    res = CliRunner().invoke(cli, ["analyze", "--format", "json", "--run", which, "--fail-on", "never", log])
    assert res.exit_code == 0, res.output
    a = json.loads(res.stdout)["analyses"][0]
    own = [r for r in a.get("all_runs", [a]) if r["run"]["index"] == a["run"]["index"]][0]
    a["kv_cache"]["max_concurrency"] = own["kv_cache"]["max_concurrency"]
    return a


@pytest.mark.parametrize("which", ["last", "first", "1", "2"])
@pytest.mark.parametrize("log", sorted(MULTIRUN.glob("*.log")), ids=lambda p: p.stem)
def test_log_figures_are_those_of_the_run_analyze_states(log, which):
    """Two starts in one log: --log uses the run analyze reports for the same --run (default: the current
    one), never the other start or a mix (before: a median over a Qwen-7B and a Llama-70B start)."""
    a = analyze_run(str(log), which)
    d = run_json("--log", str(log), "--run", which)
    assert d["run"] == a["run"]
    kv, cfg, inp = a["kv_cache"], a["config"], d["inputs"]
    assert d["measured"]["bytes_per_token"] == kv["bytes_per_token"]
    for key, name in (("tp", "tensor_parallel_size"), ("max_model_len", "max_model_len")):
        assert (inp[key] or {}).get("value") == cfg[name] or (cfg[name] is None and inp[key]["source"] == "default")
    assert (inp["model"] or {}).get("value") == cfg["model"]
    assert (inp["vllm_version"] or {}).get("value") == a["vllm"]["version"]
    pairs = kv["bytes_per_token_by_rank"]
    if not pairs:
        assert d["measured"]["logged_tokens"] is None and inp["available_gib_per_rank"] is None
        return
    assert inp["available_gib_per_rank"]["value"] == min(p["available_gib"] for p in pairs)
    assert d["measured"]["logged_tokens"] == min(p["tokens"] for p in pairs)
    # vLLM's 'Maximum concurrency for L tokens' (2 decimals) of the smallest rank, recomputed from Z and N
    logged = min(m["concurrency"] for m in kv["max_concurrency"] if m["tokens_per_request"] == cfg["max_model_len"])
    assert d["capacity"]["requests_fit_at_max_model_len"] == pytest.approx(logged, abs=0.006)
    assert f"every log figure is from run {a['run']['index'] + 1}" in " ".join(d["notes"])


def test_the_two_runs_of_a_restarted_log_differ():
    """The default is the current (last) start; --run 1 is the first: 37.01 GiB × 4 ranks of Llama-70B
    (7.40x at 65,536) vs 53.91 GiB on one GPU for Qwen-7B (30.81x at 32,768)."""
    log = str(MULTIRUN / "concat_single_then_tp4.log")
    last, first = run_json("--log", log), run_json("--log", log, "--run", "1")
    assert (last["inputs"]["available_gib_per_rank"]["value"], last["inputs"]["tp"]["value"]) == (37.01, 4)
    assert (first["inputs"]["available_gib_per_rank"]["value"], first["inputs"]["tp"]["value"]) == (53.91, 1)
    # 37.01 × 2**30 / (81,920 × 65,536) = 7.402; 53.91 × 2**30 / (57,344 × 32,768) = 30.806
    assert last["capacity"]["requests_fit_at_max_model_len"] == pytest.approx(7.402, abs=1e-3)
    assert first["capacity"]["requests_fit_at_max_model_len"] == pytest.approx(30.806, abs=1e-3)
    assert run_json("--log", log, "--run", "2") == last == run_json("--log", log, "--run", "last")


@pytest.mark.parametrize("which, message", [
    ("all", "an estimate sizes one server start: use last, first or a run number"),
    ("3", "no run 3 (the input has 2)"),
    ("0", "use last, first or a run number"),
])
def test_run_selection_errors_exit_2(which, message):
    result = run("--log", str(MULTIRUN / "concat_single_then_tp4.log"), "--run", which)
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("kvlogdiag: error: estimate: ")


# ------------------------------------------------------------------------------ contract


def test_json_keys():
    d = run_json(*NUMBERS)
    assert {"inputs", "expected", "measured", "comparison", "capacity", "notes"} <= set(d)
    assert {"bytes_per_token", "fixed_bytes_per_request", "log_figure", "assumptions"} <= set(d["expected"])
    assert {"bytes_per_token", "source"} <= set(d["measured"])
    assert {"pool_tokens_per_dp_group", "pool_tokens_total", "requests_fit_at_workload_len",
            "requests_fit_at_max_model_len", "max_model_len_for_target_requests",
            "kv_cache_memory_bytes_for_target", "gpu_memory_utilization_for_target", "request_kv",
            "offload", "node_budget", "live", "missing"} <= set(d["capacity"])


def test_no_inputs_at_all_is_not_a_crash():
    d = run_json()
    c = d["capacity"]
    assert c["pool_tokens_per_dp_group"] is None and c["request_kv"] is None
    assert c["missing"]["pool_tokens_per_dp_group"]
    assert run().exit_code == 0


def test_concurrency_is_an_alias_of_requests():
    a = run_json(*NUMBERS, "--requests", "8")["capacity"]
    b = run_json(*NUMBERS, "--concurrency", "8")["capacity"]
    # floor(39,739,184,906.24 / 8 / 81,920) = floor(60,637.18) = 60,637
    assert a["max_model_len_for_target_requests"] == b["max_model_len_for_target_requests"] == 60_637


@pytest.mark.parametrize("args, flag", [
    (["--available-gib", "0"], "--available-gib"),
    (["--available-gib", "-3"], "--available-gib"),
    (["--bytes-per-token", "-81920"], "--bytes-per-token"),
    (["--tp", "0"], "--tp"),
    (["--max-model-len", "0"], "--max-model-len"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
    (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization"),
    (["--gpu-memory-gib", "0"], "--gpu-memory-gib"),
    (["--kv-fraction", "-0.1"], "--kv-fraction"),
    (["--non-kv-gib", "-1"], "--non-kv-gib"),
    (["--requests", "0"], "--requests"),
    (["--p99-len", "-5"], "--p99-len"),
    (["--cpu-bytes-to-use", "0"], "--cpu-bytes-to-use"),
    (["--cpu-bytes-to-use-per-rank", "lots"], "--cpu-bytes-to-use-per-rank"),
    (["--kv-cache-dtype", "fp9"], "--kv-cache-dtype"),
    (["--vllm-version", "latest"], "--vllm-version"),
])
def test_bad_numbers_exit_2_with_one_line(args, flag):
    result = run(*args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0]
    assert result.stdout == ""


# ------------------------------------------------------------------------------ docs stay true


def _indented(text: str) -> str:
    return "\n".join(("    " + line).rstrip() for line in text.rstrip("\n").splitlines())


@pytest.mark.parametrize("args", [
    ["--log", TP4_LOG, "--requests", "32", "--p99-len", "12000"],
    [*SEED, "--concurrency", "48", "--role", "decode", "--model", "Qwen/Qwen3-32B"],
])
def test_docs_capacity_md_section_8_shows_current_output(args):
    doc = (ROOT / "docs" / "capacity.md").read_text(encoding="utf-8")
    out = run(*args).stdout
    # §8.3 shows the whole output; §8.2 the Capacity … Live tokens sections
    block = out if "--log" in args else out[out.index("Capacity"):out.index("Assumptions")]
    assert _indented(block) in doc, "docs/capacity.md §8 is stale: re-run the example and paste its output"


def test_docs_capacity_md_two_start_example_is_current_output():
    """The excerpt of §8.3 (``--run 1`` on a two-start log): every shown line is in today's output."""
    doc = (ROOT / "docs" / "capacity.md").read_text(encoding="utf-8")
    cmd = "    $ kvlogdiag estimate --log tests/data/multirun/concat_single_then_tp4.log --run 1\n"
    excerpt = doc[doc.index(cmd) + len(cmd):].split("\n\n")[0].splitlines()
    shown = [line[4:] for line in excerpt if line.strip() != "…"]
    assert len(shown) == 5
    out = run("--log", str(MULTIRUN / "concat_single_then_tp4.log"), "--run", "1").stdout.splitlines()
    for line in shown:
        assert line in out, f"docs/capacity.md §8.3 is stale: {line!r}"


def test_short_request_reserves_only_its_length_in_sliding_window_layers():
    # gpt-oss-120b: 18 full layers (36,864 B/token at TP1) + 18 sliding-window layers (window 128,
    # 36,864 B/token). One request of 64 tokens reserves (cdiv(min(127 + 8,192, 64), 16) + 1) x 16 = 80
    # tokens in the window layers (vLLM SlidingWindowSpec.max_memory_usage_bytes), not the 8,336 of a
    # max-model-len request (issue 12): 36,864 x 64 + 36,864 x 80 = 5,308,416 B
    d = run_json("--model", "gpt-oss-120b", "--available-gib", "40", "--max-model-len", "131072",
                 "--max-num-batched-tokens", "8192", "--p99-len", "64")
    cap = d["capacity"]
    assert cap["basis"] == "expected" and cap["fixed_bytes_per_request"] == 36864 * 8336
    assert cap["request_kv"]["p99_bytes"] == 36864 * 64 + 36864 * 80
    assert cap["requests_fit_at_workload_len"] == pytest.approx(40 * 2**30 / (36864 * 144))
    # at a length beyond window + chunk the reservation is the max-model-len one again
    d = run_json("--model", "gpt-oss-120b", "--available-gib", "40", "--max-model-len", "131072",
                 "--max-num-batched-tokens", "8192", "--p99-len", "32768")
    assert d["capacity"]["request_kv"]["p99_bytes"] == 36864 * 32768 + 36864 * 8336


def test_tp_that_does_not_divide_the_attention_heads_is_noted():
    # vLLM refuses such a layout (vllm 0.23.0 vllm/config/model.py:1185-1196 verify_with_parallel_config)
    d = run_json("--model", "Qwen3-32B", "--tp", "3", "--available-gib", "20", "--p99-len", "8192")
    notes = [a for a in d["expected"]["assumptions"] if "does not divide the 64 attention heads" in a]
    assert notes and "vLLM refuses to start" in notes[0] and d["expected"]["verified"] is False
    ok = run_json("--model", "Qwen3-32B", "--tp", "4", "--available-gib", "20", "--p99-len", "8192")
    assert not [a for a in ok["expected"]["assumptions"] if "attention heads" in a]


def test_estimate_from_a_log_read_in_part_says_so_and_exits_4(tmp_path):
    # issue 18: a cut compressed log is read to the cut; the estimate says its figures are of the lines read
    import gzip

    from click.testing import CliRunner

    from kvlogdiag.cli.exit import ExitCode
    from kvlogdiag.cli.main import cli

    log = Path(__file__).resolve().parent.parent / "sample_logs" / "v1_tp4_workers.log"
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(gzip.compress(log.read_bytes())[:2500])
    r = CliRunner().invoke(cli, ["estimate", "--log", str(cut), "--format", "json"])
    assert r.exit_code == ExitCode.TRUNCATED and "cut.log.gz: truncated:" in r.stderr
    assert json.loads(r.stdout)["truncated"]["reason"] == "cut"
    whole = CliRunner().invoke(cli, ["estimate", "--log", str(log), "--format", "json"])
    assert whole.exit_code == 0 and "truncated" not in json.loads(whole.stdout)
