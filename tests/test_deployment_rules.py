"""Every deployment rule file's samples (``kvlogdiag/rules/deployment/``): the sets, logs or node tables
that must fire the rule and those that must stay quiet — one generic test, like tests/test_rules.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvlogdiag.deployment_result import DeploymentNode
from kvlogdiag.modes.deployment import Workload, build_deployment, deployments_from_logs
from kvlogdiag.pipeline import Analyzer
from kvlogdiag.rules.deployment_rules import DeploymentRuleSet, load_deployment_rule, load_deployment_rules
from kvlogdiag.rules.engine import RuleLoadError

ROOT = Path(__file__).resolve().parent.parent
SETS = ROOT / "sample_logs" / "deployments"
RULES = load_deployment_rules().rules
CASES = [(r, i, s) for r in RULES for i, s in enumerate(r.samples)]


def run_sample(rule, sample, tmp_path):
    """The findings of ``rule`` alone on one sample (and the rule errors, which must be none)."""
    opts = sample.get("options") or {}
    w = Workload(opts.get("avg_prompt_len"), opts.get("avg_output_len"), opts.get("host_ram_gib"))
    rules = DeploymentRuleSet([rule])
    errors: list[str] = []
    if "nodes" in sample:
        deps = [build_deployment("sample", [DeploymentNode.from_table(r) for r in sample["nodes"]], w, rules,
                                 errors=errors)]
    else:
        if "set" in sample:
            paths = [str(SETS / sample["set"])]
            assert Path(paths[0]).is_dir(), f"{rule.code}: no sample set {sample['set']}"
        else:
            paths = []
            for i, text in enumerate(sample["logs"]):
                p = tmp_path / f"node{i}.log"
                p.write_text(text.lstrip("\n"), encoding="utf-8")
                paths.append(str(p))
        deps = deployments_from_logs(paths, Analyzer(), w, group_by="all", rules=rules, errors=errors)
    assert not errors, errors
    return [f for d in deps for f in d.findings if f.rule == rule.code]


@pytest.mark.parametrize("rule,index,sample", CASES,
                         ids=[f"{r.code}-{i}-{'fires' if s['fires'] else 'quiet'}" for r, i, s in CASES])
def test_deployment_rule_sample(rule, index, sample, tmp_path):
    found = run_sample(rule, sample, tmp_path)
    if sample["fires"]:
        assert found, f"{rule.code} sample {index} should fire"
        if "severity" in sample:
            assert found[0].severity.label == sample["severity"], found[0].message
        for text in sample.get("message_contains", []):
            assert text in found[0].message, found[0].message
        assert "unknown" not in found[0].message, found[0].message
    else:
        assert not found, f"{rule.code} sample {index} should stay quiet, got: {[f.message for f in found]}"


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_every_deployment_rule_has_firing_and_quiet_samples_and_cites_source(rule):
    assert any(s["fires"] for s in rule.samples), f"{rule.code} has no sample that fires"
    assert any(not s["fires"] for s in rule.samples), f"{rule.code} has no sample that stays quiet"
    assert rule.code.startswith("KVD1")
    assert rule.references, f"{rule.code} cites nothing"


def test_rule_codes_do_not_collide_with_single_log_rules():
    from kvlogdiag.rules.engine import load_rules
    assert not {r.code for r in RULES} & {r.code for r in load_rules().rules}


@pytest.mark.parametrize("body,error", [
    ('scope = "cluster"', "scope must be one of"),
    ('scope = "pair"\n[[checks]]\nwhen = "n.block_size > 1"\nmessage = "x"', "unknown name"),
    ('scope = "node"\n[[checks]]\nwhen = "n.block_size > 1"\nmessage = "{n.nope}"', "unknown name 'n.nope'"),
])
def test_a_bad_deployment_rule_is_a_load_error_naming_file_and_rule(body, error):
    head = 'code = "KVD199"\nname = "x-y"\nseverity = "warning"\nsummary = "s"\nwhy = "w"\nfix = "f"\n'
    with pytest.raises(RuleLoadError, match=error) as exc:
        load_deployment_rule("rules/KVD199-x-y.toml", head + body + ("\n[[checks]]\nwhen = 'true'\nmessage = 'm'" if "checks" not in body else ""))
    assert "rules/KVD199-x-y.toml: KVD199" in str(exc.value)


def test_every_documented_name_is_filled():
    """A name the rules may use but the mode never fills would read null and keep its checks quiet."""
    from kvlogdiag.modes.deployment import deployment_values, node_values
    from kvlogdiag.rules.deployment_rules import DEPLOYMENT_NAMES, NODE_NAMES

    n = DeploymentNode("x", kv_role="kv_consumer")
    assert set(node_values(n, Workload(100, 10))) == set(NODE_NAMES)
    assert set(deployment_values([n], Workload())) == set(DEPLOYMENT_NAMES)


def test_explain_finds_a_deployment_rule():
    from click.testing import CliRunner

    from kvlogdiag.cli.main import cli
    res = CliRunner().invoke(cli, ["explain", "KVD107"])
    assert res.exit_code == 0 and res.stdout.startswith("KVD107 offload-roles-across-nodes")
    assert "Scope: one" in res.stdout and "Why it matters" in res.stdout
