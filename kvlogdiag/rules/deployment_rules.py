"""Deployment rules as data: ``rules/deployment/KVD1xx-*.toml``, evaluated over a deployment's nodes.

Same file format as the single-log rules (``engine.py``: code, name, severity, summary, why, fix,
references, [params], [let], [[checks]] with ``when`` in the condition language of ``condition.py``,
[[samples]]) plus:

* ``scope``: what one evaluation sees. ``deployment`` (once), ``node`` (once per node, names
  ``n.*``), ``pair`` (once per producer × consumer pair, names ``p.*`` and ``d.*``) or ``host``
  (once per host, names ``host.*``). The deployment-wide names (`DEPLOYMENT_NAMES`) are in every scope.
* ``links``: single-log rule codes this rule builds on. A finding lists the nodes' findings of those
  codes (``"p0: KVD007"``) instead of repeating them; conditions read them as ``n.findings``.
* samples carry ``set`` (a directory under ``sample_logs/deployments/``), ``logs`` (inline log texts)
  or ``nodes`` (a node table: rows of `kvlogdiag.deployment_result.DeploymentNode` fields), and
  optional ``options`` (``avg_prompt_len``, ``avg_output_len``, ``host_ram_gib``).

The values of the names are computed in ``kvlogdiag/modes/deployment.py`` (`scope_envs`); this
module loads, validates and evaluates. First check that holds gives the finding, as in ``engine.py``.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable

from kvlogdiag.result import Severity
from kvlogdiag.rules.condition import Condition, ConditionError, EvaluationError, FunctionSpec, parse
from kvlogdiag.rules.engine import (
    CODE_RE,
    SEVERITIES,
    SLUG_RE,
    RuleLoadError,
    _check_template,
    render_template,
    suggest,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

SCOPES = ("deployment", "node", "pair", "host")

#: per-node names; a scope puts them under its prefixes (n., p., d.)
NODE_NAMES: dict[str, str] = {
    "name": "node name (the log's file name without extension, or its path when names repeat)",
    "host": "host the node runs on (<host>__<node>.log file name, else the directory), null when unknown",
    "role": "prefill | decode | mixed | proxy | unknown (kv_role, else the connector/scheduler evidence)",
    "kv_role": "top-level kv_role", "connector": "top-level KV connector",
    "connectors": "every connector name, MultiConnector children included",
    "mooncake": "the node's Mooncake P/D connector (vLLM-Ascend MooncakeConnectorV1 / MooncakeHybridConnector / MooncakeLayerwiseConnector / MooncakeConnector), null without one",
    "engine_id": "kv_transfer_config engine_id", "kv_port": "kv_transfer_config kv_port",
    "declared_prefill_dp": "declared prefill dp_size (Mooncake kv_connector_extra_config)",
    "declared_prefill_tp": "declared prefill tp_size", "declared_decode_dp": "declared decode dp_size",
    "declared_decode_tp": "declared decode tp_size",
    "recompute_scheduler": "vLLM-Ascend recompute_scheduler_enable (top level or scheduler_config)",
    "model": "model as logged", "model_id": "the model's last path component, lower case (paths differ per host)",
    "quantization": "--quantization", "vllm_version": "vLLM version", "platform": "cuda | npu | ...",
    "tp": "TP size (1 when not logged)", "pp": "PP size (1 when not logged)", "dp": "DP size (1 when not logged)",
    "dp_local": "DP engines whose workers print in this log", "ep": "expert parallel on",
    "block_size": "KV block size", "kv_cache_dtype": "KV cache dtype as logged ('auto' included)",
    "bytes_per_token": "measured bytes per token per rank",
    "bpt_effective": "the bytes per token is vLLM's effective figure at max_model_len (vLLM >= 0.21) of a model not known to be dense (token pool and capacity in tokens are approximate at other lengths)", "bytes_per_token_total": "bytes per token of all TP ranks (per rank x TP; per rank alone when the latent is replicated)",
    "kv_latent_replicated": "MLA / DeepSeek-V4 model: every TP rank holds the whole KV latent",
    "pool_tokens": "KV pool of one DP group, tokens (smallest group)",
    "max_num_seqs": "max_num_seqs (per DP group)", "max_num_batched_tokens": "max_num_batched_tokens",
    "max_model_len": "max_model_len",
    "has_offloading_connector": "OffloadingConnector (vLLM prefix offload) among the connectors",
    "has_rco": "RecomputeCPUOffloadConnector among the connectors",
    "offload_per_rank_gib": "pinned host buffer per rank of all offload connectors, GiB (null: none or size unknown)",
    "pinned_host_gib": "offload_per_rank_gib x the ranks of this log (TP x PP x dp_local)",
    "findings": "codes of this log's single-log findings",
    "startup_failed": "the log shows a failed start",
    "live_tokens_avg": "max_num_seqs x (avg prompt + avg output / 2): tokens held on average over the requests' decode life (null without a workload)",
    "live_tokens_peak": "max_num_seqs x (avg prompt + avg output): every request at its last token",
    "fit_avg": "requests one DP group's pool holds at avg prompt + avg output / 2",
    "fit_peak": "requests one DP group's pool holds at avg prompt + avg output",
    "prefill_tokens": "max_num_seqs x avg prompt: a P node's requests hold their prompt until it is sent",
    "prefill_tokens_upper": "max_num_seqs x (avg prompt + avg output): the seed's upper bound for P",
    "offload_tokens": "tokens the offload buffer of one rank holds (offload_per_rank_gib / bytes_per_token)",
    "fit_prefill": "prompts one DP group's pool (+ offload) holds",
}

DEPLOYMENT_NAMES: dict[str, str] = {
    "n_nodes": "logs in the deployment", "n_producers": "nodes with kv_role kv_producer",
    "n_consumers": "nodes with kv_role kv_consumer", "n_mixed": "nodes with kv_role kv_both",
    "n_no_role": "vLLM nodes without a kv_role", "producers": "names of the producer nodes",
    "consumers": "names of the consumer nodes", "mixed_nodes": "names of the kv_both nodes",
    "producer_instances": "distinct producer instances (engine_id, else model + layout)",
    "real_prefill_dp": "DP size of the producer nodes (null when they differ)",
    "real_prefill_tp": "TP size of the producer nodes (null when they differ)",
    "real_decode_dp": "DP size of the consumer nodes (null when they differ)",
    "real_decode_tp": "TP size of the consumer nodes (null when they differ)",
    "versions": "distinct vLLM versions", "producer_versions": "distinct vLLM versions of producers",
    "consumer_versions": "distinct vLLM versions of consumers",
    "recompute_producers": "producers with recompute_scheduler_enable", "recompute_consumers": "consumers with it",
    "rco_producers": "producers with RecomputeCPUOffloadConnector", "rco_consumers": "consumers with it",
    "offloading_producers": "producers with OffloadingConnector", "offloading_consumers": "consumers with it",
    "avg_prompt_len": "--avg-prompt-len", "avg_output_len": "--avg-output-len",
    "workload_given": "both lengths known: given, or inferred from the stats lines",
    "workload_inferred": "the lengths are inferred from the stats lines (kvlogdiag/derive/workload.py)",
    "workload_note": "where the inferred lengths come from: how many stats lines of which nodes, the method",
    "decode_groups": "DP groups of all consumer instances", "prefill_groups": "DP groups of all producer instances",
    "decode_capacity": "requests all D groups hold at the average length (fit_avg x decode_groups)",
    "prefill_capacity": "prompts all P groups hold (fit_prefill x prefill_groups)",
    "first_out": "'decode' or 'prefill': the side that runs out of KV first as concurrency grows",
    "first_out_concurrency": "the deployment-wide concurrency at which it does",
}

HOST_NAMES: dict[str, str] = {
    "name": "host name", "nodes": "nodes on the host", "ranks": "ranks (devices) of those nodes on the host",
    "pinned_gib": "sum of the pinned offload buffers of the ranks on the host, GiB",
    "unsized": "nodes on the host with an offload connector whose size is not in the log",
    "ram_gib": "host RAM, GiB (--host-ram-gib), null when not given",
}


def scope_names(scope: str) -> set[str]:
    names = set(DEPLOYMENT_NAMES)
    if scope == "node":
        names |= {f"n.{k}" for k in NODE_NAMES}
    elif scope == "pair":
        names |= {f"p.{k}" for k in NODE_NAMES} | {f"d.{k}" for k in NODE_NAMES}
    elif scope == "host":
        names |= {f"host.{k}" for k in HOST_NAMES}
    return names


FUNCTIONS: dict[str, FunctionSpec] = {
    "defined": FunctionSpec(1, 1), "contains": FunctionSpec(2, 2), "lower": FunctionSpec(1, 1),
    "len": FunctionSpec(1, 1), "min": FunctionSpec(1, None), "max": FunctionSpec(1, None),
    "abs": FunctionSpec(1, 1), "multiple_of": FunctionSpec(2, 2), "coalesce": FunctionSpec(1, None),
    "version_lt": FunctionSpec(2, 2), "startswith": FunctionSpec(2, 2),
}


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _version_lt(a: Any, b: Any) -> bool | None:
    from kvlogdiag.rules.context import version_cmp
    c = version_cmp(a, str(b)) if isinstance(a, str) else None
    return None if c is None else c < 0


IMPLS: dict[str, Callable[..., Any]] = {
    "defined": lambda x: x is not None,
    "contains": lambda c, i: (i in c) if isinstance(c, (list, tuple)) or (isinstance(c, str) and isinstance(i, str)) else False,
    "lower": lambda s: s.lower() if isinstance(s, str) else None,
    "len": lambda x: len(x) if isinstance(x, (list, str)) else None,
    "min": lambda *a: min((x for x in a if _num(x)), default=None),
    "max": lambda *a: max((x for x in a if _num(x)), default=None),
    "abs": lambda x: abs(x) if _num(x) else None,
    "multiple_of": lambda a, b: (a % b == 0) if isinstance(a, int) and isinstance(b, int) and b else None,
    "coalesce": lambda *a: next((x for x in a if x is not None), None),
    "version_lt": _version_lt,
    "startswith": lambda s, p: s.startswith(p) if isinstance(s, str) and isinstance(p, str) else False,
}


@dataclass(frozen=True)
class DCheck:
    when: Condition
    message: str
    severity: str
    fix: str | None
    evidence: tuple[str, ...]


@dataclass
class DeploymentRule:
    code: str
    name: str
    severity: str
    scope: str
    summary: str
    why: str
    fix: str
    references: list[str]
    links: list[str]
    params: dict[str, Any]
    lets: list[tuple[str, Condition]]
    checks: list[DCheck]
    samples: list[dict]
    path: str


@dataclass
class DeploymentRuleSet:
    rules: list[DeploymentRule] = field(default_factory=list)

    def selected(self, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> "DeploymentRuleSet":
        """Rules matching ``select`` (code, prefix or name; all when empty) minus ``ignore``; unknown specs are skipped
        (they may name single-log rules, which the same options select)."""
        def match(spec: str, r: DeploymentRule) -> bool:
            s = spec.strip()
            return s.upper() == "ALL" or r.code.startswith(s.upper()) or r.name == s.lower()
        sel = [s for s in select if s.strip()]
        out = [r for r in self.rules if not sel or any(match(s, r) for s in sel)]
        return DeploymentRuleSet([r for r in out if not any(match(s, r) for s in ignore if s.strip())])


SAMPLE_KEYS = {"fires", "severity", "message_contains", "set", "logs", "nodes", "options", "nodes_named"}
RULE_KEYS = {"code", "name", "severity", "scope", "summary", "why", "fix", "references", "links", "params", "let",
             "checks", "samples"}


def builtin_rule_files() -> list[tuple[str, bytes]]:
    root = resources.files("kvlogdiag.rules.deployment")
    return [(f"kvlogdiag/rules/deployment/{e.name}", e.read_bytes())
            for e in sorted(root.iterdir(), key=lambda e: e.name) if e.name.endswith(".toml")]


def load_deployment_rules(extra_dirs: Iterable[str] = ()) -> DeploymentRuleSet:
    """The built-in deployment rules (and ``*.toml`` of ``extra_dirs`` whose code starts KVD1)."""
    files = builtin_rule_files()
    for d in extra_dirs:
        for f in sorted(Path(d).glob("KVD1*.toml")):
            files.append((str(f), f.read_bytes()))
    rules: list[DeploymentRule] = []
    seen: dict[str, str] = {}
    for path, content in files:
        r = load_deployment_rule(path, content)
        if r.code in seen:
            raise RuleLoadError(f"{path}: rule {r.code} is already defined in {seen[r.code]}")
        seen[r.code] = path
        rules.append(r)
    return DeploymentRuleSet(rules)


def load_deployment_rule(path: str, content: bytes | str) -> DeploymentRule:
    """Parse and validate one deployment rule file; `RuleLoadError` naming file, rule and field."""
    text = content.decode("utf-8", "replace") if isinstance(content, bytes) else content
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RuleLoadError(f"{path}: not valid TOML: {exc}") from None
    code = data.get("code")
    where = f"{path}: {code or '<no code>'}"
    if not isinstance(code, str) or not CODE_RE.match(code):
        raise RuleLoadError(f"{where}: 'code' must look like KVD101")
    name = data.get("name")
    if not isinstance(name, str) or not SLUG_RE.match(name):
        raise RuleLoadError(f"{where}: 'name' must be a lower-case slug")
    if Path(path).stem != f"{code}-{name}":
        raise RuleLoadError(f"{where}: file must be named {code}-{name}.toml")
    unknown = set(data) - RULE_KEYS
    if unknown:
        raise RuleLoadError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    severity = data.get("severity", "warning")
    scope = data.get("scope")
    if severity not in SEVERITIES:
        raise RuleLoadError(f"{where}: severity must be one of {', '.join(SEVERITIES)}")
    if scope not in SCOPES:
        raise RuleLoadError(f"{where}: scope must be one of {', '.join(SCOPES)}{suggest(str(scope), SCOPES)}")
    for key in ("summary", "why", "fix"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise RuleLoadError(f"{where}: '{key}' is required text")
    links = data.get("links", [])
    if not isinstance(links, list) or not all(isinstance(x, str) and CODE_RE.match(x) for x in links):
        raise RuleLoadError(f"{where}: 'links' must be a list of rule codes")
    params = data.get("params", {})
    if not isinstance(params, dict) or not all(isinstance(v, (int, float, str, bool)) for v in params.values()):
        raise RuleLoadError(f"{where}: [params] must map names to numbers, strings or booleans")
    names = scope_names(scope) | {f"params.{k}" for k in params}
    lets: list[tuple[str, Condition]] = []
    for lname, expr in (data.get("let") or {}).items():
        if not isinstance(expr, str) or not re.match(r"^[a-z][a-z0-9_]*$", lname) or lname in names:
            raise RuleLoadError(f"{where}: [let] {lname} must be a new lower-case name with an expression string")
        lets.append((lname, _parse(where, f"let.{lname}", expr, names)))
        names.add(lname)
    raw = data.get("checks")
    if not isinstance(raw, list) or not raw:
        raise RuleLoadError(f"{where}: [[checks]] must be a non-empty list")
    checks: list[DCheck] = []
    for i, c in enumerate(raw):
        extra = set(c) - {"when", "message", "severity", "fix", "evidence"}
        if extra:
            raise RuleLoadError(f"{where}: checks[{i}]: unknown field(s) {', '.join(sorted(extra))}")
        sev = c.get("severity", severity)
        if sev not in SEVERITIES:
            raise RuleLoadError(f"{where}: checks[{i}]: severity must be one of {', '.join(SEVERITIES)}")
        msg = c.get("message")
        if not isinstance(msg, str) or not msg.strip():
            raise RuleLoadError(f"{where}: checks[{i}]: 'message' is required")
        _check_template(where, f"checks[{i}].message", msg, names)
        if c.get("fix") is not None:
            _check_template(where, f"checks[{i}].fix", c["fix"], names)
        ev = c.get("evidence", [])
        if not isinstance(ev, list) or not all(isinstance(e, str) and e in names for e in ev):
            raise RuleLoadError(f"{where}: checks[{i}].evidence must list names of the scope")
        checks.append(DCheck(_parse(where, f"checks[{i}].when", c.get("when"), names), msg, sev, c.get("fix"), tuple(ev)))
    _check_template(where, "fix", data["fix"], names)
    samples = data.get("samples", [])
    for i, s in enumerate(samples):
        bad = set(s) - SAMPLE_KEYS
        if bad or not isinstance(s.get("fires"), bool) or sum(k in s for k in ("set", "logs", "nodes")) != 1:
            raise RuleLoadError(f"{where}: samples[{i}]: needs 'fires' and exactly one of set/logs/nodes"
                                + (f" (unknown: {', '.join(sorted(bad))})" if bad else ""))
    return DeploymentRule(code, name, severity, scope, data["summary"].strip(), data["why"].strip(), data["fix"].strip(),
                          list(data.get("references", [])), links, params, lets, checks, samples, path)


def _parse(where: str, field_name: str, text: Any, names: set[str]) -> Condition:
    if not isinstance(text, str):
        raise RuleLoadError(f"{where}: {field_name} must be a string")
    try:
        return parse(text, names, FUNCTIONS)
    except ConditionError as exc:
        raise RuleLoadError(f"{where}: {field_name}: {exc}") from None


@dataclass
class ScopeEnv:
    """One evaluation of a rule: the names' values, the nodes it concerns, and each name's citation."""

    values: dict[str, Any]
    nodes: tuple[str, ...]
    cite: dict[str, list[tuple[str, int | None]]]  # name → the (node, line) pairs it rests on
    findings: dict[str, list[str]]  # node → its single-log finding codes


@dataclass
class RawFinding:
    rule: DeploymentRule
    severity: Severity
    message: str
    fix: str
    nodes: tuple[str, ...]
    evidence: list[tuple[str, int | None, str]]
    links: list[str]


def evaluate_deployment(rules: DeploymentRuleSet, envs: Callable[[str], list[ScopeEnv]],
                        params: dict[str, dict[str, Any]] | None = None, errors: list[str] | None = None) -> list[RawFinding]:
    """Every rule over every evaluation of its scope (``envs(scope)``); the first check that holds is a finding.

    A rule that fails while evaluating is reported in ``errors`` (``path: code: why``) and skipped.
    """
    out: list[RawFinding] = []
    cache: dict[str, list[ScopeEnv]] = {}
    for rule in rules.rules:
        scope_envs = cache.setdefault(rule.scope, envs(rule.scope))
        for se in scope_envs:
            env = dict(se.values)
            p = dict(rule.params)
            p.update((params or {}).get(rule.code, {}))
            env.update({f"params.{k}": v for k, v in p.items()})
            try:
                for lname, cond in rule.lets:
                    env[lname] = cond.evaluate(env, IMPLS)
                for check in rule.checks:
                    v = check.when.evaluate(env, IMPLS)
                    if v is None or v is False or v == 0 or v == "" or v == []:
                        continue
                    cited = check.evidence or tuple(sorted(n for n in check.when.names if n in se.cite))
                    evidence = [(node, line, n) for n in cited for node, line in se.cite.get(n, [])]
                    links = [f"{node}: {code}" for node in se.nodes for code in rule.links
                             if code in se.findings.get(node, [])]
                    out.append(RawFinding(rule, Severity.parse(check.severity), render_template(check.message, env),
                                          render_template(check.fix or rule.fix, env), se.nodes, evidence, links))
                    break
            except (EvaluationError, ArithmeticError, TypeError, ValueError) as exc:
                if errors is not None:
                    errors.append(f"{rule.path}: {rule.code}: evaluation failed: {exc}")
    order = {s: i for i, s in enumerate(SCOPES)}
    out.sort(key=lambda f: (-int(f.severity), f.rule.code, order[f.rule.scope], f.nodes))
    return out
