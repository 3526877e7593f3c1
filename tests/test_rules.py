"""Every rule file's samples: logs that must fire the rule and logs that must stay quiet.

One generic test (semgrep's ruleid/ok idea): for each ``[[samples]]`` entry of each rule in
``kvlogdiag/rules/builtin/``, analyse the sample log with only that rule selected and check the outcome.
"""

from __future__ import annotations

import pytest

from kvlogdiag.pipeline import Analyzer
from kvlogdiag.rules.context import Options
from kvlogdiag.rules.engine import load_rules

RULES = load_rules().rules
CASES = [(r, i, s) for r in RULES for i, s in enumerate(r.samples)]


def _run(rule, sample, tmp_path):
    opts = Options(**{k: v for k, v in (sample.get("options") or {}).items()})
    analyzer = Analyzer(opts, rules=load_rules().selected([rule.code]))
    path = tmp_path / "sample.log"
    path.write_text(sample["log"].lstrip("\n"), encoding="utf-8")
    analysis = analyzer.analyze_source(str(path))
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
