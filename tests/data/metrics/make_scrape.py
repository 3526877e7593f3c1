"""Make the saved scrapes of this folder: a short bounded load on a running vLLM, /metrics scraped during it.

Usage (the server must already run on 127.0.0.1, see README.md here for the exact commands):

    python tests/data/metrics/make_scrape.py --port 8783 --model /tmp/tinymodel --out scrape.txt \
        [--requests 24] [--concurrency 8] [--prompt-len 200] [--max-tokens 64] [--scrapes 1]

Sends ``--requests`` completions (token-id prompts: the server runs without a tokenizer) from
``--concurrency`` threads, and while they run saves ``--scrapes`` scrapes of ``/metrics`` (concatenated,
as ``curl .../metrics >> file`` in a loop would), the first one once at least one request is running.
Everything is bounded: each request has a 120 s timeout, and the load stops after ``--requests``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.request


def _complete(base: str, model: str, prompt_len: int, max_tokens: int, seed: int) -> None:
    body = json.dumps({"model": model, "prompt": [(seed * 7 + i) % 500 + 1 for i in range(prompt_len)],
                       "max_tokens": max_tokens, "ignore_eos": True}).encode()
    req = urllib.request.Request(f"{base}/v1/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()
    except OSError as exc:
        print(f"request {seed}: {exc}")


def _scrape(base: str) -> str:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
        return r.read().decode()


def _running(text: str) -> float:
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--scrapes", type=int, default=1)
    ap.add_argument("--every", type=float, default=2.0, help="seconds between scrapes")
    a = ap.parse_args()
    base = f"http://127.0.0.1:{a.port}"
    todo = list(range(a.requests))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                seed = todo.pop()
            _complete(base, a.model, a.prompt_len, a.max_tokens, seed)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    scrapes: list[str] = []
    for _ in range(600):  # wait (bounded) until the load is running
        text = _scrape(base)
        if _running(text) > 0:
            scrapes.append(text)
            break
        time.sleep(0.1)
    while len(scrapes) < a.scrapes and any(t.is_alive() for t in threads):
        time.sleep(a.every)
        scrapes.append(_scrape(base))
    for t in threads:
        t.join(300)
    with open(a.out, "w") as fh:
        fh.write("".join(scrapes))
    print(f"{a.out}: {len(scrapes)} scrape(s)")


if __name__ == "__main__":
    main()
