"""The findings of any command as CI formats need them: one flat `CIFinding` per finding, grouped per log.

``analyze`` (runs of `Analysis`), ``deployment`` (`Deployment` findings with their cited node lines) and
``scan`` (rows) all become `CILog` objects here, so SARIF, GitHub workflow commands and JUnit XML
(`kvlogdiag.render.sarif`, `.github`, `.junit`) and ``--statistics`` are written once for every command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from kvlogdiag.result import Analysis, Severity

#: where the rule documentation is published (helpUri of SARIF rules, links in the docs)
DOCS_URL = "https://github.com/kvlogdiag/kvlogdiag/blob/main/docs/"


@dataclass(frozen=True)
class Location:
    """A log file and, when known, the 1-based line of the evidence."""

    source: str
    line: int | None = None
    note: str | None = None  # what this line shows (a deployment citation: ``p.block_size``)


@dataclass(frozen=True)
class CIFinding:
    """One finding, located: what every CI format shows."""

    rule: str
    name: str
    severity: Severity
    message: str
    location: Location
    fix: str | None = None
    related: tuple[Location, ...] = ()
    run: int | None = None  # 1-based server start, when the log has several
    runs: int = 1
    container: str | None = None
    nodes: tuple[str, ...] = ()  # deployment findings: the nodes named

    @property
    def title(self) -> str:
        return f"{self.rule} {self.name}"

    def where(self) -> str:
        """`` (run 2 of 3, container api)`` — empty for a log with one run and no containers."""
        parts = []
        if self.runs > 1 and self.run is not None:
            parts.append(f"run {self.run} of {self.runs}")
        if self.container:
            parts.append(f"container {self.container}")
        if self.nodes:
            parts.append("nodes " + ", ".join(self.nodes))
        return f" ({', '.join(parts)})" if parts else ""


@dataclass
class CILog:
    """One input log (a JUnit test case): its findings, or the error that kept it from being read."""

    source: str
    findings: list[CIFinding] = field(default_factory=list)
    error: str | None = None


@dataclass(frozen=True)
class RuleInfo:
    """What a SARIF reportingDescriptor says about a rule."""

    code: str
    name: str
    severity: str
    summary: str
    help: str
    url: str | None


def _anchor(text: str) -> str:
    """GitHub's heading anchor: lower case, spaces to ``-``, punctuation other than ``-``/``_`` dropped."""
    return "".join(c for c in text.lower().replace(" ", "-") if c.isalnum() or c in "-_")


def unwrap(text: str) -> str:
    """A rule file's hard-wrapped text as paragraphs: wrapped lines joined, blank lines and list items kept."""
    paras = []
    for para in re.split(r"\n\s*\n", text.strip()):
        lines: list[str] = []
        for line in para.splitlines():
            line = line.strip()
            if lines and not re.match(r"^(?:[-*•]\s|\d+[.)]\s)", line):
                lines[-1] += " " + line
            else:
                lines.append(line)
        paras.append("\n".join(lines))
    return "\n\n".join(paras)


def rule_info(rule: Any) -> RuleInfo:
    """A single-log `Rule` or a `DeploymentRule` as a `RuleInfo` (help text: why, then the fix)."""
    why = unwrap(str(getattr(rule, "why", "") or ""))
    fix = unwrap(str(getattr(rule, "fix", "") or ""))
    text = why + (f"\n\nFix: {fix}" if fix else "")
    url: str | None = None
    if hasattr(rule, "scope"):  # a deployment rule: documented in a table of docs/deployment.md
        url = DOCS_URL + "deployment.md#deployment-rules"
    elif getattr(rule, "builtin", False):
        url = DOCS_URL + "rules.md#" + _anchor(f"{rule.code} {rule.name}")
    else:  # a --rules folder's rule: its first web reference, if any
        url = next((r for r in getattr(rule, "references", []) or [] if str(r).startswith(("https://", "http://"))), None)
    return RuleInfo(rule.code, rule.name, str(rule.severity), " ".join(str(rule.summary or rule.name).split()),
                    text or rule.name, url)


def logs_from_analyses(analyses: Iterable[Analysis], min_severity: str = "info",
                       errors: Iterable[tuple[str, str]] = ()) -> list[CILog]:
    """One `CILog` per input (its runs and containers together), in the order first seen; ``errors``:
    (source, message) of inputs that could not be read."""
    logs: dict[str, CILog] = {}
    for a in analyses:
        log = logs.setdefault(a.source, CILog(a.source))
        for f in a.visible_findings(min_severity):
            log.findings.append(CIFinding(f.rule, f.name, f.severity, f.message, Location(a.source, f.line), f.fix,
                                          run=a.run.index + 1, runs=a.run.count, container=a.container))
    for source, message in errors:
        logs.setdefault(source, CILog(source)).error = message
    return list(logs.values())


def logs_from_deployments(deps: Iterable[Any], min_severity: str = "info") -> list[CILog]:
    """One `CILog` per node log; a deployment finding is located at its first cited line and belongs to
    every node it names (a P/D mismatch fails both logs), a finding naming no node to the deployment."""
    out: list[CILog] = []
    for d in deps:
        by_name = {n.name: n for n in d.nodes}
        logs = {n.name: CILog(n.source or n.name) for n in d.nodes}
        for f in d.visible_findings(min_severity):
            cites = [Location(by_name[c.node].source if c.node in by_name else c.node, c.line, c.what) for c in f.evidence]
            if not cites:
                cites = [Location(by_name[n].source, None) for n in f.nodes if n in by_name]
            primary = cites[0] if cites else Location(f"deployment {d.name}")
            cf = CIFinding(f.rule, f.name, f.severity, f.message, primary, f.fix, tuple(cites[1:]), nodes=tuple(f.nodes))
            owners = [logs[n] for n in f.nodes if n in logs]
            if not owners:
                owners = [logs.setdefault(f"\0{d.name}", CILog(f"deployment {d.name}"))]
            for log in owners:
                log.findings.append(cf)
        out.extend(logs.values())
    return out


def logs_from_rows(rows: Iterable[dict[str, Any]], min_severity: str = "info") -> list[CILog]:
    """``scan`` rows (one per run) as one `CILog` per file; a row carries its findings under ``_findings``
    (kept in the ``--state`` file too: ``ROW_SCHEMA`` 5 re-reads the files of an older state)."""
    limit = Severity.threshold(min_severity)
    logs: dict[str, CILog] = {}
    for r in rows:
        source = str(r.get("source"))
        log = logs.setdefault(source, CILog(source))
        if r.get("error"):
            log.error = str(r["error"])
            continue
        run, runs, container = r.get("run"), r.get("runs") or 1, r.get("container")
        for d in r.get("_findings") or ():
            sev = Severity.parse(d["severity"])
            if sev >= limit:
                log.findings.append(CIFinding(d["rule"], d.get("name") or "", sev, d.get("message") or "",
                                              Location(source, d.get("line")), d.get("fix"),
                                              run=run, runs=runs, container=container))
    return list(logs.values())


def all_findings(logs: Iterable[CILog]) -> list[CIFinding]:
    """Every finding once (a deployment finding shared by two node logs counts once)."""
    seen: dict[int, CIFinding] = {}
    for log in logs:
        for f in log.findings:
            seen.setdefault(id(f), f)
    return list(seen.values())


def statistics(findings: Iterable[CIFinding]) -> list[dict[str, Any]]:
    """Count per rule, most frequent first (ruff's ``--statistics``): code, name, worst severity, count."""
    table: dict[str, dict[str, Any]] = {}
    for f in findings:
        row = table.setdefault(f.rule, {"rule": f.rule, "name": f.name, "severity": f.severity, "count": 0})
        row["count"] += 1
        row["severity"] = max(row["severity"], f.severity)
        row["name"] = row["name"] or f.name
    rows = sorted(table.values(), key=lambda r: (-r["count"], r["rule"]))
    return [dict(r, severity=r["severity"].label) for r in rows]


def render_statistics(rows: list[dict[str, Any]]) -> str:
    """The statistics as aligned text: ``count  code  [severity]  name`` per line."""
    if not rows:
        return "No findings.\n"
    width = max(len(f"{r['count']:,}") for r in rows)
    code_w = max(len(r["rule"]) for r in rows)
    sev_w = max(len(r["severity"]) for r in rows) + 2
    return "".join(f"{r['count']:>{width},}  {r['rule']:<{code_w}}  {'[' + r['severity'] + ']':<{sev_w}}  {r['name']}".rstrip() + "\n"
                   for r in rows)
