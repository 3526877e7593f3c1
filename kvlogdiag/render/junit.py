"""``--format junit``: JUnit XML for CI test reports (GitLab, Jenkins, Azure, the JUnit report actions).

One ``<testsuite>`` for the command, one ``<testcase>`` per log (``name`` = the log as given). Each
finding at or above ``--fail-on`` is a ``<failure>`` (``type`` = the rule code), the findings below it
are listed in the test case's ``<system-out>``; a log that could not be read is an ``<error>``. Built
with ElementTree (escaping by the library); characters XML 1.0 cannot hold are shown as escapes first.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Iterable

from kvlogdiag.render.ci import CIFinding, CILog
from kvlogdiag.render.redact import escape_controls
from kvlogdiag.result import Severity

# XML 1.0 Char: tab, LF, CR, U+0020-U+D7FF, U+E000-U+FFFD, U+10000-U+10FFFF
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(s: object) -> str:
    text = escape_controls(str(s))
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _finding_text(f: CIFinding) -> str:
    where = f"{f.location.source}:{f.location.line}" if f.location.line else f.location.source
    lines = [f"{where}: {f.rule} [{f.severity.label}] {f.name}{f.where()}", f"    {f.message}"]
    if f.fix:
        lines.append(f"    fix: {f.fix}")
    lines += [f"    see also {r.source}:{r.line}" + (f" ({r.note})" if r.note else "") for r in f.related]
    return "\n".join(lines)


def junit_tree(logs: Iterable[CILog], fail_on: str, command: str = "analyze") -> ET.Element:
    limit = Severity.threshold(fail_on)
    logs = list(logs)
    suites = ET.Element("testsuites", name="kvlogdiag")
    suite = ET.SubElement(suites, "testsuite", name=f"kvlogdiag {command}")
    failures = errors = 0
    for log in logs:
        case = ET.SubElement(suite, "testcase", classname=f"kvlogdiag.{command}", name=xml_text(log.source))
        if log.error:
            errors += 1
            ET.SubElement(case, "error", message=xml_text(log.error), type="InputError").text = xml_text(log.error)
        failing = [f for f in log.findings if f.severity >= limit]
        below = [f for f in log.findings if f.severity < limit]
        for f in failing:
            el = ET.SubElement(case, "failure", message=xml_text(f"{f.title}: {f.message}"), type=f.rule)
            el.text = xml_text(_finding_text(f))
        if failing:
            failures += 1
        if below:
            ET.SubElement(case, "system-out").text = xml_text("\n".join(_finding_text(f) for f in below))
    for el in (suites, suite):
        el.set("tests", str(len(logs)))
        el.set("failures", str(failures))
        el.set("errors", str(errors))
    suite.set("skipped", "0")
    return suites


def render_junit(logs: Iterable[CILog], fail_on: str, command: str = "analyze") -> str:
    tree = junit_tree(logs, fail_on, command)
    ET.indent(tree)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(tree, encoding="unicode") + "\n"
