"""Issue 17 (start-up and the per-log cost of a scan): the faster paths give exactly what the old ones gave —
rule conditions run as closures, the scan summary without pandas — and a scan's table output loads no pandas."""

from __future__ import annotations

import glob
import random
import subprocess
import sys

import pytest
from conftest import DATA_DIR, SAMPLE_LOGS_DIR

from kvlogdiag.config import Options
from kvlogdiag.modes import scan
from kvlogdiag.modes.scan import fmt_duration, to_frame
from kvlogdiag.pipeline import Analyzer, analyze_source
from kvlogdiag.rules import condition as C


def _outcome(cond: C.Condition, env, functions, max_steps: int, program: bool) -> tuple:
    ev = C._Evaluator(env, functions or {}, max_steps)
    try:
        value = cond._program(ev) if program else ev.visit(cond.tree)
        return "value", repr(value), ev.steps
    except C.EvaluationError as exc:
        return "error", str(exc), ev.steps


def test_condition_programs_give_the_visitors_values_steps_and_errors(monkeypatch):
    """Every condition of the built-in rules, on every sample log: the same value (or error), the same steps
    counted, and the same budget error at every budget below what it took."""
    real = C.Condition.evaluate
    seen = [0]

    def both(self, env, functions=None, *, max_steps=C.MAX_STEPS):
        full = _outcome(self, env, functions, max_steps, program=False)
        assert _outcome(self, env, functions, max_steps, program=True) == full, self.source
        steps = full[2]
        for budget in sorted({1, steps // 2, steps - 1} - {0}) if steps > 1 else ():
            assert _outcome(self, env, functions, budget, True) == _outcome(self, env, functions, budget, False), \
                (self.source, budget)
        seen[0] += 1
        return real(self, env, functions, max_steps=max_steps)

    monkeypatch.setattr(C.Condition, "evaluate", both)
    for log in sorted(SAMPLE_LOGS_DIR.glob("*.log")):
        analyze_source(str(log))
    assert seen[0] > 2000


def test_program_of_an_unknown_node_type_is_the_visitor():
    class Odd(C.Literal):
        pass

    cond = C.Condition("x", C.Binary("+", Odd(1, 0), C.Literal(2, 2), 1))
    assert cond.evaluate({}) == 3  # a subclass goes through visit(), which matches it as a Literal
    with pytest.raises(C.EvaluationError, match="exceeded 2 steps"):
        cond.evaluate({}, max_steps=2)


def _pandas_summary(df, rules_by_code: dict, elapsed: float, counts: dict) -> str:
    """The summary as kvlogdiag computed it with pandas before issue 17 (the oracle)."""
    from tabulate import tabulate

    nfiles = df["source"].nunique() if len(df) else 0
    out = [f"{nfiles:,} files, {len(df):,} server starts ({counts['analysed']:,} files read, {counts['cached']:,} unchanged from state"
           + (f", {counts['dropped']:,} dropped from state" if counts.get("dropped") else "")
           + f") in {fmt_duration(elapsed)}"]

    def worst(r) -> str:
        if isinstance(r["error"], str):
            return "unreadable"
        for s in ("error", "warning", "info"):
            if (r[f"n_{s}"] or 0) > 0:
                return s
        return "clean"

    if len(df):
        w = df.apply(worst, axis=1)
        order = ["error", "warning", "info", "clean", "unreadable"]
        rows = [[k, f"{int((w == k).sum()):,}"] for k in order if int((w == k).sum())]
        out += ["", "Runs by worst finding", tabulate(rows, headers=["severity", "runs"], tablefmt="simple",
                                                      disable_numparse=True, colalign=("left", "right"))]
        counter: dict[str, int] = {}
        for codes in df["findings"].dropna():
            for code in dict.fromkeys(str(codes).split(",")):
                counter[code] = counter.get(code, 0) + 1
        top = []
        for code, n in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])):
            rule = rules_by_code.get(code)
            top.append([code, rule.name if rule is not None else "", f"{n:,}"])
        if top:
            out += ["", "Top rules (runs in which each fired)",
                    tabulate(top[:15], headers=["rule", "name", "runs"], tablefmt="simple", disable_numparse=True,
                             colalign=("left", "left", "right"))]
        ok = df[df["bytes_per_token"].notna()]
        if len(ok):
            g = ok.assign(model=ok["model"].fillna("?"), vllm_version=ok["vllm_version"].fillna("?")) \
                  .groupby(["model", "vllm_version"])["bytes_per_token"]
            agg = g.agg(["count", "min", "median", "max"]).reset_index().sort_values(["model", "vllm_version"])
            rows = [[r.model, r.vllm_version, f"{int(r['count']):,}", f"{r['min']:,.0f}", f"{r['median']:,.0f}", f"{r['max']:,.0f}"]
                    for _, r in agg.head(30).iterrows()]
            out += ["", "bytes per token (per rank) by model and vLLM version",
                    tabulate(rows, headers=["model", "vLLM", "runs", "min", "median", "max"], tablefmt="simple",
                             disable_numparse=True, colalign=("left", "left", "right", "right", "right", "right"))]
        bad = df[df["error"].notna()]
        if len(bad):
            rows = [[r.source, r.error] for r in bad.head(10).itertuples()]
            out += ["", f"Unreadable ({len(bad):,})", tabulate(rows, headers=["file", "error"], tablefmt="simple",
                                                              maxcolwidths=[60, 70])]
            if len(bad) > 10:
                out.append(f"... and {len(bad) - 10:,} more (see --output)")
    return "\n".join(out) + "\n"


def _rows() -> list[dict]:
    an = Analyzer(Options())
    paths = sorted(str(p) for p in SAMPLE_LOGS_DIR.glob("*.log")) + sorted(glob.glob(str(DATA_DIR / "**" / "*.log"), recursive=True))[:60]
    rows = [r for p in paths for r in scan.analyze_file(an, p, p, 1 << 30)]
    rows.append(scan.empty_row("/nope/x.log", "cannot read: No such file or directory"))
    rows += [scan.empty_row(f"/bad/{i}.log", "unreadable " + "x" * (i * 9)) for i in range(12)]
    return rows


def test_scan_summary_without_pandas_is_the_pandas_one():
    rows = _rows()
    assert any(r.get("bytes_per_token") is not None for r in rows) and any(r.get("findings") for r in rows)
    rules = Analyzer(Options()).rules.by_code()
    counts = {"analysed": len(rows), "cached": 3, "dropped": 2}
    assert scan.summary_tables(rows, rules, 1.5, counts) == _pandas_summary(to_frame(rows), rules, 1.5, counts)
    rng = random.Random(17)
    for _ in range(200):  # missing, empty, NaN and repeated cells, ties in the groups, empty archives
        some = [dict(r) for r in rng.sample(rows, rng.randint(0, 30))]
        for r in some:
            if rng.random() < 0.3:
                r["model"] = rng.choice([None, "", "m/a", "m/b", "Zed", "a"])
            if rng.random() < 0.3:
                r["vllm_version"] = rng.choice([None, "", "0.6.3", "0.13.0"])
            if rng.random() < 0.3:
                r["bytes_per_token"] = rng.choice([None, float("nan"), 1.5, 2.5, 131072, 131072.0, 2.675, 1e-9])
            if rng.random() < 0.2:
                r["findings"] = rng.choice([None, "", "KVD001,KVD001", "KVD999", "KVD002,KVD001"])
        c = {"analysed": len(some), "cached": 0, "dropped": 0}
        assert scan.summary_tables(some, rules, 0.2, c) == _pandas_summary(to_frame(some), rules, 0.2, c)


def test_scan_table_output_loads_no_pandas(tmp_path):
    for i, log in enumerate(sorted(SAMPLE_LOGS_DIR.glob("v*.log"))[:4]):
        (tmp_path / f"run{i}.log").write_bytes(log.read_bytes())
    code = ("import sys\nfrom kvlogdiag.cli.main import cli\n"
            f"rc = cli.run(['scan', '--no-progress', '--fail-on', 'never', '-j', '1', {str(tmp_path)!r}])\n"
            "sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules)) + '\\n')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "Runs by worst finding" in r.stdout, r.stderr
    mods = set([ln for ln in r.stderr.splitlines() if ln.startswith("MODULES ")][-1].split()[1:])
    for heavy in ("pandas", "numpy", "pyarrow", "rich"):
        assert heavy not in mods, heavy
