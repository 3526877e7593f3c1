"""Costs of a scan that grow with the number of files, counted in steps (never timed): the parent's
rendering of the rows must be linear in them."""

from __future__ import annotations

import json

import pytest

from kvlogdiag.modes import scan as scan_mode


def _rows(n: int, deployment: bool = False) -> list[dict]:
    out = []
    for i in range(n):
        row = scan_mode.empty_row(f"log{i:05d}.log")
        row["runs"] = 1
        if deployment and i == n - 1:
            row["deployment"] = "d1"
        out.append(row)
    return out


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_row_columns_is_computed_once_per_output(fmt, monkeypatch):
    calls = []
    real = scan_mode.row_columns

    def counted(rows):
        calls.append(len(rows))
        return real(rows)

    monkeypatch.setattr(scan_mode, "row_columns", counted)
    scan_mode.render_rows(fmt, _rows(300))
    assert calls == [300]  # once over all rows, not once per row (quadratic: 10,000 rows cost ~11 s)


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_every_row_has_the_columns_of_all_rows(fmt):
    # a 'deployment' value on the last row only still makes it a column of every row, in order
    text = scan_mode.render_rows(fmt, _rows(5, deployment=True))
    rows = json.loads(text) if fmt == "json" else [json.loads(line) for line in text.splitlines()]
    assert [list(r) for r in rows] == [list(scan_mode.COLUMNS) + ["deployment"]] * 5
    assert [r["deployment"] for r in rows] == [None] * 4 + ["d1"]


def _worker_rules_id(_: object) -> int:
    return id(scan_mode._WORKER["analyzer"].rules)


def test_forked_workers_evaluate_the_parents_loaded_rules():
    """`scan -j N` workers forked from the command reuse its rule set (loading it again cost ~30 ms of CPU
    per worker): the same objects (their address survives the fork), so the same rules as ``-j 1``."""
    import multiprocessing

    from kvlogdiag.pipeline import Analyzer

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    analyzer = Analyzer()
    pool = scan_mode._new_pool(analyzer, 1 << 20, 1)
    try:
        assert pool.submit(_worker_rules_id, None).result(timeout=120) == id(analyzer.rules)
    finally:
        pool.shutdown(wait=True)
        scan_mode._FORKED_FROM.clear()
