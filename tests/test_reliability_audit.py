"""Gaps found when issue 18's list was checked against its tests (session 7; docs/reliability.md, "Audit").

* Non-ASCII digits are not figures: ``int()`` and ``float()`` read Arabic-Indic (``٣٠``) and fullwidth
  (``３０``) digits, and the regexes' ``\\d`` matches them, so ``Available KV cache memory: ٣٠.03 GiB`` was read
  as 30.03 GiB. vLLM prints ASCII digits only; such a line is damage (a mis-decoded paste), and a wrong
  figure is worse than none.
* ``report -o`` writes as the shell would: created with the process umask, an existing file keeps its mode
  (the issue: "``report -o`` keeps 0644" while ``scan -o`` wrote 0600; ``scan`` is tested in
  tests/test_files_and_safety.py, the report was not).
"""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from kvlogdiag.pipeline import Analyzer

REPO = Path(__file__).resolve().parent.parent
TP4 = REPO / "sample_logs" / "v1_tp4_workers.log"
PREFIX = "(EngineCore_DP0 pid=1) INFO 11-01 10:00:00 "
ARABIC = {str(d): chr(0x0660 + d) for d in range(10)}
FULLWIDTH = {str(d): chr(0xFF10 + d) for d in range(10)}


def _kv(available: str, tokens: str) -> bytes:
    return (f"{PREFIX}[gpu_worker.py:1] Available KV cache memory: {available} GiB\n"
            f"{PREFIX}[kv_cache_utils.py:1] GPU KV cache size: {tokens} tokens\n").encode()


def _analyse(data: bytes):
    return Analyzer().analyze_stream(io.BufferedReader(io.BytesIO(data)), "x.log").current


@pytest.mark.parametrize("digits", [ARABIC, FULLWIDTH], ids=["arabic-indic", "fullwidth"])
@pytest.mark.parametrize("which", ["available", "tokens", "both"])
def test_non_ascii_digits_are_not_read_as_figures(digits, which):
    def tr(s: str) -> str:
        return "".join(digits.get(c, c) for c in s)

    gib, tokens = "30.03", "2,918,003"
    a = _analyse(_kv(tr(gib) if which in ("available", "both") else gib,
                     tr(tokens) if which in ("tokens", "both") else tokens))
    kv = a.kv_cache
    assert list(kv.available_gib) == ([] if which != "tokens" else [30.03])
    assert list(kv.tokens) == ([] if which != "available" else [2_918_003])
    assert kv.bytes_per_token is None  # no pair: the damaged line gives no figure, never a wrong one


def test_ascii_digits_still_are():
    kv = _analyse(_kv("30.03", "2,918,003")).kv_cache
    assert list(kv.available_gib) == [30.03] and list(kv.tokens) == [2_918_003]
    assert round(kv.bytes_per_token) == round(30.03 * 2**30 / 2_918_003)


def _report(out: Path, umask: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvlogdiag", "report", str(TP4), "-o", str(out), "--fail-on", "never"],
                          capture_output=True, timeout=120, cwd=REPO, preexec_fn=lambda: os.umask(umask))


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_report_output_is_created_with_the_umask_and_keeps_an_existing_mode(tmp_path, umask):
    out = tmp_path / "r.md"
    p = _report(out, umask)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    out.chmod(0o640)
    out.write_text("old")
    p = _report(out, umask)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert stat.S_IMODE(out.stat().st_mode) == 0o640 and out.read_text().startswith("## kvlogdiag report")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.md"]  # no temp file left behind


ARGS = ("(APIServer pid=7366) INFO 11-29 09:00:01 [utils.py:253] non-default args: {'model': 'Qwen/Qwen3-32B', "
        "'max_model_len': 32768, 'tensor_parallel_size': 2, 'gpu_memory_utilization': 0.92, 'max_num_seqs': 256}")
CHUNKED = "(APIServer pid=7366) INFO 11-29 09:00:11 [scheduler.py:216] Chunked prefill is enabled with max_num_batched_tokens=8192."


@pytest.mark.parametrize("digits", [ARABIC, FULLWIDTH], ids=["arabic-indic", "fullwidth"])
def test_config_values_in_non_ascii_digits_are_not_figures(digits):
    def tr(s: str) -> str:
        return "".join(digits.get(c, c) for c in s)

    damaged = tr(ARGS.split("non-default args: ", 1)[1])
    text = ARGS.split("non-default args: ", 1)[0] + "non-default args: " + damaged
    chunked = CHUNKED.replace("8192", tr("8192"))
    cfg = _analyse((text + "\n" + chunked + "\n").encode()).config
    assert cfg["max_model_len"] is None and cfg["tensor_parallel_size"] is None and cfg["max_num_seqs"] is None
    assert cfg["gpu_memory_utilization"] is None and cfg["max_num_batched_tokens"] is None


def test_config_values_in_ascii_digits_still_are_beside_non_ascii_text():
    text = ARGS.replace("Qwen/Qwen3-32B", "/模型/Qwen3-32B")
    cfg = _analyse((text + "\n" + CHUNKED + "\n").encode()).config
    assert (cfg["max_model_len"], cfg["tensor_parallel_size"], cfg["max_num_seqs"]) == (32768, 2, 256)
    assert cfg["gpu_memory_utilization"] == 0.92 and cfg["max_num_batched_tokens"] == 8192
    assert cfg["model"] == "/模型/Qwen3-32B"


@pytest.mark.parametrize("raw", ["٣٢٧٦٨", "３２７６８", "०.९२"])
def test_a_repr_number_in_non_ascii_digits_is_no_number(raw):
    from kvlogdiag.extract.pyrepr import parse_repr, scalar
    assert scalar(raw) is None and parse_repr("{'max_model_len': " + raw + "}") == {"max_model_len": None}
    assert scalar("32768") == 32768 and parse_repr("{'max_model_len': 32768}") == {"max_model_len": 32768}
