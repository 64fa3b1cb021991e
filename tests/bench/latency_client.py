"""Latency of 1-token chat requests, run inside a test host (system python3, stdlib only); prints one JSON line.

python3 - <base url> <requests> [<keys file>] < latency_client.py
Sends the same 1-token chat completion `requests` times over one kept-alive connection, then `requests` times over a
new connection each, and reports each way's p50, p90 and mean in milliseconds. The keys file (JSON, api_key), when
given and present, supplies the bearer key (a router's clients' key).
"""

from __future__ import annotations

import http.client
import json
import statistics
import sys
import time
import urllib.parse

BASE, COUNT = sys.argv[1], int(sys.argv[2])
KEYS_FILE = sys.argv[3] if len(sys.argv) > 3 else ""
url = urllib.parse.urlsplit(BASE)
HOST, PORT = url.hostname or "127.0.0.1", url.port or 80


def api_key() -> str:
    try:
        with open(KEYS_FILE, encoding="utf-8") as handle:
            return str(json.load(handle).get("api_key") or "")
    except (OSError, ValueError):
        return ""


HEADERS = {"Content-Type": "application/json"}
if api_key():
    HEADERS["Authorization"] = f"Bearer {api_key()}"


def ask(connection: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None) -> bytes:
    connection.request(method, path, body=body, headers=HEADERS)
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
        raise SystemExit(f"{method} {BASE}{path}: HTTP {response.status}: {data[:200]!r}")
    return data


def model() -> str:
    connection = http.client.HTTPConnection(HOST, PORT, timeout=30)
    try:
        return str(json.loads(ask(connection, "GET", "/v1/models"))["data"][0]["id"])
    finally:
        connection.close()


BODY = json.dumps(
    {"model": model(), "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 1, "temperature": 0}
).encode()


def timed(connection: http.client.HTTPConnection) -> float:
    started = time.perf_counter()
    answer = json.loads(ask(connection, "POST", "/v1/chat/completions", BODY))
    elapsed = (time.perf_counter() - started) * 1000
    if answer["usage"]["completion_tokens"] != 1:
        raise SystemExit(f"expected 1 token, got {answer['usage']}")
    return elapsed


def kept_alive() -> list[float]:
    connection = http.client.HTTPConnection(HOST, PORT, timeout=30)
    try:
        timed(connection)  # the connection is open before the first timed request
        return [timed(connection) for _ in range(COUNT)]
    finally:
        connection.close()


def new_each_time() -> list[float]:
    times = []
    for _ in range(COUNT):
        connection = http.client.HTTPConnection(HOST, PORT, timeout=30)
        try:
            times.append(timed(connection))
        finally:
            connection.close()
    return times


def summary(times: list[float]) -> dict[str, float]:
    deciles = statistics.quantiles(times, n=10)
    return {"p50": round(statistics.median(times), 2), "p90": round(deciles[8], 2), "mean": round(statistics.fmean(times), 2)}


print(json.dumps({"requests": COUNT, "kept_alive": summary(kept_alive()), "new_connection": summary(new_each_time())}))
