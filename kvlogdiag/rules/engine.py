"""Rules as data: load ``rules/*.toml``, validate them, evaluate them into findings.

A rule file holds one rule (see ``docs/rules.md`` for the format)::

    code = "KVD004"
    name = "gpu-memory-utilization-high"
    severity = "warning"
    summary, why, fix, references, [applies_to], [params], [let], [[checks]], [[samples]]

Each ``[[checks]]`` entry has ``when`` (a condition in the safe language of ``condition.py``),
a ``message`` template (``{name}`` or ``{name:,.0f}`` over the context names, ``params.*`` and
``let`` names), an optional ``severity``, ``fix`` and ``evidence`` (names whose log line is cited).
The first check that holds gives the finding. Everything is checked when the rule is loaded —
syntax, unknown names, unknown functions, regexes — and the error names the file, the rule code
and the column. A rule that fails while evaluating is reported and skipped; the others still run.
"""

from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import fields as dataclass_fields
from typing import Any, Callable, Iterable

from kvlogdiag import pkgdata, recache
from kvlogdiag.errors import KvlogdiagError
from kvlogdiag.extract.commands import is_vllm_flag
from kvlogdiag.extract.facts import Fact, LogFacts
from kvlogdiag.fileio import read_regular
from kvlogdiag.result import Severity
from kvlogdiag.rules import suggestion as suggestion_spec
from kvlogdiag.rules.condcache import FileTrees
from kvlogdiag.rules.condition import (
    Binary,
    Call,
    Condition,
    ConditionError,
    EvaluationError,
    FunctionSpec,
    ListExpr,
    Literal,
    Unary,
    _Frozen,
    bounded_round,
    compile_user_regex,
    parse,
    regex_search,
)
from kvlogdiag.rules.context import (
    NAMES,
    SECTIONS,
    Options,
    ProviderError,
    build_context,
    builtin_providers,
    provider_names,
    version_cmp,
)
from kvlogdiag.rules.guards import decided
from kvlogdiag.tomlcache import tomllib  # imported on first use

SEVERITIES = ("info", "warning", "error")
SEVERITY_RANK = {s.label: int(s) for s in Severity} | {"never": Severity.threshold("never")}  # by name
CODE_RE = recache.compile(r"^[A-Z]{2,6}\d{3,4}$")
SLUG_RE = recache.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_TEMPLATE_RE = recache.compile(r"\{([A-Za-z][A-Za-z0-9_.]*)(?::([^{}]*))?\}")
# optional segment: "[?name: text]" is kept only when name is not null (and not false/empty)
# a format spec: fill/align, sign, width ≤ 2 digits, grouping, precision ≤ 2 digits, type
_SPEC_RE = recache.compile(r"^(?:[^{}]?[<>=^])?[+\- ]?#?0?\d{0,2}[,_]?(?:\.\d{1,2})?[bcdeEfFgGnosxX%]?$")
_OPTIONAL_RE = recache.compile(r"\[\?([A-Za-z][A-Za-z0-9_.]*): ([^\[\]]*)\]")
_BRACE_RE = recache.compile(r"[{}]")

FUNCTIONS: dict[str, FunctionSpec] = {
    "defined": FunctionSpec(1, 1),
    "event": FunctionSpec(1, 1),
    "any_line": FunctionSpec(1, 1, frozenset({0})),
    "count": FunctionSpec(1, 1, frozenset({0})),
    "version_ge": FunctionSpec(1, 1),
    "version_lt": FunctionSpec(1, 1),
    "contains": FunctionSpec(2, 2),
    "matches": FunctionSpec(2, 2, frozenset({1})),
    "lower": FunctionSpec(1, 1),
    "len": FunctionSpec(1, 1),
    "min": FunctionSpec(1, None),
    "max": FunctionSpec(1, None),
    "abs": FunctionSpec(1, 1),
    "round": FunctionSpec(1, 2, digits_args=frozenset({1})),
    "multiple_of": FunctionSpec(2, 2),
    "gib": FunctionSpec(1, 1),
    "coalesce": FunctionSpec(1, None),
    # the KV usage histogram of the stats lines (0.1 % steps): a rule applies its own threshold
    "kv_usage_lines_at_or_above": FunctionSpec(1, 1),
    "kv_usage_first_line_at_or_above": FunctionSpec(1, 1),
    "kv_usage_last_line_at_or_above": FunctionSpec(1, 1),
}
FUNCTION_DOCS: dict[str, str] = {
    "defined(x)": "x is not null",
    "event(name)": "how many lines of a named catalogue event the log has (e.g. `event('hma_auto_off')`)",
    "any_line(regex)": "some line matches the regex (a user rule's raw-line search: the rarest word every match needs joins the reader's prefilter, kvlogdiag/rules/literals.py; without such a word every line is read)",
    "count(regex)": "how many lines match the regex",
    "version_ge(v)": "the logged vLLM version is >= v (null when unknown)",
    "version_lt(v)": "the logged vLLM version is < v (null when unknown)",
    "contains(list_or_text, item)": "membership or substring",
    "matches(text, regex)": "the regex matches text",
    "lower(text)": "lower case",
    "len(list_or_text)": "length",
    "min(a, ...)": "smallest number (nulls ignored)",
    "max(a, ...)": "largest number (nulls ignored)",
    "abs(x)": "absolute value",
    "round(x, n)": "x rounded to n decimals",
    "multiple_of(a, b)": "a is a multiple of b",
    "gib(bytes)": "bytes / 2^30",
    "coalesce(a, ...)": "the first argument that is not null",
    "kv_usage_lines_at_or_above(pct)": "stats lines whose KV cache usage is >= pct % (0.1 % steps); a [let] that is this one call cites the first such line",
    "kv_usage_first_line_at_or_above(pct)": "line of the first stats line with KV usage >= pct % (null when none)",
    "kv_usage_last_line_at_or_above(pct)": "line of the last stats line with KV usage >= pct % (null when none)",
}
# a [let] that is one call of these functions cites the line the function names (the first at or above)
_EVIDENCE_FUNCTIONS = {"kv_usage_lines_at_or_above", "kv_usage_first_line_at_or_above"}


class RuleLoadError(KvlogdiagError):
    """A rule file that cannot be used; the message names file, rule and position."""


class UnknownRuleError(KvlogdiagError, ValueError):
    """A ``--select``/``--ignore``/``explain`` spec that names no loaded rule (or, for explain, several)."""

    def __init__(self, spec: str, message: str):
        super().__init__(message)
        self.spec, self.message = spec, message


def suggest(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'X'?)`` from difflib, or ``""``; equally close candidates are all named, up to three."""
    import difflib  # only for an unknown name (~2 ms of CPU to import)

    cands = list(dict.fromkeys(candidates))
    scored = [(difflib.SequenceMatcher(None, word, c).ratio(), i, c) for i, c in enumerate(cands)]
    scored = [t for t in scored if t[0] >= 0.6]
    if not scored:
        return ""
    best = max(t[0] for t in scored)
    top = [c for r, _, c in sorted(scored, key=lambda t: t[1]) if r == best][:3]
    said = repr(top[-1]) if len(top) == 1 else ", ".join(repr(c) for c in top[:-1]) + f" or {top[-1]!r}"
    return f" (did you mean {said}?)"


class Check(_Frozen):
    """One [[check]] of a rule: when its condition holds, the message at that severity."""

    __slots__ = ("when", "message", "severity", "fix", "evidence", "suggest")
    _FIELDS = __slots__
    when: Condition
    message: str
    severity: str
    fix: str | None
    evidence: tuple[str, ...]
    suggest: suggestion_spec.SuggestSpec | None  # the one setting this check's finding changes

    def __init__(self, when: Condition, message: str, severity: str, fix: str | None, evidence: tuple[str, ...],
                 suggest: suggestion_spec.SuggestSpec | None = None) -> None:
        _set = object.__setattr__
        _set(self, "when", when)
        _set(self, "message", message)
        _set(self, "severity", severity)
        _set(self, "fix", fix)
        _set(self, "evidence", evidence)
        _set(self, "suggest", suggest)



_RULE_FIELDS = ("code", "name", "severity", "summary", "message", "why", "fix", "references", "applies_to", "params",
                "lets", "checks", "samples", "path", "line_patterns", "builtin")


class Rule:
    """One rule file, loaded: its code, texts, conditions and checks.

    A plain class, not a dataclass (~0.5 ms less at import, docs/performance.md "Session 8 (2)"): compared by its
    fields (the rule-set cache's tests compare a cached set with a loaded one), unhashable, pickled by its
    ``__dict__`` (cached properties included)."""

    code: str
    name: str
    severity: str
    summary: str
    message: str
    why: str
    fix: str
    references: list[str]
    applies_to: dict[str, Any]
    params: dict[str, Any]
    lets: list[tuple[str, Condition]]
    checks: list[Check]
    samples: list[dict]
    path: str
    line_patterns: tuple[str, ...]
    builtin: bool

    def __init__(self, code: str, name: str, severity: str, summary: str, message: str, why: str, fix: str,
                 references: list[str], applies_to: dict[str, Any], params: dict[str, Any],
                 lets: list[tuple[str, Condition]], checks: list[Check], samples: list[dict], path: str,
                 line_patterns: tuple[str, ...] = (), builtin: bool = True) -> None:
        self.code = code
        self.name = name
        self.severity = severity
        self.summary = summary
        self.message = message
        self.why = why
        self.fix = fix
        self.references = references
        self.applies_to = applies_to
        self.params = params
        self.lets = lets
        self.checks = checks
        self.samples = samples
        self.path = path
        self.line_patterns = line_patterns
        self.builtin = builtin

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return all(getattr(self, f) == getattr(other, f) for f in _RULE_FIELDS)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    def max_severity(self) -> str:
        return max((c.severity for c in self.checks), key=lambda s: SEVERITY_RANK[s], default=self.severity)

    @property
    def param_env(self) -> dict[str, Any]:
        """``params.<name>`` → value of the rule's own params, as `evaluate` adds them without --param overrides
        (kept while ``params`` is the same dict with the same items: `evaluate` asks for it per rule per log)."""
        key = tuple(self.params.items())
        got = self.__dict__.get("_param_env")
        if got is None or got[0] != key:
            got = self.__dict__["_param_env"] = (key, {f"params.{k}": v for k, v in self.params.items()})
        return got[1]

    @functools.cached_property
    def names_used(self) -> frozenset[str]:
        """`rule_names_used`, computed once: `evaluate` asks for every rule on every log (a scan: thousands)."""
        return frozenset(rule_names_used(self))


class RuleSet:
    """The rules in use, in order (a plain class like `Rule`: compared by its rules, unhashable)."""

    rules: list[Rule]

    def __init__(self, rules: list[Rule] | None = None) -> None:
        self.rules = [] if rules is None else rules

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self.rules == other.rules  # type: ignore[attr-defined]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def by_code(self) -> dict[str, Rule]:
        return {r.code: r for r in self.rules}

    @property
    def line_patterns(self) -> tuple[str, ...]:
        """Raw-line regexes the loaded rules use (any_line/count): the reader must see every line."""
        out: list[str] = []
        for r in self.rules:
            for p in r.line_patterns:
                if p not in out:
                    out.append(p)
        return tuple(out)

    def matching(self, spec: str) -> list[Rule]:
        """The rules a ``--select``/``--ignore`` spec names: ``ALL``, a code, a code prefix or a name."""
        s = spec.strip()
        if s.upper() == "ALL":
            return list(self.rules)
        return [r for r in self.rules if r.code.startswith(s.upper()) or r.name == s.lower()]

    def check_spec(self, spec: str) -> None:
        """`UnknownRuleError` (with a suggestion) when ``spec`` matches no loaded rule."""
        s = spec.strip()
        if s and not self.matching(s):
            hint = suggest(s.upper(), [r.code for r in self.rules]) or suggest(s.lower(), [r.name for r in self.rules])
            raise UnknownRuleError(s, f"no rule matches {s!r}{hint} (see 'kvlogdiag rules')")

    def selected(self, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> "RuleSet":
        """The rules matching ``select`` (all when empty) minus those matching ``ignore``.

        Every spec must match some loaded rule: a typo is an `UnknownRuleError`, never an empty set.
        """
        sel = [s.strip() for s in select if s.strip()]
        ign = [s.strip() for s in ignore if s.strip()]
        for s in (*sel, *ign):
            self.check_spec(s)
        chosen = {r.code for s in sel for r in self.matching(s)} if sel else {r.code for r in self.rules}
        chosen -= {r.code for s in ign for r in self.matching(s)}
        return RuleSet([r for r in self.rules if r.code in chosen])

    def lookup(self, spec: str) -> Rule:
        """One rule for ``explain``: an exact code or name first, else a prefix shared by exactly one rule."""
        s = spec.strip()
        for r in self.rules:
            if r.code == s.upper() or r.name == s.lower():
                return r
        found = [r for r in self.rules if r.code.startswith(s.upper())] if s else []
        if len(found) == 1:
            return found[0]
        if found:
            raise UnknownRuleError(s, f"{s!r} is ambiguous: it is a prefix of {', '.join(r.code for r in found)}")
        hint = suggest(s.upper(), [r.code for r in self.rules]) or suggest(s.lower(), [r.name for r in self.rules])
        raise UnknownRuleError(s, f"no rule {s!r}{hint} (see 'kvlogdiag rules')")


# --- loading --------------------------------------------------------------------------------


def builtin_rule_files() -> list[tuple[str, bytes]]:
    """(name, content) of every rule shipped with kvlogdiag."""
    out = []
    for name in pkgdata.names("rules", "builtin"):
        if name.endswith(".toml"):
            out.append((f"kvlogdiag/rules/builtin/{name}", pkgdata.read_bytes("rules", "builtin", name)))
    return out


MAX_RULE_FILE_BYTES = 1 << 20  # the largest built-in rule is ~10 KB


def load_rules(extra_dirs: Iterable[str] = (), include_builtin: bool = True) -> RuleSet:
    """Load the built-in rules and every ``*.toml`` in ``extra_dirs``; RuleLoadError on the first bad file."""
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    files: list[tuple[str, bytes, bool]] = []
    if include_builtin:
        files.extend((n, c, True) for n, c in builtin_rule_files())
    for d in extra_dirs:
        from pathlib import Path  # here: a small analyze (no rule folders) never imports pathlib (~3 ms with urllib.parse)

        p = Path(d)
        if not p.is_dir():
            raise RuleLoadError(f"{d}: rules folder not found")
        for f in sorted(p.glob("*.toml")):
            try:
                files.append((str(f), read_regular(str(f), MAX_RULE_FILE_BYTES), False))  # no FIFO, no /dev/zero
            except OSError as exc:
                raise RuleLoadError(f"{f}: cannot read ({exc.strerror or exc})") from None
    from kvlogdiag import tomlcache
    from kvlogdiag.rules import setcache

    set_key = setcache.key(files)  # the whole loaded set, by the content of every file and the loader's identity
    stored = setcache.get(set_key)
    if stored is not None:
        return stored
    try:
        for name, content, builtin in files:
            rule = load_rule(name, content, builtin, cache=True)
            if rule.code in seen:
                raise RuleLoadError(f"{name}: rule {rule.code} is already defined in {seen[rule.code]}")
            seen[rule.code] = name
            rules.append(rule)
    finally:
        tomlcache.flush()
    setcache.put(set_key, RuleSet(rules))  # before any caller touches it (a cached property, a selection)
    return RuleSet(rules)


def toml_error_line(exc: Exception, text: str) -> int:
    """Line number of a TOML error (tomllib says "at line N" or "at end of document")."""
    m = re.search(r"line (\d+)", str(exc))
    if m:
        return int(m.group(1))
    return max(1, text.count("\n") + (0 if text.endswith("\n") else 1))


def nesting_line(text: str, limit: int = 100) -> int:
    """Line where bracket nesting first passes ``limit`` (where a too-deep TOML document goes wrong)."""
    depth = 0
    for n, line in enumerate(text.splitlines(), 1):
        for ch in line:
            if ch in "[{":
                depth += 1
                if depth > limit:
                    return n
            elif ch in "]}":
                depth = max(0, depth - 1)
    return 1


def load_rule(path: str, content: bytes | str, builtin: bool = False, cache: bool = False) -> Rule:
    """Parse and validate one rule file (``cache``: the parsed TOML through `kvlogdiag.tomlcache`)."""
    text = content.decode("utf-8", "replace") if isinstance(content, bytes) else content
    try:
        if cache:
            from kvlogdiag import tomlcache

            data = tomlcache.loads(text, remember=True)
        else:
            data = tomllib.loads(text)
    except RecursionError:
        raise RuleLoadError(f"{path}:{nesting_line(text)}: not valid TOML: nested too deeply") from None
    except tomllib.TOMLDecodeError as exc:
        raise RuleLoadError(f"{path}:{toml_error_line(exc, text)}: not valid TOML: {exc}") from None
    code = data.get("code")
    where = f"{path}: {code or '<no code>'}"
    if not isinstance(code, str) or not CODE_RE.match(code):
        raise RuleLoadError(f"{where}: 'code' must look like KVD001")
    name = data.get("name")
    if not isinstance(name, str) or not SLUG_RE.match(name):
        raise RuleLoadError(f"{where}: 'name' must be a lower-case slug like block-size-retention-mismatch")
    base = os.path.basename(path)
    dot = base.rfind(".")
    stem = base[:dot] if 0 < dot < len(base) - 1 else base  # what Path(path).stem gives
    if stem != f"{code}-{name}":
        raise RuleLoadError(f"{where}: file must be named {code}-{name}.toml")
    severity = data.get("severity", "warning")
    if severity not in SEVERITIES:
        raise RuleLoadError(f"{where}: severity must be one of {', '.join(SEVERITIES)}")
    for key in ("summary", "why", "fix"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise RuleLoadError(f"{where}: '{key}' is required text")
    refs = data.get("references", [])
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise RuleLoadError(f"{where}: 'references' must be a list of URLs")
    known_top = {"code", "name", "severity", "summary", "message", "why", "fix", "references", "applies_to",
                  "params", "let", "checks", "samples", "condition", "when", "evidence", "suggest"}
    unknown = set(data) - known_top
    if unknown:
        raise RuleLoadError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    params = data.get("params", {})
    if not isinstance(params, dict) or not all(isinstance(v, (int, float, str, bool)) for v in params.values()):
        raise RuleLoadError(f"{where}: [params] must map names to numbers, strings or booleans")
    applies = data.get("applies_to", {})
    _check_applies(where, applies)

    names: set[str] = set(NAMES) | {f"params.{k}" for k in params}
    if builtin:  # a built-in rule's provider file adds its own names; user rule folders are never imported
        try:
            names |= set(provider_names(code))
        except ProviderError as exc:
            raise RuleLoadError(f"{where}: {exc}") from None
    trees = FileTrees(text if cache else None)  # this file's parsed conditions, kept with its parsed TOML
    lets: list[tuple[str, Condition]] = []
    for lname, expr in (data.get("let") or {}).items():
        if not isinstance(expr, str) or not recache.compile(r"^[a-z][a-z0-9_]*$").match(lname) or lname in names:
            raise RuleLoadError(f"{where}: [let] {lname} must be a new lower-case name with an expression string")
        lets.append((lname, _parse(where, f"let.{lname}", expr, names, trees)))
        names.add(lname)

    raw_checks = data.get("checks")
    if raw_checks is None:
        cond = data.get("condition") or data.get("when")
        if cond is None:
            raise RuleLoadError(f"{where}: needs 'condition' or [[checks]]")
        raw_checks = [{"when": cond, "message": data.get("message"), "severity": severity, "evidence": data.get("evidence", [])}]
    if not isinstance(raw_checks, list) or not raw_checks:
        raise RuleLoadError(f"{where}: [[checks]] must be a non-empty list")
    checks: list[Check] = []
    for i, c in enumerate(raw_checks):
        if not isinstance(c, dict):
            raise RuleLoadError(f"{where}: checks[{i}] must be a table")
        extra = set(c) - {"when", "message", "severity", "fix", "evidence", "suggest"}
        if extra:
            raise RuleLoadError(f"{where}: checks[{i}]: unknown field(s) {', '.join(sorted(extra))}")
        sev = c.get("severity", severity)
        if sev not in SEVERITIES:
            raise RuleLoadError(f"{where}: checks[{i}]: severity must be one of {', '.join(SEVERITIES)}")
        msg = c.get("message") or data.get("message")
        if not isinstance(msg, str) or not msg.strip():
            raise RuleLoadError(f"{where}: checks[{i}]: 'message' is required")
        _check_template(where, f"checks[{i}].message", msg, names)
        fix = c.get("fix")
        if fix is not None:
            if not isinstance(fix, str):
                raise RuleLoadError(f"{where}: checks[{i}].fix must be text")
            _check_template(where, f"checks[{i}].fix", fix, names)
        ev = c.get("evidence", [])
        ev = [ev] if isinstance(ev, str) else ev
        if not isinstance(ev, list) or not all(isinstance(e, str) for e in ev):
            raise RuleLoadError(f"{where}: checks[{i}].evidence must be a list of names")
        for e in ev:
            if not (e in names or e.startswith("event:") or e.startswith("line:")):
                raise RuleLoadError(f"{where}: checks[{i}].evidence: unknown name '{e}'")
            if e.startswith("line:"):
                try:
                    compile_user_regex(e[5:])
                except ConditionError as exc:
                    raise RuleLoadError(f"{where}: checks[{i}].evidence: {exc}") from None
        checks.append(Check(_parse(where, f"checks[{i}].when", c.get("when"), names, trees), msg, sev, fix, tuple(ev),
                            _suggest_spec(where, i, data.get("suggest"), c.get("suggest"), names, trees)))
    _check_template(where, "fix", data["fix"], names)

    samples = data.get("samples", [])
    if not isinstance(samples, list) or not all(isinstance(s, dict) and isinstance(s.get("log"), str) and isinstance(s.get("fires"), bool) for s in samples):
        raise RuleLoadError(f"{where}: [[samples]] need 'log' (text) and 'fires' (true/false)")
    for i, sample in enumerate(samples):
        _check_sample(f"{where}: samples[{i}]", sample)
    line_patterns = []
    for _, cond in lets:
        line_patterns.extend(_line_patterns(cond))
    for c in checks:
        line_patterns.extend(_line_patterns(c.when))
    for c in checks:
        for e in c.evidence:
            if e.startswith("line:"):
                line_patterns.append(e[5:])
    trees.save()
    return Rule(code, name, severity, data["summary"].strip(), checks[0].message, data["why"].strip(),
                data["fix"].strip(), refs, applies, params, lets, checks, samples, path,
                tuple(dict.fromkeys(line_patterns)), builtin)


def _suggest_spec(where: str, i: int, base: Any, override: Any, names: set[str],
                  trees: FileTrees | None = None) -> suggestion_spec.SuggestSpec | None:
    """The validated suggestion of checks[i]: the rule's [suggest] with the check's own 'suggest' on top."""
    if base is not None and not isinstance(base, dict):
        raise RuleLoadError(f"{where}: [suggest] must be a table")
    if override is not None and override is not False and not isinstance(override, dict):
        raise RuleLoadError(f"{where}: checks[{i}].suggest must be a table or false")
    raw = suggestion_spec.merge(base, override)
    if raw is None:
        return None
    return suggestion_spec.build(raw, f"checks[{i}].suggest", lambda f, text: _parse(where, f, text, names, trees),
                                 lambda f, text: _check_template(where, f, text, names),
                                 is_vllm_flag, lambda msg: RuleLoadError(f"{where}: {msg}"))


# what tests/test_rules.py reads from a [[samples]] entry
SAMPLE_KEYS = {"log": "text", "fires": "true/false", "severity": "info/warning/error", "message_contains": "a list of texts",
               "line": "a line number", "options": "a table of options", "allow_unknown": "true/false"}
_OPTION_FIELDS = {f.name for f in dataclass_fields(Options)}


def _check_sample(where: str, sample: dict) -> None:
    for key in sample:
        if key not in SAMPLE_KEYS:
            raise RuleLoadError(f"{where}: unknown key '{key}'{suggest(key, SAMPLE_KEYS)} (known: {', '.join(SAMPLE_KEYS)})")
    checks = {
        "severity": lambda v: v in SEVERITIES,
        "message_contains": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "line": lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
        "options": lambda v: isinstance(v, dict),
        "allow_unknown": lambda v: isinstance(v, bool),
    }
    for key, ok in checks.items():
        if key in sample and not ok(sample[key]):
            raise RuleLoadError(f"{where}: '{key}' must be {SAMPLE_KEYS[key]}")
    for key in sample.get("options", {}):
        if key not in _OPTION_FIELDS:
            raise RuleLoadError(f"{where}: options: unknown option '{key}'{suggest(key, sorted(_OPTION_FIELDS))}")


def _parse(where: str, field_name: str, text: Any, names: set[str], trees: FileTrees | None = None) -> Condition:
    if not isinstance(text, str):
        raise RuleLoadError(f"{where}: {field_name} must be a string")
    try:
        return trees.parse(text, names, FUNCTIONS) if trees is not None else parse(text, names, FUNCTIONS)
    except ConditionError as exc:
        raise RuleLoadError(f"{where}: {field_name}: {exc}") from None


def _check_template(where: str, field_name: str, text: str, names: set[str]) -> None:
    for m in _optional_segments(text):
        if m.group(1) not in names:
            raise RuleLoadError(f"{where}: {field_name}: unknown name '{m.group(1)}' at column {m.start()}")
    masked = _TEMPLATE_RE.sub(lambda m: " " * len(m.group(0)), text)
    found = _BRACE_RE.search(masked)
    stray = found.start() if found else None
    if stray is not None:
        raise RuleLoadError(f"{where}: {field_name}: only {{name}} or {{name:format}} placeholders are allowed "
                            f"(stray {text[stray]!r} at column {stray})")
    for m in _TEMPLATE_RE.finditer(text):
        spec = m.group(2) or ""
        if not _SPEC_RE.match(spec):
            raise RuleLoadError(f"{where}: {field_name}: format spec {spec!r} is not allowed at column {m.start()} "
                                "(use e.g. :,.0f, :.2f, :.1%)")
    for m in _TEMPLATE_RE.finditer(text):
        if m.group(1) not in names:
            raise RuleLoadError(f"{where}: {field_name}: unknown name '{m.group(1)}' at column {m.start()}")


def _check_applies(where: str, applies: Any) -> None:
    if not isinstance(applies, dict):
        raise RuleLoadError(f"{where}: [applies_to] must be a table")
    for k, v in applies.items():
        if k in ("engine", "platform", "role"):
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise RuleLoadError(f"{where}: applies_to.{k} must be a list of strings")
        elif k == "vllm":
            if not isinstance(v, str) or not all(re.match(r"^\s*(>=|<=|<|>|==)\s*\d+(\.\d+){0,2}\s*$", p) for p in v.split(",")):
                raise RuleLoadError(f"{where}: applies_to.vllm must look like '>=0.9.1,<0.27'")
        else:
            raise RuleLoadError(f"{where}: applies_to.{k} is not known (engine, platform, vllm, role)")


def _line_patterns(cond: Condition) -> list[str]:
    out = []
    stack = [cond.tree]
    while stack:
        n = stack.pop()
        if isinstance(n, Call):
            if n.name in ("any_line", "count") and n.args and isinstance(n.args[0], Literal) and isinstance(n.args[0].value, str):
                out.append(n.args[0].value)
            stack.extend(n.args)
        elif isinstance(n, ListExpr):
            stack.extend(n.items)
        elif isinstance(n, Unary):
            stack.append(n.operand)
        elif isinstance(n, Binary):
            stack.extend((n.left, n.right))
    return out


# --- evaluation -----------------------------------------------------------------------------


class RuleError:
    """A rule that failed to evaluate on this log, and why (read by its attributes only)."""

    __slots__ = ("code", "message")

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message


def applies(rule: Rule, ctx: dict[str, Any]) -> bool:
    """Unknown facts never exclude a rule: the rule's own condition decides then."""
    a = rule.applies_to
    if "engine" in a and ctx.get("engine") is not None and ctx["engine"] not in a["engine"]:
        return False
    if "platform" in a and ctx.get("platform") is not None and ctx["platform"] not in a["platform"]:
        return False
    if "role" in a and ctx.get("node_role") is not None and ctx["node_role"] not in a["role"]:
        return False
    if "vllm" in a and ctx.get("vllm_version"):
        for part in a["vllm"].split(","):
            m = re.match(r"^\s*(>=|<=|<|>|==)\s*(\S+)\s*$", part)
            c = version_cmp(ctx["vllm_version"], m.group(2)) if m else None
            if m is None or c is None:
                continue
            op = m.group(1)
            ok = {">=": c >= 0, "<=": c <= 0, "<": c < 0, ">": c > 0, "==": c == 0}[op]
            if not ok:
                return False
    return True


def _functions(ctx: dict[str, Any], facts: LogFacts, line_hits: dict[str, tuple[int, Fact | None]]) -> dict[str, Callable]:
    def version_ge(v: str) -> bool | None:
        c = version_cmp(ctx.get("vllm_version"), str(v))
        return None if c is None else c >= 0

    def version_lt(v: str) -> bool | None:
        c = version_cmp(ctx.get("vllm_version"), str(v))
        return None if c is None else c < 0

    def multiple_of(a: Any, b: Any) -> bool | None:
        if not isinstance(a, int) or not isinstance(b, int) or isinstance(a, bool) or isinstance(b, bool) or b == 0:
            return None
        return a % b == 0

    def _nums(args):
        return [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]

    def rnd(x, n=0):
        return bounded_round(x, n)  # decimals bounded: round(1, -999999999) would never return

    def contains(container, item):
        if isinstance(container, (list, tuple)):
            return item in container
        if isinstance(container, str) and isinstance(item, str):
            return item in container
        return False

    def pct(x: Any, fn: str) -> float:
        if not isinstance(x, (int, float)) or isinstance(x, bool):
            raise EvaluationError(f"{fn}() needs a percentage (a number), not {x!r}")
        return float(x)

    def line_of(f: Fact | None) -> int | None:
        return f.line if f is not None else None

    st = facts.stats
    return {
        "defined": lambda x: x is not None,
        "event": lambda name: facts.event_count(str(name)),
        "any_line": lambda p: line_hits.get(p, (0, None))[0] > 0,
        "count": lambda p: line_hits.get(p, (0, None))[0],
        "version_ge": version_ge,
        "version_lt": version_lt,
        "contains": contains,
        "matches": lambda s, p: (regex_search(p, s) is not None) if isinstance(s, str) else False,
        "lower": lambda s: s.lower() if isinstance(s, str) else None,
        "len": lambda x: len(x) if isinstance(x, (list, str)) else None,
        "min": lambda *a: min(_nums(a)) if _nums(a) else None,
        "max": lambda *a: max(_nums(a)) if _nums(a) else None,
        "abs": lambda x: abs(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None,
        "round": rnd,
        "multiple_of": multiple_of,
        "gib": lambda b: b / (1 << 30) if isinstance(b, (int, float)) and not isinstance(b, bool) else None,
        "coalesce": lambda *a: next((x for x in a if x is not None), None),
        "kv_usage_lines_at_or_above": lambda x: st.lines_at_or_above(pct(x, "kv_usage_lines_at_or_above")),
        "kv_usage_first_line_at_or_above": lambda x: line_of(st.first_at_or_above(pct(x, "kv_usage_first_line_at_or_above"))),
        "kv_usage_last_line_at_or_above": lambda x: line_of(st.last_at_or_above(pct(x, "kv_usage_last_line_at_or_above"))),
    }


@functools.lru_cache(maxsize=1024)
def _argument_condition(cond: Condition) -> Condition:
    # one Condition per [let] (equal Conditions have the same source, so the same tree): it keeps its compiled form
    return Condition(cond.source, cond.tree.args[0])  # type: ignore[union-attr]


def _let_evidence(cond: Condition, env: dict[str, Any], funcs: dict[str, Callable], facts: LogFacts) -> Fact | None:
    """The line a [let] cites when it is one call of a histogram function: the first stats line at or above."""
    tree = cond.tree
    if not (isinstance(tree, Call) and tree.name in _EVIDENCE_FUNCTIONS and len(tree.args) == 1):
        return None
    threshold = _argument_condition(cond).evaluate(env, funcs)
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool):
        return None
    return facts.stats.first_at_or_above(float(threshold))


def rule_namespace_markdown(rule: Rule) -> list[str]:
    """docs/rules.md lines for the names a built-in rule's provider file adds (none without one)."""
    p = builtin_providers().get(rule.code) if rule.builtin else None
    if p is None:
        return []
    return ["", f"**Figures computed in Python** (`{p.path}`, names only this rule can use): "
            + "; ".join(f"`{k}` {v}" for k, v in p.names.items())]


def namespace_markdown() -> list[str]:
    """docs/rules.md lines for the generic names and the functions every rule can use."""
    out = ["", "## Names a rule condition can use", "",
           "Rule-independent names, filled for every rule. A built-in rule whose figure the condition language cannot "
           "compute has a provider file next to its TOML (listed under the rule above) that adds names to that rule "
           "only; providers exist for built-in rules only: a `--rules DIR` folder is data, it is never imported, and "
           "its rules use the names and functions below. A figure that fails to compute is a rule error "
           "(`kvlogdiag: rule error: ...`, fatal with `--strict-rules`), never a silent null.", ""]
    for section, names in SECTIONS.items():
        out += [f"### {section}", "", "| name | meaning |", "|---|---|"]
        out += [f"| `{k}` | {v.replace('|', chr(92) + '|')} |" for k, v in names.items()]
        out.append("")
    out += ["## Functions", "", "| function | result |", "|---|---|"]
    out += [f"| `{k}` | {v.replace('|', chr(92) + '|')} |" for k, v in FUNCTION_DOCS.items()]
    return out


def rule_names_used(rule: Rule) -> set[str]:
    """Every context name a rule reads: in its lets, conditions, messages, fixes and evidence."""
    used: set[str] = {name for key, name in (("engine", "engine"), ("platform", "platform"), ("role", "node_role"),
                                              ("vllm", "vllm_version")) if key in rule.applies_to}
    for _, cond in rule.lets:
        used |= cond.names
    texts = [rule.fix]
    for c in rule.checks:
        used |= c.when.names
        used |= {e for e in c.evidence if not e.startswith(("event:", "line:"))}
        texts += [c.message, c.fix or ""]
    for t in texts:
        used |= {m.group(1) for m in _TEMPLATE_RE.finditer(t)}
        used |= {m.group(1) for m in _optional_segments(t)}
    return used


def _optional_segments(text: str) -> list[re.Match]:
    """Every ``[?name: ...]`` segment, nested ones included (innermost first)."""
    out: list[re.Match] = []
    while True:
        found = list(_OPTIONAL_RE.finditer(text))
        if not found:
            return out
        out.extend(found)
        text = _OPTIONAL_RE.sub(lambda m: " " * len(m.group(0)), text)


def render_template(template: str, env: dict[str, Any]) -> str:
    """Fill ``{name}`` / ``{name:spec}`` and ``[?name: optional text]``; a null value reads 'unknown'."""

    def one(m: re.Match) -> str:
        value = env.get(m.group(1))
        spec = m.group(2) or ""
        if value is None:
            return "unknown"
        if isinstance(value, float) and not math.isfinite(value):
            return "unknown"
        if isinstance(value, (list, tuple)):
            return ", ".join(str(x) for x in value) or "none"
        if isinstance(value, bool):
            return "yes" if value else "no"
        try:
            return format(value, spec)
        except (ValueError, TypeError):
            return str(value)

    def optional(m: re.Match) -> str:
        value = env.get(m.group(1))
        return m.group(2) if value not in (None, False, "", []) else ""

    text = template
    while True:  # innermost segments first, so one may hold another
        done = _OPTIONAL_RE.sub(optional, text)
        if done == text:
            break
        text = done
    return _TEMPLATE_RE.sub(one, text)


def _evidence(check: Check, rule: Rule, prov: dict[str, Fact], facts: LogFacts,
              line_hits: dict[str, tuple[int, Fact | None]], ctx_names: Iterable[str]) -> Fact | None:
    candidates = list(check.evidence)
    if not candidates:
        candidates = sorted(check.when.names & set(prov), key=lambda n: prov[n].line)
    for e in candidates:
        if e.startswith("event:"):
            lst = facts.events.get(e[6:])
            if lst:
                return lst[0]
        elif e.startswith("line:"):
            hit = line_hits.get(e[5:])
            if hit and hit[1] is not None:
                return hit[1]
        elif e in prov:
            return prov[e]
    return None


def evaluate(rules: RuleSet, facts: LogFacts, analysis: dict, options: Options | None = None,
             errors: list[RuleError] | None = None, suggestions: list[dict] | None = None) -> list[dict]:
    """Evaluate every rule; returns findings sorted by line, then code.

    A rule that cannot be evaluated — a figure it uses failed to compute, its provider raised, a line
    regex it counts was stopped, or its condition failed — gives a `RuleError` (fatal with
    ``--strict-rules``) and no finding; the other rules still run.
    """
    opts = options or Options()
    context = build_context(facts, analysis, opts)
    ctx, prov = context.values, context.prov
    line_hits = facts.line_hits
    stopped: dict[str, str] = getattr(line_hits, "stopped", {})
    funcs = _functions(ctx, facts, line_hits)
    providers = builtin_providers()
    findings: list[dict] = []

    def fail(rule: Rule, why: str) -> None:
        err = RuleError(rule.code, f"{rule.path}: {rule.code}: {why}")
        if errors is not None:
            errors.append(err)
        if opts.strict_rules:
            raise RuleLoadError(err.message) from None

    for rule in rules.rules:
        bad = sorted(n for n in rule.names_used if n in context.failed) if context.failed else None
        if bad:
            fail(rule, f"figure {', '.join(bad)} could not be computed: {context.failed[bad[0]]}")
            continue
        if not applies(rule, ctx):
            continue
        cut = [p for p in rule.line_patterns if p in stopped]
        if cut:
            fail(rule, f"line regex {cut[0]!r} {stopped[cut[0]]}; its count would be incomplete, so the rule was not evaluated")
            continue
        env = dict(ctx)
        rule_prov = prov
        provider = providers.get(rule.code) if rule.builtin else None
        if provider is not None:
            try:
                values, extra = provider.provide(facts, analysis, context.guarded())
            except Exception as exc:  # noqa: BLE001 - reported as this rule's error, never silence
                fail(rule, f"{provider.path} failed: {type(exc).__name__}: {exc}")
                continue
            env.update(values)
            rule_prov = {**prov, **extra}
        override = opts.params.get(rule.code)
        if override:
            params = dict(rule.params)
            params.update(override)
            env.update({f"params.{k}": v for k, v in params.items()})
        else:
            env.update(rule.param_env)
        try:
            for lname, cond in rule.lets:
                gs, value = cond.null_guards
                if gs and decided(gs, env):  # a figure it needs is absent: its value is known (rules/guards.py)
                    env[lname] = value  # and _let_evidence would find nothing: it needs a call, never guarded
                    continue
                env[lname] = cond.evaluate(env, funcs)
                if type(cond.tree) is Call and cond.tree.name in _EVIDENCE_FUNCTIONS:  # what _let_evidence looks for
                    ev = _let_evidence(cond, env, funcs, facts)
                    if ev is not None:
                        rule_prov = {**rule_prov, lname: ev}
            for check in rule.checks:
                gs = check.when.check_guards
                if gs and decided(gs, env):  # false without evaluating it
                    continue
                if _truthy(check.when.evaluate(env, funcs)):
                    ev = _evidence(check, rule, rule_prov, facts, line_hits, env)
                    findings.append({
                        "rule": rule.code,
                        "name": rule.name,
                        "severity": check.severity,
                        "message": render_template(check.message, env),
                        "fix": render_template(check.fix or rule.fix, env),
                        "line": ev.line if ev else None,
                        "evidence": ev.raw if ev else None,
                        "rank": ev.rank if ev else None,
                        "summary": rule.summary,
                    })
                    if check.suggest is not None and suggestions is not None:
                        s = suggestion_spec.evaluate(check.suggest, env, funcs, render_template, rule.code, rule.name,
                                                     check.severity, ev.line if ev else None)
                        if s is not None:
                            suggestions.append(s)
                    break
        except (EvaluationError, ArithmeticError, TypeError, ValueError, RecursionError) as exc:
            fail(rule, f"evaluation failed: {exc}")
    findings.sort(key=lambda f: (f["line"] if f["line"] is not None else float("inf"), f["rule"]))
    return findings


def _truthy(x: Any) -> bool:
    return x is not None and x is not False and x != 0 and x != "" and x != []
