"""Envelopes by construction (issue 13 item 2): whatever stands before the vLLM record is peeled by one
rule, the message is normalised before matching, and odd encodings and multi-container output are read.

Each envelope style is put in front of every line of every sample log, and the analysis must state the
same figures as for the bare log (line numbers aside: a blank line between every line doubles them).
The same for message-level changes (thousands separators of every locale, alignment runs, trailing
remarks), CRLF and UTF-16, and for ``docker compose logs`` output of two servers interleaved (each
container its own analysis, equal to its own bare log). Then the unit rules: what the normalisation
must never change (decimal commas, IPv4 addresses, lists of numbers, vLLM's own ``# CPU blocks``,
the logo's alignment, traceback indentation), the metadata kept, and the incremental splitter
agreeing with the file reader.
"""

from __future__ import annotations

import functools
import gzip
import io
import itertools
import json
import re
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlogdiag.cli.main import cli
from kvlogdiag.extract.extractor import Extractor
from kvlogdiag.input.incremental import LineSplitter
from kvlogdiag.input.reader import (
    Envelopes,
    LineStats,
    detect_utf16,
    iter_lines,
    make_line,
    normalise_message,
    split_envelope,
)
from kvlogdiag.pipeline import Analyzer, prefilter

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "sample_logs").glob("*.log"))

# keys that hold line numbers, texts or the path: they change with an envelope, the figures must not
_DROP = {"line", "memory_line", "tokens_line", "lines_read", "first_line", "last_line", "raw", "text", "source",
         "long_lines", "cause_raw", "last_line_of_run", "evidence", "container"}


def _figures(x):
    if isinstance(x, dict):
        return {k: _figures(v) for k, v in sorted(x.items()) if k not in _DROP and not k.endswith("_line")}
    if isinstance(x, list):
        return [_figures(v) for v in x]
    if isinstance(x, str):
        return re.sub(r"\blines? \d+(?:[-–, ]+\d+)*|:\d+\b", "", x)  # line numbers quoted in messages
    return x


def _analyse(path: Path) -> list:
    return [_figures(r.to_json("all")) for r in Analyzer().analyze_source_split(str(path))]


@functools.lru_cache(maxsize=None)
def _bare(name: str) -> str:
    return json.dumps(_analyse(ROOT / "sample_logs" / name), sort_keys=True)


def _lines(path: Path) -> list[str]:
    return [ln.rstrip("\r") for ln in path.read_bytes().decode("utf-8", "replace").split("\n")]


# --- envelopes in front of the record ---------------------------------------------------------------

ENVELOPES = {
    "docker_timestamps": lambda i, ln: f"2026-11-29T08:00:{i % 60:02d}.123456789Z {ln}",
    "cri": lambda i, ln: f"2026-11-29T08:00:00.1+00:00 stdout F {ln}",
    "kubectl_prefix": lambda i, ln: f"[pod/vllm-0/vllm] {ln}",
    "compose": lambda i, ln: f"vllm-server-1  | {ln}",
    "compose_timestamps": lambda i, ln: f"vllm-1  | 2026-11-29T08:00:{i % 60:02d}.5Z {ln}",
    "syslog": lambda i, ln: f"Nov  9 08:00:{i % 60:02d} gpu-node-1 vllm[77]: {ln}",
    "ts_moreutils": lambda i, ln: f"Dec 01 12:00:{i % 60:02d} {ln}",
    "iso_space": lambda i, ln: f"2026-11-29 08:00:00.123 {ln}",
    "bracket_timestamp": lambda i, ln: f"[2026-11-29 08:00:00] {ln}",
    "python_logging": lambda i, ln: f"2025-01-01 12:00:00,123 - wrapper.vllm - INFO - {ln}",
    "quote": lambda i, ln: f"> {ln}",
    "nested_quote": lambda i, ln: f">> {ln}",
    "dash_bullet": lambda i, ln: f"- {ln}",
    "star_bullet": lambda i, ln: f"* {ln}",
    "grep_n": lambda i, ln: f"{i}:{ln}",
    "grep_file_n": lambda i, ln: f"logs/server.log:{i}:{ln}",
    "editor_numbers": lambda i, ln: f"{i:6d}  {ln}",
    "cat_n": lambda i, ln: f"{i:6d}\t{ln}",
    "shell_prompt": lambda i, ln: f"$ {ln}",
    "tab": lambda i, ln: f"\t{ln}",
    "indent": lambda i, ln: f"    {ln}",
    "comment": lambda i, ln: f"# {ln}",
    "table_cell": lambda i, ln: f"| {i} | {ln} |",
    "inline_code": lambda i, ln: f"`{ln}`",
    "table_inline_code": lambda i, ln: f"| `{ln}` |",
    "blank_between": lambda i, ln: f"{ln}\n",
}


def _regroup(sep: str):
    """vLLM's own ``{:,}`` numbers (and counts before ``tokens``) regrouped with another separator."""
    def f(i: int, ln: str) -> str:
        ln = re.sub(r"(?<![\d,])(\d{1,3}(?:,\d{3})+)(?![\d,])", lambda m: m.group(1).replace(",", sep), ln)
        return re.sub(r"(?<![\d.,])(\d{2,3})(\d{3}) tokens", lambda m: f"{m.group(1)}{sep}{m.group(2)} tokens", ln)
    return f


MESSAGE_STYLES = {
    "thousands_dot": _regroup("."),
    "thousands_space": _regroup(" "),
    "thousands_apostrophe": _regroup("'"),
    "thousands_right_quote": _regroup("\u2019"),
    "thousands_narrow_nbsp": _regroup("\u202f"),
    "thousands_nbsp": _regroup("\u00a0"),
    "thousands_thin_space": _regroup("\u2009"),
    "alignment": lambda i, ln: re.sub(r"(\] [^:]{3,60}:) (?=[\d-])", r"\1      ", ln),
    "trailing_remark": lambda i, ln: ln + "   # remark from the user",
    "crlf": lambda i, ln: ln + "\r",
}


def _write(tmp_path: Path, sample: Path, style) -> Path:
    out = "\n".join(style(i + 1, ln) if ln else ln for i, ln in enumerate(_lines(sample)))
    path = tmp_path / sample.name
    path.write_bytes(out.encode("utf-8"))
    return path


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("style", sorted(ENVELOPES) + sorted(MESSAGE_STYLES))
def test_style_gives_the_figures_of_the_bare_log(tmp_path, style, sample):
    fn = ENVELOPES.get(style) or MESSAGE_STYLES[style]
    got = json.dumps(_analyse(_write(tmp_path, sample, fn)), sort_keys=True)
    assert got == _bare(sample.name), f"{style} in front of {sample.name} changed the figures"


def test_the_styles_do_change_the_input(tmp_path):
    """The comparison above is not vacuous: every style rewrites lines that carry figures."""
    sample = ROOT / "sample_logs" / "v1_tp4_workers.log"
    kv = next(ln for ln in _lines(sample) if "GPU KV cache size" in ln)
    for name, fn in {**ENVELOPES, **MESSAGE_STYLES}.items():
        assert fn(1, kv) != kv, name
    assert "485,648" in kv and "485.648" in MESSAGE_STYLES["thousands_dot"](1, kv)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("encoding, bom", [("utf-16-le", True), ("utf-16-le", False), ("utf-16-be", True),
                                           ("utf-16-be", False)])
def test_utf16_gives_the_figures_of_the_bare_log(tmp_path, sample, encoding, bom):
    text = "\r\n".join(_lines(sample))  # PowerShell's redirect: UTF-16 with CRLF
    data = (("\ufeff" if bom else "") + text).encode(encoding)
    path = tmp_path / "ps.log"
    path.write_bytes(data)
    assert json.dumps(_analyse(path), sort_keys=True) == _bare(sample.name)
    gz = tmp_path / "ps.log.gz"
    gz.write_bytes(gzip.compress(data))
    assert json.dumps(_analyse(gz), sort_keys=True) == _bare(sample.name)


def test_utf16_detection():
    ascii_le = "INFO 05-06 12:00:00 [core.py:1] hello\n".encode("utf-16-le")
    assert detect_utf16(b"\xff\xfe" + ascii_le) == "utf-16"
    assert detect_utf16(ascii_le) == "utf-16-le"
    assert detect_utf16("INFO 05-06 12:00:00 [core.py:1] hello\n".encode("utf-16-be")) == "utf-16-be"
    assert detect_utf16(b"INFO 05-06 12:00:00 [core.py:1] hello\n") is None
    assert detect_utf16(b"\xff\xfe\x00\x00abc") is None  # UTF-32 LE is not UTF-16
    assert detect_utf16("日本語のログ".encode("utf-8") * 4) is None


def test_utf8_bom_is_dropped():
    ln = make_line(1, "\ufeffINFO 05-06 12:00:00 [core.py:1] GPU KV cache size: 1,024 tokens".encode())
    assert ln.text.startswith("INFO ") and ln.meta is None


# --- several containers interleaved -----------------------------------------------------------------

PAIRS = [("v1_tp4_workers.log", "v0_063_single_gpu.log"), ("insufficient_kv_215000.log", "v1_dp2_tp4.log"),
         ("ascend_dsv4_d_node.log", "hma_disabled_swa.log")]


@pytest.mark.parametrize("a, b", PAIRS)
@pytest.mark.parametrize("prefix", ["{name}  | ", "{name} | 2026-11-29T08:00:00.1Z ", "[pod/{name}/vllm] "])
def test_interleaved_containers_are_analysed_apart(tmp_path, a, b, prefix):
    la, lb = _lines(ROOT / "sample_logs" / a), _lines(ROOT / "sample_logs" / b)
    pa, pb = prefix.format(name="vllm-a-1"), prefix.format(name="vllm-b-1")
    out = ["Attaching to vllm-a-1, vllm-b-1"]
    for x, y in itertools.zip_longest(la, lb):
        if x:
            out.append(pa + x)
        if y:
            out.append(pb + y)
    path = tmp_path / "compose.log"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    results = Analyzer().analyze_source_split(str(path))
    by_name = {r.container: r for r in results}  # in order of each container's first candidate line
    want = {"vllm-a-1": a, "vllm-b-1": b} if prefix.startswith("{") else {"vllm-a-1/vllm": a, "vllm-b-1/vllm": b}
    assert sorted(by_name) == sorted(want) and len(results) == 2
    for name, sample in want.items():
        assert json.dumps([_figures(by_name[name].to_json("all"))], sort_keys=True) == _bare(sample), name
        assert all(run.container == name for run in by_name[name].runs)


def test_analyze_json_has_one_entry_per_container(tmp_path):
    from click.testing import CliRunner

    la = _lines(ROOT / "sample_logs" / "v1_tp4_workers.log")
    lb = _lines(ROOT / "sample_logs" / "v0_063_single_gpu.log")
    rows = [f"a-1  | {x}" for x in la if x] + [f"b-1  | {y}" for y in lb if y]
    path = tmp_path / "c.log"
    path.write_text("\n".join(rows) + "\n")
    res = CliRunner().invoke(cli, ["analyze", "--format", "json", str(path)])
    doc = json.loads(res.output)
    jsonschema.validate(doc, json.loads((ROOT / "docs" / "analysis.schema.json").read_text(encoding="utf-8")))
    assert [(e["source"], e["container"]) for e in doc["analyses"]] == [(str(path), "a-1"), (str(path), "b-1")]
    assert doc["analyses"][0]["vllm"]["version"] == "0.10.2" and doc["analyses"][1]["vllm"]["version"] == "0.6.3.post1"
    text = CliRunner().invoke(cli, ["analyze", str(path)]).output
    assert f"== {path} [container a-1]" in text and f"== {path} [container b-1]" in text
    plain = CliRunner().invoke(cli, ["analyze", "--format", "json", str(ROOT / "sample_logs" / "v1_tp4_workers.log")])
    assert "container" not in json.loads(plain.output)["analyses"][0]  # a log of one server: no new key


# --- the rule itself, line by line --------------------------------------------------------------------

BODY = "INFO 07-03 14:19:40 [gpu_worker.py:298] Available KV cache memory: 37.01 GiB"


@pytest.mark.parametrize("raw, meta", [
    (f"vllm-1  | (Worker_TP0 pid=9) {BODY}", {"container": "vllm-1"}),
    (f"[pod/vllm-0/c] {BODY}", {"container": "vllm-0/c"}),
    (f"vllm-1  | 2026-11-29T08:00:00.5Z {BODY}", {"container": "vllm-1", "timestamp": "2026-11-29T08:00:00.5Z"}),
    (f"> {BODY}", {"prefix": "> "}),
    (f"  12\t{BODY}", {"prefix": "  12\t"}),
    (f"| 3 | `{BODY}` |", {"prefix": "| 3 | `"}),
    (f"2025-01-01 12:00:00,123 - app - INFO - {BODY}", {"prefix": "2025-01-01 12:00:00,123 - app - INFO - "}),
])
def test_what_precedes_the_head_is_metadata(raw, meta):
    text, rank, got = split_envelope(raw)
    assert text == BODY
    assert {k: v for k, v in (got or {}).items() if k != "ip"} == meta


def test_a_head_quoted_inside_a_message_is_not_a_head():
    raw = "INFO 07-03 14:19:40 [multiproc.py:10] Killing (VllmWorkerProcess pid=77) now, see INFO 07-03 14:19:41 x"
    assert split_envelope(raw) == (raw, None, None)


def test_headless_lines_take_the_envelope_the_input_showed():
    envs = Envelopes()
    rows = [f"vllm-1  | {BODY}", "vllm-1  | Traceback (most recent call last):",
            'vllm-1  |   File "/x/core.py", line 3, in run', "vllm-1  |     raise ValueError(msg)",
            "vllm-1  | ValueError: No available memory for the cache blocks.", "vllm-1  | some print of a library"]
    lines = [make_line(i, r.encode(), envs) for i, r in enumerate(rows, 1)]
    assert [ln.text for ln in lines[1:]] == ["Traceback (most recent call last):", '  File "/x/core.py", line 3, in run',
                                             "    raise ValueError(msg)",
                                             "ValueError: No available memory for the cache blocks.",
                                             "some print of a library"]
    assert all(ln.meta == {"container": "vllm-1"} for ln in lines)


def test_headless_lines_without_learnt_envelope_peel_only_before_a_known_start():
    assert make_line(1, b"> ValueError: boom").text == "ValueError: boom"
    assert make_line(1, b">   File \"x.py\", line 1").text == '  File "x.py", line 1'
    assert make_line(1, b"- an ordinary bullet of prose").text == "- an ordinary bullet of prose"
    # a container of any name before a known message; a table row is not a container
    assert make_line(1, b"my-vllm  | Traceback (most recent call last):").meta == {"container": "my-vllm"}
    assert make_line(1, b"Model | TP | notes").meta is None
    # python logging as fastchat writes it keeps its level field (the start-up tracker reads it)
    raw = b"2024-02-20 21:46:23 | ERROR | stderr | ValueError: x"
    assert make_line(1, raw).text == raw.decode()


# --- inside the message -------------------------------------------------------------------------------

@pytest.mark.parametrize("text, want", [
    ("GPU KV cache size: 2.918.000 tokens", "GPU KV cache size: 2918000 tokens"),
    ("GPU KV cache size: 485.088 tokens", "GPU KV cache size: 485088 tokens"),
    ("GPU KV cache size: 2 918 000 tokens", "GPU KV cache size: 2918000 tokens"),
    ("GPU KV cache size: 2'918'000 tokens", "GPU KV cache size: 2918000 tokens"),
    ("GPU KV cache size: 2\u202f918\u202f000 tokens", "GPU KV cache size: 2918000 tokens"),
    ("# GPU blocks: 2\u00a0918", "# GPU blocks: 2918"),
    ("GPU KV cache size: 485,088 tokens", "GPU KV cache size: 485,088 tokens"),  # vLLM's own: patterns read it
    ("Available KV cache memory: 33,40 GiB", "Available KV cache memory: 33,40 GiB"),  # a decimal comma
    ("Available KV cache memory: 1,234 GiB", "Available KV cache memory: 1,234 GiB"),
    ("Loading weights took 28.483 GiB", "Loading weights took 28.483 GiB"),  # one dot is a decimal point
    ("master at 10.100.200.100:29500", "master at 10.100.200.100:29500"),
    ("capture sizes [512,504,496]", "capture sizes [512,504,496]"),
    ("capture sizes [ 1 2 4 ... 256 512]", "capture sizes [ 1 2 4 ... 256 512]"),
    ("INFO 07-03 14:19:40 [x.py:1] Available KV cache memory:      37.01 GiB",
     "INFO 07-03 14:19:40 [x.py:1] Available KV cache memory: 37.01 GiB"),
    ("ERROR 07-03 14:19:40 [core.py:718]     raise ValueError(x)", "ERROR 07-03 14:19:40 [core.py:718]     raise ValueError(x)"),
    ("INFO 07-03 14:19:40 [x.py:1] Maximum concurrency for 32768 tokens per request: 13.69x  # TP0",
     "INFO 07-03 14:19:40 [x.py:1] Maximum concurrency for 32768 tokens per request: 13.69x"),
    ("INFO 12-12 22:54:40 llm_engine.py:1] # GPU blocks: 7455, # CPU blocks: 2048",
     "INFO 12-12 22:54:40 llm_engine.py:1] # GPU blocks: 7455, # CPU blocks: 2048"),
    ("INFO 06-13 20:03:12 [api_utils.py:339]  \u2584\u2584 \u2588     \u2588  version 0.22.1",
     "INFO 06-13 20:03:12 [api_utils.py:339]  \u2584\u2584 \u2588     \u2588  version 0.22.1"),
])
def test_normalise_message(text, want):
    assert normalise_message(text) == want


def _tokens(line: str) -> list[int]:
    ex = Extractor("t")
    ex.feed(make_line(1, line.encode("utf-8")))
    return [f.value for f in ex.finish(1).tokens]


_SEPS = [",", ".", " ", "'", "\u2019", "\u202f", "\u00a0", "\u2009", ""]
_ENVS = ["", "> ", "vllm-1  | ", "2026-11-29T08:00:00.1Z ", "  17\t", "| 4 | ", "- ", "$ ", "# "]


@settings(max_examples=300, derandomize=True, deadline=None)
@given(n=st.integers(min_value=1, max_value=99_999_999), sep=st.sampled_from(_SEPS), env=st.sampled_from(_ENVS),
       pad=st.integers(min_value=1, max_value=6), remark=st.booleans())
def test_any_separator_any_envelope_round_trips(n, sep, env, pad, remark):
    grouped = f"{n:,}".replace(",", sep)
    line = (f"{env}(EngineCore_DP0 pid=1) INFO 07-03 14:19:41 [kv_cache_utils.py:864] GPU KV cache size:"
            f"{' ' * pad}{grouped} tokens" + ("   # measured on node 2" if remark else ""))
    assert _tokens(line) == [n]


@settings(max_examples=100, derandomize=True, deadline=None)
@given(whole=st.integers(min_value=0, max_value=999), frac=st.integers(min_value=0, max_value=99))
def test_a_decimal_comma_never_becomes_a_bigger_number(whole, frac):
    line = f"INFO 07-03 14:19:40 [gpu_worker.py:298] Available KV cache memory: {whole},{frac:02d} GiB"
    ex = Extractor("t")
    ex.feed(make_line(1, line.encode()))
    got = [f.value for f in ex.finish(1).available]
    assert got in ([], [float(f"{whole}.{frac:02d}")]), got  # read right or not read, never 3340


# --- the incremental splitter agrees with the file reader ------------------------------------------------

@settings(max_examples=30, derandomize=True, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=4000), min_size=1, max_size=40))
def test_incremental_splitter_peels_like_the_reader(cuts):
    rows = _lines(ROOT / "sample_logs" / "insufficient_kv_215000.log")
    data = "\n".join(f"vllm-1  | {r}" if i % 3 else f"> {r}" for i, r in enumerate(rows) if r).encode() + b"\n"
    want = [(ln.number, ln.text, ln.rank, ln.meta) for ln in iter_lines(io.BytesIO(data), "m", prefilter(), LineStats())]
    sp = LineSplitter(prefilter())
    got, pos = [], 0
    for c in itertools.cycle(cuts):
        if pos >= len(data):
            break
        got += sp.feed(data[pos: pos + c])
        pos += c
    got += sp.end()
    assert [(ln.number, ln.text, ln.rank, ln.meta) for ln in got] == want


def test_one_custom_named_container_stays_one_analysis(tmp_path):
    """A compose service with its own container_name: the launch echo before the first vLLM line
    belongs to it (a known start follows the prefix), so the log stays one analysis, with the command's
    settings."""
    rows = ["vllm  | + vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.85"]
    rows += [f"vllm  | {ln}" for ln in _lines(ROOT / "sample_logs" / "v1_single_gpu.log") if ln]
    path = tmp_path / "one.log"
    path.write_text("\n".join(rows) + "\n")
    results = Analyzer().analyze_source_split(str(path))
    assert [r.container for r in results] == ["vllm"]


def _two_servers(names: tuple[str, str] = ("vllm-a-1", "vllm-b-1"), interleave: bool = True) -> str:
    """A compose-style log of two servers (vLLM 0.10.2 TP4 and 0.6.3.post1), interleaved or one after the other."""
    la = _lines(ROOT / "sample_logs" / "v1_tp4_workers.log")
    lb = _lines(ROOT / "sample_logs" / "v0_063_single_gpu.log")
    if interleave:
        out = [f"{n}  | {x}" for pair in itertools.zip_longest(la, lb) for n, x in zip(names, pair) if x]
    else:
        out = [f"{names[0]}  | {x}" for x in la if x] + [f"{names[1]}  | {y}" for y in lb if y]
    return "\n".join(out) + "\n"


def test_scan_gives_rows_per_container_never_merged(tmp_path):
    from kvlogdiag.modes.scan import analyze_file

    path = tmp_path / "compose.log"
    path.write_text(_two_servers(), encoding="utf-8")
    rows = analyze_file(Analyzer(), str(path), str(path), 1 << 30)
    assert [(r["container"], r["vllm_version"]) for r in rows] == [("vllm-a-1", "0.10.2"), ("vllm-b-1", "0.6.3.post1")]
    single = analyze_file(Analyzer(), "x", str(ROOT / "sample_logs" / "v1_tp4_workers.log"), 1 << 30)
    assert [r["container"] for r in single] == [None]


def test_report_of_a_multi_container_log_names_the_container(tmp_path):
    from click.testing import CliRunner

    path = tmp_path / "c.log"
    path.write_text(_two_servers(("a-1", "b-1"), interleave=False))
    res = CliRunner().invoke(cli, ["report", str(path)])
    assert res.exit_code == 2 and "interleaves 2 containers (a-1, b-1)" in res.output and "--container" in res.output
    res = CliRunner().invoke(cli, ["report", "--container", "b-1", str(path)])
    assert res.exit_code in (0, 1) and "0.6.3.post1" in res.output and "0.10.2" not in res.output
    res = CliRunner().invoke(cli, ["report", "--container", "zz", str(path)])
    assert res.exit_code == 2 and "no container 'zz'" in res.output


def test_estimate_refuses_a_multi_container_log(tmp_path):
    from kvlogdiag.modes.estimate import EstimateError, read_log

    path = tmp_path / "c.log"
    path.write_text(_two_servers(("a-1", "b-1"), interleave=False))
    with pytest.raises(EstimateError, match="interleaves 2 containers"):
        read_log(str(path))


def test_watch_analyses_one_container_and_says_so(tmp_path):
    import subprocess
    import sys

    data = _two_servers().encode()
    res = subprocess.run([sys.executable, "-m", "kvlogdiag", "watch", "--format", "json"], input=data,
                         capture_output=True, timeout=300, cwd=ROOT)
    assert res.stdout == data  # every byte passes through
    events = [json.loads(x) for x in res.stderr.decode().splitlines() if x.startswith("{")]
    notes = [e for e in events if e.get("event") == "note" and "another container (vllm-b-1)" in e.get("message", "")]
    assert len(notes) == 1
    summaries = [e for e in events if e.get("event") == "summary"]
    assert summaries and all(e["vllm"]["version"] == "0.10.2" and e["runs"] == 1 for e in summaries)
    assert summaries[-1]["config"]["model"] == "meta-llama/Llama-3.1-70B-Instruct"  # vllm-a-1's, not merged


@pytest.mark.parametrize("line, message", [
    # a Markdown code span around torch.distributed's "[rank0]: " prefix: the backtick is the envelope, the
    # rank prefix stays with the message (the start-up tracker reads it as the rank and strips it)
    ("`[rank0]: ValueError: Model architectures ['X'] are not supported for now.`",
     "[rank0]: ValueError: Model architectures ['X'] are not supported for now."),
    ("> `[rank12]: RuntimeError: NCCL error`", "[rank12]: RuntimeError: NCCL error"),
    # any other bracketed label is still an envelope part, with or without a colon after it
    ("`[worker-3] ValueError: bad value`", "ValueError: bad value"),
])
def test_torch_rank_prefix_is_not_an_envelope(line, message):
    from kvlogdiag.input.reader import split_envelope
    assert split_envelope(line)[0] == message


def test_backticked_rank_line_gives_the_cause_without_a_stray_colon(tmp_path):
    from click.testing import CliRunner
    p = tmp_path / "pasted.log"
    p.write_text("`[rank0]: ValueError: Model architectures ['X'] are not supported for now.`\n")
    out = json.loads(CliRunner().invoke(cli, ["analyze", "--format", "json", str(p)]).output)
    startup = out["analyses"][0]["startup"]
    assert startup["cause_text"].startswith("ValueError: Model architectures")
    assert startup["exception"] == "ValueError" and startup["process"] == "rank0"
