"""The scan freezes the long-lived heap (`modes.scan.freeze_heap`) only in processes it owns: its pool workers
and the workers of its own LocalCluster; an in-process scan gives the caller's heap back unfrozen. Its
LocalCluster (`scan --engine dask` without --scheduler) gives the rows of `scan -j 2` byte for byte."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

from kvlogdiag.modes import scan as S

SAMPLES = sorted((Path(__file__).resolve().parent.parent / "sample_logs").glob("*.log"))


def _many(folder: Path, count: int) -> None:
    folder.mkdir()
    for i in range(count):
        (folder / f"run{i:04d}.log").write_bytes(f"INFO copy {i}\n".encode() + SAMPLES[i % len(SAMPLES)].read_bytes())


def test_a_pool_worker_freezes_its_heap_after_building_its_analyzer():
    code = ("import gc; from kvlogdiag.modes import scan as S; from kvlogdiag.rules.context import Options;"
            "assert gc.get_freeze_count() == 0; S._init_worker(Options(), 1 << 30);"
            "print(gc.get_freeze_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) > 1000  # the modules, catalogue and rules moved out of the collector's generations


def test_an_in_process_scan_leaves_the_callers_heap_unfrozen(tmp_path, monkeypatch):
    _many(tmp_path / "arch", 20)
    seen: list[int] = []
    real = S.analyze_file

    def spy(*a, **k):
        seen.append(gc.get_freeze_count())
        return real(*a, **k)

    monkeypatch.setattr(S, "analyze_file", spy)
    from click.testing import CliRunner

    from kvlogdiag.cli.main import cli

    before = gc.get_freeze_count()
    r = CliRunner().invoke(cli, ["scan", "--no-progress", "-j", "1", "--format", "jsonl", str(tmp_path / "arch")])
    assert r.exit_code in (0, 1), r.output
    assert len(seen) == 20 and min(seen) > before  # frozen while the files were analysed
    assert gc.get_freeze_count() == before


def _scan(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvlogdiag", "scan", "--no-progress", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_the_commands_own_local_cluster_gives_the_rows_of_scan_j2(tmp_path):
    pytest.importorskip("distributed")
    _many(tmp_path / "arch", 40)
    loc = _scan(["arch", "-j", "2", "--format", "jsonl"], tmp_path)
    das = _scan(["arch", "-j", "2", "--engine", "dask", "--format", "jsonl"], tmp_path)
    assert loc.returncode in (0, 1), loc.stderr
    assert das.returncode == loc.returncode, das.stderr
    assert das.stdout == loc.stdout and das.stdout.count("\n") == 40
