"""``nvidia-smi-standin``: the parts of nvidia-smi deployments script against.

Reads the GPU list file (``SGLANG_SIM_GPUS_FILE``) and the usage records of
live processes (``SGLANG_SIM_STATE_DIR``).  Supported::

    nvidia-smi                                   # short summary table
    nvidia-smi -L
    nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,memory.free,
               driver_version,pci.bus_id,count,minor_number --format=csv[,noheader][,nounits]
    nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory,process_name --format=csv
    -i/--id=<index|uuid>[,...] to select GPUs

CSV headers and units follow the real tool ("memory.total [MiB]",
"183359 MiB"; ``nounits`` drops the unit from values, not from the header).
Exit codes: 0 ok, 2 invalid argument or field, 6 no such GPU, 9 no driver
(GPU list file missing).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .gpus import Gpu, GpuError, Inventory, Usage, live_usages, load_inventory
from .knobs import DEFAULT_GPUS_FILE, DEFAULT_STATE_DIR

INVALID = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)
USAGE = """NVIDIA System Management Interface (SGLang simulator stand-in)

    nvidia-smi [-i ID] [-L] [--query-gpu=FIELDS --format=csv[,noheader][,nounits]]
               [--query-compute-apps=FIELDS --format=...]

GPU fields: index, name, uuid, memory.total, memory.used, memory.free,
            driver_version, pci.bus_id, count, minor_number
App fields: pid, process_name, gpu_uuid, gpu_name, gpu_bus_id, used_memory
"""


class SmiError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Request:
    list_gpus: bool = False
    query_gpu: list[str] | None = None
    query_apps: list[str] | None = None
    fmt: list[str] | None = None
    ids: list[str] | None = None
    help: bool = False
    version: bool = False


def _value(args: Sequence[str], i: int, arg: str) -> tuple[str, int]:
    if "=" in arg:
        return arg.split("=", 1)[1], i
    if i + 1 >= len(args):
        raise SmiError(INVALID, 2)
    return args[i + 1], i + 1


def parse(args: Sequence[str]) -> Request:
    req = Request()
    i = 0
    while i < len(args):
        arg = args[i]
        name = arg.split("=", 1)[0]
        if name in ("-h", "--help"):
            req.help = True
        elif name == "--version":
            req.version = True
        elif name in ("-L", "--list-gpus"):
            req.list_gpus = True
        elif name in ("-i", "--id"):
            value, i = _value(args, i, arg)
            req.ids = [v.strip() for v in value.split(",") if v.strip()]
        elif name == "--query-gpu":
            value, i = _value(args, i, arg)
            req.query_gpu = [v.strip() for v in value.split(",") if v.strip()]
        elif name == "--query-compute-apps":
            value, i = _value(args, i, arg)
            req.query_apps = [v.strip() for v in value.split(",") if v.strip()]
        elif name == "--format":
            value, i = _value(args, i, arg)
            req.fmt = [v.strip() for v in value.split(",") if v.strip()]
        else:
            raise SmiError(INVALID, 2)
        i += 1
    if (req.query_gpu is not None or req.query_apps is not None) and req.fmt is None:
        raise SmiError("Please specify the output format with --format=csv.", 2)
    if req.fmt is not None and (
        not req.fmt or req.fmt[0] != "csv" or any(o not in ("noheader", "nounits") for o in req.fmt[1:])
    ):
        raise SmiError(INVALID, 2)
    return req


def _select(inventory: Inventory, ids: list[str] | None) -> list[Gpu]:
    if ids is None:
        return list(inventory.gpus)
    out: list[Gpu] = []
    for ident in ids:
        match = [g for g in inventory.gpus if str(g.index) == ident or g.uuid == ident]
        if not match:
            raise SmiError("No devices were found", 6)
        out.extend(m for m in match if m not in out)
    return out


@dataclass(frozen=True)
class Column:
    header: str
    unit: str | None
    get: Callable[[Gpu], object]


def _gpu_columns(inventory: Inventory, used: Mapping[str, int], count: int) -> dict[str, Column]:
    return {
        "index": Column("index", None, lambda g: g.index),
        "name": Column("name", None, lambda g: g.name),
        "uuid": Column("uuid", None, lambda g: g.uuid),
        "memory.total": Column("memory.total [MiB]", "MiB", lambda g: g.memory_total_mib),
        "memory.used": Column(
            "memory.used [MiB]", "MiB", lambda g: min(g.memory_total_mib, used.get(g.uuid, 0))
        ),
        "memory.free": Column(
            "memory.free [MiB]", "MiB", lambda g: max(0, g.memory_total_mib - used.get(g.uuid, 0))
        ),
        "driver_version": Column("driver_version", None, lambda g: inventory.driver_version),
        "pci.bus_id": Column("pci.bus_id", None, lambda g: g.pci_bus_id),
        "count": Column("count", None, lambda g: count),
        # The device node is /dev/nvidia<minor_number>; the stand-in numbers them like its indexes.
        "minor_number": Column("minor_number", None, lambda g: g.index),
    }


def _csv(headers: list[str], rows: list[list[str]], fmt: list[str]) -> list[str]:
    lines = [] if "noheader" in fmt else [", ".join(headers)]
    return lines + [", ".join(row) for row in rows]


def _cell(value: object, unit: str | None, fmt: list[str]) -> str:
    return f"{value} {unit}" if unit and "nounits" not in fmt else str(value)


def query_gpus(
    inventory: Inventory, gpus: list[Gpu], fields: list[str], fmt: list[str], used: Mapping[str, int]
) -> list[str]:
    columns = _gpu_columns(inventory, used, len(inventory.gpus))
    for field in fields:
        if field not in columns:
            raise SmiError(f'Field "{field}" is not a valid field to query.', 2)
    rows = [[_cell(columns[f].get(g), columns[f].unit, fmt) for f in fields] for g in gpus]
    return _csv([columns[f].header for f in fields], rows, fmt)


def query_apps(
    inventory: Inventory, gpus: list[Gpu], fields: list[str], fmt: list[str], usages: list[Usage]
) -> list[str]:
    by_uuid = {g.uuid: g for g in gpus}
    headers = {
        "pid": "pid",
        "process_name": "process_name",
        "gpu_uuid": "gpu_uuid",
        "gpu_name": "gpu_name",
        "gpu_bus_id": "gpu_bus_id",
        "used_memory": "used_gpu_memory [MiB]",
        "used_gpu_memory": "used_gpu_memory [MiB]",
    }
    for field in fields:
        if field not in headers:
            raise SmiError(f'Field "{field}" is not a valid field to query.', 2)
    rows: list[list[str]] = []
    for usage in usages:
        for uuid in usage.gpu_uuids:
            gpu = by_uuid.get(uuid)
            if gpu is None:
                continue
            values: dict[str, str] = {
                "pid": str(usage.pid),
                "process_name": usage.process_name,
                "gpu_uuid": uuid,
                "gpu_name": gpu.name,
                "gpu_bus_id": gpu.pci_bus_id,
                "used_memory": _cell(usage.used_mib, "MiB", fmt),
                "used_gpu_memory": _cell(usage.used_mib, "MiB", fmt),
            }
            rows.append([values[f] for f in fields])
    return _csv([headers[f] for f in fields], rows, fmt)


def list_gpus(gpus: list[Gpu]) -> list[str]:
    return [f"GPU {g.index}: {g.name} (UUID: {g.uuid})" for g in gpus]


def _row(*cells: str) -> str:
    """A table row: cells padded to the real layout's 41/24/22-column boxes."""
    widths = (41, 24, 22)
    boxes = [f" {c:<{w - 2}} " if len(c) < w - 1 else c[:w] for c, w in zip(cells, widths, strict=True)]
    return "|" + "|".join(boxes) + "|"


def table(inventory: Inventory, gpus: list[Gpu], used: Mapping[str, int], usages: list[Usage]) -> list[str]:
    bar = "+" + "+".join("-" * w for w in (41, 24, 22)) + "+"
    wide = "+" + "-" * 89 + "+"

    def full(text: str) -> str:
        return f"| {text:<87} |"

    head = (
        f"NVIDIA-SMI {inventory.driver_version:<22} Driver Version: {inventory.driver_version:<14} "
        f"CUDA Version: {inventory.cuda_version}"
    )
    lines = [time.strftime("%a %b %d %H:%M:%S %Y"), wide, full(head), bar]
    lines += [
        _row("GPU  Name                 Persistence-M", "Bus-Id          Disp.A", "Volatile Uncorr. ECC"),
        _row("Fan  Temp   Perf          Pwr:Usage/Cap", "          Memory-Usage", "GPU-Util  Compute M."),
        "|" + "+".join("=" * w for w in (41, 24, 22)) + "|",
    ]
    for g in gpus:
        name = f"{g.index:>3}  {g.name[:26]}"
        memory = f"{used.get(g.uuid, 0)}MiB / {g.memory_total_mib}MiB"
        lines += [
            _row(f"{name:<36}On", f"{g.pci_bus_id:>18} Off", f"{'0':>20}"),
            _row("N/A   30C    P0            100W / 1000W", f"{memory:>22}", f"{'0%':>7}      Default"),
            bar,
        ]
    lines += [
        "",
        wide,
        full("Processes:"),
        full(" GPU   GI   CI              PID   Type   Process name                        GPU Memory"),
        "|" + "=" * 89 + "|",
    ]
    shown = {g.uuid: g for g in gpus}
    rows = []
    for usage in usages:
        for u in usage.gpu_uuids:
            if u in shown:
                left = f" {shown[u].index:>3}   N/A  N/A  {usage.pid:>14}      C   {usage.process_name[:34]}"
                rows.append(full(left + f"{usage.used_mib}MiB".rjust(87 - len(left))))
    lines += rows or [full(" No running processes found")]
    lines.append(wide)
    return lines


def run(args: Sequence[str], env: Mapping[str, str]) -> tuple[int, list[str]]:
    req = parse(args)
    if req.help:
        return 0, USAGE.splitlines()
    try:
        inventory = load_inventory(Path(env.get("SGLANG_SIM_GPUS_FILE") or DEFAULT_GPUS_FILE))
    except GpuError:
        raise SmiError(NO_DRIVER, 9) from None
    if req.version:
        return 0, [
            f"NVIDIA-SMI version  : {inventory.driver_version}",
            f"CUDA Version         : {inventory.cuda_version}",
        ]
    gpus = _select(inventory, req.ids)
    usages = live_usages(Path(env.get("SGLANG_SIM_STATE_DIR") or DEFAULT_STATE_DIR))
    used: dict[str, int] = {}
    for usage in usages:
        for uuid in usage.gpu_uuids:
            used[uuid] = used.get(uuid, 0) + usage.used_mib
    fmt = req.fmt or []
    if req.query_gpu is not None:
        return 0, query_gpus(inventory, gpus, req.query_gpu, fmt, used)
    if req.query_apps is not None:
        return 0, query_apps(inventory, gpus, req.query_apps, fmt, usages)
    if req.list_gpus:
        return 0, list_gpus(gpus)
    return 0, table(inventory, gpus, used, usages)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code, lines = run(list(sys.argv[1:] if argv is None else argv), os.environ)
    except SmiError as exc:
        print(str(exc))
        return exc.code
    for line in lines:
        print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
