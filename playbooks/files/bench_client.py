"""Throughput of one SGLang endpoint at given concurrencies; runs on the host (stdlib only).

python3 bench_client.py <url> <concurrency,...> <requests per concurrency> <max_new_tokens> [<model>]
    < <API key, then the collection's module_utils/listeners.py>
The key comes on standard input (its first line, empty for none), so no command line or environment holds it; the
rest of standard input is the source of module_utils/listeners.py (standard library only): a request that carries
the key goes to a port of this host only when the process that accepted the connection is one of the fleet's
servers or routers (its unit: sglang-<port>.service, sglang-router.service, sglang-gateway.service), so a local
account that binds the port of a stopped instance gets no key. With a model name (a router in front of several
models routes by it), the OpenAI completions route, naming the model; without, SGLang's /generate.
Prints JSON: for each concurrency, completion tokens per second over the wall time, requests, failures;
and the average speculative accept length the server reports afterwards (null through a router).
"""

from __future__ import annotations

import json
import ssl
import sys
import threading
import time
import types
import urllib.request
from typing import Any

# module_utils/listeners.py, loaded from standard input by main(): every request that carries the key goes through its
# open_url, which checks the process at the other end of the connection before anything is sent.
listeners: Any = None
# The CA file on this host that an instance over https is verified with (sglang_server_tls_ca; "" for the system's).
CA_FILE = ""


class KeyRefused(Exception):
    """The key was about to go to a process that is none of the fleet's: nothing was sent, the bench stops."""


def load_listeners(source: str) -> Any:
    module = types.ModuleType("sglang_fleet_listeners")
    exec(compile(source, "sglang_fleet_listeners.py", "exec"), module.__dict__)
    return module


def call(url: str, path: str, payload: dict[str, Any] | None, key: str) -> Any:
    data = json.dumps(payload).encode() if payload else None
    if key:
        if listeners is None:
            raise KeyRefused("no listeners check loaded: the key is sent to the fleet's processes only")
        units = {listeners.instance_unit(url), *listeners.ROUTER_UNITS}
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        try:
            response = listeners.open_url(
                url + path, units, 300, method="POST" if data else "GET", data=data, headers=headers, this_host_only=True,
                ca_file=CA_FILE,
            )
        except listeners.ListenerError as refused:
            raise KeyRefused(str(refused)) from None
        with response:
            return json.loads(response.read())
    request = urllib.request.Request(url + path, data=data)
    request.add_header("Content-Type", "application/json")
    context = ssl.create_default_context(cafile=CA_FILE or None) if url.startswith("https:") else None
    with urllib.request.urlopen(request, timeout=300, context=context) as response:
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
    refused: list[KeyRefused] = []
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
            except KeyRefused as error:
                with lock:
                    refused.append(error)
                    pending.clear()
                return
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
    if refused:
        raise refused[0]
    seconds = time.monotonic() - start
    return {"concurrency": concurrency, "requests": requests, "failed": done["failed"], "seconds": round(seconds, 3),
            "tokens_per_second": round(done["tokens"] / seconds, 1)}  # fmt: skip


def main() -> None:
    url, concurrencies, requests, tokens = sys.argv[1].rstrip("/"), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    model = sys.argv[5] if len(sys.argv) > 5 else ""
    global listeners, CA_FILE
    CA_FILE = sys.argv[6] if len(sys.argv) > 6 else ""
    key = sys.stdin.readline().strip()
    source = sys.stdin.read()
    listeners = load_listeners(source) if source.strip() else None
    try:
        results = [measure(url, int(level), requests, tokens, key, model) for level in concurrencies.split(",")]
    except KeyRefused as refused:
        sys.exit(f"{url}: no request sent with the API key: {refused}")
    try:
        internal = (call(url, "/server_info", None, key).get("internal_states") or [{}])[0]
        accept = internal.get("avg_spec_accept_length")
    except Exception:
        accept = None
    print(json.dumps({"url": url, "results": results, "accept_length": accept}))


if __name__ == "__main__":
    main()
