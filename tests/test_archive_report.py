"""``kvlogdiag scan … --html``: the archive page (docs/archive-report.md).

Checked as text (inert, self-contained, every chart a decodable PNG, the plain-table fallback without
matplotlib, bounded size) and, where Chromium and Playwright are installed, in a real headless Chromium:
no console error, no network request, every chart image decoded and drawn, a screenshot taken.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REPO_ROOT, SAMPLE_LOGS_DIR
from test_report import HOSTILE, Page, assert_inert_html

from kvlogdiag.cli.main import cli
from kvlogdiag.modes import archive_report
from kvlogdiag.modes.archive_report import MAX_SECTIONS, render_html, valid_detail

SAMPLE_ARGS = ["sample_logs", "--exclude", "deployments/*", "-j", "1", "--fail-on", "never", "--log-tz", "UTC"]
FULL_ARGS = ["sample_logs", "-j", "1", "--fail-on", "never", "--log-tz", "UTC"]  # the multi-node sets' logs too
SINGLE_NODE_SAMPLES = sorted(p for p in SAMPLE_LOGS_DIR.glob("*.log"))


@pytest.fixture
def scan_html(tmp_path, monkeypatch):
    """``scan_html(*args) -> (result, page text)``: scan from the repository root with an empty config."""
    cfg = tmp_path / "empty-kvlogdiag.toml"
    cfg.write_text("", encoding="utf-8")
    monkeypatch.chdir(REPO_ROOT)

    def _run(*args: str, out: str = "report.html"):
        target = tmp_path / out
        res = CliRunner().invoke(cli, ["scan", *args, "--html", str(target), "--config", str(cfg)])
        return res, (target.read_text(encoding="utf-8") if target.exists() else "")

    return _run


@pytest.fixture(scope="module")
def sample_page(tmp_path_factory):
    """(result, page path, page text) of all of sample_logs/ with charts: built once for the tests that read it."""
    pytest.importorskip("matplotlib")
    tmp = tmp_path_factory.mktemp("archive")
    cfg = tmp / "empty-kvlogdiag.toml"
    cfg.write_text("", encoding="utf-8")
    target = tmp / "report.html"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO_ROOT)
        res = CliRunner().invoke(cli, ["scan", *FULL_ARGS, "--html", str(target), "--config", str(cfg)])
    return res, target, (target.read_text(encoding="utf-8") if target.exists() else "")


def _no_matplotlib(monkeypatch) -> None:
    for mod in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, mod, None)  # import → ImportError


def _imgs(page: Page) -> list[dict]:
    return page.named("img")


def test_sample_archive_page(sample_page, monkeypatch):
    res, _, text = sample_page
    monkeypatch.chdir(REPO_ROOT)
    assert res.exit_code == 0, res.output
    page = Page(text)
    assert_inert_html(page)
    assert "Content-Security-Policy" in text
    imgs = _imgs(page)
    # runs by severity, findings over time, bytes/token, KV usage over time, and the runs with stats lines
    assert len(imgs) >= 4 + 5
    for img in imgs:
        data = base64.b64decode(img["src"].split(",", 1)[1], validate=True)
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and img["alt"]
    # runs by severity agrees with the scan's own rows
    rows = json.loads(CliRunner().invoke(cli, ["scan", *FULL_ARGS, "--format", "json"]).stdout)
    assert len(rows) > len(SINGLE_NODE_SAMPLES)
    sev = dict(page.tables["severity-table"][1:])
    want = {k: sum(1 for r in rows if archive_report.worst_of(r) == k) for k in ("error", "warning", "info", "clean")}
    assert {k: int(v) for k, v in sev.items()} == {k: v for k, v in want.items() if v}
    # bytes/token groups: one line per model × version × TP × dtype, with the row figures
    bpt = page.tables["bpt-table"]
    assert bpt[0] == ["model", "vLLM", "TP", "kv_cache_dtype", "runs", "min", "median", "max"]
    llama = [r for r in bpt if r[0] == "meta-llama/Llama-3.1-70B-Instruct"]
    assert llama == [["meta-llama/Llama-3.1-70B-Instruct", "0.10.2", "4", "auto", "1", "81,919", "81,919", "81,919"]]
    # a model with two figures is explained: gpt-oss-120b at TP 1 (vLLM 0.12.0) and TP 2 (0.33.0), in the ratio of the TPs
    assert "openai/gpt-oss-120b: 36,861–73,725 B/token — TP 1 vs 2 (vLLM version differs too): bytes per token is per rank" in text
    # Llama-3.1-8B on vLLM 0.13.0 and 0.20.0 (same TP and dtype): 131,067 vs 131,076 is rounding, not the versions
    assert "meta-llama/Llama-3.1-8B-Instruct: 131,067–131,076 B/token — the figures differ by less than 0.5 %" in text
    # DeepSeek-V4 (Ascend): TP 4 and TP 8 show the same 6,900, and 6,573 comes with kv_cache_dtype bfloat16 — put down to
    # the one setting that differs, never to TP, and with no claim about bytes per element (neither is a 1-byte dtype)
    assert ("/data/models/DeepSeek-V4-Flash-w8a8: 6,573–6,900 B/token — kv_cache_dtype auto vs bfloat16: the only setting "
            "that differs between them.") in text
    assert "Qwen/Qwen2.5-7B-Instruct: 28,671–57,343 B/token — TP 1 vs 2 (vLLM version differs too): bytes per token is per rank" in text
    # the worst runs link into their sections, and every link has its target
    ids = {a.get("id") for _, a in page.tags if a.get("id")}
    links = [a["href"][1:] for t, a in page.tags if t == "a" and a.get("href", "").startswith("#run-")]
    assert links and all(x in ids for x in links)
    assert page.tables["worst-table"][1][0].startswith("sample_logs/")  # the worst run first: an error run
    assert page.tables["worst-table"][1][2] == "error"
    assert "Charts need matplotlib" not in text
    assert f"at most {MAX_SECTIONS} run sections" in text


def test_fallback_tables_without_matplotlib(scan_html, monkeypatch):
    _no_matplotlib(monkeypatch)
    res, text = scan_html(*SAMPLE_ARGS)
    assert res.exit_code == 0, res.output
    page = Page(text)
    assert_inert_html(page)
    assert not _imgs(page)
    assert "Charts need matplotlib, which is not installed" in text
    for table in ("severity-table", "rules-over-time-table", "bpt-table", "kv-usage-table", "worst-table"):
        assert len(page.tables[table]) > 1, table
    # KV usage over time as a table: the highest usage of long_running_stats.log (99.6 %) is in it, and the
    # preemptions add up to what analyze counts in every sample (V0 warnings, V1 stats, RecomputeScheduler)
    usage = page.tables["kv-usage-table"][1:]
    assert "99.6" in [r[1] for r in usage]
    total = 0
    for p in SINGLE_NODE_SAMPLES:
        for a in json.loads(CliRunner().invoke(cli, ["analyze", str(p), "--format", "json", "--fail-on", "never"]).stdout)["analyses"]:
            for run in a.get("all_runs") or [a]:
                rt = run["runtime"]
                total += rt["preemptions"] + rt["stats_preemptions_total"] + rt["recompute_preemptions"]
    assert total > 100 and sum(int(r[2].replace(",", "")) for r in usage) == total


def test_pool_and_in_process_give_the_same_page(scan_html, monkeypatch):
    _no_matplotlib(monkeypatch)
    args = [a for a in SAMPLE_ARGS if a not in ("-j", "1")]
    _, one = scan_html(*args, "-j", "1", out="one.html")
    _, two = scan_html(*args, "-j", "2", out="two.html")  # 16 files: the process pool
    assert one == two and "<section " in one


def test_state_keeps_the_page_details(scan_html, tmp_path, monkeypatch):
    _no_matplotlib(monkeypatch)  # the same page twice is what counts here, not its charts (they cost seconds)
    state = str(tmp_path / "state.json")
    res1, page1 = scan_html(*SAMPLE_ARGS, "--state", state, out="a.html")
    assert res1.exit_code == 0 and f"{len(SINGLE_NODE_SAMPLES)} read, 0 unchanged" in res1.stderr
    res2, page2 = scan_html(*SAMPLE_ARGS, "--state", state, out="b.html")
    assert f"0 read, {len(SINGLE_NODE_SAMPLES)} unchanged" in res2.stderr
    assert page1 == page2
    doc = json.loads(Path(state).read_text())
    assert all(valid_detail(d) for rec in doc["files"].values() for d in rec["details"])
    assert all("_detail" not in r for rec in doc["files"].values() for r in rec["rows"])
    # a state written without --html has no details: the files are read again for the page
    state2 = str(tmp_path / "plain.json")
    CliRunner().invoke(cli, ["scan", *SAMPLE_ARGS, "--state", state2])
    res3, page3 = scan_html(*SAMPLE_ARGS, "--state", state2, out="c.html")
    assert f"{len(SINGLE_NODE_SAMPLES)} read, 0 unchanged" in res3.stderr and page3 == page1


def test_hostile_names_and_messages_are_escaped(scan_html, tmp_path, monkeypatch):
    _no_matplotlib(monkeypatch)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "evil<script>alert(1)<x>.log").write_text(HOSTILE, encoding="utf-8")
    res, text = scan_html(str(logs), "-j", "1", "--fail-on", "never")
    assert res.exit_code == 0, res.output
    assert_inert_html(Page(text))
    assert "<script" not in text and "evil&lt;script&gt;alert(1)&lt;x&gt;.log" in text


def test_empty_and_undated_archives(scan_html, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    res, text = scan_html(str(empty), "-j", "1")
    assert res.exit_code == 0 and "0 files, 0 server starts" in text and "No run has a finding." in text
    undated = render_html([{"source": "a.log", "n_error": 1, "findings": "KVD019", "error": None, "run": 1, "runs": 1}], {},
                          {"files": 1, "paths": ["a.log"]})
    assert "No run carries a time" in undated and 'href="#run-1"' in undated and 'id="run-1"' in undated


def test_details_from_a_hand_edited_state_are_checked():
    good = {"start": None, "end": None, "points": [[1.0, 5.0, 0]], "hours": {"0": [5.0, 0]}, "kv_usage_max": 5.0,
            "preemptions": 0, "findings": [["KVD001", "info", "x", "msg", 3]]}
    assert valid_detail(good)
    for bad in ({**good, "points": [[1.0, "5", 0]]}, {**good, "hours": {"x": [1, 0]}}, {**good, "findings": [["K", 1, "x", "m", 3]]},
                {**good, "start": 5}, "text", None):
        assert not valid_detail(bad)


def _synthetic_rows(n: int) -> list[dict]:
    rows = []
    for i in range(n):
        t0 = 1_767_225_600 + i * 600  # 2026-01-01 plus ten minutes per run
        rows.append({"source": f"archive/node-{i % 97}/server-{i}.log", "run": 1, "runs": 1, "model": f"model-{i % 7}",
                     "vllm_version": "0.11.0", "tp": 1 + i % 4, "kv_cache_dtype": "auto", "bytes_per_token": 100_000.0 / (1 + i % 4),
                     "n_error": int(i % 11 == 0), "n_warning": i % 3, "n_info": 1, "findings": "KVD004,KVD013" if i % 3 else "KVD005",
                     "error": None, "run_first_line": 1, "run_last_line": 100,
                     "_detail": {"start": "2026-01-01T00:00:00Z", "end": None,
                                 "points": [[t0 + 10 * k, float(k % 100), int(k % 5 == 0)] for k in range(96)],
                                 "hours": {str(int(t0 // 3600)): [99.0, 3]}, "kv_usage_max": 99.0, "preemptions": 3,
                                 "findings": [["KVD013", "warning", "kv-usage-high", "x" * 600, 5]] * 20}})
    return rows


def test_page_size_is_bounded_whatever_the_archive(monkeypatch):
    small = render_html(_synthetic_rows(200), {}, {"files": 200, "paths": ["archive"]}, charts=False)
    large = render_html(_synthetic_rows(5_000), {}, {"files": 5_000, "paths": ["archive"]}, charts=False)
    assert large.count("<section ") == small.count("<section ") == MAX_SECTIONS
    # 25 times the runs: the page grows by the longer names and counts only, not by the runs
    assert len(large) < 1.2 * len(small) and len(large) < 3_000_000
    assert "more runs with findings not listed" in large
    page = Page(large)
    assert len(page.tables["rules-over-time-table"]) - 1 <= archive_report.MAX_BUCKETS
    assert len(page.tables["kv-usage-table"]) - 1 <= archive_report.MAX_BUCKETS


# --- a real browser ----------------------------------------------------------------------------------


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return os.environ.get("KVLOGDIAG_CHROMIUM")


@pytest.mark.skipif(_chromium() is None, reason="no Chromium installed (apt-get install chromium; see docs/archive-report.md)")
def test_sample_archive_page_in_headless_chromium(sample_page, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install 'kvlogdiag[browser]')")
    res, page_file, text = sample_page
    assert res.exit_code == 0, res.output
    n_imgs = len(_imgs(Page(text)))
    console, errors, requests = [], [], []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            pg = browser.new_page(viewport={"width": 1200, "height": 900})
            pg.on("console", lambda m: console.append((m.type, m.text)))
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.on("request", lambda r: requests.append(r.url))
            pg.route("**/*", lambda route: route.abort() if not route.request.url.startswith(("file:", "data:")) else route.continue_())
            pg.goto(page_file.as_uri(), wait_until="load")
            drawn = pg.evaluate("""async () => {
                const imgs = Array.from(document.images);
                const out = [];
                for (const img of imgs) {
                    let ok = true;
                    try { await img.decode(); } catch (e) { ok = false; }
                    out.push({ok, complete: img.complete, w: img.naturalWidth, h: img.naturalHeight,
                              shown: img.getBoundingClientRect().width});
                }
                return out;
            }""")
            shot = pg.screenshot(path=str(tmp_path / "report.png"), full_page=True)
            anchors = pg.evaluate("() => Array.from(document.querySelectorAll('a[href^=\"#run-\"]')).map(a => "
                                  "!!document.getElementById(a.getAttribute('href').slice(1)))")
        finally:
            browser.close()
    assert not errors, errors
    assert not [c for c in console if c[0] in ("error", "warning")], console
    assert [u for u in requests if not u.startswith("data:")] == [page_file.as_uri()]  # the page itself, nothing else
    assert len(drawn) == n_imgs >= 9
    for d in drawn:
        assert d["ok"] and d["complete"] and d["w"] > 100 and d["h"] > 50 and d["shown"] > 100, d
    assert shot.startswith(b"\x89PNG") and len(shot) > 50_000
    assert anchors and all(anchors)


def test_why_one_model_shows_several_figures():
    """A difference is put down to a setting only when the figures bear it out (archive_report._why_figures)."""
    def g(model, version, tp, dtype, x, lo=None):
        return {"model": model, "version": version, "tp": tp, "dtype": dtype, "runs": 2, "min": lo or x, "median": x, "max": x}

    why = archive_report._why_figures([
        g("fp8", "0.11.0", 1, "bfloat16", 65_536), g("fp8", "0.11.0", 1, "fp8_e4m3", 32_768),
        g("notfp8", "0.11.0", 1, "auto", 65_536), g("notfp8", "0.11.0", 1, "fp8", 60_000),
        g("ver", "0.11.0", 2, "auto", 65_536), g("ver", "0.12.0", 2, "auto", 60_000),
        g("tp", "0.11.0", 1, "auto", 6_000), g("tp", "0.11.0", 8, "auto", 5_000),
        g("mixed", "0.11.0", 1, "auto", 6_000), g("mixed", "0.12.0", 8, "auto", 5_000),
        g("same", "0.11.0", 1, "auto", 512), g("same", "0.12.0", 8, "auto", 512),
        g("spread", "0.11.0", 1, "auto", 65_536, lo=60_000),
    ])
    assert why == [
        "fp8: 32,768–65,536 B/token — kv_cache_dtype bfloat16 vs fp8_e4m3: a 1-byte KV cache holds half the bytes per token of a 2-byte one.",
        "notfp8: 60,000–65,536 B/token — kv_cache_dtype auto vs fp8: the only setting that differs between them.",
        "ver: 60,000–65,536 B/token — vLLM 0.11.0 vs 0.12.0 with the same TP and kv_cache_dtype: the starts on these versions logged "
        "different figures (compare their logs; kvlogdiag estimate checks a figure against the model's architecture).",
        "tp: 5,000–6,000 B/token — TP 1 vs 8: the only setting that differs, but the figures are not in the ratio of the TPs.",
        "mixed: 5,000–6,000 B/token — TP and vLLM version differ at once between starts with different figures.",
        "spread: 60,000–65,536 B/token — within one configuration the figures differ by 0.5 % or more: the starts differ in something "
        "the grouping does not show (block size, hybrid or sliding-window layers, the model revision).",
    ]
