"""Capture one real vLLM start-up + bounded-load log for the tuning pairs of tests/data/tuning/.

Starts ``vllm serve MODEL ARGS...`` (the vLLM CPU build of ../shared/live-vllm in the steering repo),
waits for ``/health``, sends the same deterministic load (token-id prompts, no tokenizer needed), waits
for the last stats line, stops the server with SIGINT (by its process id) and writes its log with the
capturing machine's paths replaced by neutral ones. Every pair in this directory was made by this script
with the same load options and only the server arguments changed (README.md lists the exact commands).

    python make_log.py --vllm VENV/bin/vllm --model DIR --port 8782 --out a.log -- --max-num-batched-tokens 512
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def prompt(i: int, length: int, shared: int) -> list[int]:
    """Token ids: a prefix common to every request (prefix-cache hits), then a per-request tail."""
    head = [3 + (j * 7) % 1900 for j in range(shared)]
    tail = [3 + (i * 131 + j * 17) % 1900 for j in range(length - shared)]
    return head + tail


def send(port: int, model: str, ids: list[int], max_tokens: int) -> int:
    body = json.dumps({"model": model, "prompt": ids, "max_tokens": max_tokens, "ignore_eos": True,
                       "temperature": 0.0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.status


def wait_ready(port: int, proc: subprocess.Popen, limit_s: float) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(2)
    raise SystemExit("server not ready in time")


def neutral(text: str, vllm: str, model: str) -> str:
    """Paths of the capturing machine → neutral ones (no other change)."""
    venv = os.path.dirname(os.path.dirname(os.path.abspath(vllm)))
    text = text.replace(os.path.abspath(model).rstrip("/"), "/models/" + os.path.basename(model.rstrip("/")))
    text = text.replace(venv, "/opt/vllm-cpu")
    text = text.replace(os.path.expanduser("~"), "/home/vllm")
    text = re.sub(r"/usr/lib/python3\.\d+|/usr/local/lib/python3\.\d+", "/usr/lib/python3.11", text)
    return re.sub(r"file:///tmp/", "file:///var/tmp/", text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm", default="vllm")
    ap.add_argument("--model", required=True)
    ap.add_argument("--port", type=int, default=8782)
    ap.add_argument("--out", required=True)
    ap.add_argument("--requests", type=int, default=192)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=1200)
    ap.add_argument("--shared-prefix", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server (repeatable)")
    ap.add_argument("serve_args", nargs="*")
    a = ap.parse_args()
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1", VLLM_HOST_IP="127.0.0.1",
               VLLM_LOG_STATS_INTERVAL="2")
    env.update(kv.split("=", 1) for kv in a.env)
    cmd = [a.vllm, "serve", a.model, "--load-format", "dummy", "--skip-tokenizer-init",
           "--host", "127.0.0.1", "--port", str(a.port), *a.serve_args]
    raw = a.out + ".raw"
    with open(raw, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            wait_ready(a.port, proc, 900)
            with ThreadPoolExecutor(a.concurrency) as pool:
                codes = list(pool.map(lambda i: send(a.port, a.model, prompt(i, a.prompt_len, a.shared_prefix),
                                                     a.max_tokens), range(a.requests)))
            print(f"{len(codes)} requests, statuses {sorted(set(codes))}", file=sys.stderr)
            time.sleep(6)  # the stats line after the last request (VLLM_LOG_STATS_INTERVAL=2)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    with open(raw, encoding="utf-8", errors="replace") as fh:
        text = neutral(fh.read(), a.vllm, a.model)
    with open(a.out, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.remove(raw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
