"""``kvlogdiag diff BEFORE AFTER``: what changed between two server starts, and what it did.

The tuning loop is: measure, change ONE setting, measure again. ``diff`` takes two analyses (two logs,
or two runs of one log written ``server.log@1 server.log@2``) from the one analysis path and compares:

* whether they are the same server at all — model, vLLM version, platform, device memory — said first;
* the settings: every launch argument (from the ``non-default args`` / ``Namespace(...)`` line or the
  launch command, the best the log has; `kvlogdiag.extract.commands` reads them) and every ``VLLM_*``
  environment variable the log shows. Values vLLM resolved from them (the engine config line) are
  listed apart and not counted: they follow from the arguments. When a side has no argument line,
  the resolved configuration (`kvlogdiag.derive.figures`) is compared instead. Arguments that only
  change how the API is served (host, port, ...) are listed and not counted. More than one counted
  change means the effect cannot be attributed to one of them;
* the KV figures side by side (bytes per token, pool tokens, KV memory, max concurrency);
* the stats lines as distributions over the active lines (running, waiting or throughput > 0):
  p50 / p90 / max of prompt and generation throughput, running, waiting, KV usage and prefix-cache hit
  rate (nearest-rank percentiles: the smallest value with at least p % of the lines at or below it),
  and the preemption totals, each with its change;
* the findings that appeared, disappeared or stayed.

`compare` builds one JSON-ready dictionary (docs/diff.schema.json); `render_text` and `render_markdown`
only format it.
"""

from __future__ import annotations

import math
import os
from typing import Any

from kvlogdiag import __version__
from kvlogdiag.errors import KvlogdiagError
from kvlogdiag.extract.facts import SERIES
from kvlogdiag.render.analysis import clean_json, md_escape, md_table
from kvlogdiag.result import Analysis, InputAnalysis

__all__ = ["DiffError", "SERIES_LABELS", "compare", "parse_side", "percentile", "render_markdown", "render_text",
           "select_run"]

# where the launch arguments are read, best first (extract/extractor.py sources)
ARG_SOURCES = ("non_default_args", "args_namespace", "user_command", "command_list", "command_flags", "python_call",
               "wrapper_config")
# sources that list every argument the user set, so a missing one is vLLM's default
_COMPLETE_SOURCES = {"non_default_args", "args_namespace"}
# arguments that change how the API is served, not the engine: listed, never counted
SERVING_ONLY = frozenset({"host", "port", "uds", "api_key", "ssl_keyfile", "ssl_certfile", "ssl_ca_certs",
                          "ssl_cert_reqs", "root_path", "allowed_origins", "allowed_methods", "allowed_headers",
                          "allow_credentials", "uvicorn_log_level", "disable_uvicorn_access_log", "middleware",
                          "served_model_name", "disable_log_requests", "enable_log_requests", "api_server_count",
                          "disable_fastapi_docs", "enable_request_id_headers", "log_config_file"})
# resolved-config keys that are no setting of their own
_NOT_SETTINGS = {"env", "conflicts", "model"}
SERIES_LABELS = {"prompt_throughput": "prompt throughput (tokens/s)",
                 "generation_throughput": "generation throughput (tokens/s)",
                 "running": "running requests", "waiting": "waiting requests",
                 "kv_usage_pct": "KV cache usage (%)", "prefix_cache_hit_pct": "prefix-cache hit rate (%)"}
DEFAULT = "(default)"
UNSET = "(unset)"


class DiffError(KvlogdiagError):
    """An input spec that names no run of its log."""


# --- inputs ---------------------------------------------------------------------------------------


def parse_side(spec: str) -> tuple[str, str]:
    """``server.log`` → (path, "last"); ``server.log@2`` → (path, "2"); ``@first``/``@last`` too.
    A path that exists as written is a path, '@' and all."""
    if os.path.exists(spec) or "@" not in spec:
        return spec, "last"
    path, _, which = spec.rpartition("@")
    if which in ("first", "last") or (which.isdigit() and int(which) >= 1):
        return path, which
    return spec, "last"


def select_run(result: InputAnalysis, which: str) -> Analysis:
    """The run ``which`` of an input (DiffError naming the input when it has no such run)."""
    try:
        return result.select(which)[0]
    except IndexError as exc:
        raise DiffError(str(exc)) from None


def side_label(a: Analysis) -> str:
    return f"{a.source}@{a.run.index + 1}" if a.run.count > 1 else a.source


# --- settings -------------------------------------------------------------------------------------


def launch_arguments(a: Analysis) -> tuple[str | None, dict[str, Any], dict[str, int]]:
    """(source, dest → value, dest → line) of the best argument line of a run (None: the log has none)."""
    for src in ARG_SOURCES:
        args = a.launch_args.get(src)
        if args:
            vals = {k: v.value for k, v in args.items() if k != "model_tag"}
            return src, vals, {k: v.line for k, v in args.items()}
    return None, {}, {}


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool) and not isinstance(y, bool):
        return math.isclose(float(x), float(y), rel_tol=1e-9, abs_tol=0.0)
    return x == y


def _json_value(v: Any) -> Any:
    return clean_json(v)


def _setting_changes(before: Analysis, after: Analysis) -> dict[str, Any]:
    src_b, args_b, lines_b = launch_arguments(before)
    src_a, args_a, lines_a = launch_arguments(after)
    changed: list[dict[str, Any]] = []
    serving: list[dict[str, Any]] = []
    if src_b and src_a:
        basis = "arguments"
        for key in sorted(set(args_b) | set(args_a)):
            vb = args_b.get(key, DEFAULT if src_b in _COMPLETE_SOURCES else UNSET)
            va = args_a.get(key, DEFAULT if src_a in _COMPLETE_SOURCES else UNSET)
            if key == "model" or _same(vb, va):
                continue
            row = {"name": key, "kind": "argument", "before": _json_value(vb), "after": _json_value(va),
                   "line_before": lines_b.get(key), "line_after": lines_a.get(key)}
            (serving if key in SERVING_ONLY else changed).append(row)
    else:
        basis = "resolved config"
        cb, ca = before.config, after.config
        for key in sorted((set(cb) | set(ca)) - _NOT_SETTINGS):
            vb, va = cb.get(key), ca.get(key)
            if vb is None or va is None or _same(vb, va):
                continue  # unknown on one side is no change the log shows
            changed.append({"name": key, "kind": "config", "before": _json_value(vb), "after": _json_value(va),
                            "line_before": (before.provenance.get(f"config.{key}") or {}).get("line"),
                            "line_after": (after.provenance.get(f"config.{key}") or {}).get("line")})
    env_b = before.config.get("env") or {}
    env_a = after.config.get("env") or {}
    for key in sorted(set(env_b) | set(env_a)):
        vb, va = env_b.get(key, UNSET), env_a.get(key, UNSET)
        if not _same(vb, va):
            changed.append({"name": key, "kind": "env", "before": vb, "after": va, "line_before": None, "line_after": None})
    counted = {c["name"] for c in changed}
    resolved: list[dict[str, Any]] = []
    eb = before.launch_args.get("engine_config", {})
    ea = after.launch_args.get("engine_config", {})
    if basis == "arguments":
        for key in sorted(set(eb) & set(ea)):
            if key in counted or key in args_b or key in args_a or key in ("model", "tokenizer"):
                continue
            if not _same(eb[key].value, ea[key].value):
                resolved.append({"name": key, "before": _json_value(eb[key].value), "after": _json_value(ea[key].value),
                                 "line_before": eb[key].line, "line_after": ea[key].line})
    n = len(changed)
    if n == 0:
        note = "No setting changed: differences in the figures below come from the load, the machine or chance."
    elif n == 1:
        note = (f"One setting changed ({changed[0]['name']}): under the same load, the differences below can be "
                "attributed to it (beside run-to-run noise: repeat the pair when they are small).")
    else:
        note = f"{n} settings changed at once: the effect cannot be attributed to one."
    return {"basis": basis, "source_before": src_b, "source_after": src_a, "count": n, "attributable": n == 1,
            "note": note, "changed": changed, "serving_only": serving, "resolved": resolved}


# --- identity -------------------------------------------------------------------------------------


def _total_memory(a: Analysis) -> float | None:
    vals = [v for v in a.memory.get("total_gib", []) if isinstance(v, (int, float))]
    return min(vals) if vals else None


def _different(before: Analysis, after: Analysis) -> list[dict[str, Any]]:
    out = []
    pairs: list[tuple[str, Any, Any, str]] = [("model", before.model, after.model, "different models"),
             ("vllm version", before.vllm.version, after.vllm.version, "different vLLM versions"),
             ("platform", before.vllm.platform, after.vllm.platform, "different hardware (platform)")]
    mb, ma = _total_memory(before), _total_memory(after)
    if mb is not None and ma is not None and not math.isclose(mb, ma, rel_tol=0.01):
        pairs.append(("device memory (GiB)", mb, ma, "different hardware (device memory)"))
    for what, vb, va, say in pairs:
        if vb is not None and va is not None and vb != va:
            out.append({"what": what, "before": vb, "after": va, "note": say})
    return out


# --- figures --------------------------------------------------------------------------------------


def _change(vb: Any, va: Any) -> dict[str, Any]:
    num = (int, float)
    if isinstance(vb, num) and isinstance(va, num) and not isinstance(vb, bool) and not isinstance(va, bool):
        delta = va - vb
        pct = (100.0 * delta / vb) if vb else None
        return {"before": vb, "after": va, "change": round(delta, 6), "change_pct": None if pct is None else round(pct, 2)}
    return {"before": vb, "after": va, "change": None, "change_pct": None}


def _max_concurrency(a: Analysis) -> tuple[float | None, int | None]:
    by_len = a.kv_cache.max_concurrency_by_length
    if not by_len:
        return None, None
    length = max(by_len)
    return by_len[length][0], length


def _kv(before: Analysis, after: Analysis) -> list[dict[str, Any]]:
    rows = []
    for figure, get in (("bytes_per_token", lambda a: a.kv_cache.bytes_per_token),
                        ("pool_tokens", lambda a: min(a.kv_cache.tokens) if a.kv_cache.tokens else None),
                        ("kv_memory_gib", lambda a: a.kv_cache.kv_memory_gib_min)):
        rows.append({"figure": figure, **_change(get(before), get(after))})
    cb, lb = _max_concurrency(before)
    ca, la = _max_concurrency(after)
    row = {"figure": "max_concurrency", **_change(cb, ca), "tokens_per_request_before": lb, "tokens_per_request_after": la}
    rows.append(row)
    return rows


def percentile(counts: dict[float, int], p: float) -> float | None:
    """Nearest-rank percentile of a value → count map (None when empty)."""
    n = sum(counts.values())
    if n == 0:
        return None
    rank = max(1, math.ceil(p / 100.0 * n))
    seen = 0
    for v in sorted(counts):
        seen += counts[v]
        if seen >= rank:
            return v
    return max(counts)


def _dist(counts: dict[float, int] | None) -> dict[str, Any]:
    counts = counts or {}
    return {"lines": sum(counts.values()), "p50": percentile(counts, 50), "p90": percentile(counts, 90),
            "max": max(counts) if counts else None}


def _runtime(before: Analysis, after: Analysis) -> dict[str, Any]:
    series = []
    for name in SERIES:
        db, da = _dist(before.stats_series.get(name)), _dist(after.stats_series.get(name))
        ch = {k: _change(db[k], da[k])["change"] for k in ("p50", "p90", "max")}
        series.append({"figure": name, "label": SERIES_LABELS[name], "before": db, "after": da, "change": ch})
    pre = {k: _change(before.runtime.get(k), after.runtime.get(k))
           for k in ("preemptions", "stats_preemptions_total", "recompute_preemptions")}
    return {"stats_lines": _change(before.runtime.get("stats_lines"), after.runtime.get("stats_lines")),
            "series": series, "preemptions": pre}


def _findings(before: Analysis, after: Analysis, min_severity: str) -> dict[str, Any]:
    fb = {f.rule: f for f in before.visible_findings(min_severity)}
    fa = {f.rule: f for f in after.visible_findings(min_severity)}

    def row(f, side: str) -> dict[str, Any]:
        return {"rule": f.rule, "name": f.name, "severity": f.severity.label, "line": f.line, "side": side,
                "message": f.message}

    return {"appeared": [row(fa[c], "after") for c in sorted(set(fa) - set(fb))],
            "disappeared": [row(fb[c], "before") for c in sorted(set(fb) - set(fa))],
            "remained": [{"rule": c, "name": fa[c].name, "severity_before": fb[c].severity.label,
                          "severity_after": fa[c].severity.label} for c in sorted(set(fa) & set(fb))]}


def _side(a: Analysis) -> dict[str, Any]:
    return {"source": a.source, "run": a.run.index + 1, "runs": a.run.count, "label": side_label(a),
            "model": a.model, "vllm_version": a.vllm.version, "platform": a.vllm.platform,
            "first_line": a.run.first_line, "last_line": a.run.last_line}


def compare(before: Analysis, after: Analysis, min_severity: str = "info") -> dict[str, Any]:
    """The diff of two runs as one JSON-ready dictionary (docs/diff.schema.json)."""
    different = _different(before, after)
    doc = {"tool": "kvlogdiag", "version": __version__, "kind": "diff",
           "before": _side(before), "after": _side(after),
           "different": different,
           "warning": ("; ".join(d["note"] for d in different) + ": these are two different servers, not one change")
           if different else None,
           "settings": _setting_changes(before, after),
           "kv_cache": _kv(before, after),
           "runtime": _runtime(before, after),
           "findings": _findings(before, after, min_severity)}
    return clean_json(doc)


# --- rendering ------------------------------------------------------------------------------------


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        v = round(v, 4)
        return f"{int(v):,}" if v.is_integer() else f"{v:,}"
    s = str(v)
    return s if len(s) <= 80 else s[:77] + "..."


def _fmt_change(c: dict[str, Any]) -> str:
    if c.get("change") is None:
        return "—" if c.get("before") == c.get("after") else "changed"
    d = c["change"]
    s = ("+" if d > 0 else "") + _fmt(d)
    if c.get("change_pct") is not None and d != 0:
        s += f" ({c['change_pct']:+.1f} %)"
    return s


def _fmt_delta(d: Any) -> str:
    if d is None:
        return "—"
    return ("+" if d > 0 else "") + _fmt(d)


def _setting_rows(s: dict[str, Any]) -> list[list[str]]:
    return [[c["name"] + (" (env)" if c["kind"] == "env" else ""), _fmt(c["before"]), _fmt(c["after"])] for c in s["changed"]]


def _kv_rows(doc: dict[str, Any]) -> list[list[str]]:
    labels = {"bytes_per_token": "bytes per token (per rank)", "pool_tokens": "KV cache size (tokens, smallest)",
              "kv_memory_gib": "KV memory (GiB, smallest)", "max_concurrency": "max concurrency"}
    rows = []
    for r in doc["kv_cache"]:
        label = labels[r["figure"]]
        if r["figure"] == "max_concurrency" and (r.get("tokens_per_request_before") or r.get("tokens_per_request_after")):
            lb, la = r.get("tokens_per_request_before"), r.get("tokens_per_request_after")
            label += f" @ {_fmt(lb)}" + ("" if lb == la else f" → {_fmt(la)}") + " tokens"
        rows.append([label, _fmt(r["before"]), _fmt(r["after"]), _fmt_change(r)])
    return rows


def _runtime_rows(doc: dict[str, Any]) -> list[list[str]]:
    rows = []
    for s in doc["runtime"]["series"]:
        b, a, ch = s["before"], s["after"], s["change"]
        if not b["lines"] and not a["lines"]:
            continue
        rows.append([s["label"], f"{_fmt(b['p50'])} / {_fmt(b['p90'])} / {_fmt(b['max'])}",
                     f"{_fmt(a['p50'])} / {_fmt(a['p90'])} / {_fmt(a['max'])}",
                     f"{_fmt_delta(ch['p50'])} / {_fmt_delta(ch['p90'])} / {_fmt_delta(ch['max'])}"])
    labels = {"stats_preemptions_total": "preemptions (stats lines, total)",
              "preemptions": "preemption warnings (V0, total)", "recompute_preemptions": "recompute preemptions (vLLM-Ascend)"}
    for key, label in labels.items():
        pre = doc["runtime"]["preemptions"][key]
        if key == "stats_preemptions_total" or pre["before"] or pre["after"]:
            rows.append([label, _fmt(pre["before"]), _fmt(pre["after"]), _fmt_change(pre)])
    return rows


def _lines_note(doc: dict[str, Any]) -> str:
    def active(side: str) -> int:
        return max((s[side]["lines"] for s in doc["runtime"]["series"]), default=0)
    sl = doc["runtime"]["stats_lines"]
    return (f"stats lines: {_fmt(sl['before'])} → {_fmt(sl['after'])} "
            f"({active('before')} → {active('after')} active: running, waiting or throughput > 0); p50 / p90 / max")


def _table(headers: list[str], rows: list[list[str]]) -> str:
    from tabulate import tabulate
    return tabulate(rows, headers=headers, disable_numparse=True)


def render_text(doc: dict[str, Any]) -> str:
    out = [f"== diff  {doc['before']['label']}  →  {doc['after']['label']}"]
    if doc["warning"]:
        out.append(f"NOTE: {doc['warning']}")
        out += [f"  {d['what']}: {_fmt(d['before'])} → {_fmt(d['after'])}" for d in doc["different"]]
    s = doc["settings"]
    out += ["", f"Settings ({s['basis']}): {s['note']}"]
    if s["changed"]:
        out.append(_table(["setting", "before", "after"], _setting_rows(s)))
    if s["serving_only"]:
        out.append("not counted (API serving only): " + ", ".join(f"{c['name']} {_fmt(c['before'])} → {_fmt(c['after'])}"
                                                                 for c in s["serving_only"]))
    if s["resolved"]:
        out.append("resolved by vLLM from the settings (not counted): "
                   + ", ".join(c["name"] for c in s["resolved"]))
    out += ["", "KV cache", _table(["figure", "before", "after", "change"], _kv_rows(doc))]
    out += ["", "Runtime — " + _lines_note(doc), _table(["figure", "before", "after", "change"], _runtime_rows(doc))]
    f = doc["findings"]
    out += ["", f"Findings: {len(f['appeared'])} appeared, {len(f['disappeared'])} disappeared, {len(f['remained'])} remained"]
    out += [f"  + {x['rule']} [{x['severity']}] {x['name']} (after, line {_fmt(x['line'])})" for x in f["appeared"]]
    out += [f"  - {x['rule']} [{x['severity']}] {x['name']} (before, line {_fmt(x['line'])})" for x in f["disappeared"]]
    out += [f"  = {x['rule']} {x['name']}" for x in f["remained"]]
    return "\n".join(out) + "\n"


def render_markdown(doc: dict[str, Any]) -> str:
    out = [f"### kvlogdiag diff: `{md_escape(doc['before']['label'])}` → `{md_escape(doc['after']['label'])}`", ""]
    if doc["warning"]:
        out += [f"> **{md_escape(doc['warning'])}**", ""]
        out += [md_table(["what", "before", "after"], [[d["what"], _fmt(d["before"]), _fmt(d["after"])] for d in doc["different"]]), ""]
    s = doc["settings"]
    out += [f"**Settings** ({md_escape(s['basis'])}): {md_escape(s['note'])}", ""]
    if s["changed"]:
        out += [md_table(["setting", "before", "after"], _setting_rows(s)), ""]
    if s["serving_only"]:
        out += ["Not counted (API serving only): " + md_escape(", ".join(c["name"] for c in s["serving_only"])), ""]
    if s["resolved"]:
        out += ["Resolved by vLLM from the settings (not counted): " + md_escape(", ".join(c["name"] for c in s["resolved"])), ""]
    out += ["**KV cache**", "", md_table(["figure", "before", "after", "change"], _kv_rows(doc)), ""]
    out += [f"**Runtime** ({md_escape(_lines_note(doc))})", "",
            md_table(["figure", "before", "after", "change"], _runtime_rows(doc)), ""]
    f = doc["findings"]
    rows = ([[x["rule"], x["name"], x["severity"], "appeared"] for x in f["appeared"]]
            + [[x["rule"], x["name"], x["severity"], "disappeared"] for x in f["disappeared"]]
            + [[x["rule"], x["name"], x["severity_after"], "remained"] for x in f["remained"]])
    out += ["**Findings**", ""]
    out += [md_table(["rule", "name", "severity", ""], rows) if rows else "No findings on either side.", ""]
    return "\n".join(out)
