"""`kvlogdiag.rules.plainregex`: rule patterns run on the stdlib ``re`` only where that is provably the same
answer as the ``regex`` module and cannot backtrack; everything else keeps ``regex`` and its timeout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import regex
from conftest import SAMPLE_LOGS_DIR
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlogdiag.rules.condition import regex_search
from kvlogdiag.rules.plainregex import FOLD_DIFFERS, MAX_PATHS, plain_pattern

RULE_DIRS = [Path(__file__).resolve().parent.parent / "kvlogdiag" / "rules" / d for d in ("builtin", "deployment")]
# every Unicode scalar value once: what a single character of a pattern may match
ALL_CODE_POINTS = "".join(chr(i) for i in range(0x110000) if not 0xD800 <= i < 0xE000)


def _rule_patterns() -> list[str]:
    """The string literals passed to ``matches(…, '…')`` in the shipped rule files."""
    found = []
    for d in RULE_DIRS:
        for f in sorted(d.glob("*.toml")):
            found += re.findall(r"""matches\([^,()]+,\s*'([^']*)'\)""", f.read_text(encoding="utf-8"))
    return sorted(set(found))


@pytest.mark.parametrize("ignorecase", [False, True])
def test_every_ascii_character_matches_the_same_code_points_in_both_engines(ignorecase: bool) -> None:
    prefix = "(?i)" if ignorecase else ""
    differ = set()
    for c in map(chr, range(128)):
        for body in (re.escape(c), "[" + re.escape(c) + "]"):
            pattern = prefix + body
            if re.findall(pattern, ALL_CODE_POINTS) != regex.findall(pattern, ALL_CODE_POINTS):
                differ.add(ord(c))
            elif ignorecase or c.isalnum():
                assert plain_pattern(pattern) is not None, pattern  # the subset admits what agrees
    assert differ == (set(FOLD_DIFFERS) if ignorecase else set())  # and leaves out exactly what does not
    for c in map(chr, sorted(FOLD_DIFFERS)):
        assert plain_pattern(prefix + c) is None if ignorecase else plain_pattern(c) is not None
    assert re.findall("(?i)k", ALL_CODE_POINTS) == ["K", "k", "\u212a"]  # the check sees Unicode case folding


def test_the_shipped_model_name_patterns_take_the_plain_path_and_agree() -> None:
    patterns = _rule_patterns()
    assert len(patterns) >= 2  # KVD001's hybrid and SSM model-name patterns
    assert plain_pattern(patterns[0]) is not None or plain_pattern(patterns[1]) is not None
    samples = ["google/gemma-3-27b-it", "Gemma2-9B", "openai/gpt-oss-120b", "GPT_OSS", "CohereForAI/c4ai-command-a-03-2025",
               "cohere2", "meta-llama/Llama-4-Scout-17B-16E", "llama-3.1-8b", "MiniMaxAI/MiniMax-M2", "minimax_m2",
               "ibm-granite/granite-4.0-micro", "granite-4-micro", "granite-4.0-tiny", "Qwen/Qwen3-8B", "", "\n",
               "GEMMA\u212a", "gpt-\u017fss", "llama-4\n", "/models/gemma-2-2b\n"]
    hybrid = [p for p in patterns if "gemma" in p]
    assert hybrid and all(plain_pattern(p) is not None for p in hybrid)  # what a small analyze evaluates
    for p in patterns:
        plain = plain_pattern(p) or re.compile(p)  # "granite"/"minimax" have an i: regex, but compare anyway
        if plain_pattern(p) is None:
            assert "i" in p.lower()
            continue
        for s in samples:
            a, b = plain.search(s), regex.compile(p).search(s)
            assert (a and a.span()) == (b and b.span()), (p, s)


@pytest.mark.parametrize("pattern", [
    "(a|aa)+$", "a*", "a+", "(ab)*c", r"\d+", "a{2}", "a{2,}", ".", "a.b", "[^a]", r"\w", r"\s", "(?i)[a-z]",
    r"(a)\1", "(?=a)", "(?!a)", "(?<=a)b", "(?i:ab)", "ab(?i)", "(?m)^a", "(?s)a", "(?x)a b", "é", "[é]", r"\bfoo",
    "(?P<x>a)(?P=x)", "(", "[", "a{1,2}", "(?a)a",
])
def test_patterns_outside_the_subset_keep_the_regex_module(pattern: str) -> None:
    assert plain_pattern(pattern) is None


def test_the_number_of_paths_is_bounded() -> None:
    assert plain_pattern("(ab|cd)?" * 6) is not None  # 3**6 = 729 paths
    assert plain_pattern("(ab|cd)?" * 8) is None  # 3**8 = 6561 > MAX_PATHS
    assert 3**6 <= MAX_PATHS < 3**8


def test_regex_search_answers_through_the_plain_path() -> None:
    m = regex_search("(?i)gemma[-_]?[234]", "google/Gemma-3-27b")
    assert isinstance(m, re.Match) and m.group() == "Gemma-3"
    assert regex_search("(?i)gemma[-_]?[234]", "qwen") is None
    assert not isinstance(regex_search("(a|aa)+$", "aaa"), re.Match)  # the regex module, with its timeout


# patterns from the subset's grammar, texts from their characters and the case-folding oddities
_CHARS = "abkKsSiI0123-_./ \n"
_TEXT = st.text(alphabet=_CHARS + "\u212a\u017f\u0130\u0131\xe9", max_size=30)


def _atoms(draw) -> str:
    kind = draw(st.sampled_from(["lit", "lit", "class", "range", "group", "alt"]))
    if kind == "lit":
        return re.escape(draw(st.sampled_from(_CHARS)))
    if kind == "class":
        return "[" + "".join(re.escape(c) for c in draw(st.lists(st.sampled_from(_CHARS), min_size=1, max_size=4))) + "]"
    if kind == "range":
        lo, hi = sorted(draw(st.lists(st.sampled_from("0123abk"), min_size=2, max_size=2)))
        return f"[{lo}-{hi}]"
    inner = [_seq(draw) for _ in range(draw(st.integers(1, 3)))]
    return ("(?:" if draw(st.booleans()) else "(") + "|".join(inner) + ")"


def _seq(draw) -> str:
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        atom = _atoms(draw) if len(parts) < 2 else re.escape(draw(st.sampled_from(_CHARS)))
        parts.append(atom + draw(st.sampled_from(["", "", "?", "??", "{0,1}"])))
    return "".join(parts)


@st.composite
def _patterns(draw) -> str:
    body = "|".join(_seq(draw) for _ in range(draw(st.integers(1, 3))))
    return (draw(st.sampled_from(["", "(?i)"])) + draw(st.sampled_from(["", "^"])) + body
            + draw(st.sampled_from(["", "$", r"\Z"])))


@settings(max_examples=300, deadline=None)
@given(_patterns(), st.lists(_TEXT, min_size=1, max_size=5))
def test_random_patterns_of_the_subset_agree_with_the_regex_module(pattern: str, texts: list[str]) -> None:
    plain = plain_pattern(pattern)
    if plain is None:  # only for i/I or a range under (?i), or (with | and ?) too many paths
        assert (pattern.startswith("(?i)") and re.search(r"[iI]|\[[^\]]+-[^\]]", pattern)) or "?" in pattern, pattern
        return
    other = regex.compile(pattern)
    for s in texts:
        a, b = plain.search(s), other.search(s)
        assert (a and (a.span(), a.groups())) == (b and (b.span(), b.groups())), (pattern, s)


def test_a_small_analyze_of_a_named_model_imports_no_regex_module(tmp_path) -> None:
    log = SAMPLE_LOGS_DIR / "v1_single_gpu.log"
    assert "model=" in log.read_text(encoding="utf-8")  # KVD001 reads the model name with matches()
    child = ("import io, json, sys\nfrom kvlogdiag.cli.main import cli\nreal = sys.stdout\nsys.stdout = io.StringIO()\n"
             "rc = cli.run(sys.argv[1:])\nsys.stdout = real\nprint(json.dumps({'rc': rc, 'regex': 'regex' in sys.modules,"
             " 'plain': 'kvlogdiag.rules.plainregex' in sys.modules}))")
    env = {**os.environ, "KVLOGDIAG_CACHE_DIR": str(tmp_path / "cache")}
    runs = [json.loads(subprocess.run([sys.executable, "-c", child, "analyze", "--format", "json", str(log)], env=env,
                                      capture_output=True, text=True, timeout=120, check=True).stdout.splitlines()[-1])
            for _ in range(2)]  # the first run fills the rule cache (a cache miss validates patterns with regex)
    assert runs[1]["rc"] in (0, 1) and runs[1]["plain"]
    assert runs[1]["regex"] is False
