"""KVD019's figures: the start-up verdict of `kvlogdiag.extract.failures.StartupTracker`, as rule names.

The tracker (fed every line by the extractor) stores its result on ``LogFacts.startup``; this
provider turns it into names the rule's message and conditions use, and gives the cause line (or,
when the cause is not in the excerpt, the first echo of the failure) as evidence.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from kvlogdiag.extract.facts import Fact, LogFacts

CODE = "KVD019"
NAMES = {
    "startup_cause_found": "the log states why the start failed (a cause line was found)",
    "startup_cause_class": "class of that cause: config, memory, block_size, retention, hma, recompute, arch, dtype, quant, parallel, devices, comm, port, model, tokenizer, driver, kernel, ray, connector, unknown",
    "startup_cause_id": "catalogue id of the cause (kvlogdiag/catalogue/failures.toml), 'uncatalogued' or 'config_validation'",
    "startup_cause_text": "the cause line's message",
    "startup_cause_line": "line number of the cause",
    "startup_process": "process (prefix) that printed the cause, null without a prefix",
    "startup_numbers_text": "the numbers the cause message carries, as 'name=value, ...' (null when none)",
    "startup_fix": "the catalogue's fix for the cause, numbers filled in",
    "startup_links_text": "kvlogdiag rules that explain the same cause in depth (e.g. 'KVD002'), null when none",
    "startup_raised_in": "for an uncatalogued cause: the vLLM file and releases whose raise states it",
    "startup_read_note": "how the cause was read when not from one whole exception line (a hard-wrapped line joined, a cut paste's raise statement), null otherwise",
    "startup_not_in_excerpt": "the failure is shown but its cause is not in this excerpt: why, which process died, what to collect",
}


def _shown(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def provide(facts: LogFacts, analysis: dict, ctx: Mapping[str, Any], put: Callable[..., None]) -> None:
    st = getattr(facts, "startup", None)
    if not st or not st.get("failed"):
        return
    if st.get("cause_line") is not None:
        fact = Fact(st["cause_text"], st["cause_line"], st.get("cause_rank"), st.get("cause_raw") or st["cause_text"],
                    "startup_cause", facts.run_index)
        put("startup_cause_found", True, fact)
        put("startup_cause_text", st["cause_text"], fact)
        put("startup_cause_class", st.get("cause_class"), fact)
        put("startup_cause_id", st.get("cause_id"))
        put("startup_cause_line", st["cause_line"], fact)
        put("startup_process", st.get("process"))
        nums = st.get("numbers") or {}
        put("startup_numbers_text", ", ".join(f"{k}={_shown(v)}" for k, v in nums.items()) or None)
        put("startup_fix", st.get("fix"))
        put("startup_links_text", ", ".join(st.get("links") or []) or None)
        det = st.get("details") or {}
        if det.get("from_raise_statement"):
            put("startup_read_note", "The excerpt ends right after the `raise` statement that states it; its exception line is cut.")
        elif det.get("joined_lines"):
            put("startup_read_note", f"Lines {det['joined_lines']} are one message cut by the terminal's line wrap.")
        raised = st.get("raised_in")
        if raised:
            pkg = raised.get("library") or ("vLLM-Ascend" if raised["file"].startswith("vllm_ascend/") else "vLLM")
            put("startup_raised_in", f"{raised['file']} ({pkg} {raised['versions']})")
        return
    put("startup_cause_found", False)
    ev = st.get("evidence")
    seen = Fact(ev["raw"], ev["line"], ev.get("rank"), ev["raw"], "startup_failure", facts.run_index) if ev else None
    put("startup_not_in_excerpt", st.get("not_in_excerpt_reason"), seen)
