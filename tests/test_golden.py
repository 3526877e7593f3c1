"""Golden analyses of every ``sample_logs/*.log`` and the CLI's input equivalences.

The golden files live in ``tests/test_golden/`` (pytest-regressions). After an intended change of
the output, regenerate them with ``pytest tests/test_golden.py --force-regen`` and review the diff.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import SAMPLE_LOGS_DIR

from kvlogdiag.cli.main import cli
from kvlogdiag.pipeline import analyze_source

SAMPLES = sorted(SAMPLE_LOGS_DIR.glob("*.log"))
SAMPLE_IDS = [p.stem for p in SAMPLES]


def _plain(analysis: dict) -> dict:
    """The analysis as the JSON output carries it, without the input's name."""
    data = json.loads(json.dumps(analysis, default=str))
    data.pop("source", None)
    return data


def _run_json(runner: CliRunner, args: list[str], stdin: bytes | None = None) -> tuple[int, list[dict], str]:
    res = runner.invoke(cli, ["analyze", "--format", "json", *args], input=stdin, catch_exceptions=False)
    doc = json.loads(res.stdout)
    assert doc["tool"] == "kvlogdiag"
    return res.exit_code, doc["analyses"], res.stderr


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no kvlogdiag.toml of the repo or the user is picked up
    return CliRunner()


@pytest.mark.parametrize("log", SAMPLES, ids=SAMPLE_IDS)
def test_golden_analysis(log: Path, runner, data_regression):
    """The analysis exactly as ``kvlogdiag analyze --format json FILE`` prints it."""
    rc, (analysis,), stderr = _run_json(runner, [str(log)])
    assert rc in (0, 1), stderr
    assert analysis["source"] == str(log)
    data_regression.check(_plain(analysis), basename=f"analysis_{log.stem}")


@pytest.mark.parametrize("log", SAMPLES, ids=SAMPLE_IDS)
def test_cli_file_equals_stdin_plain_and_gzip(log: Path, runner, tmp_path):
    raw = log.read_bytes()
    gz = tmp_path / (log.stem + ".log.gz")
    gz.write_bytes(gzip.compress(raw))

    rc_file, (a_file,), _ = _run_json(runner, [str(log)])
    assert a_file["source"] == str(log)
    assert rc_file in (0, 1)
    rc_stdin, (a_stdin,), _ = _run_json(runner, ["-"], raw)
    assert a_stdin["source"] == "-"
    rc_gz, (a_gz,), _ = _run_json(runner, [str(gz)])
    rc_gz_stdin, (a_gz_stdin,), _ = _run_json(runner, ["-"], gzip.compress(raw))

    expected = _plain(a_file)
    assert _plain(a_stdin) == expected
    assert _plain(a_gz) == expected
    assert _plain(a_gz_stdin) == expected
    assert rc_file == rc_stdin == rc_gz == rc_gz_stdin
    # the library reads the same figures (the CLI only trims the output, e.g. __class__ keys)
    lib = _plain(analyze_source(str(log)))
    assert lib["kv_cache"] == expected["kv_cache"]
    assert lib["lines_read"] == expected["lines_read"]


def test_sample_logs_present():
    """The golden tests above are parametrised by sample_logs/*.log: make an empty folder visible."""
    assert SAMPLES, f"no sample logs in {SAMPLE_LOGS_DIR}"


def test_every_sample_has_a_golden_file():
    golden = Path(__file__).with_suffix("")  # tests/test_golden/
    missing = [p.stem for p in SAMPLES if not (golden / f"analysis_{p.stem}.yml").exists()]
    assert missing == [], "run pytest tests/test_golden.py --force-regen and review the new files"


SMALL_LOG = (
    "(Worker_TP0 pid=2520) INFO 07-03 14:19:40 [gpu_worker.py:298] Available KV cache memory: 37.01 GiB\n"
    "(EngineCore_DP0 pid=2410) INFO 07-03 14:19:41 [kv_cache_utils.py:864] GPU KV cache size: 485,088 tokens\n"
)


def test_cli_missing_path_among_two_inputs(runner, tmp_path):
    good = tmp_path / "good.log"
    good.write_text(SMALL_LOG)
    missing = tmp_path / "does-not-exist.log"
    res = runner.invoke(cli, ["analyze", "--format", "json", str(missing), str(good)], catch_exceptions=False)
    assert res.exit_code == 2
    err_lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(err_lines) == 1, res.stderr
    assert str(missing) in err_lines[0]
    doc = json.loads(res.stdout)
    assert [a["source"] for a in doc["analyses"]] == [str(good)]
    (a,) = doc["analyses"]
    assert a["kv_cache"]["tokens"] == [485088]
    assert a["kv_cache"]["bytes_per_token"] == pytest.approx(81921.5995989181344, rel=1e-9)


def test_cli_truncated_gzip_is_analysed_up_to_the_cut(runner, tmp_path):
    """A cut archive (issue 18): the lines before the cut, a `truncated` note, exit 4 (was: exit 2, nothing)."""
    data = gzip.compress(("INFO 07-03 14:19:40 [x.py:1] filler line\n" * 20000).encode())
    bad = tmp_path / "cut.log.gz"
    bad.write_bytes(data[: len(data) // 2])
    res = runner.invoke(cli, ["analyze", "--format", "json", str(bad)], catch_exceptions=False)
    assert res.exit_code == 4
    assert res.stderr == ""
    (a,) = json.loads(res.stdout)["analyses"]
    assert a["truncated"]["reason"] == "cut" and 0 < a["lines_read"] < 20000


def test_cli_directory_is_an_input_error(runner, tmp_path):
    res = runner.invoke(cli, ["analyze", "--format", "json", str(tmp_path)], catch_exceptions=False)
    assert res.exit_code == 2
    assert str(tmp_path) in res.stderr
    assert os.linesep not in res.stderr.strip()
