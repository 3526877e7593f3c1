"""Tests for kvlogdiag.derive.architecture.

Every expected number is a hand calculation written out in the comment next to it (formulas of
vllm-log-format.md §12 / §12.1), never the code's own output.
Per layer, per rank: GQA/MHA 2 × max(1, kv_heads // TP) × head_dim × dt; MLA (512 + 64) × dt.
"""

from __future__ import annotations

import json

import pytest

from kvlogdiag.derive.architecture import (
    KIND_FULL,
    KIND_MAMBA,
    KIND_SLIDING,
    ExpectedKV,
    ModelArch,
    UnknownArchitecture,
    catalogue_entries,
    expected_kv,
    explain_mismatch,
    from_hf_config,
    kv_dtype_bytes,
    load_catalogue,
    load_hf_config,
    lookup_model,
    normalise_model_name,
    parse_vllm_version,
    pp_layer_ranges,
    swa_reserved_tokens,
)

GIB = 2**30


def arch(name: str) -> ModelArch:
    return load_catalogue()[name]


# ------------------------------------------------------------------------------ catalogue


CATALOGUE_NAMES = [
    "Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.1-405B", "Llama-3.2-1B", "Llama-3.2-3B",
    "Qwen2.5-7B", "Qwen2.5-14B", "Qwen2.5-32B", "Qwen2.5-72B",
    "Qwen3-0.6B", "Qwen3-8B", "Qwen3-14B", "Qwen3-32B",
    "Mistral-7B-v0.3",
    "Gemma-2-9B", "Gemma-2-27B", "Gemma-3-4B", "Gemma-3-12B", "Gemma-3-27B",
    "DeepSeek-V2", "DeepSeek-V3", "DeepSeek-R1", "DeepSeek-V4-Flash",
    "gpt-oss-20b", "gpt-oss-120b",
]


def test_catalogue_has_every_required_model():
    assert sorted(load_catalogue()) == sorted(CATALOGUE_NAMES)


def test_catalogue_entries_carry_source_and_verified_flag():
    for entry in catalogue_entries():
        assert isinstance(entry.verified, bool)
        assert entry.source, entry.name
        assert entry.arch.verified is entry.verified
        assert entry.arch.source == entry.source


@pytest.mark.parametrize(
    "name, counts",
    [
        ("Gemma-2-9B", {"sliding": 21, "full": 21}),  # 42 layers, even ones sliding
        ("Gemma-3-27B", {"sliding": 52, "full": 10}),  # 62 layers, every 6th global: 62 // 6 = 10
        ("Gemma-3-4B", {"sliding": 29, "full": 5}),  # 34 // 6 = 5 global
        ("Gemma-3-12B", {"sliding": 40, "full": 8}),  # 48 / 6 = 8 global
        ("gpt-oss-120b", {"sliding": 18, "full": 18}),  # 18 × [sliding, full]
        ("gpt-oss-20b", {"sliding": 12, "full": 12}),
        ("DeepSeek-V3", {"mla": 61}),
        ("DeepSeek-V4-Flash", {"dsv4": 43}),
        ("Qwen2.5-72B", {"full": 80}),  # use_sliding_window = false
    ],
)
def test_catalogue_layer_patterns(name, counts):
    assert arch(name).kind_counts == counts


def test_deepseek_v4_compress_ratio_pattern():
    a = arch("DeepSeek-V4-Flash")
    ratios = [s.compress_ratio for s in a.layers]
    # layers 0-1 window only, then 4,128,...,4: 21 CSA (ratio 4) + 20 HCA (ratio 128)
    assert ratios[:3] == [0, 0, 4]
    assert ratios.count(0) == 2 and ratios.count(4) == 21 and ratios.count(128) == 20
    assert all(s.has_indexer == (s.compress_ratio == 4) for s in a.layers)
    assert a.num_mtp_layers == 1 and a.auto_kv_cache_dtype == "fp8_ds_mla"


# ------------------------------------------------------------------------------ §12 worked numbers


@pytest.mark.parametrize(
    "name, tp, expected_bytes",
    [
        ("Llama-3.1-8B", 1, 131_072),  # 32 × 2 × 8 × 128 × 2
        ("Llama-3.1-8B", 2, 65_536),  # 32 × 2 × 4 × 128 × 2
        ("Llama-3.1-70B", 1, 327_680),  # 80 × 2 × 8 × 128 × 2
        ("Llama-3.1-70B", 4, 81_920),  # 80 × 2 × 2 × 128 × 2
        ("Llama-3.1-70B", 8, 40_960),  # 80 × 2 × 1 × 128 × 2
        ("Qwen2.5-7B", 1, 57_344),  # 28 × 2 × 4 × 128 × 2
        ("Qwen2.5-7B", 2, 28_672),  # 28 × 2 × 2 × 128 × 2
        ("Qwen2.5-7B", 4, 14_336),  # 28 × 2 × 1 × 128 × 2
        ("Qwen2.5-7B", 8, 14_336),  # 4 // 8 = 0 → max(1, 0) = 1 head replicated: 28 × 2 × 1 × 128 × 2
        ("Qwen3-32B", 1, 262_144),  # 64 × 2 × 8 × 128 × 2
        ("Qwen3-32B", 2, 131_072),  # 64 × 2 × 4 × 128 × 2
        ("Qwen3-32B", 4, 65_536),  # 64 × 2 × 2 × 128 × 2
        ("Qwen3-32B", 8, 32_768),  # 64 × 2 × 1 × 128 × 2
        ("Mistral-7B-v0.3", 1, 131_072),  # 32 × 2 × 8 × 128 × 2
        ("Llama-3.1-405B", 8, 64_512),  # 126 × 2 × 1 × 128 × 2
        ("Llama-3.2-1B", 1, 32_768),  # 16 × 2 × 8 × 64 × 2
    ],
)
def test_dense_bytes_per_token(name, tp, expected_bytes):
    e = expected_kv(arch(name), tp=tp)
    assert e.bytes_per_token == expected_bytes
    assert e.hma_off_bytes_per_token == expected_bytes  # no sliding layers
    assert e.fixed_bytes_per_request == 0
    assert e.log_figure == expected_bytes  # non-hybrid: the log shows the per-token figure


def test_fp8_kv_cache_halves_every_row():
    # Llama-3.1-8B fp8: 32 × 2 × 8 × 128 × 1 = 65,536
    for dtype in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        assert expected_kv(arch("Llama-3.1-8B"), kv_cache_dtype=dtype).bytes_per_token == 65_536


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_deepseek_v3_mla_not_divided_by_tp(tp):
    a = arch("DeepSeek-V3")
    # 61 × (512 + 64) × 2 = 61 × 1,152 = 70,272 on every TP rank
    assert expected_kv(a, tp=tp, kv_cache_dtype="bf16").bytes_per_token == 70_272
    # fp8: 61 × 576 × 1 = 35,136
    assert expected_kv(a, tp=tp, kv_cache_dtype="fp8").bytes_per_token == 35_136


def test_deepseek_v3_with_mtp_layer():
    # 62 layers (61 + 1 MTP) × 1,152 = 71,424
    e = expected_kv(arch("DeepSeek-V3"), tp=8, include_mtp=True)
    assert e.bytes_per_token == 71_424
    # DeepSeek-R1 is the same architecture
    assert expected_kv(arch("DeepSeek-R1"), include_mtp=True).bytes_per_token == 71_424


def test_deepseek_v2_mla():
    # 60 × 1,152 = 69,120; no MTP layers
    e = expected_kv(arch("DeepSeek-V2"), tp=8, include_mtp=True)
    assert e.bytes_per_token == 69_120


@pytest.mark.parametrize(
    "tp, full_only",
    [
        (1, 36_864),  # 18 full layers × 2 × 8 × 64 × 2 = 18 × 2,048
        (2, 18_432),  # 18 × 2 × 4 × 64 × 2 = 18 × 1,024
        (4, 9_216),  # 18 × 2 × 2 × 64 × 2 = 18 × 512
        (8, 4_608),  # 18 × 2 × 1 × 64 × 2 = 18 × 256
    ],
)
def test_gpt_oss_120b_full_attention_only(tp, full_only):
    e = expected_kv(arch("gpt-oss-120b"), tp=tp, hma_enabled=True)
    assert e.bytes_per_token == full_only
    assert e.hma_off_bytes_per_token == 2 * full_only  # 36 layers instead of 18


def test_gpt_oss_120b_hma_off():
    # all 36 layers full: 36 × 2,048 = 73,728
    e = expected_kv(arch("gpt-oss-120b"), hma_enabled=False)
    assert e.bytes_per_token == 73_728
    assert e.hma_off_bytes_per_token == 73_728
    assert e.fixed_bytes_per_request == 0


@pytest.mark.parametrize(
    "name, hma_off, global_only",
    [
        ("Gemma-2-9B", 344_064, 172_032),  # 42 × 2×8×256×2 = 42 × 8,192 ; 21 × 8,192
        ("Gemma-3-27B", 507_904, 81_920),  # 62 × 2×16×128×2 = 62 × 8,192 ; 10 × 8,192
        ("Gemma-3-4B", 139_264, 20_480),  # 34 × 2×4×256×2 = 34 × 4,096 ; 5 × 4,096
    ],
)
def test_gemma_hma_off_and_global_only(name, hma_off, global_only):
    on = expected_kv(arch(name), hma_enabled=True)
    off = expected_kv(arch(name), hma_enabled=False)
    assert on.bytes_per_token == global_only
    assert on.hma_off_bytes_per_token == hma_off
    assert off.bytes_per_token == hma_off


def test_gemma_3_27b_fixed_bytes_per_request():
    # 52 SWA layers × 8,192 B/token; window 1024, 2048 batched tokens, block 16:
    # reserved = (cdiv(min(1023 + 2048, L), 16) + 1) × 16 = (cdiv(3071, 16) + 1) × 16 = (192 + 1) × 16
    #          = 3,088 tokens; fixed = 52 × 8,192 × 3,088 = 425,984 × 3,088 = 1,315,438,592 B
    e = expected_kv(arch("Gemma-3-27B"), hma_enabled=True, max_num_batched_tokens=2048,
                    block_size=16, max_model_len=131_072)
    assert e.fixed_bytes_per_request == 1_315_438_592
    # one request of 131,072 tokens: 81,920 × 131,072 + 1,315,438,592
    #   = 10,737,418,240 + 1,315,438,592 = 12,052,856,832 B
    assert e.request_bytes(131_072) == 12_052_856_832


def test_deepseek_v4_flash_fp8_ds_mla():
    # 21 × (584/4 + 132/4) + 20 × 584/128 = 21 × (146 + 33) + 20 × 4.5625 = 3,759 + 91.25 = 3,850.25
    e = expected_kv(arch("DeepSeek-V4-Flash"), tp=8, vllm_version="0.22.0")
    assert e.kv_cache_dtype == "fp8_ds_mla"  # forced for auto on CUDA
    assert e.bytes_per_token == 3_850.25
    # HMA off: + 43 window caches promoted to full length: 3,850.25 + 43 × 584 = 28,962.25
    assert e.hma_off_bytes_per_token == 28_962.25
    assert e.verified is False  # catalogue facts of DSv4-Flash are third-party (†)


def test_deepseek_v4_flash_bf16_rows():
    # 21 × (1024/4 + 132/4) + 20 × 1024/128 = 21 × 289 + 160 = 6,069 + 160 = 6,229 (≈6,230)
    e = expected_kv(arch("DeepSeek-V4-Flash"), kv_cache_dtype="bf16", vllm_version="0.22.0")
    assert e.bytes_per_token == 6_229


def test_deepseek_v4_flash_ascend_layout_from_source():
    # vLLM-Ascend A2/A3: bf16 main cache (1024 B/state) + int8 indexer with one fp16 scale (128 + 2 = 130 B/state)
    # on the ratio-4 layers (vllm-ascend 0.23.0.post1 models/deepseek_v4.py:567-575, core/kv_cache_interface.py:117-121):
    # 21 × (1024/4 + 130/4) + 20 × 1024/128 = 21 × 288.5 + 160 = 6,058.5 + 160 = 6,218.5
    e = expected_kv(arch("DeepSeek-V4-Flash"), platform="npu")
    assert e.bytes_per_token == 6_218.5
    assert not any("ESTIMATE" in a for a in e.assumptions)
    assert any("130 B/state" in a for a in e.assumptions)
    assert e.verified is False  # the DSv4-Flash layer facts in the catalogue are third-party (†)
    assert e.block_size == 128  # vLLM-Ascend default


def test_deepseek_v4_log_figure_estimates():
    # block 64 (CUDA MLA default), 8192 in flight: reserved = (cdiv(127 + 8192, 64) + 1) × 64
    #   = (130 + 1) × 64 = 8,384 tokens; fixed = 43 × 584 × 8,384 = 25,112 × 8,384 = 210,539,008 B
    a = arch("DeepSeek-V4-Flash")
    long_ctx = expected_kv(a, max_model_len=1_048_576, max_num_batched_tokens=8192,
                           vllm_version="0.21.0")
    assert long_ctx.fixed_bytes_per_request == 210_539_008
    # 3,850.25 + 210,539,008 / 1,048,576 = 3,850.25 + 200.78564453125 = 4,051.03564453125 (4.0-4.1 KB)
    assert long_ctx.log_figure == pytest.approx(4_051.03564453125)
    short = expected_kv(a, max_model_len=131_072, max_num_batched_tokens=8192, vllm_version="0.21.0")
    # 3,850.25 + 210,539,008 / 131,072 = 3,850.25 + 1,606.28515625 = 5,456.53515625 (≈5.4 KB)
    assert short.log_figure == pytest.approx(5_456.53515625)


def test_deepseek_v4_on_0_20_has_no_meaningful_log_figure():
    e = expected_kv(arch("DeepSeek-V4-Flash"), max_model_len=131_072, vllm_version="0.20.1")
    assert e.log_figure is None
    assert any("meaningless" in a for a in e.assumptions)


# ------------------------------------------------------------------------------ log figure by version


def test_gpt_oss_log_figure_v0_21_with_hma():
    # window 128, 8192 batched, block 16: reserved = (cdiv(127 + 8192, 16) + 1) × 16 = (520 + 1) × 16
    #   = 8,336 tokens; fixed = 18 × 2,048 × 8,336 = 36,864 × 8,336 = 307,298,304 B
    # Z/N = 36,864 + 307,298,304 / 131,072 = 36,864 + 2,344.5 = 39,208.5  (§12: ≈ 39,200)
    e = expected_kv(arch("gpt-oss-120b"), max_model_len=131_072, max_num_batched_tokens=8192,
                    block_size=16, vllm_version="0.21.0")
    assert e.fixed_bytes_per_request == 307_298_304
    assert e.log_figure == 39_208.5
    assert abs(e.log_figure - 39_200) / 39_200 < 0.001


def test_log_figure_v0_20_is_the_all_layers_figure_even_with_hma_on():
    # §3.1: ≤0.20 N divides by the number of groups → Z/N ≈ HMA-off figure
    e = expected_kv(arch("gpt-oss-120b"), tp=2, max_model_len=131_072, vllm_version="0.15.1",
                    hma_enabled=True)
    # 36 × 2 × 4 × 64 × 2 = 36 × 1,024 = 36,864
    assert e.bytes_per_token == 18_432
    assert e.log_figure == 36_864
    # real log (v0.15.1, TP2): 77.93 GiB × 2^30 = 83,676,700,344.32 B / 2,269,888 tokens = 36,863.8
    measured = 83_676_700_344.32 / 2_269_888
    assert abs(measured - e.log_figure) / e.log_figure < 0.001


def test_gemma_2_log_figure_v0_10():
    e = expected_kv(arch("Gemma-2-9B"), vllm_version="0.10.2", max_model_len=8192)
    assert e.log_figure == 344_064  # 42 × 8,192, the HMA-off figure


def test_hybrid_log_figure_needs_max_model_len_on_new_versions():
    e = expected_kv(arch("Gemma-3-4B"), vllm_version="0.25.0")
    assert e.log_figure is None
    assert any("max_model_len" in a for a in e.assumptions)


def test_log_figure_block_padding_v0_21():
    # Llama-3.1-8B, L = 1,000, block 16: cdiv(1000, 16) × 16 = 63 × 16 = 1,008 tokens reserved
    # Z/N = 131,072 × 1,008 / 1,000 = 132,120.576
    e = expected_kv(arch("Llama-3.1-8B"), max_model_len=1_000, block_size=16, vllm_version="0.22")
    assert e.log_figure == pytest.approx(132_120.576)


def test_hma_default_off_before_0_9_1():
    e = expected_kv(arch("gpt-oss-20b"), vllm_version="0.8.5")
    # 24 layers × 2 × 8 × 64 × 2 = 24 × 2,048 = 49,152
    assert e.hma_enabled is False
    assert e.bytes_per_token == 49_152


def test_hma_default_off_on_old_ascend():
    e = expected_kv(arch("gpt-oss-20b"), vllm_version="0.9.2", platform="npu")
    assert e.hma_enabled is False
    assert e.bytes_per_token == 49_152  # 24 × 2,048


# ------------------------------------------------------------------------------ PP


def test_pp_layer_ranges_like_vllm():
    # 80 // 3 = 26, remainder 2 goes to partitions[-2] and partitions[-3]: [27, 27, 26]
    assert pp_layer_ranges(80, 3) == [(0, 27), (27, 54), (54, 80)]
    # 61 // 2 = 30, remainder 1 → partitions[-2]: [31, 30]
    assert pp_layer_ranges(61, 2) == [(0, 31), (31, 61)]
    assert pp_layer_ranges(32, 1) == [(0, 32)]


def test_pp_divides_layers_largest_stage():
    # Llama-3.1-70B PP3 TP1: stages of 27/27/26 layers × 4,096 B → 110,592 / 110,592 / 106,496;
    # the largest stage (ceil(80/3) = 27 layers) is reported
    e = expected_kv(arch("Llama-3.1-70B"), pp=3)
    assert e.per_stage_bytes_per_token == (110_592, 110_592, 106_496)
    assert e.bytes_per_token == 110_592
    # PP2 × TP4: 40 layers × 2 × 2 × 128 × 2 = 40 × 1,024 = 40,960
    assert expected_kv(arch("Llama-3.1-70B"), tp=4, pp=2).bytes_per_token == 40_960


def test_pp_hybrid_stage_counts_its_own_layers():
    # gpt-oss-120b PP2: stage 0 = layers 0-17 = 9 sliding + 9 full → 9 × 2,048 = 18,432
    e = expected_kv(arch("gpt-oss-120b"), pp=2, hma_enabled=True)
    assert e.bytes_per_token == 18_432
    assert e.hma_off_bytes_per_token == 36_864  # 18 layers × 2,048


def test_pp_mtp_goes_to_last_stage():
    # DeepSeek-V3 PP2: [31, 30] layers; + 1 MTP on the last stage → 31 and 31 layers × 1,152 = 35,712
    e = expected_kv(arch("DeepSeek-V3"), pp=2, include_mtp=True, kv_cache_dtype="bf16")
    assert e.per_stage_bytes_per_token == (35_712, 35_712)


# ------------------------------------------------------------------------------ helpers


def test_swa_reserved_tokens():
    # (cdiv(4095 + 8192, 16) + 1) × 16 = (cdiv(12287, 16) + 1) × 16 = (768 + 1) × 16 = 12,304
    assert swa_reserved_tokens(4096, 8192, 16) == 12_304
    # capped by max_model_len 2,048: (cdiv(2048, 16) + 1) × 16 = 129 × 16 = 2,064
    assert swa_reserved_tokens(4096, 8192, 16, max_model_len=2048) == 2_064
    # block 128: (cdiv(127 + 8192, 128) + 1) × 128 = (65 + 1) × 128 = 8,448
    assert swa_reserved_tokens(128, 8192, 128) == 8_448


@pytest.mark.parametrize(
    "name, expected",
    [("fp8", 1), ("fp8_e4m3", 1), ("fp8_e5m2", 1), ("fp8_ds_mla", 1), ("auto", 2), ("bf16", 2),
     ("bfloat16", 2), ("float16", 2), ("fp16", 2), ("torch.bfloat16", 2)],
)
def test_kv_dtype_bytes(name, expected):
    assert kv_dtype_bytes(name) == expected


def test_kv_dtype_bytes_unknown():
    with pytest.raises(ValueError):
        kv_dtype_bytes("int3")


def test_parse_vllm_version():
    assert parse_vllm_version("0.10.2") == (0, 10, 2)
    assert parse_vllm_version("v0.11.1rc3") == (0, 11, 1)
    assert parse_vllm_version("0.13.0+faa43dbf.nv26.01") == (0, 13, 0)
    assert parse_vllm_version("0.22") == (0, 22, 0)
    assert parse_vllm_version(None) is None
    assert parse_vllm_version("dev") is None


def test_request_bytes_max_model_len_alarm():
    # Llama-3.1-70B TP4 at 131,072 tokens: 81,920 × 131,072 = 10,737,418,240 B = 10.0 GiB (≈10.7 GB)
    e = expected_kv(arch("Llama-3.1-70B"), tp=4)
    assert e.request_bytes(131_072) == 10_737_418_240
    assert e.request_bytes(131_072) / GIB == 10.0


# ------------------------------------------------------------------------------ from_hf_config


def test_from_hf_config_head_dim_from_hidden_size():
    cfg = {"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "hidden_size": 4096}
    a = from_hf_config(cfg, name="x")
    assert (a.num_kv_heads, a.head_dim) == (8, 128)  # 4096 / 32 = 128
    assert expected_kv(a).bytes_per_token == 131_072  # 32 × 2 × 8 × 128 × 2


def test_from_hf_config_mha_without_kv_heads_key():
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256}
    a = from_hf_config(cfg)
    assert a.num_kv_heads == 4 and a.head_dim == 64
    assert expected_kv(a).bytes_per_token == 2_048  # 2 × 2 × 4 × 64 × 2


def test_qwen2_sliding_window_only_when_enabled():
    base = {"model_type": "qwen2", "num_hidden_layers": 28, "num_attention_heads": 28,
            "num_key_value_heads": 4, "hidden_size": 3584, "sliding_window": 4096,
            "max_window_layers": 20}
    off = from_hf_config({**base, "use_sliding_window": False})
    assert off.kind_counts == {"full": 28}
    on = from_hf_config({**base, "use_sliding_window": True})
    # layers >= max_window_layers (20..27) are sliding: 8 sliding, 20 full
    assert on.kind_counts == {"full": 20, "sliding": 8}
    assert [s.kind for s in on.layers[19:21]] == [KIND_FULL, KIND_SLIDING]


def test_mistral_v0_1_every_layer_sliding():
    cfg = {"model_type": "mistral", "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "hidden_size": 4096, "sliding_window": 4096}
    a = from_hf_config(cfg, name="Mistral-7B-v0.1")
    assert a.kind_counts == {"sliding": 32}
    assert a.is_hybrid is False
    e = expected_kv(a, hma_enabled=False, max_num_batched_tokens=8192, block_size=16,
                    vllm_version="0.22.0", max_model_len=32_768)
    # uniform window spec stays windowed even with HMA off: no per-context-token cost
    assert e.bytes_per_token == 0
    # 32 × 4,096 B/token × (cdiv(4095 + 8192, 16) + 1) × 16 = 131,072 × 12,304 = 1,612,709,888 B
    assert e.fixed_bytes_per_request == 1_612_709_888
    # ≤0.20: N = num_blocks × block_size → Z/N = all layers = 131,072
    assert expected_kv(a, vllm_version="0.10.2").log_figure == 131_072


def test_gemma2_even_layers_sliding():
    cfg = {"model_type": "gemma2", "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 4, "head_dim": 256, "hidden_size": 2304, "sliding_window": 4096}
    a = from_hf_config(cfg)
    assert [s.kind for s in a.layers] == [KIND_SLIDING, KIND_FULL, KIND_SLIDING, KIND_FULL]


def test_gemma3_nested_text_config_and_default_pattern():
    cfg = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
           "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 12,
                           "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                           "hidden_size": 2560, "sliding_window": 1024},
           "vision_config": {"hidden_size": 1152}}
    a = from_hf_config(cfg)
    # no sliding_window_pattern → 6: layers 5 and 11 global
    assert [i for i, s in enumerate(a.layers) if s.kind == KIND_FULL] == [5, 11]
    assert a.layers[0].sliding_window == 1024


def test_gpt_oss_without_layer_types_alternates():
    cfg = {"model_type": "gpt_oss", "num_hidden_layers": 4, "num_attention_heads": 64,
           "num_key_value_heads": 8, "head_dim": 64, "hidden_size": 2880, "sliding_window": 128}
    a = from_hf_config(cfg)
    assert [s.kind for s in a.layers] == [KIND_SLIDING, KIND_FULL, KIND_SLIDING, KIND_FULL]


def test_generic_layer_types_with_linear_attention():
    cfg = {"model_type": "qwen3_next", "num_hidden_layers": 4, "num_attention_heads": 16,
           "num_key_value_heads": 2, "head_dim": 256, "hidden_size": 2048,
           "layer_types": ["linear_attention"] * 3 + ["full_attention"],
           "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
           "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}
    a = from_hf_config(cfg)
    assert a.kind_counts == {"mamba": 3, "full": 1}
    assert a.is_hybrid
    # state per layer: conv (4-1) × (2×16×128 + 32×128) × 2 = 3 × 8,192 × 2 = 49,152
    #                  + recurrent 32 × 128 × 128 × 2 = 1,048,576 → 1,097,728 B
    assert a.layers[0].kind == KIND_MAMBA and a.layers[0].state_bytes_per_request == 1_097_728
    e = expected_kv(a, tp=1)
    assert e.bytes_per_token == 2_048  # 1 full layer × 2 × 2 × 256 × 2
    assert e.fixed_bytes_per_request == 3 * 1_097_728
    assert e.verified is False


def test_deepseek_v2_config_no_mtp_and_v32_sparse():
    cfg = {"model_type": "deepseek_v2", "num_hidden_layers": 60, "num_attention_heads": 128,
           "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    a = from_hf_config(cfg)
    assert a.num_mtp_layers == 0 and a.family == "deepseek-mla"
    v32 = from_hf_config({**cfg, "model_type": "deepseek_v32", "num_hidden_layers": 61,
                          "index_topk": 2048, "num_nextn_predict_layers": 1})
    # fp8_ds_mla: (656 + 132 indexer) × 61 = 788 × 61 = 48,068
    assert expected_kv(v32, kv_cache_dtype="fp8_ds_mla").bytes_per_token == 48_068


def test_deepseek_v4_config_parsing():
    cfg = {"model_type": "deepseek_v4", "num_hidden_layers": 4, "num_attention_heads": 4,
           "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64,
           "sliding_window": 128, "compress_ratios": [0, 4, 128, 4]}
    a = from_hf_config(cfg)
    # fp8_ds_mla: 2 × (584/4 + 132/4) + 584/128 = 2 × 179 + 4.5625 = 362.5625
    assert expected_kv(a).bytes_per_token == 362.5625
    with pytest.raises(UnknownArchitecture):
        from_hf_config({**cfg, "compress_ratios": [0, 4]})


@pytest.mark.parametrize(
    "cfg",
    [
        {"model_type": "bert", "num_hidden_layers": 12, "num_attention_heads": 12, "hidden_size": 768},
        {"model_type": "llama", "num_attention_heads": 32, "hidden_size": 4096},  # no layers
        {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
         "hidden_size": 64, "layer_types": ["full_attention", "cross_attention"]},
        {"model_type": "gemma2", "num_hidden_layers": 2, "num_attention_heads": 4,
         "hidden_size": 64},  # sliding layers but no window
        {"model_type": "llama4_text", "num_hidden_layers": 2, "num_attention_heads": 4,
         "hidden_size": 64, "layer_types": ["chunked_attention", "full_attention"]},  # not modelled
    ],
)
def test_unknown_architecture_raises(cfg):
    with pytest.raises(UnknownArchitecture) as exc:
        from_hf_config(cfg)
    assert str(exc.value)


def test_load_hf_config_from_directory(tmp_path):
    model_dir = tmp_path / "Qwen3-8B"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "hidden_size": 4096, "use_sliding_window": False, "sliding_window": None}))
    a = load_hf_config(model_dir)
    assert a.name == "Qwen3-8B"
    assert expected_kv(a).bytes_per_token == 147_456  # 36 × 2 × 8 × 128 × 2
    assert load_hf_config(model_dir / "config.json").num_layers == 36


# ------------------------------------------------------------------------------ lookup_model


@pytest.mark.parametrize(
    "logged, expected",
    [
        ("meta-llama/Llama-3.1-70B-Instruct", "Llama-3.1-70B"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
        ("meta-llama/Llama-3.3-70B-Instruct", "Llama-3.1-70B"),
        ("/models/Qwen3-32B-FP8", "Qwen3-32B"),
        ("Qwen/Qwen3-32B-AWQ", "Qwen3-32B"),
        ("deepseek-ai/DeepSeek-V3", "DeepSeek-V3"),
        ("deepseek-ai/DeepSeek-V3-0324", "DeepSeek-V3"),
        ("deepseek-ai/DeepSeek-R1-0528", "DeepSeek-R1"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "Qwen2.5-32B"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "Qwen2.5-14B"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "Qwen2.5-7B"),
        ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "Llama-3.1-8B"),
        ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "Llama-3.1-70B"),
        ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", "Qwen2.5-72B"),
        ("Qwen2___5-7B-Instruct", "Qwen2.5-7B"),
        ("/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/abc", "Qwen2.5-7B"),
        ("google/gemma-3-27b-it", "Gemma-3-27B"),
        ("google/gemma-2-9b-it", "Gemma-2-9B"),
        ("mistralai/Mistral-7B-Instruct-v0.3", "Mistral-7B-v0.3"),
        ("/gpt-oss-120b", "gpt-oss-120b"),
        ("openai/gpt-oss-20b", "gpt-oss-20b"),
        ("deepseek-ai/DeepSeek-V4-Flash", "DeepSeek-V4-Flash"),
        ("unsloth/Llama-3.2-3B-Instruct-bnb-4bit", "Llama-3.2-3B"),
        ("models/qwen3-0.6b/", "Qwen3-0.6B"),
    ],
)
def test_lookup_model(logged, expected):
    found = lookup_model(logged)
    assert found is not None, logged
    assert found.name == expected


@pytest.mark.parametrize(
    "logged",
    [
        "Qwen/Qwen3-VL-32B-Instruct",  # not Qwen3-32B
        "Qwen/Qwen3-30B-A3B-FP8",
        "/opt/llm/deepseek-r1-14b",  # ambiguous: neither R1 nor a named distill
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",  # no Qwen2.5-1.5B entry
        "llava-hf/llava-v1.6-mistral-7b-hf",
        "",
    ],
)
def test_lookup_model_no_false_match(logged):
    assert lookup_model(logged) is None


def test_distill_is_not_mla():
    a = lookup_model("DeepSeek-R1-Distill-Qwen-32B")
    assert a.family == "qwen2"
    assert expected_kv(a, tp=4).bytes_per_token == 65_536  # 64 × 2 × 2 × 128 × 2


def test_normalise_model_name():
    assert normalise_model_name("meta-llama/Meta-Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    assert normalise_model_name("/models/Qwen3-32B-FP8") == "qwen3-32b"
    assert normalise_model_name("Qwen/Qwen3-VL-32B-Instruct") == "qwen3-vl-32b"


# ------------------------------------------------------------------------------ explain_mismatch


def test_explain_small_difference_is_block_padding():
    # real log: Qwen3-32B TP4, vLLM 0.10.0: 52.21 GiB × 2^30 = 56,060,060,631.04 B / 855,344 tokens
    #   = 65,540.95 B/token vs 65,536 expected (+0.008 %)
    e = expected_kv(arch("Qwen3-32B"), tp=4, vllm_version="0.10.0")
    msgs = explain_mismatch(56_060_060_631.04 / 855_344, e)
    assert len(msgs) == 1 and "block padding" in msgs[0]


def test_explain_ratio_two_is_dtype():
    e = expected_kv(arch("Llama-3.1-8B"), kv_cache_dtype="fp8")  # 65,536
    msgs = explain_mismatch(131_072, e)  # ratio 2
    assert any("fp8" in m for m in msgs)


def test_explain_ratio_half_is_double_counted_device():
    e = expected_kv(arch("Llama-3.1-8B"))  # 131,072
    msgs = explain_mismatch(65_536, e)  # ratio 0.5
    assert any("double-counted" in m for m in msgs)


def test_explain_hma_off():
    # expected ≥0.21 with HMA on: 39,208.5; measured the all-layer figure 73,728 (ratio 1.88,
    # = hma_off / expected = 73,728 / 39,208.5)
    e = expected_kv(arch("gpt-oss-120b"), max_model_len=131_072, max_num_batched_tokens=8192,
                    block_size=16, vllm_version="0.22.0")
    msgs = explain_mismatch(73_728, e)
    assert any("hybrid KV cache manager is off" in m for m in msgs)


def test_explain_hma_on_with_new_semantics():
    # Gemma-3-27B assumed ≤0.20: expected log figure = all 62 layers = 507,904.
    # The log really shows the ≥0.21 effective figure at L = 131,072, 8192 batched, block 16:
    #   reserved = (cdiv(1023 + 8192, 16) + 1) × 16 = (576 + 1) × 16 = 9,232 tokens
    #   fixed = 52 × 8,192 × 9,232 = 425,984 × 9,232 = 3,932,684,288 B
    #   Z/N = 81,920 + 3,932,684,288 / 131,072 = 81,920 + 30,004 = 111,924 (ratio 0.2204)
    e = expected_kv(arch("Gemma-3-27B"), vllm_version="0.20.0", max_model_len=131_072,
                    max_num_batched_tokens=8192, block_size=16)
    assert e.log_figure == 507_904
    assert e.bytes_per_token + e.fixed_bytes_per_request / 131_072 == 111_924
    msgs = explain_mismatch(111_924, e)
    assert any("≥0.21 semantics" in m for m in msgs)


def test_explain_ratio_tp():
    e = expected_kv(arch("Llama-3.1-70B"), tp=4)  # 81,920
    msgs = explain_mismatch(327_680, e)  # ratio 4 = TP
    assert any("TP=4" in m for m in msgs)


def test_explain_within_tolerance_and_unknown():
    e = expected_kv(arch("Llama-3.1-8B"))
    assert "within 25%" in explain_mismatch(131_072 * 1.10, e)[0]
    assert "no single known factor" in explain_mismatch(131_072 * 3.0, e)[0]


def test_expected_kv_returns_assumptions():
    e = expected_kv(arch("gpt-oss-120b"), max_model_len=131_072)
    assert isinstance(e, ExpectedKV)
    assert any("8192 assumed" in a for a in e.assumptions)  # batched tokens defaulted
    assert any("version unknown" in a for a in e.assumptions)


def test_lookup_model_builds_only_the_entry_it_finds_and_answers_as_a_scan_of_the_catalogue() -> None:
    """`lookup_model` builds the one entry a log names (docs/performance.md, "Session 9: small-analyze start-up"),
    and finds what the first-match scan of every entry found."""
    from kvlogdiag.derive import architecture as arch_mod

    arch_mod._entry.cache_clear()
    arch_mod.catalogue_entries.cache_clear()
    try:
        got = arch_mod.lookup_model("/models/Qwen/Qwen3-8B")
        assert got is not None and arch_mod._entry.cache_info().currsize == 1
        entries = arch_mod.catalogue_entries()
        assert got is arch_mod.lookup_model("Qwen/Qwen3-8B") is next(e.arch for e in entries if e.name == got.name)

        def scan(name: str):  # what lookup_model did before
            key = arch_mod.normalise_model_name(name)
            return next((e.arch for e in entries if key in e.aliases), None)

        names = [a for e in entries for a in (e.name, *e.aliases)] + ["meta-llama/Meta-Llama-3.1-8B-Instruct",
                                                                      "nonexistent/model-7b", "", "Qwen3-VL-32B"]
        assert len(names) > 40
        for name in names:
            if arch_mod._DISTILL_QWEN.match(arch_mod.normalise_model_name(name) if name else ""):
                continue  # the distill names map to another key first (same in both)
            assert lookup_model(name) is scan(name), name
    finally:
        arch_mod._entry.cache_clear()
        arch_mod.catalogue_entries.cache_clear()
