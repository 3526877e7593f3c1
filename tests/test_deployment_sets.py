"""The multi-node sample sets of ``sample_logs/deployments/``: how they are rendered, and that they are.

Each set is a directory of format-exact logs (vLLM 0.23.0 + vLLM-Ascend 0.23.0.post1 line formats:
the ``[file:line]`` and format strings of the official DeepSeek-V4-Flash PD tutorial logs in
``tests/data/healthy/ascend023_dsv4flash_a3_pd_*.log``, whose engine-config line is the template here,
and of ``ascend023_recompute_offload_d_node.log`` for RecomputeCPUOffloadConnector), one file per node
named ``<host>__<node>.log``, and a README.md line saying what the set is. KV figures are designed:
DeepSeek-V4-Flash at 6,573.25 B/token per rank (the tutorial's figure, TP-independent: the latent is
replicated), so ``tokens = floor(GiB x 2**30 / 6573.25)``.

``python tests/test_deployment_sets.py`` rewrites the sets; the test below fails when a committed
file differs from its rendering (the sets are data, this is their source).
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "sample_logs" / "deployments"
TUTORIAL_P = ROOT / "tests" / "data" / "healthy" / "ascend023_dsv4flash_a3_pd_prefill.log"
TUTORIAL_D = ROOT / "tests" / "data" / "healthy" / "ascend023_dsv4flash_a3_pd_decode.log"
MODEL = "/data/models/DeepSeek-V4-Flash-w8a8"
BPT = 6573.25


@dataclass
class NodeSpec:
    """One node's launch settings and what its log shows."""

    file: str
    kv_role: str
    tp: int = 4
    dp: int = 2
    dp_ranks: tuple[int, ...] = (0, 1)  # DP ranks whose engines print in this log
    dp_address: str | None = None  # external DP launch (one log per DP rank): --data-parallel-address
    block_size: int = 128
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 8192
    port: int = 8000
    kv_port: int = 30000
    engine_id: str = "dsv4-p"
    declared: tuple[int, int, int, int] = (2, 4, 2, 4)  # prefill dp, tp, decode dp, tp
    offloading_blocks: int | None = None  # OffloadingConnector NPUOffloadingSpec num_cpu_blocks
    rco_per_rank: int | None = None  # RecomputeCPUOffloadConnector cpu_bytes_to_use_per_rank
    recompute: bool = False
    version: str = "0.23.0"
    kv_gib: tuple[float, ...] = (29.28, 29.24)
    pid: int = 6100
    extra_lines: list[str] = field(default_factory=list)
    # stats lines after start-up: (prompt tokens/s, generation tokens/s, running, KV usage %), each printed by
    # every DP engine of the log (vLLM 0.23.0 loggers.py:271 format)
    stats: tuple[tuple[float, float, int, float], ...] = ()
    # another model than DeepSeek-V4-Flash (a dense one: no expert parallelism), its KV bytes per token per rank
    model: str = MODEL
    arch: str = "DeepseekV4ForCausalLM"
    bpt: float = BPT
    max_model_len: int = 1048576


def _ts(sec: int) -> str:
    return f"11-21 14:{sec // 60:02d}:{sec % 60:02d}"


def _engine_line(n: NodeSpec) -> str:
    line = next(x for x in TUTORIAL_P.read_text(encoding="utf-8").splitlines() if "Initializing a V1 LLM engine" in x)
    tut_model = "/root/.cache/modelscope/hub/models/vllm-ascend/DeepSeek-V4-Flash-w8a8-mtp"
    line = line.replace(f"speculative_config=SpeculativeConfig(method='mtp', model='{tut_model}', num_spec_tokens=1)",
                        "speculative_config=None")
    line = line.replace(tut_model, MODEL).replace("served_model_name=['dsv4']", "served_model_name=['dsv4-flash']")
    line = line.replace("(v0.23.0)", f"(v{n.version})")
    line = re.sub(r"tensor_parallel_size=\d+", f"tensor_parallel_size={n.tp}", line)
    line = re.sub(r"data_parallel_size=\d+", f"data_parallel_size={n.dp}", line)
    line = line.replace("enforce_eager=True", "enforce_eager=False")
    line = line.replace("enable_prefix_caching=False", "enable_prefix_caching=True")
    return re.sub(r"^\(EngineCore_DP0 pid=\d+\) INFO \S+ \S+", "", line)


def _args(n: NodeSpec) -> str:
    pd, pt, dd, dt = n.declared
    mooncake = (f"{{'kv_connector': 'MooncakeConnectorV1', 'kv_role': '{n.kv_role}', 'kv_port': '{n.kv_port}', "
                f"'kv_connector_extra_config': {{'prefill': {{'dp_size': {pd}, 'tp_size': {pt}}}, "
                f"'decode': {{'dp_size': {dd}, 'tp_size': {dt}}}}}}}")
    kids = [mooncake]
    if n.offloading_blocks:
        kids.append(f"{{'kv_connector': 'OffloadingConnector', 'kv_role': '{n.kv_role}', 'kv_connector_extra_config': "
                    f"{{'num_cpu_blocks': {n.offloading_blocks}, 'block_size': 128, 'spec_name': 'NPUOffloadingSpec', "
                    "'spec_module_path': 'vllm_ascend.kv_offload.npu'}}")
    if n.rco_per_rank:
        kids.append(f"{{'kv_connector': 'RecomputeCPUOffloadConnector', 'kv_role': '{n.kv_role}', "
                    f"'kv_connector_extra_config': {{'cpu_bytes_to_use_per_rank': {n.rco_per_rank}}}}}")
    ktc = (f"KVTransferConfig(kv_connector='MultiConnector', engine_id='{n.engine_id}', kv_buffer_device='npu', "
           f"kv_buffer_size=1000000000.0, kv_role='{n.kv_role}', kv_rank=None, kv_parallel_size=1, kv_ip='127.0.0.1', "
           f"kv_port={n.kv_port - 15421}, kv_connector_extra_config={{'connectors': [{', '.join(kids)}]}}, "
           "kv_connector_module_path=None, enable_permute_local_kv=False, kv_load_failure_policy='fail')")
    dp = f"'data_parallel_size': {n.dp}"
    if n.dp_address:
        dp += f", 'data_parallel_rank': {n.dp_ranks[0]}, 'data_parallel_address': '{n.dp_address}', 'data_parallel_rpc_port': 12321"
    extra = "'enable_shared_expert_dp': True" + (", 'recompute_scheduler_enable': True" if n.recompute else "")
    return (f"{{'model_tag': '{MODEL}', 'host': '0.0.0.0', 'port': {n.port}, 'model': '{MODEL}', 'trust_remote_code': True, "
            f"'max_model_len': 1048576, 'quantization': 'ascend', 'served_model_name': ['dsv4-flash'], "
            f"'tensor_parallel_size': {n.tp}, {dp}, 'enable_expert_parallel': True, 'block_size': {n.block_size}, "
            f"'gpu_memory_utilization': 0.9, 'max_num_batched_tokens': {n.max_num_batched_tokens}, "
            f"'max_num_seqs': {n.max_num_seqs}, 'disable_hybrid_kv_cache_manager': False, "
            f"'kv_transfer_config': {ktc}, 'additional_config': {{{extra}}}}}")


def render(n: NodeSpec) -> str:
    """The log of one node."""
    api = f"(APIServer pid={n.pid})"
    out = [f"INFO {_ts(5)} [__init__.py:44] Available plugins for group vllm.platform_plugins:",
           f"INFO {_ts(5)} [__init__.py:46] - ascend -> vllm_ascend:register",
           f"INFO {_ts(5)} [__init__.py:49] All plugins in this group will be loaded. Set `VLLM_PLUGINS` to control which plugins to load.",
           f"INFO {_ts(5)} [__init__.py:238] Platform plugin ascend is activated"]
    logo = ["", "       █     █     █▄   ▄█", f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {n.version}",
            f"  █▄█▀ █     █     █     █  model   {MODEL}", "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀", ""]
    out += [f"{api} INFO {_ts(9)} [api_utils.py:339] {x}" for x in logo]
    out.append(f"{api} INFO {_ts(9)} [api_utils.py:273] non-default args: {_args(n)}")
    out += [f"{api} INFO {_ts(10)} [model.py:611] Resolved architecture: DeepseekV4ForCausalLM",
            f"{api} INFO {_ts(10)} [model.py:1745] Using max model len 1048576"]
    if n.recompute and n.kv_role == "kv_producer":
        out.append(f"{api} WARNING {_ts(10)} [platform.py:693] recompute_scheduler_enable is ignored on PD-disaggregated P "
                   "nodes (kv_role='kv_producer') and will be deprecated on P nodes in a future release. Please remove it "
                   "from P-node configs and keep it only on PD-disaggregated D nodes (kv_role='kv_consumer').")
    out.append(f"{api} INFO {_ts(10)} [scheduler.py:239] Chunked prefill is enabled with max_num_batched_tokens={n.max_num_batched_tokens}.")
    engine = _engine_line(n)
    for i, r in enumerate(n.dp_ranks):
        out.append(f"(EngineCore_DP{r} pid={n.pid + 200 + i}) INFO {_ts(25)}{engine}")
    for i, r in enumerate(n.dp_ranks):
        for t in range(n.tp):
            ep = f"_EP{r * n.tp + t}" if n.model == MODEL else ""  # vLLM names the EP rank only with expert parallelism
            out.append(f"(Worker_DP{r}_TP{t}{ep} pid={n.pid + 400 + i * n.tp + t}) INFO {_ts(37)} "
                       f"[model_runner_v1.py:3796] Loading model weights took {19.64 + 0.0011 * t:.4f} GB")
    for i, r in enumerate(n.dp_ranks):
        gib = n.kv_gib[i % len(n.kv_gib)]
        ep = f"_EP{r * n.tp}" if n.model == MODEL else ""
        out.append(f"(Worker_DP{r}_TP0{ep} pid={n.pid + 400 + i * n.tp}) INFO {_ts(107)} [worker.py:593] "
                   f"Available KV cache memory: {gib:.2f} GiB")
    for i, r in enumerate(n.dp_ranks):
        gib = n.kv_gib[i % len(n.kv_gib)]
        tokens = math.floor(gib * 2**30 / n.bpt)
        eng = f"(EngineCore_DP{r} pid={n.pid + 200 + i})"
        if n.rco_per_rank:
            per = n.rco_per_rank / 2**30
            out.append(f"{eng} WARNING {_ts(108)} [recompute_cpu_offload_connector.py:64] cpu_bytes_to_use_per_rank "
                       f"({per:.2f} GB) != cpu_bytes_to_use/world_size ({8 / n.tp:.2f} GB). Using per-rank value.")
            out.append(f"{eng} INFO {_ts(108)} [recompute_cpu_offload_connector.py:75] RecomputeCPUOffloadConnector: "
                       f"role=KVConnectorRole.SCHEDULER, per_rank={per:.2f} GB, world_size={n.tp}, offload_prefix_caching=False")
        out.append(f"{eng} INFO {_ts(109)} [kv_cache_utils.py:1744] GPU KV cache size: {tokens:,} tokens")
        out.append(f"{eng} INFO {_ts(109)} [kv_cache_utils.py:1745] Maximum concurrency for 1,048,576 tokens per request: "
                   f"{tokens / 1048576:.2f}x")
    for i, r in enumerate(n.dp_ranks):
        out.append(f"(EngineCore_DP{r} pid={n.pid + 200 + i}) INFO {_ts(139)} [core.py:313] init engine (profile, create "
                   "kv cache, warmup model) took 171.40 s")
    out += n.extra_lines
    out += [f"{api} INFO {_ts(142)} [api_server.py:583] Starting vLLM server on http://0.0.0.0:{n.port}",
            f"INFO:     Started server process [{n.pid}]", "INFO:     Waiting for application startup.",
            "INFO:     Application startup complete."]
    for k, (prompt, gen, running, usage) in enumerate(n.stats):
        for r in n.dp_ranks:
            out.append(f"{api} INFO {_ts(152 + 10 * k)} [loggers.py:271] Engine {r:03d}: Avg prompt throughput: {prompt:.1f} "
                       f"tokens/s, Avg generation throughput: {gen:.1f} tokens/s, Running: {running} reqs, Waiting: 0 reqs, "
                       f"GPU KV cache usage: {usage:.1f}%, Prefix cache hit rate: 0.0%")
    text = "\n".join(out) + "\n"
    if n.model != MODEL:
        text = (text.replace(MODEL, n.model).replace("DeepseekV4ForCausalLM", n.arch)
                .replace("tokenizer_mode=deepseek_v4", "tokenizer_mode=auto").replace("'enable_expert_parallel': True, ", "")
                .replace("enable_expert_parallel=True", "enable_expert_parallel=False")
                .replace("'served_model_name': ['dsv4-flash']", "'served_model_name': ['qwen3-32b']")
                .replace("served_model_name=['dsv4-flash']", "served_model_name=['qwen3-32b']"))
    if n.max_model_len != 1048576:
        text = (text.replace("1048576", str(n.max_model_len)).replace("1,048,576", f"{n.max_model_len:,}"))
    return text


GIB16 = 17179869184
P = NodeSpec("a3-p0__p0.log", "kv_producer", engine_id="dsv4-p", offloading_blocks=20000, kv_port=30000, pid=6100)
D = NodeSpec("a3-d0__d0.log", "kv_consumer", engine_id="dsv4-d", rco_per_rank=GIB16, recompute=True, kv_port=30100,
             max_num_seqs=32, max_num_batched_tokens=512, kv_gib=(28.84, 28.86), pid=7100)


QWEN = dict(model="/data/models/Qwen3-32B", arch="Qwen3ForCausalLM", bpt=65536.0, max_model_len=40960,
            kv_gib=(32.64, 32.64), offloading_blocks=None, rco_per_rank=None, recompute=False)
QP = replace(P, engine_id="qwen3-p", max_num_seqs=4, **QWEN)  # type: ignore[arg-type]
QD = replace(D, engine_id="qwen3-d", max_num_seqs=48, **QWEN)  # type: ignore[arg-type]


def _dp4_rank(r: int) -> NodeSpec:
    host = "a3-d0" if r < 2 else "a3-d1"
    return replace(D, file=f"{host}__d0-dp{r}.log", dp=4, dp_ranks=(r,), dp_address="10.0.0.2",
                   rco_per_rank=4 * 2**30, declared=(2, 4, 4, 4), pid=7100 + 1000 * r)


SETS: dict[str, tuple[str, list[NodeSpec]]] = {
    "healthy-1p1d": ("The seed's healthy 1P1D: DeepSeek-V4-Flash, P and D DP2 x TP4 (EP), MultiConnector of "
                     "MooncakeConnectorV1 + OffloadingConnector (NPUOffloadingSpec) on P, MooncakeConnectorV1 + "
                     "RecomputeCPUOffloadConnector with recompute_scheduler_enable on D.", [P, D]),
    "pd-block-size-differs": ("As healthy-1p1d but the D node runs --block-size 64 against the P node's 128.",
                              [P, replace(D, block_size=64)]),
    "declared-decode-dp2-real-dp4": ("As healthy-1p1d but the D node runs DP4 x TP4 while both nodes declare "
                                     "decode {dp_size: 2, tp_size: 4}.",
                                     [P, replace(D, dp=4, dp_ranks=(0, 1, 2, 3), kv_gib=(28.84, 28.86, 28.81, 28.85))]),
    "recompute-on-p": ("The launch scripts swapped: recompute_scheduler_enable and RecomputeCPUOffloadConnector on the "
                       "P node, the D node with MooncakeConnectorV1 + OffloadingConnector and no recompute scheduler.",
                       [replace(P, offloading_blocks=None, rco_per_rank=GIB16, recompute=True),
                        replace(D, rco_per_rank=None, recompute=False, offloading_blocks=20000)]),
    "pd-version-differs": ("As healthy-1p1d but the D node was upgraded to vLLM 0.27.1 and the P node was not.",
                           [P, replace(D, version="0.27.1")]),
    "two-producers-no-consumer": ("Two P instances (engine_id dsv4-p and dsv4-p2) and no D node among the logs.",
                                  [P, replace(P, file="a3-p1__p1.log", engine_id="dsv4-p2", pid=8100)]),
    "declared-prefill-tp8-real-tp4": ("As healthy-1p1d but both nodes declare prefill {dp_size: 2, tp_size: 8} while "
                                      "the P node runs TP4.",
                                      [replace(P, declared=(2, 8, 2, 4)), replace(D, declared=(2, 8, 2, 4))]),
    "dp4-d-two-hosts": ("A P node (DP2 x TP4) and a DP4 x TP4 D instance launched one DP rank per log (external DP, "
                        "as vLLM-Ascend's launch_online_dp.py), ranks 0-1 on host a3-d0 and 2-3 on host a3-d1, "
                        "RecomputeCPUOffloadConnector with 4 GiB per rank.",
                        [replace(P, declared=(2, 4, 4, 4))] + [_dp4_rank(r) for r in range(4)]),
    "stats-workload-worked-example": (
        "The worked example of docs/deployment.md served: Qwen3-32B (dense) P and D DP2 x TP4 with MooncakeConnectorV1, "
        "65,536 B/token per rank, 32.64 GiB KV per card (534,773 tokens per DP group), P max-num-seqs 4, D 48; three "
        "stats lines per DP engine (P: 40,000 prompt tokens/s for 4 generated tokens/s, the proxy's max_tokens=1; D: "
        "48 running requests at 98.5-99.0 % KV usage), from which the workload (10,000 + 2,000 tokens) is inferred.",
        [replace(QP, stats=((40000.0, 4.0, 4, 7.5), (40000.0, 4.0, 4, 7.4), (40000.0, 4.0, 3, 5.6))),
         replace(QD, stats=((0.0, 1150.0, 48, 98.5), (0.0, 1180.0, 48, 98.7), (0.0, 1120.0, 48, 99.0)))]),
}
# the official vLLM-Ascend tutorial pair, copied unchanged (see tests/data/healthy/README.md)
COPIES = {"tutorial-dsv4-a3-pd": ("The official vLLM-Ascend 0.23.0.post1 DeepSeek-V4-Flash A3 PD tutorial (section "
                                  "5.2.1): DP rank 0 of the prefill node (DP4 x TP4) and of the decode node (DP16 x TP1), "
                                  "copied from tests/data/healthy/.",
                                  {"a3-p__prefill-dp0.log": TUTORIAL_P, "a3-d__decode-dp0.log": TUTORIAL_D})}


def rendered() -> dict[Path, str]:
    """Every file of every set, path → content."""
    out: dict[Path, str] = {}
    for name, (readme, nodes) in SETS.items():
        out[OUT / name / "README.md"] = f"# {name}\n\n{readme}\n"
        for n in nodes:
            out[OUT / name / n.file] = render(n)
    for name, (readme, files) in COPIES.items():
        out[OUT / name / "README.md"] = f"# {name}\n\n{readme}\n"
        for fname, src in files.items():
            out[OUT / name / fname] = src.read_text(encoding="utf-8")
    return out


def test_committed_sets_are_their_rendering():
    for path, text in rendered().items():
        assert path.is_file(), f"{path.relative_to(ROOT)} missing: run python tests/test_deployment_sets.py"
        assert path.read_text(encoding="utf-8") == text, f"{path.relative_to(ROOT)} differs from its rendering"


if __name__ == "__main__":
    for p, t in rendered().items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(t, encoding="utf-8")
    print(f"wrote {len(rendered())} files under {OUT.relative_to(ROOT)}", file=sys.stderr)
