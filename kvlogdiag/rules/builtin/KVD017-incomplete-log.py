"""KVD017's figure: the start-up facts a log lacks, as a list the message names."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from kvlogdiag.extract.facts import LogFacts

CODE = "KVD017"
NAMES = {
    "missing_startup_facts": "startup facts absent from the log: vLLM version, launch args/engine config, KV memory line, KV size line",
}


def provide(facts: LogFacts, analysis: dict, ctx: Mapping[str, Any], put: Callable[..., None]) -> None:
    config_logged = any(f.source in ("non_default_args", "args_namespace", "engine_config", "user_command")
                        for lst in facts.config.values() for f in lst)
    missing = []
    if not ctx.get("vllm_version"):
        missing.append("vLLM version")
    if not config_logged:
        missing.append("launch args / engine config")
    if not (facts.available or facts.kv_budget):
        missing.append("KV memory line ('Available KV cache memory')")
    if not ctx.get("kv_size_logged"):
        missing.append("KV size line ('GPU KV cache size' / '# GPU blocks')")
    put("missing_startup_facts", missing)
