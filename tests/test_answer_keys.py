"""Hand-read answers for real and sample logs: kvlogdiag must reproduce every answered field.

``tests/data/heldout/*.log`` are real logs posted publicly (provenance in its README) and
``sample_logs/*.log`` the bundled logs; each has a ``.json`` of answers written by a person reading
the log, with the keys of the real-log corpus. A field the answers leave null must stay null (no
invented values). The comparison follows the scoring rules of the corpus: numbers within 0.1 %
(or 0.006 absolute), strings case-insensitive, a model path matching on its last component.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvlogdiag.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
LOGS = sorted((ROOT / "tests" / "data" / "heldout").glob("*.log")) + sorted((ROOT / "sample_logs").glob("*.log"))
LOGS = [p for p in LOGS if p.with_suffix(".json").exists()]

FIELDS = {
    "vllm_version": ("vllm", "version"), "engine": ("vllm", "engine"), "platform": ("vllm", "platform"),
    "model": ("config", "model"), "tensor_parallel_size": ("config", "tensor_parallel_size"),
    "pipeline_parallel_size": ("config", "pipeline_parallel_size"),
    "data_parallel_size": ("config", "data_parallel_size"), "max_model_len": ("config", "max_model_len"),
    "block_size": ("config", "block_size"), "gpu_memory_utilization": ("config", "gpu_memory_utilization"),
    "kv_cache_dtype": ("config", "kv_cache_dtype"),
    "hybrid_kv_manager_disabled": ("config", "disable_hybrid_kv_cache_manager"),
    "preemption_warnings": ("runtime", "preemptions"),
    "available_kv_cache_gib": ("kv_cache", "available_gib"), "gpu_kv_cache_tokens": ("kv_cache", "tokens"),
    "gpu_blocks": ("kv_cache", "gpu_blocks"), "max_concurrency": ("kv_cache", "max_concurrency"),
    "insufficient_kv_error": ("errors", "insufficient_kv"),
}


def same(expected, got) -> bool:
    if isinstance(expected, bool) or isinstance(got, bool):
        return expected is got
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(float(expected), float(got), rel_tol=1e-3, abs_tol=0.006)
    if isinstance(expected, str) and isinstance(got, str):
        a, b = expected.strip().lower(), got.strip().lower()
        return a == b or a.rstrip("/").split("/")[-1] == b.rstrip("/").split("/")[-1]
    if isinstance(expected, dict) and isinstance(got, dict):
        return all(v is None or same(v, got.get(k)) for k, v in expected.items())
    if isinstance(expected, list) and isinstance(got, list):
        return len(expected) == len(got) and all(same(e, g) for e, g in zip(expected, got))
    return expected == got


@pytest.mark.parametrize("log", LOGS, ids=[f"{p.parent.name}/{p.name}" for p in LOGS])
def test_answers_reproduced(log):
    answers = json.loads(log.with_suffix(".json").read_text(encoding="utf-8"))
    r = CliRunner().invoke(cli, ["analyze", "--format", "json", "--fail-on", "never", str(log)])
    assert r.exit_code == 0, r.output
    a = json.loads(r.stdout)["analyses"][0]
    misses = []
    for key, (sec, field) in FIELDS.items():
        expected = answers.get(key)
        got = a[sec][field]
        if expected is None or expected == []:
            if got not in (None, []):
                misses.append(f"invented {key}: {got!r}")
        elif not same(expected, got):
            misses.append(f"{key}: expected {expected!r}, got {got!r}")
    assert not misses, "\n".join(misses)


def test_there_are_answer_keys():
    assert len(LOGS) >= 25


def _score(folder: Path) -> tuple[int, int, list[str]]:
    right = total = 0
    invented: list[str] = []
    for log in sorted(folder.glob("*.log")):
        answers = json.loads(log.with_suffix(".json").read_text(encoding="utf-8"))
        r = CliRunner().invoke(cli, ["analyze", "--format", "json", "--fail-on", "never", str(log)])
        assert r.exit_code == 0, r.output
        a = json.loads(r.stdout)["analyses"][0]
        for key, (sec, field) in FIELDS.items():
            expected, got = answers.get(key), a[sec][field]
            if expected is None or expected == []:
                if got not in (None, []):
                    invented.append(f"{log.name} {key}: {got!r}")
            else:
                total += 1
                right += same(expected, got)
    return right, total, invented


# the fresh held-out sets (docs/coverage.md): measured once when collected; these floors are those first
# scores (heldout_fresh: after its one fix), so a change that loses a field they read fails here
@pytest.mark.parametrize("folder, floor, known_invented", [
    ("heldout_fresh", 0.975, 0), ("heldout_fresh2", 0.985, 0),
    # h17: --gpu-memory-utilization 0.95 of the note's deployment script, which the key leaves null because the
    # prose (in Chinese) says a later run raised it to 0.98
    ("heldout_fresh3", 0.985, 1)])
def test_fresh_held_out_sets_keep_their_score_and_invent_nothing(folder, floor, known_invented):
    right, total, invented = _score(ROOT / "tests" / "data" / folder)
    assert len(invented) <= known_invented, invented
    assert total > 250 and right / total >= floor, f"{folder}: {right}/{total}"
