"""Tests for ``kvlogdiag report``: golden Markdown, HTML structure, hostile logs, redaction, inputs.

Golden files live in ``tests/test_report/`` (pytest-regressions ``file_regression``); regenerate
with ``pytest tests/test_report.py --force-regen`` and review the diff against the logs by hand.
They are produced with ``--select KVD004`` so that rules added later do not churn them.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
import sys
import types
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import cli
from kvlogdiag.modes.report import build_document, build_section, redact_document, render_report_html, render_report_markdown
from kvlogdiag.pipeline import Analyzer
from kvlogdiag.render.analysis import fmt_bpt, fmt_gib, fmt_num
from kvlogdiag.result import Analysis

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLES = REPO_ROOT / "sample_logs"
MULTIRUN = REPO_ROOT / "tests" / "data" / "multirun"
GIB = 2**30
GOLDEN = ["v1_tp4_workers", "insufficient_kv_215000", "ascend_dsv4_d_node", "v1_dp2_tp4"]


# --- helpers --------------------------------------------------------------------------------------


@pytest.fixture
def run(tmp_path, monkeypatch):
    """``run(*args, input=None)``: invoke ``kvlogdiag report`` from the repository root with an
    empty configuration file (so a kvlogdiag.toml elsewhere cannot change the result)."""
    cfg = tmp_path / "empty-kvlogdiag.toml"
    cfg.write_text("", encoding="utf-8")
    monkeypatch.chdir(REPO_ROOT)

    def _run(*args: str, input: str | bytes | None = None):
        return CliRunner().invoke(cli, ["report", *args, "--config", str(cfg)], input=input)

    return _run


class Page(HTMLParser):
    """Every start tag with its attributes, every text node, and the cells of each table by id."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.end_tags: list[str] = []
        self.text: list[str] = []
        self.tables: dict[str | None, list[list[str]]] = {}
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "table":
            self._table = a.get("id")
            self.tables[self._table] = []
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        self.end_tags.append(tag)
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def named(self, tag: str) -> list[dict]:
        return [a for t, a in self.tags if t == tag]


def assert_inert_html(page: Page) -> None:
    """No script, no event handler, nothing loaded or linked from the network or javascript:."""
    assert not page.named("script")
    for tag, attrs in page.tags:
        assert tag not in ("iframe", "object", "embed", "link", "base", "form"), tag
        for name, value in attrs.items():
            assert not name.lower().startswith("on"), (tag, name)
            if name in ("href", "src", "action", "formaction", "poster", "srcset"):
                v = (value or "").strip().lower()
                assert not v.startswith(("http:", "https:", "//", "javascript:", "vbscript:")), (tag, name, value)
                if tag == "img":
                    assert v.startswith("data:image/png;base64,"), value


def md_to_html(md: str) -> str:
    """Render Markdown roughly as GitHub does (CommonMark + tables, raw HTML allowed)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table").render(md)


def inside_fences(md: str) -> list[str]:
    """Lines inside fenced code blocks."""
    inside = set(md.splitlines()) - set(outside_fences(md))
    return [ln for ln in md.splitlines() if ln in inside]


def outside_fences(md: str) -> list[str]:
    """The Markdown lines that are not inside a fenced code block."""
    out, fence = [], None
    for line in md.splitlines():
        s = line.strip()
        m = re.match(r"(`{3,}|~{3,})", s)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if re.fullmatch(re.escape(fence[0]) + "{%d,}" % len(fence), s):
                fence = None
            continue
        out.append(line)
    assert fence is None, "a fenced block is never closed"
    return out


def unescaped_pipes(line: str) -> int:
    n, i = 0, 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        if line[i] == "|":
            n += 1
        i += 1
    return n


def assert_tables_intact(md: str) -> None:
    """Every table row has as many cell separators as its header (no pipe leaked from the log)."""
    width = None
    for line in outside_fences(md):
        if line.startswith("|"):
            if width is None:
                width = unescaped_pipes(line)
            assert unescaped_pipes(line) == width, line
        else:
            width = None


def analyse(path: Path) -> Analysis:
    """The current run of a log, as every mode sees it."""
    return Analyzer().analyze_source(str(path)).current


# --- golden Markdown ------------------------------------------------------------------------------


@pytest.mark.parametrize("stem", GOLDEN)
def test_markdown_golden(run, file_regression, stem):
    res = run(f"sample_logs/{stem}.log", "--select", "KVD004", "--fail-on", "never")
    assert res.exit_code == 0, res.output
    file_regression.check(res.stdout, basename=stem, extension=".md")


ALL_SAMPLES = sorted(p.stem for p in SAMPLES.glob("*.log"))


@pytest.mark.parametrize("stem", ALL_SAMPLES)
def test_every_sample_renders_well_formed(run, stem):
    res = run(f"sample_logs/{stem}.log", "--fail-on", "never")
    assert res.exit_code == 0, res.output
    md = res.stdout
    assert_tables_intact(md)
    assert md.count("<details>") == md.count("</details>")
    page = Page(md_to_html(md))
    assert_inert_html(page)
    assert len(page.named("details")) == md.count("<details>")
    res = run(f"sample_logs/{stem}.log", "--fail-on", "never", "--format", "html")
    assert res.exit_code == 0, res.output
    page = Page(res.stdout)
    assert_inert_html(page)
    assert len(page.named("details")) == page.end_tags.count("details")
    md_section = md.split("### KV cache figures per rank")[1].split("###")[0]
    md_rows = [ln for ln in md_section.splitlines() if ln.startswith("| ")][1:]  # minus the header
    html_rows = page.tables.get("figures", [[]])[1:]
    assert len(html_rows) == len(md_rows)  # one row per rank in both formats


# --- figures, capacity ----------------------------------------------------------------------------


def test_html_figures_table_matches_the_log(run, tmp_path):
    """One row per rank; every figure is the one on the line the row cites."""
    out = tmp_path / "report.html"
    res = run("sample_logs/v1_tp4_workers.log", "--format", "html", "-o", str(out))
    assert res.exit_code == 0, res.output
    assert res.stdout == ""
    page = Page(out.read_text(encoding="utf-8"))
    assert_inert_html(page)
    rows = page.tables["figures"]
    assert rows[0] == ["rank", "DP group", "available KV GiB", "tokens", "bytes/token", "lines (memory/tokens)"]
    body = rows[1:]
    assert len(body) == 4
    assert sorted(r[0] for r in body) == ["Worker_TP0", "Worker_TP1", "Worker_TP2", "Worker_TP3"]
    log = (SAMPLES / "v1_tp4_workers.log").read_bytes().decode("utf-8").split("\n")  # the log has lone \r
    for rank, group, avail, tokens, bpt, lines in body:
        mem_line, tok_line = (int(x) for x in lines.split("/"))
        gib = float(avail.removesuffix(" GiB"))
        n = int(tokens.replace(",", ""))
        assert f"({rank} " in log[mem_line - 1] and f"Available KV cache memory: {gib:g} GiB" in log[mem_line - 1]
        assert f"GPU KV cache size: {n:,} tokens" in log[tok_line - 1]
        assert bpt.startswith(f"{gib * GIB / n:,.0f} B")
        assert group == "DP0"
    # hand check of one row: 37.01 GiB = 39,739,184,906 B (the log's own byte figure) / 485,088 tokens
    assert ["Worker_TP2", "DP0", "37.01 GiB", "485,088", "81,922 B (80.0 KiB)", "118/126"] in body
    mem = page.tables["memory"]
    assert mem[0][:8] == ["rank", "weights", "activation peak", "non-torch", "CUDA graph", "KV cache", "total", "headroom"]
    # 79.18 − (32.89 + 1.94 + 1.06 + 0.83 + 37.01) = 5.45
    assert ["Worker_TP2", "32.89 GiB", "1.94 GiB", "1.06 GiB", "0.83 GiB", "37.01 GiB", "79.18 GiB", "5.45 GiB", "—"] in mem
    cap = page.tables["capacity"]
    # smallest pool 485,088 tokens: 118.4 / 59.2 / 14.8 / 7.40 (vLLM: 7.40x) requests; no 128K row above
    # the 65,536 max-model-len (vLLM rejects longer requests)
    assert cap[1:] == [["4K", "4,096", "118", "118"], ["8K", "8,192", "59", "59"], ["32K", "32,768", "14", "14"],
                       ["max-model-len", "65,536", "7", "7"]]


def test_capacity_sums_dp_groups():
    cap = build_section(analyse(SAMPLES / "ascend_dsv4_d_node.log"))["capacity"]
    assert [g["tokens"] for g in cap["groups"]] == [4332401, 4335267, 4327979, 4333870]
    by = {r["label"]: r for r in cap["rows"]}
    # 4K: 1057 + 1058 + 1056 + 1058 = 4229; 1M: 4.13 → 4 per group (vLLM: 4.13x), 16 in total
    assert (by["4K"]["per_group_min"], by["4K"]["per_group_max"], by["4K"]["total"]) == (1056, 1058, 4229)
    assert (by["max-model-len"]["tokens"], by["max-model-len"]["per_group_min"], by["max-model-len"]["total"]) == (1048576, 4, 16)


def test_capacity_extrapolates_missing_dp_groups():
    a = analyse(SAMPLES / "v1_single_gpu.log")
    a.config["data_parallel_size"] = 3  # the log shows one group of three
    cap = build_section(a)["capacity"]
    row = cap["rows"][0]
    assert row["total"] == 3 * row["per_group_min"]
    assert any("1 of 3 DP groups" in n for n in cap["notes"])


def test_capacity_rows_stop_at_max_model_len():
    # vLLM rejects a request longer than max-model-len (vllm 0.23.0 vllm/renderers/params.py:337):
    # no 32K or 128K row for a 20,000-token limit, the limit itself is the last row (issue 12)
    a = analyse(SAMPLES / "v1_single_gpu.log")
    a.config["max_model_len"] = 20000
    cap = build_section(a)["capacity"]
    assert [(r["label"], r["tokens"]) for r in cap["rows"]] == [("4K", 4096), ("8K", 8192), ("max-model-len", 20000)]


def test_capacity_from_insufficient_kv_error():
    cap = build_section(analyse(SAMPLES / "insufficient_kv_215000.log"))["capacity"]
    assert cap["basis"] == "insufficient_kv"
    # vLLM: "the estimated maximum model length is 77248" → 77,248 tokens in the pool
    assert [(r["label"], r["total"]) for r in cap["rows"]] == [("4K", 18), ("8K", 9), ("32K", 2), ("128K", 0), ("max-model-len", 0)]


# --- server starts (runs) ------------------------------------------------------------------------


def analyze_run(log: Path, which: str) -> dict:
    """``analyze --format json --run WHICH``: the selected run's figures, its KV lines from all_runs."""
    res = CliRunner().invoke(cli, ["analyze", "--format", "json", "--run", which, "--fail-on", "never", str(log)])
    assert res.exit_code == 0, res.output
    a = json.loads(res.stdout)["analyses"][0]
    own = [r for r in a.get("all_runs", [a]) if r["run"]["index"] == a["run"]["index"]][0]
    a["kv_cache"]["max_concurrency"] = own["kv_cache"]["max_concurrency"]  # top level lists every run's lines
    return a


@pytest.mark.parametrize("which", ["last", "1", "first", "2"])
@pytest.mark.parametrize("log", sorted(MULTIRUN.glob("*.log")), ids=lambda p: p.stem)
def test_report_states_the_figures_of_the_run_analyze_states(run, log, which):
    """Two server starts in one log: report --run X shows analyze --run X's run, not the other one or a
    mix (before, a 1-GPU Qwen start and a TP4 Llama start gave a 5-rank table and a median over both)."""
    a = analyze_run(log, which)
    res = run(str(log), "--format", "html", "--run", which, "--no-redact", "--fail-on", "never")
    assert res.exit_code == 0, res.output
    page = Page(res.stdout)
    r = a["run"]
    assert f"run {r['index'] + 1} of 2{' (current)' if r['current'] else ''}, lines {r['first_line']:,}–{r['last_line']:,}" \
        in res.stdout
    summary = dict(page.tables["summary"][1:])
    kv, cfg = a["kv_cache"], a["config"]
    assert summary["model"] == (cfg["model"] or "—")
    assert summary["TP / PP / DP"] == " / ".join(fmt_num(cfg[k]) for k in ("tensor_parallel_size", "pipeline_parallel_size",
                                                                            "data_parallel_size"))
    assert summary["bytes per token (per rank)"].startswith(fmt_bpt(kv["bytes_per_token"]))
    pairs = kv["bytes_per_token_by_rank"]
    rows = [row for row in page.tables.get("figures", [[]])[1:] if "—" not in row[5]]
    assert sorted((row[0], row[2], row[3], row[5]) for row in rows) == sorted(
        (p["rank"] or "—", fmt_gib(p["available_gib"]), fmt_num(p["tokens"]), f"{p['memory_line']}/{p['tokens_line']}")
        for p in pairs)
    if not pairs:
        assert "capacity" not in page.tables
        return
    # the max-model-len row: whole requests of the smallest pool, vLLM's 'Maximum concurrency' rounded down
    cap = dict((row[0], row[2]) for row in page.tables["capacity"][1:])
    logged = min(m["concurrency"] for m in kv["max_concurrency"] if m["tokens_per_request"] == cfg["max_model_len"])
    assert cap["max-model-len"] == fmt_num(math.floor(logged))
    assert cap["max-model-len"] == fmt_num(min(p["tokens"] for p in pairs) // cfg["max_model_len"])


def test_report_run_all_has_one_section_per_run_newest_first(run):
    log = "tests/data/multirun/concat_single_then_tp4.log"
    md = run(log, "--run", "all", "--select", "KVD004", "--fail-on", "never").stdout
    heads = [ln for ln in md.splitlines() if ln.startswith("## ")]
    assert heads == ["## kvlogdiag report: tests/data/multirun/concat\\_single\\_then\\_tp4.log — run 2 of 2 (current), lines 116–312",
                     "## kvlogdiag report: tests/data/multirun/concat\\_single\\_then\\_tp4.log — run 1 of 2, lines 1–115"]
    first, second = md.split(heads[1])
    assert "| Worker\\_TP2 | DP0 | 37.01 GiB | 485,088 |" in first and "EngineCore" not in first
    assert "| EngineCore\\_DP0 | DP0 | 53.91 GiB | 1,009,456 | 57,343 B (56.0 KiB) | 38/39 |" in second and "Worker" not in second
    assert md.count("<sub>Generated by kvlogdiag") == 1
    assert_tables_intact(md)
    page = Page(run(log, "--run", "all", "--format", "html", "--fail-on", "never").stdout)
    assert_inert_html(page)
    assert [a["id"] for a in page.named("section")] == ["run-2", "run-1"]
    assert len(page.tables["figures-run2"]) == 1 + 4 and len(page.tables["figures-run1"]) == 1 + 1


def test_report_run_out_of_range_is_a_usage_error(run):
    res = run("tests/data/multirun/concat_single_then_tp4.log", "--run", "3")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr == "kvlogdiag: error: tests/data/multirun/concat_single_then_tp4.log: no run 3 (the input has 2)\n"
    res = run("tests/data/multirun/concat_single_then_tp4.log", "--run", "latest")
    assert res.exit_code == 2 and "use last, first, all or a run number" in res.stderr


def test_report_exit_code_counts_only_the_runs_shown(run, tmp_path):
    """First start at --gpu-memory-utilization 0.995 (a KVD004 error), then a restart at 0.92 (quiet)."""
    log = tmp_path / "restarted.log"
    log.write_bytes(Path(utilization_log(tmp_path, 0.995)).read_bytes() + (SAMPLES / "v1_single_gpu.log").read_bytes())
    assert run(str(log), "--select", "KVD004").exit_code == 0
    assert run(str(log), "--select", "KVD004", "--run", "1").exit_code == 1
    assert run(str(log), "--select", "KVD004", "--run", "all").exit_code == 1


# --- HTML -----------------------------------------------------------------------------------------


def test_html_has_charts_with_matplotlib(run):
    pytest.importorskip("matplotlib")
    res = run("sample_logs/ascend_dsv4_d_node.log", "--format", "html")
    assert res.exit_code == 0, res.output
    page = Page(res.stdout)
    assert_inert_html(page)
    imgs = page.named("img")
    assert len(imgs) == 2  # memory per rank, capacity
    for img in imgs:
        data = base64.b64decode(img["src"].split(",", 1)[1], validate=True)
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        assert img["alt"]
    assert len(page.tables["figures"]) == 1 + 4
    assert "matplotlib, which is not installed" not in res.stdout


def test_html_without_matplotlib_has_a_note(run, monkeypatch):
    for mod in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, mod, None)  # import → ImportError
    res = run("sample_logs/v1_tp4_workers.log", "--format", "html")
    assert res.exit_code == 0, res.output
    page = Page(res.stdout)
    assert not page.named("img")
    assert "Charts need matplotlib, which is not installed" in res.stdout
    assert len(page.tables["figures"]) == 1 + 4


def test_html_is_self_contained(run):
    res = run("sample_logs/v1_dp2_tp4.log", "--format", "html")
    page = Page(res.stdout)
    assert_inert_html(page)
    assert not page.named("link") and not page.named("script")
    csp = [a for a in page.named("meta") if a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]["content"]
    assert not re.search(r"url\(|@import", "".join(page.text))  # no CSS fetches


# --- hostile log ----------------------------------------------------------------------------------

HOSTILE = "\n".join([
    "export VLLM_EVIL=`rm`|</details>[x](javascript:alert(1))",
    "(APIServer pid=1) INFO 10-20 13:41:10 [api_server.py:1839] vLLM API server version 0.11.0",
    "(APIServer pid=1) INFO 10-20 13:41:10 [utils.py:233] non-default args: {'model': "
    "'<script>alert(1)</script></details>`x`|y|[x](javascript:alert(1))', 'max_model_len': 4096, "
    "'gpu_memory_utilization': 0.995}",  # a KVD004 error: this line is shown as its evidence
    "(EngineCore_DP0 pid=2) INFO 10-20 13:41:50 [gpu_worker.py:298] Available KV cache memory: 10.0 GiB",
    "(EngineCore_DP0 pid=2) INFO 10-20 13:41:50 [kv_cache_utils.py:1087] GPU KV cache size: 81,920 tokens",
    "(EngineCore_DP0 pid=2) ERROR 10-20 13:41:51 [core.py:708] EngineCore failed to start. <script>alert(2)</script> ```` </details> |",
    "",
])
DANGEROUS = ["<script", "</script", "</details><", "<img", "onerror"]


@pytest.fixture
def hostile_log(tmp_path) -> str:
    p = tmp_path / "hostile<script>x.log"
    p.write_text(HOSTILE, encoding="utf-8")
    return str(p)


def test_hostile_log_markdown_is_inert(run, hostile_log):
    res = run(hostile_log, "--fail-on", "never")
    assert res.exit_code == 0, res.output
    md = res.stdout
    assert "alert" in md  # the hostile text is shown …
    outside = "\n".join(outside_fences(md))
    for bad in DANGEROUS:  # … but only escaped, outside code blocks
        assert bad not in outside, bad
    assert not re.search(r"(?<!\\)\]\(javascript:", outside)  # "](" only as "\]("
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in outside
    assert "\\[x\\](javascript:alert(1))" in outside
    assert "\\`x\\`\\|y\\|" in outside
    # inside fenced code blocks the text is kept as is (GitHub shows entities in fences literally);
    # a fence is code, so the rendered page below must still have no script element
    assert "<script>alert(1)</script>" in "\n".join(inside_fences(md))
    assert outside.count("<details>") == outside.count("</details>")
    assert_tables_intact(md)
    page = Page(md_to_html(md))
    assert_inert_html(page)
    assert not page.named("a") and not page.named("img")
    assert len(page.named("details")) == outside.count("<details>")
    assert "<script>alert(1)</script>" in "".join(page.text)  # rendered as text


def test_hostile_log_html_is_inert(run, hostile_log):
    res = run(hostile_log, "--format", "html", "--fail-on", "never")
    assert res.exit_code == 0, res.output
    page = Page(res.stdout)
    assert_inert_html(page)
    assert not page.named("a")
    assert len(page.named("details")) == page.end_tags.count("details")
    text = "".join(page.text)
    assert "<script>alert(1)</script></details>`x`|y|[x](javascript:alert(1))" in text
    assert "hostile<script>x.log" in text  # the source name too


# --- redaction ------------------------------------------------------------------------------------

SECRET_LOG = "\n".join([
    "export VLLM_HOST_IP=10.1.2.3",
    "export VLLM_API_KEY=vk-9f8e7d6c5b4a3210",
    "(APIServer pid=100) INFO 10-20 13:41:10 [api_server.py:1839] vLLM API server version 0.11.0",
    "(APIServer pid=100) INFO 10-20 13:41:10 [utils.py:233] non-default args: {'model_tag': '/home/alice/models/Llama-3.1-8B-Instruct', "
    "'host': 'gpu-node-07.corp.example.com', 'api_key': ['sk-proj-AbCdEfGhIjKlMnOpQrSt'], 'hf_token': 'hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345', "
    "'model': '/home/alice/models/Llama-3.1-8B-Instruct', 'max_model_len': 32768, 'gpu_memory_utilization': 0.995, "
    "'kv_transfer_config': KVTransferConfig(kv_connector='NixlConnector', kv_role='kv_both', kv_ip='10.1.2.3', kv_port=14579, "
    "kv_connector_extra_config={'owner': 'alice@example.com', 'peer': 'fe80::1ff:fe23:4567:890a'})}",
    "(EngineCore_DP0 pid=200) INFO 10-20 13:41:50 [gpu_worker.py:298] Available KV cache memory: 53.91 GiB",
    "(EngineCore_DP0 pid=200) INFO 10-20 13:41:50 [kv_cache_utils.py:1087] GPU KV cache size: 1,009,456 tokens",
    "(APIServer pid=100) INFO:     10.1.2.3:50000 - \"POST /v1/completions HTTP/1.1\" 200 OK",
    "",
])
SECRETS = ["10.1.2.3", "vk-9f8e7d6c5b4a3210", "gpu-node-07", "corp.example.com", "sk-proj-AbCdEfGhIjKlMnOpQrSt",
           "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "/home/alice", "alice@example.com", "fe80::1ff:fe23:4567:890a"]


@pytest.fixture
def secret_log(tmp_path) -> str:
    p = tmp_path / "secrets.log"
    p.write_text(SECRET_LOG, encoding="utf-8")
    return str(p)


@pytest.mark.parametrize("fmt", ["markdown", "html"])
def test_redaction_masks_everything_shown(run, secret_log, fmt):
    plain = html.unescape(run(secret_log, "--format", fmt, "--no-redact").stdout)
    for s in SECRETS:  # the secrets do reach the report (the args line as KVD004's evidence) …
        assert s in plain, s
    res = run(secret_log, "--format", fmt, "--fail-on", "never")
    assert res.exit_code == 0, res.output
    shown = html.unescape(res.stdout)
    for s in SECRETS:  # … and redaction removes every one of them
        assert s not in shown, s
    for mask in ("<host-1>", "<api-key-1>", "<api-key-2>", "<hf-token-1>", "<user-1>", "<email-1>", "<ip-1>", "<ip-2>"):
        assert mask in shown, mask
    assert "/home/<user-1>/models/Llama-3.1-8B-Instruct" in shown
    assert "Llama-3.1-8B-Instruct" in shown
    # the same IP gets the same mask in the JSON config, the env table and the evidence line
    kv_ip = re.search(r'"kv_ip": "(<ip-\d+>)"', shown).group(1)
    env = re.search(r"VLLM_HOST_IP(?:\W|</?td>)+(<ip-\d+>)", shown.replace("\\", "")).group(1)
    evidence = re.search(r"kv_ip='(<ip-\d+>)'", shown).group(1)
    assert kv_ip == env == evidence
    assert re.search(r"'peer': '(<ip-\d+>)'", shown).group(1) != kv_ip
    assert "redaction on: masked 1 host name, 2 IP addresses, 1 user name, 2 API keys, 1 Hugging Face token, 1 e-mail address" in shown


def test_redaction_covers_the_source_name():
    doc = build_document([analyse(SAMPLES / "v1_single_gpu.log")])
    doc["source"] = doc["sections"][0]["analysis"]["source"] = "/home/alice/logs/node-1.log"
    doc = redact_document(doc)
    for text in (render_report_markdown(doc), render_report_html(doc, charts=False)):
        assert "alice" not in text
        assert "/home/&lt;user-1&gt;/logs/node-1.log" in text or "/home/&lt;user-1&gt;/logs/node\\-1.log" in text


# --- inputs and exit codes ------------------------------------------------------------------------


def test_stdin_paste(run):
    log = (SAMPLES / "v1_single_gpu.log").read_bytes()  # bytes: text mode would turn its lone \r into lines
    for args in ((), ("-",)):
        res = run(*args, input=log)
        assert res.exit_code == 0, res.output
        assert res.stdout.startswith("## kvlogdiag report: stdin\n")
        assert "| EngineCore\\_DP0 | DP0 | 53.91 GiB | 1,009,456 | 57,343 B (56.0 KiB) | 38/39 |" in res.stdout
        assert "Ctrl-D" not in res.stderr  # stdin is not a terminal here


def test_stdin_terminal_gets_a_hint(run, monkeypatch):
    monkeypatch.setattr("kvlogdiag.modes.report._stdin_is_tty", lambda: True)
    res = run(input=(SAMPLES / "v1_single_gpu.log").read_text(encoding="utf-8"))
    assert res.exit_code == 0, res.output
    assert "paste the log, then press Ctrl-D (Ctrl-Z Enter on Windows)" in res.stderr


def test_empty_paste_is_an_error(run):
    res = run(input="")
    assert res.exit_code == 2
    assert res.stderr.startswith("kvlogdiag: error: stdin: empty input")


def test_missing_file(run):
    res = run("no/such/server.log")
    assert res.exit_code == 2
    assert res.stdout == ""
    assert res.stderr == "kvlogdiag: error: no/such/server.log: no such file\n"


def test_file_and_clipboard_together(run):
    res = run("sample_logs/v1_single_gpu.log", "--clipboard")
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1


def test_clipboard(run, monkeypatch):
    fake = types.ModuleType("pyperclip")
    fake.paste = lambda: (SAMPLES / "v1_single_gpu.log").read_text(encoding="utf-8")
    monkeypatch.setitem(sys.modules, "pyperclip", fake)
    res = run("--clipboard")
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("## kvlogdiag report: clipboard\n")


def test_clipboard_without_pyperclip(run, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyperclip", None)
    res = run("--clipboard")
    assert res.exit_code == 2
    assert res.stderr == "kvlogdiag: error: --clipboard needs the optional pyperclip package: pip install 'kvlogdiag[clipboard]'\n"


def test_clipboard_unavailable(run, monkeypatch):
    class PyperclipException(RuntimeError):
        pass

    def paste():
        raise PyperclipException("Pyperclip could not find a copy/paste mechanism for your system. For more "
                                 "information, please visit\n https://pyperclip.readthedocs.io/en/latest/index.html#not-implemented-error")

    fake = types.ModuleType("pyperclip")
    fake.paste = paste
    monkeypatch.setitem(sys.modules, "pyperclip", fake)
    res = run("--clipboard")
    assert res.exit_code == 2
    assert res.stderr == ("kvlogdiag: error: clipboard: no clipboard available "
                          "(Pyperclip could not find a copy/paste mechanism for your system)\n")


def utilization_log(tmp_path: Path, util: float) -> str:
    """A vLLM 0.11.0 start with --gpu-memory-utilization ``util`` and nothing else to report."""
    p = tmp_path / f"util-{util}.log"
    p.write_text("\n".join([
        "(APIServer pid=1) INFO 10-20 13:41:10 [api_server.py:1839] vLLM API server version 0.11.0",
        "(APIServer pid=1) INFO 10-20 13:41:10 [utils.py:233] non-default args: {'model': 'Qwen/Qwen2.5-7B-Instruct', "
        f"'max_model_len': 4096, 'gpu_memory_utilization': {util}}}",
        "(EngineCore_DP0 pid=2) INFO 10-20 13:41:50 [gpu_worker.py:298] Available KV cache memory: 10.0 GiB",
        "(EngineCore_DP0 pid=2) INFO 10-20 13:41:50 [kv_cache_utils.py:1087] GPU KV cache size: 187,232 tokens",
        "",
    ]), encoding="utf-8")
    return str(p)


@pytest.mark.parametrize(
    ("util", "args", "code"),
    [
        (0.995, (), 1),  # KVD004 error: above every recipe value
        (0.995, ("--fail-on", "never"), 0),
        (0.995, ("--ignore", "KVD004"), 0),
        (0.97, (), 0),  # KVD004 info only
        (0.97, ("--fail-on", "info"), 1),
    ],
)
def test_exit_codes(run, tmp_path, util, args, code):
    log = utilization_log(tmp_path, util)
    for fmt in ("markdown", "html"):
        res = run(log, "--format", fmt, *args)
        assert res.exit_code == code, res.output


def test_findings_render_with_their_evidence(run, tmp_path):
    md = run(utilization_log(tmp_path, 0.995), "--fail-on", "never").stdout
    assert "### Findings (1)" in md and "#### KVD004 gpu-memory-utilization-high (error, line 2)" in md
    assert "**Fix:** " in md
    assert "<details><summary>evidence (line 2)</summary>" in md
    assert any(ln.startswith("2: (APIServer pid=1)") and "'gpu_memory_utilization': 0.995" in ln for ln in inside_fences(md))
    page = Page(run(utilization_log(tmp_path, 0.995), "--fail-on", "never", "--format", "html").stdout)
    assert "KVD004 gpu-memory-utilization-high (error, line 2)" in "".join(page.text)
    assert len(page.named("details")) == 1


def test_min_severity_hides_findings(run, tmp_path):
    log = utilization_log(tmp_path, 0.97)  # one KVD004 info
    assert "#### KVD004" in run(log).stdout
    res = run(log, "--min-severity", "warning")
    assert "### Findings (0)" in res.stdout
    assert "KVD004" not in res.stdout


def test_unwritable_output(run, tmp_path):
    res = run("sample_logs/v1_single_gpu.log", "-o", str(tmp_path / "missing-dir" / "r.md"))
    assert res.exit_code == 2
    assert res.stderr.startswith("kvlogdiag: error: ") and res.stderr.count("\n") == 1


def test_capacity_ignores_an_implausible_token_count(run):
    """2**62 tokens in 37 GiB is 9e-9 bytes per token: no capacity from it, and no '0 B' figure.
    (Counts beyond 2**63 are not read as numbers at all: see test_reliability_inputs.)"""
    head = "(EngineCore_DP0 pid=9) INFO 07-03 14:19:40 [gpu_worker.py:298] "
    log = f"{head}Available KV cache memory: 37.01 GiB\n{head}GPU KV cache size: {2**62:,} tokens\n"
    for fmt in ("markdown", "html"):
        res = run("-", "--format", fmt, "--fail-on", "never", input=log.encode())
        assert res.exit_code == 0, res.output
        out = html.unescape(res.stdout)
        assert "1,125,899,906,842,624" not in out  # 2**62 / 4096
        assert "0 B (0.0 KiB)" not in out
        assert "Not computed: line 2: 4,611,686,018,427,387,904 tokens in 37.01 GiB is 8.62e-09 bytes per token" in out


def _many_pairs_log(n: int) -> str:
    lines = ["(APIServer pid=1) INFO 09-26 07:50:00 [api_server.py:1] vLLM API server version 0.10.2"]
    lines += [f"(Worker_TP{i} pid={1000 + i}) INFO 09-26 07:54:56 [gpu_worker.py:298] Available KV cache memory: 37.01 GiB"
              for i in range(n)]
    lines += ["(EngineCore_0 pid=900) INFO 09-26 07:54:57 [kv_cache_utils.py:864] GPU KV cache size: 485,088 tokens"] * n
    return "\n".join(lines) + "\n"


def test_html_report_is_bounded_whatever_the_number_of_kv_figures(tmp_path):
    # issue 18: one bar and one table row per KV pair made a log of KV lines an image of gigabytes
    from click.testing import CliRunner

    from kvlogdiag.cli.main import cli
    from kvlogdiag.modes.report import MAX_CHART_BARS, MAX_REPORT_RANKS

    sizes = []
    for n in (MAX_REPORT_RANKS + 44, 8 * MAX_REPORT_RANKS):
        log = tmp_path / f"many{n}.log"
        log.write_text(_many_pairs_log(n))
        out = tmp_path / f"many{n}.html"
        r = CliRunner().invoke(cli, ["report", str(log), "--format", "html", "-o", str(out), "--fail-on", "never"])
        assert r.exit_code == 0, r.output
        page = out.read_text()
        # session 7: capped as the text summary (render/caps.py): the first and last 32 rows, the count and ranges
        assert f"Bounded report: {n:,} KV figures: the first and last 32 shown in the tables and the chart" in page
        assert page.count('<td class="num">485,088</td>') <= MAX_REPORT_RANKS and MAX_CHART_BARS == MAX_REPORT_RANKS
        sizes.append(len(page))
    # the same number of rows and bars; the last 32 of 2,048 have longer labels (Worker_TP2047, 4-digit lines)
    assert sizes[1] < sizes[0] * 1.1, sizes
