"""Throughput of one SGLang endpoint at given concurrencies; runs on the host (stdlib only).

python3 bench_client.py <url> <concurrency,...> <requests per concurrency> <max_new_tokens> [<model>] < <API key>
The key comes on standard input (one line, empty for none), so no command line or environment holds it. With a
model name (a router in front of several models routes by it), the OpenAI completions route, naming the model;
without, SGLang's /generate.
Prints JSON: for each concurrency, completion tokens per second over the wall time, requests, failures;
and the average speculative accept length the server reports afterwards (null through a router).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request
from typing import Any


def call(url: str, path: str, payload: dict[str, Any] | None, key: str) -> Any:
    request = urllib.request.Request(url + path, data=json.dumps(payload).encode() if payload else None)
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def generate(url: str, number: int, tokens: int, key: str, model: str) -> int:
    """One request's completion tokens."""
    if model:
        payload = {"model": model, "prompt": f"benchmark prompt {number}", "max_tokens": tokens, "ignore_eos": True}
        return int(call(url, "/v1/completions", payload, key)["usage"]["completion_tokens"])
    payload = {"text": f"benchmark prompt {number}", "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}
    return int(call(url, "/generate", payload, key)["meta_info"]["completion_tokens"])


def measure(url: str, concurrency: int, requests: int, tokens: int, key: str, model: str = "") -> dict[str, Any]:
    done = {"tokens": 0, "failed": 0}
    lock = threading.Lock()
    pending = list(range(requests))

    def worker() -> None:
        while True:
            with lock:
                if not pending:
                    return
                number = pending.pop()
            try:
                generated = generate(url, number, tokens, key, model)
            except Exception:
                with lock:
                    done["failed"] += 1
                continue
            with lock:
                done["tokens"] += generated

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _thread in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - start
    return {"concurrency": concurrency, "requests": requests, "failed": done["failed"], "seconds": round(seconds, 3),
            "tokens_per_second": round(done["tokens"] / seconds, 1)}  # fmt: skip


def main() -> None:
    url, concurrencies, requests, tokens = sys.argv[1].rstrip("/"), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    model = sys.argv[5] if len(sys.argv) > 5 else ""
    key = sys.stdin.readline().strip()
    results = [measure(url, int(level), requests, tokens, key, model) for level in concurrencies.split(",")]
    try:
        internal = (call(url, "/server_info", None, key).get("internal_states") or [{}])[0]
        accept = internal.get("avg_spec_accept_length")
    except Exception:
        accept = None
    print(json.dumps({"url": url, "results": results, "accept_length": accept}))


if __name__ == "__main__":
    main()
