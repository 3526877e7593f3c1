"""``--format github``: GitHub Actions workflow commands, one annotation per finding.

``::warning file=server.log,line=42,title=KVD004 gpu-memory-utilization-high::message`` — error →
``::error``, warning → ``::warning``, info → ``::notice``. Escaped as the Actions toolkit's
``command.ts`` does: in the message ``%`` ``\\r`` ``\\n`` become ``%25`` ``%0D`` ``%0A``; in a property
value ``:`` and ``,`` become ``%3A`` ``%2C`` as well. A log that could not be read is an ``::error``
naming the file.
"""

from __future__ import annotations

from typing import Iterable

from kvlogdiag.render.ci import CIFinding, CILog, all_findings
from kvlogdiag.render.redact import escape_controls
from kvlogdiag.result import Severity

COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(s: str) -> str:
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


def _props(**values: object) -> str:
    return ",".join(f"{k}={escape_property(escape_controls(str(v)))}" for k, v in values.items() if v is not None)


def annotation(f: CIFinding) -> str:
    """One workflow command for one finding."""
    line = f.location.line if isinstance(f.location.line, int) and f.location.line >= 1 else None
    text = f.message + f.where() + (f"\nfix: {f.fix}" if f.fix else "")
    return f"::{COMMAND[f.severity]} {_props(file=f.location.source, line=line, title=f.title)}::" \
           f"{escape_data(escape_controls(text))}"


def render_github(logs: Iterable[CILog]) -> str:
    logs = list(logs)
    out = [annotation(f) for f in all_findings(logs)]
    out += [f"::error {_props(file=log.source, title='kvlogdiag: cannot read')}::{escape_data(escape_controls(log.error))}"
            for log in logs if log.error]
    return "".join(line + "\n" for line in out)
