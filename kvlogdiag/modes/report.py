"""``kvlogdiag report``: one log → a Markdown report for a GitHub issue, or one self-contained HTML file.

The log is read from a file, from stdin (a paste, ended with Ctrl-D) or from the clipboard, and
analysed by the one analysis path (`kvlogdiag.pipeline.Analyzer`). The report is built as a plain
dictionary (`build_document`), redacted as a whole (`kvlogdiag.render.redact.Redactor`) and only then
rendered, so nothing the report shows escapes redaction. Every piece of log text is escaped:
Markdown with `kvlogdiag.render.analysis.md_escape` / `md_code_block`, HTML with `html.escape`.

Capacity arithmetic (whole requests of length L that fit at once):

* per DP group: ``floor(tokens_per_dp_group / L)``, where ``tokens_per_dp_group`` is the smallest
  ``GPU KV cache size`` among the group's ranks (vLLM sizes the pool by its tightest worker); this
  is `kvlogdiag.derive.capacity.requests_fit_at_length` (``Z·2**30 / (bytes_per_token·L)``, fixed = 0)
  computed on the logged token count directly, so float rounding cannot lose a request;
* in total: the sum over the DP groups in the log (a request lives in one group); when the
  configuration has more DP groups than the log shows, the missing ones are counted as the
  smallest group seen (and the report says so).

HTML charts (GPU memory per rank, KV capacity vs request length) need matplotlib — the optional
extra ``kvlogdiag[charts]`` — imported lazily and drawn with the Agg canvas into base64 PNGs.
"""

from __future__ import annotations

import base64
import bisect
import html
import io
import json
import sys
from array import array
from typing import Any, BinaryIO, Callable, Sequence

from kvlogdiag import __version__
from kvlogdiag.derive import figures as _derive
from kvlogdiag.errors import KvlogdiagError
from kvlogdiag.input.reader import InputError, open_input
from kvlogdiag.modes.suggest import build_suggestion, suggestion_rows
from kvlogdiag.modes.suggest import render_markdown as suggestion_markdown
from kvlogdiag.pipeline import Analyzer
from kvlogdiag.render.analysis import (
    clean_json,
    error_lines,
    fmt_bpt,
    fmt_gib,
    fmt_num,
    identity_rows,
    md_code_block,
    md_escape,
    md_table,
    run_label,
)
from kvlogdiag.render.caps import ROW_ENDS, SHOW_ALL, value_range
from kvlogdiag.render.redact import Redactor
from kvlogdiag.result import Analysis, InputAnalysis, RankValue, replace

__all__ = ["build_document", "build_section", "redact_document", "read_input", "make_report", "ReportError",
           "render_report_markdown", "render_report_html", "CAPACITY_LENGTHS"]

#: request lengths of the capacity table (label, tokens); max-model-len is added when known
CAPACITY_LENGTHS: tuple[tuple[str, int], ...] = (("4K", 4096), ("8K", 8192), ("32K", 32768), ("128K", 131072))

#: memory parts of a rank, in stacking order (key in the analysis ``memory`` figures, label)
MEMORY_PARTS: tuple[tuple[str, str], ...] = (
    ("weights_gib", "weights"),
    ("activation_peak_gib", "activation peak"),
    ("non_torch_gib", "non-torch"),
    ("cuda_graph_gib", "CUDA graph"),
)
NOT_IN_LOG = "not in log"
# bytes per token outside these bounds fits no real model (derive's bounds; defaults if it has none)
MIN_PLAUSIBLE_BPT: float = getattr(_derive, "MIN_PLAUSIBLE_BPT", 1.0)
MAX_PLAUSIBLE_BPT: float = getattr(_derive, "MAX_PLAUSIBLE_BPT", 64 * 1024 * 1024)
PASTE_HINT = "kvlogdiag: paste the log, then press Ctrl-D (Ctrl-Z Enter on Windows)"


# --- reading --------------------------------------------------------------------------------------


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def _read_clipboard() -> str:
    """The clipboard text; `InputError` with one line when pyperclip or a clipboard is missing."""
    try:
        import pyperclip  # type: ignore[import-not-found]
    except ImportError:
        raise InputError("--clipboard needs the optional pyperclip package: pip install 'kvlogdiag[clipboard]'") from None
    try:
        text = pyperclip.paste()
    except Exception as exc:  # noqa: BLE001 - pyperclip.PyperclipException when no copy/paste mechanism exists
        first = " ".join(str(exc).split()).split(". ")[0] or type(exc).__name__
        raise InputError(f"clipboard: no clipboard available ({first})") from None
    if not isinstance(text, str) or not text.strip():
        raise InputError("clipboard: empty (copy the log first)")
    return text


def _open(source: str | None, clipboard: bool, max_bytes: int, hint: Callable[[str], None]) -> tuple[str, BinaryIO]:
    if clipboard:
        return "clipboard", io.BytesIO(_read_clipboard().encode("utf-8", "replace"))
    if source in (None, "-"):
        if _stdin_is_tty():
            hint(PASTE_HINT)
        return "stdin", open_input("-", max_bytes)
    return source, open_input(source, max_bytes)


# --- the document ---------------------------------------------------------------------------------


def _last(values: list[RankValue], rank: str | None, single_row: bool):
    """The last value of a memory figure reported by ``rank`` (or by anyone in the run when the run
    has a single rank row)."""
    exact = [v for v in values if v.rank == rank]
    if exact:
        return exact[-1].value
    if single_row and values:
        return values[-1].value
    return None


class _RankRows:
    """The report's per-rank rows — the run's memory/tokens pairs, plus memory figures or token counts that
    have no partner (a start-up that failed before sizing the pool, V0 block counts) — in (DP group, line)
    order, without a dict per row (issue 18: a log of half a million KV lines has a quarter million pairs).

    ``light(i)`` gives row ``i``'s (DP group, available GiB, tokens, tokens line); ``row(i)`` the whole row
    dict a table shows (built for the shown rows only). The order is a list of row numbers only when the
    figures are not in line order already."""

    def __init__(self, a: Analysis):
        kv = self.kv = a.kv_cache
        self.a = a
        self.block_size = a.config.get("block_size")
        pairs = kv.ranks
        self.n_pairs = len(pairs)
        mem_lines = _line_set(p.memory_line for p in pairs)
        tok_lines = _line_set(p.tokens_line for p in pairs)
        # the unpaired figures: (kind, index) as row numbers after the pairs (kind 0 memory, 1 tokens, 2 blocks)
        self.avail = array("q", (i for i, v in enumerate(kv.available_by_rank) if not _in(mem_lines, v.line)))
        self.toks = array("q", (i for i, v in enumerate(kv.tokens_by_rank) if not _in(tok_lines, v.line)))
        blocks = kv.blocks_by_rank if self.block_size else []
        self.blks = array("q", (i for i, v in enumerate(blocks) if not _in(tok_lines, v.line)))
        # the block count at a line: bisect on the lines when in order (the usual case), else a dict
        self.block_lines = array("q", (v.line for v in blocks))
        self.block_dict: dict | None = None
        if any(self.block_lines[k] > self.block_lines[k + 1] for k in range(len(self.block_lines) - 1)):
            self.block_dict = {v.line: v.value for v in blocks}
        self.n = self.n_pairs + len(self.avail) + len(self.toks) + len(self.blks)
        self.order: list[int] | None = None
        prev = None
        for i in range(self.n):  # rows sort by (DP group, memory line or tokens line); stable
            k = self._key(i)
            if prev is not None and k < prev:
                self.order = sorted(range(self.n), key=self._key)
                break
            prev = k

    def _raw(self, j: int) -> tuple[Any, Any, Any, Any, Any]:
        """(dp group, available GiB, tokens, memory line, tokens line) of unsorted row ``j``."""
        kv = self.kv
        if j < self.n_pairs:
            p = kv.ranks[j]
            return p.dp_group, p.available_gib, p.tokens, p.memory_line, p.tokens_line
        j -= self.n_pairs
        if j < len(self.avail):
            v = kv.available_by_rank[self.avail[j]]
            return v.dp_group, v.value, None, v.line, None
        j -= len(self.avail)
        if j < len(self.toks):
            v = kv.tokens_by_rank[self.toks[j]]
            return v.dp_group, None, v.value, None, v.line
        v = kv.blocks_by_rank[self.blks[j - len(self.toks)]]
        return v.dp_group, None, v.value * self.block_size, None, v.line

    def _key(self, j: int) -> tuple[Any, Any]:
        r = self._raw(j)
        return r[0], r[3] or r[4] or 0

    def light(self, i: int) -> tuple[Any, Any, Any, Any]:
        """(dp group, available GiB, tokens, tokens line) of row ``i`` (sorted order)."""
        dp, gib, tokens, _mem, tline = self._raw(self.order[i] if self.order is not None else i)
        return dp, gib, tokens, tline

    def _blocks_at(self, line: Any) -> Any:
        if line is None or not self.block_size:
            return None
        if self.block_dict is not None:
            return self.block_dict.get(line)
        lines = self.block_lines
        k = bisect.bisect_right(lines, line) - 1  # the last one logged at that line, as a dict would keep
        return self.kv.blocks_by_rank[k].value if k >= 0 and lines[k] == line else None

    def row(self, i: int, single: bool) -> dict:
        """Row ``i`` (sorted order) as the report's dict."""
        j = self.order[i] if self.order is not None else i
        kv = self.kv
        if j < self.n_pairs:
            p = kv.ranks[j]
            r: dict[str, Any] = {"rank": p.rank, "dp_group": p.dp_group, "available_gib": p.available_gib, "tokens": p.tokens,
                 "bytes_per_token": p.bytes_per_token, "memory_line": p.memory_line, "tokens_line": p.tokens_line,
                 "memory_source": p.memory_source}
        else:
            dp, gib, tokens, mline, tline = self._raw(j)
            k = j - self.n_pairs
            v = kv.available_by_rank[self.avail[k]] if k < len(self.avail) else (
                kv.tokens_by_rank[self.toks[k - len(self.avail)]] if k < len(self.avail) + len(self.toks)
                else kv.blocks_by_rank[self.blks[k - len(self.avail) - len(self.toks)]])
            r = {"rank": v.rank, "dp_group": dp, "available_gib": gib, "tokens": tokens, "bytes_per_token": None,
                 "memory_line": mline, "tokens_line": tline, "memory_source": "available" if mline is not None else None}
        r["blocks"] = self._blocks_at(r["tokens_line"])  # V0 logs count blocks: say so next to the token figure
        r["block_size"] = self.block_size if r["blocks"] is not None else None
        a = self.a
        mem = {key: _last(a.memory_by_rank.get(key, []), r["rank"], single) for key, _ in MEMORY_PARTS}
        mem["total_gib"] = _last(a.memory_by_rank.get("total_gib", []), r["rank"], single)
        r["memory"] = mem
        r["headroom_gib"], r["missing_parts"] = _headroom(mem, r["available_gib"])
        return r


def _line_set(lines: Any) -> array:
    """The line numbers as a sorted array (None as -1), for `_in`: 8 bytes a line instead of a set entry."""
    out = array("q", (-1 if x is None else x for x in lines))
    if any(out[k] > out[k + 1] for k in range(len(out) - 1)):
        out = array("q", sorted(out))
    return out


def _in(lines: array, line: Any) -> bool:
    x = -1 if line is None else line
    k = bisect.bisect_left(lines, x)
    return k < len(lines) and lines[k] == x


def _shown_rows(t: _RankRows) -> list[dict]:
    """The rows the tables show: all of a short table, of a long one the first and last `caps.ROW_ENDS`."""
    single = t.n == 1
    idx = range(t.n) if t.n <= SHOW_ALL else [*range(ROW_ENDS), *range(t.n - ROW_ENDS, t.n)]
    return [t.row(i, single) for i in idx]


def _rank_summary(t: _RankRows) -> dict:
    """What the summary says of every row (ranges, counts), in one pass over the rows."""
    gib_lo = gib_hi = tok_lo = tok_hi = None
    with_gib = 0
    for i in range(t.n):
        _dp, gib, tokens, _tl = t.light(i)
        if gib is not None:
            with_gib += 1
            gib_lo = gib if gib_lo is None or gib < gib_lo else gib_lo
            gib_hi = gib if gib_hi is None or gib > gib_hi else gib_hi
        if tokens is not None:
            tok_lo = tokens if tok_lo is None or tokens < tok_lo else tok_lo
            tok_hi = tokens if tok_hi is None or tokens > tok_hi else tok_hi
    bpt_lo, bpt_hi = value_range(t.kv.ranks, key=lambda p: p.bytes_per_token) if t.n > SHOW_ALL else (None, None)
    return {"count": t.n, "available_gib": [gib_lo, gib_hi], "with_available": with_gib, "tokens": [tok_lo, tok_hi],
            "bytes_per_token": [bpt_lo, bpt_hi]}


def _headroom(mem: dict, kv_gib: float | None) -> tuple[float | None, list[str]]:
    """total − (weights + activation + non-torch + CUDA graph + KV); parts not in the log count as 0
    and are listed (the headroom then includes them)."""
    parts = [(label, mem.get(key)) for key, label in MEMORY_PARTS] + [("KV cache", kv_gib)]
    missing = [label for label, v in parts if v is None]
    total = mem.get("total_gib")
    if total is None:
        return None, missing + ["total"]
    return round(total - sum(v for _, v in parts if v is not None), 4), missing


def _capacity(a: Analysis, t: _RankRows) -> dict:
    cfg = a.config
    mml = cfg.get("max_model_len")
    dp_size = cfg.get("data_parallel_size") or 1
    # vLLM rejects a request longer than max-model-len ('This model's maximum context length is ...',
    # vllm 0.23.0 vllm/renderers/params.py:337): rows stop there
    lengths = [(label, n) for label, n in CAPACITY_LENGTHS if not mml or n < int(mml)]
    if mml:
        lengths.append(("max-model-len", int(mml)))
    cap: dict[str, Any] = {"basis": None, "groups": [], "rows": [], "dp_size": dp_size, "notes": [], "max_model_len": mml}
    groups: list[dict] = []
    by_group: dict[int, dict] = {}
    implausible = None
    for i in range(t.n):  # one pass: the smallest plausible token count per DP group, the first implausible row
        dp, gib, tokens, tline = t.light(i)
        if tokens is None:
            continue
        if not _plausible_pair(gib, tokens):
            if implausible is None:
                implausible = (gib, tokens, tline)
            continue
        g = by_group.get(dp)
        if g is None or tokens < g["tokens"]:
            by_group[dp] = {"dp_group": dp, "tokens": tokens, "line": tline}
    if implausible is not None:
        gib, tokens, tline = implausible
        cap["notes"].append(
            f"line {tline}: {fmt_num(tokens)} tokens in {fmt_gib(gib)} is "
            f"{gib * _GIB / tokens if tokens else float('inf'):.3g} bytes per token, "
            "outside any real model: such token counts are left out of the capacity")
    if by_group:
        groups = [by_group[k] for k in sorted(by_group)]
        cap["basis"] = "log"
    else:
        ik = a.errors.get("insufficient_kv")
        if ik and ik.get("estimated_max_len"):
            ev = a.evidence.get("insufficient_kv")
            line = ev.line if ev is not None else None
            groups = [{"dp_group": 0, "tokens": int(ik["estimated_max_len"]), "line": line}]
            cap["basis"] = "insufficient_kv"
            cap["notes"].append(
                f"vLLM did not size the KV cache (start-up failed); tokens per DP group = vLLM's estimated maximum model length "
                f"{fmt_num(int(ik['estimated_max_len']))} from the error at line {line}, i.e. what {fmt_gib(ik.get('available_gib'))} holds")
    if not groups:
        return cap
    cap["groups"] = groups
    seen = len(groups)
    extra = max(0, int(dp_size) - seen)
    if extra:
        cap["notes"].append(f"the log shows {seen} of {dp_size} DP groups; the total counts the other {extra} as the smallest group seen")
    smallest = min(g["tokens"] for g in groups)
    for label, length in lengths:
        per = [g["tokens"] // length for g in groups]
        total = sum(per) + extra * (smallest // length)
        cap["rows"].append({"label": label, "tokens": length, "per_group_min": min(per), "per_group_max": max(per),
                            "total": total, "concurrency": smallest / length})
    return cap


_GIB = 1 << 30


def _plausible_pair(gib: float | None, tokens: int | None) -> bool:
    """False when a row's memory figure and token count give a bytes-per-token no model has
    (e.g. a corrupted count of 2**70 tokens); rows without a memory figure cannot be checked."""
    if gib is None or tokens is None:
        return True
    if tokens <= 0 or gib <= 0:
        return False
    try:
        bpt = gib * _GIB / tokens
    except OverflowError:
        return False
    return MIN_PLAUSIBLE_BPT <= bpt <= MAX_PLAUSIBLE_BPT


#: start-up error (key of ``Analysis.errors``) → the event whose first line is its evidence
ERROR_EVIDENCE = (("insufficient_kv", "insufficient_kv"), ("no_available_memory", "no_available_memory"),
                  ("startup_failed", "engine_failed"))


def _error_items(a: Analysis) -> list[dict]:
    """Start-up errors in words (render.error_lines) with the log line each comes from."""
    base = {"insufficient_kv": None, "no_available_memory": False, "startup_failed": False}
    out: list[dict] = []
    st = a.startup or {}
    for key, event in ERROR_EVIDENCE:
        val = a.errors.get(key)
        if key == "startup_failed" and st.get("failed"):
            # the root cause (issue 11): its own line, not the echo 'EngineCore failed to start'
            texts = error_lines(replace(a, errors=base))
            line = st.get("cause_line")
            out.extend({"text": t, "line": line, "evidence": st.get("cause_text") if line else None} for t in texts)
            continue
        if not val:
            continue
        texts = error_lines(replace(a, errors={**base, key: val}, startup=None))
        ev = a.evidence.get(event)
        for t in texts:
            out.append({"text": t, "line": ev.line if ev else None, "evidence": ev.text if ev else None})
    return out


def _settings_rows(a: Analysis) -> list[list[str]]:
    rows = [list(r) for r in identity_rows(a) if r[0] != "VLLM_* env"]
    c = a.config
    for key in ("enable_prefix_caching", "enforce_eager", "max_num_partial_prefills", "max_long_partial_prefills",
                "long_prefill_token_threshold"):
        if c.get(key) is not None:
            rows.append([key, fmt_num(c[key])])
    for key, vals in (c.get("conflicts") or {}).items():
        rows.append([f"{key} (runs disagree)", ", ".join(str(v) for v in vals)])
    return rows


# a report stays readable and bounded whatever the log (issue 18: one bar per KV pair made a 10 MB log of KV
# lines a >14 GB image, and one dict per pair held ~350 B a KV line): the per-rank tables and the memory chart
# show every row up to `caps.SHOW_ALL`, past that the first and last `caps.ROW_ENDS` (as the text summary);
# the summary's ranges and the capacity figures are computed from every row
MAX_REPORT_RANKS = SHOW_ALL
MAX_CHART_BARS = SHOW_ALL


def build_section(a: Analysis, min_severity: str = "info") -> dict:
    """Everything the report shows about one run, as plain data (redact this, then render it).

    ``analysis`` is `Analysis.to_json` with its per-value KV lists as views (``lazy``): the report shows
    none of them — it shows ``ranks`` (every row of a short table, of a long one the first and last ones,
    ``ranks_count`` in all) and the ranges in ``ranks_summary`` — so they are neither copied nor redacted."""
    data = a.to_json(min_severity, lazy=True)
    rows = _RankRows(a)
    shown = _shown_rows(rows)
    counts = {s: sum(1 for f in data["findings"] if f["severity"] == s) for s in ("error", "warning", "info")}
    return {"analysis": data, "run_label": run_label(a), "settings": _settings_rows(a), "ranks": shown,
            "ranks_omitted": rows.n - len(shown), "ranks_count": rows.n, "ranks_summary": _rank_summary(rows),
            "capacity": _capacity(a, rows), "errors": _error_items(a), "counts": counts,
            "suggestion": build_suggestion(a)}


def build_document(analyses: Sequence[Analysis], min_severity: str = "info") -> dict:
    """The report on the given runs of one input (newest first for ``--run all``), as plain data."""
    if not analyses:
        raise ValueError("a report needs at least one run")
    first = analyses[0]
    return {"tool": "kvlogdiag", "version": __version__, "source": first.source, "lines_read": first.lines_read,
            "sections": [build_section(a, min_severity) for a in analyses], "redaction": None}


def redact_document(doc: dict) -> dict:
    """The document with host names, IPs, user names, keys, tokens and e-mails masked throughout (one
    mask per value across every section)."""
    red = Redactor()
    out = red.redact_obj(doc)
    out["redaction"] = red.summary()
    return out


# --- shared text ----------------------------------------------------------------------------------


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _verdict(doc: dict) -> str:
    c = doc["counts"]
    return f"{_plural(c['error'], 'error')} · {_plural(c['warning'], 'warning')} · {c['info']} info"


def _range(values: list[float | int], fmt) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "—"
    lo, hi = min(vals), max(vals)
    return fmt(lo) if lo == hi else f"{fmt(lo)} – {fmt(hi)}"


def _summary_rows(doc: dict) -> list[list[str]]:
    a = doc["analysis"]
    v, c, kv = a["vllm"], a["config"], a["kv_cache"]
    par = " / ".join(fmt_num(c[k]) for k in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"))
    bpt = fmt_bpt(kv["bytes_per_token"]) + (f", {kv['bytes_per_token_kind']}" if kv["bytes_per_token_kind"] else "")
    rows = [
        ["vLLM", f"{v['version'] or '—'} ({v['engine'] or '?'} engine, {v['platform'] or 'platform ?'})"],
        ["model", c["model"] or "—"],
        ["TP / PP / DP", par],
        ["max-model-len", fmt_num(c["max_model_len"])],
        ["bytes per token (per rank)", bpt],
    ]
    summ = doc["ranks_summary"]
    if summ["count"]:
        rows.append(["available KV cache (per rank)", _range(summ["available_gib"], fmt_gib)
                     + f" over {_plural(summ['with_available'], 'rank')}"])
        rows.append(["KV cache size (tokens)", _range(summ["tokens"], fmt_num)])
    verdict = _verdict(doc)
    if a["errors"].get("startup_failed"):
        verdict += " · start-up failed"
    rows.append(["findings", verdict])
    win = a.get("window")
    if win:  # --since/--until (kvlogdiag.timeline): the runtime figures cover the window only
        rows.append(["time window", f"{win.get('since') or 'start'} to {win.get('until') or 'end'}: runtime figures cover it "
                     f"({a['runtime']['stats_lines']:,} stats lines in it, {win.get('runtime_lines_outside', 0):,} runtime lines outside)"])
    return rows


def _omitted_note(sec: dict) -> str:
    """What a capped table leaves out, in the words of the text summary's (`render.analysis.rank_rows_note`)."""
    n, summ = sec["ranks_count"], sec["ranks_summary"]
    spans = [f"{what} lowest {fmt(lo)}, highest {fmt(hi)}" for what, (lo, hi), fmt in (
        ("available", summ["available_gib"], fmt_gib), ("tokens", summ["tokens"], fmt_num),
        ("bytes/token", summ["bytes_per_token"], fmt_bpt)) if lo is not None]
    span = "; " + "; ".join(spans) if spans else ""
    return (f"Bounded report: {n:,} KV figures: the first and last {ROW_ENDS} shown in the tables and the chart{span}; "
            "every one in `kvlogdiag analyze --format json` (kv_cache); the capacity figures use them all.")


def _capped_cells(sec: dict, cells: Callable[[dict], list[str]], width: int) -> list[list[str]]:
    """A table's cells: one row per shown rank row, with a "…" row where a capped table leaves rows out."""
    ranks = sec["ranks"]
    out = [cells(r) for r in ranks]
    if sec.get("ranks_omitted"):
        out.insert(ROW_ENDS, ["…"] + [""] * (width - 1))
    return out


def _rank_label(r: dict) -> str:
    return r["rank"] or "—"


def _group_label(r: dict) -> str:
    return f"DP{r['dp_group']}"


def _lines(r: dict) -> str:
    return f"{r['memory_line'] or '—'}/{r['tokens_line'] or '—'}"


FIGURE_HEADERS = ["rank", "DP group", "available KV GiB", "tokens", "bytes/token", "lines (memory/tokens)"]
MEMORY_HEADERS = ["rank", "weights", "activation peak", "non-torch", "CUDA graph", "KV cache", "total", "headroom", "not in log"]
CAPACITY_HEADERS = ["request length", "tokens", "requests per DP group", "requests in total"]


def _figure_cells(r: dict) -> list[str]:
    tokens = fmt_num(r["tokens"])
    if r.get("blocks") is not None:
        tokens += f" ({fmt_num(r['blocks'])} blocks × {r['block_size']})"
    bpt = r["bytes_per_token"]
    shown = fmt_bpt(bpt) if bpt is None or MIN_PLAUSIBLE_BPT <= bpt <= MAX_PLAUSIBLE_BPT else "— (implausible)"
    return [_rank_label(r), _group_label(r), fmt_gib(r["available_gib"]), tokens, shown, _lines(r)]


def _gib_or_missing(v: float | None) -> str:
    return NOT_IN_LOG if v is None else fmt_gib(round(v, 4))


def _memory_cells(r: dict) -> list[str]:
    m = r["memory"]
    missing = r["missing_parts"]
    return ([_rank_label(r)] + [_gib_or_missing(m[key]) for key, _ in MEMORY_PARTS]
            + [_gib_or_missing(r["available_gib"]), _gib_or_missing(m["total_gib"]), _gib_or_missing(r["headroom_gib"]),
               ", ".join(missing) if missing else "—"])


def _capacity_cells(row: dict, groups: int) -> list[str]:
    per = fmt_num(row["per_group_min"]) if row["per_group_min"] == row["per_group_max"] else \
        f"{fmt_num(row['per_group_min'])} – {fmt_num(row['per_group_max'])}"
    return [row["label"], fmt_num(row["tokens"]), per, fmt_num(row["total"])]


def _capacity_intro(cap: dict) -> str:
    groups = cap["groups"]
    toks = ", ".join(f"DP{g['dp_group']} {fmt_num(g['tokens'])} (line {g['line']})" for g in groups)
    return (f"Whole requests of each length that fit in the KV cache at once (floor of tokens per DP group ÷ length; "
            f"a request lives in one DP group, so the total is the sum over {_plural(int(cap['dp_size']), 'DP group')}). "
            f"Tokens per DP group: {toks}.")


def _json_text(obj: Any) -> str:
    return json.dumps(clean_json(obj), indent=2, ensure_ascii=False, allow_nan=False)


def _json_blocks(a: dict) -> list[tuple[str, str]]:
    c = a["config"]
    return [(name, _json_text(c[name])) for name in ("kv_transfer_config", "additional_config") if c.get(name)]


def _redaction_text(doc: dict) -> str:
    red = doc.get("redaction")
    if red is None:
        return "off (--no-redact): host names, IPs, user names, keys and tokens are shown as logged"
    return ("on: masked " + red) if red else "on: nothing to mask was found"


# --- Markdown -------------------------------------------------------------------------------------


def _md_json_block(text: str) -> str:
    block = md_code_block(text.splitlines())
    fence_line, rest = block.split("\n", 1)
    return fence_line[: -len("text")] + "json\n" + rest


def _md_evidence(line: int | None, text: str) -> list[str]:
    return ["<details><summary>evidence" + (f" (line {int(line)})" if line else "") + "</summary>", "",
            md_code_block([f"{line}: {text}" if line else text]), "", "</details>"]


def render_report_markdown(doc: dict) -> str:
    """The report as GitHub-flavoured Markdown (for an issue): one ``##`` section per run."""
    parts = [_markdown_section(doc, sec, first=i == 0) for i, sec in enumerate(doc["sections"])]
    parts.append(f"<sub>Generated by kvlogdiag {md_escape(doc['version'])} (`kvlogdiag report`).</sub>\n")
    return "\n".join(parts)


def _markdown_section(doc: dict, sec: dict, first: bool) -> str:
    a = sec["analysis"]
    out: list[str] = []
    out.append(f"## kvlogdiag report: {md_escape(a['source'])}" + (f" — {md_escape(sec['run_label'])}" if sec["run_label"] else ""))
    out.append("")
    if first:
        out.append(f"{a['lines_read']:,} lines read · kvlogdiag {md_escape(doc['version'])} · redaction {md_escape(_redaction_text(doc))}")
        out.append("")
    out.append("### Summary")
    out.append("")
    out.append(md_table(["", ""], _summary_rows(sec)))
    kv = a["kv_cache"]
    if kv.get("bytes_per_token_note"):
        out += ["", f"> {md_escape(kv['bytes_per_token_note'])}"]
    if kv.get("ranks_disagree"):
        out += ["", "> ranks disagree on bytes per token by more than 1 %: the figure above is their median"]
    if sec["errors"]:
        out += ["", "### Start-up errors", ""]
        for e in sec["errors"]:
            out.append(f"- {md_escape(e['text'])}" + (f" (line {e['line']})" if e["line"] else ""))
            if e["evidence"]:
                out += [""] + ["  " + ln if ln else "" for ln in "\n".join(_md_evidence(e["line"], e["evidence"])).split("\n")] + [""]
    out += ["", "### KV cache figures per rank", ""]
    if sec["ranks"]:
        out.append(md_table(FIGURE_HEADERS, _capped_cells(sec, _figure_cells, len(FIGURE_HEADERS))))
        out += ["", "### GPU memory per rank", "",
                "From the memory lines of each rank; headroom = total − the other columns (it includes any part not in the log)."
                " Charts: `--format html`.", ""]
        out.append(md_table(MEMORY_HEADERS, _capped_cells(sec, _memory_cells, len(MEMORY_HEADERS))))
        if sec.get("ranks_omitted"):
            out.append("")
            out.append(f"_{_omitted_note(sec)}_")
    else:
        out.append("No `Available KV cache memory` or `GPU KV cache size` line in the log.")
    fs = a["findings"]
    out += ["", f"### Findings ({len(fs)})", ""]
    if not fs:
        out.append("No findings.")
    for f in fs:
        out.append(f"#### {md_escape(f['rule'])} {md_escape(f['name'])} ({md_escape(f['severity'])}"
                   + (f", line {int(f['line'])}" if f.get("line") else "") + ")")
        out += ["", md_escape(f["message"])]
        if f.get("fix"):
            out += ["", f"**Fix:** {md_escape(f['fix'])}"]
        if f.get("evidence"):
            out += [""] + _md_evidence(f.get("line"), f["evidence"])
        out.append("")
    sug = sec.get("suggestion")
    if sug and sug["suggestions"]:  # issue 15: the launch command with the findings' fixes applied
        out += ([] if fs else [""]) + [suggestion_markdown(sug)]
    cap = sec["capacity"]
    out += ["### Capacity", ""] if fs else ["", "### Capacity", ""]
    if cap["rows"]:
        out.append(md_escape(_capacity_intro(cap)))
        out.append("")
        out.append(md_table(CAPACITY_HEADERS, [_capacity_cells(r, len(cap["groups"])) for r in cap["rows"]]))
        for n in cap["notes"]:
            out += ["", f"> {md_escape(n)}"]
    elif cap["notes"]:
        out += [f"Not computed: {md_escape(n)}." for n in cap["notes"]]
    else:
        out.append("The log gives no KV cache size, so the capacity cannot be computed.")
    out += ["", "### Configuration", "", md_table(["setting", "value"], sec["settings"])]
    for name, text in _json_blocks(a):
        out += ["", f"**{md_escape(name)}**", "", _md_json_block(text)]
    env = a["config"].get("env") or {}
    out += ["", "**VLLM_\\* environment**", ""]
    out.append(md_table(["variable", "value"], [[k, v] for k, v in env.items()]) if env else "None in the log.")
    return "\n".join(out).rstrip() + "\n"


# --- charts ---------------------------------------------------------------------------------------

_COLORS = {"weights": "#4C72B0", "activation peak": "#DD8452", "non-torch": "#937860", "CUDA graph": "#8172B3",
           "KV cache": "#55A868", "headroom": "#D9D9D9"}


def _matplotlib():
    """(Figure, FigureCanvasAgg) or None when matplotlib is not installed."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure, FigureCanvasAgg


def _png_data_uri(fig, canvas_cls) -> str:
    canvas_cls(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _memory_chart(doc: dict, mpl) -> str | None:
    rows = doc["ranks"][:MAX_CHART_BARS]
    if not rows:
        return None
    Figure, Canvas = mpl
    fig = Figure(figsize=(max(6.0, 0.7 * len(rows) + 2.5), 4.2))
    ax = fig.add_subplot(1, 1, 1)
    labels = [_rank_label(r) for r in rows]
    x = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    series = [(label, [r["memory"][key] for r in rows]) for key, label in MEMORY_PARTS]
    series.append(("KV cache", [r["available_gib"] for r in rows]))
    series.append(("headroom", [max(0.0, r["headroom_gib"]) if r["headroom_gib"] is not None else None for r in rows]))
    for label, vals in series:
        heights = [v or 0.0 for v in vals]
        if not any(heights):
            continue
        ax.bar(x, heights, bottom=bottom, color=_COLORS[label], label=label, edgecolor="white", linewidth=0.5,
               hatch="//" if label == "headroom" else None)
        bottom = [b + h for b, h in zip(bottom, heights)]
    tilt = len(rows) > 4 or max(len(lb) for lb in labels) * len(rows) > 48
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30 if tilt else 0, ha="right" if tilt else "center", fontsize=8)
    ax.set_ylabel("GiB")
    ax.set_title("GPU memory per rank")
    missing = [label for label in [lb for _, lb in MEMORY_PARTS] + ["KV cache", "total"]
               if any(label in r["missing_parts"] for r in rows)]
    if missing:
        note = "not in log: " + ", ".join(missing)
        if "total" in missing:
            note += " (no headroom without the total)"
        ax.text(0.0, 1.02, note, transform=ax.transAxes, fontsize=8, color="#59636e", va="bottom")
        ax.set_title("GPU memory per rank", pad=18)
    if ax.get_legend_handles_labels()[0]:  # a rank whose every figure is missing draws no bar
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return _png_data_uri(fig, Canvas)


def _tokens_label(n: float) -> str:
    n = int(n)
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10}K"
    return f"{n:,}"


def _capacity_chart(doc: dict, mpl) -> str | None:
    """Requests that fit vs request length: the exact curve tokens ÷ L (vLLM's "maximum concurrency")
    for the smallest DP group (and in total), and the whole requests of the table as points."""
    cap = doc["capacity"]
    if not cap["rows"]:
        return None
    Figure, Canvas = mpl
    groups = cap["groups"]
    smallest = min(g["tokens"] for g in groups)
    if smallest <= 0:
        return None
    dp = max(int(cap["dp_size"]), len(groups))
    # the curve stops at max-model-len: vLLM rejects longer requests
    mml = cap.get("max_model_len")
    lo, hi = 1024, (int(mml) if mml else max([131072] + [r["tokens"] for r in cap["rows"]]) * 2)
    lo = min(lo, max(1, hi // 4))
    steps = 240
    xs = [lo * (hi / lo) ** (i / steps) for i in range(steps + 1)]
    fig = Figure(figsize=(7.0, 4.2))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(xs, [smallest / x for x in xs], color=_COLORS["KV cache"], label="per DP group (smallest): tokens ÷ length")
    if dp > 1:
        total_tokens = sum(g["tokens"] for g in groups) + (dp - len(groups)) * smallest
        ax.plot(xs, [total_tokens / x for x in xs], color=_COLORS["weights"], label=f"all {dp} DP groups")
    floor_y = min(0.5, smallest / hi)
    for r in cap["rows"]:
        y = max(r["per_group_min"], floor_y)
        ax.plot([r["tokens"]], [y], "o", color=_COLORS["KV cache"])
        ax.annotate(f"{r['label']}: {r['per_group_min']:,}", (r["tokens"], y), textcoords="offset points",
                    xytext=(5, 5), fontsize=8)
    if cap.get("max_model_len"):
        ax.axvline(cap["max_model_len"], color="#C44E52", linestyle="--", linewidth=1, label="max-model-len")
    ax.axhline(1, color="#888888", linestyle=":", linewidth=1, label="1 request")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = []
    t = lo
    while t <= hi:
        ticks.append(t)
        t *= 4
    ax.set_xticks(ticks)
    ax.set_xticklabels([_tokens_label(t) for t in ticks])
    ax.set_xlabel("request length (tokens)")
    ax.set_ylabel("requests that fit at once")
    ax.set_title("KV capacity vs request length (points: whole requests per DP group)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, frameon=False, loc="upper right")
    return _png_data_uri(fig, Canvas)


def render_charts(doc: dict) -> dict[str, str | None] | None:
    """{"memory": data URI | None, "capacity": data URI | None}, or None without matplotlib."""
    mpl = _matplotlib()
    if mpl is None:
        return None
    return {"memory": _memory_chart(doc, mpl), "capacity": _capacity_chart(doc, mpl)}


# --- HTML -----------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#1f2328}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0}th,td{border:1px solid #d0d7de;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f6f8fa;padding:.6em;overflow:auto;white-space:pre-wrap;word-break:break-all}
.meta{color:#59636e}.note{color:#59636e;border-left:3px solid #d0d7de;padding-left:.6em}
.finding{border-left:4px solid #d0d7de;padding:.1em .8em;margin:.8em 0}
.sev-error{border-color:#cf222e}.sev-warning{border-color:#bf8700}.sev-info{border-color:#0969da}
img.chart{max-width:100%;height:auto;display:block;margin:.6em 0}
""".strip()

_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _html_table(headers: list[str], rows: list[list[str]], table_id: str | None = None, numeric: frozenset[int] | set[int] = frozenset()) -> str:
    out = [f'<table id="{table_id}">' if table_id else "<table>", "<thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in headers) + "</tr></thead>", "<tbody>"]
    for r in rows:
        out.append("<tr>" + "".join(f'<td class="num">{_e(c)}</td>' if i in numeric else f"<td>{_e(c)}</td>"
                                    for i, c in enumerate(r)) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _html_evidence(line: int | None, text: str) -> str:
    summary = "evidence" + (f" (line {int(line)})" if line else "")
    body = f"{line}: {text}" if line else text
    return f"<details><summary>{_e(summary)}</summary><pre>{_e(body)}</pre></details>"


def render_report_html(doc: dict, charts: bool = True) -> str:
    """The report as one self-contained HTML page (no scripts, no network at view time); several runs
    each get a ``<section>`` of their own (table ids then end in ``-run<N>``)."""
    secs = doc["sections"]
    out: list[str] = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_e(_CSP)}">',
        '<meta name="referrer" content="no-referrer">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>kvlogdiag report: {_e(doc['source'])}</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
        f"<h1>kvlogdiag report: {_e(doc['source'])}</h1>",
        f'<p class="meta">{doc["lines_read"]:,} lines read · kvlogdiag {_e(doc["version"])} · redaction {_e(_redaction_text(doc))}</p>',
    ]
    if len(secs) == 1:
        if secs[0]["run_label"]:
            out.append(f'<p class="meta">{_e(secs[0]["run_label"])}</p>')
        out += _html_section(secs[0], charts, 2, "")
    else:
        for sec in secs:
            n = sec["analysis"]["run"]["index"] + 1
            out += [f'<section id="run-{n}">', f"<h2>{_e(sec['run_label'][:1].upper() + sec['run_label'][1:])}</h2>"]
            out += _html_section(sec, charts, 3, f"-run{n}")
            out.append("</section>")
    out.append(f'<p class="meta">Generated by kvlogdiag {_e(doc["version"])} (<code>kvlogdiag report --format html</code>).</p>')
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"


def _html_section(sec: dict, charts: bool, level: int, suffix: str) -> list[str]:
    """One run's part of the page; ``level`` is the heading level of its sections."""
    a = sec["analysis"]
    h, h_sub = f"h{level}", f"h{level + 1}"

    def head(text: str) -> str:
        return f"<{h}>{_e(text)}</{h}>"

    pics = render_charts(sec) if charts else None
    out: list[str] = [head("Summary"), _html_table(["", ""], _summary_rows(sec), "summary" + suffix)]
    kv = a["kv_cache"]
    if kv.get("bytes_per_token_note"):
        out.append(f'<p class="note">{_e(kv["bytes_per_token_note"])}</p>')
    if kv.get("ranks_disagree"):
        out.append('<p class="note">Ranks disagree on bytes per token by more than 1 %: the figure above is their median.</p>')
    if sec["errors"]:
        out.append(head("Start-up errors") + "<ul>")
        for e in sec["errors"]:
            out.append("<li>" + _e(e["text"]) + (f" (line {int(e['line'])})" if e["line"] else "")
                       + (_html_evidence(e["line"], e["evidence"]) if e["evidence"] else "") + "</li>")
        out.append("</ul>")
    out.append(head("KV cache figures per rank"))
    if sec["ranks"]:
        out.append(_html_table(FIGURE_HEADERS, _capped_cells(sec, _figure_cells, len(FIGURE_HEADERS)), "figures" + suffix,
                               {2, 3, 4}))
        out.append(head("GPU memory per rank"))
        out.append(_html_chart(pics, "memory", "Stacked bars per rank: weights, activation peak, non-torch, CUDA graph, "
                                               "KV cache and headroom (total − the rest), in GiB"))
        out.append('<p class="note">Headroom = total − the other columns; a part that is not in the log counts as 0, '
                   'so the headroom then includes it.</p>')
        out.append(_html_table(MEMORY_HEADERS, _capped_cells(sec, _memory_cells, len(MEMORY_HEADERS)), "memory" + suffix,
                               {1, 2, 3, 4, 5, 6, 7}))
        if sec.get("ranks_omitted"):
            out.append(f'<p class="note">{_omitted_note(sec)}</p>')
    else:
        out.append("<p>No <code>Available KV cache memory</code> or <code>GPU KV cache size</code> line in the log.</p>")
    fs = a["findings"]
    out.append(head(f"Findings ({len(fs)})"))
    if not fs:
        out.append("<p>No findings.</p>")
    for f in fs:
        sev = f["severity"] if f["severity"] in ("error", "warning", "info") else "info"
        out.append(f'<div class="finding sev-{sev}">')
        out.append(f"<{h_sub}>{_e(f['rule'])} {_e(f['name'])} ({_e(f['severity'])}"
                   + (f", line {int(f['line'])}" if f.get("line") else "") + f")</{h_sub}>")
        out.append(f"<p>{_e(f['message'])}</p>")
        if f.get("fix"):
            out.append(f"<p><strong>Fix:</strong> {_e(f['fix'])}</p>")
        if f.get("evidence"):
            out.append(_html_evidence(f.get("line"), f["evidence"]))
        out.append("</div>")
    sug = sec.get("suggestion")
    if sug and sug["suggestions"]:  # issue 15: the launch command with the findings' fixes applied
        out.append(head("Suggested command"))
        out.append(_html_table(["setting", "now", "suggested", "why", "rule"], suggestion_rows(sug), "suggest" + suffix))
        out.append(f"<pre>{_e(sug['command'])}</pre>")
    cap = sec["capacity"]
    out.append(head("Capacity"))
    if cap["rows"]:
        out.append(f"<p>{_e(_capacity_intro(cap))}</p>")
        out.append(_html_table(CAPACITY_HEADERS, [_capacity_cells(r, len(cap["groups"])) for r in cap["rows"]],
                               "capacity" + suffix, {1, 2, 3}))
        out.extend(f'<p class="note">{_e(n)}</p>' for n in cap["notes"])
        out.append(_html_chart(pics, "capacity", "Requests that fit at once vs request length (log scales)"))
    elif cap["notes"]:
        out.extend(f"<p>Not computed: {_e(n)}.</p>" for n in cap["notes"])
    else:
        out.append("<p>The log gives no KV cache size, so the capacity cannot be computed.</p>")
    out.append(head("Configuration"))
    out.append(_html_table(["setting", "value"], sec["settings"], "settings" + suffix))
    for name, text in _json_blocks(a):
        out.append(f"<{h_sub}>{_e(name)}</{h_sub}><pre>{_e(text)}</pre>")
    env = a["config"].get("env") or {}
    out.append(f"<{h_sub}>VLLM_* environment</{h_sub}>")
    out.append(_html_table(["variable", "value"], [[k, v] for k, v in env.items()], "env" + suffix) if env
               else "<p>None in the log.</p>")
    return out


def _html_chart(pics: dict | None, name: str, alt: str) -> str:
    if pics is None:
        return ('<p class="note">Charts need matplotlib, which is not installed: '
                "<code>pip install 'kvlogdiag[charts]'</code>. The tables carry the same figures.</p>")
    uri = pics.get(name)
    if not uri:
        return ""
    return f'<img class="chart" alt="{_e(alt)}" src="{_e(uri)}">'


# --- the engine: input → report text ---------------------------------------------------------------


class ReportError(KvlogdiagError):
    """A report that cannot be made (empty paste, no such run): one line, exit 2."""


def read_input(analyzer: Analyzer, source: str | None, clipboard: bool, max_bytes: int,
               hint: Callable[[str], None], container: str | None = None) -> InputAnalysis:
    """Read and analyse the log; ``hint`` gets the paste prompt when stdin is a terminal. An interleaved
    multi-container log (``docker compose logs``) is reported one container at a time: ``container``
    names it. Raises `InputError` (unreadable input) or `ReportError` (empty input, a multi-container
    log without ``container``, an unknown container)."""
    fh = None
    try:
        name, fh = _open(source, clipboard, max_bytes, hint)
        parts = analyzer.analyze_stream_split(fh, name)
    finally:
        if fh is not None:
            try:
                fh.close()
            except Exception:  # noqa: BLE001 - closing a broken stream must not hide the real error
                pass
    names = [p.container for p in parts]
    if container is not None:
        if container not in names:
            raise ReportError(f"{name}: no container {container!r}" + (f" (it has: {', '.join(str(n) for n in names)})"
                                                                       if any(names) else " (a log of one server)"))
        result = parts[names.index(container)]
    elif len(parts) > 1:
        # never one report of several servers, never one of them silently: the reader picks
        raise ReportError(f"{name} interleaves {len(parts)} containers ({', '.join(str(n) for n in names)}): "
                          "pass --container NAME for the one to report")
    else:
        result = parts[0]
    if result.current.lines_read == 0:
        raise ReportError(f"{name}: empty input, nothing to report" + (" (paste the log, then Ctrl-D)" if name == "stdin" else ""))
    return result


def make_report(result: InputAnalysis, run: str = "last", fmt: str = "markdown", redact: bool = True,
                min_severity: str = "info") -> tuple[str, list[Analysis]]:
    """The report text on the selected runs (``last``, ``first``, ``all`` newest first, or a 1-based
    number) and those runs. Raises `ReportError` for a run the input does not have."""
    try:
        chosen = result.select(run)
    except IndexError as exc:
        raise ReportError(str(exc)) from None
    doc = build_document(chosen, min_severity)
    if redact:
        doc = redact_document(doc)
    text = render_report_html(doc) if fmt == "html" else render_report_markdown(doc)
    return text, chosen
