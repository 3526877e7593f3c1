"""``scan`` beyond one machine: object storage through fsspec (a local moto S3 server on 127.0.0.1,
never the network) and the Dask engine (a `distributed.LocalCluster` of 2 worker processes).

Skipped when the ``remote`` / ``dask`` extras are not installed. The rows must be the local scan's,
byte for byte and in the same order; a worker that dies mid-scan must lose no row.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLE_LOGS_DIR

SAMPLES = sorted(SAMPLE_LOGS_DIR.glob("*.log"))[:8]


def run_scan(args: list[str], cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvlogdiag", "scan", *args], capture_output=True, text=True,
                          cwd=str(cwd), env=env, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _archive(folder: Path) -> list[Path]:
    """The sample logs, one of them gzip-compressed, one truncated gzip (an error row)."""
    folder.mkdir()
    out = []
    for i, src in enumerate(SAMPLES):
        if i == 1:
            p = folder / (src.name + ".gz")
            p.write_bytes(gzip.compress(src.read_bytes()))
        else:
            p = folder / src.name
            p.write_bytes(src.read_bytes())
        out.append(p)
    bad = folder / "bad.log.gz"
    bad.write_bytes(gzip.compress(b"INFO x\n" * 2000)[:40])
    out.append(bad)
    return out


# --- object storage -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1 and the environment that points boto (s3fs) at it."""
    pytest.importorskip("s3fs")
    pytest.importorskip("fsspec")
    server_mod = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    port = _free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = dict(os.environ, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    # empty config files of our own, so the user's ~/.aws is not read (botocore 1.43 no longer parses os.devnull:
    # "Unable to parse config file: /dev/null")
    empty = tmp_path_factory.mktemp("aws") / "empty"
    empty.write_text("")
    env.update(AWS_CONFIG_FILE=str(empty), AWS_SHARED_CREDENTIALS_FILE=str(empty))
    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    client.create_bucket(Bucket="logs")
    try:
        yield client, env
    finally:
        server.stop()


def _rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())


def test_s3_scan_gives_the_local_rows_and_state_uses_etags(s3, tmp_path):
    client, env = s3
    files = _archive(tmp_path / "arch")
    for p in files:
        client.upload_file(str(p), "logs", f"site1/{p.name}")
    client.put_object(Bucket="logs", Key="site1/notes.md", Body=b"not a log")  # --include skips it

    loc = run_scan(["arch", "-j", "1", "-o", "local.json", "--no-progress"], tmp_path, env)
    rem = run_scan(["s3://logs/site1/", "-j", "1", "-o", "remote.json", "--no-progress", "--state", "st.json"], tmp_path, env)
    assert loc.returncode in (0, 1), loc.stderr
    assert rem.returncode == loc.returncode, rem.stderr
    local, remote = _rows(tmp_path / "local.json"), _rows(tmp_path / "remote.json")
    assert {r["source"] for r in remote} == {f"s3://logs/site1/{p.name}" for p in files}
    assert len(remote) == len(local) >= len(files)
    for lr, rr in zip(local, remote):
        assert rr["source"] == "s3://logs/site1/" + lr["source"].rsplit("/", 1)[1]
        assert {k: v for k, v in rr.items() if k != "source"} == {k: v for k, v in lr.items() if k != "source"}
    bad = [r for r in remote if r["source"].endswith("bad.log.gz")]
    assert bad and "truncated" in bad[0]["error"]
    assert any(r["bytes_per_token"] for r in remote)

    state = json.loads((tmp_path / "st.json").read_text())
    rec = state["files"][f"s3://logs/site1/{files[0].name}"]
    assert rec["head"].startswith("etag:") and rec["size"] == files[0].stat().st_size and rec["mtime_ns"] > 0

    again = run_scan(["s3://logs/site1/", "-o", "again.json", "--no-progress", "--state", "st.json"], tmp_path, env)
    assert "state: 1 read, 8 unchanged, 0 dropped" in again.stderr  # the bad object is read again: no state row
    assert _rows(tmp_path / "again.json") == remote

    client.put_object(Bucket="logs", Key=f"site1/{files[0].name}", Body=files[0].read_bytes() + b"INFO one more line\n")
    changed = run_scan(["s3://logs/site1/", "-o", "changed.json", "--no-progress", "--state", "st.json"], tmp_path, env)
    assert "state: 2 read, 7 unchanged, 0 dropped" in changed.stderr


def test_s3_glob_single_object_and_missing_url(s3, tmp_path):
    client, env = s3
    client.put_object(Bucket="logs", Key="site2/x/one.log", Body=SAMPLES[0].read_bytes())
    client.put_object(Bucket="logs", Key="site2/y/two.log.gz", Body=gzip.compress(SAMPLES[2].read_bytes()))
    r = run_scan(["s3://logs/site2/*/*.gz", "s3://logs/site2/x/one.log", "--format", "json"], tmp_path, env)
    assert r.returncode in (0, 1), r.stderr
    assert sorted({row["source"] for row in json.loads(r.stdout)}) == ["s3://logs/site2/x/one.log", "s3://logs/site2/y/two.log.gz"]
    missing = run_scan(["s3://logs/nothing-here/", "s3://logs/site2/x/one.log", "--format", "json"], tmp_path, env)
    assert missing.returncode == 2
    assert "s3://logs/nothing-here/: no such file or directory" in missing.stderr
    assert {row["source"] for row in json.loads(missing.stdout)} == {"s3://logs/site2/x/one.log"}


def test_unknown_protocol_is_one_line_and_exit_2(tmp_path):
    pytest.importorskip("fsspec")
    r = run_scan(["nosuchproto://bucket/x.log"], tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().startswith("kvlogdiag: error: nosuchproto://bucket/x.log:") and len(r.stderr.strip().splitlines()) == 1


# --- the Dask engine ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    import dask

    tests_dir = str(Path(__file__).resolve().parent)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = tests_dir + (os.pathsep + old if old else "")  # workers import tests/dask_tasks.py
    try:
        with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
            with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                          host="127.0.0.1") as lc:
                yield lc
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _many(folder: Path, count: int) -> None:
    folder.mkdir()
    for i in range(count):
        src = SAMPLES[i % len(SAMPLES)]
        (folder / f"run{i:04d}.log").write_bytes(f"INFO archive copy {i}\n".encode() + src.read_bytes())


def test_dask_scan_rows_are_the_local_rows_byte_for_byte(cluster, tmp_path):
    _many(tmp_path / "arch", 30)
    (tmp_path / "arch" / "bad.log.gz").write_bytes(gzip.compress(b"INFO x\n" * 2000)[:40])
    loc = run_scan(["arch", "-j", "2", "--format", "jsonl"], tmp_path)
    das = run_scan(["arch", "--engine", "dask", "--scheduler", cluster.scheduler_address, "--format", "jsonl"], tmp_path)
    assert loc.returncode in (0, 1), loc.stderr
    assert das.returncode == loc.returncode, das.stderr
    assert das.stdout == loc.stdout and das.stdout.count("\n") > 30
    run_scan(["arch", "-j", "2", "-o", "l.csv", "--format", "jsonl"], tmp_path)
    run_scan(["arch", "--engine", "dask", "--scheduler", cluster.scheduler_address, "-o", "d.csv", "--format", "jsonl"], tmp_path)
    assert (tmp_path / "l.csv").read_bytes() == (tmp_path / "d.csv").read_bytes()


def _entries(folder: Path):
    from kvlogdiag.modes.scan import Finder

    f = Finder((), ())
    f.add_argument(str(folder))
    return f.entries


def _engine_rows(cluster, folder: Path, task) -> dict[str, list[dict]]:
    from kvlogdiag.modes.scan_dask import run_dask
    from kvlogdiag.rules.context import Options

    rows: dict[str, list[dict]] = {}

    def done(entries, batch_rows):
        for e, r in zip(entries, batch_rows):
            assert e.abspath not in rows  # each file once
            rows[e.abspath] = r

    errors: list[str] = []
    run_dask(_entries(folder), Options(), 64 << 30, 2, cluster.scheduler_address, done, errors, task=task)
    return rows


def test_a_worker_killed_mid_scan_loses_no_row(cluster, tmp_path, monkeypatch):
    import dask_tasks

    from kvlogdiag.modes.scan import analyze_file
    from kvlogdiag.pipeline import Analyzer
    from kvlogdiag.rules.context import Options

    _many(tmp_path / "arch", 24)
    marker = tmp_path / "crashed"
    rows = _engine_rows(cluster, tmp_path / "arch", functools.partial(dask_tasks.crash_once, str(marker)))
    assert marker.exists()  # a worker really died
    analyzer = Analyzer(Options())
    expected = {e.abspath: analyze_file(analyzer, e.source, e.abspath, 64 << 30) for e in _entries(tmp_path / "arch")}
    assert rows == expected


def test_a_file_that_kills_every_worker_is_an_error_row(cluster, tmp_path):
    _many(tmp_path / "arch", 12)
    (tmp_path / "arch" / "poison.log").write_bytes(SAMPLES[0].read_bytes())
    import dask_tasks

    rows = _engine_rows(cluster, tmp_path / "arch", dask_tasks.crash_on_poison)
    assert len(rows) == 13
    poison = [r for path, r in rows.items() if path.endswith("poison.log")][0]
    assert len(poison) == 1 and poison[0]["error"].startswith("internal error: worker failed")
    assert all(r[0]["error"] is None for path, r in rows.items() if not path.endswith("poison.log"))


def test_dask_engine_without_the_extra_or_scheduler_is_exit_2(tmp_path):
    r = run_scan(["--scheduler", "tcp://127.0.0.1:1", str(tmp_path)], tmp_path)
    assert r.returncode == 2 and "--scheduler needs --engine dask" in r.stderr
