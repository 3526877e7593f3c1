"""User rules' line regexes inside the reader's prefilter (issue 17 item 3): the words a regex cannot
match without join the keyword finder, and every count, first line and finding is what reading every
line gives — plain, ANSI-coloured, docker-JSON, gzip and CRLF logs alike."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import SAMPLE_LOGS_DIR

from kvlogdiag.pipeline import Analyzer
from kvlogdiag.rules.context import Options
from kvlogdiag.rules.literals import required_literal


@pytest.mark.parametrize("pattern, word", [
    ("CUDA out of memory", "CUDA"),  # the rarest word, not the longest (prompts say 'memory')
    ("OOM", "OOM"),
    (r"Maximum concurrency for \d+ tokens", "concurrency"),
    (r"\bpreempted\b", "preempted"),
    ("foo(bar)?bazzz", "bazzz"),
    ("(KV cache) size", "cache"),
    ("ab*cdefg", "cdefg"),
    ("a|bbbbb", None),           # an alternation at the top: no word is required
    ("(?i)error", None),         # case-insensitive: the raw bytes may differ
    ("(?i:errors) seen", "seen"),
    ("x{3}", None),
    ("ab", None),                # too short to find
    (r"\p{Lu}+ failed", "failed"),  # regex-module syntax Python's re cannot parse
    ("[unclosed", None),
])
def test_required_literal(pattern, word):
    got = required_literal(pattern)
    if pattern.startswith(r"\p"):
        assert got in (None, "failed")  # None when re cannot parse it: every line is read then
    else:
        assert got == word


class EveryLine(Analyzer):
    """The reference: the reader feeds every line (what a line-regex rule used to cost)."""

    def line_prefilter(self):
        return None


RULES = {
    "ACME001-oom-seen": ("count('CUDA out of memory') >= 1", "line:CUDA out of memory"),
    "ACME002-nccl-timeout": ("any_line('NCCL (?:watchdog )?timeout')", "line:NCCL (?:watchdog )?timeout"),
    "ACME003-many-preempt": ("count('Preemptions: [1-9]') >= 2", "line:Preemptions: [1-9]"),
}


def _rules(tmp_path):
    d = tmp_path / "rules"
    d.mkdir()
    for stem, (cond, ev) in RULES.items():
        code, name = stem.split("-", 1)
        (d / f"{stem}.toml").write_text(
            f'code = "{code}"\nname = "{name}"\nseverity = "warning"\nsummary = "s"\nwhy = "w"\nfix = "f"\n'
            f'condition = "{cond}"\nmessage = "seen"\nevidence = ["{ev}"]\n')
    return str(d)


def _log_lines() -> list[str]:
    base = (SAMPLE_LOGS_DIR / "long_running_stats.log").read_text().splitlines()
    extra = ["ERROR 11-29 08:41:00 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
             "\x1b[31mERROR\x1b[0m CUDA out of memory (ANSI-coloured)",
             "WARNING [pynccl.py:2] NCCL watchdog timeout after 600000 ms",
             "INFO plain noise line mentioning memory but not the phrase",
             "INFO Engine 000: Running: 3 reqs, Preemptions: 4, GPU KV cache usage: 99.0%"]
    out = []
    for i, line in enumerate(base):
        out.append(line)
        if i % 7 == 3:
            out.append(extra[(i // 7) % len(extra)])
    return out


def _variants(tmp_path) -> dict[str, bytes]:
    lines = _log_lines()
    plain = ("\n".join(lines) + "\n").encode()
    docker = "".join(json.dumps({"log": ln + "\n", "stream": "stdout", "time": f"2025-11-29T08:40:{i % 60:02d}.000000000Z"}) + "\n"
                     for i, ln in enumerate(lines)).encode()
    return {"plain.log": plain, "crlf.log": plain.replace(b"\n", b"\r\n"), "docker.log": docker,
            "plain.log.gz": gzip.compress(plain, mtime=0)}


def test_counts_and_findings_equal_reading_every_line(tmp_path):
    opts = Options(rule_dirs=[_rules(tmp_path)])
    fast, ref = Analyzer(opts), EveryLine(opts)
    assert not fast.needs_every_line and fast.line_prefilter() is not None
    for name, data in _variants(tmp_path).items():
        p = tmp_path / name
        p.write_bytes(data)
        got, want = fast.analyze_source_split(str(p)), ref.analyze_source_split(str(p))
        assert [a.to_json() for a in got] == [a.to_json() for a in want], name

        def findings(parts):
            return [(f.rule, f.line, f.message, f.evidence) for a in parts for run in a.runs for f in run.findings]

        assert findings(got) == findings(want), name
        codes = {f[0] for f in findings(got)}
        assert {"ACME001", "ACME002", "ACME003"} <= codes, (name, codes)


def test_a_regex_without_a_required_word_still_reads_every_line(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "ACME009-any-gib.toml").write_text(
        'code = "ACME009"\nname = "any-gib"\nseverity = "info"\nsummary = "s"\nwhy = "w"\nfix = "f"\n'
        'condition = "count(\'[0-9]+ GiB|[0-9]+ MiB\') > 0"\nmessage = "m"\n')
    a = Analyzer(Options(rule_dirs=[str(d)]))
    assert a.needs_every_line and a.line_prefilter() is None
