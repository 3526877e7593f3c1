"""``kvlogdiag estimate``: what the KV cache costs and what fits, from a log and/or numbers.

Inputs come from a log (``--log``: the `Analysis` of one server start, by default the current one —
the same run and figures as ``analyze``, with line numbers; nothing here reads facts or log lines),
from flags (which always win over the log), from the model (``--model-config`` config.json,
``--model`` or the model named in the log, looked up in the built-in catalogue) or from defaults;
every input figure records where it came from.  The arithmetic is :mod:`kvlogdiag.derive.architecture` (expected
bytes per token) and :mod:`kvlogdiag.derive.capacity` (pool, concurrency, utilization, offload, node
budget, live tokens); this module only resolves inputs, calls them and renders the result.

A figure whose inputs are missing is ``null`` (``—`` in the table) with a short reason in
``missing``; a bad number (zero, negative, out of range) exits 2 with a one-line error naming the
flag.  Method and worked examples: ``docs/capacity.md`` §8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from kvlogdiag import __version__
from kvlogdiag.derive import capacity as cap
from kvlogdiag.derive.architecture import (
    ExpectedKV,
    UnknownArchitecture,
    expected_kv,
    explain_mismatch,
    load_hf_config,
    lookup_model,
    parse_vllm_version,
)
from kvlogdiag.errors import KvlogdiagError
from kvlogdiag.input.reader import DEFAULT_MAX_BYTES
from kvlogdiag.pipeline import Analyzer
from kvlogdiag.result import Analysis
from kvlogdiag.rules.engine import RuleSet

__all__ = ["build_estimate", "estimate_document", "read_log", "LogData", "EstimateError", "render_table"]

GIB = cap.GIB_BYTES
#: measured vs expected further apart than this → list explain_mismatch's causes
TOLERANCE = 0.25
ROLES = ("prefill", "decode", "mixed")
_KV_ROLE_TO_ROLE = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "mixed"}
_OFFLOAD_CONNECTOR = "RecomputeCPUOffloadConnector"


# ---------------------------------------------------------------------------------------------
# Provenance
# ---------------------------------------------------------------------------------------------


@dataclass
class Figure:
    """One input value and where it came from: ``flag``, ``log``, ``model``, ``computed``, ``default``."""

    value: Any
    source: str
    detail: str = ""
    line: int | None = None

    def where(self) -> str:
        if self.source == "flag":
            return self.detail
        if self.source == "log":
            return f"log line {self.line}" + (f" ({self.detail})" if self.detail else "") if self.line else f"log ({self.detail or 'stated'})"
        if self.source == "computed":
            return f"computed: {self.detail}"
        if self.source == "default":
            return f"default ({self.detail})" if self.detail else "default"
        return f"{self.source}: {self.detail}" if self.detail else self.source

    def as_json(self) -> dict:
        return {"value": self.value, "source": self.source, "line": self.line, "detail": self.detail or None}


def _val(fig: Figure | None) -> Any:
    return None if fig is None else fig.value


# ---------------------------------------------------------------------------------------------
# Reading a log
# ---------------------------------------------------------------------------------------------


class LogData:
    """The figures of one server start of a log (its `Analysis`), each with the line it came from."""

    def __init__(self, analysis: Analysis, path: str):
        self.analysis = analysis
        self.path = path

    def _line(self, key: str) -> int | None:
        return (self.analysis.provenance.get(key) or {}).get("line")

    # -- configuration -----------------------------------------------------------------------

    def config(self, key: str, detail: str = "") -> Figure | None:
        value = self.analysis.config.get(key)
        if value is None:
            return None
        return Figure(value, "log", detail, self._line(f"config.{key}"))

    def version(self) -> Figure | None:
        v = self.analysis.vllm.version
        return Figure(v, "log", "", self._line("vllm.version")) if v else None

    def platform(self) -> Figure | None:
        p = self.analysis.vllm.platform
        return Figure(p, "log", "", self._line("vllm.platform")) if p else None

    def hma(self) -> Figure | None:
        disabled = self.analysis.config.get("disable_hybrid_kv_cache_manager")
        if disabled is None:
            return None
        line = self._line("config.disable_hybrid_kv_cache_manager")
        if line is None:  # decided by vLLM's own message, not a setting
            for name in ("hma_disabled_hybrid_model", "hma_auto_off", "hma_chunked_local",
                         "hma_explicit_unsupported", "hma_unify_failed", "kv_group_sizes"):
                ev = self.analysis.evidence.get(name)
                if ev is not None:
                    line = ev.line
                    break
        return Figure(not disabled, "log", "hybrid manager " + ("off" if disabled else "on"), line)

    def role(self) -> Figure | None:
        summary = self.analysis.kv_transfer or {}
        role = _KV_ROLE_TO_ROLE.get(summary.get("kv_role") or "")
        if role is None:
            return None
        return Figure(role, "log", f"kv_role {summary.get('kv_role')}", self._line("config.kv_transfer_config"))

    # -- KV figures --------------------------------------------------------------------------

    def available(self) -> Figure | None:
        """Z per rank: the smallest memory figure of the run (vLLM sizes by its tightest worker)."""
        kv = self.analysis.kv_cache
        if kv.ranks:
            p = min(kv.ranks, key=lambda x: x.available_gib)
            what = "smallest rank" if len(kv.ranks) > 1 else ""
            return Figure(p.available_gib, "log", " ".join(x for x in (what, p.rank or "") if x), p.memory_line)
        if kv.available_by_rank:
            v = min(kv.available_by_rank, key=lambda v: v.value)
            return Figure(v.value, "log", "Available KV cache memory", v.line)
        if kv.kv_budget:
            b = min(kv.kv_budget, key=lambda b: b["gib"])
            return Figure(b["gib"], "log", f"KV budget ({b['source']})", b["line"])
        return None

    def logged_tokens(self) -> Figure | None:
        ranks = self.analysis.kv_cache.ranks
        if not ranks:
            return None
        p = min(ranks, key=lambda x: x.tokens)
        return Figure(p.tokens, "log", "KV cache size, smallest rank" if len(ranks) > 1 else "KV cache size",
                      p.tokens_line)

    def measured(self) -> tuple[Figure | None, str | None]:
        kv = self.analysis.kv_cache
        bpt = kv.bytes_per_token
        if bpt is None:
            return None, kv.bytes_per_token_note or "the log has no KV memory figure paired with a KV size line"
        pairs = [p for p in kv.ranks if p.bytes_per_token is not None]
        if len(pairs) == 1:
            p = pairs[0]
            detail = (f"{p.available_gib} GiB (line {p.memory_line}) / {p.tokens:,} tokens "
                      f"(line {p.tokens_line})")
        else:
            p = min(pairs, key=lambda x: abs((x.bytes_per_token or 0.0) - bpt))
            agg = "median" if kv.ranks_disagree or len({x.bytes_per_token for x in pairs}) > 1 else "value"
            detail = (f"{agg} of {len(pairs)} rank pairings, e.g. {p.rank or 'rank'}: {p.available_gib} GiB "
                      f"(line {p.memory_line}) / {p.tokens:,} tokens (line {p.tokens_line})")
        return Figure(bpt, "log", detail, p.memory_line), kv.bytes_per_token_note

    def memory(self, key: str) -> Figure | None:
        values = self.analysis.memory_by_rank.get(key)
        if not values:
            return None
        v = max(values, key=lambda v: v.value)
        return Figure(v.value, "log", key, v.line)

    def insufficient_kv(self) -> Figure | None:
        ik = self.analysis.errors.get("insufficient_kv")
        if not ik:
            return None
        ev = self.analysis.evidence.get("insufficient_kv")
        return Figure(ik, "log", "vLLM's 'one request at max seq len' check", ev.line if ev else None)

    def offload(self) -> dict | None:
        """RecomputeCPUOffloadConnector settings: config keys and the connector's own line."""
        ktc = self.analysis.config.get("kv_transfer_config")
        found: dict | None = None

        def walk(node: Any) -> None:
            nonlocal found
            if found is not None or not isinstance(node, dict):
                return
            if node.get("kv_connector") == _OFFLOAD_CONNECTOR:
                extra = node.get("kv_connector_extra_config") or {}
                found = dict(extra) if isinstance(extra, dict) else {}
                return
            extra = node.get("kv_connector_extra_config")
            if isinstance(extra, dict):
                for child in extra.get("connectors") or []:
                    walk(child)

        walk(ktc)
        event = self.analysis.evidence.get("recompute_offload_connector")
        if found is None and event is None:
            return None
        out = {"cpu_bytes_to_use": (found or {}).get("cpu_bytes_to_use"),
               "cpu_bytes_to_use_per_rank": (found or {}).get("cpu_bytes_to_use_per_rank"),
               "config_line": self._line("config.kv_transfer_config"),
               "world_size": None, "world_size_line": None, "per_rank_gb": None}
        if event is not None:
            value = event.value if isinstance(event.value, dict) else {}
            out.update(world_size=value.get("world_size"), world_size_line=event.line,
                       per_rank_gb=value.get("per_rank_gb"))
        return out

    def run_note(self) -> str | None:
        """Which start the figures are from, when the log holds several."""
        r = self.analysis.run
        if r.count <= 1:
            return None
        return (f"the log holds {r.count} server starts: every log figure is from run {r.index + 1}"
                f"{' (the current one)' if r.current else ''}, lines {r.first_line:,}–{r.last_line:,} (--run)")


def read_log(path: str, run: str = "last", max_bytes: int = DEFAULT_MAX_BYTES) -> LogData:
    """The selected run (``last``, ``first`` or a 1-based number) of the log at ``path`` (``-``: stdin).

    Figures only, no rules. Raises `InputError` (unreadable) or `EstimateError` (no such run, ``all``)."""
    if run == "all":
        raise EstimateError("--run all: an estimate sizes one server start; use last, first or a run number")
    parts = Analyzer(rules=RuleSet()).analyze_source_split(path, max_bytes)  # no rules: the figures, not findings
    if len(parts) > 1:
        # one estimate sizes one server: never figures mixed from, or silently taken from one of, several
        raise EstimateError(f"{path} interleaves {len(parts)} containers ({', '.join(str(p.container) for p in parts)}): "
                            "an estimate sizes one server; split the log per container (e.g. docker compose logs NAME)")
    result = parts[0]
    try:
        return LogData(result.select(run)[0], path)
    except IndexError as exc:
        raise EstimateError(str(exc)) from None


class EstimateError(KvlogdiagError):
    """A usage error of ``estimate`` found after parsing (one line, exit 2)."""


# ---------------------------------------------------------------------------------------------
# Parameter types and validation (one-line errors, exit 2)
# ---------------------------------------------------------------------------------------------



# ---------------------------------------------------------------------------------------------
# The estimate
# ---------------------------------------------------------------------------------------------


class _Missing:
    """Collects the reason each figure could not be computed."""

    def __init__(self) -> None:
        self.reasons: dict[str, str] = {}

    def need(self, name: str, **inputs: tuple[Any, str]) -> bool:
        """True when every input is present; else record the first missing input's reason."""
        for _key, (value, reason) in inputs.items():
            if value is None:
                self.reasons.setdefault(name, reason)
                return False
        return True

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (ValueError, ZeroDivisionError) as exc:
            self.reasons.setdefault(name, str(exc))
            return None


R_Z = ("needs the KV memory per rank: --log, --available-gib, or --gpu-memory-gib + "
       "--gpu-memory-utilization + (--kv-fraction or --non-kv-gib)")
R_BPT = "needs bytes per token: a --log with a KV size line, --bytes-per-token, --model or --model-config"
R_L = "needs a workload length: --p99-len, or --prompt-len/--output-len"
R_MML = "needs --max-model-len (or a log that states it)"
R_N = "needs a target concurrency: --requests/--concurrency N"
R_TOTAL = "needs the device memory: --gpu-memory-gib, or a log with 'Free memory on device (…/T GiB)'"
R_NONKV = ("needs the non-KV memory per device: --non-kv-gib, --kv-fraction, or a log with its memory "
           "figures (budget, weights, activation, graph)")


def _pick(flag_value: Any, flag_name: str, log_fig: Figure | None) -> Figure | None:
    if flag_value is not None:
        return Figure(flag_value, "flag", flag_name)
    return log_fig


def build_estimate(p: dict[str, Any], log: LogData | None = None) -> dict[str, Any]:
    """The estimate as a JSON-ready dict.  ``p`` holds the command's parameters (flag values or None)."""
    notes: list[str] = []
    inputs: dict[str, Figure | None] = {}
    run_note = log.run_note() if log is not None else None
    if run_note:
        notes.append(run_note)

    def lf(method: str, *args) -> Figure | None:
        return getattr(log, method)(*args) if log is not None else None

    # -- parallel layout and serving config ----------------------------------------------------
    tp = _pick(p["tp"], "--tp", lf("config", "tensor_parallel_size")) or Figure(1, "default", "TP 1")
    pp = _pick(p["pp"], "--pp", lf("config", "pipeline_parallel_size")) or Figure(1, "default", "PP 1")
    dp = _pick(p["dp"], "--dp", lf("config", "data_parallel_size")) or Figure(1, "default", "DP 1")
    for name, fig in (("tp", tp), ("pp", pp), ("dp", dp)):
        inputs[name] = fig
    max_model_len = _pick(p["max_model_len"], "--max-model-len", lf("config", "max_model_len"))
    block_size = _pick(p["block_size"], "--block-size", lf("config", "block_size"))
    kv_dtype = _pick(p["kv_cache_dtype"], "--kv-cache-dtype", lf("config", "kv_cache_dtype")) \
        or Figure("auto", "default", "model dtype")
    batched = _pick(p["max_num_batched_tokens"], "--max-num-batched-tokens", lf("config", "max_num_batched_tokens"))
    hma = _pick(p["hma"], "--hma" if p["hma"] else "--no-hma", lf("hma"))
    version = _pick(p["vllm_version"], "--vllm-version", lf("version"))
    platform = _pick(p["platform"], "--platform", lf("platform"))
    inputs.update(max_model_len=max_model_len, block_size=block_size, kv_cache_dtype=kv_dtype,
                  max_num_batched_tokens=batched, hma_enabled=hma, vllm_version=version, platform=platform)
    world = tp.value * pp.value  # ranks of one DP group (vLLM's parallel_config.world_size)
    devices = Figure(p["devices"], "flag", "--devices") if p["devices"] is not None else \
        Figure(world * dp.value, "computed", f"TP {tp.value} × PP {pp.value} × DP {dp.value}")
    inputs["devices"] = devices

    # -- expected bytes per token (model) ------------------------------------------------------
    expected, exp_json = _expected(p, log, tp, pp, kv_dtype, hma, max_model_len, batched, block_size,
                                   version, platform, inputs)

    # -- measured bytes per token ----------------------------------------------------------------
    measured: Figure | None
    measured_note: str | None = None
    if p["bytes_per_token"] is not None:
        measured = Figure(p["bytes_per_token"], "flag", "--bytes-per-token")
        if log is not None and log.analysis.kv_cache.bytes_per_token is not None:
            notes.append("--bytes-per-token overrides the log's measured figure "
                         f"({log.analysis.kv_cache.bytes_per_token:,.1f} B/token)")
    elif log is not None:
        measured, measured_note = log.measured()
    else:
        measured, measured_note = None, "no --log and no --bytes-per-token"
    logged_tokens = lf("logged_tokens")
    meas_json = {
        "bytes_per_token": _val(measured),
        "source": measured.where() if measured else None,
        "origin": measured.source if measured else None,
        "line": measured.line if measured else None,
        "kind": (log.analysis.kv_cache.bytes_per_token_kind if log is not None and measured
                 and measured.source == "log" else None),
        "logged_tokens": _val(logged_tokens),
        "logged_tokens_line": logged_tokens.line if logged_tokens else None,
        "note": measured_note,
    }

    # -- comparison ------------------------------------------------------------------------------
    comparison = _compare(measured, expected)

    # -- memory: device total, utilization, non-KV, Z -----------------------------------------
    total = _pick(p["gpu_memory_gib"], "--gpu-memory-gib", lf("memory", "total_gib"))
    util_log = lf("config", "gpu_memory_utilization")
    util = _pick(p["gpu_memory_utilization"], "--gpu-memory-utilization", util_log)
    kv_fraction = Figure(p["kv_fraction"], "flag", "--kv-fraction") if p["kv_fraction"] is not None else None
    z_log = lf("available")
    non_kv = _non_kv(p, log, total, util, util_log, kv_fraction, z_log, version)
    z = _available(p, total, util, util_log, kv_fraction, non_kv, z_log, notes)
    inputs.update(gpu_memory_gib=total, gpu_memory_utilization=util, kv_fraction=kv_fraction,
                  non_kv_gib=non_kv, available_gib_per_rank=z)

    # -- workload --------------------------------------------------------------------------------
    prompt = Figure(p["prompt_len"], "flag", "--prompt-len") if p["prompt_len"] is not None else None
    output = Figure(p["output_len"], "flag", "--output-len") if p["output_len"] is not None else None
    if p["p99_len"] is not None:
        length = Figure(p["p99_len"], "flag", "--p99-len")
    elif prompt is not None or output is not None:
        length = Figure((p["prompt_len"] or 0) + (p["output_len"] or 0), "computed",
                        f"prompt {p['prompt_len'] or 0:,} + output {p['output_len'] or 0:,}")
    else:
        length = None
    requests = Figure(p["requests"], "flag", "--requests") if p["requests"] is not None else None
    role = _pick(p["role"], "--role", lf("role"))
    inputs.update(workload_len=length, prompt_len=prompt, output_len=output, requests=requests, role=role)

    # -- capacity basis ------------------------------------------------------------------------
    basis = _basis(p["basis"], measured, expected, comparison)

    capacity = _capacity(p, basis, z, dp, tp, pp, devices, max_model_len, block_size, length, requests,
                         total, util, kv_fraction, non_kv, prompt, output, role, logged_tokens, log,
                         world, notes)

    return {
        "tool": "kvlogdiag",
        "command": "estimate",
        "version": __version__,
        "source": log.path if log is not None else None,
        "run": log.analysis.run.to_json() if log is not None else None,
        "inputs": {k: (v.as_json() if v is not None else None) for k, v in inputs.items()},
        "expected": exp_json,
        "measured": meas_json,
        "comparison": comparison,
        "capacity": capacity,
        "notes": notes,
    }


def _expected(p, log, tp, pp, kv_dtype, hma, max_model_len, batched, block_size, version, platform,
              inputs) -> tuple[ExpectedKV | None, dict]:
    arch = None
    model_fig: Figure | None = None
    reason = None
    if p["model_config"]:
        try:
            arch = load_hf_config(p["model_config"], name=p["model"])
        except (OSError, ValueError) as exc:  # UnknownArchitecture and JSONDecodeError are ValueErrors
            raise EstimateError(f"--model-config: {_one_line(exc)}") from None
        model_fig = Figure(arch.name, "config.json", p["model_config"])
    else:
        name = _pick(p["model"], "--model", log.config("model") if log is not None else None)
        if name is None:
            reason = "no model: pass --model NAME (built-in catalogue) or --model-config PATH (local config.json)"
        else:
            model_fig = name
            arch = lookup_model(name.value)
            if arch is None:
                reason = (f"model {name.value!r} ({name.where()}) is not in the built-in catalogue: "
                          "pass --model-config PATH (its config.json)")
    inputs["model"] = model_fig
    out: dict[str, Any] = {
        "model": _val(model_fig), "model_source": model_fig.where() if model_fig else None,
        "architecture": arch.name if arch else None,
        "bytes_per_token": None, "fixed_bytes_per_request": None, "hma_off_bytes_per_token": None,
        "log_figure": None, "kv_cache_dtype": None, "block_size": None, "hma_enabled": None,
        "verified": None, "assumptions": [], "reason": reason,
    }
    if arch is None:
        return None, out
    for axis, fig in (("TP", tp), ("PP", pp)):
        if fig.source == "default":
            out["assumptions"].append(f"{axis} not given: 1 assumed")
    try:
        exp = expected_kv(arch, tp=tp.value, pp=pp.value, kv_cache_dtype=kv_dtype.value,
                          hma_enabled=_val(hma), max_model_len=_val(max_model_len),
                          max_num_batched_tokens=_val(batched), block_size=_val(block_size),
                          vllm_version=_val(version), platform=_val(platform) or "cuda")
    except (ValueError, UnknownArchitecture) as exc:
        out["reason"] = f"cannot size {arch.name}: {_one_line(exc)}"
        return None, out
    if platform is None:
        out["assumptions"].append("platform unknown: CUDA assumed (pass --platform npu for vLLM-Ascend)")
    out.update(bytes_per_token=exp.bytes_per_token, fixed_bytes_per_request=exp.fixed_bytes_per_request,
               hma_off_bytes_per_token=exp.hma_off_bytes_per_token, log_figure=exp.log_figure,
               kv_cache_dtype=exp.kv_cache_dtype, block_size=exp.block_size, hma_enabled=exp.hma_enabled,
               verified=exp.verified)
    out["assumptions"].extend(exp.assumptions)
    return exp, out


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _compare(measured: Figure | None, expected: ExpectedKV | None) -> dict:
    out: dict[str, Any] = {"reference": None, "expected": None, "measured": _val(measured), "ratio": None,
                           "within_tolerance": None, "explanation": None, "causes": [], "reason": None}
    if measured is None or expected is None:
        out["reason"] = "needs both a measured and an expected figure"
        return out
    ref_name = "log_figure" if expected.log_figure else "bytes_per_token"
    ref = expected.log_figure if expected.log_figure else expected.bytes_per_token
    if not ref or ref <= 0 or measured.value <= 0:
        out["reason"] = "expected or measured bytes per token is not positive"
        return out
    ratio = measured.value / ref
    text = explain_mismatch(measured.value, expected, tolerance=TOLERANCE)
    within = abs(ratio - 1.0) <= TOLERANCE
    out.update(reference=ref_name, expected=ref, ratio=ratio, within_tolerance=within,
               explanation=text[0] if within else None, causes=[] if within else text)
    return out


def _non_kv(p, log, total, util, util_log, kv_fraction, z_log, version) -> Figure | None:
    """Non-KV memory per device (weights + activation + non-torch + graph), GiB."""
    if p["non_kv_gib"] is not None:
        return Figure(p["non_kv_gib"], "flag", "--non-kv-gib")
    if kv_fraction is not None and total is not None and util is not None:
        v = total.value * util.value * (1 - kv_fraction.value)
        return Figure(v, "computed", f"{total.value:g} × {util.value:g} × (1 − {kv_fraction.value:g})")
    if p["available_gib"] is not None and total is not None and util is not None:
        v = total.value * util.value - p["available_gib"]
        return Figure(v, "computed", f"{total.value:g} GiB × {util.value:g} − KV {p['available_gib']:g} GiB")
    if log is None or z_log is None or z_log.value <= 0:
        return _non_kv_components(log, version)
    budget = log.memory("budget_gib")
    if budget is not None:
        return Figure(budget.value - z_log.value, "computed",
                      f"budget {budget.value:g} GiB (log line {budget.line}) − KV {z_log.value:g} GiB "
                      f"(log line {z_log.line})", budget.line)
    nk = log.memory("non_kv_gib")
    if nk is not None:
        return Figure(nk.value, "log", "Total non KV cache memory", nk.line)
    total_log = log.memory("total_gib")
    if total_log is not None and util_log is not None:
        v = total_log.value * util_log.value - z_log.value
        return Figure(v, "computed", f"{total_log.value:g} GiB (log line {total_log.line}) × "
                      f"{util_log.value:g} (log line {util_log.line}) − KV {z_log.value:g} GiB", total_log.line)
    return _non_kv_components(log, version)


def _non_kv_components(log, version) -> Figure | None:
    if log is None:
        return None
    weights = log.memory("weights_gib")
    if weights is None:
        return None
    parts = [weights] + [f for f in (log.memory("activation_peak_gib"), log.memory("non_torch_gib")) if f]
    v = parse_vllm_version(_val(version))
    graph = log.memory("cuda_graph_gib")
    if graph is not None and v is not None and v >= (0, 21, 0):  # graph memory profiled by default ≥0.21
        parts.append(graph)
    total = sum(f.value for f in parts)
    detail = " + ".join(f"{f.detail.replace('_gib', '')} {f.value:g} (line {f.line})" for f in parts)
    return Figure(total, "computed", f"{detail} — a lower bound (not every part is logged)", weights.line)


def _available(p, total, util, util_log, kv_fraction, non_kv, z_log, notes) -> Figure | None:
    """Z, the KV memory per rank in GiB: flag > node budget > what-if utilization > log."""
    if p["available_gib"] is not None:
        if z_log is not None:
            notes.append(f"--available-gib overrides the log's {z_log.value:g} GiB (log line {z_log.line})")
        return Figure(p["available_gib"], "flag", "--available-gib")
    if kv_fraction is not None and total is not None and util is not None:
        v = total.value * util.value * kv_fraction.value
        return Figure(v, "computed", f"{total.value:g} GiB × {util.value:g} × {kv_fraction.value:g}")
    what_if = util is not None and util.source == "flag" and (
        z_log is None or util_log is None or not math.isclose(util.value, util_log.value))
    if what_if and total is not None and non_kv is not None:
        v = total.value * util.value - non_kv.value
        if z_log is not None:
            notes.append(f"what-if: --gpu-memory-utilization {util.value:g} instead of the log's "
                         f"{_val(util_log)} → KV {v:.2f} GiB per rank instead of {z_log.value:g}")
        return Figure(v, "computed", f"{total.value:g} GiB × {util.value:g} − non-KV {non_kv.value:.2f} GiB")
    return z_log


def _basis(choice: str, measured: Figure | None, expected: ExpectedKV | None, comparison: dict) -> dict:
    """Which bytes per token the capacity figures use.

    auto: the expected (bytes per token, fixed per request) pair when the log confirms it — within
    3 % (rounding of Z explains the rest), or within 25 % for a hybrid model, whose logged figure is
    not a plain per-token cost — or when nothing was measured; the measured figure (what the engine
    really used) when there is no model or the two disagree.
    """
    exp_ok = expected is not None and expected.bytes_per_token > 0
    hybrid = expected is not None and exp_ok and expected.fixed_bytes_per_request > 0
    ratio = comparison.get("ratio")
    use = None
    if choice == "measured":
        use = "measured" if measured is not None else None
        reason = "--basis measured"
    elif choice == "expected":
        use = "expected" if exp_ok else None
        reason = "--basis expected"
    elif exp_ok and measured is None:
        use, reason = "expected", "nothing measured: the architecture's figure"
    elif exp_ok and ratio is not None and abs(ratio - 1) < 0.03:
        use, reason = "expected", (f"the log confirms the architecture's figure (ratio {ratio:.4f}); exact "
                                   "figures avoid the rounding of Z")
    elif hybrid and ratio is not None and abs(ratio - 1) <= TOLERANCE:
        use, reason = "expected", (f"hybrid model: per-token cost + fixed per-request reservation from the "
                                   f"architecture, which the log confirms (ratio {ratio:.3f})")
    elif measured is not None:
        use = "measured"
        reason = ("given by --bytes-per-token" if measured.source == "flag"
                  else f"what the engine used (log line {measured.line})")
        if exp_ok:
            reason += "; it disagrees with the architecture's figure, so that is not used"
    else:
        reason = R_BPT
    if use == "measured" and measured is not None:
        return {"basis": "measured", "bytes_per_token": measured.value, "fixed_bytes_per_request": 0.0,
                "reason": reason}
    if use == "expected" and expected is not None:
        return {"basis": "expected", "bytes_per_token": expected.bytes_per_token,
                "fixed_bytes_per_request": expected.fixed_bytes_per_request, "reason": reason,
                "fixed_at": _fixed_at(expected)}
    return {"basis": None, "bytes_per_token": None, "fixed_bytes_per_request": None,
            "reason": reason if choice == "auto" else f"{reason}: that figure is not available"}


def _fixed_at(expected: ExpectedKV) -> Callable[[int], float]:
    """Per-request fixed bytes for a request of ``L`` tokens: each sliding-window layer reserves
    min(window - 1 + in-flight tokens, L) tokens (vLLM SlidingWindowSpec.max_memory_usage_bytes),
    so a request shorter than window + chunk reserves less than the max-model-len figure."""
    block = expected.block_size

    def fixed(tokens: int) -> float:
        padded = -(-int(tokens) // block) * block
        return max(0.0, expected.request_bytes(int(tokens)) - expected.bytes_per_token * padded)
    return fixed


def _capacity(p, basis, z, dp, tp, pp, devices, max_model_len, block_size, length, requests, total, util,
              kv_fraction, non_kv, prompt, output, role, logged_tokens, log, world, notes) -> dict:
    miss = _Missing()
    bpt = basis["bytes_per_token"]
    fixed = basis["fixed_bytes_per_request"] or 0.0
    fixed_L = basis["fixed_at"](_val(length)) if basis.get("fixed_at") and _val(length) else fixed
    bpt_reason = basis["reason"] if bpt is None else ""
    Z = _val(z)
    L = _val(length)
    mml = _val(max_model_len)
    N = _val(requests)
    bs = _val(block_size)
    out: dict[str, Any] = {
        "basis": basis["basis"], "bytes_per_token": bpt, "fixed_bytes_per_request": basis["fixed_bytes_per_request"],
        "basis_reason": basis["reason"],
        "available_gib_per_rank": Z, "dp_size": dp.value, "block_size": bs,
        "kv_gib_per_dp_group": None, "kv_gib_total": None,
        "pool_tokens_per_dp_group": None, "pool_tokens_total": None,
        "logged_tokens_per_dp_group": _val(logged_tokens),
        "workload_len": L, "requests_fit_at_workload_len": None,
        "max_model_len": mml, "requests_fit_at_max_model_len": None,
        "target_requests": N, "max_model_len_for_target_requests": None,
        "kv_cache_memory_bytes_for_target": None, "gpu_memory_utilization_for_target": None,
        "target_fits": None, "gpu_memory_gib": _val(total), "non_kv_gib": _val(non_kv),
        "request_kv": None, "offload": None, "node_budget": None, "live": None,
    }
    if Z is not None and Z <= 0:
        miss.reasons["available_gib_per_rank"] = f"KV memory per rank is {Z:g} GiB: nothing fits"
    z_ok = Z is not None and Z > 0
    z_in = (Z if z_ok else None, miss.reasons.get("available_gib_per_rank", R_Z))
    b_in = (bpt, bpt_reason or R_BPT)

    if z_ok:
        out["kv_gib_per_dp_group"] = Z * world
        out["kv_gib_total"] = Z * world * dp.value
    else:
        miss.need("kv_gib_per_dp_group", z=z_in)
    if miss.need("pool_tokens_per_dp_group", z=z_in, b=b_in):
        out["pool_tokens_per_dp_group"] = miss.run("pool_tokens_per_dp_group",
                                                   lambda: cap.pool_tokens_per_dp_group(Z, bpt))
        out["pool_tokens_total"] = miss.run("pool_tokens_total", lambda: cap.pool_tokens_total(Z, bpt, dp.value))
    else:
        miss.need("pool_tokens_total", z=z_in, b=b_in)
    if miss.need("requests_fit_at_workload_len", z=z_in, b=b_in, l=(L, R_L)):
        out["requests_fit_at_workload_len"] = miss.run(
            "requests_fit_at_workload_len", lambda: cap.requests_fit_at_length(Z, bpt, L, fixed_L, bs))
    if miss.need("requests_fit_at_max_model_len", z=z_in, b=b_in, m=(mml, R_MML)):
        out["requests_fit_at_max_model_len"] = miss.run(
            "requests_fit_at_max_model_len", lambda: cap.requests_fit_at_max_model_len(Z, bpt, mml, fixed, bs))
    if miss.need("max_model_len_for_target_requests", n=(N, R_N), z=z_in, b=b_in):
        out["max_model_len_for_target_requests"] = miss.run(
            "max_model_len_for_target_requests", lambda: cap.max_model_len_for_requests(Z, bpt, N, fixed, bs))
    if miss.need("kv_cache_memory_bytes_for_target", n=(N, R_N), l=(L, R_L), b=b_in):
        out["kv_cache_memory_bytes_for_target"] = miss.run(
            "kv_cache_memory_bytes_for_target", lambda: cap.kv_cache_memory_bytes_needed(N, L, bpt, fixed_L, bs))
    if miss.need("gpu_memory_utilization_for_target", n=(N, R_N), l=(L, R_L), b=b_in,
                 t=(_val(total), R_TOTAL), k=(_val(non_kv), R_NONKV)):
        u = miss.run("gpu_memory_utilization_for_target", lambda: cap.gpu_memory_utilization_needed(
            N, L, bpt, total.value, max(0.0, non_kv.value), fixed_L, bs))
        out["gpu_memory_utilization_for_target"] = u
        out["target_fits"] = None if u is None else u <= 1.0

    # one request: P99 vs the worst-case reservation at max_model_len
    logged_need = log.insufficient_kv() if log is not None else None
    if miss.need("request_kv", l=(L, R_L), m=(mml, R_MML), b=b_in):
        need = miss.run("request_kv", lambda: cap.request_kv_need(bpt, L, mml, fixed, bs))
        if need is not None:
            p99_bytes = cap.request_bytes(L, bpt, fixed_L, bs)
            out["request_kv"] = {
                "p99_len": L, "p99_bytes": p99_bytes, "p99_gib": p99_bytes / cap.GIB_BYTES,
                "max_model_len": mml, "max_model_len_bytes": need.max_model_len_bytes,
                "max_model_len_gib": need.max_model_len_gib,
                "worst_case_over_p99": need.max_model_len_bytes / p99_bytes if p99_bytes > 0 else need.worst_case_over_p99,
                "logged_needed_gib": logged_need.value.get("needed_gib") if logged_need else None,
                "logged_line": logged_need.line if logged_need else None,
            }

    out["offload"] = _offload(p, log, tp, pp, devices, bpt, miss)
    out["node_budget"] = _node_budget(p, devices, total, util, kv_fraction, dp, miss)
    out["live"] = _live(requests, prompt, output, role, bpt, fixed, Z if z_ok else None, dp, miss)
    out["missing"] = miss.reasons
    return out


def _offload(p, log, tp, pp, devices, bpt, miss: _Missing) -> dict | None:
    flags = p["cpu_bytes_to_use"] is not None or p["cpu_bytes_to_use_per_rank"] is not None
    from_log = log.offload() if log is not None and not flags else None
    if from_log is None and not flags:
        return None
    if flags or from_log is None:
        total_bytes, per_rank_bytes = p["cpu_bytes_to_use"], p["cpu_bytes_to_use_per_rank"]
        source = "flags"
        world = tp.value * pp.value
        world_src = f"TP {tp.value} × PP {pp.value}"
    else:
        total_bytes, per_rank_bytes = from_log["cpu_bytes_to_use"], from_log["cpu_bytes_to_use_per_rank"]
        source = (f"log line {from_log['config_line']} ({_OFFLOAD_CONNECTOR} config)"
                  if from_log["config_line"] else f"log ({_OFFLOAD_CONNECTOR})")
        if from_log["world_size"]:
            world = int(from_log["world_size"])
            world_src = f"log line {from_log['world_size_line']}"
        else:
            world = tp.value * pp.value
            world_src = f"TP {tp.value} × PP {pp.value}"
    res = miss.run("offload", lambda: cap.offload_host_memory(
        world, devices.value, None if total_bytes is None else float(total_bytes),
        None if per_rank_bytes is None else float(per_rank_bytes)))
    if res is None:
        return None
    tokens = None
    if bpt:
        tokens = miss.run("offload.tokens_per_rank", lambda: cap.offload_tokens_per_rank(res.per_rank_bytes, bpt))
    else:
        miss.reasons.setdefault("offload.tokens_per_rank", R_BPT)
    return {
        "source": source, "cpu_bytes_to_use": total_bytes, "cpu_bytes_to_use_per_rank": per_rank_bytes,
        "world_size": world, "world_size_source": world_src, "ranks_per_node": devices.value,
        "per_rank_gib": res.per_rank_bytes / GIB, "per_node_gib": res.per_node_bytes / GIB,
        "per_engine_gib": res.total_bytes / GIB, "tokens_per_rank": tokens,
        "logged_per_rank_gb": from_log.get("per_rank_gb") if from_log else None,
        "caveats": list(res.caveats),
    }


def _node_budget(p, devices, total, util, kv_fraction, dp, miss: _Missing) -> dict | None:
    if kv_fraction is None:
        return None
    if not miss.need("node_budget", t=(_val(total), R_TOTAL),
                     u=(_val(util), "needs --gpu-memory-utilization (or a log that states it)")):
        return None
    node = miss.run("node_budget", lambda: cap.node_kv_budget(devices.value, total.value, util.value,
                                                             kv_fraction.value))
    if node is None:
        return None
    return {"devices": devices.value, "device_gib": total.value, "utilization": util.value,
            "kv_fraction": kv_fraction.value, "node_kv_gib": node,
            "per_dp_group_gib": cap.kv_budget_per_dp_group_gib(node, dp.value),
            "per_device_gib": node / devices.value,
            "formula": f"{devices.value} × {total.value:g} × {util.value:g} × {kv_fraction.value:g}"}


def _live(requests, prompt, output, role, bpt, fixed, Z, dp, miss: _Missing) -> dict | None:
    if prompt is None and output is None:
        return None
    if requests is None:
        miss.reasons.setdefault("live", R_N)
        return None
    n, pl, ol = requests.value, _val(prompt) or 0, _val(output) or 0
    r = _val(role) or "mixed"
    if r == "prefill":
        rows = [("each request counted at its final length (prompt + output): upper bound", 1.0),
                ("physically held: the prompt, until its KV is sent to the decode node", 0.0)]
    else:
        rows = [("average over a request's decode life (prompt + half the output)", 0.5),
                ("peak: every request at its final length", 1.0)]
    estimates = []
    for label, frac in rows:
        tokens = cap.live_tokens(n, pl, ol, frac)
        kv = share = None
        if bpt:
            kv = cap.live_kv_gib(tokens, bpt, fixed, n)
            share = kv / Z if Z else None
        estimates.append({"label": label, "output_fraction_held": frac, "tokens": tokens,
                          "kv_gib_per_rank": kv, "share_of_pool": share})
    if not bpt:
        miss.reasons.setdefault("live.kv_gib_per_rank", R_BPT)
    return {"role": r, "role_source": role.where() if role else "default (mixed)", "concurrency_per_dp_group": n,
            "prompt_len": pl, "output_len": ol, "tokens": estimates[0]["tokens"], "estimates": estimates}


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

DASH = "—"


def _n(v: Any, digits: int = 0) -> str:
    if v is None:
        return DASH
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if digits == 0 and v.is_integer():
            return f"{int(v):,}"
        return f"{v:,.{digits or 1}f}"
    return str(v)


def _gib(v: Any) -> str:
    if v is None:
        return DASH
    return f"{v:,.3f} GiB" if abs(v) < 10 else f"{v:,.2f} GiB"


def render_table(est: dict) -> str:
    from tabulate import tabulate

    out: list[str] = []
    inp = est["inputs"]

    def section(title: str, rows: list[list[str]], headers=("figure", "value", "from / note")) -> None:
        out.append(title)
        out.append(tabulate(rows, headers=list(headers), tablefmt="simple", disable_numparse=True,
                            maxcolwidths=[None, None, 72]))
        out.append("")

    miss = est["capacity"]["missing"]

    def why(key: str, note: str = "") -> str:
        reason = miss.get(key, note)
        return "needs bytes per token (see basis)" if reason == R_BPT else reason

    # inputs
    labels = [("model", "model"), ("tp", "TP"), ("pp", "PP"), ("dp", "DP"), ("devices", "devices on the node"),
              ("max_model_len", "max_model_len"), ("block_size", "block size"), ("kv_cache_dtype", "KV cache dtype"),
              ("max_num_batched_tokens", "max_num_batched_tokens"), ("hma_enabled", "hybrid KV manager"),
              ("vllm_version", "vLLM version"), ("platform", "platform"), ("gpu_memory_gib", "device memory (GiB)"),
              ("gpu_memory_utilization", "gpu_memory_utilization"), ("kv_fraction", "KV fraction of the budget"),
              ("non_kv_gib", "non-KV memory per device (GiB)"), ("available_gib_per_rank", "KV memory per rank (GiB)"),
              ("workload_len", "workload length (P99)"), ("prompt_len", "prompt length"),
              ("output_len", "output length"), ("requests", "target concurrency N"), ("role", "node role")]
    rows = []
    for key, label in labels:
        f = inp.get(key)
        if f is None:
            continue
        v = f["value"]
        if key == "hma_enabled":
            v = "on" if v else "off"
        elif isinstance(v, float) and key in ("non_kv_gib", "available_gib_per_rank", "gpu_memory_gib"):
            v = f"{v:,.2f}"
        rows.append([label, _n(v, 2) if not isinstance(v, str) else v, Figure(**{k: f[k] for k in ("value", "source", "line")},
                                                                            detail=f["detail"] or "").where()])
    section("Inputs (flags override the log)", rows)

    # bytes per token
    e, m, c = est["expected"], est["measured"], est["comparison"]
    rows = [["measured Z·2^30/N", _n(m["bytes_per_token"], 1) + (" B" if m["bytes_per_token"] else ""),
             m["source"] or (m["note"] or "")]]
    if m["bytes_per_token"] is not None and m["note"]:
        rows.append(["", "", m["note"]])
    if m["logged_tokens"] is not None:
        rows.append(["logged KV cache size", f"{m['logged_tokens']:,} tokens", f"log line {m['logged_tokens_line']}"])
    if e["bytes_per_token"] is not None:
        rows.append(["expected per context token", _n(e["bytes_per_token"], 2) + " B",
                     f"{e['architecture']} ({e['model_source']})"])
        rows.append(["expected fixed per request", _n(e["fixed_bytes_per_request"], 0) + " B",
                     "sliding-window / state reservation" if e["fixed_bytes_per_request"] else "none (not hybrid)"])
        if e["hma_off_bytes_per_token"] != e["bytes_per_token"]:
            rows.append(["expected with HMA off", _n(e["hma_off_bytes_per_token"], 2) + " B", "every layer full"])
        rows.append(["expected log figure", _n(e["log_figure"], 2) + (" B" if e["log_figure"] else ""),
                     f"what Z·2^30/N should read (vLLM {inp['vllm_version']['value'] if inp.get('vllm_version') else 'unknown'})"])
    else:
        rows.append(["expected", DASH, e["reason"] or ""])
    if c["ratio"] is not None:
        verdict = c["explanation"] if c["within_tolerance"] else "; ".join(c["causes"])
        rows.append(["measured / expected", f"{c['ratio']:.4f}", verdict])
    else:
        rows.append(["measured / expected", DASH, c["reason"] or ""])
    section("Bytes per token (per rank)", rows)

    # capacity
    k = est["capacity"]
    basis = (f"{_n(k['bytes_per_token'], 1)} B/token" + (f" + {_n(k['fixed_bytes_per_request'])} B/request"
             if k["fixed_bytes_per_request"] else "")) if k["bytes_per_token"] else DASH
    rows = [["basis", basis, f"{k['basis'] or 'none'}: {k['basis_reason']}"],
            ["KV memory per rank", _gib(k["available_gib_per_rank"]),
             why("available_gib_per_rank", _where(inp, "available_gib_per_rank"))],
            ["KV memory per DP group", _gib(k["kv_gib_per_dp_group"]),
             why("kv_gib_per_dp_group", f"per rank × TP × PP = {_n(k['available_gib_per_rank'], 2)} × {_ranks(inp)}")],
            ["KV memory, all DP groups", _gib(k["kv_gib_total"]), why("kv_gib_per_dp_group", f"× DP {k['dp_size']}")],
            ["tokens in the pool per DP group", _n(k["pool_tokens_per_dp_group"]),
             why("pool_tokens_per_dp_group", "floor(Z·2^30 / bytes per token)"
                 + ("; full-length tokens only (each request also reserves the fixed part)"
                    if k["fixed_bytes_per_request"] else "")
                 + (f"; the log says {k['logged_tokens_per_dp_group']:,}" if k["logged_tokens_per_dp_group"] else ""))],
            ["tokens in the pool, all DP groups", _n(k["pool_tokens_total"]),
             why("pool_tokens_total", f"× DP {k['dp_size']}")],
            [f"requests that fit at workload length {_lab(k['workload_len'], 'L')}", _x(k["requests_fit_at_workload_len"]),
             why("requests_fit_at_workload_len", "per DP group")],
            [f"requests that fit at max_model_len {_lab(k['max_model_len'], '')}".rstrip(), _x(k["requests_fit_at_max_model_len"]),
             why("requests_fit_at_max_model_len", "per DP group; the log's 'Maximum concurrency' figure")],
            [f"max_model_len for {_lab(k['target_requests'], 'N')} concurrent requests", _n(k["max_model_len_for_target_requests"]),
             why("max_model_len_for_target_requests", "each at full length")],
            [f"--kv-cache-memory-bytes for {_lab(k['target_requests'], 'N')} × {_lab(k['workload_len'], 'L')} tokens",
             _n(k["kv_cache_memory_bytes_for_target"]),
             why("kv_cache_memory_bytes_for_target",
                 f"= {k['kv_cache_memory_bytes_for_target'] / GIB:,.2f} GiB per rank"
                 if k["kv_cache_memory_bytes_for_target"] else "")],
            [f"--gpu-memory-utilization for {_lab(k['target_requests'], 'N')} × {_lab(k['workload_len'], 'L')} tokens",
             DASH if k["gpu_memory_utilization_for_target"] is None else f"{k['gpu_memory_utilization_for_target']:.4f}",
             why("gpu_memory_utilization_for_target",
                 f"(KV + non-KV {_n(k['non_kv_gib'], 2)} GiB) / {_n(k['gpu_memory_gib'], 2)} GiB"
                 + ("" if k["target_fits"] else " — > 1: does not fit on this device"))]]
    rk = k["request_kv"]
    if rk:
        rows.append([f"one request at P99 {rk['p99_len']:,} tokens", _gib(rk["p99_gib"]),
                     f"{rk['p99_bytes']:,.0f} B per rank: what a real request needs"])
        rows.append([f"one request at max_model_len {rk['max_model_len']:,}", _gib(rk["max_model_len_gib"]),
                     f"{rk['max_model_len_bytes']:,.0f} B per rank ({rk['max_model_len_bytes'] / 1e9:,.2f} GB): vLLM's "
                     f"worst-case startup check, {rk['worst_case_over_p99']:.1f}× the P99 need"
                     + (f"; the log says {rk['logged_needed_gib']} GiB (line {rk['logged_line']})"
                        if rk["logged_needed_gib"] is not None else "")])
    else:
        rows.append(["one request: P99 vs max_model_len", DASH, why("request_kv")])
    section("Capacity (per rank = per DP group unless stated)", rows)

    if k["offload"]:
        o = k["offload"]
        rows = [["host memory per rank", _gib(o["per_rank_gib"]), f"{o['source']}; world_size {o['world_size']} ({o['world_size_source']})"],
                ["host memory per node", _gib(o["per_node_gib"]), f"per rank × {o['ranks_per_node']} ranks on the node"],
                ["tokens a rank's buffer holds", _n(o["tokens_per_rank"]), why("offload.tokens_per_rank", "per-rank bytes / bytes per token")]]
        if o["logged_per_rank_gb"] is not None:
            rows.append(["connector's own per-rank figure", f"{o['logged_per_rank_gb']:g} GB", "log (GB = 2^30 bytes)"])
        for cv in o["caveats"]:
            rows.append(["", "", cv])
        section("CPU offload (RecomputeCPUOffloadConnector)", rows)

    if k["node_budget"]:
        nb = k["node_budget"]
        section("Node KV budget", [
            ["KV on the node", f"{nb['node_kv_gib']:,.2f}", f"{nb['formula']} (unit of --gpu-memory-gib)"],
            ["per DP group", f"{nb['per_dp_group_gib']:,.2f}", f"node / DP {k['dp_size']}"],
            ["per device", f"{nb['per_device_gib']:,.2f}", f"node / {nb['devices']} devices"]])
    elif "node_budget" in miss:
        section("Node KV budget", [["KV on the node", DASH, miss["node_budget"]]])

    if k["live"]:
        lv = k["live"]
        rows = []
        for e2 in lv["estimates"]:
            extra = ""
            if e2["kv_gib_per_rank"] is not None:
                extra = f"; {e2['kv_gib_per_rank']:,.2f} GiB per rank"
                if e2["share_of_pool"] is not None:
                    extra += f" = {e2['share_of_pool']:.1%} of the pool"
            rows.append([f"live tokens (fraction {e2['output_fraction_held']:g} of output)", _n(e2["tokens"]),
                         e2["label"] + extra])
        section(f"Live tokens: {lv['role']} node ({lv['role_source']}), {lv['concurrency_per_dp_group']} concurrent "
                f"requests per DP group, prompt {lv['prompt_len']:,} + output {lv['output_len']:,}", rows)
    elif "live" in miss:
        section("Live tokens", [["live tokens", DASH, miss["live"]]])

    extra = est["expected"]["assumptions"] + est["notes"]
    if extra:
        out.append("Assumptions and notes")
        out.extend(f"  - {a}" for a in extra)
        out.append("")
    return "\n".join(out)


def _where(inp: dict, key: str) -> str:
    f = inp.get(key)
    if not f:
        return ""
    return Figure(f["value"], f["source"], f["detail"] or "", f["line"]).where()


def _ranks(inp: dict) -> str:
    return f"TP {inp['tp']['value']} × PP {inp['pp']['value']}"


def _lab(v: Any, symbol: str) -> str:
    return symbol if v is None else _n(v)


def _x(v: float | None) -> str:
    return DASH if v is None else f"{v:,.2f}x"


def estimate_document(params: dict[str, Any], log_path: str | None = None, run: str = "last") -> dict[str, Any]:
    """The estimate for the command's parameters and, with ``log_path``, the selected run of that log.

    Raises `InputError` (unreadable log) or `EstimateError` (``run`` is ``all`` or not in the log, an
    unreadable ``--model-config``)."""
    log = read_log(log_path, run) if log_path is not None else None
    est = build_estimate(params, log)
    if log is not None and log.analysis.extra.get("truncated"):
        est["truncated"] = log.analysis.extra["truncated"]  # the log was read in part: its figures are of the lines read
    return est
