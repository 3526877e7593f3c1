"""Every rule file's samples: logs that must fire the rule and logs that must stay quiet.

One generic test (semgrep's ruleid/ok idea): for each ``[[samples]]`` entry of each rule in
``kvlogdiag/rules/builtin/``, analyse the sample log with only that rule selected and check the outcome.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvlogdiag.pipeline import Analyzer
from kvlogdiag.rules import context as rule_context
from kvlogdiag.rules.context import Options
from kvlogdiag.rules.engine import RuleLoadError, load_rule, load_rules, render_template, rule_names_used

RULES = load_rules().rules
CASES = [(r, i, s) for r in RULES for i, s in enumerate(r.samples)]


def _run(rule, sample, tmp_path):
    opts = Options(**{k: v for k, v in (sample.get("options") or {}).items()})
    analyzer = Analyzer(opts, rules=load_rules().selected([rule.code]))
    path = tmp_path / "sample.log"
    path.write_text(sample["log"].lstrip("\n"), encoding="utf-8")
    analysis = analyzer.analyze_source(str(path)).to_json()
    assert not analyzer.rule_errors, analyzer.rule_errors
    return [f for f in analysis["findings"] if f["rule"] == rule.code]


@pytest.mark.parametrize("rule,index,sample", CASES, ids=[f"{r.code}-{i}-{'fires' if s['fires'] else 'quiet'}" for r, i, s in CASES])
def test_rule_sample(rule, index, sample, tmp_path):
    found = _run(rule, sample, tmp_path)
    if sample["fires"]:
        assert found, f"{rule.code} sample {index} should fire"
        if "severity" in sample:
            assert found[0]["severity"] == sample["severity"]
        for text in sample.get("message_contains", []):
            assert text in found[0]["message"], found[0]["message"]
        if sample.get("line") is not None:
            assert found[0]["line"] == sample["line"]
        assert "unknown" not in found[0]["message"] or sample.get("allow_unknown", False), found[0]["message"]
    else:
        assert not found, f"{rule.code} sample {index} should stay quiet, got: {found}"


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_every_rule_has_firing_and_quiet_samples(rule):
    assert any(s["fires"] for s in rule.samples), f"{rule.code} has no sample that fires"
    assert any(not s["fires"] for s in rule.samples), f"{rule.code} has no sample that stays quiet"


# --- rules own their thresholds, wording and errors -----------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
_STATS = ("(APIServer pid=2231) INFO 11-20 10:00:{s:02d} [loggers.py:248] Engine 000: Avg prompt throughput: 900.0 tokens/s, "
          "Avg generation throughput: 2001.5 tokens/s, Running: {r} reqs, Waiting: {w} reqs, GPU KV cache usage: {u}%, "
          "Prefix cache hit rate: 31.2%")
PEAK_85 = "\n".join(_STATS.format(s=10 * i, r=40, w=0, u=u) for i, u in enumerate(("64.0", "80.0", "85.0", "79.9"))) + "\n"


def _analyze(text: str, codes: list[str], opts: Options | None = None):
    analyzer = Analyzer(opts or Options(), rules=load_rules().selected(codes))
    a = analyzer.analyze_stream(io.BytesIO(text.encode()), "t.log").to_json()
    return a["findings"], analyzer.rule_errors


def test_kvd013_mark_is_the_rules_parameter():
    """[params.KVD013] high_pct = 80 used to change nothing: the extractor counted at a fixed 90 %."""
    found, errors = _analyze(PEAK_85, ["KVD013"], Options(params={"KVD013": {"high_pct": 80}}))
    assert errors == []
    [f] = found
    assert "≥ 80 % in 2 of 4 stats lines" in f["message"] and "90" not in f["message"], f["message"]
    assert f["line"] == 2 and "last at line 3" in f["message"]
    assert _analyze(PEAK_85, ["KVD013"])[0] == []  # the default mark (90 %) stays quiet on the same log


def test_kvd013_counts_every_mark_from_one_histogram():
    text = "".join(_STATS.format(s=i % 60, r=4, w=0, u=f"{u / 10:.1f}") + "\n" for i, u in enumerate(range(0, 1001)))
    for mark, lines in ((90, 101), (99.9, 2), (100, 1), (0, 1001), (37.25, 628)):  # 37.3 … 100.0
        found, errors = _analyze(text, ["KVD013"], Options(params={"KVD013": {"high_pct": mark, "min_lines": 1}}))
        assert errors == []
        assert f"in {lines:,} of 1001 stats lines" in found[0]["message"] or f"in {lines} of 1001" in found[0]["message"], (mark, found)


def test_kvd013_parameter_of_the_wrong_type_is_a_rule_error():
    found, errors = _analyze(PEAK_85, ["KVD013"], Options(params={"KVD013": {"high_pct": True}}))
    assert found == [] and len(errors) == 1 and "percentage" in errors[0].message


def test_kvd005_single_running_cause_is_the_step_budget():
    log = ("(APIServer pid=77) INFO 10-28 18:04:01 [scheduler.py:205] Chunked prefill is enabled with max_num_batched_tokens=2048.\n"
           + "".join(_STATS.format(s=10 * i, r=1, w=5 + i, u=f"{10 + i}.0") + "\n" for i in range(5)))
    [f] = _analyze(log, ["KVD005"])[0]
    assert "the step budget held the queue" in f["message"] and "KV cache had room" in f["message"]
    assert "--long-prefill-token-threshold" in f["fix"] and "--max-num-batched-tokens" in f["fix"]
    consumer = ("(APIServer pid=5120) INFO 11-03 22:10:19 [utils.py:233] non-default args: {'model_tag': 'Qwen/Qwen3-32B', "
                "'kv_transfer_config': KVTransferConfig(kv_connector='NixlConnector', kv_role='kv_consumer')}\n" + log)
    assert _analyze(consumer, ["KVD005"])[0] == []
    assert _analyze(log, ["KVD005"], Options(role="decode"))[0] == []


def _kvd011_log() -> str:
    rule = next(r for r in RULES if r.code == "KVD011")
    return rule.samples[0]["log"].lstrip("\n")


def test_provider_failure_is_a_rule_error_not_silence(monkeypatch):
    """A figure that fails to compute used to leave its names null (the rule silently did not fire)."""
    mod = rule_context.builtin_providers()["KVD011"].module

    def boom(*_a, **_k):
        raise KeyError("tensor_parallel_size")

    assert _analyze(_kvd011_log(), ["KVD011"])[0]  # fires without the fault
    monkeypatch.setattr(mod, "provide", boom)
    found, errors = _analyze(_kvd011_log(), ["KVD011", "KVD004"])
    assert [f["rule"] for f in found if f["rule"] == "KVD011"] == []
    [err] = errors
    assert err.code == "KVD011" and "KVD011-bytes-per-token-mismatch.py failed: KeyError" in err.message
    with pytest.raises(RuleLoadError, match="KVD011"):
        _analyze(_kvd011_log(), ["KVD011"], Options(strict_rules=True))


def test_provider_failure_is_printed_and_fatal_with_strict_rules(monkeypatch, tmp_path):
    from kvlogdiag.cli.main import cli

    monkeypatch.setattr(rule_context.builtin_providers()["KVD011"].module, "provide",
                        lambda *a: (_ for _ in ()).throw(ZeroDivisionError("division by zero")))
    p = tmp_path / "t.log"
    p.write_text(_kvd011_log())
    r = CliRunner().invoke(cli, ["analyze", "--select", "KVD011", str(p)])
    assert "kvlogdiag: rule error: " in r.stderr and "ZeroDivisionError" in r.stderr
    r = CliRunner().invoke(cli, ["analyze", "--select", "KVD011", "--strict-rules", str(p)])
    assert r.exit_code == 2 and "KVD011" in r.stderr


def test_generic_figure_failure_is_a_rule_error_of_the_rules_that_use_it(monkeypatch):
    def broken_runtime(b):
        b.put("stats_lines", 1)
        raise AttributeError("'StatsSummary' object has no attribute 'kv_usage_max'")

    monkeypatch.setitem(rule_context._FILLERS, "runtime", broken_runtime)
    log = ("(EngineCore_DP0 pid=10) INFO 09-01 10:00:40 [gpu_worker.py:276] Available KV cache memory: -1.66 GiB\n"
           + PEAK_85)
    kvd010 = next(r for r in RULES if r.code == "KVD010")
    assert not rule_names_used(kvd010) & set(rule_context.SECTIONS["runtime"])
    found, errors = _analyze(log, ["KVD013", "KVD010"], Options(params={"KVD013": {"high_pct": 80}}))
    assert [f["rule"] for f in found] == ["KVD010"]  # uses no runtime figure: still runs
    [err] = errors
    assert err.code == "KVD013" and "kv_usage_max" in err.message and "AttributeError" in err.message


def test_provider_may_only_put_the_names_it_declares(monkeypatch):
    mod = rule_context.builtin_providers()["KVD010"].module
    monkeypatch.setattr(mod, "provide", lambda facts, analysis, ctx, put: put("bytes_per_token", 1))
    log = ("(EngineCore_DP0 pid=10) INFO 09-01 10:00:40 [gpu_worker.py:276] Available KV cache memory: -1.66 GiB\n")
    found, errors = _analyze(log, ["KVD010"])
    assert found == [] and "does not declare" in errors[0].message


def test_every_provider_belongs_to_a_builtin_rule_and_is_used():
    rules = {r.code: r for r in RULES}
    providers = rule_context.builtin_providers()
    assert set(providers) <= set(rules)
    for code, p in providers.items():
        path = ROOT / p.path
        assert path.with_suffix(".toml").exists(), f"{p.path}: provider without its rule file next to it"
        used = rule_names_used(rules[code])
        unused = set(p.names) - used
        assert not unused, f"{p.path} provides names its rule never uses: {sorted(unused)}"


def test_user_rule_cannot_use_a_provider_name(tmp_path):
    """Providers are built-in only: a --rules folder is never imported and cannot read their names."""
    text = ('code = "USR001"\nname = "peek"\nseverity = "info"\nsummary = "s"\nwhy = "w"\nfix = "f"\n'
            'condition = "bpt_ratio > 1"\nmessage = "m"\n')
    with pytest.raises(RuleLoadError, match="unknown name 'bpt_ratio'"):
        load_rule(str(tmp_path / "USR001-peek.toml"), text)


def test_optional_segments_nest():
    t = "[?a: A={a}[?b:  (b={b})]]."
    assert render_template(t, {"a": 1, "b": 2}) == "A=1 (b=2)."
    assert render_template(t, {"a": 1, "b": None}) == "A=1."
    assert render_template(t, {"a": None, "b": 2}) == "."


def test_no_rule_errors_on_the_sample_logs():
    """The figures that used to fail silently now report: none of the shipped logs may produce a rule error."""
    analyzer = Analyzer(Options(), rules=load_rules())
    logs = sorted((ROOT / "sample_logs").glob("*.log"))
    assert logs
    for path in logs:
        analyzer.analyze_source(str(path))
    assert [e.message for e in analyzer.rule_errors] == []


@pytest.mark.parametrize("body,error", [
    ('CODE = "KVD099"\nNAMES = {}\ndef provide(f, a, c, put):\n    pass\n', "CODE must be 'KVD098'"),
    ('CODE = "KVD098"\nNAMES = {"model": "x"}\ndef provide(f, a, c, put):\n    pass\n', "redefines generic name(s) model"),
    ('CODE = "KVD098"\nNAMES = {"x": "y"}\n', "needs a provide("),
    ('CODE = "KVD098"\nNAMES = {"x": 1}\ndef provide(f, a, c, put):\n    pass\n', "NAMES must map names"),
    ('CODE = "KVD098"\nimport not_a_module_anywhere\n', "cannot be imported: ModuleNotFoundError"),
])
def test_a_broken_provider_file_is_a_load_error_naming_it(tmp_path, body, error):
    path = tmp_path / "KVD098-broken.py"
    path.write_text(body)
    with pytest.raises(rule_context.ProviderError) as exc:
        rule_context._load_provider("KVD098-broken", path)
    assert "kvlogdiag/rules/builtin/KVD098-broken.py" in str(exc.value) and error in str(exc.value)


def test_a_failed_figure_in_applies_to_is_a_rule_error(monkeypatch, tmp_path):
    """applies_to reads engine/platform/role/version: when those failed, the rule must not run as if they were unknown."""
    from kvlogdiag.rules.engine import RuleSet

    def broken_identity(b):
        raise TypeError("'NoneType' object is not subscriptable")

    monkeypatch.setitem(rule_context._FILLERS, "identity", broken_identity)
    rule = load_rule(str(tmp_path / "USR002-v1-only.toml"),
                     'code = "USR002"\nname = "v1-only"\nseverity = "info"\nsummary = "s"\nwhy = "w"\nfix = "f"\n'
                     'condition = "stats_lines >= 0"\nmessage = "m"\n[applies_to]\nengine = ["v1"]\n')
    analyzer = Analyzer(Options(), rules=RuleSet([rule]))
    a = analyzer.analyze_stream(io.BytesIO(PEAK_85.encode()), "t.log").to_json()
    assert a["findings"] == []
    [err] = analyzer.rule_errors
    assert "USR002" in err.message and "engine" in err.message and "TypeError" in err.message


# --- fix texts say what applies to this model on this platform (issue 12) -------------------------

_KV_ERR = ("(EngineCore pid=8300) ERROR 11-22 08:31:40 [core.py:1098] ValueError: To serve at least one request with the "
           "model's max seq len (229376), (10.88 GiB KV cache is needed, which is larger than the available KV cache memory "
           "(8.50 GiB). Based on the available memory, the estimated maximum model length is 179200. Try increasing "
           "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n")


def _kvd002_fix(tmp_path, head: str) -> str:
    path = tmp_path / "kv.log"
    path.write_text(head + _KV_ERR, encoding="utf-8")
    analyzer = Analyzer(Options(p99_len=32768), rules=load_rules().selected(["KVD002"]))
    found = [f for f in analyzer.analyze_source(str(path)).to_json()["findings"] if f["rule"] == "KVD002"]
    assert found and not analyzer.rule_errors
    return found[0]["fix"]


def test_kv_levers_deepseek_v4_on_ascend_drop_fp8_and_tp(tmp_path):
    # vLLM-Ascend forces the cache dtype to the model dtype for index_topk models, and the MLA/V4
    # latent is replicated on every TP rank (docs/vllm-behaviour.md section 6)
    fix = _kvd002_fix(tmp_path, (
        "INFO 11-22 08:30:00 [__init__.py:238] Platform plugin ascend is activated\n"
        "(EngineCore pid=8300) INFO 11-22 08:30:20 [core.py:113] Initializing a V1 LLM engine (v0.23.0) with config: "
        "model='/models/DeepSeek-V4-Flash', dtype=torch.bfloat16, max_seq_len=229376, tensor_parallel_size=4, "
        "kv_cache_dtype=bfloat16, device_config=npu\n"))
    assert "halves" not in fix and "splits the KV heads" not in fix
    assert "not --kv-cache-dtype fp8: vLLM-Ascend stores this model's KV in the model dtype" in fix and "TP does not split an MLA/DeepSeek latent" in fix


def test_kv_levers_gqa_model_on_cuda_keep_fp8_and_tp(tmp_path):
    fix = _kvd002_fix(tmp_path, (
        "(EngineCore pid=8300) INFO 11-22 08:30:20 [core.py:113] Initializing a V1 LLM engine (v0.23.0) with config: "
        "model='meta-llama/Llama-3.1-70B-Instruct', dtype=torch.bfloat16, max_seq_len=229376, tensor_parallel_size=4, "
        "kv_cache_dtype=auto, device_config=cuda\n"))
    assert "--kv-cache-dtype fp8 (halves bytes per token)" in fix and "higher TP (splits the KV heads" in fix
    assert "not --kv-cache-dtype fp8" not in fix


def test_kv_levers_deepseek_v4_on_cuda_neither_fp8_nor_tp(tmp_path):
    # --kv-cache-dtype auto is already fp8_ds_mla for DeepSeek-V4 on CUDA (vllm 0.22.0 deepseek_v4/attention.py:678-688)
    fix = _kvd002_fix(tmp_path, (
        "(EngineCore pid=8300) INFO 11-22 08:30:20 [core.py:113] Initializing a V1 LLM engine (v0.23.0) with config: "
        "model='deepseek-ai/DeepSeek-V4-Flash', dtype=torch.bfloat16, max_seq_len=229376, tensor_parallel_size=4, "
        "kv_cache_dtype=auto, device_config=cuda\n"))
    assert "halves" not in fix and "splits the KV heads" not in fix and "more PP stages" in fix


def test_built_in_rules_read_only_prefiltered_lines():
    """A built-in rule with any_line()/count() makes every analysis read every line (~100x slower on long
    logs): facts a built-in rule needs come from catalogue patterns and events instead."""
    assert load_rules().line_patterns == ()


# --- [suggest]: the one setting a finding changes (issue 15, docs/tuning.md) ---------------------------

FIRING = [(r, i, s) for r, i, s in CASES if s["fires"]]


@pytest.mark.parametrize("rule,index,sample", FIRING, ids=[f"{r.code}-{i}" for r, i, s in FIRING])
def test_rule_suggestion_of_every_firing_sample(rule, index, sample, tmp_path):
    """A firing sample's suggestion (when its check declares one) names a vLLM flag or a VLLM_* variable,
    has a value of a flag's type or says what to measure, and renders without 'unknown'."""
    from kvlogdiag.extract.commands import is_vllm_flag

    opts = Options(**{k: v for k, v in (sample.get("options") or {}).items()})
    analyzer = Analyzer(opts, rules=load_rules().selected([rule.code]))
    path = tmp_path / "sample.log"
    path.write_text(sample["log"].lstrip("\n"), encoding="utf-8")
    a = analyzer.analyze_source(str(path)).current
    assert not analyzer.rule_errors, analyzer.rule_errors
    declared = any(c.suggest is not None for c in rule.checks)
    for s in a.suggestions:
        assert declared and s["rule"] == rule.code
        assert (s["flag"] and is_vllm_flag(s["flag"])) or (s["env"] or "").startswith("VLLM_")
        if s["automatic"]:
            assert s["remove"] or isinstance(s["value"], (int, float, str)) and not isinstance(s["value"], bool)
        else:
            assert s["measure"] and "unknown" not in s["measure"], s
        assert "unknown" not in (s["restart_and_measure"] or ""), s


def test_rules_with_fixes_of_one_setting_declare_a_suggestion():
    """The rules whose fix is one flag's value carry [suggest] data (kvlogdiag suggest reads it)."""
    declared = {r.code for r in RULES if any(c.suggest is not None for c in r.checks)}
    assert {"KVD002", "KVD003", "KVD004", "KVD005", "KVD012", "KVD013", "KVD014"} <= declared
