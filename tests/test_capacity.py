"""Tests for kvlogdiag.derive.capacity: every expected value is a hand calculation written in a comment.

GiB = 2**30 = 1,073,741,824 bytes.
"""

from __future__ import annotations

import math

import pytest

from kvlogdiag.derive.architecture import expected_kv, load_catalogue
from kvlogdiag.derive.capacity import (
    GIB_BYTES,
    bytes_per_token_from_log,
    gpu_memory_utilization_needed,
    kv_budget_per_dp_group_gib,
    kv_cache_memory_bytes_needed,
    live_kv_gib,
    live_tokens,
    max_model_len_for_requests,
    node_kv_budget,
    offload_host_bytes_for_tokens,
    offload_host_memory,
    offload_tokens_per_rank,
    pool_tokens_per_dp_group,
    pool_tokens_total,
    request_bytes,
    request_kv_need,
    requests_fit_at_length,
    requests_fit_at_max_model_len,
)

GIB = 1_073_741_824


def test_gib_constant():
    assert GIB_BYTES == GIB


# ---------------------------------------------------------------- the §13 Llama-3.1-70B TP4 log
# Available KV cache memory: 37.01 GiB; GPU KV cache size: 485,088 tokens; 7.40x at 65,536.
# 37.01 × 1,073,741,824 = 39,739,184,906.24 bytes.
Z_70B = 37.01
Z_70B_BYTES = 39_739_184_906.24


def test_bytes_per_token_from_log():
    # 39,739,184,906.24 / 485,088 = 81,921.5996 ≈ 81,920 expected (+0.002 %)
    assert bytes_per_token_from_log(Z_70B, 485_088) == pytest.approx(81_921.5996, abs=1e-3)


def test_pool_tokens_per_dp_group_and_total():
    # floor(39,739,184,906.24 / 81,920) = floor(485,097.47) = 485,097 (log: 485,088, < 1 block)
    assert pool_tokens_per_dp_group(Z_70B, 81_920) == 485_097
    # DP2: 2 × 485,097 = 970,194
    assert pool_tokens_total(Z_70B, 81_920, dp_size=2) == 970_194


def test_requests_at_max_model_len_matches_log_concurrency():
    # one 65,536-token request = 81,920 × 65,536 = 5,368,709,120 B = 5 GiB → 37.01 / 5 = 7.402 (log 7.40x)
    assert requests_fit_at_max_model_len(Z_70B, 81_920, 65_536) == pytest.approx(7.402)


def test_requests_fit_at_length_plain():
    # 12,000-token requests: 81,920 × 12,000 = 983,040,000 B each
    # 39,739,184,906.24 / 983,040,000 = 40.42479...
    assert requests_fit_at_length(Z_70B, 81_920, 12_000) == pytest.approx(40.4248, abs=1e-4)
    # whole requests: floor → 40
    assert math.floor(requests_fit_at_length(Z_70B, 81_920, 12_000)) == 40


def test_requests_fit_with_fixed_bytes_per_request():
    # Z = 10 GiB, 1 MiB per token, L = 1,024 → 1 GiB per request + 1 GiB fixed = 2 GiB → 10 / 2 = 5
    assert requests_fit_at_length(10, 1_048_576, 1_024, fixed_bytes_per_request=GIB) == 5.0
    # gpt-oss-120b TP1, Z = 40 GiB, L = 131,072, 36,864 B/token, fixed 307,298,304 B:
    # per request = 36,864 × 131,072 + 307,298,304 = 4,831,838,208 + 307,298,304 = 5,139,136,512
    # 40 × 1,073,741,824 = 42,949,672,960 → 42,949,672,960 / 5,139,136,512 = 8.35737...
    assert requests_fit_at_length(40, 36_864, 131_072, 307_298_304) == pytest.approx(8.357371, abs=1e-6)


def test_requests_fit_block_rounding():
    # L = 1,000 with block 16 → 63 blocks = 1,008 tokens; Z = 1 GiB, 1,024 B/token:
    # 1,073,741,824 / (1,024 × 1,008) = 1,073,741,824 / 1,032,192 = 1,040.2539...
    assert requests_fit_at_length(1, 1_024, 1_000, block_size=16) == pytest.approx(1_040.2539, abs=1e-4)


def test_max_model_len_for_requests():
    # 8 requests: 39,739,184,906.24 / 8 = 4,967,398,113.28 B each; / 81,920 = 60,637.18 → 60,637
    assert max_model_len_for_requests(Z_70B, 81_920, 8) == 60_637
    # block 16: 60,637 // 16 = 3,789 blocks → 3,789 × 16 = 60,624
    assert max_model_len_for_requests(Z_70B, 81_920, 8, block_size=16) == 60_624
    # with a fixed part: Z = 10 GiB, 4 requests → 2.5 GiB each − 0.5 GiB fixed = 2 GiB;
    # 2 GiB / 1 MiB per token = 2,048 tokens
    assert max_model_len_for_requests(10, 1_048_576, 4, fixed_bytes_per_request=GIB / 2) == 2_048
    # fixed part alone exceeds the share: 1 GiB / 4 = 0.25 GiB < 0.5 GiB → 0
    assert max_model_len_for_requests(1, 1_048_576, 4, fixed_bytes_per_request=GIB / 2) == 0


def test_kv_cache_memory_bytes_and_utilization():
    # 32 requests × 12,000 tokens × 81,920 B = 32 × 983,040,000 = 31,457,280,000 B
    assert kv_cache_memory_bytes_needed(32, 12_000, 81_920) == 31_457_280_000
    # = 29.296875 GiB (29.296875 × 1,073,741,824 = 31,457,280,000); 80 GiB device, 36 GiB non-KV:
    # utilization = (29.296875 + 36) / 80 = 65.296875 / 80 = 0.8162109375
    assert gpu_memory_utilization_needed(32, 12_000, 81_920, 80, 36) == pytest.approx(0.8162109375)
    # 48 requests: 48 × 983,040,000 = 47,185,920,000 B = 43.9453125 GiB
    # (43.9453125 + 36) / 80 = 0.99931640625 — just fits
    assert gpu_memory_utilization_needed(48, 12_000, 81_920, 80, 36) == pytest.approx(0.99931640625)


def test_utilization_above_one_means_it_cannot_fit():
    # 64 requests: 64 × 983,040,000 B = 58.59375 GiB; (58.59375 + 36) / 80 = 1.182421875
    assert gpu_memory_utilization_needed(64, 12_000, 81_920, 80, 36) == pytest.approx(1.182421875)


def test_request_kv_need_eleven_gb_alarm():
    # Llama-3.1-70B TP4: one max_model_len = 131,072 request = 81,920 × 131,072 = 10,737,418,240 B
    #   = 10.0 GiB = 10.74 GB ("one request needs 11 GB"); a P99 request of 12,000 tokens needs
    #   81,920 × 12,000 = 983,040,000 B = 0.91552734375 GiB; ratio 131,072 / 12,000 = 10.92267
    need = request_kv_need(81_920, 12_000, 131_072)
    assert need.max_model_len_bytes == 10_737_418_240
    assert need.max_model_len_gib == 10.0
    assert round(need.max_model_len_bytes / 1e9, 2) == 10.74
    assert need.p99_bytes == 983_040_000
    assert need.p99_gib == pytest.approx(0.91552734375)
    assert need.worst_case_over_p99 == pytest.approx(10.922667, abs=1e-6)


def test_request_kv_need_with_expected_kv_of_hybrid_model():
    # gpt-oss-120b TP1 ≥0.21: 36,864 B/token + 307,298,304 B fixed (window 128, 8192 in flight).
    # P99 = 16,384 tokens: 36,864 × 16,384 + 307,298,304 = 603,979,776 + 307,298,304 = 911,278,080 B
    e = expected_kv(load_catalogue()["gpt-oss-120b"], max_model_len=131_072,
                    max_num_batched_tokens=8192, block_size=16, vllm_version="0.22.0")
    need = request_kv_need(e.bytes_per_token, 16_384, 131_072, e.fixed_bytes_per_request, 16)
    assert need.p99_bytes == 911_278_080
    # max: 36,864 × 131,072 + 307,298,304 = 4,831,838,208 + 307,298,304 = 5,139,136,512 B
    assert need.max_model_len_bytes == 5_139_136_512


def test_request_bytes_block_padding():
    # 1,000 tokens, block 128 → 8 blocks = 1,024 tokens × 100 B + 7 fixed = 102,407
    assert request_bytes(1_000, 100, 7, block_size=128) == 102_407


# ---------------------------------------------------------------- offload host memory


def test_offload_global_budget_is_divided_by_world_size():
    # default cpu_bytes_to_use = 8 GiB total; world 16 → 8 / 16 = 0.5 GiB = 536,870,912 B per rank;
    # 8 ranks on a node → 4 GiB per node; 16 ranks → 8 GiB in total
    m = offload_host_memory(world_size=16, ranks_per_node=8)
    assert m.per_rank_bytes == 536_870_912
    assert m.per_node_bytes == 4 * GIB
    assert m.total_bytes == 8 * GIB
    assert any("GLOBAL" in c for c in m.caveats)
    # explicit global 64 GiB, world 16 → 4 GiB per rank
    assert offload_host_memory(16, 8, cpu_bytes_to_use=64 * GIB).per_rank_bytes == 4 * GIB


def test_offload_per_rank_budget():
    # 4 GiB per rank × 8 ranks per node = 32 GiB per node; × 16 ranks = 64 GiB in total
    m = offload_host_memory(16, 8, cpu_bytes_to_use_per_rank=4 * GIB)
    assert (m.per_rank_bytes, m.per_node_bytes, m.total_bytes) == (4 * GIB, 32 * GIB, 64 * GIB)
    both = offload_host_memory(16, 8, cpu_bytes_to_use=GIB, cpu_bytes_to_use_per_rank=4 * GIB)
    assert both.per_rank_bytes == 4 * GIB
    assert any("precedence" in c for c in both.caveats)


def test_offload_size_in_tokens_and_bytes():
    # 100,000 tokens per rank × 81,920 B × 4 ranks = 32,768,000,000 B
    assert offload_host_bytes_for_tokens(100_000, 81_920, 4) == 32_768_000_000
    # 4 GiB per rank / 81,920 B = 4,294,967,296 / 81,920 = 52,428.8 → 52,428 tokens
    assert offload_tokens_per_rank(4 * GIB, 81_920) == 52_428


# ---------------------------------------------------------------- node budget: the seed example


def test_node_kv_budget_seed_example():
    # 8 cards × 64 GB × 0.85 utilization × 0.6 KV share = 512 × 0.85 × 0.6 = 435.2 × 0.6 = 261.12
    node = node_kv_budget(8, 64, 0.85, 0.6)
    assert node == pytest.approx(261.12)
    # DP2 × TP4 on the node: 261.12 / 2 = 130.56 per DP group (≈130 GB); per card 261.12 / 8 = 32.64
    assert kv_budget_per_dp_group_gib(node, 2) == pytest.approx(130.56)
    assert kv_budget_per_dp_group_gib(node, 2) / 4 == pytest.approx(32.64)


def test_live_tokens_seed_p_and_d_nodes():
    # prompt 10K, output 2K (decimal K, 10,000 / 2,000).
    # Seed's P figure "≈50K": 4 requests counted at their final length 10,000 + 2,000:
    #   4 × 12,000 = 48,000 (rounds to ≈50K)
    p_seed = live_tokens(4, 10_000, 2_000, output_fraction_held=1.0)
    assert p_seed == 48_000
    assert abs(p_seed - 50_000) / 50_000 < 0.05
    # physically a prefill-only P request holds its prompt: 4 × 10,000 = 40,000 (+4 sampled tokens)
    assert live_tokens(4, 10_000, 2_000, output_fraction_held=0.0) == 40_000
    # D node: prompt + on average half the output: 48 × (10,000 + 1,000) = 48 × 11,000 = 528,000
    assert live_tokens(48, 10_000, 2_000, output_fraction_held=0.5) == 528_000
    # D node peak (every request at its last token): 48 × 12,000 = 576,000
    assert live_tokens(48, 10_000, 2_000, output_fraction_held=1.0) == 576_000


def test_seed_d_node_against_the_dp_group_pool():
    # Qwen3-32B TP4 (65,536 B/token per rank) on 32.64 GiB of KV per card:
    # 32.64 × 1,073,741,824 = 35,046,933,135.36 B / 65,536 = 534,773.76 → 534,773 tokens per DP group
    tokens = pool_tokens_per_dp_group(32.64, 65_536)
    assert tokens == 534_773
    # the D node's 528,000 live tokens use 528,000 / 534,773 = 98.7 % of the pool
    assert 528_000 / tokens == pytest.approx(0.98733, abs=1e-5)
    # in GiB per rank: 528,000 × 65,536 = 34,603,008,000 B = 32.2265625 GiB (< 32.64)
    assert live_kv_gib(528_000, 65_536) == pytest.approx(32.2265625)


def test_live_kv_gib_with_fixed_part():
    # 1,000 tokens × 1 MiB + 2 requests × 0.5 GiB = 1,048,576,000 + 1,073,741,824 = 2,122,317,824 B
    #   = 1.9765625 GiB
    assert live_kv_gib(1_000, 1_048_576, GIB / 2, concurrency=2) == pytest.approx(1.9765625)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "call",
    [
        lambda: pool_tokens_per_dp_group(10, 0),
        lambda: pool_tokens_total(10, 1000, 0),
        lambda: requests_fit_at_length(10, 1000, 0),
        lambda: node_kv_budget(8, 64, 1.5, 0.6),
        lambda: node_kv_budget(8, 64, 0.85, -0.1),
        lambda: live_tokens(4, 10_000, 2_000, 1.5),
        lambda: offload_host_memory(0),
        lambda: bytes_per_token_from_log(10, 0),
    ],
)
def test_invalid_arguments_raise(call):
    with pytest.raises(ValueError):
        call()
