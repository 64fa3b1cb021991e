"""Plots bench.yml's results (JSON) as a small PNG: tokens/s per endpoint at each concurrency."""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main() -> None:
    source, target = sys.argv[1], sys.argv[2]
    with open(source, encoding="utf-8") as handle:
        endpoints = json.load(handle)["endpoints"]
    levels = sorted({result["concurrency"] for endpoint in endpoints for result in endpoint["results"]})
    figure, axes = plt.subplots(figsize=(8, 3.5), dpi=100)
    width = 0.8 / max(1, len(levels))
    for offset, level in enumerate(levels):
        values = [next((r["tokens_per_second"] for r in e["results"] if r["concurrency"] == level), 0) for e in endpoints]
        axes.bar([i + offset * width for i in range(len(endpoints))], values, width, label=f"concurrency {level}")
    axes.set_xticks([i + width * (len(levels) - 1) / 2 for i in range(len(endpoints))])
    axes.set_xticklabels([e["name"] for e in endpoints], rotation=30, ha="right", fontsize=8)
    axes.set_ylabel("tokens/s")
    axes.set_title("SGLang fleet throughput")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(target)


if __name__ == "__main__":
    main()
