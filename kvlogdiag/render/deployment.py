"""A P/D deployment as Markdown or one self-contained HTML page (``report`` / ``analyze --deployment``).

The input is the `Deployment` objects of `kvlogdiag.modes.deployment` — nothing is read again. They
are turned into one plain dictionary (`build_document`: each deployment's JSON plus the diagram and
the capacity bars), which ``report`` redacts as a whole before rendering, as for one log.

* The diagram: P nodes on the left, D nodes on the right (mixed / proxy / unknown below), each box
  its role, host and DP×TP(×EP) layout; a line joins every P and D node, labelled with the KV
  connector both load (MultiConnector children included; offload connectors are not transfer
  links), or drawn dashed as "no common connector". Markdown: a Mermaid ``flowchart`` (GitHub draws
  it) and the same links as a table; HTML: inline SVG.
* The capacity bars, per node and DP group (tokens): the KV pool (plus the CPU-offload buffer in
  tokens on P) against what the node must hold at ``max_num_seqs`` at the workload — on D every
  request's prompt + output so far (average and near the end), on P the prompts (its prefix working
  set). Without a workload only the pools are drawn, and the page says why.

Size: at most `MAX_BOXES` boxes per diagram column and `MAX_BARS` bar groups per deployment (the
rest is counted), findings are the deployment rules' (their number bounded by the nodes, not the
log), and no log text is included beyond the findings' messages — so the page's size does not grow
with the logs' length. No script, no network: the HTML carries a ``default-src 'none'`` CSP.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any, Sequence

from kvlogdiag import __version__
from kvlogdiag.deployment_result import Deployment
from kvlogdiag.modes.deployment import GIB, HEADERS, MOONCAKE, OFFLOAD, node_rows
from kvlogdiag.render.analysis import md_code_block, md_escape, md_table

MAX_BOXES = 12  # per diagram column
MAX_BARS = 24  # bar groups (nodes) per deployment
BAR_WIDTH = 40  # characters of a Markdown bar at the largest value

_ROLE_COLOURS = {"prefill": "#4C72B0", "decode": "#55A868", "mixed": "#8172B3", "proxy": "#937860", "unknown": "#8c959f"}


# --- the document -----------------------------------------------------------------------------


def transfer_connectors(connectors: Sequence[str]) -> list[str]:
    """The KV-transfer connectors of a node (offload connectors move KV to host memory, not to a peer)."""
    return [c for c in connectors if c not in OFFLOAD]


def _links(nodes: list[dict]) -> list[dict]:
    """One link per P x D node pair: the connector both load, or none."""
    prod = [n for n in nodes if n["role"] == "prefill"]
    cons = [n for n in nodes if n["role"] == "decode"]
    out = []
    for p in prod:
        for d in cons:
            common = [c for c in transfer_connectors(p["connectors"]) if c in transfer_connectors(d["connectors"])]
            mooncake = [c for c in common if c in MOONCAKE]
            out.append({"p": p["name"], "d": d["name"], "connector": (mooncake or common)[0] if common else None})
    return out


def _bars(dep: dict) -> list[dict]:
    """Per node: the bars of its DP group (label, tokens, kind), largest value first for the scale."""
    cap = dep["capacity"]
    per_node = cap.get("nodes") or {}
    out = []
    for n in dep["nodes"]:
        if n["role"] not in ("prefill", "decode") or n["pool_tokens_per_dp_group"] is None:
            continue
        c = per_node.get(n["name"]) or {}
        pool = n["pool_tokens_per_dp_group"]
        bars = [{"label": "KV pool", "tokens": pool, "kind": "pool"}]
        seqs = n["max_num_seqs"]
        offload = n["offload_per_rank_gib"]
        if offload and n["bytes_per_token"]:
            # the pinned buffer of a rank in tokens of that rank's KV: what the DP group can keep off-device
            bars.append({"label": "KV pool + CPU offload", "tokens": pool + math.floor(offload * GIB / n["bytes_per_token"]),
                         "kind": "offload"})
        if n["role"] == "decode":
            if c.get("live_tokens_avg") is not None:
                bars.append({"label": f"holds at max-num-seqs {seqs} (average)", "tokens": c["live_tokens_avg"], "kind": "need"})
                bars.append({"label": f"holds at max-num-seqs {seqs} (near the end)", "tokens": c["live_tokens_peak"],
                             "kind": "peak"})
        else:
            if c.get("prefill_tokens") is not None:
                bars.append({"label": f"prompts at max-num-seqs {seqs}", "tokens": c["prefill_tokens"], "kind": "need"})
        for b in bars:
            b["pct_of_pool"] = round(b["tokens"] * 100 / pool, 1) if pool else None
        out.append({"node": n["name"], "role": n["role"], "bars": bars})
    return out


def build_document(deps: Sequence[Deployment], min_severity: str = "info", source: str | None = None) -> dict:
    """The report on the deployments as plain data (redact this, then render it)."""
    out = []
    for d in deps:
        j = d.to_json(min_severity)
        j["table"] = {"headers": HEADERS, "rows": node_rows(d)}
        j["links"] = _links(j["nodes"])
        j["bars"] = _bars(j)
        out.append(j)
    return {"tool": "kvlogdiag", "version": __version__, "source": source or ", ".join(d.name for d in deps),
            "deployments": out, "redaction": None}


def _workload_text(cap: dict) -> str:
    wl, inf = cap.get("workload"), cap.get("workload_inference")
    if wl:
        text = f"Workload: average prompt {wl['avg_prompt_len']:,} + output {wl['avg_output_len']:,} tokens"
        if inf:
            return text + f", inferred from {inf['stats_lines']} stats lines of {', '.join(inf['nodes'])} " \
                          f"({inf['method']}; docs/deployment.md), not given."
        return text + " (given)."
    why = f" and none inferred from the stats lines: {inf['reason']}" if inf and inf.get("reason") else ""
    return ("No workload: --avg-prompt-len and --avg-output-len were not given" + why
            + ". The bars show the pools only.")


def _first_out(cap: dict) -> str | None:
    if not cap.get("first_out"):
        return None
    return (f"Runs out first: the {cap['first_out']} side, at {cap['first_out_concurrency']:,} concurrent requests per "
            "DP group.")


def _box_label(n: dict) -> str:
    host = f" @ {n['host']}" if n.get("host") else ""
    return f"{n['name']}{host} · {n['role']} · {n['layout']}"


def _columns(nodes: list[dict]) -> tuple[list[dict], list[dict], list[dict]]:
    return ([n for n in nodes if n["role"] == "prefill"], [n for n in nodes if n["role"] == "decode"],
            [n for n in nodes if n["role"] not in ("prefill", "decode")])


# --- Markdown ---------------------------------------------------------------------------------

_MERMAID_UNSAFE = re.compile(r"[^A-Za-z0-9 ._@×/:+\-·#()%,]")


def _mermaid_text(text: str) -> str:
    return _MERMAID_UNSAFE.sub("_", text)[:80]


def _mermaid(dep: dict) -> str:
    p, d, other = _columns(dep["nodes"])
    ids: dict[str, str] = {}
    lines = ["flowchart LR"]
    for title, col, key in (("P (prefill)", p, "P"), ("D (decode)", d, "D"), ("other", other, "O")):
        if not col:
            continue
        lines.append(f'  subgraph {key}["{title}"]')
        for n in col[:MAX_BOXES]:
            ids[n["name"]] = f"n{len(ids)}"
            lines.append(f'    {ids[n["name"]]}["{_mermaid_text(_box_label(n))}"]')
        if len(col) > MAX_BOXES:
            lines.append(f'    {key}more["+{len(col) - MAX_BOXES} more"]')
        lines.append("  end")
    for link in dep["links"]:
        a, b = ids.get(link["p"]), ids.get(link["d"])
        if a and b:
            lines.append(f'  {a} -- "{_mermaid_text(link["connector"])}" --> {b}' if link["connector"]
                         else f'  {a} -. "no common connector" .-> {b}')
    fence = "```"
    return f"{fence}mermaid\n" + "\n".join(lines) + f"\n{fence}"


def _md_bar(tokens: float, scale: float) -> str:
    eighths = round(tokens / scale * BAR_WIDTH * 8) if scale else 0
    full, part = divmod(max(0, eighths), 8)
    return "█" * full + (" ▏▎▍▌▋▊▉"[part] if part else "")


def _md_bars(dep: dict) -> list[str]:
    groups = dep["bars"]
    if not groups:
        return ["No node with a KV pool in its log: nothing to draw."]
    rows = []
    for g in groups[:MAX_BARS]:
        scale = max(b["tokens"] for b in g["bars"])
        for i, b in enumerate(g["bars"]):
            pct = f" ({b['pct_of_pool']:.1f} % of the pool)" if b["kind"] != "pool" else ""
            rows.append(f"{(g['node'] if i == 0 else ''):<14} {b['label']:<40} {_md_bar(b['tokens'], scale):<{BAR_WIDTH + 1}} "
                        f"{b['tokens']:>12,.0f}{pct}")
        rows.append("")
    if len(groups) > MAX_BARS:
        rows.append(f"(+{len(groups) - MAX_BARS} more nodes: see the table)")
    return [md_code_block(rows[:-1] if rows and rows[-1] == "" else rows)]


def render_markdown(deps_or_doc: Sequence[Deployment] | dict, min_severity: str = "info") -> str:
    """GitHub-flavoured Markdown: per deployment the diagram, the node table, capacity bars, hosts, findings."""
    doc = deps_or_doc if isinstance(deps_or_doc, dict) else build_document(deps_or_doc, min_severity)
    out: list[str] = []
    for dep in doc["deployments"]:
        out += [f"## kvlogdiag deployment: {md_escape(dep['name'])}", "",
                f"{len(dep['nodes'])} logs · grouped by {md_escape(dep['grouped_by'])} · kvlogdiag {md_escape(doc['version'])}"
                + (f" · redaction {md_escape(doc['redaction'])}" if doc.get("redaction") else ""), ""]
        out += ["### Nodes and KV links", "", _mermaid(dep), ""]
        if dep["links"]:
            out.append(md_table(["P node", "D node", "KV connector"],
                                [[x["p"], x["d"], x["connector"] or "no common connector"] for x in dep["links"]]))
            out.append("")
        out += [md_table(dep["table"]["headers"], dep["table"]["rows"]), ""]
        cap = dep["capacity"]
        out += ["### Capacity per DP group (tokens)", "", md_escape(_workload_text(cap)), ""]
        out += _md_bars(dep)
        if _first_out(cap):
            out += ["", md_escape(_first_out(cap))]
        out.append("")
        if dep["hosts"]:
            out += ["### Hosts", "", md_table(["host", "nodes", "ranks", "pinned offload GiB", "RAM GiB"], [
                [h, ", ".join(t["nodes"]), t["ranks"], (f"{t['pinned_gib']:.1f}" if t["pinned_gib"] else "none") + (" + unsized" if t["unsized"] else ""),
                 f"{t['ram_gib']:,.0f}" if t.get("ram_gib") else "not given"] for h, t in dep["hosts"].items()]), ""]
        fs = dep["findings"]
        out += [f"### Deployment findings ({len(fs)})", ""]
        if not fs:
            out += ["No deployment findings.", ""]
        for f in fs:
            out += [f"#### {md_escape(f['rule'])} {md_escape(f['name'])} ({md_escape(f['severity'])}; "
                    f"{md_escape(', '.join(f['nodes']))})", "", md_escape(f["message"]), ""]
            if f["evidence"]:
                out += ["Evidence: " + md_escape("; ".join(f"{c['node']} line {c['line'] if c['line'] is not None else '?'} "
                                                           f"({c['what']})" for c in f["evidence"])), ""]
            if f["links"]:
                out += ["See: " + md_escape(", ".join(f["links"])), ""]
            if f.get("fix"):
                out += [f"**Fix:** {md_escape(f['fix'])}", ""]
    out.append(f"<sub>Generated by kvlogdiag {md_escape(doc['version'])}.</sub>")
    return "\n".join(out) + "\n"


# --- HTML -------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#1f2328}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0}th,td{border:1px solid #d0d7de;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f6f8fa}.meta{color:#59636e}.note{color:#59636e;border-left:3px solid #d0d7de;padding-left:.6em}
.finding{border-left:4px solid #d0d7de;padding:.1em .8em;margin:.8em 0}
.sev-error{border-color:#cf222e}.sev-warning{border-color:#bf8700}.sev-info{border-color:#0969da}
svg{max-width:100%;height:auto;display:block;margin:.6em 0}svg text{font:12px sans-serif}
""".strip()

_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _svg_diagram(dep: dict) -> str:
    p, d, other = _columns(dep["nodes"])
    box_w, box_h, gap, col_x = 330, 44, 14, (10, 560)
    rows = max(min(len(p), MAX_BOXES) + (len(p) > MAX_BOXES), min(len(d), MAX_BOXES) + (len(d) > MAX_BOXES), 1)
    other_rows = min(len(other), MAX_BOXES) + (len(other) > MAX_BOXES)
    height = 30 + rows * (box_h + gap) + (other_rows * (box_h + gap) + 30 if other else 0)
    width = col_x[1] + box_w + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="P/D diagram of {_e(dep["name"])}" '
           f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
           f'<text x="{col_x[0]}" y="18" font-weight="bold">P (prefill)</text>',
           f'<text x="{col_x[1]}" y="18" font-weight="bold">D (decode)</text>']
    centre: dict[str, tuple[int, int, int]] = {}

    def boxes(col: list[dict], x: int, y0: int) -> None:
        for i, n in enumerate(col[:MAX_BOXES]):
            y = y0 + i * (box_h + gap)
            colour = _ROLE_COLOURS.get(n["role"], "#8c959f")
            out.append(f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="6" fill="#f6f8fa" stroke="{colour}" '
                       'stroke-width="2"/>')
            out.append(f'<text x="{x + 8}" y="{y + 17}" font-weight="bold">{_e(n["name"][:40])}'
                       f'{_e(" @ " + n["host"][:24]) if n.get("host") else ""}</text>')
            out.append(f'<text x="{x + 8}" y="{y + 35}">{_e(n["role"])} · {_e(n["layout"])} · '
                       f'{_e((n.get("vllm_version") or "?")[:16])}</text>')
            centre[n["name"]] = (x, y + box_h // 2, box_w)
        if len(col) > MAX_BOXES:
            y = y0 + MAX_BOXES * (box_h + gap)
            out.append(f'<text x="{x + 8}" y="{y + 20}">+{len(col) - MAX_BOXES} more (see the table)</text>')

    boxes(p, col_x[0], 30)
    boxes(d, col_x[1], 30)
    if other:
        y_other = 30 + rows * (box_h + gap) + 18
        out.append(f'<text x="{col_x[0]}" y="{y_other - 4}" font-weight="bold">other (mixed, proxy, unknown)</text>')
        boxes(other, col_x[0], y_other + 4)
    for k, link in enumerate(dep["links"]):
        a, b = centre.get(link["p"]), centre.get(link["d"])
        if not (a and b):
            continue
        x1, y1, x2, y2 = a[0] + a[2], a[1], b[0], b[1]
        if link["connector"]:
            out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#0969da" stroke-width="1.5"/>')
        else:
            out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#cf222e" stroke-width="1.5" '
                       'stroke-dasharray="5,4"/>')
        if k < MAX_BOXES * 2:  # labels of the first links only: many pairs would overprint each other
            # near the D end, where the lines of one P box have spread apart
            lx, ly = x1 + (x2 - x1) * 0.62, y1 + (y2 - y1) * 0.62 - 4
            out.append(f'<text x="{lx:.0f}" y="{ly:.0f}" text-anchor="middle" fill="#59636e">'
                       f'{_e(link["connector"] or "no common connector")}</text>')
    out.append("</svg>")
    return "\n".join(out)


_BAR_COLOURS = {"pool": "#55A868", "offload": "#8172B3", "need": "#4C72B0", "peak": "#DD8452"}


def _svg_bars(g: dict) -> str:
    scale = max(b["tokens"] for b in g["bars"]) or 1
    label_w, bar_w, row_h = 300, 520, 22
    height = row_h * len(g["bars"]) + 8
    width = label_w + bar_w + 200
    pool = next(b["tokens"] for b in g["bars"] if b["kind"] == "pool")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="KV capacity of {_e(g["node"])}" '
           f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    for i, b in enumerate(g["bars"]):
        y = 4 + i * row_h
        w = max(1, round(b["tokens"] / scale * bar_w))
        colour = "#cf222e" if b["kind"] in ("need", "peak") and b["tokens"] > pool else _BAR_COLOURS[b["kind"]]
        pct = f" ({b['pct_of_pool']:.1f} %)" if b["kind"] != "pool" else ""
        out += [f'<text x="0" y="{y + 14}">{_e(b["label"])}</text>',
                f'<rect x="{label_w}" y="{y}" width="{w}" height="{row_h - 6}" fill="{colour}"/>',
                f'<text x="{label_w + w + 6}" y="{y + 14}">{b["tokens"]:,.0f}{_e(pct)}</text>']
    x_pool = label_w + round(pool / scale * bar_w)
    out.append(f'<line x1="{x_pool}" y1="0" x2="{x_pool}" y2="{height}" stroke="#1f2328" stroke-dasharray="3,3"/>')
    out.append("</svg>")
    return "\n".join(out)


def _html_table(headers: list[str], rows: list[list[Any]]) -> str:
    return ("<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in headers) + "</tr></thead><tbody>"
            + "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows) + "</tbody></table>")


def render_html(deps_or_doc: Sequence[Deployment] | dict, min_severity: str = "info") -> str:
    """One self-contained HTML page (inline SVG and CSS, no script, no network)."""
    doc = deps_or_doc if isinstance(deps_or_doc, dict) else build_document(deps_or_doc, min_severity)
    red = doc.get("redaction")
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{_e(_CSP)}">', '<meta name="referrer" content="no-referrer">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>kvlogdiag deployment report: {_e(doc['source'])}</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
           f"<h1>kvlogdiag deployment report: {_e(doc['source'])}</h1>",
           f'<p class="meta">{len(doc["deployments"])} deployment(s) · kvlogdiag {_e(doc["version"])}'
           + (f" · redaction {_e(red)}" if red else "") + "</p>"]
    for k, dep in enumerate(doc["deployments"]):
        out += [f'<section id="deployment-{k + 1}">', f"<h2>{_e(dep['name'])}</h2>",
                f'<p class="meta">{len(dep["nodes"])} logs · grouped by {_e(dep["grouped_by"])}</p>',
                "<h3>Nodes and KV links</h3>", _svg_diagram(dep)]
        if dep["links"]:
            out.append(_html_table(["P node", "D node", "KV connector"],
                                   [[x["p"], x["d"], x["connector"] or "no common connector"] for x in dep["links"]]))
        out.append(_html_table(dep["table"]["headers"], dep["table"]["rows"]))
        cap = dep["capacity"]
        out += ["<h3>Capacity per DP group (tokens)</h3>", f'<p class="note">{_e(_workload_text(cap))}</p>']
        for g in dep["bars"][:MAX_BARS]:
            out += [f"<h4>{_e(g['node'])} ({_e(g['role'])})</h4>", _svg_bars(g)]
        if len(dep["bars"]) > MAX_BARS:
            out.append(f"<p>+{len(dep['bars']) - MAX_BARS} more nodes: see the table.</p>")
        if not dep["bars"]:
            out.append("<p>No node with a KV pool in its log: nothing to draw.</p>")
        if _first_out(cap):
            out.append(f"<p>{_e(_first_out(cap))}</p>")
        if dep["hosts"]:
            out += ["<h3>Hosts</h3>", _html_table(["host", "nodes", "ranks", "pinned offload GiB", "RAM GiB"], [
                [h, ", ".join(t["nodes"]), t["ranks"], (f"{t['pinned_gib']:.1f}" if t["pinned_gib"] else "none") + (" + unsized" if t["unsized"] else ""),
                 f"{t['ram_gib']:,.0f}" if t.get("ram_gib") else "not given"] for h, t in dep["hosts"].items()])]
        fs = dep["findings"]
        out.append(f"<h3>Deployment findings ({len(fs)})</h3>")
        if not fs:
            out.append("<p>No deployment findings.</p>")
        for f in fs:
            sev = f["severity"] if f["severity"] in ("error", "warning", "info") else "info"
            out += [f'<div class="finding sev-{sev}">',
                    f"<h4>{_e(f['rule'])} {_e(f['name'])} ({_e(f['severity'])}; {_e(', '.join(f['nodes']))})</h4>",
                    f"<p>{_e(f['message'])}</p>"]
            if f["evidence"]:
                out.append("<p>Evidence: " + _e("; ".join(f"{c['node']} line {c['line'] if c['line'] is not None else '?'} "
                                                          f"({c['what']})" for c in f["evidence"])) + "</p>")
            if f["links"]:
                out.append(f"<p>See: {_e(', '.join(f['links']))}</p>")
            if f.get("fix"):
                out.append(f"<p><strong>Fix:</strong> {_e(f['fix'])}</p>")
            out.append("</div>")
        out.append("</section>")
    out += [f'<p class="meta">Generated by kvlogdiag {_e(doc["version"])} (<code>kvlogdiag report --deployment '
            "--format html</code>).</p>", "</body>", "</html>"]
    return "\n".join(out) + "\n"


def make_report(deps: Sequence[Deployment], fmt: str = "markdown", redact: bool = True, min_severity: str = "info",
                source: str | None = None) -> str:
    """``report`` on deployments: the document, redacted as a whole unless ``redact`` is off, rendered."""
    doc = build_document(deps, min_severity, source)
    if redact:
        from kvlogdiag.render.redact import Redactor

        red = Redactor()
        doc = red.redact_obj(doc)
        doc["redaction"] = ("on: masked " + red.summary()) if red.summary() else "on: nothing to mask was found"
    else:
        doc["redaction"] = "off (--no-redact)"
    return render_html(doc) if fmt == "html" else render_markdown(doc)
