"""pyrepr.py: safe parsing of the Python reprs and key=value configs vLLM prints."""

from __future__ import annotations

import math

import pytest
from conftest import DATA_DIR
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlogdiag.extract.pyrepr import CLASS_KEY, parse_json_or_repr, parse_repr, scalar, split_key_values
from kvlogdiag.input.reader import make_line


def engine_lines() -> list[str]:
    text = (DATA_DIR / "engine_config_lines.txt").read_text(encoding="utf-8")
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def engine_body(index: int) -> str:
    line = make_line(1, engine_lines()[index].encode("utf-8"))
    return line.text.split(" with config: ", 1)[1]


# --- parse_repr -----------------------------------------------------------------------------------


def test_nested_kv_transfer_config():
    text = ("{'model_tag': 'Qwen/Qwen3-32B', 'kv_transfer_config': KVTransferConfig(kv_connector='MultiConnector', "
            "kv_role='kv_consumer', kv_connector_extra_config={'connectors': [{'kv_connector': 'MooncakeConnectorV1'}, "
            "{'kv_connector': 'RecomputeCPUOffloadConnector'}]}), 'max_model_len': 131072}")
    assert parse_repr(text) == {
        "model_tag": "Qwen/Qwen3-32B",
        "kv_transfer_config": {
            CLASS_KEY: "KVTransferConfig",
            "kv_connector": "MultiConnector",
            "kv_role": "kv_consumer",
            "kv_connector_extra_config": {"connectors": [
                {"kv_connector": "MooncakeConnectorV1"}, {"kv_connector": "RecomputeCPUOffloadConnector"}]},
        },
        "max_model_len": 131072,
    }


def test_scalars():
    text = ("{'a': True, 'b': False, 'c': None, 'd': 0.95, 'e': -3, 'f': -1.5e-05, 'g': 1e+16, "
            "'h': <CompilationLevel.PIECEWISE: 3>, 'i': torch.bfloat16, 'j': -0.5, 'k': inf, 'l': -inf, 'm': 1_000}")
    got = parse_repr(text)
    assert got == {"a": True, "b": False, "c": None, "d": 0.95, "e": -3, "f": -1.5e-05, "g": 1e16,
                   "h": "<CompilationLevel.PIECEWISE: 3>", "i": "torch.bfloat16", "j": -0.5,
                   "k": math.inf, "l": -math.inf, "m": 1000}
    assert type(got["e"]) is int and type(got["d"]) is float and got["a"] is True


def test_top_level_scalars():
    assert parse_repr("42") == 42
    assert parse_repr("-7") == -7
    assert parse_repr("0.9") == 0.9
    assert parse_repr("None") is None
    assert parse_repr("'x'") == "x"
    assert math.isnan(parse_repr("nan"))


def test_strings_with_commas_quotes_escapes():
    text = r"""{'s': 'a, b: c}', 't': "it's", 'u': 'x\'y', 'v': 'tab\there', 'w': 'back\\slash', 'x': '\n'}"""
    assert parse_repr(text) == {"s": "a, b: c}", "t": "it's", "u": "x'y", "v": "tab\there",
                                "w": "back\\slash", "x": "\n"}


def test_string_numeric_escapes():
    text = r"""['\x07', '\u2028', '\U0001f600', '\0', '\101', '\N{BULLET}', '\q']"""
    assert parse_repr(text) == ["\x07", "\u2028", "\U0001f600", "\x00", "A", "\u2022", "\\q"]


def test_string_prefixes():
    assert parse_repr(r"[b'ab\x00', r'\d+', u'x']") == ["ab\x00", "\\d+", "x"]


def test_tuples_lists_sets():
    assert parse_repr("((1, 2), [3], (4,), ())") == ((1, 2), [3], (4,), ())
    assert parse_repr("{1, 2, 3}") == [1, 2, 3]
    assert parse_repr("{}") == {}


def test_enum_with_nested_angles_and_tuple():
    text = "{'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'f': <function <lambda> at 0x7f3>, 'n': 1}"
    assert parse_repr(text) == {"cudagraph_mode": "<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>",
                                "f": "<function <lambda> at 0x7f3>", "n": 1}


def test_call_with_positional_args():
    assert parse_repr("Foo(1, 'a', x=2)") == {CLASS_KEY: "Foo", "x": 2, "args": [1, "a"]}


def test_namespace():
    text = "Namespace(subparser='serve', model_tag='m', max_model_len=None, block_size=16, gpu_memory_utilization=0.9)"
    assert parse_repr(text) == {CLASS_KEY: "Namespace", "subparser": "serve", "model_tag": "m",
                                "max_model_len": None, "block_size": 16, "gpu_memory_utilization": 0.9}


def test_cut_off_dict_keeps_pairs_before_the_cut():
    assert parse_repr("{'a': 1, 'b': 'two', 'c': [1, 2") == {"a": 1, "b": "two", "c": [1, 2]}
    assert parse_repr("{'a': 1, 'b") == {"a": 1}
    assert parse_repr("{'a': 1, 'b': ") == {"a": 1, "b": None}
    assert parse_repr("{'a': 1, 'b': 'unterminated") == {"a": 1, "b": None}


def test_cut_inside_nested_config_keeps_nested_pairs():
    text = ("{'tensor_parallel_size': 4, 'kv_transfer_config': KVTransferConfig(kv_connector='NixlConnector', "
            "kv_role='kv_both', kv_connector_extra_config={'backends': ['UC")
    assert parse_repr(text) == {
        "tensor_parallel_size": 4,
        "kv_transfer_config": {CLASS_KEY: "KVTransferConfig", "kv_connector": "NixlConnector",
                               "kv_role": "kv_both", "kv_connector_extra_config": {"backends": []}},
    }


def test_cut_namespace():
    assert parse_repr("Namespace(model='m', tensor_parallel_size=2, max_model_len=40") == {
        CLASS_KEY: "Namespace", "model": "m", "tensor_parallel_size": 2, "max_model_len": 40}
    assert parse_repr("Namespace(model='m', block_size=") == {CLASS_KEY: "Namespace", "model": "m", "block_size": None}


def test_missing_comma_in_dict_read_leniently():
    assert parse_repr("{'a': 1 'b': 2}") == {"a": 1, "b": 2}


@pytest.mark.parametrize("text", ["@@@ garbage", "", "   ", "}", ")", ":::", "{**kwargs}", "=1"])
def test_garbage_never_raises(text):
    parse_repr(text)


def test_garbage_returns_text():
    assert parse_repr("@@@ garbage") == "@@@ garbage"
    assert parse_repr("") == ""


def test_deep_nesting_does_not_raise():
    assert isinstance(parse_repr("[" * 5000), list)
    assert isinstance(parse_repr("{'a': " * 5000), dict)
    assert isinstance(parse_json_or_repr("[" * 100000), list)
    assert isinstance(parse_json_or_repr("[" * 5000 + "]" * 5000), list)


# --- parse_json_or_repr ---------------------------------------------------------------------------


def test_parse_json_or_repr_json():
    text = ' {"kv_connector":"NixlConnector","kv_role":"kv_both","kv_buffer_size":5e9,"extra":{"x":[1,true,null]}} '
    assert parse_json_or_repr(text) == {"kv_connector": "NixlConnector", "kv_role": "kv_both",
                                        "kv_buffer_size": 5e9, "extra": {"x": [1, True, None]}}


def test_parse_json_or_repr_falls_back_to_repr():
    assert parse_json_or_repr("{'recompute_scheduler_enable': True}") == {"recompute_scheduler_enable": True}
    assert parse_json_or_repr("KVTransferConfig(kv_role='kv_producer')") == {
        CLASS_KEY: "KVTransferConfig", "kv_role": "kv_producer"}


# --- split_key_values -----------------------------------------------------------------------------


def test_split_engine_config_v02_double_space_and_json_compilation_config():
    kv = split_key_values(engine_body(0))
    assert kv["model"] == "'Qwen/Qwen3-32B'"
    assert kv["max_seq_len"] == "131072"
    assert kv["tensor_parallel_size"] == "4"
    assert kv["kv_cache_dtype"] == "auto"  # followed by ",  device_config=" (double space)
    assert kv["device_config"] == "cuda"
    assert kv["dtype"] == "torch.bfloat16"
    assert kv["load_format"] == "LoadFormat.AUTO"
    assert kv["override_neuron_config"] == "{}"
    assert kv["decoding_config"].startswith("DecodingConfig(backend='auto', ")
    assert kv["decoding_config"].endswith("reasoning_backend='qwen3')")
    assert kv["served_model_name"] == "Qwen/Qwen3-32B"
    assert kv["chunked_prefill_enabled"] == "True"
    assert list(kv) == [
        "model", "speculative_config", "tokenizer", "skip_tokenizer_init", "tokenizer_mode", "revision",
        "override_neuron_config", "tokenizer_revision", "trust_remote_code", "dtype", "max_seq_len", "download_dir",
        "load_format", "tensor_parallel_size", "pipeline_parallel_size", "disable_custom_all_reduce", "quantization",
        "enforce_eager", "kv_cache_dtype", "device_config", "decoding_config", "observability_config", "seed",
        "served_model_name", "num_scheduler_steps", "multi_step_stream_outputs", "enable_prefix_caching",
        "chunked_prefill_enabled", "use_async_output_proc", "pooler_config", "compilation_config"]
    cc = parse_json_or_repr(kv["compilation_config"])
    assert cc["level"] == 3
    assert cc["splitting_ops"] == ["vllm.unified_attention", "vllm.unified_attention_with_output", "vllm.mamba_mixer2"]
    assert cc["cudagraph_capture_sizes"][:3] == [512, 504, 496] and len(cc["cudagraph_capture_sizes"]) == 67
    assert cc["max_capture_size"] == 512 and cc["local_cache_dir"] is None


def test_split_engine_config_v10_repr_compilation_config():
    kv = split_key_values(engine_body(1))
    assert kv["model"] == "'/gpt-oss-120b'"
    assert kv["max_seq_len"] == "131072"
    assert kv["tensor_parallel_size"] == "2"
    assert kv["data_parallel_size"] == "1"
    assert kv["quantization"] == "mxfp4"
    assert kv["enable_chunked_prefill"] == "True"
    assert kv["structured_outputs_config"].startswith("StructuredOutputsConfig(backend='auto'")
    assert list(kv) == [
        "model", "speculative_config", "tokenizer", "skip_tokenizer_init", "tokenizer_mode", "revision",
        "tokenizer_revision", "trust_remote_code", "dtype", "max_seq_len", "download_dir", "load_format",
        "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "disable_custom_all_reduce",
        "quantization", "enforce_eager", "enable_return_routed_experts", "kv_cache_dtype", "device_config",
        "structured_outputs_config", "observability_config", "seed", "served_model_name", "enable_prefix_caching",
        "enable_chunked_prefill", "pooler_config", "compilation_config"]
    cc = parse_json_or_repr(kv["compilation_config"])
    assert cc["mode"] == "<CompilationMode.VLLM_COMPILE: 3>"
    assert cc["cudagraph_mode"] == "<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>"
    assert cc["compile_ranges_split_points"] == [8192]
    assert cc["max_cudagraph_capture_size"] == 1024
    assert cc["dynamic_shapes_config"] == {"type": "<DynamicShapesType.BACKED: 'backed'>",
                                           "evaluate_guards": False, "assume_32_bit_indexing": True}
    assert cc["static_all_moe_layers"] == []


def test_split_double_space_quirk():
    assert split_key_values("kv_cache_dtype=auto,  device_config=cuda, seed=0") == {
        "kv_cache_dtype": "auto", "device_config": "cuda", "seed": "0"}


def test_split_nested_commas_and_quotes():
    text = ("model='a, b=c', compilation_config={\"level\": 3, \"x\": [1, 2]}, "
            "observability_config=ObservabilityConfig(a=1, b='x, y=z'), use_cached_outputs=False, ")
    assert split_key_values(text) == {
        "model": "'a, b=c'", "compilation_config": '{"level": 3, "x": [1, 2]}',
        "observability_config": "ObservabilityConfig(a=1, b='x, y=z')", "use_cached_outputs": "False"}


def test_split_apostrophe_inside_unquoted_value():
    assert split_key_values("served_model_name=Bob's-model, max_seq_len=4096, kv_cache_dtype=auto") == {
        "served_model_name": "Bob's-model", "max_seq_len": "4096", "kv_cache_dtype": "auto"}


def test_split_no_keys():
    assert split_key_values("") == {}
    assert split_key_values("not a config") == {}


@pytest.mark.parametrize(
    "raw, expected",
    [("'m'", "m"), ("4096", 4096), ("0.9", 0.9), ("True", True), ("False", False), ("None", None),
     ("", None), ("auto", "auto"), ("torch.bfloat16", "torch.bfloat16"), ("{'a': 1}", {"a": 1}),
     ('{"level":3}', {"level": 3}), ("-1", -1)],
)
def test_scalar(raw, expected):
    assert scalar(raw) == expected


# --- properties -----------------------------------------------------------------------------------

_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
_key = st.text() | st.integers() | st.booleans() | st.none()
_values = st.recursive(
    _leaf,
    lambda children: (st.lists(children, max_size=5)
                      | st.tuples(children, children)
                      | st.dictionaries(_key, children, max_size=5)),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values)
def test_parse_repr_round_trips_python_repr(value):
    assert parse_repr(repr(value)) == value


_reprish = st.text(alphabet="{}[]()<>'\",:=\\ .-+0123456789eEabxuNTrueFalsNonij_\n\t", max_size=80)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=200), _reprish))
def test_parsers_never_raise_on_arbitrary_text(text):
    parse_repr(text)
    parse_json_or_repr(text)
    split_key_values(text)
    scalar(text)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True), _values, min_size=1, max_size=6))
def test_split_key_values_recovers_every_key(d):
    text = ", ".join(f"{k}={v!r}" for k, v in d.items())
    kv = split_key_values(text)
    assert list(kv) == list(d)
    for k, v in d.items():
        assert parse_repr(kv[k]) == v


def test_path_objects_become_their_path():
    # vLLM ~0.3 printed the model as a PosixPath in the engine config line
    from kvlogdiag.extract.pyrepr import scalar, split_key_values

    kv = split_key_values("model=PosixPath('/runs/m'), tokenizer=PosixPath('/runs/m'), max_seq_len=32768")
    assert scalar(kv["model"]) == "/runs/m"
    assert scalar("WindowsPath('C:/m')") == "C:/m"
    assert scalar("KVTransferConfig(kv_role='kv_both')")["kv_role"] == "kv_both"  # other classes stay objects
