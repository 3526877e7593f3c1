"""The healthy corpus: logs of configurations that are right draw no warning and no error.

``tests/data/healthy/`` holds real default starts of the vLLM 0.32 CPU build and logs rendered
format-exact from the official vLLM recipes and vLLM-Ascend tutorials (each ``.log`` has a ``.json``
sidecar naming its source, the version it targets and why it is healthy). A linter that warns on the
vendor's own defaults or recipe values is switched off, so ``kvlogdiag analyze --format json`` must
report nothing at severity warning or error on any of them (issue 12).

Firings that need a rule-namespace name the engine does not provide yet are listed in ``PENDING``
with the name they need; their zero-warning test is a strict xfail, so it fails as soon as the
rule is fixed and the entry must be removed, and any other rule firing fails at once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DATA_DIR, SAMPLE_LOGS_DIR

from kvlogdiag.cli.main import cli

HEALTHY_DIR = DATA_DIR / "healthy"
LOGS = sorted(HEALTHY_DIR.glob("*.log"))

# Rules that still fire on a healthy log, with why (their zero-warning test is a strict xfail).
# Empty since KVD002 tells an assumed P99 from a given one (namespace name p99_len_given).
PENDING: dict[str, dict[str, str]] = {}

_CACHE: dict[Path, dict] = {}


def _analysis(path: Path) -> dict:
    if path not in _CACHE:
        res = CliRunner().invoke(cli, ["analyze", "--format", "json", "--fail-on", "never", str(path)], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        assert len(doc["analyses"]) == 1, f"{path.name}: one server start expected"
        _CACHE[path] = doc["analyses"][0]
    return _CACHE[path]


def _loud(analysis: dict) -> dict[str, str]:
    return {f["rule"]: f["message"] for f in analysis["findings"] if f["severity"] in ("warning", "error")}


def _sidecar(path: Path) -> dict:
    return json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))


def test_corpus_is_there():
    assert len(LOGS) >= 15
    assert set(PENDING) <= {p.stem for p in LOGS}, "PENDING names a log that is not in the corpus"


@pytest.mark.parametrize("path", LOGS, ids=[p.stem for p in LOGS])
def test_sidecar_names_source_version_and_why(path):
    meta = _sidecar(path)
    for key in ("source", "vllm_version", "platform", "why_healthy"):
        assert meta.get(key), f"{path.name}: sidecar lacks {key}"
    assert meta.get("recipe") or meta.get("command"), f"{path.name}: sidecar names neither the recipe nor the command"


@pytest.mark.parametrize("path", LOGS, ids=[p.stem for p in LOGS])
def test_log_is_a_complete_start(path):
    # a 'healthy' log that kvlogdiag cannot read would pass the zero-warning test for nothing
    meta, a = _sidecar(path), _analysis(path)
    assert a["vllm"]["version"] == meta["vllm_version"]
    assert a["vllm"]["platform"] == meta["platform"]
    assert a["kv_cache"]["tokens"], f"{path.name}: no KV cache size read"
    assert a["kv_cache"]["bytes_per_token"], f"{path.name}: no bytes per token"
    assert a["config"]["max_model_len"], f"{path.name}: no max_model_len read"


@pytest.mark.parametrize("path", [
    pytest.param(p, marks=pytest.mark.xfail(strict=True, reason="; ".join(f"{r}: {why}" for r, why in PENDING[p.stem].items())))
    if p.stem in PENDING else p for p in LOGS], ids=[p.stem for p in LOGS])
def test_no_warning_or_error(path):
    loud = _loud(_analysis(path))
    assert not loud, f"{path.name}: {loud}"


@pytest.mark.parametrize("path", LOGS, ids=[p.stem for p in LOGS])
def test_only_pending_rules_fire(path):
    loud = _loud(_analysis(path))
    unexpected = {r: m for r, m in loud.items() if r not in PENDING.get(path.stem, {})}
    assert not unexpected, f"{path.name}: {unexpected}"


def _all_logs() -> list[Path]:
    return sorted(set(SAMPLE_LOGS_DIR.glob("*.log")) | set(DATA_DIR.rglob("*.log")))


@pytest.mark.parametrize("path", _all_logs(), ids=lambda p: str(p.relative_to(p.parents[1])))
def test_kvd004_never_loud_on_a_default_utilization(path):
    # vLLM's default is 0.9 up to 0.19 and 0.92 from 0.20 (vllm/config/cache.py); with the version
    # unknown either may be the default. Neither is ever a warning or an error, on any platform.
    res = CliRunner().invoke(cli, ["analyze", "--format", "json", "--fail-on", "never", "--select", "KVD004", str(path)],
                             catch_exceptions=False)
    for a in json.loads(res.stdout)["analyses"]:
        if a["config"]["gpu_memory_utilization"] in (0.9, 0.92):
            assert not [f for f in a["findings"] if f["rule"] == "KVD004" and f["severity"] != "info"], a["findings"]
