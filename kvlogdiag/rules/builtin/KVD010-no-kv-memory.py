"""KVD010's figure: what the log shows of the memory taken before the KV cache, as one list.

Only the parts that are logged are listed, so the list cannot be written as a fixed template.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from kvlogdiag.extract.facts import LogFacts

CODE = "KVD010"
NAMES = {
    "mem_breakdown": "what was logged of the non-KV memory per rank, as text: weights, activation peak, non-torch, CUDA graphs (null when none)",
}


def provide(facts: LogFacts, analysis: dict, ctx: Mapping[str, Any], put: Callable[..., None]) -> None:
    parts = [f"{label} {ctx[name]:.2f} GiB" for label, name in (
        ("weights", "mem_weights_gib"), ("activation peak", "activation_peak_gib"),
        ("non-torch", "mem_non_torch_gib"), ("CUDA graphs", "mem_cuda_graph_gib")) if ctx.get(name) is not None]
    weights = [f for f in facts.memory.get("weights_gib") or [] if isinstance(f.value, (int, float))]
    put("mem_breakdown", ", ".join(parts) or None, max(weights, key=lambda f: f.value) if weights else None)
