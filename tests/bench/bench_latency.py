"""Benchmark of one request's latency on the sandbox (prints figures; not a test). Run by `make bench`.

Inside b200 (tests/bench/latency_client.py): a 1-token chat completion, 200 times over one kept-alive connection
and 200 times over a new connection each, straight to one server (port 30000) and through the host's router
(port 30100, which keeps its own connections to the workers alive). Prints each way's p50/p90, the ratio of
kept-alive to new connection (goal: direct within 2x) and the router's added p50.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleet import ROOT

CLIENT = ROOT / "tests/bench/latency_client.py"
REQUESTS = 200
TARGETS = {
    "direct (sglang-30000)": ("http://127.0.0.1:30000", ""),
    "through the router": ("http://127.0.0.1:30100", "/etc/sglang-router/router.json"),
}


def measure(url: str, keys_file: str, host: str = "b200") -> dict[str, dict[str, float]]:
    done = subprocess.run(
        ["docker", "exec", "-i", host, "python3", "-", url, str(REQUESTS), keys_file],
        stdin=CLIENT.open("rb"),
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, dict[str, float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    print(f"1-token chat completion on b200, {REQUESTS} requests each way (ms):")
    results = {name: measure(url, keys) for name, (url, keys) in TARGETS.items()}
    for name, result in results.items():
        kept, new = result["kept_alive"], result["new_connection"]
        print(
            f"  {name:<22} kept-alive p50 {kept['p50']:7.2f} p90 {kept['p90']:7.2f}   "
            f"new connection p50 {new['p50']:7.2f} p90 {new['p90']:7.2f}   kept-alive/new {kept['p50'] / new['p50']:.2f}x"
        )
    direct, routed = results["direct (sglang-30000)"], results["through the router"]
    ratio = direct["kept_alive"]["p50"] / direct["new_connection"]["p50"]
    print(f"  direct kept-alive within 2x of a new connection: {'yes' if ratio <= 2 else 'NO'} ({ratio:.2f}x)")
    print(
        f"  the router adds p50 {routed['kept_alive']['p50'] - direct['kept_alive']['p50']:.2f} ms over a kept-alive "
        f"connection, {routed['new_connection']['p50'] - direct['new_connection']['p50']:.2f} ms over a new one"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
