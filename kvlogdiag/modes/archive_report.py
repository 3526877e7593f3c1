"""``kvlogdiag scan … --html report.html``: one self-contained page over a whole archive (docs/archive-report.md).

Built from scan's rows and, per row, the run's details that the scan collected while it analysed the
file (`run_detail`: the run's time span, its bounded KV-usage / preemption timeline from
`kvlogdiag.timeline`, its findings) — nothing is read again. The page: runs by worst finding, findings by
rule over time, bytes per token by model × vLLM version × TP × KV dtype (and why one model shows several
figures), KV usage and preemptions over time, the worst runs linked to their sections.

Charts are matplotlib PNGs inlined as ``data:`` URIs (the optional ``charts`` extra); without matplotlib
every chart is a plain table. No script, no external resource (a Content-Security-Policy forbids them).
The page's size is bounded whatever the archive: at most `MAX_SECTIONS` run sections, `MAX_BUCKETS` time
buckets, `MAX_GROUPS` bytes-per-token groups, `MAX_WORST` worst runs; the page says what it left out.
"""

from __future__ import annotations

import math
import statistics
from datetime import datetime, timezone
from typing import Any

from kvlogdiag import __version__
from kvlogdiag.modes.report import _CSP, _CSS, _e, _html_table, _matplotlib, _png_data_uri
from kvlogdiag.render.redact import escape_controls
from kvlogdiag.timeline import MAX_POINTS

MAX_SECTIONS = 40  # per-run sections (the worst runs)
MAX_WORST = 40
MAX_BUCKETS = 60
MAX_GROUPS = 40
MAX_RULES = 8  # rules drawn one by one in the over-time chart; the rest are "other"
MAX_FINDINGS = 20  # per run section
MAX_MESSAGE = 600
_STEPS = (3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400, 365 * 86400)
_SEVERITIES = ("error", "warning", "info", "clean", "unreadable")
_SEV_COLORS = {"error": "#cf222e", "warning": "#bf8700", "info": "#0969da", "clean": "#2da44e", "unreadable": "#8c959f"}

# --- what a scan collects per run ----------------------------------------------------------------


def run_detail(a, feed) -> dict[str, Any]:
    """The JSON-safe details of one run that the page needs (kept in the scan state with the rows)."""
    span = a.extra.get("window") or a.extra.get("time_span") or {}
    tl = feed.timeline_of(a.container, a.run.index) if feed is not None else None
    rt = a.runtime or {}
    return {
        "start": span.get("start"), "end": span.get("end"),
        "points": (tl or {}).get("points", []), "hours": (tl or {}).get("hours", {}),
        "kv_usage_max": rt.get("kv_usage_max_pct"),
        "preemptions": (rt.get("preemptions") or 0) + (rt.get("stats_preemptions_total") or 0) + (rt.get("recompute_preemptions") or 0),
        "findings": [[f.rule, f.severity.label, f.name, (f.message or "")[:MAX_MESSAGE], f.line] for f in a.findings[:MAX_FINDINGS]],
    }


def valid_detail(d: Any) -> bool:
    """A detail read back from a (possibly hand-edited) state file has the shape `run_detail` writes."""
    if not isinstance(d, dict):
        return False
    if not all(isinstance(d.get(k), (str, type(None))) for k in ("start", "end")):
        return False
    pts, hours, fs = d.get("points"), d.get("hours"), d.get("findings")
    if not (isinstance(pts, list) and isinstance(hours, dict) and isinstance(fs, list)):
        return False
    num = (int, float, type(None))
    ok_pts = all(isinstance(p, list) and len(p) == 3 and isinstance(p[0], (int, float)) and isinstance(p[1], num)
                 and isinstance(p[2], int) for p in pts)
    ok_hours = all(isinstance(k, str) and k.lstrip("-").isdigit() and isinstance(v, list) and len(v) == 2
                   and isinstance(v[0], num) and isinstance(v[1], int) for k, v in hours.items())
    ok_fs = all(isinstance(f, list) and len(f) == 5 and all(isinstance(x, str) for x in f[:4]) and isinstance(f[4], (int, type(None)))
                for f in fs)
    return ok_pts and ok_hours and ok_fs and isinstance(d.get("kv_usage_max"), num) and isinstance(d.get("preemptions"), int)


# --- the page's data ------------------------------------------------------------------------------


def worst_of(r: dict) -> str:
    if r.get("error"):
        return "unreadable"
    for s in ("error", "warning", "info"):
        if (r.get(f"n_{s}") or 0) > 0:
            return s
    return "clean"


def _ts(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _label(ts: float, step: int) -> str:
    d = datetime.fromtimestamp(ts, timezone.utc)
    if step < 86400:
        return d.strftime("%Y-%m-%d %H:%M")
    if step < 30 * 86400:
        return d.strftime("%Y-%m-%d")
    return d.strftime("%Y-%m")


def _step_for(lo: float, hi: float) -> int:
    for s in _STEPS:
        if (hi - lo) / s < MAX_BUCKETS:
            return s
    return int(math.ceil((hi - lo) / MAX_BUCKETS))


def _fmt_int(v: Any) -> str:
    return "" if v is None else f"{int(v):,}"


def _run_id(i: int) -> str:
    return f"run-{i + 1}"


def build_data(rows: list[dict], rules_by_code: dict, detail_key: str = "_detail") -> dict[str, Any]:
    """Everything the page shows, computed from the rows (bounded)."""
    runs = [r for r in rows if not r.get("error")]
    sev = {k: sum(1 for r in rows if worst_of(r) == k) for k in _SEVERITIES}
    details = [r.get(detail_key) or {} for r in rows]
    starts = [_ts(d.get("start")) for d in details]

    # findings by rule over time (runs in which each rule fired, by the run's start)
    dated = [t for t, r in zip(starts, rows) if t is not None and not r.get("error")]
    counter: dict[str, int] = {}
    for r in runs:
        for code in dict.fromkeys(str(r.get("findings") or "").split(",")):
            if code:
                counter[code] = counter.get(code, 0) + 1
    top_rules = [c for c, _ in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))][:MAX_RULES]
    over_time: dict[str, Any] = {"step": None, "buckets": [], "rules": top_rules, "undated": 0}
    if dated:
        lo, hi = min(dated), max(dated)
        step = _step_for(lo, hi)
        base = math.floor(lo / step) * step
        buckets: dict[int, dict[str, int]] = {}
        for t, r in zip(starts, rows):
            if r.get("error"):
                continue
            codes = [c for c in dict.fromkeys(str(r.get("findings") or "").split(",")) if c]
            if t is None:
                over_time["undated"] += 1
                continue
            b = buckets.setdefault(int((t - base) // step), {})
            b["_runs"] = b.get("_runs", 0) + 1
            for c in codes:
                key = c if c in top_rules else "other"
                b[key] = b.get(key, 0) + 1
        over_time.update(step=step, buckets=[(base + k * step, v) for k, v in sorted(buckets.items())])

    # bytes per token by model × version × TP × dtype
    groups: dict[tuple, list[float]] = {}
    for r in runs:
        if r.get("bytes_per_token") is None:
            continue
        gkey = (r.get("model") or "?", r.get("vllm_version") or "?", r.get("tp"), r.get("kv_cache_dtype") or "?")
        groups.setdefault(gkey, []).append(float(r["bytes_per_token"]))
    bpt = [{"model": k[0], "version": k[1], "tp": k[2], "dtype": k[3], "runs": len(v), "min": min(v),
            "median": statistics.median(v), "max": max(v)} for k, v in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0, kv[0][3]))]
    why = _why_figures(bpt)

    # KV usage and preemptions over time: hourly bins of every run, re-binned to the page's step
    hours: dict[int, list[Any]] = {}
    for d in details:
        for hk, hv in (d.get("hours") or {}).items():
            bin_ = hours.setdefault(int(hk), [None, 0])
            if hv[0] is not None and (bin_[0] is None or hv[0] > bin_[0]):
                bin_[0] = hv[0]
            bin_[1] += hv[1]
    usage: dict[str, Any] = {"step": None, "buckets": []}
    if hours:
        lo, hi = min(hours) * 3600.0, max(hours) * 3600.0
        step = _step_for(lo, hi)
        base = math.floor(lo / step) * step
        ub: dict[int, list[Any]] = {}
        for hour, hv in hours.items():
            ubin = ub.setdefault(int((hour * 3600 - base) // step), [None, 0])
            if hv[0] is not None and (ubin[0] is None or hv[0] > ubin[0]):
                ubin[0] = hv[0]
            ubin[1] += hv[1]
        usage.update(step=step, buckets=[(base + n * step, uv[0], uv[1]) for n, uv in sorted(ub.items())])

    # the worst runs
    def badness(i: int) -> tuple:
        r, d = rows[i], details[i]
        return (-(r.get("n_error") or 0), -(r.get("n_warning") or 0), -int(bool(r.get("startup_failed"))),
                -(d.get("preemptions") or 0), -(d.get("kv_usage_max") or 0), -(r.get("n_info") or 0), r.get("source") or "", r.get("run") or 0)

    candidates = [i for i, r in enumerate(rows) if not r.get("error") and worst_of(r) != "clean"]
    worst = sorted(candidates, key=badness)
    return {"rows": rows, "details": details, "severity": sev, "over_time": over_time, "counter": counter,
            "rules_by_code": rules_by_code, "bpt": bpt, "why": why, "usage": usage, "worst": worst[:MAX_WORST],
            "worst_total": len(worst), "sections": worst[:MAX_SECTIONS], "starts": starts}


_ONE_BYTE = ("fp8", "int8")  # kv_cache_dtype values of 1 byte per element (fp8, fp8_e4m3, fp8_e5m2, fp8_ds_mla, ...)
_TWO_BYTES = ("bfloat16", "float16", "half", "bf16", "fp16")
_FACTOR_NAMES = {"tp": "TP", "dtype": "kv_cache_dtype", "version": "vLLM version"}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b)) if max(abs(a), abs(b)) > 0 else 0.0


def _too(diff: list[str], main: str) -> str:
    others = [_FACTOR_NAMES[k] for k in diff if k != main]
    return f" ({' and '.join(others)} {'differs' if len(others) == 1 else 'differ'} too)" if others else ""


def _pair_reason(a: dict, b: dict) -> tuple[int, str]:
    """(number of settings that differ, what the difference between two groups' figures is due to)."""
    diff = [k for k in ("tp", "dtype", "version") if a[k] != b[k]]
    if "tp" in diff:
        lo, hi = sorted((a, b), key=lambda g: g["tp"] or 0)
        if lo["tp"] and hi["tp"] and _rel(lo["median"] * lo["tp"], hi["median"] * hi["tp"]) < 0.01:
            return len(diff), (f"TP {lo['tp']} vs {hi['tp']}{_too(diff, 'tp')}: bytes per token is per "
                               "rank, and tensor parallelism splits the KV heads across the ranks (the figures are in the ratio of the TPs)")
    if "dtype" in diff:
        one = [g for g in (a, b) if str(g["dtype"]).lower().startswith(_ONE_BYTE)]
        two = [g for g in (a, b) if str(g["dtype"]).lower() in _TWO_BYTES]
        if len(one) == 1 and len(two) == 1 and _rel(one[0]["median"] * 2, two[0]["median"]) < 0.02:
            return len(diff), (f"kv_cache_dtype {two[0]['dtype']} vs {one[0]['dtype']}{_too(diff, 'dtype')}: "
                               "a 1-byte KV cache holds half the bytes per token of a 2-byte one")
    if len(diff) != 1:
        return len(diff) + 1, (" and ".join(_FACTOR_NAMES[k] for k in diff) + " differ at once between starts with different figures")
    k = diff[0]
    lo, hi = sorted((a, b), key=lambda g: str(g[k]) if k != "tp" else (g[k] or 0))
    if k == "tp":
        return 1, f"TP {lo['tp']} vs {hi['tp']}: the only setting that differs, but the figures are not in the ratio of the TPs"
    if k == "dtype":
        return 1, f"kv_cache_dtype {lo['dtype']} vs {hi['dtype']}: the only setting that differs between them"
    return 1, (f"vLLM {lo['version']} vs {hi['version']} with the same TP and kv_cache_dtype: the starts on these versions "
               "logged different figures (compare their logs; kvlogdiag estimate checks a figure against the model's architecture)")


def _why_figures(bpt: list[dict]) -> list[str]:
    """One sentence per model whose runs show more than one bytes-per-token figure, saying what differs.

    A difference is put down to a setting only when two groups differ in that setting alone; groups that
    differ in several settings at once are named as such, and a spread under 0.5 % as the log's rounding."""
    out = []
    by_model: dict[str, list[dict]] = {}
    for g in bpt:
        by_model.setdefault(g["model"], []).append(g)
    for model, gs in by_model.items():
        lo, hi = min(g["min"] for g in gs), max(g["max"] for g in gs)
        if hi <= 0 or round(hi) == round(lo):
            continue
        if _rel(lo, hi) < 0.005:
            parts = ["the figures differ by less than 0.5 %: GiB is logged with two decimals and the tokens in whole "
                     "blocks, so one configuration's figure moves a little from start to start"]
        else:
            reasons = [_pair_reason(a, b) for i, a in enumerate(gs) for b in gs[i + 1:] if _rel(a["median"], b["median"]) >= 0.005]
            fewest = min((n for n, _ in reasons), default=0)
            parts = list(dict.fromkeys(text for n, text in reasons if n == fewest))
            if any(_rel(g["min"], g["max"]) >= 0.005 for g in gs):
                parts.append("within one configuration the figures differ by 0.5 % or more: the starts differ in something the "
                             "grouping does not show (block size, hybrid or sliding-window layers, the model revision)")
        out.append(f"{model}: {lo:,.0f}–{hi:,.0f} B/token — " + "; ".join(parts) + ".")
    return out


# --- charts ---------------------------------------------------------------------------------------


def _fig(mpl, w: float, h: float):
    Figure, _ = mpl
    fig = Figure(figsize=(w, h))
    return fig, fig.add_subplot(111)


def _uri(fig, mpl) -> str:
    return _png_data_uri(fig, mpl[1])


def _chart_severity(data, mpl) -> str | None:
    items = [(k, v) for k, v in data["severity"].items() if v]
    if not items:
        return None
    fig, ax = _fig(mpl, 6.5, 2.4)
    ax.barh([k for k, _ in items][::-1], [v for _, v in items][::-1], color=[_SEV_COLORS[k] for k, _ in items][::-1])
    ax.set_xlabel("runs")
    ax.set_title("Runs by worst finding")
    return _uri(fig, mpl)


def _chart_over_time(data, mpl) -> str | None:
    ot = data["over_time"]
    if not ot["buckets"]:
        return None
    fig, ax = _fig(mpl, 9, 3.4)
    xs = list(range(len(ot["buckets"])))
    bottom = [0] * len(xs)
    keys = ot["rules"] + (["other"] if any("other" in b for _, b in ot["buckets"]) else [])
    palette = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974"]
    for i, k in enumerate(keys):
        vals = [b.get(k, 0) for _, b in ot["buckets"]]
        ax.bar(xs, vals, bottom=bottom, label=k, color=palette[i % len(palette)])
        bottom = [a + b for a, b in zip(bottom, vals)]
    ax.plot(xs, [b.get("_runs", 0) for _, b in ot["buckets"]], "k.", label="runs started")
    labels = [_label(t, ot["step"]) for t, _ in ot["buckets"]]
    every = max(1, len(xs) // 10)
    ax.set_xticks(xs[::every])
    ax.set_xticklabels(labels[::every], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("runs in which the rule fired")
    ax.set_title("Findings by rule over time (by run start, UTC)")
    if keys:
        ax.legend(fontsize=7, ncol=min(5, len(keys) + 1))
    return _uri(fig, mpl)


def _chart_bpt(data, mpl) -> str | None:
    groups = data["bpt"][:MAX_GROUPS]
    if not groups:
        return None
    fig, ax = _fig(mpl, 9, 0.8 + 0.3 * len(groups))
    names = [f"{g['model'][-40:]} · {g['version']} · TP{g['tp']} · {g['dtype']}" for g in groups]
    ys = list(range(len(groups)))[::-1]
    ax.barh(ys, [g["median"] for g in groups], color="#55A868")
    ax.errorbar([g["median"] for g in groups], ys,
                xerr=[[g["median"] - g["min"] for g in groups], [g["max"] - g["median"] for g in groups]], fmt="none", ecolor="k")
    ax.set_yticks(ys)
    ax.set_yticklabels(names, fontsize=7)
    ax.set_xlabel("bytes per token per rank (median, min–max)")
    return _uri(fig, mpl)


def _chart_usage(buckets: list, step: int | None, mpl, title: str, w: float = 9, h: float = 3.0, style: str = "-o") -> str | None:
    if not buckets:
        return None
    fig, ax = _fig(mpl, w, h)
    xs = [datetime.fromtimestamp(b[0], timezone.utc) for b in buckets]
    kv = [b[1] if b[1] is not None else float("nan") for b in buckets]
    ax.plot(xs, kv, style, color="#4C72B0", markersize=3, label="KV usage % (max)")
    ax.set_ylim(0, 105)
    ax.set_ylabel("KV cache usage %")
    ax2 = ax.twinx()
    ax2.bar(xs, [b[2] for b in buckets], width=(step or 3600) / 86400 * 0.8 if step else 0.02, color="#C44E52", alpha=0.5,
            label="preemptions")
    ax2.set_ylabel("preemptions")
    ax.set_title(title)
    fig.autofmt_xdate()
    return _uri(fig, mpl)


def render_charts(data: dict) -> dict[str, Any] | None:
    mpl = _matplotlib()
    if mpl is None:
        return None
    out: dict[str, Any] = {"severity": _chart_severity(data, mpl), "over_time": _chart_over_time(data, mpl),
                           "bpt": _chart_bpt(data, mpl),
                           "usage": _chart_usage(data["usage"]["buckets"], data["usage"]["step"], mpl,
                                                 "KV cache usage (highest) and preemptions (sum) over time, UTC",
                                                 style="o")}  # buckets of different runs: points, not a line across gaps
    runs = {}
    for i in data["sections"]:
        pts = data["details"][i].get("points") or []
        if pts:
            span = (pts[-1][0] - pts[0][0]) / max(1, len(pts))
            runs[i] = _chart_usage([(p[0], p[1], p[2]) for p in pts], int(span) or 10, mpl, "KV usage and preemptions", 7, 2.0)
    out["runs"] = runs
    return out


# --- the page -------------------------------------------------------------------------------------


def _img(uri: Any, alt: str) -> str:
    return f'<img class="chart" alt="{_e(alt)}" src="{uri}">' if uri else ""


def _src(r: dict) -> str:
    where = escape_controls(str(r.get("source") or ""))
    if r.get("container"):
        where += f" [{escape_controls(str(r['container']))}]"
    return where + (f" run {r.get('run')}/{r.get('runs')}" if (r.get("runs") or 1) > 1 else "")


def render_html(rows: list[dict], rules_by_code: dict, info: dict[str, Any], charts: bool = True,
                detail_key: str = "_detail") -> str:
    """The archive page. ``info``: files, unreadable, window (text or None), paths scanned."""
    data = build_data(rows, rules_by_code, detail_key)
    pics = render_charts(data) if charts else None
    nruns = sum(1 for r in rows if not r.get("error"))
    o: list[str] = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_e(_CSP)}">',
        '<meta name="referrer" content="no-referrer">', '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>kvlogdiag archive report</title>", f"<style>{_CSS}\na.run{{font-family:monospace}}</style>", "</head>", "<body>",
        "<h1>kvlogdiag archive report</h1>",
        f'<p class="meta">{info.get("files", 0):,} files, {nruns:,} server starts, {info.get("unreadable", 0):,} unreadable · '
        f'scanned: {_e(", ".join(escape_controls(p) for p in info.get("paths", [])))} · kvlogdiag {_e(__version__)} · times in UTC</p>',
    ]
    if info.get("window"):
        o.append(f'<p class="note">Time window: {_e(info["window"])}. Runtime figures (KV usage, preemptions) cover the window; '
                 "runs outside it are left out; each run keeps its start-up facts.</p>")
    o.append(f'<p class="note">Bounded page: at most {MAX_SECTIONS} run sections (the worst runs), {MAX_WORST} worst runs listed, '
             f"{MAX_BUCKETS} time buckets, {MAX_GROUPS} bytes-per-token groups, {MAX_RULES} rules drawn separately and "
             f"fewer than {2 * MAX_POINTS} points per run chart. The full table of runs is scan's --output.</p>")
    if pics is None and charts:
        o.append('<p class="note">Charts need matplotlib, which is not installed (pip install \'kvlogdiag[charts]\'): '
                 "every chart is shown as a table.</p>")

    # runs by severity
    o.append('<h2 id="severity">Runs by worst finding</h2>')
    o.append(_img(pics and pics["severity"], "runs by worst finding"))
    o.append(_html_table(["worst finding", "runs"], [[k, f"{v:,}"] for k, v in data["severity"].items() if v], "severity-table", {1}))

    # findings by rule over time
    ot = data["over_time"]
    o.append('<h2 id="rules-over-time">Findings by rule over time</h2>')
    top = sorted(data["counter"].items(), key=lambda kv: (-kv[1], kv[0]))[:30]
    o.append(_html_table(["rule", "name", "runs"], [[c, getattr(data["rules_by_code"].get(c), "name", ""), f"{n:,}"] for c, n in top],
                         "rules-table", {2}))
    if ot["buckets"]:
        o.append(_img(pics and pics["over_time"], "findings by rule over time"))
        if pics is None or not pics["over_time"]:
            keys = ot["rules"] + ["other"]
            o.append(_html_table(["from (UTC)", "runs"] + keys,
                                 [[_label(t, ot["step"]), f"{b.get('_runs', 0):,}"] + [f"{b.get(k, 0):,}" for k in keys] for t, b in ot["buckets"]],
                                 "rules-over-time-table", set(range(1, len(keys) + 2))))
    else:
        o.append('<p class="note">No run carries a time (no vLLM head, docker/CRI or journald timestamp): nothing to put on a time axis.</p>')
    if ot["undated"]:
        o.append(f'<p class="note">{ot["undated"]:,} runs have no time and are not on the time axis.</p>')

    # bytes per token
    o.append('<h2 id="bytes-per-token">Bytes per token by model, vLLM version, TP and KV dtype</h2>')
    o.append(_img(pics and pics["bpt"], "bytes per token by group"))
    bpt = data["bpt"]
    o.append(_html_table(["model", "vLLM", "TP", "kv_cache_dtype", "runs", "min", "median", "max"],
                         [[g["model"], g["version"], _fmt_int(g["tp"]), g["dtype"], f"{g['runs']:,}", f"{g['min']:,.0f}",
                           f"{g['median']:,.0f}", f"{g['max']:,.0f}"] for g in bpt[:MAX_GROUPS]], "bpt-table", {2, 4, 5, 6, 7}))
    if len(bpt) > MAX_GROUPS:
        o.append(f'<p class="note">{len(bpt) - MAX_GROUPS:,} more groups not shown.</p>')
    if data["why"]:
        o.append("<p>Why one model shows several figures:</p><ul>" + "".join(f"<li>{_e(w)}</li>" for w in data["why"]) + "</ul>")

    # KV usage and preemptions over time
    us = data["usage"]
    o.append('<h2 id="kv-usage">KV usage and preemptions over time</h2>')
    if us["buckets"]:
        o.append(_img(pics and pics["usage"], "KV usage and preemptions over time"))
        if pics is None or not pics["usage"]:
            o.append(_html_table(["from (UTC)", "highest KV usage %", "preemptions"],
                                 [[_label(t, us["step"]), "" if kv is None else f"{kv:.1f}", f"{p:,}"] for t, kv, p in us["buckets"]],
                                 "kv-usage-table", {1, 2}))
    else:
        o.append('<p class="note">No dated stats lines (vLLM\'s periodic "Avg prompt throughput ... KV cache usage" lines) in the archive.</p>')

    # worst runs
    o.append('<h2 id="worst-runs">Worst runs</h2>')
    linked = set(data["sections"])
    wrows = []
    for i in data["worst"]:
        r, d = rows[i], data["details"][i]
        link = f'<a class="run" href="#{_run_id(i)}">{_e(_src(r))}</a>' if i in linked else _e(_src(r))
        wrows.append([link, _e(d.get("start") or ""), _e(worst_of(r)), _e(f"{r.get('n_error') or 0}/{r.get('n_warning') or 0}/{r.get('n_info') or 0}"),
                      _e(r.get("findings") or ""), _e("" if d.get("kv_usage_max") is None else f"{d['kv_usage_max']:.1f}"),
                      _e(f"{d.get('preemptions') or 0:,}")])
    if wrows:
        o.append('<table id="worst-table"><thead><tr>' + "".join(f"<th>{h}</th>" for h in (
            "run", "start (UTC)", "worst", "errors/warnings/info", "rules", "max KV %", "preemptions")) + "</tr></thead><tbody>")
        o += ["<tr>" + "".join(f"<td>{c}</td>" for c in w) + "</tr>" for w in wrows]
        o.append("</tbody></table>")
        if data["worst_total"] > len(wrows):
            o.append(f'<p class="note">{data["worst_total"] - len(wrows):,} more runs with findings not listed.</p>')
    else:
        o.append("<p>No run has a finding.</p>")

    # per-run sections
    if data["sections"]:
        o.append('<h2 id="runs">Runs</h2>')
    for i in data["sections"]:
        r, d = rows[i], data["details"][i]
        o.append(f'<section id="{_run_id(i)}"><h3>{_e(_src(r))}</h3>')
        o.append(f'<p class="meta">{_e(d.get("start") or "no time")} – {_e(d.get("end") or "")} · lines {_fmt_int(r.get("run_first_line"))}–'
                 f'{_fmt_int(r.get("run_last_line"))}</p>')
        o.append(_html_table(["vLLM", "model", "TP/PP/DP", "max_model_len", "kv_cache_dtype", "gpu_memory_utilization", "bytes/token",
                              "KV tokens (smallest)"],
                             [[r.get("vllm_version") or "", r.get("model") or "", "/".join(_fmt_int(r.get(k)) or "—" for k in ("tp", "pp", "dp")),
                               _fmt_int(r.get("max_model_len")), r.get("kv_cache_dtype") or "",
                               "" if r.get("gpu_memory_utilization") is None else f"{r['gpu_memory_utilization']:g}",
                               "" if r.get("bytes_per_token") is None else f"{r['bytes_per_token']:,.0f}", _fmt_int(r.get("tokens_min"))]]))
        uri = pics["runs"].get(i) if pics else None
        if uri:
            o.append(_img(uri, "KV usage and preemptions of this run"))
        elif d.get("points"):
            pts = d["points"]
            pick = pts if len(pts) <= 24 else [pts[int(k * (len(pts) - 1) / 23)] for k in range(24)]
            o.append(_html_table(["time (UTC)", "KV usage %", "preemptions"],
                                 [[datetime.fromtimestamp(p[0], timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
                                   "" if p[1] is None else f"{p[1]:.1f}", f"{p[2]:,}"] for p in pick], None, {1, 2}))
        for f in d.get("findings") or []:
            o.append(f'<div class="finding sev-{_e(f[1])}"><p><b>{_e(f[0])}</b> [{_e(f[1])}] {_e(f[2])}'
                     + (f" (line {int(f[4]):,})" if f[4] else "") + f"</p><p>{_e(escape_controls(f[3]))}</p></div>")
        o.append('<p><a href="#worst-runs">back to the worst runs</a></p></section>')
    o.append(f'<p class="meta">Generated by kvlogdiag {_e(__version__)} (<code>kvlogdiag scan --html</code>).</p>')
    o += ["</body>", "</html>"]
    return "\n".join(x for x in o if x) + "\n"
