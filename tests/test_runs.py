"""Several server starts in one log: every figure, config value and finding belongs to one run.

The multi-run logs in ``tests/data/multirun/`` are made of bundled sample logs, so each run's figures
must equal the figures of its sample log analysed alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DATA_DIR, SAMPLE_LOGS_DIR

from kvlogdiag.cli.main import cli
from kvlogdiag.pipeline import Analyzer

MULTI = DATA_DIR / "multirun"
# file → the sample logs its runs come from, in log order
PARTS = {
    "concat_single_then_tp4.log": ["v1_single_gpu.log", "v1_tp4_workers.log"],
    "concat_tp4_then_single.log": ["v1_tp4_workers.log", "v1_single_gpu.log"],
    "failed_then_retry.log": ["truncated_before_kv.log", "v1_single_gpu.log"],
    "docker_restart.log": ["v1_single_gpu.log", "v1_tp4_workers.log"],
}
FIGURES = ("bytes_per_token", "tokens", "available_gib", "max_concurrency")
CONFIG = ("model", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "max_model_len",
          "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "kv_cache_dtype")


def _run_cli(args: list[str]) -> tuple[int, str]:
    r = CliRunner().invoke(cli, args)
    return r.exit_code, r.output


def _analysis_json(path: Path, run: str = "all") -> dict:
    code, out = _run_cli(["analyze", "--format", "json", "--run", run, str(path)])
    assert code in (0, 1), out
    return json.loads(out)["analyses"][0]


def _view(a: dict) -> dict:
    kv = a["kv_cache"]
    out = {k: kv[k] for k in FIGURES}
    out.update({k: a["config"][k] for k in CONFIG})
    out["version"] = a["vllm"]["version"]
    out["findings"] = sorted(f["rule"] for f in a["findings"])
    return out


@pytest.mark.parametrize("name", sorted(PARTS))
def test_each_run_has_exactly_its_own_figures(name):
    whole = _analysis_json(MULTI / name)
    runs = list(reversed(whole["all_runs"]))  # all_runs is newest first
    assert [r["run"]["index"] for r in runs] == list(range(len(PARTS[name])))
    for part, run in zip(PARTS[name], runs):
        alone = _analysis_json(SAMPLE_LOGS_DIR / part, run="last")
        assert alone["runs"] == 1
        assert _view(run) == _view(alone), (name, part)
    # the top level is the current (last) run
    assert _view({**whole, "kv_cache": whole["all_runs"][0]["kv_cache"]}) == _view(runs[-1])
    assert whole["run"]["current"] is True and whole["run"]["index"] == len(runs) - 1


def test_two_starts_are_not_mixed_the_issue_10_case():
    # cat v1_single_gpu.log v1_tp4_workers.log: analyze printed 0.11.0 with TP 4, the first run's max_num_seqs
    # and a median bytes/token over two models
    a = _analysis_json(MULTI / "concat_single_then_tp4.log", run="last")
    assert a["vllm"]["version"] == "0.10.2"
    assert a["config"]["tensor_parallel_size"] == 4
    assert a["config"]["max_num_seqs"] is None  # 128 belongs to the first start
    assert a["kv_cache"]["bytes_per_token"] == pytest.approx(81918.58669367051)
    assert a["config"]["conflicts"] == {}


def test_run_selection_and_text_order():
    path = MULTI / "concat_single_then_tp4.log"
    first = _analysis_json(path, run="1")
    assert first["run"]["index"] == 0 and first["vllm"]["version"] == "0.11.0"
    assert _analysis_json(path, run="first")["run"]["index"] == 0
    code, out = _run_cli(["analyze", "--run", "3", str(path)])
    assert code == 2 and "no run 3" in out
    code, out = _run_cli(["analyze", str(path)])
    assert out.index("run 2 of 2 (current)") < out.index("run 1 of 2")
    code, out = _run_cli(["analyze", "--run", "last", str(path)])
    assert "run 2 of 2 (current)" in out and "run 1 of 2" not in out


def test_top_level_kv_lists_keep_every_line_of_the_input():
    a = _analysis_json(MULTI / "concat_single_then_tp4.log")
    per_run = [x for r in reversed(a["all_runs"]) for x in r["kv_cache"]["tokens"]]
    assert a["kv_cache"]["tokens"] == per_run and len(per_run) == 5


def test_scan_writes_one_row_per_run(tmp_path):
    out = tmp_path / "rows.json"
    code, text = _run_cli(["scan", str(MULTI / "concat_single_then_tp4.log"), "-o", str(out), "--no-progress"])
    assert code in (0, 1), text
    rows = json.loads(out.read_text())
    assert [(r["run"], r["runs"], r["vllm_version"], r["tp"]) for r in rows] == [(1, 2, "0.11.0", 1), (2, 2, "0.10.2", 4)]
    assert rows[0]["run_first_line"] == 1 and rows[1]["run_first_line"] == rows[0]["run_last_line"] + 1


@pytest.mark.parametrize("log", sorted(SAMPLE_LOGS_DIR.glob("*.log")), ids=lambda p: p.name)
def test_a_single_start_is_one_run(log):
    assert len(Analyzer().analyze_source(str(log)).runs) == 1


def test_a_pasted_command_after_a_failed_start_is_not_a_run(write_log):
    # v06-like: a failed start, then the command the user launched next (no vLLM line after it)
    log = write_log(
        "(APIServer pid=7) INFO 10-01 10:00:00 [api_server.py:1896] vLLM API server version 0.10.2\n"
        "(EngineCore_DP0 pid=8) INFO 10-01 10:00:30 [gpu_worker.py:276] Available KV cache memory: -1.66 GiB\n"
        "(EngineCore_DP0 pid=8) ERROR 10-01 10:00:30 [core.py:708] ValueError: No available memory for the cache blocks.\n"
        "Launching vLLM server with command:\n"
        "vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.95\n")
    r = Analyzer().analyze_source(log)
    assert len(r.runs) == 1
    assert r.current.vllm.version == "0.10.2" and r.current.kv_cache.available_gib == [-1.66]


def test_a_restart_without_kv_in_the_first_start_is_a_new_run():
    r = Analyzer().analyze_source(str(MULTI / "failed_then_retry.log"))
    assert [a.vllm.version for a in r.runs] == ["0.10.1.1", "0.11.0"]
    assert r.runs[0].kv_cache.tokens == [] and r.runs[1].kv_cache.tokens == [1009456]
    assert r.runs[1].run.started_by == "api_server_version"


def test_folding_a_command_only_run_keeps_stopped_line_patterns():
    from kvlogdiag.extract.facts import LogFacts
    from kvlogdiag.extract.runs import server_starts
    from kvlogdiag.pipeline import LineHits

    first, second = LogFacts(source="x"), LogFacts(source="x", run_index=1, first_line=9)
    first.kv_sized = True
    first.line_hits, second.line_hits = LineHits(), LineHits()
    first.line_hits["OOM"] = (2, None)
    second.line_hits["OOM"] = (1, None)
    second.line_hits.stopped["slow"] = "stopped at line 9"
    (only,) = server_starts([first, second])
    assert only.line_hits["OOM"] == (3, None)
    assert isinstance(only.line_hits, LineHits) and only.line_hits.stopped == {"slow": "stopped at line 9"}
    assert first.line_hits.stopped == {}  # the extractor's own runs are not changed
