"""The workload the stats lines give the D-capacity rule (kvlogdiag/derive/workload.py), and
``analyze --deployment`` being ``deployment``: the hand calculation of docs/deployment.md on the
``stats-workload-1p1d`` set, the cases that give no figure, and the same result through both commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import cli
from kvlogdiag.deployment_result import DeploymentNode
from kvlogdiag.derive.workload import infer_workload
from kvlogdiag.modes.deployment import Workload, deployments_from_logs
from kvlogdiag.pipeline import Analyzer

SETS = Path(__file__).resolve().parent.parent / "sample_logs" / "deployments"
STATS = str(SETS / "stats-workload-worked-example")


def _node(name: str, role: str, version: str, pool: int | None, lines: int, prompt: float, gen: float, running: int,
          usage: float) -> DeploymentNode:
    return DeploymentNode(name, role="prefill" if role == "kv_producer" else "decode", kv_role=role, vllm_version=version,
                          model="Qwen/Qwen3-32B",
                          pool_tokens_per_dp_group=pool, max_num_seqs=32,
                          workload_stats={"lines": lines, "prompt_tps_sum": prompt, "gen_tps_sum": gen,
                                          "running_sum": running, "kv_usage_running_sum": usage,
                                          "first_line": 10, "last_line": 20})


def test_stats_set_workload_is_the_hand_calculation():
    """docs/deployment.md, "The workload from the stats lines": the worked example, read back from its stats lines."""
    (dep,) = deployments_from_logs([STATS], Analyzer())
    inf = dep.capacity["workload_inference"]
    # D: 6 lines (2 engines x 3), usage 2 x (98.5 + 98.7 + 99.0) = 592.4 %, running 6 x 48 = 288,
    #    pool 534,773 per DP group: c = 5.924 x 534,773 / 288 = 11,000.03 tokens per running request
    # P: 6 lines of 40,000 prompt and 4 generated tokens/s: p = 240,000 / 24 = 10,000; o = 2 x (11,000.03 - 10,000) = 2,000
    assert inf["method"] == "p-prompt" and inf["stats_lines"] == 12
    assert inf["live_tokens_per_request"] == pytest.approx(5.924 * 534773 / 288, abs=0.05)
    assert (inf["avg_prompt_len"], inf["avg_output_len"]) == (10000, 2000)
    assert dep.capacity["workload"] == {"avg_prompt_len": 10000, "avg_output_len": 2000, "source": "stats lines"}
    d = dep.capacity["nodes"]["d0"]
    assert d["live_tokens_avg"] == 48 * (10000 + 2000 / 2) == 528000
    (f,) = dep.findings
    assert f.rule == "KVD108" and f.severity.label == "info"
    assert "98.7 %" in f.message and "workload inferred from 12 stats lines of p0, d0, not given" in f.message
    assert {(c.node, c.what) for c in f.evidence} >= {("p0", "workload_note"), ("d0", "workload_note")}


def test_hybrid_model_stats_lines_give_no_workload():
    # the official DeepSeek-V4-Flash tutorial pair has stats lines, but DeepSeek-V4's compressed layers do not
    # hold one token's KV per token: no figure (it would read 1,613 + 41,756 tokens). Its model path
    # (...-w8a8-mtp) is not in the catalogue: not known to be dense is enough
    (dep,) = deployments_from_logs([str(SETS / "tutorial-dsv4-a3-pd")], Analyzer())
    assert dep.capacity["workload"] is None and dep.findings == []
    assert "not a model kvlogdiag knows to be dense" in dep.capacity["workload_inference"]["reason"]
    p, d = dep.nodes
    p.model = d.model = "deepseek-ai/DeepSeek-V4-Flash"
    assert "is a hybrid model" in infer_workload([p], [d])["reason"]


def test_given_lengths_win_over_the_stats_lines():
    (dep,) = deployments_from_logs([STATS], Analyzer(), Workload(10000, 2000))
    assert dep.capacity["workload"]["source"] == "given" and "workload_inference" not in dep.capacity
    assert "inferred" not in dep.findings[0].message


def test_one_length_given_infers_nothing():
    (dep,) = deployments_from_logs([STATS], Analyzer(), Workload(10000, None))
    assert dep.capacity == {"workload": None} and dep.findings == []


def test_d_before_vllm_016_uses_its_own_prompt_to_output_ratio():
    # vLLM 0.15: D's prompt throughput counts each transferred prompt once: r = 40,000 / 10,000 = 4,
    # c = 0.5 x 1,000,000 / 50 = 10,000 = p + o/2 = o (4 + 1/2) -> o = 2,222, p = 8,889
    d = _node("d0", "kv_consumer", "0.15.1", 1_000_000, 5, 40000.0, 10000.0, 50, 50.0)
    inf = infer_workload([], [d])
    assert inf["method"] == "d-ratio" and (inf["avg_prompt_len"], inf["avg_output_len"]) == (8889, 2222)


@pytest.mark.parametrize("producers,consumers,reason", [
    ([], [], "no D node's log has a stats line"),
    ([], [_node("d0", "kv_consumer", "0.23.0", 1_000_000, 5, 0.0, 1000.0, 50, 50.0)], "no P node's stats lines"),
    ([_node("p0", "kv_producer", "0.23.0", 1_000_000, 5, 60000.0, 5.0, 5, 1.0)],
     [_node("d0", "kv_consumer", "0.23.0", 1_000_000, 5, 0.0, 1000.0, 50, 50.0)], "not more than the P nodes'"),
    ([], [_node("d0", "kv_consumer", "", 1_000_000, 5, 0.0, 1000.0, 50, 50.0)], "version is unknown"),
    ([], [_node("d0", "kv_consumer", "0.15.1", 1_000_000, 5, 10.0, 0.0, 50, 50.0)], "no generated token"),
])
def test_no_figure_when_the_stats_lines_do_not_support_one(producers, consumers, reason):
    inf = infer_workload(producers, consumers)
    assert inf["avg_prompt_len"] is None and inf["avg_output_len"] is None and reason in inf["reason"]


def test_no_stats_lines_say_why_in_the_text():
    res = CliRunner().invoke(cli, ["deployment", str(SETS / "healthy-1p1d")])
    assert "none inferred from the stats lines: no D node's log has a stats line" in res.output


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_analyze_deployment_is_the_deployment_command(fmt):
    runner = CliRunner()
    for name in ("recompute-on-p", "stats-workload-worked-example", "dp4-d-two-hosts"):
        a = runner.invoke(cli, ["analyze", "--deployment", "--format", fmt, str(SETS / name)])
        d = runner.invoke(cli, ["deployment", "--format", fmt, str(SETS / name)])
        assert a.exit_code == d.exit_code and a.output == d.output
    if fmt == "json":
        assert json.loads(a.output)["deployments"][0]["name"].endswith("dp4-d-two-hosts")


def test_analyze_deployment_options_and_exit_codes():
    runner = CliRunner()
    res = runner.invoke(cli, ["analyze", "--deployment", "--fail-on", "warning", str(SETS / "recompute-on-p")])
    assert res.exit_code == 1 and "KVD107 [warning]" in res.output
    res = runner.invoke(cli, ["analyze", "--deployment", "--group-by", "all", str(SETS / "healthy-1p1d"),
                              str(SETS / "recompute-on-p"), "--format", "json"])
    assert res.exit_code == 0 and len(json.loads(res.output)["deployments"]) == 1
    res = runner.invoke(cli, ["analyze", "--group-by", "all", str(SETS / "healthy-1p1d" / "a3-p0__p0.log")])
    assert res.exit_code == 2 and "--group-by: only with --deployment" in res.output
    res = runner.invoke(cli, ["analyze", "--deployment", "--run", "first", str(SETS / "healthy-1p1d")])
    assert res.exit_code == 2
