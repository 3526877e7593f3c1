"""Platform from evidence (kvlogdiag/extract/platform.py + catalogue/devices.toml), never guessed: each
evidence kind gives its platform and says where it stands; placeholders, lone short model numbers and
disagreeing prose give nothing; a log line beats a command, a command beats prose."""

from __future__ import annotations

import pytest

from kvlogdiag.extract.platform import evidence, line_kind, table

# real lines (sample_logs/v1_single_gpu.log) that name no platform
TAIL = """\
(EngineCore_DP0 pid=3090) INFO 10-20 13:42:18 [gpu_worker.py:298] Available KV cache memory: 53.91 GiB
(EngineCore_DP0 pid=3090) INFO 10-20 13:42:18 [kv_cache_utils.py:1087] GPU KV cache size: 1,009,456 tokens
"""

CASES = [
    # (what, line, platform, kind)
    ("nvidia-smi row", "|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:07:00.0 Off |                    0 |", "cuda", "log"),
    ("nvidia-smi head", "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |", "cuda", "log"),
    ("npu-smi row", "| 0     910B3               | OK            | 93.4        36                0    / 0             |", "npu", "log"),
    ("rocm-smi banner", "============================ ROCm System Management Interface ============================", "rocm", "log"),
    ("rocm-smi card", "GPU[0]\t\t: Card series: \t\tAMD Instinct MI300X", "rocm", "log"),
    ("collect_env", "GPU 0: NVIDIA GeForce RTX 4090", "cuda", "log"),
    ("env Ascend", "export ASCEND_RT_VISIBLE_DEVICES=0,1,2,3", "npu", "command"),
    ("env HIP", "HIP_VISIBLE_DEVICES=0 vllm serve Qwen/Qwen2.5-7B", "rocm", "command"),
    ("env Habana", "HABANA_VISIBLE_DEVICES=all vllm serve Qwen/Qwen2.5-7B", "hpu", "command"),
    ("file rocm.py", "(EngineCore_DP0 pid=1) INFO 10-20 13:41:30 [rocm.py:250] Using Triton MLA backend", "rocm", "log"),
    ("file tpu_worker.py", "INFO 10-20 13:41:30 [tpu_worker.py:120] Compiling the model", "tpu", "log"),
    ("file xpu_worker.py", "INFO 10-20 13:41:30 [xpu_worker.py:120] Memory profiling takes 3 s", "xpu", "log"),
    ("file hpu_worker.py", "INFO 10-20 13:41:30 [hpu_worker.py:120] Memory profiling takes 3 s", "hpu", "log"),
    ("vLLM error text", "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
                        "Your Tesla T4 GPU has compute capability 7.5.", "cuda", "log"),
    ("traceback frame", '  File "/opt/venv/lib/python3.12/site-packages/vllm/worker/xpu_worker.py", line 82, in init_device',
     "xpu", "log"),
    ("image rocm", "docker run --device /dev/kfd rocm/vllm:latest vllm serve Qwen/Qwen2.5-7B", "rocm", "command"),
    ("image tpu", "docker run --privileged vllm/vllm-tpu:nightly vllm serve Qwen/Qwen2.5-7B", "tpu", "command"),
]


@pytest.mark.parametrize("what, line, platform, kind", CASES, ids=[c[0] for c in CASES])
def test_evidence_kind(what, line, platform, kind, analyze_text):
    a = analyze_text(line + "\n" + TAIL)
    assert a["vllm"]["platform"] == platform
    assert a["provenance"]["vllm.platform"]["kind"] == kind
    assert a["provenance"]["vllm.platform"]["line"] == 1


@pytest.mark.parametrize("line", [
    "CUDA_VISIBLE_DEVICES= vllm serve Qwen/Qwen2.5-7B",  # empty: no device
    "CUDA_VISIBLE_DEVICES=-1 vllm serve Qwen/Qwen2.5-7B",
    "CUDA_VISIBLE_DEVICES=<gpu ids> vllm serve Qwen/Qwen2.5-7B",  # a template
    "ASCEND_RT_VISIBLE_DEVICES=$DEVICES vllm serve Qwen/Qwen2.5-7B",
    "MacBook with Apple M2 Max",  # in-tree CPU or the vllm-metal plugin: the chip does not say
    "Table T4 shows the results",  # a short model number without GPU context
    "works on A100 but fails on MI300X",  # prose naming two platforms
    "see docs/install.md for vx.x.x",
    # weak evidence alone: ROCm honours CUDA_VISIBLE_DEVICES too
    "CUDA_VISIBLE_DEVICES=0,1 vllm serve Qwen/Qwen2.5-7B",
])
def test_no_evidence_no_platform(line, analyze_text):
    a = analyze_text(line + "\n" + TAIL)
    assert a["vllm"]["platform"] is None and "vllm.platform" not in a["provenance"]


# a device the reporter names in prose: recognised (the table knows it) but it does not set the platform
PROSE = [
    ("prose data-centre", "I am running this on 8x H100 80GB", "cuda"),
    ("prose consumer", "My card is an RTX 3090", "cuda"),
    ("prose AMD", "Hardware: 8 x AMD Instinct MI300X", "rocm"),
    ("prose Ascend", "Running on Atlas 800T A2 with Ascend910B4", "npu"),
    ("prose Ascend 310", "an Ascend 310P3 card", "npu"),
    ("prose Gaudi", "Hardware: Intel Gaudi 2 (HL-225)", "hpu"),
    ("prose Arc", "GPU: Intel(R) Arc(TM) A770 Graphics", "xpu"),
    ("prose Max", "on an Intel(R) Data Center GPU Max 1550", "xpu"),
    ("prose TPU", "Running on a TPU v5e-8 (v5litepod-8)", "tpu"),
    ("short model with GPU", "I use a T4 GPU", "cuda"),
]


@pytest.mark.parametrize("what, line, platform", PROSE, ids=[c[0] for c in PROSE])
def test_a_device_named_in_prose_is_recognised_but_does_not_set_the_platform(what, line, platform, analyze_text):
    assert platform in {e.platform for e in evidence(line)}
    a = analyze_text(line + "\n" + TAIL)
    assert a["vllm"]["platform"] is None and "vllm.platform" not in a["provenance"]


def test_log_line_beats_prose_and_command(analyze_text):
    a = analyze_text("I have an RTX 4090\nCUDA_VISIBLE_DEVICES=0 vllm serve Qwen/Qwen2.5-7B\n"
                     "INFO 05-01 10:00:00 [__init__.py:235] Automatically detected platform rocm.\n" + TAIL)
    assert a["vllm"]["platform"] == "rocm"
    assert a["provenance"]["vllm.platform"] == {"line": 3, "rank": None, "source": "platform_line", "kind": "log"}


def test_command_beats_prose(analyze_text):
    a = analyze_text("We use MI300X cards\nASCEND_RT_VISIBLE_DEVICES=0 vllm serve Qwen/Qwen2.5-7B\n" + TAIL)
    assert a["vllm"]["platform"] == "npu" and a["provenance"]["vllm.platform"]["kind"] == "command"


def test_strong_beats_weak_in_one_command(analyze_text):
    # HIP honours CUDA_VISIBLE_DEVICES too: on ROCm both are often set
    a = analyze_text("CUDA_VISIBLE_DEVICES=0 HIP_VISIBLE_DEVICES=0 vllm serve Qwen/Qwen2.5-7B\n" + TAIL)
    assert a["vllm"]["platform"] == "rocm"


def test_markdown_table_is_prose_not_tool_output():
    assert line_kind("| `Using backend FLASH_ATTN` | 单卡 A100 默认注意力后端 |") == "prose"
    assert line_kind("|   0  NVIDIA H100 80GB HBM3   On  | 00000000:18:00.0 Off |   0 |") == "log"


def test_table_lists_every_platform_family():
    t = table()
    plats = {e["platform"] for e in t["device"]}
    assert plats == {"cuda", "rocm", "npu", "hpu", "xpu", "tpu", ""}
    assert {e["name"] for e in t["env"]} >= {"CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"}
    assert evidence("no device named here") == []
