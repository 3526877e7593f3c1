"""The start-up failure catalogue against its samples and the harvested messages of released vLLM.

Every sample line must match its own entry with the numbers it lists. Every harvested ``raise``
message (``kvlogdiag/catalogue/failures_harvest.json``) an entry claims is rendered with sample
values for its placeholders, framed as vLLM logs it, and fed through `StartupTracker`: the class
must come back, and so must every number the entry maps a placeholder to.
"""

from __future__ import annotations

import math
import re

import pytest

from kvlogdiag.catalogue.failures import catalogue, harvested, library_harvested, library_source, numbers_of, prefilter_keywords
from kvlogdiag.catalogue.keywords import OverlapPartners, overlap_pairs
from kvlogdiag.extract.failures import StartupTracker
from kvlogdiag.input.reader import make_line

CAT = catalogue()


def _close(a, b) -> bool:
    return isinstance(a, (int, float)) and math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-3)


@pytest.mark.parametrize("entry", CAT.entries, ids=lambda e: e.id)
def test_samples_match_their_entry(entry):
    assert entry.samples, f"{entry.id} has no sample line"
    for s in entry.samples:
        m = CAT.precursor(s["line"]) if entry.precedes else CAT.match(s["line"])
        assert m is not None, f"{entry.id}: sample not matched: {s['line']}"
        assert entry.precedes or CAT.precursor(s["line"]) is None
        assert m.entry.id == entry.id, f"{s['line']!r} matched {m.entry.id}, not {entry.id}"
        for k, v in s["numbers"].items():
            assert _close(m.numbers.get(k), v), f"{entry.id}: {k}={m.numbers.get(k)} != {v}"


def test_every_class_is_known_and_ids_unique():
    known = {"config", "memory", "block_size", "retention", "hma", "recompute", "arch", "dtype", "quant",
             "parallel", "devices", "comm", "port", "model", "tokenizer", "driver", "kernel", "ray", "connector"}
    assert {e.cls for e in CAT.entries} <= known
    assert len({e.id for e in CAT.entries}) == len(CAT.entries)


KEYS = {
    "failure": {"id", "class", "keywords", "patterns", "fix", "samples", "harvest", "harvest_numbers", "links", "extra",
                "explains", "recovered", "warning_forms", "precedes"},
    "class_hint": {"class", "message", "frames", "fix", "when_frames"},
    "echo": {"regex"}, "recovered": {"regex"}, "death": {"regex"},
}


def test_catalogue_sections_and_keys_are_known():
    """A misspelt key (``frame =`` for ``frames =``) would be ignored silently: every section and key is one the
    loader reads, and a class hint says something (a message or frames)."""
    from kvlogdiag import tomlcache
    from kvlogdiag.catalogue.failures import CATALOGUE_FILE

    with open(CATALOGUE_FILE, "rb") as fh:
        data = tomlcache.loads(fh.read().decode("utf-8"))
    assert set(data) <= set(KEYS), set(data) - set(KEYS)
    for section, items in data.items():
        for item in items:
            assert set(item) <= KEYS[section], f"[[{section}]] {item.get('id', item.get('class'))}: {set(item) - KEYS[section]}"
    assert all("message" in h or "frames" in h for h in data["class_hint"])


def test_fix_placeholders_are_numbers_of_the_entry():
    for e in CAT.entries:
        names = set(re.findall(r"\{(\w+)\}", e.fix))
        groups = set()
        for _, rx in e.patterns:
            groups |= set(rx.groupindex)
        for x in e.extra:
            groups |= set(x.groupindex)
        assert names <= groups, f"{e.id}: fix names {names - groups} that no pattern captures"


def test_unit_groups_become_gib():
    numbers, details = numbers_of({"alloc": "462.00", "alloc_unit": "MiB", "gpu": "0", "model": "x"})
    assert numbers == {"alloc_gib": 462 / 1024, "gpu": 0}
    assert details == {"model": "x"}


def test_prefilter_keywords_cover_catalogue_and_tracebacks():
    kws = prefilter_keywords()
    for e in CAT.entries:
        assert set(e.keywords) <= set(kws)
    assert {"Traceback", "Error", "ERROR", "error:", "Killed"} <= set(kws)


def test_prompt_words_do_not_pass_the_prefilter():
    """A request-log line quoting a user's prompt must not reach the extractor for a prose word in it."""
    from kvlogdiag.catalogue.patterns import prefilter_regex

    line = (b"(APIServer pid=2231) INFO 11-29 08:41:41 [logger.py:43] Received request chatcmpl-1: prompt: "
            b"'they raise an error signal when the process died', params: SamplingParams(n=1)")
    assert prefilter_regex().search(line) is not None  # 'died' stays a keyword (process deaths) ...
    assert prefilter_regex().search(line.replace(b"died", b"stops")) is None  # ... the other prose words do not


# --- harvested templates ------------------------------------------------------------------------

_PH = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


def _value_for(name: str, i: int):
    if name.endswith("_gib"):
        return round(3.25 + 7 * i, 2)
    if name in ("gmu",):
        return 0.87
    if name in ("compute_capability",):
        return 7.5
    return 1000 + 37 * i


def render(template: str, mapping: dict[str, str]) -> tuple[str, dict[str, float]]:
    """A harvested template with sample values; the numbers the mapped placeholders carry."""
    expected: dict[str, float] = {}
    out = []
    pos = 0
    i = 0
    for m in _PH.finditer(template):
        out.append(template[pos:m.start()])
        pos = m.end()
        tok = m.group(0)
        if tok in ("{{", "}}"):
            out.append(tok[0])
            continue
        expr = m.group(1)
        keys = [k for k in mapping if k in expr]
        if keys:
            name = mapping[max(keys, key=len)]
            v = expected.get(name)
            if v is None:
                v = _value_for(name, i)
                i += 1
                expected[name] = v
            out.append(str(v))
        else:  # a digit satisfies the number, word and token shapes the patterns allow around values
            out.append("7")
    out.append(template[pos:])
    return "".join(out), expected


def _claimed():
    msgs = harvested()["messages"]
    for e in CAT.entries:
        for sub in e.harvest:
            hits = [m for m in msgs if sub in m["t"] or sub in render(m["t"], {})[0]]
            yield e, sub, hits


@pytest.mark.parametrize("entry,sub,hits", list(_claimed()), ids=lambda x: getattr(x, "id", None) or (x if isinstance(x, str) else ""))
def test_harvested_messages_come_back(entry, sub, hits):
    assert hits, f"{entry.id}: no harvested raise message contains {sub!r} (stale catalogue or harvest)"
    for h in hits:
        text, expected = render(h["t"], entry.harvest_numbers)
        raw = f"(EngineCore_DP0 pid=7) ERROR 01-01 00:00:00 [core.py:1] {h['e']}: {text}"
        t = StartupTracker()
        t.feed(make_line(1, raw.encode()))
        r = t.result()
        where = f"{h['f']} {h['first']}-{h['last']}: {text[:160]}"
        assert r["failed"] and r["cause_id"] == entry.id, f"{entry.id}: got {r['cause_id']} for {where}"
        assert r["cause_class"] == entry.cls
        for k, v in expected.items():
            assert _close(r["numbers"].get(k), v), f"{entry.id}: {k}={r['numbers'].get(k)} != {v} in {where}"


def test_harvest_covers_a_spread_of_releases():
    v = harvested()["versions"]
    assert len(v["vllm"]) >= 10 and "0.4.3" in v["vllm"] and "0.32.0" in v["vllm"]
    assert v["vllm-ascend"], "no vLLM-Ascend release harvested"


def test_out_of_range_figures_are_no_numbers():
    numbers, details = numbers_of({"needed_gib": "9" * 400 + ".25", "max_model_len": "1" * 40, "gpu": "1"})
    assert numbers == {"gpu": 1}
    assert set(details) == {"needed_gib", "max_model_len"}


def test_library_harvest_covers_the_libraries_a_start_runs_through():
    v = library_harvested()["versions"]
    assert len(v["transformers"]) >= 3 and v["huggingface_hub"] and v["torch"]


@pytest.mark.parametrize("line, cls, where", [
    ("RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use "
     "the 'spawn' start method", "devices", "torch/cuda/"),
    ("AssertionError: Torch not compiled with CUDA enabled", "devices", "torch/cuda/"),
    ("ValueError: Tokenizer class LlamaTokenizerX does not exist or is not currently imported.", "tokenizer",
     "transformers/models/auto/tokenization_auto"),
    ("ValueError: Loading /models/x requires you to execute the configuration file in that repo on your local "
     "machine. Make sure you have read the code there to avoid malicious use, then set the option "
     "`trust_remote_code=True` to remove this error.", "model", "transformers/dynamic_module_utils"),
])
def test_library_messages_name_their_module_and_class(line, cls, where):
    src = library_source(line)
    assert src is not None and src[1] == cls and src[0]["f"].startswith(where)


@pytest.mark.parametrize("line", [
    "AttributeError: 'NoneType' object has no attribute 'foo'",  # transformers has `{cls} has no attribute {key}`
    "ValueError: something went wrong",
])
def test_short_generic_library_messages_name_nothing(line):
    assert library_source(line) is None


def test_an_uncatalogued_library_error_gets_the_class_of_its_module():
    t = StartupTracker()
    for i, text in enumerate([
        "(EngineCore_DP0 pid=11) ERROR 01-02 03:04:05 [core.py:700] EngineCore failed to start.",
        "(EngineCore_DP0 pid=11) ERROR 01-02 03:04:05 [core.py:700] Traceback (most recent call last):",
        '(EngineCore_DP0 pid=11) ERROR 01-02 03:04:05 [core.py:700]   File "/x/torch/cuda/__init__.py", line 3, in _lazy_init',
        "(EngineCore_DP0 pid=11) ERROR 01-02 03:04:05 [core.py:700] RuntimeError: Cannot re-initialize CUDA in forked "
        "subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method",
    ], 1):
        t.feed(make_line(i, text.encode()))
    r = t.result()
    # raised_in names torch; the class is the launch environment's start method (a class hint before the module's
    # torch/cuda → devices: every labeler of the four logs with this message read it as config)
    assert r["failed"] and r["cause_class"] == "config" and r["raised_in"]["library"] == "torch"


def test_overlapping_keywords_both_reach_their_entries():
    """"FP8 KV cache" ends where "KV cache is not supported" begins: a non-overlapping keyword search found only the
    first, so the Triton entry (dtype_not_supported_on_device) was never tried on its own message."""
    m = CAT.match("ValueError: FP8 KV cache is not supported by the Triton MLA backend on NVIDIA T4 (compute capability 7.5); "
                  "native FP8 (fp8e4nv) requires SM89+.")
    assert m is not None and m.entry.id == "dtype_not_supported_on_device"
    assert m.numbers.get("compute_capability") == 7.5


def test_every_keyword_in_a_line_makes_its_entries_candidates():
    pairs = overlap_pairs(sorted(CAT._by_kw))
    assert len(pairs) > 10
    for a, b, text in pairs:
        for e in {e.id: e for e in (*CAT._by_kw[a], *CAT._by_kw[b])}.values():
            # the entry is tried on the line: it is a candidate, so a line holding only its keywords reaches it
            # (checked through match's candidate set, the first step of match)
            assert e.id in _candidates(text), (a, b, e.id)


def _candidates(text: str) -> set[str]:
    seen: set[str] = set()
    orig = CAT.entries
    tried: list[str] = []

    class _Spy(list):
        def index(self, e):  # match sorts its candidates by catalogue position: record which ones it sorts
            tried.append(e.id)
            return orig.index(e)

    CAT.entries = _Spy(orig)
    try:
        CAT.match(text)
    finally:
        CAT.entries = orig
    seen.update(tried)
    return seen


def test_overlap_partners_are_complete():
    kws = ["Available KV cache memory", "KV cache memory (", "memory (", "cache", "you could try", "try running"]
    p = OverlapPartners(kws)
    assert p["Available KV cache memory"] == {" ": (("KV cache memory (", 15), ("memory (", 6)), "o": (("you could try", 1),)}
    assert p["you could try"] == {" ": (("try running", 3),)}
    assert p["cache"] == {}
