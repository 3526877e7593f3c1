"""Tests for kvlogdiag.render.redact: what is masked, what is kept, and that masks are consistent."""

from __future__ import annotations

import pytest

from kvlogdiag.render.redact import Redactor


@pytest.fixture
def r() -> Redactor:
    return Redactor()


@pytest.mark.parametrize(
    ("text", "secret", "mask"),
    [
        # host names
        ("vllm serve m --host gpu-node-07 --port 8000", "gpu-node-07", "<host-1>"),
        ("non-default args: {'host': 'gpu-node-07', 'port': 8000}", "gpu-node-07", "<host-1>"),
        ("master_addr=train-head-0 world_size=16", "train-head-0", "<host-1>"),
        ("Starting vLLM API server on http://infer-3:8000/v1", "infer-3", "<host-1>"),
        ("resolving node3.corp.example.com now", "node3.corp.example.com", "<host-1>"),
        ("[root@a3-d0 ~]# bash run.sh", "a3-d0", "<host-1>"),
        ("Nov 29 08:00:04 gpu-node-7 vllm[4242]: INFO started", "gpu-node-7", "<host-1>"),
        # IPs
        ("INFO:     10.20.0.5:37507 - \"POST /v1/completions HTTP/1.1\" 200 OK", "10.20.0.5", "<ip-1>"),
        ("(RayWorkerWrapper pid=12, ip=192.168.10.44) INFO x", "192.168.10.44", "<ip-1>"),
        ("peer fe80::1ff:fe23:4567:890a joined", "fe80::1ff:fe23:4567:890a", "<ip-1>"),
        ("listen on [2001:db8::8a2e:370:7334]:8000", "2001:db8::8a2e:370:7334", "<ip-1>"),
        # user paths
        ("model='/home/alice/models/Llama-3.1-8B'", "alice", "/home/<user-1>/models/Llama-3.1-8B"),
        ("loading /Users/bob/hf/qwen", "bob", "/Users/<user-1>/hf/qwen"),
        ("cache C:\\Users\\carol\\hf\\hub", "carol", "C:\\Users\\<user-1>\\hf\\hub"),
        # API keys
        ("vllm serve m --api-key s3cr3t-value-123", "s3cr3t-value-123", "--api-key <api-key-1>"),
        ("args: {'api_key': 'abcdef123456'}", "abcdef123456", "'api_key': '<api-key-1>'"),
        ("args: {'api_key': ['key-one-1111', 'key-two-2222']}", "key-two-2222", "['<api-key-1>', '<api-key-2>']"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGciOiJIUzI1NiJ9", "Bearer <api-key-1>"),
        ("OPENAI key sk-proj-AbCdEfGhIjKlMnOpQrSt in env", "sk-proj-AbCdEfGhIjKlMnOpQrSt", "<api-key-1>"),
        ("export VLLM_API_KEY=vk-9f8e7d6c5b4a", "vk-9f8e7d6c5b4a", "VLLM_API_KEY=<api-key-1>"),
        # HF tokens
        ("token hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345 used", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "<hf-token-1>"),
        ("export HF_TOKEN=my-private-token-99", "my-private-token-99", "HF_TOKEN=<hf-token-1>"),
        ("args: {'hf_token': 'plain-token-value'}", "plain-token-value", "'hf_token': '<hf-token-1>'"),
        # e-mail
        ("contact alice.smith@example.org for access", "alice.smith@example.org", "<email-1>"),
    ],
)
def test_masks(r: Redactor, text: str, secret: str, mask: str) -> None:
    out = r.redact(text)
    assert secret not in out
    assert mask in out


@pytest.mark.parametrize(
    "text",
    [
        "non-default args: {'model': 'meta-llama/Llama-3.1-8B', 'host': '0.0.0.0', 'kv_ip': '127.0.0.1'}",
        "Starting vLLM API server 0 on http://0.0.0.0:8000",
        "see https://huggingface.co/meta-llama/Llama-3.1-8B and https://docs.vllm.ai/en/latest/",
        "vLLM API server version 0.10.1.1",  # four-part version, not an IP
        "Initializing a V1 LLM engine (v0.11.0) with config: model='Qwen/Qwen2.5-7B-Instruct'",
        "INFO 09-26 07:52:33 [kv_cache_utils.py:864] GPU KV cache size: 485,088 tokens",
        "Avg prompt throughput: 806.3 tokens/s, token throughput figures",
        "x[::2] and ::1 and std::vector and c10::cuda",
        "Model loading took 32.8874 GiB; dtype=torch.int8; torch.int; /root/.cache/vllm; /data/models/DeepSeek-V4",
        "'api_key': None, 'hf_token': None",
    ],
)
def test_keeps_what_is_not_secret(r: Redactor, text: str) -> None:
    assert r.redact(text) == text
    assert r.counts == {}


def test_same_value_same_mask_stable_numbering(r: Redactor) -> None:
    a = r.redact("from 10.1.2.3 to 10.9.9.9")
    b = r.redact("again 10.9.9.9 then 10.1.2.3 on host gpu-a")
    assert a == "from <ip-1> to <ip-2>"
    assert b == "again <ip-2> then <ip-1> on host gpu-a"  # "host gpu-a" has no '=' or ':' → not a host key
    assert r.mask("ip", "10.1.2.3") == "<ip-1>"
    assert r.counts == {"ip": 2}


def test_learned_value_is_masked_everywhere(r: Redactor) -> None:
    r.redact("vllm serve m --host gpu-node-07")
    assert r.redact("connection to gpu-node-07 lost") == "connection to <host-1> lost"
    # a learned name does not eat longer names that merely contain it
    assert r.redact("gpu-node-070 is another machine") == "gpu-node-070 is another machine"


def test_redact_obj_is_key_aware_and_order_independent() -> None:
    obj = {"log": ["peer train-head-0 is up"], "config": {"master_addr": "train-head-0", "api_key": "abc123xyz",
                                                          "hf_token": "tok-value-1", "model": "/home/dave/m"}}
    r = Redactor()
    out = r.redact_obj(obj)
    # the value under master_addr is a host name, and it is masked in the earlier free text as well
    assert out["config"]["master_addr"] == "<host-1>"
    assert out["log"] == ["peer <host-1> is up"]
    assert out["config"]["api_key"] == "<api-key-1>"
    assert out["config"]["hf_token"] == "<hf-token-1>"
    assert out["config"]["model"] == "/home/<user-1>/m"
    assert obj["config"]["master_addr"] == "train-head-0"  # the input is not modified


def test_summary_counts_kinds(r: Redactor) -> None:
    r.redact("10.0.0.1 10.0.0.2 --host gpu-1 bob@example.com")
    assert r.summary() == "1 host name, 2 IP addresses, 1 e-mail address"
    assert Redactor().summary() == ""


def test_long_hostile_lines_redact_in_linear_time() -> None:
    """Evidence lines can be 1 MiB: no pattern may backtrack quadratically (a quadratic version took
    ~20 s on 20 KB of 'a', so it would take hours here)."""
    import time

    n = 200_000
    shapes = ["a" * n, "a-" * (n // 2), "a." * (n // 2), "1." * (n // 2), "sk-" * (n // 3), "api_key" * (n // 7),
              "host_" * (n // 5), "a-b://" * (n // 6), "fe80::" * (n // 6), "a.b@c." * (n // 6)]
    start = time.process_time()
    for s in shapes:
        Redactor().redact(s)
    assert time.process_time() - start < 30  # CPU seconds: linear redaction, whatever else the machine runs
