"""The pattern catalogue checks itself: every sample line matches, yields its groups, passes the
keyword gate and the bytes prefilter, and is dispatched by the Extractor to its handler."""

from __future__ import annotations

import pytest

from kvlogdiag.catalogue import patterns
from kvlogdiag.catalogue.patterns import catalogue, prefilter_regex
from kvlogdiag.extract.extractor import Extractor
from kvlogdiag.input.reader import make_line

CATALOGUE = catalogue()

# samples whose *groups* are known to be wrong (bugs in patterns.py, reported; fix there)
GROUP_BUGS: dict = {}  # (pattern, sample index) -> reason, for known bugs (strict xfail)

SAMPLES = [
    pytest.param(p, i, line, groups, id=f"{p.name}-{i}")
    for p in CATALOGUE
    for i, (line, groups) in enumerate(p.samples)
]
SAMPLES_GROUPS = [
    pytest.param(p, i, line, groups, id=f"{p.name}-{i}",
                 marks=[pytest.mark.xfail(reason=GROUP_BUGS[(p.name, i)], strict=True)]
                 if (p.name, i) in GROUP_BUGS else [])
    for p in CATALOGUE
    for i, (line, groups) in enumerate(p.samples)
]


def test_catalogue_is_not_trivially_small():
    # the facts document lists well over 50 line kinds; a broken import would leave few
    assert len(CATALOGUE) >= 60


def test_pattern_names_unique():
    names = [p.name for p in CATALOGUE]
    dupes = sorted({n for n in names if names.count(n) > 1})
    assert dupes == []


@pytest.mark.parametrize("p", CATALOGUE, ids=lambda p: p.name)
def test_pattern_has_samples_versions_keywords(p):
    assert len(p.samples) >= 1, f"{p.name} has no sample line"
    assert isinstance(p.versions, str) and p.versions.strip(), f"{p.name} has no versions string"
    assert p.keywords and all(isinstance(k, str) and k for k in p.keywords)


@pytest.mark.parametrize("p, i, line, groups", SAMPLES_GROUPS)
def test_sample_matches_with_expected_groups(p, i, line, groups):
    m = p.regex.search(line)
    assert m is not None, f"{p.name} sample {i} does not match"
    for name, expected in groups.items():
        assert name in p.regex.groupindex, f"{p.name}: no group {name!r}"
        assert m.group(name) == expected, f"{p.name} sample {i}: group {name}"


@pytest.mark.parametrize("p, i, line, groups", SAMPLES)
def test_sample_contains_a_keyword(p, i, line, groups):
    assert any(kw in line for kw in p.keywords), f"{p.name} sample {i} contains none of {p.keywords}"


@pytest.mark.parametrize("p, i, line, groups", SAMPLES)
def test_prefilter_accepts_sample(p, i, line, groups):
    assert prefilter_regex().search(line.encode("utf-8")) is not None


def test_prefilter_rejects_unrelated_lines():
    rx = prefilter_regex()
    for line in (
        b"INFO 07-03 14:17:08 [weight_utils.py:270] Using model weights format ['*.safetensors']",
        b"Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.9it/s]",
        b'INFO:     127.0.0.1:52344 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        b"",
    ):
        assert rx.search(line) is None, line


def test_prefilter_extra_keywords():
    rx = prefilter_regex(("SOMETHING_ELSE",))
    assert rx.search(b"xx SOMETHING_ELSE yy") is not None


def test_keyword_index_covers_every_pattern():
    idx = patterns.keyword_index()
    covered = {p.name for lst in idx.values() for p in lst}
    assert covered == {p.name for p in CATALOGUE}


def test_stats_tail_fields():
    tail = ", Preemptions: 3, GPU KV cache usage: 99.1%, Prefix cache hit rate: 35.0%"
    found = {}
    for m in patterns.STATS_TAIL.finditer(tail):
        found.update({k: v for k, v in m.groupdict().items() if v is not None})
    assert found == {"preemptions": "3", "device": "GPU", "kv_usage": "99.1", "hit": "35.0"}


# --- Extractor dispatch -------------------------------------------------------------------------


@pytest.mark.parametrize("p, i, line, groups", SAMPLES)
def test_extractor_dispatches_sample_to_its_handler(p, i, line, groups, monkeypatch):
    ex = Extractor("t")
    calls = []
    original = ex._handlers[p.name]

    def spy(m, ln, fact):
        calls.append(m.re.pattern)
        return original(m, ln, fact)

    ex._handlers[p.name] = spy
    monkeypatch.setattr(ex, "_h_" + p.name, spy)  # the stats fast path calls the method directly
    ex.feed(make_line(1, line.encode("utf-8")))
    assert calls == [p.regex.pattern], f"{p.name} sample {i} was not dispatched to its handler"


def _feed(line: str):
    ex = Extractor("t")
    ex.feed(make_line(7, line.encode("utf-8")))
    return ex.finish(7)


def _sample(name: str, i: int = 0) -> str:
    return patterns.by_name()[name].samples[i][0]


def test_dispatch_kv_available_gib():
    f = _feed(_sample("kv_available_gib"))
    assert [x.value for x in f.available] == [37.01]
    assert f.available[0].rank == "Worker_TP2"
    assert f.available[0].line == 7
    assert f.kv_sized is True


def test_dispatch_kv_available_negative():
    f = _feed(_sample("kv_available_gib", 1))
    assert [x.value for x in f.available] == [-1.66]


def test_dispatch_ascend_available_bytes():
    f = _feed(_sample("ascend_available_bytes"))
    assert len(f.kv_budget) == 1
    kind, gib, avail, total = f.kv_budget[0].value
    assert (kind, avail, total) == ("ascend_bytes", 26165529804, 65452113920)
    assert gib == 26165529804 / 1073741824
    assert {x.value for x in f.platform} == {"npu"}  # the byte line, and its [worker_v1.py:] file name


def test_dispatch_kv_cache_size_gpu():
    f = _feed(_sample("kv_cache_size"))
    assert [x.value for x in f.tokens] == [485088]
    assert f.concurrency == []


def test_dispatch_merged_npu_size_and_concurrency_line():
    f = _feed(_sample("kv_cache_size", 1))
    assert [x.value for x in f.tokens] == [1032944]
    assert [x.value for x in f.concurrency] == [(131072, 7.88)]
    assert [x.value for x in f.platform] == ["npu"]
    assert f.tokens[0].rank == "EngineCore"


def test_dispatch_max_concurrency_old_format():
    f = _feed(_sample("max_concurrency"))
    assert [x.value for x in f.concurrency] == [(32768, 13.69)]


@pytest.mark.parametrize("i, blocks, platform", [(0, 28047, ["cuda"]), (1, 1011, [])])
def test_dispatch_gpu_blocks(i, blocks, platform):
    f = _feed(_sample("gpu_blocks", i))
    assert [x.value for x in f.blocks] == [blocks]
    assert [x.value for x in f.platform] == platform
    assert [x.value for x in f.engine] == ["v0"]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("v0_profile_kv", ("v0_profile", 54.78)),
        ("v0_profile_results", ("v0_profile", 30.55)),
        ("cpu_kv_budget", ("cpu_auto", 1.48)),
        ("cpu_kvcache_space_default", ("cpu_default", 4.0)),
        ("kv_cache_memory_bytes", ("kv_cache_memory_bytes", 20.0)),
    ],
)
def test_dispatch_kv_budget_lines(name, expected):
    f = _feed(_sample(name))
    assert [x.value for x in f.kv_budget] == [expected]


def test_dispatch_insufficient_kv():
    f = _feed(_sample("insufficient_kv"))
    assert [x.value for x in f.insufficient_kv] == [
        {"max_seq_len": 2048, "needed_gib": 1.0, "available_gib": 0.26, "estimated_max_len": 512}
    ]


def test_dispatch_insufficient_kv_without_estimate():
    f = _feed(_sample("insufficient_kv", 1))
    assert f.insufficient_kv[0].value == {
        "max_seq_len": 32768, "needed_gib": 4.0, "available_gib": 2.1, "estimated_max_len": None}


def test_dispatch_insufficient_kv_v0():
    f = _feed(_sample("insufficient_kv_v0"))
    assert f.insufficient_kv[0].value == {
        "max_seq_len": 16000, "needed_gib": None, "available_gib": None, "estimated_max_len": 2368}


def test_dispatch_num_gpu_blocks_override():
    f = _feed(_sample("num_gpu_blocks_override"))
    assert [x.value for x in f.events["num_gpu_blocks_override"]] == [(30315, 512)]


def test_dispatch_kv_group_sizes():
    f = _feed(_sample("kv_group_sizes"))
    assert [x.value for x in f.events["kv_group_sizes"]] == [[16, 4096]]


def test_dispatch_no_available_memory():
    f = _feed(_sample("no_available_memory"))
    assert f.event_count("no_available_memory") == 1


def test_dispatch_v0_budget_line_sets_util_and_total():
    f = _feed(_sample("v0_profile_budget"))
    assert [x.value for x in f.config["gpu_memory_utilization"]] == [0.90]
    assert [x.value for x in f.memory["total_gib"]] == [79.10]


def test_dispatch_stats_line():
    f = _feed(_sample("stats"))
    st = f.stats
    assert (st.lines, st.running_max, st.waiting_max, st.preemptions_total, st.kv_usage_max) == (1, 64, 12, 3, 99.1)
    assert st.engines == {0}
    assert st.prefix_hit_last == 35.0


def test_recompute_runtime_counts_preemptions():
    f = _feed(_sample("recompute_runtime"))
    assert f.recompute_preemptions == 1
    assert f.recompute_first is not None and f.recompute_first.line == 7


def test_recompute_runtime_request_id():
    """The request id is the whole token, without the trailing full stop."""
    m = patterns.by_name()["recompute_runtime"].regex.search(
        "[RecomputeScheduler] Recompute triggered for request cmpl-7-0.")
    assert m is not None
    assert m.group("request") == "cmpl-7-0"


@pytest.mark.parametrize(
    "line",
    [
        # client-side benchmark output, not the server's KV line
        "Maximum request concurrency: 64",
        # checkpoint prefetch size, not a KV block size
        "INFO 03-08 08:22:30 [weight_utils.py:500] Prefetching checkpoint with block_size=16777216 bytes",
        # crash dumps list preempted ids: not a preemption warning
        "SchedulerOutput(scheduled_new_reqs=[], preempted_req_ids=[], preempted_requests=0)",
        # request-time context errors are not the startup insufficient-KV error
        "ERROR 07-03 15:00:00 [serving_chat.py:200] This model's maximum context length is 32768 tokens.",
        # the CPU swap space, not the GPU pool
        "INFO 07-03 14:17:32 [config.py:1000] CPU KV cache swap space: 4 GiB",
    ],
)
def test_distractor_lines_fill_no_kv_facts(line):
    f = _feed(line)
    assert f.available == [] and f.tokens == [] and f.blocks == [] and f.kv_budget == []
    assert f.concurrency == [] and f.insufficient_kv == []
    assert f.preemption_warning_count == 0
    assert "block_size" not in f.config
