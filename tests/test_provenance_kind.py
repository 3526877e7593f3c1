"""Every value keeps its provenance kind (log / command / prose): in the JSON ``provenance``, in the
precedence (a log line beats a command, a command beats prose) and in the text summary."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import cli
from kvlogdiag.extract.facts import provenance_kind

ROOT = Path(__file__).resolve().parent.parent
# real lines of sample_logs/v1_single_gpu.log
NON_DEFAULT = ("(APIServer pid=2817) INFO 10-20 13:41:10 [utils.py:233] non-default args: {'model_tag': 'Qwen/Qwen2.5-7B-Instruct', "
               "'model': 'Qwen/Qwen2.5-7B-Instruct', 'max_model_len': 32768, 'gpu_memory_utilization': 0.92}")
TAIL = """\
(EngineCore_DP0 pid=3090) INFO 10-20 13:42:18 [gpu_worker.py:298] Available KV cache memory: 53.91 GiB
(EngineCore_DP0 pid=3090) INFO 10-20 13:42:18 [kv_cache_utils.py:1087] GPU KV cache size: 1,009,456 tokens
"""
COMMAND = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.8"
PROSE = "gpu_memory_utilization: 0.7\nmax_model_len: 4096"


@pytest.mark.parametrize("lines, want", [
    ([NON_DEFAULT], (32768, 0.92, "log")),
    ([COMMAND], (8192, 0.8, "command")),
    ([PROSE], (4096, 0.7, "prose")),
    ([COMMAND, NON_DEFAULT], (32768, 0.92, "log")),  # the log line wins, wherever it stands
    ([NON_DEFAULT, COMMAND], (32768, 0.92, "log")),
    ([PROSE, COMMAND], (8192, 0.8, "command")),  # the command beats prose
    ([COMMAND, PROSE], (8192, 0.8, "command")),
    ([PROSE, COMMAND, NON_DEFAULT], (32768, 0.92, "log")),
])
def test_precedence_and_kind(lines, want, analyze_text):
    a = analyze_text("\n".join(lines) + "\n" + TAIL)
    c, p = a["config"], a["provenance"]
    assert (c["max_model_len"], c["gpu_memory_utilization"], p["config.max_model_len"]["kind"]) == want
    assert p["config.gpu_memory_utilization"]["kind"] == want[2]


def test_every_provenance_entry_has_a_kind_and_matches_the_schema(analyze_text):
    a = analyze_text(COMMAND + "\nGPU: RTX 4090\n" + TAIL)
    assert a["provenance"] and all(v["kind"] in ("log", "command", "prose") for v in a["provenance"].values())
    schema = json.loads((ROOT / "docs" / "analysis.schema.json").read_text(encoding="utf-8"))
    doc = {"tool": "kvlogdiag", "version": "0", "analyses": [json.loads(json.dumps(a, default=str))]}
    jsonschema.validate(doc, schema)
    bad = json.loads(json.dumps(doc))
    bad["analyses"][0]["provenance"]["config.max_model_len"]["kind"] = "guess"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


@pytest.mark.parametrize("source, kind", [
    ("non_default_args", "log"), ("engine_config", "log"), ("platform_line", "log"), ("device", "log"),
    ("user_command", "command"), ("command_list", "command"), ("python_call", "command"), ("command_flags", "command"),
    ("env_weak_in_command", "command"), ("prose", "prose"), ("device_in_prose", "prose"),
])
def test_source_kinds(source, kind):
    assert provenance_kind(source) == kind


def _text(tmp_path: Path, log: str) -> str:
    path = tmp_path / "run.log"
    path.write_text(log, encoding="utf-8")
    res = CliRunner().invoke(cli, ["analyze", str(path)], catch_exceptions=False)
    return res.stdout


def test_text_summary_marks_non_log_values(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = _text(tmp_path, "I have an RTX 4090\n" + COMMAND + "\nmax_num_seqs: 64\n" + TAIL)
    rows = {line.split("  ")[0]: line for line in out.splitlines()}
    assert "8,192 (from the command)" in rows["max_model_len"]
    assert "Qwen/Qwen2.5-7B-Instruct (from the command)" in rows["model"]
    assert "cuda" not in rows["vLLM"]  # a device named in prose does not set the platform (derive/figures.py)


def test_text_summary_leaves_log_values_unmarked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = _text(tmp_path, COMMAND + "\n" + NON_DEFAULT + "\n" + TAIL)
    assert "32,768" in out and "(from" not in out
