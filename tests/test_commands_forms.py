"""Launch commands in every form (kvlogdiag/extract/commands.py): each form of the same command gives the
same args; placeholders and suggested commands are not read; flag meanings come from vLLM's harvested list."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

from kvlogdiag.extract import commands
from kvlogdiag.extract.extractor import CONFIG_KEYS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import harvest_cli_args  # noqa: E402

# real lines (sample_logs/v1_single_gpu.log) that state neither the length nor the parallel sizes
TAIL = """\
INFO 10-20 13:41:05 [__init__.py:216] Automatically detected platform cuda.
(EngineCore_DP0 pid=3090) INFO 10-20 13:42:18 [gpu_worker.py:298] Available KV cache memory: 53.91 GiB
(EngineCore_DP0 pid=3090) INFO 10-20 13:42:18 [kv_cache_utils.py:1087] GPU KV cache size: 1,009,456 tokens
"""
M = "Qwen/Qwen2.5-7B"

FORMS = {
    "vllm_serve": f"vllm serve {M} --max-model-len 8192 --tensor-parallel-size 2",
    "python_m": f"python -m vllm.entrypoints.openai.api_server --model {M} --max-model-len 8192 -tp 2",
    "continued": f"vllm serve {M} \\\n  --max-model-len 8192 \\\n  --tensor-parallel-size 2",
    "model_next_line": f"vllm serve \\\n  {M} \\\n  --max-model-len 8192 \\\n  -tp 2",
    "env_assignments": f"CUDA_VISIBLE_DEVICES=0,1 VLLM_USE_V1=1 vllm serve {M} --max-model-len 8192 --tensor-parallel-size 2",
    "bash_c_quoted": f'bash -c "vllm serve {M} --max-model-len 8192 --tensor-parallel-size 2"',
    "docker_vllm_openai": f"docker run --gpus all -p 8000:8000 vllm/vllm-openai:latest --model {M} --max-model-len 8192 --tensor-parallel-size 2",
    "docker_other_image": f"docker run --gpus all -p 8000:8000 myrepo/vllm:0.9 vllm serve {M} --max-model-len 8192 --tensor-parallel-size 2",
    "srun": f"srun -N1 --gres=gpu:2 vllm serve {M} --max-model-len 8192 --tensor-parallel-size 2",
    "wrappers_redirect": f"CUDA_VISIBLE_DEVICES=0,1 nohup uv run vllm serve {M} --max-model-len=8192 --tensor-parallel-size=2 > out.log 2>&1 &",
    "prompt": f"(venv) user@host:~$ vllm serve {M} --max-model-len 8192 --tensor-parallel-size 2",
    "json_list": f'["vllm", "serve", "{M}", "--max-model-len", "8192", "--tensor-parallel-size", "2"]',
    "compose_flow_list": f'services:\n  vllm:\n    image: vllm/vllm-openai:latest\n    command: ["--model", "{M}", "--max-model-len", "8192", "--tensor-parallel-size", "2"]',
    "compose_string": f"services:\n  vllm:\n    image: vllm/vllm-openai:latest\n    command: --model {M} --max-model-len 8192 --tensor-parallel-size 2",
    "k8s_block_quoted": f'containers:\n  - name: vllm\n    args:\n      - "--model"\n      - "{M}"\n      - "--max-model-len"\n      - "8192"\n      - "--tensor-parallel-size"\n      - "2"',
    "k8s_block_equals": f"containers:\n  - name: vllm\n    args:\n      - --model={M}\n      - --max-model-len=8192\n      - --tensor-parallel-size=2",
    "bare_flag_lines": f"--model {M}\n--max-model-len 8192\n--tensor-parallel-size 2",
    "bare_flag_line": f"--model {M} --max-model-len 8192 --tensor-parallel-size 2",
    "backticks_in_prose": f"I launched with `vllm serve {M} --max-model-len 8192 --tensor-parallel-size 2` and got:",
    "i_ran": f"I ran vllm serve {M} --max-model-len 8192 --tensor-parallel-size 2 on two GPUs",
    "running": f"Running vllm serve {M} --max-model-len 8192 --tensor-parallel-size 2",
    "llm_call": f'llm = LLM(model="{M}", max_model_len=8192, tensor_parallel_size=2)',
    "llm_multiline": f'llm = LLM(\n    model="{M}",\n    max_model_len=8192,\n    tensor_parallel_size=2,\n)',
    "engine_args": f'engine_args = EngineArgs(model="{M}", max_model_len=8192, tensor_parallel_size=2)',
    "async_engine_args": f'args = AsyncEngineArgs(model="{M}", max_model_len=8192, tensor_parallel_size=2)',
    "curly_quotes": f"llm = LLM(model=\u201c{M}\u201d, max_model_len=8192, tensor_parallel_size=2)",
    "underscore_number": f'llm = LLM(model="{M}", max_model_len=8_192, tensor_parallel_size=2)',
    "size_suffix": f"vllm serve {M} --max-model-len 8K --tensor-parallel-size 2",
    "underscore_flags": f"vllm serve {M} --max_model_len 8192 --tensor_parallel_size 2",
    # a deployment wrapper's own log record echoing the command it runs (python logging's default format)
    "wrapper_record": f"2025-06-20 20:03:33,664 - __main__ - INFO - Command: python -m vllm.entrypoints.openai.api_server "
                      f"--model {M} --max-model-len 8192 --tensor-parallel-size 2",
    "starship_prompt": f"\u276f CUDA_VISIBLE_DEVICES=0,1 vllm serve {M} --max-model-len 8192 --tensor-parallel-size 2",
    "i_ran_python_m": f"I ran python -m vllm.entrypoints.openai.api_server --model {M} --max-model-len 8192 -tp 2",
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_form_gives_the_same_args(form, analyze_text):
    a = analyze_text(FORMS[form] + "\n" + TAIL)
    assert (a["config"]["model"], a["config"]["max_model_len"], a["config"]["tensor_parallel_size"]) == (M, 8192, 2)
    for key in ("model", "max_model_len", "tensor_parallel_size"):
        assert a["provenance"][f"config.{key}"]["kind"] == "command", key


@pytest.mark.parametrize("text", [
    "vllm serve <model> --max-model-len N --tensor-parallel-size <tp>",
    "docker run vllm/vllm-openai:vx.x.x --model <model> --max-model-len $MAX_LEN",
    "vllm serve /path/to/model --max-model-len ${MAX_LEN} -tp {{ tp }}",
    'llm = LLM(model="<your-model>", max_model_len="<N>")',
    '["vllm", "serve", "$MODEL", "--max-model-len", "{max_len}"]',
])
def test_placeholders_are_not_values(text, analyze_text):
    a = analyze_text(text + "\n" + TAIL)
    assert (a["config"]["model"], a["config"]["max_model_len"], a["config"]["tensor_parallel_size"]) == (None, None, None)


@pytest.mark.parametrize("text", [
    f"You could try `vllm serve {M} --max-model-len 8192 -tp 2` instead.",
    f"For example, vllm serve {M} --max-model-len 8192 -tp 2 should work",
    f"usage: vllm serve {M} --max-model-len 8192 -tp 2",
    f"The docs show `vllm serve {M} --max-model-len 8192 -tp 2`",
])
def test_suggested_commands_are_not_this_run(text, analyze_text):
    a = analyze_text(text + "\n" + TAIL)
    assert a["config"]["max_model_len"] is None and a["config"]["tensor_parallel_size"] is None


def test_json_values_and_redacted_paths_are_values(analyze_text):
    a = analyze_text("vllm serve /path/to/Qwen3-8B --max-model-len 8192 \\\n"
                     "  --additional-config='{\"enable_cpu_binding\":true}' \\\n"
                     "  --kv-transfer-config '{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}'\n" + TAIL)
    assert a["config"]["model"] == "/path/to/Qwen3-8B"  # a redacted path: the model name is real
    assert a["config"]["additional_config"] == {"enable_cpu_binding": True}
    assert a["config"]["kv_transfer_config"]["kv_connector"] == "LMCacheConnectorV1"


def test_single_stray_flag_is_not_a_command(analyze_text):
    a = analyze_text("--max-model-len 8192\n\nsome text\n" + TAIL)
    assert a["config"]["max_model_len"] is None


@pytest.mark.parametrize("value, want", [
    ("8192", 8192), ("32K", 32768), ("32k", 32000), ("1M", 1048576), ("25.6k", 25600), ("1.5K", None), ("8_192", 8192),
])
def test_sizes_read_as_vllm_reads_them(value, want):
    # vllm/utils/argparse_utils.py:30 (0.33.0): binary suffixes take integers only
    assert commands.human_int(value) == want


@pytest.mark.parametrize("value", ["auto", "-1", "<N>", "$LEN"])
def test_max_model_len_auto_or_placeholder_is_no_value(value):
    assert commands.convert("max_model_len", value) is None


def test_flags_without_value_do_not_swallow_the_model():
    toks = commands.split_shell(f"--enforce-eager {M} --enable-prefix-caching --no-enable-chunked-prefill -tp 4")
    assert commands.parse_flags(toks, positional=True) == {
        "enforce_eager": True, "model": M, "enable_prefix_caching": True, "enable_chunked_prefill": False,
        "tensor_parallel_size": 4}


def test_store_boolean_value_of_0_5():
    assert commands.parse_flags(["--enable-chunked-prefill", "False", "--max-num-seqs", "8"]) == {
        "enable_chunked_prefill": False, "max_num_seqs": 8}


def test_every_mapped_argument_is_vllms():
    """Each argument name the extractor stores exists in the harvested argument list of some release."""
    dests = commands.known_dests()
    assert [k for k in CONFIG_KEYS if k not in dests] == []
    assert [v for v in commands.ALIASES.values() if v not in dests] == []


def test_harvested_table_spans_the_releases():
    t = commands.arg_table()
    assert len(t["versions"]) >= 30 and t["versions"][0] == "0.2.7"
    assert t["flags"]["--max-model-len"]["first"] == "0.2.7"
    assert t["flags"]["-tp"]["dest"] == "tensor_parallel_size"
    assert t["flags"]["--no-enable-prefix-caching"]["kind"] == "store_false"
    assert {"max_model_len", "tensor_parallel_size", "gpu_memory_utilization"} <= set(t["kwargs"])


def _sdist(tmp_path: Path, version: str, files: dict[str, str]) -> None:
    with tarfile.open(tmp_path / f"vllm-{version}.tar.gz", "w:gz") as tf:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{version}/{rel}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def test_harvester_reads_add_argument_and_fields(tmp_path):
    _sdist(tmp_path, "0.1.0", {"vllm/engine/arg_utils.py": """
import argparse
from dataclasses import dataclass
@dataclass
class EngineArgs:
    max_model_len: int | None = None
    enforce_eager: bool = False
    def add_cli_args(parser):
        parser.add_argument("--max-model-len", type=int)
        parser.add_argument("--tensor-parallel-size", "-tp", type=int)
        parser.add_argument("--enforce-eager", **kw["enforce_eager"])
        parser.add_argument("--no-x", action="store_false", dest="x")
"""})
    _sdist(tmp_path, "0.2.0", {"vllm/engine/arg_utils.py": """
class EngineArgs:
    max_model_len: int | None = None
    def add_cli_args(parser):
        parser.add_argument("--max-model-len", type=int)
""", "vllm/benchmarks/serve.py": "parser.add_argument('--num-prompts')"})
    t = harvest_cli_args.harvest([tmp_path])
    f = t["flags"]
    assert t["versions"] == ["0.1.0", "0.2.0"]
    assert f["-tp"] == {"dest": "tensor_parallel_size", "kind": "value", "first": "0.1.0", "last": "0.1.0"}
    assert f["--enforce-eager"]["kind"] == "bool_optional" and f["--no-enforce-eager"]["kind"] == "store_false"
    assert f["--no-x"] == {"dest": "x", "kind": "store_false", "first": "0.1.0", "last": "0.1.0"}
    assert f["--max-model-len"]["last"] == "0.2.0" and "--num-prompts" not in f
    assert json.dumps(t)  # the table is plain JSON


def test_prefilter_keeps_command_lines_but_not_access_lines():
    from kvlogdiag.pipeline import prefilter

    rx = prefilter()
    assert rx.search(b'      - "8192"') and rx.search(b'command: ["vllm", "serve", "m"]') and rx.search(b"engine = EngineArgs(")
    # a uvicorn access line of every request has ' - "': it must not become a candidate line
    assert rx.search(b'INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK') is None


def test_a_vllm_record_is_not_a_launch_command(analyze_text):
    a = analyze_text("WARNING 10-20 13:41:05 [api_server.py:12] this entrypoint is deprecated: "
                     "vllm serve Qwen/Qwen2.5-7B --max-model-len 8192 -tp 2\n" + TAIL)
    assert a["config"]["max_model_len"] is None


_N = 1 << 18
HOSTILE = {
    "colons": " ".join(["a:b:c:d"] * (_N // 8)) + " x vllm serve m --max-model-len 8",
    "prompts": " ".join([">>>"] * (_N // 4)) + " vllm serve m",
    "path": "/".join(["seg"] * (_N // 4)) + " serve",
    "one_word": "a" * _N + " vllm serve m",
    "spaces_item": "- x" + " " * _N + "y",
    "llm_kwargs": "LLM(" + "a=1, " * (_N // 5),
    "pipes": "| " + "| OK |" * (_N // 6) + "x",
    "list": '["' + 'a", "' * (_N // 5) + '"]',
    "long_token": "vllm serve " + "=" * _N,
    "env": "CUDA_VISIBLE_DEVICES=" * (_N // 21),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_long_lines_are_read_in_linear_steps(name):
    """Lines of 256 KiB (the reader keeps up to 1 MiB): a regex that backtracks over the whole line, or
    shlex on one huge token, would not come back from these; linear code does, with no value invented."""
    from kvlogdiag.extract import platform

    t = HOSTILE[name]
    cmd = commands.shell_command(t)
    assert cmd is None or "max_model_len" not in cmd.args or cmd.args["max_model_len"] == 8
    commands.list_command(t)
    commands.python_call(t)
    commands.flag_line_args(t)
    block = commands.BlockList()
    block.feed(1, "args:", None)
    block.feed(2, t, None)
    block.close()
    assert all(e.platform in ("cuda", "") for e in platform.evidence(t) + platform.evidence(t, True))
    platform.line_kind(t)
