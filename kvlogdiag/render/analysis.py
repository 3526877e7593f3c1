"""Renderers: analyses → terminal text, JSON, Markdown.

Renderers only read `kvlogdiag.result.Analysis` objects; they never look at facts or log lines again. Every piece
of log text that reaches Markdown is escaped (table pipes, backticks, HTML), so a hostile log line
renders as text.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Iterable

from kvlogdiag import __version__, recache
from kvlogdiag.derive.pairings import is_view
from kvlogdiag.render.caps import ENDS, ROW_ENDS, SHOW_ALL, capped_rows, capped_values, value_range
from kvlogdiag.result import Analysis, Finding, Severity


def tabulate(*args: Any, **kwargs: Any) -> str:
    """`tabulate.tabulate`, imported on first use (``--format json`` never needs it; `render.tables`)."""
    from kvlogdiag.render.tables import load_tabulate

    return load_tabulate()(*args, **kwargs)


def clean_json(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats → None, tuples → lists, unknown objects → str."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items() if not str(k).startswith("_")}
    if isinstance(obj, (list, tuple, set)) or is_view(obj):  # a view: the KV lists of derive/pairings.py
        return [clean_json(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    return str(obj)


def json_document(analyses: list[dict], extra: dict | None = None) -> dict:
    """The JSON document: one `Analysis.to_json()` (or `InputAnalysis.to_json()`) per input."""
    doc = {"tool": "kvlogdiag", "version": __version__, "analyses": [clean_json(a) for a in analyses]}
    if extra:
        doc.update(clean_json(extra))
    return doc


def render_json(analyses: list[dict], extra: dict | None = None) -> str:
    return json.dumps(json_document(analyses, extra), indent=2, ensure_ascii=False, allow_nan=False)


def fmt_num(v: Any, digits: int = 0) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "—"
        return f"{v:,.{digits}f}"
    return str(v)


def fmt_gib(v: float | None) -> str:
    return "—" if v is None else f"{v:g} GiB"


def fmt_bpt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:,.0f} B ({v / 1024:,.1f} KiB)"


def visible_findings(analysis: Analysis, min_severity: str = "info") -> list[Finding]:
    return analysis.visible_findings(min_severity)


def error_lines(a: Analysis) -> list[str]:
    """Start-up errors in words."""
    out = []
    ik = a.errors["insufficient_kv"]
    if ik:
        out.append(f"insufficient KV cache: one request at max seq len {fmt_num(ik['max_seq_len'])} needs {fmt_gib(ik['needed_gib'])}, "
                   f"available {fmt_gib(ik['available_gib'])}; vLLM's estimated max length {fmt_num(ik['estimated_max_len'])}")
    if a.errors.get("no_available_memory"):
        out.append("no available memory for the cache blocks")
    st = a.startup or {}
    if st.get("failed"):
        if st.get("cause_line"):
            where = f"line {st['cause_line']:,}" + (f" ({st['process']})" if st.get("process") else "")
            out.append(f"start-up failed — {st.get('cause_class') or 'cause'} at {where}: {st.get('cause_text')}")
        else:
            out.append("start-up failed — root cause not in this excerpt: " + (st.get("not_in_excerpt_reason") or ""))
    elif a.errors.get("startup_failed"):
        out.append("the engine core failed to start")
    return out


_KIND_NOTE = {"command": " (from the command)", "prose": " (from prose)"}


def source_note(a: Analysis, *fields: str) -> str:
    """`` (from the command)`` / `` (from prose)`` when a shown value was not read from a log line."""
    kinds = {(a.provenance.get(f) or {}).get("kind") for f in fields}
    return next((_KIND_NOTE[k] for k in ("prose", "command") if k in kinds), "")


def identity_rows(a: Analysis) -> list[tuple[str, str]]:
    v, c = a.vllm, a.config
    par = "/".join(fmt_num(x) for x in a.parallel)
    kt = a.kv_transfer or {}

    def note(*keys: str) -> str:
        return source_note(a, *(k if "." in k else "config." + k for k in keys))
    platform = f"{v.platform}{note('vllm.platform')}" if v.platform else "platform ?"
    rows = [
        ("vLLM", f"{v.version or '—'} ({v.engine or '?'} engine, {platform})"),
        ("model", (c["model"] + note("model")) if c["model"] else "—"),
        ("TP/PP/DP", par + note("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")),
        ("max_model_len", fmt_num(c["max_model_len"]) + note("max_model_len")),
        ("block_size", fmt_num(c["block_size"]) + note("block_size")),
        ("gpu_memory_utilization", fmt_num(c["gpu_memory_utilization"], 2) + note("gpu_memory_utilization")
         if c["gpu_memory_utilization"] is not None else "—"),
        ("kv_cache_dtype", (c["kv_cache_dtype"] + note("kv_cache_dtype")) if c["kv_cache_dtype"] else "—"),
        ("max_num_batched_tokens / max_num_seqs", f"{fmt_num(c['max_num_batched_tokens'])} / {fmt_num(c['max_num_seqs'])}"
         + note("max_num_batched_tokens", "max_num_seqs")),
        ("hybrid KV cache manager", {True: "OFF", False: "on", None: "—"}[c["disable_hybrid_kv_cache_manager"]]),
    ]
    if kt:
        rows.append(("KV connector", f"{' + '.join(kt.get('all_connectors') or []) or '—'} (role {kt.get('kv_role') or '—'})"))
    if c.get("env"):
        rows.append(("VLLM_* env", ", ".join(f"{k}={val}" for k, val in c["env"].items())))
    return rows


def _rank_rows(a: Analysis) -> list[list[str]]:
    """The rank table's rows: every pairing, or past `caps.SHOW_ALL` the first and last ones (`rank_rows_note`)."""
    ranks = a.kv_cache.ranks

    def row(i: int) -> list[str]:
        r = ranks[i]
        return [r.rank or "—", f"DP{r.dp_group}", fmt_gib(r.available_gib), fmt_num(r.tokens), fmt_bpt(r.bytes_per_token),
                f"{r.memory_line}/{r.tokens_line}"]

    return capped_rows(len(ranks), row, ["…", "", "", "", "", ""])[0]


def rank_rows_note(a: Analysis) -> str | None:
    """What a capped rank table leaves out, in words (None when it shows every pairing)."""
    ranks = a.kv_cache.ranks
    n = len(ranks)
    if n <= SHOW_ALL:
        return None
    lo, hi = value_range(ranks, key=lambda r: r.bytes_per_token)
    span = f"; bytes/token lowest {fmt_bpt(lo)}, highest {fmt_bpt(hi)}" if lo is not None else ""
    return (f"{n:,} pairings: the first and last {ROW_ENDS} shown{span}; every pairing in --format json "
            "(kv_cache.bytes_per_token_by_rank)")


def run_label(a: Analysis) -> str:
    """``run 2 of 2 (current), lines 117-312`` — empty for an input with one server start."""
    r = a.run
    if r.count <= 1:
        return ""
    return f"run {r.index + 1} of {r.count}{' (current)' if r.current else ''}, lines {r.first_line:,}–{r.last_line:,}"


def render_text(analyses: list[Analysis], min_severity: str = "info", errors: Iterable[str] = ()) -> str:
    """The default terminal summary (one section per run given, in the order given)."""
    out: list[str] = []
    for a in analyses:
        rl = run_label(a)
        where = f"{a.source} [container {a.container}]" if a.container else a.source
        out.append(f"== {where}  ({a.lines_read:,} lines{'; ' + rl if rl else ''})")
        if a.extra.get("truncated"):
            out.append(f"truncated: {a.extra['truncated']['message']}")
        out.append(tabulate(identity_rows(a), tablefmt="plain"))
        kv = a.kv_cache
        out.append("")
        out.append("KV cache")
        bpt = kv.bytes_per_token
        kind = kv.bytes_per_token_kind
        lines = [("bytes per token (per rank)", fmt_bpt(bpt) + (f"  [{kind}]" if kind else ""))]
        if kv.available_gib:
            lines.append(("Available KV cache memory", capped_values(kv.available_gib, fmt_gib)))
        budgets = kv.kv_budget
        shown_budgets = range(len(budgets)) if len(budgets) <= SHOW_ALL else [*range(ENDS), *range(len(budgets) - ENDS, len(budgets))]
        for i in shown_budgets:
            b = budgets[i]
            lines.append((f"KV budget ({b['source']}, line {b['line']})", fmt_gib(b["gib"])))
            if i == ENDS - 1 and len(budgets) > SHOW_ALL:
                lo, hi = value_range(budgets, key=lambda b: b["gib"])
                lines.append(("KV budget", f"… {len(budgets) - 2 * ENDS:,} more lines (lowest {fmt_gib(lo)}, highest "
                                           f"{fmt_gib(hi)}; every one in --format json)"))
        if kv.tokens:
            lines.append(("KV cache size (tokens)", capped_values(kv.tokens, fmt_num)))
        if kv.gpu_blocks:
            lines.append(("V0 blocks", capped_values(kv.gpu_blocks, fmt_num)))
        for length, (lo, hi, n) in kv.max_concurrency_by_length.items():
            span = f"{lo:,.2f}x" if lo == hi else f"{lo:,.2f}x–{hi:,.2f}x"
            lines.append((f"max concurrency @ {length:,} tokens", span + (f"  ({n:,} lines)" if n > 1 else "")))
        if kv.bytes_per_token_note:
            lines.append(("note", kv.bytes_per_token_note))
        out.append(tabulate(lines, tablefmt="plain"))
        rr = _rank_rows(a)
        if rr:
            out.append("")
            out.append(tabulate(rr, headers=["rank", "group", "available", "tokens", "bytes/token", "lines"], tablefmt="simple"))
            note = rank_rows_note(a)
            if note:
                out.append(f"({note})")
        errs = error_lines(a)
        if errs:
            out.append("")
            out.append("Errors")
            out.extend("  " + e for e in errs)
        rt = a.runtime
        if rt["stats_lines"] or rt["preemptions"] or rt.get("recompute_preemptions"):
            out.append("")
            out.append(f"Runtime: {rt['stats_lines']:,} {'metrics samples' if rt.get('source') == 'metrics' else 'stats lines'}, max KV usage {fmt_num(rt['kv_usage_max_pct'], 1)} %, "
                       f"preemptions: {fmt_num(rt['preemptions'])} V0 warnings / {fmt_num(rt.get('stats_preemptions_total', 0))} in V1 stats"
                       f" / {fmt_num(rt.get('recompute_preemptions', 0))} RecomputeScheduler")
        if rt.get("metrics"):
            out.extend(metrics_text_lines(rt["metrics"]))
        win = a.extra.get("window")
        if win:  # --since/--until: what the runtime figures above cover (kvlogdiag.timeline)
            out.append(f"Window: {win.get('since') or 'start'} to {win.get('until') or 'end'} (run spans {win.get('start')} to "
                       f"{win.get('end')}); runtime figures cover the window, {win.get('runtime_lines_outside', 0):,} runtime "
                       "lines outside it not counted")
        fs = visible_findings(a, min_severity)
        out.append("")
        if fs:
            out.append(f"Findings ({len(fs):,})")
            for f in fs:
                loc = f"{a.source}:{f.line}" if f.line else a.source
                out.append(f"  {loc}: {f.rule} [{f.severity.label}] {f.name}")
                out.append(f"      {f.message}")
                if f.fix:
                    out.append(f"      fix: {f.fix}")
        else:
            out.append("No findings.")
        out.append("")
    for e in errors:
        out.append(f"error: {e}")
    return "\n".join(out).rstrip() + "\n"


# --- Markdown ---------------------------------------------------------------------------------

_MD_SPECIAL = recache.compile(r"([\\`*_{}\[\]|~])")


def md_escape(text: Any) -> str:
    """Escape text for Markdown tables and prose: no HTML, no links, no code spans, no pipes."""
    s = "" if text is None else str(text)
    s = s.replace("\r", " ").replace("\n", " ")
    import html  # Markdown only (~1 ms of CPU to import)

    s = html.escape(s, quote=False)
    return _MD_SPECIAL.sub(r"\\\1", s)


def md_code_block(lines: Iterable[str]) -> str:
    """A fenced block whose fence is longer than any backtick run inside, so it cannot be closed early.

    Not HTML-escaped: GitHub shows entities inside fences literally, and a fenced block (after a
    blank line, also inside ``<details>``) is code, so ``<script>`` or ``</details>`` in it is text."""
    body = "\n".join(line.replace("\r", " ") for line in lines)
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{body}\n{fence}"


def md_table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "| " + " | ".join(md_escape(h) for h in headers) + " |"
    sep = "|" + "|".join("---" for _ in headers) + "|"
    body = ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def render_markdown(analyses: list[Analysis], min_severity: str = "info", details: bool = True) -> str:
    out: list[str] = []
    for a in analyses:
        fs = visible_findings(a, min_severity)
        counts = {s.label: sum(1 for f in fs if f.severity == s) for s in Severity}
        rl = run_label(a)
        where = f"{a.source} [container {a.container}]" if a.container else a.source
        out.append(f"## kvlogdiag: {md_escape(where)}" + (f" ({md_escape(rl)})" if rl else ""))
        out.append("")
        out.append(f"{a.lines_read:,} lines read · {counts['error']} errors · {counts['warning']} warnings · {counts['info']} info")
        out.append("")
        out.append(md_table(["setting", "value"], [list(r) for r in identity_rows(a)]))
        out.append("")
        kv = a.kv_cache
        out.append(f"**bytes per token (per rank): {md_escape(fmt_bpt(kv.bytes_per_token))}**"
                   + (f" ({md_escape(kv.bytes_per_token_kind)})" if kv.bytes_per_token_kind else ""))
        if kv.bytes_per_token_note:
            out.append("")
            out.append(f"> {md_escape(kv.bytes_per_token_note)}")
        rr = _rank_rows(a)
        if rr:
            out.append("")
            out.append(md_table(["rank", "group", "available", "tokens", "bytes/token", "lines"], rr))
            note = rank_rows_note(a)
            if note:
                out.append("")
                out.append(f"_{md_escape(note)}_")
        errs = error_lines(a)
        if errs:
            out.append("")
            out.append("### Errors")
            out.append("")
            out.extend(f"- {md_escape(e)}" for e in errs)
        out.append("")
        if fs:
            out.append("### Findings")
            out.append("")
            for f in fs:
                out.append(f"- **{f.rule} {md_escape(f.name)}** ({f.severity.label}"
                           + (f", line {f.line}" if f.line else "") + f"): {md_escape(f.message)}")
                if f.fix:
                    out.append(f"  - fix: {md_escape(f.fix)}")
                if details and f.evidence:
                    out.append("")
                    out.append("  <details><summary>evidence</summary>")
                    out.append("")
                    out.append("  " + md_code_block([f"{f.line}: {f.evidence}"]).replace("\n", "\n  "))
                    out.append("")
                    out.append("  </details>")
            out.append("")
        else:
            out.append("No findings.")
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def metrics_text_lines(m: dict[str, Any]) -> list[str]:
    """The ``/metrics`` figures of a run (``runtime.metrics``), for the text output: the scrapes' peaks and
    the last scrape per engine (running, waiting, KV usage, preemptions, prefix-cache hits, TTFT/ITL)."""
    used = "used by the rules" if m.get("used_by_rules") else "beside the log's stats lines, which the rules read"
    if not m.get("used_by_rules") and m.get("preemptions_used_by_rules"):
        used += "; the preemptions are the scrapes' (the stats lines show none)"
    n = m.get("scrapes") or 0
    out = [f"Metrics: {n:,} scrape{'s' if n != 1 else ''} of {m.get('source')} ({used}): max KV usage "
           f"{fmt_num(m.get('kv_usage_max_pct'), 1)} % ({m.get('kv_usage_metric') or '—'}), running max "
           f"{fmt_num(m.get('running_max'))}, waiting max {fmt_num(m.get('waiting_max'))}, preemptions {fmt_num(m.get('preemptions'))}"]
    for e in (m.get("last") or {}).get("engines") or []:
        parts = [f"running {fmt_num(e.get('running'))}", f"waiting {fmt_num(e.get('waiting'))}",
                 f"KV usage {fmt_num(e.get('kv_usage_pct'), 1)} %", f"preemptions {fmt_num(e.get('preemptions_total'))}"]
        if e.get("prefix_cache_hit_rate_pct") is not None:
            parts.append(f"prefix-cache hits {fmt_num(e['prefix_cache_hit_rate_pct'], 1)} %")
        for key, label in (("ttft", "TTFT"), ("itl", "ITL")):
            h = e.get(key)
            if h and h.get("count"):
                parts.append(f"{label} p50/p90/p99 {_ms(h.get('p50_s'))}/{_ms(h.get('p90_s'))}/{_ms(h.get('p99_s'))} ms "
                             f"({h['count']:,})")
        out.append(f"  last scrape, engine {e.get('engine') if e.get('engine') is not None else '—'}: " + ", ".join(parts))
    return out


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:,.1f}"
