"""``kvlogdiag report`` on a P/D deployment (kvlogdiag/render/deployment.py): golden Markdown and HTML of
three sample sets, inert self-contained HTML, the same document however the logs are named, and a
size that does not grow with the logs (many stats lines) or past a bound (many nodes).

Golden files live in ``tests/test_report_deployment/`` (pytest-regressions); regenerate with
``pytest tests/test_report_deployment.py --force-regen`` and review the diff."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_report import Page, assert_inert_html, md_to_html

from kvlogdiag.cli.main import cli
from kvlogdiag.render.deployment import MAX_BARS, MAX_BOXES

ROOT = Path(__file__).resolve().parent.parent
SETS = "sample_logs/deployments"
GOLDEN = ["stats-workload-worked-example", "dp4-d-two-hosts", "recompute-on-p"]


@pytest.fixture
def run(tmp_path, monkeypatch):
    cfg = tmp_path / "empty-kvlogdiag.toml"
    cfg.write_text("", encoding="utf-8")
    monkeypatch.chdir(ROOT)

    def _run(*args: str):
        return CliRunner().invoke(cli, ["report", *args, "--config", str(cfg)])

    return _run


@pytest.mark.parametrize("name", GOLDEN)
def test_markdown_golden(run, file_regression, name):
    res = run(f"{SETS}/{name}", "--fail-on", "never")
    assert res.exit_code == 0, res.output
    file_regression.check(res.stdout, basename=name, extension=".md")


@pytest.mark.parametrize("name", GOLDEN)
def test_html_golden_and_inert(run, file_regression, name):
    res = run(f"{SETS}/{name}", "--fail-on", "never", "--format", "html")
    assert res.exit_code == 0, res.output
    page = Page(res.stdout)
    assert_inert_html(page)
    assert not page.named("img")  # the diagram and bars are inline SVG: nothing to load
    assert page.named("svg") and page.named("rect")
    file_regression.check(res.stdout, basename=name, extension=".html")


def test_markdown_renders_as_github_would(run):
    res = run(f"{SETS}/dp4-d-two-hosts")
    html = md_to_html(res.stdout)
    page = Page(html)
    assert_inert_html(page)
    assert res.stdout.count("```mermaid") == 1 and "n0 -- \"MooncakeConnectorV1\" --> n1" in res.stdout
    assert "<host-1>" not in html  # redacted host names are escaped text: &lt;host-1&gt;


def test_a_folder_several_files_and_deployment_flag_are_one_report(run):
    folder = run(f"{SETS}/healthy-1p1d")
    files = run(f"{SETS}/healthy-1p1d/a3-p0__p0.log", f"{SETS}/healthy-1p1d/a3-d0__d0.log", "--group-by", "all")
    flag = run("--deployment", "--group-by", "all", f"{SETS}/healthy-1p1d")
    assert folder.exit_code == files.exit_code == flag.exit_code == 0
    body = lambda text: text.split("\n", 1)[1]  # noqa: E731 - the first line names the inputs
    assert body(files.stdout).replace("grouped by all", "") == body(flag.stdout).replace("grouped by all", "")
    assert body(folder.stdout).replace("grouped by auto", "") == body(flag.stdout).replace("grouped by all", "")


def test_fail_on_and_options_outside_a_deployment(run):
    assert run(f"{SETS}/recompute-on-p", "--fail-on", "warning").exit_code == 1
    res = run(f"{SETS}/healthy-1p1d/a3-p0__p0.log", "--avg-output-len", "100")
    assert res.exit_code == 2 and "only for a deployment" in res.output
    assert run("--deployment", "-").exit_code == 2
    assert run(f"{SETS}/healthy-1p1d", "--run", "first").exit_code == 2
    assert run(f"{SETS}/healthy-1p1d", "--container", "vllm").exit_code == 2


def _copy(src: Path, dst: Path, extra: str = "") -> None:
    dst.write_text(src.read_text(encoding="utf-8") + extra, encoding="utf-8")


def test_size_does_not_grow_with_the_log(run, tmp_path):
    src = ROOT / SETS / "stats-workload-worked-example"
    stats = [ln for ln in (src / "a3-d0__d0.log").read_text(encoding="utf-8").splitlines() if "Avg prompt" in ln]
    sizes = {}
    for name, repeat in (("short", 0), ("long", 5000)):
        d = tmp_path / name / "set"
        d.mkdir(parents=True)
        _copy(src / "a3-p0__p0.log", d / "a3-p0__p0.log")
        # the same stats lines again and again: the same workload, 30,000 more lines
        _copy(src / "a3-d0__d0.log", d / "a3-d0__d0.log", "\n".join(stats * repeat) + ("\n" if repeat else ""))
        res = CliRunner().invoke(cli, ["report", str(d), "--format", "html", "--fail-on", "never"])
        assert res.exit_code == 0, res.output
        sizes[name] = len(res.stdout.replace(str(tmp_path / name), ""))
    assert sizes["long"] - sizes["short"] < 200  # only the cited line numbers get longer


def test_many_nodes_are_bounded(run, tmp_path):
    src = ROOT / SETS / "healthy-1p1d"
    _copy(src / "a3-p0__p0.log", tmp_path / "a3-p0__p0.log")
    n = MAX_BARS + 6
    for i in range(n):
        _copy(src / "a3-d0__d0.log", tmp_path / f"a3-d{i:02d}__d{i:02d}.log")
    res = CliRunner().invoke(cli, ["report", str(tmp_path), "--format", "html", "--fail-on", "never", "--no-redact"])
    assert res.exit_code == 0, res.output
    page = Page(res.stdout)
    boxes = [a for a in page.named("rect") if a.get("rx") == "6"]
    assert len(boxes) == 1 + MAX_BOXES  # P, and the first D boxes
    assert f"+{n - MAX_BOXES} more (see the table)" in res.stdout
    assert f"+{n + 1 - MAX_BARS} more nodes: see the table." in res.stdout
    md = CliRunner().invoke(cli, ["report", str(tmp_path), "--fail-on", "never", "--no-redact"]).stdout
    assert f'Dmore["+{n - MAX_BOXES} more"]' in md


def test_mermaid_labels_cannot_break_out(tmp_path):
    src = ROOT / SETS / "healthy-1p1d"
    shutil.copy(src / "a3-p0__p0.log", tmp_path / 'a3-p0__p0"]; click n0 x.log')
    shutil.copy(src / "a3-d0__d0.log", tmp_path / "a3-d0__d0.log")
    md = CliRunner().invoke(cli, ["report", str(tmp_path), "--fail-on", "never", "--no-redact"]).stdout
    block = md.split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert '"]; click' not in block and "p0___ click n0 x" in block
