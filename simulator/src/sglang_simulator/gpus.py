"""Stand-in GPUs: the GPU list file, CUDA_VISIBLE_DEVICES, and usage records.

The GPU list file (``SGLANG_SIM_GPUS_FILE``) describes the machine::

    {"driver_version": "580.95.05", "cuda_version": "13.0",
     "gpus": [{"index": 0, "name": "NVIDIA B200", "memory_total_mib": 183359,
               "uuid": "GPU-...", "pci_bus_id": "00000000:18:00.0"}]}

``pci_bus_id`` is optional.  A process that "holds GPU memory" records that in
``<SGLANG_SIM_STATE_DIR>/gpu-<pid>.json``::

    {"pid": 1234, "gpu_uuids": ["GPU-..."], "used_mib": 150000,
     "process_name": "sglang::scheduler"}

``used_mib`` is the usage on *each* listed GPU.  The nvidia-smi stand-in
reads these files and ignores those whose process is gone.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class GpuError(RuntimeError):
    """The GPU list file is missing or malformed."""


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_total_mib: int
    uuid: str
    pci_bus_id: str
    minor_number: int


@dataclass(frozen=True)
class Inventory:
    driver_version: str
    cuda_version: str
    gpus: tuple[Gpu, ...]
    # Where the GPUs' device nodes are (``"/dev"`` on test hosts, which have stand-in nodes that systemd's
    # device policy governs); None: no nodes are modelled and every GPU can be opened.
    device_dir: str | None = None

    def min_memory_mib(self) -> int | None:
        """What SGLang sizes memory from: the smallest GPU on the host.

        (``get_nvgpu_memory_capacity`` asks nvidia-smi for every GPU,
        ignoring CUDA_VISIBLE_DEVICES, and takes the minimum.)
        """
        return min((g.memory_total_mib for g in self.gpus), default=None)


def _gpu(raw: Any, position: int) -> Gpu:
    if not isinstance(raw, dict):
        raise GpuError(f"gpus[{position}] is not an object")
    try:
        index = int(raw.get("index", position))
        return Gpu(
            index=index,
            name=str(raw.get("name", "NVIDIA GPU")),
            memory_total_mib=int(raw["memory_total_mib"]),
            uuid=str(raw.get("uuid") or f"GPU-00000000-0000-0000-0000-{index:012d}"),
            pci_bus_id=str(raw.get("pci_bus_id") or f"00000000:{0x18 + 0x10 * index:02X}:00.0"),
            minor_number=int(raw.get("minor_number", index)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise GpuError(f"gpus[{position}] is invalid: {exc!r}") from None


def load_inventory(path: Path) -> Inventory:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GpuError(f"GPU list file {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise GpuError(f"cannot read GPU list file {path}: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("gpus"), list):
        raise GpuError(f"GPU list file {path} has no 'gpus' list")
    gpus = tuple(_gpu(g, i) for i, g in enumerate(raw["gpus"]))
    return Inventory(
        driver_version=str(raw.get("driver_version", "580.95.05")),
        cuda_version=str(raw.get("cuda_version", "13.0")),
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
        device_dir=str(raw["device_dir"]) if raw.get("device_dir") else None,
    )


# The driver's shared nodes every CUDA process opens besides its GPUs' own /dev/nvidia<minor>.
SHARED_DEVICE_NODES = ("nvidiactl", "nvidia-uvm")


def device_openable(path: str) -> bool:
    """Whether this process may open a device node, as CUDA does.

    A stand-in node has no driver behind it: opening it fails with ENXIO/ENODEV once the device cgroup
    let the call through, and with EPERM when the cgroup (systemd's DevicePolicy=closed) refuses it.
    """
    try:
        handle = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as error:
        return error.errno in (errno.ENXIO, errno.ENODEV)
    os.close(handle)
    return True


def accessible_gpus(inventory: Inventory) -> list[Gpu]:
    """The GPUs a CUDA process can use: inside a device cgroup only those whose nodes it may open.

    Without ``/dev/nvidiactl`` and ``/dev/nvidia-uvm`` CUDA initialises no GPU at all.
    """
    if inventory.device_dir is None:
        return list(inventory.gpus)
    if not all(device_openable(f"{inventory.device_dir}/{node}") for node in SHARED_DEVICE_NODES):
        return []
    return [g for g in inventory.gpus if device_openable(f"{inventory.device_dir}/nvidia{g.minor_number}")]


def visible_gpus(inventory: Inventory, cuda_visible_devices: str | None) -> list[Gpu]:
    """The devices a CUDA process sees, in CUDA ordinal order.

    Like the CUDA runtime: only the GPUs the process may open count (under a
    device cgroup, e.g. a unit's ``DevicePolicy=closed``), numbered from 0 in
    PCI bus order; unset means all of them; entries are those ordinals or
    (prefixes of) UUIDs; enumeration stops at the first entry that names no
    GPU or repeats one, so ``CUDA_VISIBLE_DEVICES=0,7,1`` on a 4-GPU host
    exposes only GPU 0, and ``CUDA_VISIBLE_DEVICES=3`` in a unit allowed only
    ``/dev/nvidia3`` exposes none.
    """
    usable = accessible_gpus(inventory)
    if cuda_visible_devices is None:
        return usable
    out: list[Gpu] = []
    for entry in cuda_visible_devices.split(","):
        token = entry.strip()
        match: Gpu | None = None
        if token.isdigit():
            match = usable[int(token)] if int(token) < len(usable) else None
        elif token.startswith("GPU-"):
            found = [g for g in usable if g.uuid.startswith(token)]
            match = found[0] if len(found) == 1 else None
        if match is None or match in out:
            break
        out.append(match)
    return out


# ---------------------------------------------------------------------------
# Usage records.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    pid: int
    gpu_uuids: tuple[str, ...]
    used_mib: int
    process_name: str

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "gpu_uuids": list(self.gpu_uuids),
            "used_mib": self.used_mib,
            "process_name": self.process_name,
        }


def state_file(state_dir: Path, pid: int) -> Path:
    return state_dir / f"gpu-{pid}.json"


def write_usage(state_dir: Path, usage: Usage) -> Path:
    """Record (or update) a process's GPU usage; atomic replace."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_file(state_dir, usage.pid)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(usage.to_json()) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def remove_usage(state_dir: Path, pid: int) -> None:
    state_file(state_dir, pid).unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def live_usages(state_dir: Path) -> list[Usage]:
    """Usage records of processes that are still running, by pid."""
    out: list[Usage] = []
    try:
        paths = sorted(state_dir.glob("gpu-*.json"))
    except OSError:
        return out
    for path in paths:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            usage = Usage(
                pid=int(raw["pid"]),
                gpu_uuids=tuple(str(u) for u in raw["gpu_uuids"]),
                used_mib=int(raw["used_mib"]),
                process_name=str(raw.get("process_name", "python3")),
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if pid_alive(usage.pid):
            out.append(usage)
    return sorted(out, key=lambda u: u.pid)


def used_mib_by_gpu(state_dir: Path) -> dict[str, int]:
    totals: dict[str, int] = {}
    for usage in live_usages(state_dir):
        for uuid in usage.gpu_uuids:
            totals[uuid] = totals.get(uuid, 0) + usage.used_mib
    return totals
