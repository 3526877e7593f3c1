"""``kvlogdiag scan`` through its real interface (``python -m kvlogdiag scan`` in a subprocess).

The trees are built in tmp_path from ``sample_logs``: plain, gzip and zstd logs, a corrupt gzip, a
truncated xz, an empty file, a FIFO, a broken symlink, a symlink loop and (unless running as root) a
file nobody may read.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zstandard
from conftest import SAMPLE_LOGS_DIR

ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


def run_scan(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvlogdiag", "scan", *args], capture_output=True, text=True,
                          cwd=str(cwd), timeout=timeout)


def build_tree(base: Path) -> dict[str, str | None]:
    """A tree of inputs; returns {path relative to base: expected error substring or None}."""
    logs = base / "logs"
    (logs / "a" / "deeper").mkdir(parents=True)
    (logs / "b").mkdir()
    (logs / "bad").mkdir()
    expected: dict[str, str | None] = {}

    def put(rel: str, data: bytes, err: str | None = None) -> Path:
        p = logs / rel
        p.write_bytes(data)
        expected[f"logs/{rel}"] = err
        return p

    put("a/v1_tp4_workers.log", (SAMPLE_LOGS_DIR / "v1_tp4_workers.log").read_bytes())
    put("a/deeper/v1_single_gpu.log", (SAMPLE_LOGS_DIR / "v1_single_gpu.log").read_bytes())
    put("b/insufficient_kv.log.gz", gzip.compress((SAMPLE_LOGS_DIR / "insufficient_kv_215000.log").read_bytes()))
    put("b/v1_dp2_tp4.log.zst", zstandard.ZstdCompressor().compress((SAMPLE_LOGS_DIR / "v1_dp2_tp4.log").read_bytes()))
    put("b/journald.txt.bz2", bz2.compress((SAMPLE_LOGS_DIR / "journald_syslog.log").read_bytes()))
    put("bad/corrupt.log.gz", gzip.compress(b"x" * 5000)[:30], "truncated")
    put("bad/truncated.log.xz", lzma.compress((SAMPLE_LOGS_DIR / "v0_063_single_gpu.log").read_bytes())[:200], "")
    put("empty.log", b"")
    (logs / "README.md").write_text("not a log: the default --include skips it\n")
    os.mkfifo(logs / "bad" / "pipe.log")
    expected["logs/bad/pipe.log"] = "FIFO"
    os.symlink("does-not-exist.log", logs / "bad" / "broken.log")
    expected["logs/bad/broken.log"] = "broken symlink"
    os.symlink("..", logs / "a" / "deeper" / "loop")  # a directory loop: must be cut, not followed forever
    os.symlink("v1_tp4_workers.log", logs / "a" / "same-file.log")  # the same file again: one row
    (logs / "dir.log").mkdir()  # a directory named like a log is walked, not read
    put("dir.log/inner.out", (SAMPLE_LOGS_DIR / "v0_partial_prefill.log").read_bytes())
    if not ROOT:
        p = put("bad/secret.log", b"INFO hello\n", "permission denied")
        p.chmod(0)
    return expected


@pytest.fixture
def tree(tmp_path):
    expected = build_tree(tmp_path)
    yield tmp_path, expected
    for p in tmp_path.rglob("secret.log"):
        p.chmod(0o644)


def test_one_row_per_input_with_errors_where_expected(tree):
    base, expected = tree
    r = run_scan(["logs", "-o", "rows.json", "-j", "2", "--no-progress"], base)
    assert r.returncode in (0, 1), r.stderr
    rows = json.loads((base / "rows.json").read_text())
    assert len(rows) == len(expected), sorted(x["source"] for x in rows)
    by = {row["source"]: row for row in rows}
    assert set(by) == set(expected)
    for src, err in expected.items():
        if err is None:
            assert by[src]["error"] is None, (src, by[src]["error"])
        else:
            assert by[src]["error"], src
            assert err in by[src]["error"], (src, by[src]["error"])
    tp4 = by["logs/a/v1_tp4_workers.log"]
    assert tp4["vllm_version"] == "0.10.2" and tp4["tp"] == 4 and tp4["tokens_min"] == 485088
    assert tp4["bytes_per_token"] == pytest.approx(81918.6, rel=1e-3)
    assert tp4["max_concurrency_min"] == pytest.approx(7.40)
    # gpu_memory_utilization 0.92 on 0.10.2 is within the official recipes' range: no KVD004 (issue 12); KVD005 is its info
    assert tp4["n_warning"] == 0 and "KVD004" not in tp4["findings"].split(",") and "KVD005" in tp4["findings"].split(",")
    gz = by["logs/b/insufficient_kv.log.gz"]
    assert gz["error_kinds"] and "insufficient_kv" in gz["error_kinds"].split(",")
    assert gz["n_error"] >= 1
    assert by["logs/b/v1_dp2_tp4.log.zst"]["bytes_per_token"] == pytest.approx(65535.9, rel=1e-3)
    assert by["logs/b/journald.txt.bz2"]["host"] == "gpu-node-7"  # from the syslog envelope
    assert by["logs/empty.log"]["lines_read"] == 0 and by["logs/empty.log"]["runs"] == 1
    # the terminal summary (tabulate) went to stdout
    assert "Runs by worst finding" in r.stdout and "bytes per token (per rank) by model" in r.stdout
    assert "unreadable" in r.stdout


def test_exit_code_is_fail_on_over_all_runs(tree):
    base, _ = tree
    assert run_scan(["logs", "--no-progress"], base).returncode == 1  # the insufficient-KV log is an error
    assert run_scan(["logs", "--no-progress", "--fail-on", "never"], base).returncode == 0
    ok = run_scan(["logs/a", "--no-progress"], base)
    assert ok.returncode == 0, ok.stdout  # warnings only


def test_a_missing_path_argument_is_exit_2_but_the_rest_is_scanned(tree):
    base, expected = tree
    r = run_scan(["logs", "nope/", "-o", "rows.csv", "--no-progress"], base)
    assert r.returncode == 2
    assert "nope/: no such file or directory" in r.stderr
    import pandas as pd

    assert len(pd.read_csv(base / "rows.csv")) == len(expected)


@pytest.mark.parametrize("ext", ["csv", "json", "jsonl", "md", "parquet"])
def test_outputs_parse_back_with_the_same_row_count(tree, ext):
    import pandas as pd

    base, expected = tree
    out = base / f"rows.{ext}"
    r = run_scan(["logs", "-o", out.name, "--no-progress", "-j", "1"], base)
    assert r.returncode in (0, 1), r.stderr
    if ext == "csv":
        df = pd.read_csv(out)
    elif ext == "json":
        df = pd.DataFrame(json.loads(out.read_text()))
    elif ext == "jsonl":
        df = pd.DataFrame([json.loads(x) for x in out.read_text().splitlines()])
    elif ext == "parquet":
        pytest.importorskip("pyarrow")
        df = pd.read_parquet(out)
    else:
        table = [ln for ln in out.read_text().splitlines() if ln.startswith("|")]
        header = [c.strip() for c in table[0].strip("|").split("|")]
        assert header[0] == "source" and "bytes_per_token" in header
        df = pd.DataFrame(index=range(len(table) - 2))
    assert len(df) == len(expected)
    if ext != "md":
        assert list(df.columns)[:3] == ["source", "host", "pod"]
        assert int(df["error"].notna().sum()) == sum(1 for v in expected.values() if v is not None)


def test_parquet_without_pyarrow_is_a_clear_error(tree):
    base, _ = tree
    code = ("import sys\nsys.modules['pyarrow'] = None\n"
            "from kvlogdiag.cli.main import main\nsys.argv = ['kvlogdiag', 'scan', 'logs', '-o', 'x.parquet']\nmain()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(base), timeout=120)
    assert r.returncode == 2
    assert "pyarrow" in r.stderr and "Traceback" not in r.stderr
    assert not (base / "x.parquet").exists()


def test_unknown_output_extension_is_exit_2(tree):
    base, _ = tree
    r = run_scan(["logs", "-o", "rows.xlsx"], base)
    assert r.returncode == 2 and "unknown extension" in r.stderr


def test_include_and_exclude(tree):
    base, expected = tree
    r = run_scan(["logs", "--include", "*", "-o", "all.json", "--no-progress"], base)
    rows = json.loads((base / "all.json").read_text())
    assert "logs/README.md" in {x["source"] for x in rows}
    assert len(rows) == len(expected) + 1
    r = run_scan(["logs", "--exclude", "*.gz", "--exclude", "bad/*", "-o", "some.json", "--no-progress"], base)
    assert r.returncode in (0, 1), r.stderr
    srcs = {x["source"] for x in json.loads((base / "some.json").read_text())}
    assert not any(s.endswith(".gz") or "/bad/" in s for s in srcs)
    assert "logs/b/v1_dp2_tp4.log.zst" in srcs


def test_glob_argument(tree):
    base, _ = tree
    r = run_scan(["logs/**/*.log*", "-o", "g.json", "--no-progress"], base)
    assert r.returncode in (0, 1), r.stderr
    srcs = {x["source"] for x in json.loads((base / "g.json").read_text())}
    assert "logs/b/insufficient_kv.log.gz" in srcs and "logs/a/deeper/v1_single_gpu.log" in srcs
    assert "logs/README.md" not in srcs


def test_max_bytes_caps_decompression(tree):
    base, _ = tree
    run_scan(["logs", "--max-bytes", "2000", "-o", "cap.json", "--no-progress"], base)
    by = {x["source"]: x for x in json.loads((base / "cap.json").read_text())}
    assert by["logs/b/insufficient_kv.log.gz"]["error"].startswith("truncated: stopped after 2,000 decompressed bytes (--max-bytes)")
    assert "--max-bytes" in by["logs/b/v1_dp2_tp4.log.zst"]["error"]
    assert "stopped after 2,000 bytes (--max-bytes)" in by["logs/a/v1_tp4_workers.log"]["error"]  # plain files too


def test_jobs_1_and_2_give_the_same_rows(tree):
    base, _ = tree
    run_scan(["logs", "-j", "1", "-o", "j1.json", "--no-progress"], base)
    run_scan(["logs", "-j", "2", "-o", "j2.json", "--no-progress"], base)
    assert json.loads((base / "j1.json").read_text()) == json.loads((base / "j2.json").read_text())


# --- --state -------------------------------------------------------------------------------------


def _state_counts(stderr: str) -> tuple[int, int, int]:
    line = next(ln for ln in stderr.splitlines() if ln.startswith("kvlogdiag: state:"))
    nums = [int(w.replace(",", "")) for w in re.findall(r"\d[\d,]*", line)]  # 3,000 read, 9 unchanged, ...
    return nums[0], nums[1], nums[2]  # read, unchanged, dropped


def make_archive(folder: Path, count: int) -> list[Path]:
    """``count`` start-up logs (copies of the samples, each with its own first line)."""
    folder.mkdir(parents=True, exist_ok=True)
    samples = sorted(SAMPLE_LOGS_DIR.glob("*.log"))
    out = []
    for i in range(count):
        src = samples[i % len(samples)]
        p = folder / f"run{i:05d}.log"
        p.write_bytes(f"INFO archive copy {i}\n".encode() + src.read_bytes())
        out.append(p)
    return out


def test_state_rescan_reads_only_new_or_changed_files(tmp_path):
    files = make_archive(tmp_path / "arch", 12)
    st = tmp_path / "state.json"
    r1 = run_scan(["arch", "--state", "state.json", "-o", "r1.json", "--no-progress"], tmp_path)
    assert r1.returncode in (0, 1), r1.stderr
    assert _state_counts(r1.stderr) == (12, 0, 0)
    state = json.loads(st.read_text())
    assert len(state["files"]) == 12
    rec = state["files"][str(files[0].resolve())]
    assert {"size", "mtime_ns", "head", "rows"} <= set(rec)

    r2 = run_scan(["arch", "--state", "state.json", "-o", "r2.json", "--no-progress"], tmp_path)
    assert _state_counts(r2.stderr) == (0, 12, 0)
    assert json.loads((tmp_path / "r1.json").read_text()) == json.loads((tmp_path / "r2.json").read_text())

    # a new mtime (same content), a changed file, a new file, a deleted file
    s = files[1].stat()
    os.utime(files[1], ns=(s.st_atime_ns, s.st_mtime_ns + 5_000_000_000))
    with open(files[2], "ab") as fh:
        fh.write(b"INFO one more line\n")
    (tmp_path / "arch" / "new.log").write_bytes((SAMPLE_LOGS_DIR / "v1_tp4_workers.log").read_bytes())
    files[3].unlink()
    r3 = run_scan(["arch", "--state", "state.json", "-o", "r3.json", "--no-progress"], tmp_path)
    assert _state_counts(r3.stderr) == (3, 9, 1)
    rows = json.loads((tmp_path / "r3.json").read_text())
    assert len(rows) == 12
    assert str(files[3].name) not in {Path(x["source"]).name for x in rows}
    assert len(json.loads(st.read_text())["files"]) == 12

    # other rules or options make the remembered rows stale: everything is read again
    r4 = run_scan(["arch", "--state", "state.json", "--ignore", "KVD004", "--no-progress"], tmp_path)
    assert _state_counts(r4.stderr)[0] == 12


def test_state_file_that_is_not_a_state_is_exit_2(tmp_path):
    make_archive(tmp_path / "arch", 2)
    (tmp_path / "state.json").write_text("[1, 2, 3]")
    r = run_scan(["arch", "--state", "state.json", "--no-progress"], tmp_path)
    assert r.returncode == 2 and "state" in r.stderr
    assert (tmp_path / "state.json").read_text() == "[1, 2, 3]"


def test_killed_scan_leaves_the_previous_state_intact(tmp_path):
    make_archive(tmp_path / "arch", 20)
    r = run_scan(["arch", "--state", "state.json", "--no-progress"], tmp_path)
    assert r.returncode in (0, 1), r.stderr
    before = (tmp_path / "state.json").read_bytes()
    make_archive(tmp_path / "arch2", 3000)  # a larger tree: the next scan takes a few seconds
    proc = subprocess.Popen([sys.executable, "-m", "kvlogdiag", "scan", "arch", "arch2", "--state", "state.json",
                             "-j", "2", "--no-progress"], cwd=str(tmp_path), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(1.5)
    assert proc.poll() is None, "the scan finished before it could be killed; make the tree larger"
    os.killpg(proc.pid, signal.SIGKILL)  # the scan and its workers, mid-run
    proc.wait()
    doc = json.loads((tmp_path / "state.json").read_text())  # still valid JSON
    assert doc["format"] == "kvlogdiag-scan-state"
    assert (tmp_path / "state.json").read_bytes() == before or len(doc["files"]) >= 20
    r = run_scan(["arch", "arch2", "--state", "state.json", "-j", "2", "--no-progress"], tmp_path)
    assert r.returncode in (0, 1), r.stderr
    read, unchanged, dropped = _state_counts(r.stderr)
    assert unchanged >= 20 and read + unchanged == 3020 and dropped == 0
    assert len(json.loads((tmp_path / "state.json").read_text())["files"]) == 3020


def test_unreadable_file_row_without_root(tmp_path):
    if ROOT:
        pytest.skip("root reads a chmod 000 file; the FIFO, broken symlink and corrupt archives cover error rows")
    p = tmp_path / "locked.log"
    p.write_text("INFO x\n")
    p.chmod(0)
    try:
        r = run_scan([str(p), "-o", "r.json", "--no-progress"], tmp_path)
        rows = json.loads((tmp_path / "r.json").read_text())
        assert len(rows) == 1 and "permission denied" in rows[0]["error"]
        assert r.returncode == 0
    finally:
        p.chmod(0o644)


def test_pandas_is_not_imported_by_other_commands(tmp_path):
    code = "import sys\nimport kvlogdiag.cli.main\nassert 'pandas' not in sys.modules, 'pandas imported at start-up'\n"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(tmp_path), timeout=60)


def test_many_small_files_are_fast(tmp_path):
    """A smoke check of the pool path (the speed target itself is measured by the benchmark)."""
    make_archive(tmp_path / "arch", 400)
    t0 = time.monotonic()
    r = run_scan(["arch", "-j", "2", "-o", "r.csv", "--no-progress"], tmp_path)
    took = time.monotonic() - t0
    assert r.returncode in (0, 1), r.stderr
    import pandas as pd

    assert len(pd.read_csv(tmp_path / "r.csv")) == 400
    assert took < 60
    shutil.rmtree(tmp_path / "arch")


_REAL_WORK: list = []


def _poison_work(batch):
    """A worker function (module level: it is pickled by name) that kills its process, as an OOM kill
    would, on any batch holding a file named 'poison*'."""
    if any(os.path.basename(path).startswith("poison") for _, path in batch):
        os._exit(9)
    return _REAL_WORK[0](batch)


def test_a_file_that_kills_its_worker_costs_only_its_own_row(tmp_path, monkeypatch):
    # before: the first death broke the ProcessPoolExecutor and every batch it still held became an error row
    from kvlogdiag.modes import scan as scan_mod
    from kvlogdiag.modes.scan import Finder, _run_pool, analyze_file
    from kvlogdiag.pipeline import Analyzer
    from kvlogdiag.rules.context import Options

    samples = sorted(SAMPLE_LOGS_DIR.glob("*.log"))
    arch = tmp_path / "arch"
    arch.mkdir()
    for i in range(60):
        (arch / f"run{i:03d}.log").write_bytes(f"INFO copy {i}\n".encode() + samples[i % len(samples)].read_bytes())
    for name in ("poison-a.log", "poison-b.log"):
        (arch / name).write_bytes(samples[0].read_bytes())
    finder = Finder((), ())
    finder.add_argument(str(arch))
    entries = finder.entries
    _REAL_WORK[:] = [scan_mod._work]
    monkeypatch.setattr(scan_mod, "_work", _poison_work)  # the forked workers see it
    analyzer = Analyzer(Options())
    rows: dict[str, list[dict]] = {}

    def done(batch_entries, batch_rows):
        for e, r in zip(batch_entries, batch_rows):
            assert e.abspath not in rows  # each file once
            rows[e.abspath] = r

    errors: list[str] = []
    assert _run_pool(entries, analyzer, 64 << 30, 2, errors, done, lambda: None) is False
    assert len(rows) == 62
    for e in entries:
        r = rows[e.abspath]
        if os.path.basename(e.abspath).startswith("poison"):
            assert len(r) == 1 and r[0]["error"].startswith("internal error: worker failed"), r
        else:
            want = analyze_file(analyzer, e.source, e.abspath, 64 << 30)
            assert r == want, (r[0]["error"], want[0]["error"])
