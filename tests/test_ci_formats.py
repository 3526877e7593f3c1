"""CI output: SARIF (checked against the official 2.1.0 schema), GitHub workflow commands, JUnit XML,
``-o``/``--quiet``/``--statistics``, for analyze, deployment and scan; and the exit codes they keep."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import cli
from kvlogdiag.render.ci import CIFinding, CILog, Location, _anchor
from kvlogdiag.render.github import annotation, escape_data, escape_property, render_github
from kvlogdiag.render.junit import render_junit
from kvlogdiag.render.sarif import artifact_uri, sarif_document
from kvlogdiag.result import Severity

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "sample_logs").glob("*.log"))
DEPLOYMENTS = sorted(p for p in (ROOT / "sample_logs" / "deployments").iterdir() if p.is_dir())
SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft4Validator(SCHEMA, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # relative log paths, as in a CI checkout
    monkeypatch.setenv("HOME", str(tmp_path))
    return CliRunner()


def invoke(runner, *args):
    return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)


def rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def validate(doc: dict) -> None:
    errors = sorted(VALIDATOR.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:5])


def test_schema_is_the_official_one():
    assert SCHEMA["id"] == "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
    jsonschema.Draft4Validator.check_schema(SCHEMA)
    with pytest.raises(jsonschema.ValidationError):  # the validator does reject a broken log
        VALIDATOR.validate({"version": "2.1.0", "runs": [{"tool": {"driver": {}}}]})


def rule_anchors() -> set[str]:
    text = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    return {_anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("log", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_sarif_of_every_sample_log_is_valid_and_complete(runner, log):
    plain = invoke(runner, "analyze", "--format", "json", "--run", "all", rel(log))
    res = invoke(runner, "analyze", "--format", "sarif", rel(log))
    assert res.exit_code == plain.exit_code, res.stderr  # the exit code does not depend on the format
    doc = json.loads(res.stdout)
    validate(doc)
    run = doc["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == sorted(r["id"] for r in rules) and len(rules) >= 19
    anchors = rule_anchors()
    for r in rules:
        assert r["help"]["text"] and r["shortDescription"]["text"]
        assert r["helpUri"].split("#")[1] in anchors, r["helpUri"]
    expected = [f for a in json.loads(plain.stdout)["analyses"] for r in a["all_runs"] for f in r["findings"]]
    got = run["results"]
    assert Counter((f["rule"], f["line"]) for f in expected) == Counter(
        (r["ruleId"], r["locations"][0]["physicalLocation"].get("region", {}).get("startLine")) for r in got)
    level = {"error": "error", "warning": "warning", "info": "note"}
    for r in got:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        assert r["level"] == level[r["properties"]["severity"]]
        assert r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == rel(log)
    assert run["invocations"][0]["exitCode"] == plain.exit_code


@pytest.mark.parametrize("folder", DEPLOYMENTS, ids=[p.name for p in DEPLOYMENTS])
def test_sarif_of_every_deployment_set_is_valid(runner, folder):
    plain = invoke(runner, "deployment", "--format", "json", rel(folder))
    res = invoke(runner, "deployment", "--format", "sarif", rel(folder))
    assert res.exit_code == plain.exit_code, res.stderr
    doc = json.loads(res.stdout)
    validate(doc)
    findings = [f for d in json.loads(plain.stdout)["deployments"] for f in d["findings"]]
    results = doc["runs"][0]["results"]
    assert sorted(r["ruleId"] for r in results) == sorted(f["rule"] for f in findings)
    nodes = {n["name"]: n["source"] for d in json.loads(plain.stdout)["deployments"] for n in d["nodes"]}
    for f, r in zip(sorted(findings, key=lambda f: f["rule"]), sorted(results, key=lambda r: r["ruleId"])):
        if f["evidence"]:  # located at the first cited line of the node's log
            loc = r["locations"][0]["physicalLocation"]
            assert loc["artifactLocation"]["uri"] == nodes[f["evidence"][0]["node"]]
            assert loc.get("region", {}).get("startLine") == f["evidence"][0]["line"]
    ids = {r["id"] for r in doc["runs"][0]["tool"]["driver"]["rules"]}
    assert {f"KVD1{n:02d}" for n in range(1, 11)} <= ids
    for r in doc["runs"][0]["tool"]["driver"]["rules"]:
        assert r["helpUri"].endswith("deployment.md#deployment-rules")


def test_scan_sarif_of_sample_logs_is_valid_and_matches_the_rows(runner, tmp_path):
    rows = invoke(runner, "scan", "sample_logs", "-j", "1", "--no-progress", "--format", "json")
    res = invoke(runner, "scan", "sample_logs", "-j", "1", "--no-progress", "-o", tmp_path / "scan.sarif")
    assert res.exit_code == rows.exit_code and res.stdout == ""
    doc = json.loads((tmp_path / "scan.sarif").read_text(encoding="utf-8"))
    validate(doc)
    per_row = Counter(c for r in json.loads(rows.stdout) for c in (r["findings"] or "").split(",") if c)
    per_result = Counter()
    seen = set()
    for r in doc["runs"][0]["results"]:  # "findings" counts a code once per run
        key = (r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], r["properties"].get("run"),
               r["properties"].get("container"), r["ruleId"])
        if key not in seen:
            seen.add(key)
            per_result[r["ruleId"]] += 1
    assert per_result == per_row
    assert all(r["locations"][0]["physicalLocation"].get("region") for r in doc["runs"][0]["results"]
               if r["ruleId"] not in ("KVD017",))  # every rule but the incomplete-log one cites a line


def test_scan_findings_survive_the_state_file(runner, tmp_path):
    args = ["scan", "sample_logs/v1_single_gpu.log", "sample_logs/hma_disabled_swa.log", "-j", "1", "--no-progress",
            "--state", tmp_path / "state.json", "--format", "sarif"]
    first = invoke(runner, *args)
    second = invoke(runner, *args)
    assert "2 unchanged" in second.stderr
    assert json.loads(first.stdout)["runs"][0]["results"] == json.loads(second.stdout)["runs"][0]["results"]
    assert len(json.loads(second.stdout)["runs"][0]["results"]) == 7


def test_sarif_of_unreadable_input_is_a_notification(runner, tmp_path):
    res = invoke(runner, "analyze", "--format", "sarif", "sample_logs/v1_single_gpu.log", tmp_path / "missing.log")
    assert res.exit_code == 2
    doc = json.loads(res.stdout)
    validate(doc)
    inv = doc["runs"][0]["invocations"][0]
    assert inv["executionSuccessful"] is False and inv["exitCode"] == 2
    assert "missing.log" in inv["toolExecutionNotifications"][0]["message"]["text"]


def test_artifact_uris():
    assert artifact_uri("logs/a b.log") == "logs/a%20b.log"
    assert artifact_uri("./x.log") == "x.log"
    assert artifact_uri("-") == "stdin"
    assert artifact_uri("/var/log/vllm/s.log") == "file:///var/log/vllm/s.log"


def hostile_finding(**kw) -> CIFinding:
    base = dict(rule="KVD004", name="gpu-memory-utilization-high", severity=Severity.WARNING,
                message="100% used, a:b\r\nnext line \x1b]0;pwned\x07 \x00 end",
                location=Location("dir,with:colon/100%.log", 42), fix="lower it")
    base.update(kw)
    return CIFinding(**base)  # type: ignore[arg-type]


def test_sarif_with_hostile_text_is_valid():
    doc = sarif_document([CILog("x.log", [hostile_finding()])], [])
    validate(doc)
    text = doc["runs"][0]["results"][0]["message"]["text"]
    assert "\x1b" not in text and "\x00" not in text and "\\x1b" in text


# --- GitHub workflow commands ------------------------------------------------------------------

def unescape_data(s: str) -> str:  # the runner's reverse mapping (actions/runner ActionCommand.cs)
    return s.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")


def unescape_property(s: str) -> str:
    return s.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def test_github_escaping_follows_the_toolkit():
    assert escape_data("50% a\r\nb: c, d") == "50%25 a%0D%0Ab: c, d"
    assert escape_property("50% a\r\nb: c, d") == "50%25 a%0D%0Ab%3A c%2C d"
    for s in ("%0A literal", "a%25b", "x:y,z\n%", "%%"):
        assert unescape_data(escape_data(s)) == s
        assert unescape_property(escape_property(s)) == s


def test_github_annotation_parses_back():
    line = annotation(hostile_finding())
    assert "\n" not in line and "\r" not in line
    m = re.fullmatch(r"::(\w+) (.*?)::(.*)", line)
    assert m and m.group(1) == "warning"
    props = dict(p.split("=", 1) for p in m.group(2).split(","))
    assert unescape_property(props["file"]) == "dir,with:colon/100%.log"
    assert props["line"] == "42" and unescape_property(props["title"]) == "KVD004 gpu-memory-utilization-high"
    msg = unescape_data(m.group(3))
    assert msg.startswith("100% used, a:b") and "\nfix: lower it" in msg
    assert "\x1b" not in msg and "\x00" not in msg
    assert annotation(hostile_finding(severity=Severity.INFO)).startswith("::notice ")
    assert annotation(hostile_finding(severity=Severity.ERROR, location=Location("a.log"))).startswith(
        "::error file=a.log,title=")


def test_github_format_of_a_sample(runner):
    res = invoke(runner, "analyze", "--format", "github", "sample_logs/hma_disabled_swa.log")
    lines = res.stdout.splitlines()
    assert len(lines) == 5 and res.exit_code == 0
    assert "::warning file=sample_logs/hma_disabled_swa.log,line=41,title=KVD001 hybrid-kv-manager-disabled::" in res.stdout
    assert all(re.match(r"::(error|warning|notice) file=[^,]+,line=\d+,title=KVD\d{3} ", ln) for ln in lines)
    assert render_github([CILog("gone.log", error="cannot open")]) == \
        "::error file=gone.log,title=kvlogdiag%3A cannot read::cannot open\n"


# --- JUnit XML -------------------------------------------------------------------------------

def test_junit_one_testcase_per_log_and_a_failure_per_finding_at_fail_on(runner, tmp_path):
    logs = ["sample_logs/hma_disabled_swa.log", "sample_logs/v1_single_gpu.log", tmp_path / "missing.log"]
    res = invoke(runner, "analyze", "--format", "junit", "--fail-on", "warning", *logs)
    assert res.exit_code == 2  # the unreadable input
    root = ET.fromstring(res.stdout)
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [str(x) for x in logs]
    assert [len(c.findall("failure")) for c in cases] == [3, 0, 0]  # KVD001, KVD012, KVD013 are warnings
    assert sorted(f.get("type") for f in cases[0].findall("failure")) == ["KVD001", "KVD012", "KVD013"]
    assert "KVD005 [info]" in cases[0].find("system-out").text
    assert cases[2].find("error") is not None
    assert suite.get("tests") == "3" and suite.get("failures") == "1" and suite.get("errors") == "1"
    strict = ET.fromstring(invoke(runner, "analyze", "--format", "junit", "--fail-on", "info", logs[1]).stdout)
    assert len(strict.find("testsuite/testcase").findall("failure")) == 2


def test_junit_with_hostile_text_parses_back():
    xml = render_junit([CILog("a<b>&.log", [hostile_finding(), hostile_finding(severity=Severity.INFO)])], "warning")
    root = ET.fromstring(xml)
    case = root.find("testsuite/testcase")
    assert case.get("name") == "a<b>&.log"
    assert len(case.findall("failure")) == 1 and "100% used" in case.find("failure").get("message")


def test_junit_for_deployment_and_scan(runner):
    res = invoke(runner, "deployment", "--format", "junit", "--fail-on", "warning", "sample_logs/deployments/pd-version-differs")
    cases = ET.fromstring(res.stdout).findall("testsuite/testcase")
    assert len(cases) == 2 and all(c.find("failure").get("type") == "KVD110" for c in cases)  # both logs differ
    assert res.exit_code == 1
    res = invoke(runner, "scan", "sample_logs", "-j", "1", "--no-progress", "--format", "junit")
    cases = ET.fromstring(res.stdout).findall("testsuite/testcase")
    assert len(cases) == len({c.get("name") for c in cases}) >= len(SAMPLES)


# --- -o, --quiet, --statistics ---------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "sarif", "github", "junit"])
def test_output_file_holds_what_stdout_would(runner, tmp_path, fmt):
    log = "sample_logs/hma_disabled_swa.log"
    plain = invoke(runner, "analyze", "--format", fmt, log)
    target = tmp_path / f"out.{fmt}"
    target.write_text("old")
    res = invoke(runner, "analyze", "--format", fmt, "-o", target, log)
    assert res.exit_code == plain.exit_code and res.stdout == ""
    assert target.read_text(encoding="utf-8") == plain.stdout


def test_output_to_a_missing_folder_is_exit_2_before_the_work(runner, tmp_path):
    for cmd in (["analyze", "sample_logs/v1_single_gpu.log"], ["deployment", "sample_logs/deployments/healthy-1p1d"],
                ["scan", "sample_logs/v1_single_gpu.log", "--format", "sarif"]):
        res = invoke(runner, *cmd, "-o", tmp_path / "nope" / "x.out")
        assert res.exit_code == 2 and "does not exist" in res.stderr and res.stderr.count("\n") == 1


def test_quiet_prints_nothing_and_keeps_the_exit_code(runner):
    for args in (["analyze", "sample_logs/hma_disabled_swa.log", "--fail-on", "warning"],
                 ["deployment", "sample_logs/deployments/pd-version-differs", "--fail-on", "warning"],
                 ["scan", "sample_logs/hma_disabled_swa.log", "--fail-on", "warning", "--no-progress"]):
        loud = invoke(runner, *args)
        quiet = invoke(runner, *args, "--quiet")
        assert quiet.exit_code == loud.exit_code == 1
        assert quiet.stdout == "" and loud.stdout


def test_statistics_counts_per_rule(runner):
    logs = [rel(p) for p in SAMPLES]
    plain = json.loads(invoke(runner, "analyze", "--format", "json", "--run", "all", *logs).stdout)
    want = Counter(f["rule"] for a in plain["analyses"] for r in a["all_runs"] for f in r["findings"])
    res = invoke(runner, "analyze", "--statistics", "--format", "json", *logs)
    got = {r["rule"]: r["count"] for r in json.loads(res.stdout)["statistics"]}
    assert got == dict(want)
    text = invoke(runner, "analyze", "--statistics", *logs).stdout.splitlines()
    first = text[0].split()
    assert int(first[0].replace(",", "")) == max(want.values()) and first[1] in want
    assert len(text) == len(want)
    bad = invoke(runner, "analyze", "--statistics", "--format", "sarif", logs[0])
    assert bad.exit_code == 2 and "--statistics" in bad.stderr


def test_statistics_for_deployment_count_a_shared_finding_once(runner):
    res = invoke(runner, "deployment", "--statistics", "sample_logs/deployments/pd-version-differs")
    assert res.stdout.split() == ["1", "KVD110", "[warning]", "pd-version-mismatch"]


def test_a_failed_write_is_exit_2_and_keeps_the_previous_file(runner, tmp_path, monkeypatch):
    import kvlogdiag.cli.output as output

    def full_disk(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(output, "write_atomic", full_disk)
    target = tmp_path / "out.sarif"
    target.write_text("previous")
    res = invoke(runner, "analyze", "--format", "sarif", "-o", target, "sample_logs/v1_single_gpu.log")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr == f"kvlogdiag: error: {target}: cannot write (No space left on device); the previous file is kept\n"
    assert target.read_text() == "previous"


def test_analyze_deployment_takes_the_ci_formats_too(runner, tmp_path):
    folder = "sample_logs/deployments/pd-version-differs"
    direct = invoke(runner, "deployment", "--format", "sarif", folder)
    via = invoke(runner, "analyze", "--deployment", "--format", "sarif", "-o", tmp_path / "d.sarif", folder)
    assert via.exit_code == direct.exit_code and via.stdout == ""
    doc = json.loads((tmp_path / "d.sarif").read_text(encoding="utf-8"))
    validate(doc)
    assert doc["runs"][0]["results"] == json.loads(direct.stdout)["runs"][0]["results"]
