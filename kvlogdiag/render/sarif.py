"""SARIF 2.1.0 (OASIS) output: ``--format sarif``, for GitHub code scanning and other SARIF viewers.

One run of the tool ``kvlogdiag``: a ``reportingDescriptor`` per loaded rule (help text = the rule's
``why`` and ``fix``, ``helpUri`` = its section of docs/rules.md), a ``result`` per finding located at
the log file and line, the severity as the SARIF level (error → error, warning → warning, info →
note), and inputs that could not be read as ``toolExecutionNotifications``. The document is checked
against the official schema (tests/data/sarif/) in tests/test_ci_formats.py.
"""

from __future__ import annotations

import json
import os
from pathlib import PurePosixPath
from typing import Any, Iterable
from urllib.parse import quote

from kvlogdiag import __version__
from kvlogdiag.render.ci import DOCS_URL, CIFinding, CILog, Location, RuleInfo, all_findings
from kvlogdiag.render.redact import escape_controls
from kvlogdiag.result import Severity

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_LEVEL_BY_LABEL = {"error": "error", "warning": "warning", "info": "note"}


def artifact_uri(source: str) -> str:
    """A log path as a SARIF artifact URI: relative paths stay relative (to the working directory,
    ``%SRCROOT%``) with ``/`` separators, absolute ones become ``file://`` URIs, stdin is ``stdin``."""
    if source in ("-", "<stdin>", ""):
        return "stdin"
    if os.path.isabs(source):
        return "file://" + quote(PurePosixPath(source.replace(os.sep, "/")).as_posix())
    rel = source.replace(os.sep, "/")
    while rel.startswith("./"):
        rel = rel[2:]
    return quote(rel)


def _text(s: Any) -> str:
    return escape_controls(str(s))  # log text never drives a terminal that shows the file


def _location(loc: Location, ident: int | None = None) -> dict[str, Any]:
    uri = artifact_uri(loc.source)
    art: dict[str, Any] = {"uri": uri}
    if not uri.startswith("file:") and uri != "stdin":
        art["uriBaseId"] = "%SRCROOT%"
    phys: dict[str, Any] = {"artifactLocation": art}
    if isinstance(loc.line, int) and loc.line >= 1:
        phys["region"] = {"startLine": loc.line}
    out: dict[str, Any] = {"physicalLocation": phys}
    if ident is not None:
        out["id"] = ident
    if loc.note:
        out["message"] = {"text": _text(loc.note)}
    return out


def _descriptor(r: RuleInfo) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": r.code,
        "name": r.name,
        "shortDescription": {"text": _text(r.summary)},
        "fullDescription": {"text": _text(r.help.split("\n\nFix:")[0])},
        "help": {"text": _text(r.help)},
        "defaultConfiguration": {"level": _LEVEL_BY_LABEL.get(r.severity, "warning")},
        "properties": {"tags": ["vllm", "kv-cache"]},
    }
    if r.url:
        d["helpUri"] = r.url
    return d


def _result(f: CIFinding, rule_index: dict[str, int]) -> dict[str, Any]:
    text = f.message + f.where() + (f"\nFix: {f.fix}" if f.fix else "")
    res: dict[str, Any] = {"ruleId": f.rule, "level": LEVEL[f.severity], "message": {"text": _text(text)},
                           "locations": [_location(f.location)]}
    if f.rule in rule_index:
        res["ruleIndex"] = rule_index[f.rule]
    if f.related:
        res["relatedLocations"] = [_location(loc, i + 1) for i, loc in enumerate(f.related)]
    props: dict[str, Any] = {"severity": f.severity.label}
    if f.run is not None:
        props["run"] = f.run
        props["runs"] = f.runs
    if f.container:
        props["container"] = _text(f.container)
    if f.nodes:
        props["nodes"] = [_text(n) for n in f.nodes]
    res["properties"] = props
    return res


def sarif_document(logs: Iterable[CILog], rules: Iterable[RuleInfo], command: str = "analyze",
                   exit_code: int | None = None) -> dict[str, Any]:
    """The SARIF log as a dict (``rules``: every loaded rule; a finding of a rule not among them, such
    as a deployment rule's, gets a descriptor of its own code and name)."""
    logs = list(logs)
    descriptors = {r.code: r for r in rules}
    findings = all_findings(logs)
    for f in findings:
        if f.rule not in descriptors:
            descriptors[f.rule] = RuleInfo(f.rule, f.name or f.rule, f.severity.label, f.name or f.rule, f.name or f.rule, None)
    ordered = sorted(descriptors.values(), key=lambda r: r.code)
    index = {r.code: i for i, r in enumerate(ordered)}
    notes = [{"level": "error", "message": {"text": _text(f"{log.source}: {log.error}")},
              "locations": [_location(Location(log.source))]} for log in logs if log.error]
    invocation: dict[str, Any] = {"executionSuccessful": not notes, "commandLine": f"kvlogdiag {command}"}
    if exit_code is not None:
        invocation["exitCode"] = int(exit_code)
    if notes:
        invocation["toolExecutionNotifications"] = notes
    run: dict[str, Any] = {
        "tool": {"driver": {"name": "kvlogdiag", "version": __version__, "semanticVersion": __version__,
                            "informationUri": DOCS_URL.rsplit("/blob/", 1)[0],
                            "rules": [_descriptor(r) for r in ordered]}},
        "invocations": [invocation],
        "originalUriBaseIds": {"%SRCROOT%": {"description": {"text": "the working directory kvlogdiag ran in"}}},
        "results": [_result(f, index) for f in findings],
        "columnKind": "unicodeCodePoints",
    }
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def render_sarif(logs: Iterable[CILog], rules: Iterable[RuleInfo], command: str = "analyze",
                 exit_code: int | None = None) -> str:
    return json.dumps(sarif_document(logs, rules, command, exit_code), indent=2, ensure_ascii=False) + "\n"
