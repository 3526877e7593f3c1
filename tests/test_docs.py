"""Docs that are generated or promised must stay true: rules.md, the JSON schema, the README commands."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import cli, rules_markdown
from kvlogdiag.rules.engine import load_rules

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "sample_logs").glob("*.log")) + sorted((ROOT / "tests" / "data" / "multirun").glob("*.log"))


def test_rules_md_is_current():
    current = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    assert current == rules_markdown(load_rules()), "docs/rules.md is stale: run `kvlogdiag rules --format markdown > docs/rules.md`"


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_json_output_matches_schema(path):
    schema = json.loads((ROOT / "docs" / "analysis.schema.json").read_text(encoding="utf-8"))
    result = CliRunner().invoke(cli, ["analyze", "--format", "json", "--fail-on", "never", str(path)])
    assert result.exit_code == 0, result.output
    jsonschema.validate(json.loads(result.stdout), schema)


def test_readme_opens_with_install_and_test_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0].strip() for b in text.split("```bash\n")[1:3]]
    assert "kvlogdiag analyze sample_logs/" in blocks[0]
    test_cmd = blocks[1].splitlines()[-1]
    assert "pytest" in test_cmd
    assert test_cmd.split("&& ", 2)[-1] in ci or test_cmd in ci, "the CI script must run the README's test command"


def test_patterns_md_is_current():
    from kvlogdiag.catalogue.patterns import catalogue_markdown

    current = (ROOT / "docs" / "patterns.md").read_text(encoding="utf-8")
    assert current == catalogue_markdown(), "docs/patterns.md is stale: run `kvlogdiag patterns --format markdown > docs/patterns.md`"
