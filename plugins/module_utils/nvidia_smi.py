"""A host's GPUs as nvidia-smi and the driver's /proc entries give them: the calls of nvidia-smi, run side by side, and
their answers parsed (module sglang_host_facts)."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any
from xml.etree import ElementTree

from ansible_collections.sglang.fleet.plugins.module_utils.process_calls import answered, started, stop

GPU_FIELDS = "index,uuid,name,memory.total,memory.used,driver_version,pci.bus_id"
APP_FIELDS = "pid,gpu_uuid,used_memory,process_name"
PROC_GPUS = "/proc/driver/nvidia/gpus"
GPU_QUERY = (f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader,nounits")
APP_QUERY = (f"--query-compute-apps={APP_FIELDS}", "--format=csv,noheader,nounits")
XML_QUERY = ("-q", "-x")
TIMEOUT = 60  # seconds an nvidia-smi call may take
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def parse_csv(text: str) -> list[list[str]]:
    """Rows of `nvidia-smi --format=csv,noheader,nounits` output."""
    return [[cell.strip() for cell in line.split(",")] for line in text.splitlines() if line.strip()]


def parse_gpus(text: str) -> list[dict[str, Any]]:
    """GPUs from `--query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits` (no minor yet)."""
    gpus = []
    for row in parse_csv(text):
        index, uuid, name, total, used, driver, bus_id = row[0], row[1], ",".join(row[2:-4]), *row[-4:]
        gpus.append(
            {
                "index": int(index),
                "uuid": uuid,
                "name": name,
                "memory_total_mib": int(float(total)),
                "memory_used_mib": int(float(used)),
                "driver_version": driver,
                "pci_bus_id": bus_id,
            }
        )
    return gpus


def proc_bus_id(bus_id: str) -> str:
    """nvidia-smi's `00000000:18:00.0` as the kernel names it under /proc and /sys: `0000:18:00.0`."""
    domain, bus, slot = bus_id.strip().lower().split(":")
    return f"{int(domain, 16):04x}:{bus}:{slot}"


def parse_proc_information(text: str) -> tuple[int | None, str | None]:
    """(Device Minor, GPU UUID) of a /proc/driver/nvidia/gpus/<bus id>/information text."""
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    minor = fields.get("Device Minor", "").strip()
    uuid = fields.get("GPU UUID", "").strip()
    return (int(minor) if minor.isdigit() else None), (uuid or None)


def proc_minor(gpu: dict[str, Any], root: str = PROC_GPUS) -> int | None:
    """The GPU's device minor from the driver's /proc entry, when readable and about the same GPU."""
    try:
        with open(f"{root}/{proc_bus_id(gpu['pci_bus_id'])}/information", encoding="utf-8") as handle:
            minor, uuid = parse_proc_information(handle.read())
    except (OSError, ValueError, IndexError):
        return None
    return minor if uuid in (None, gpu["uuid"]) else None


def parse_xml_minors(text: str) -> dict[str, int]:
    """Device minor by GPU UUID, from `nvidia-smi -q -x` (`<gpu><uuid>` and `<gpu><minor_number>`)."""
    minors: dict[str, int] = {}
    for gpu in ElementTree.fromstring(text).iter("gpu"):
        uuid, minor = gpu.findtext("uuid", "").strip(), gpu.findtext("minor_number", "").strip()
        if uuid and minor.isdigit():
            minors[uuid] = int(minor)
    return minors


def parse_apps(text: str, by_uuid: dict[str, int]) -> list[dict[str, Any]]:
    """Compute processes from `--query-compute-apps=<APP_FIELDS> --format=csv,noheader,nounits`."""
    apps = []
    for row in parse_csv(text):
        if len(row) < 4 or not row[0].isdigit():
            continue
        pid, uuid, used, name = row[0], row[1], row[2], ",".join(row[3:])
        apps.append(
            {
                "pid": int(pid),
                "gpu_index": by_uuid.get(uuid),
                "used_mib": int(float(used)) if used.replace(".", "", 1).isdigit() else None,
                "name": name,
            }
        )
    return apps


def device_nodes(dev: str = "/dev") -> dict[str, bool]:
    """The NVIDIA control nodes (present or not) and every /dev/nvidia<N> that exists."""
    nodes = {path: os.path.exists(dev + path[len("/dev") :]) for path in CONTROL_NODES}
    try:
        names = os.listdir(dev)
    except OSError:
        names = []
    for name in sorted((n for n in names if re.fullmatch(r"nvidia\d+", n)), key=lambda n: int(n[6:])):
        nodes[f"/dev/{name}"] = True
    return nodes


class NvidiaSmi:
    """Calls of nvidia-smi that run side by side: each starts when first named (start) and is read when its answer is
    needed (answer); close ends those never read."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.calls: dict[tuple[str, ...], subprocess.Popen[str]] = {}
        self.answers: dict[tuple[str, ...], tuple[str, str | None]] = {}

    def start(self, *args: str) -> None:
        if args in self.calls or args in self.answers:
            return
        try:
            self.calls[args] = started([self.path, *args])
        except OSError as error:
            self.answers[args] = ("", f"{self.path}: {error}")

    def answer(self, *args: str) -> tuple[str, str | None]:
        """(stdout, error): error is None when nvidia-smi exited 0."""
        self.start(*args)
        if args in self.answers:
            return self.answers[args]
        call = self.calls.pop(args)
        output = answered(call, TIMEOUT)
        if output is None:
            self.answers[args] = ("", f"{self.path}: no answer within {TIMEOUT} seconds")
        elif call.returncode != 0:
            self.answers[args] = (output[0], (output[1] or output[0]).strip() or f"{self.path} exited {call.returncode}")
        else:
            self.answers[args] = (output[0], None)
        return self.answers[args]

    def close(self) -> None:
        while self.calls:
            stop(self.calls.popitem()[1])


def add_minors(gpus: list[dict[str, Any]], nvidia_smi: NvidiaSmi, proc_gpus: str = PROC_GPUS) -> str | None:
    """Set each GPU's minor_number and device (/dev/nvidia<minor>): from /proc, else `nvidia-smi -q -x`.

    Returns an error for GPUs whose minor neither source gives (their minor_number and device stay None).
    """
    xml_minors: dict[str, int] | None = None
    xml_error = None
    missing = []
    for gpu in gpus:
        minor = proc_minor(gpu, proc_gpus)
        if minor is None and xml_minors is None:
            text, xml_error = nvidia_smi.answer(*XML_QUERY)
            try:
                xml_minors = parse_xml_minors(text) if xml_error is None else {}
            except ElementTree.ParseError as error:
                xml_minors, xml_error = {}, f"cannot parse `{nvidia_smi.path} -q -x`: {error}"
        if minor is None and xml_minors is not None:
            minor = xml_minors.get(gpu["uuid"])
        gpu["minor_number"] = minor
        gpu["device"] = None if minor is None else f"/dev/nvidia{minor}"
        if minor is None:
            missing.append(f"GPU {gpu['index']} ({gpu['uuid']}, {gpu['pci_bus_id']})")
    if not missing:
        return None
    return (
        f"no device minor number for {', '.join(missing)}: not in {proc_gpus}/<bus id>/information"
        f" nor in `{nvidia_smi.path} -q -x`" + (f" ({xml_error})" if xml_error else "")
    )
