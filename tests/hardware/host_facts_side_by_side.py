"""The real driver answering the host facts module's nvidia-smi calls side by side (module_utils/nvidia_smi.NvidiaSmi,
as gather() makes them) against one after the other: run on a GPU machine from the repository root; prints JSON (each
way's answers, whether they are the same, and each way's median time over ROUNDS runs)."""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "collections"))
from ansible_collections.sglang.fleet.plugins.module_utils import host_facts as module
from ansible_collections.sglang.fleet.plugins.module_utils import nvidia_smi

ROUNDS = 9
QUERIES = {"query_gpu": nvidia_smi.GPU_QUERY, "query_compute_apps": nvidia_smi.APP_QUERY, "q_x": nvidia_smi.XML_QUERY}


def answers(side_by_side: bool) -> tuple[dict[str, tuple[str, str | None]], float]:
    """Every query's (stdout, error) and the seconds they took, all started first or each in turn."""
    smi = nvidia_smi.NvidiaSmi("nvidia-smi")
    started = time.perf_counter()
    if side_by_side:
        for query in QUERIES.values():
            smi.start(*query)
    found = {name: smi.answer(*query) for name, query in QUERIES.items()}
    return found, time.perf_counter() - started


def comparable(found: dict[str, tuple[str, str | None]]) -> dict[str, object]:
    """What must agree between two ways of asking: the GPUs, their minors from the XML, the processes, the errors."""
    gpus = nvidia_smi.parse_gpus(found["query_gpu"][0])
    return {
        "gpus": [{key: value for key, value in gpu.items() if key != "memory_used_mib"} for gpu in gpus],
        "xml_minors": nvidia_smi.parse_xml_minors(found["q_x"][0]) if found["q_x"][1] is None else None,
        "processes": nvidia_smi.parse_apps(found["query_compute_apps"][0], {gpu["uuid"]: gpu["index"] for gpu in gpus}),
        "errors": {name: error for name, (_, error) in found.items()},
    }


def main() -> None:
    runs: dict[str, list[float]] = {"one_after_the_other": [], "side_by_side": []}
    seen: dict[str, dict[str, object]] = {}
    for _ in range(ROUNDS):
        for way in runs:
            found, seconds = answers(way == "side_by_side")
            runs[way].append(seconds)
            seen[way] = comparable(found)
    print(json.dumps({
        "proc_gpus_present": Path(nvidia_smi.PROC_GPUS).is_dir(),
        "answers": seen,
        "same_answers": seen["side_by_side"] == seen["one_after_the_other"],
        "seconds": {way: {"median": statistics.median(it), "min": min(it), "max": max(it)} for way, it in runs.items()},
        "gather": module.gather("nvidia-smi"),
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
