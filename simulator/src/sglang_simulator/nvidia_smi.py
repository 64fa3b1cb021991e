"""``nvidia-smi-standin``: the parts of nvidia-smi deployments script against.

Reads the GPU list file (``SGLANG_SIM_GPUS_FILE``) and the usage records of
live processes (``SGLANG_SIM_STATE_DIR``).  Held to a real driver's recordings
(tests/recordings/h200-driver-580.159.04).  Supported::

    nvidia-smi                                   # the table (layout of the real one)
    nvidia-smi -L
    nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]
    nvidia-smi --query-compute-apps=FIELDS --format=csv[,noheader][,nounits]
    nvidia-smi --help-query-gpu | --help-query-compute-apps
    nvidia-smi -q [-x]                           # -x: the XML of ``nvidia-smi -q -x``
    -i/--id=<index|uuid|bus id>[,...] to select GPUs

The accepted FIELDS are exactly those the real driver lists in its
``--help-query-*`` texts (``data/nvidia-smi-580.159.04-fields.json``,
generated from the recorded texts), aliases included (``gpu_uuid`` for
``uuid``); the CSV header shows a field's first name.  Fields the stand-in
does not model answer ``[N/A]``, as the real tool does for values a GPU does
not report.  An unknown field (``minor_number`` is one) prints the real
message and a blank line on stdout, exit 2.

CSV headers and units follow the real tool ("memory.total [MiB]",
"183359 MiB"; ``nounits`` drops the unit from values, not from the header).
Exit codes: 0 ok, 2 invalid argument or field, 6 no such GPU, 9 no driver
(GPU list file missing).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from .gpus import Gpu, GpuError, Inventory, Usage, live_usages, load_inventory
from .knobs import DEFAULT_GPUS_FILE, DEFAULT_STATE_DIR

FIELDS_FILE = "nvidia-smi-580.159.04-fields.json"
NA = "[N/A]"  # what the real tool prints in CSV for a value the GPU does not report
INVALID = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)
USAGE = """NVIDIA System Management Interface (SGLang simulator stand-in)

    nvidia-smi [-i ID] [-L] [-q [-x]]
               [--query-gpu=FIELDS --format=csv[,noheader][,nounits]]
               [--query-compute-apps=FIELDS --format=...]
               [--help-query-gpu] [--help-query-compute-apps]
"""
ARCHITECTURES = {
    "B200": "Blackwell",
    "B300": "Blackwell",
    "H100": "Hopper",
    "H200": "Hopper",
    "A100": "Ampere",
}
COMPUTE_CAPS = {"B200": "10.0", "B300": "10.3", "H100": "9.0", "H200": "9.0", "A100": "8.0", "A6000": "8.6"}


class SmiError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def unknown_field(name: str) -> SmiError:
    # The real driver prints this and an empty line on stdout, then exits 2.
    return SmiError(f'Field "{name}" is not a valid field to query.\n', 2)


@cache
def accepted_fields() -> dict[str, list[list[str]]]:
    """``query_gpu`` / ``query_compute_apps``: each field as [name, *aliases], in the driver's order."""
    raw = json.loads((Path(__file__).parent / "data" / FIELDS_FILE).read_text(encoding="utf-8"))
    return {key: raw[key] for key in ("query_gpu", "query_compute_apps")}


def canonical(kind: str, name: str) -> str:
    """The first name of the field ``name`` is one of, or SmiError as the real driver answers."""
    for names in accepted_fields()[kind]:
        if name in names:
            return names[0]
    raise unknown_field(name)


@dataclass
class Request:
    list_gpus: bool = False
    query_gpu: list[str] | None = None
    query_apps: list[str] | None = None
    fmt: list[str] | None = None
    ids: list[str] | None = None
    query: bool = False
    xml: bool = False
    help: bool = False
    help_query: str | None = None
    version: bool = False
    modes: list[str] = field(default_factory=list)


def _value(args: Sequence[str], i: int, arg: str) -> tuple[str, int]:
    if "=" in arg:
        return arg.split("=", 1)[1], i
    if i + 1 >= len(args):
        raise SmiError(INVALID, 2)
    return args[i + 1], i + 1


def _names(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


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
        elif name in ("--help-query-gpu", "--help-query-compute-apps"):
            req.help_query = "query_gpu" if name == "--help-query-gpu" else "query_compute_apps"
        elif name in ("-L", "--list-gpus"):
            req.list_gpus = True
            req.modes.append("-L")
        elif name in ("-q", "--query"):
            req.query = True
            req.modes.append("-q")
        elif name in ("-x", "--xml-format"):
            req.xml = True
        elif name in ("-i", "--id"):
            value, i = _value(args, i, arg)
            req.ids = _names(value)
        elif name == "--query-gpu":
            value, i = _value(args, i, arg)
            req.query_gpu = _names(value)
            req.modes.append(name)
        elif name == "--query-compute-apps":
            value, i = _value(args, i, arg)
            req.query_apps = _names(value)
            req.modes.append(name)
        elif name == "--format":
            value, i = _value(args, i, arg)
            req.fmt = _names(value)
        else:
            raise SmiError(INVALID, 2)
        i += 1
    if len(req.modes) > 1 or (req.xml and not req.query):
        raise SmiError(INVALID, 2)
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
        bus = ident.lower()
        match = [
            g
            for g in inventory.gpus
            if ident in (str(g.index), g.uuid) or bus in (g.pci_bus_id.lower(), g.pci_bus_id[4:].lower())
        ]
        if not match:
            raise SmiError("No devices were found", 6)
        out.extend(m for m in match if m not in out)
    return out


def _by_model(table: Mapping[str, str], name: str) -> str | None:
    return next((value for model, value in table.items() if model in name.split()), None)


def _bus_parts(gpu: Gpu) -> tuple[str, str, str]:
    """(domain, bus, device) of ``00000000:18:00.0``, as hex digits."""
    domain, bus, slot = gpu.pci_bus_id.split(":")
    return domain[-4:], bus, slot.split(".")[0]


def _timestamp(now: float, csv: bool = False) -> str:
    t = time.localtime(now)
    if csv:  # "YYYY/MM/DD HH:MM:SS.msec"
        return time.strftime("%Y/%m/%d %H:%M:%S", t) + f".{int(now * 1000) % 1000:03d}"
    return time.strftime("%a %b ", t) + f"{t.tm_mday:>2}" + time.strftime(" %H:%M:%S %Y", t)


@dataclass(frozen=True)
class Column:
    unit: str | None
    get: Callable[[Gpu], object]


def _gpu_columns(inventory: Inventory, used: Mapping[str, int], now: float) -> dict[str, Column]:
    """The --query-gpu fields the stand-in models, by first name; every other accepted one is [N/A]."""
    return {
        "timestamp": Column(None, lambda g: _timestamp(now, csv=True)),
        "driver_version": Column(None, lambda g: inventory.driver_version),
        "count": Column(None, lambda g: len(inventory.gpus)),
        "name": Column(None, lambda g: g.name),
        "uuid": Column(None, lambda g: g.uuid),
        "pci.bus_id": Column(None, lambda g: g.pci_bus_id),
        "pci.domain": Column(None, lambda g: f"0x{_bus_parts(g)[0]}"),
        "pci.bus": Column(None, lambda g: f"0x{_bus_parts(g)[1]}"),
        "pci.device": Column(None, lambda g: f"0x{_bus_parts(g)[2]}"),
        "index": Column(None, lambda g: g.index),
        "persistence_mode": Column(None, lambda g: "Enabled"),
        "pstate": Column(None, lambda g: "P0"),
        "memory.total": Column("MiB", lambda g: g.memory_total_mib),
        "memory.reserved": Column("MiB", lambda g: 0),
        "memory.used": Column("MiB", lambda g: min(g.memory_total_mib, used.get(g.uuid, 0))),
        "memory.free": Column("MiB", lambda g: max(0, g.memory_total_mib - used.get(g.uuid, 0))),
        "compute_mode": Column(None, lambda g: "Default"),
        "compute_cap": Column(None, lambda g: _by_model(COMPUTE_CAPS, g.name) or NA),
    }


def _csv(headers: list[str], rows: list[list[str]], fmt: list[str]) -> list[str]:
    lines = [] if "noheader" in fmt else [", ".join(headers)]
    return lines + [", ".join(row) for row in rows]


def _cell(value: object, unit: str | None, fmt: list[str]) -> str:
    return f"{value} {unit}" if unit and "nounits" not in fmt else str(value)


def _header(name: str, unit: str | None) -> str:
    return f"{name} [{unit}]" if unit else name


def query_gpus(
    inventory: Inventory, gpus: list[Gpu], fields: list[str], fmt: list[str], used: Mapping[str, int]
) -> list[str]:
    names = [canonical("query_gpu", f) for f in fields]
    columns = _gpu_columns(inventory, used, time.time())
    unmodelled = Column(None, lambda g: NA)
    cols = [columns.get(n, unmodelled) for n in names]
    rows = [[_cell(c.get(g), c.unit, fmt) for c in cols] for g in gpus]
    return _csv([_header(n, c.unit) for n, c in zip(names, cols, strict=True)], rows, fmt)


def query_apps(gpus: list[Gpu], fields: list[str], fmt: list[str], usages: list[Usage]) -> list[str]:
    names = [canonical("query_compute_apps", f) for f in fields]
    by_uuid = {g.uuid: g for g in gpus}
    stamp = _timestamp(time.time(), csv=True)
    rows: list[list[str]] = []
    for usage in usages:
        for uuid in usage.gpu_uuids:
            gpu = by_uuid.get(uuid)
            if gpu is None:
                continue
            values: dict[str, str] = {
                "timestamp": stamp,
                "gpu_name": gpu.name,
                "gpu_bus_id": gpu.pci_bus_id,
                "gpu_uuid": uuid,
                "pid": str(usage.pid),
                "process_name": usage.process_name,
                "used_gpu_memory": _cell(usage.used_mib, "MiB", fmt),
            }
            rows.append([values.get(n, NA) for n in names])
    headers = [_header(n, "MiB" if n == "used_gpu_memory" else None) for n in names]
    return _csv(headers, rows, fmt)


def help_query(kind: str) -> list[str]:
    switch = "--query-gpu" if kind == "query_gpu" else "--query-compute-apps"
    lines = [f'List of valid properties to query for the switch "{switch}":', ""]
    for names in accepted_fields()[kind]:
        lines += [" or ".join(f'"{n}"' for n in names), ""]
    return lines


def list_gpus(gpus: list[Gpu]) -> list[str]:
    return [f"GPU {g.index}: {g.name} (UUID: {g.uuid})" for g in gpus]


# xml.sax.saxutils' escape and quoteattr, whose import (urllib, http, email, ssl) would double the time of a
# call (the real tool answers in ~20 ms).
def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")


def quoteattr(text: str) -> str:
    text = escape(text).replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#9;")
    if '"' not in text:
        return f'"{text}"'
    return f"'{text}'" if "'" not in text else '"' + text.replace('"', "&quot;") + '"'


# ``nvidia-smi -q -x``: the elements of the recorded XML, in its order, that the stand-in can fill.
@dataclass
class El:
    tag: str
    text: str | None = None
    children: list[El] = field(default_factory=list)
    attrs: dict[str, str] = field(default_factory=dict)
    block: bool = False  # the text on a line of its own, as <mig_devices> has it

    def lines(self, depth: int) -> list[str]:
        pad = "\t" * depth
        attrs = "".join(f" {k}={quoteattr(v)}" for k, v in self.attrs.items())
        if self.text is not None and not self.block:
            return [f"{pad}<{self.tag}{attrs}>{escape(self.text)}</{self.tag}>"]
        inner = [f"{pad}\t{escape(self.text)}"] if self.text is not None else []
        for child in self.children:
            inner += child.lines(depth + 1)
        return [f"{pad}<{self.tag}{attrs}>", *inner, f"{pad}</{self.tag}>"]


def box(tag: str, *children: El) -> El:
    return El(tag, children=list(children))


def leaves(tag: str, **values: str) -> El:
    return El(tag, children=[El(k, v) for k, v in values.items()])


def _gpu_xml(gpu: Gpu, used: Mapping[str, int], usages: list[Usage]) -> El:
    domain, bus, device = _bus_parts(gpu)
    in_use = min(gpu.memory_total_mib, used.get(gpu.uuid, 0))
    processes = [
        leaves(
            "process_info",
            gpu_instance_id="N/A",
            compute_instance_id="N/A",
            pid=str(u.pid),
            type="C",
            process_name=u.process_name,
            used_memory=f"{u.used_mib} MiB",
        )
        for u in usages
        if gpu.uuid in u.gpu_uuids
    ]
    return El(
        "gpu",
        attrs={"id": gpu.pci_bus_id},
        children=[
            El("product_name", gpu.name),
            El("product_brand", "NVIDIA"),
            El("product_architecture", _by_model(ARCHITECTURES, gpu.name) or "N/A"),
            El("persistence_mode", "Enabled"),
            El("addressing_mode", "None"),
            leaves("mig_mode", current_mig="Disabled", pending_mig="Disabled"),
            El("mig_devices", "None", block=True),
            El("accounting_mode", "Disabled"),
            El("accounting_mode_buffer_size", "4000"),
            leaves("driver_model", current_dm="N/A", pending_dm="N/A"),
            El("serial", "N/A"),
            El("uuid", gpu.uuid),
            El("minor_number", str(gpu.minor_number)),
            El("vbios_version", "N/A"),
            El("multigpu_board", "No"),
            leaves(
                "pci",
                pci_bus=bus,
                pci_device=device,
                pci_domain=domain,
                pci_base_class="3",
                pci_sub_class="2",
                pci_device_id="N/A",
                pci_bus_id=gpu.pci_bus_id,
                pci_sub_system_id="N/A",
            ),
            El("fan_speed", "N/A"),
            El("performance_state", "P0"),
            leaves(
                "fb_memory_usage",
                total=f"{gpu.memory_total_mib} MiB",
                reserved="0 MiB",
                used=f"{in_use} MiB",
                free=f"{gpu.memory_total_mib - in_use} MiB",
            ),
            El("compute_mode", "Default"),
            leaves("utilization", gpu_util="0 %", memory_util="0 %"),
            leaves("ecc_mode", current_ecc="Enabled", pending_ecc="Enabled"),
            leaves("temperature", gpu_temp="30 C"),
            leaves("gpu_power_readings", power_state="P0", instant_power_draw="80.00 W"),
            box("processes", *processes),
            box("accounted_processes"),
            leaves("capabilities", egm="disabled"),
        ],
    )


def query_xml(
    inventory: Inventory, gpus: list[Gpu], used: Mapping[str, int], usages: list[Usage]
) -> list[str]:
    lines = [
        '<?xml version="1.0" ?>',
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">',
        "<nvidia_smi_log>",
        *El("timestamp", _timestamp(time.time())).lines(1),
        *El("driver_version", inventory.driver_version).lines(1),
        *El("cuda_version", inventory.cuda_version).lines(1),
        *El("attached_gpus", str(len(inventory.gpus))).lines(1),
    ]
    for gpu in gpus:
        lines += [*_gpu_xml(gpu, used, usages).lines(1), ""]
    return [*lines, "</nvidia_smi_log>"]


def query_text(
    inventory: Inventory, gpus: list[Gpu], used: Mapping[str, int], usages: list[Usage]
) -> list[str]:
    """``nvidia-smi -q``: the few sections the stand-in models, in the real tool's labelled layout."""

    def kv(label: str, value: object, depth: int = 0) -> str:
        return f"{'    ' * depth}{label:<{42 - 4 * depth}}: {value}"

    lines = ["", "==============NVSMI LOG==============", ""]
    lines += [kv("Timestamp", _timestamp(time.time())), kv("Driver Version", inventory.driver_version)]
    lines += [kv("CUDA Version", inventory.cuda_version), "", kv("Attached GPUs", len(inventory.gpus))]
    for gpu in gpus:
        in_use = min(gpu.memory_total_mib, used.get(gpu.uuid, 0))
        lines += [
            f"GPU {gpu.pci_bus_id}",
            kv("Product Name", gpu.name, 1),
            kv("Persistence Mode", "Enabled", 1),
            kv("GPU UUID", gpu.uuid, 1),
            kv("Minor Number", gpu.minor_number, 1),
            "    PCI",
            kv("Bus Id", gpu.pci_bus_id, 2),
            "    FB Memory Usage",
            kv("Total", f"{gpu.memory_total_mib} MiB", 2),
            kv("Reserved", "0 MiB", 2),
            kv("Used", f"{in_use} MiB", 2),
            kv("Free", f"{gpu.memory_total_mib - in_use} MiB", 2),
            kv("Compute Mode", "Default", 1),
        ]
        mine = [u for u in usages if gpu.uuid in u.gpu_uuids]
        lines.append("    Processes" if mine else kv("Processes", "None", 1))
        for u in mine:
            lines += [
                kv("GPU instance ID", "N/A", 2),
                kv("Compute instance ID", "N/A", 2),
                kv("Process ID", u.pid, 2),
                kv("Type", "C", 2),
                kv("Name", u.process_name, 2),
                kv("Used GPU Memory", f"{u.used_mib} MiB", 2),
            ]
        lines.append("")
    return lines


def _row(*cells: str) -> str:
    """A table row: cells padded to the real layout's 41/24/22-column boxes."""
    widths = (41, 24, 22)
    boxes = [f" {c:<{w - 2}} " if len(c) < w - 1 else c[:w] for c, w in zip(cells, widths, strict=True)]
    return "|" + "|".join(boxes) + "|"


PROCESS_HEADER = (
    "  GPU   GI   CI              PID   Type   Process name                        GPU Memory ",
    "        ID   ID                                                               Usage      ",
)


def table(inventory: Inventory, gpus: list[Gpu], used: Mapping[str, int], usages: list[Usage]) -> list[str]:
    """The plain ``nvidia-smi`` table, laid out as the recorded nvidia-smi.txt."""
    bar = "+" + "+".join("-" * w for w in (41, 24, 22)) + "+"
    wide = "+" + "-" * 89 + "+"

    def full(text: str) -> str:
        return f"| {text:<87} |"

    head = (
        f"NVIDIA-SMI {inventory.driver_version:<22} Driver Version: {inventory.driver_version:<14} "
        f"CUDA Version: {inventory.cuda_version}"
    )
    lines = [f"{_timestamp(time.time())}       ", wide, full(head), bar]
    lines += [
        _row("GPU  Name                 Persistence-M", "Bus-Id          Disp.A", "Volatile Uncorr. ECC"),
        _row("Fan  Temp   Perf          Pwr:Usage/Cap", "          Memory-Usage", "GPU-Util  Compute M."),
        _row("", "", f"{'MIG M.':>20}"),
        "|" + "+".join("=" * w for w in (41, 24, 22)) + "|",
    ]
    for g in gpus:
        name = f"{g.index:>3}  {g.name[:26]}"
        memory = f"{min(g.memory_total_mib, used.get(g.uuid, 0))}MiB / {g.memory_total_mib}MiB"
        lines += [
            _row(f"{name:<36}On", f"{g.pci_bus_id:>18} Off", f"{'0':>20}"),
            _row("N/A   30C    P0             80W /  700W", f"{memory:>22}", f"{'0%':>7}      Default"),
            _row("", "", f"{'Disabled':>20}"),
            bar,
        ]
    lines += ["", wide, full("Processes:"), *(f"|{h}|" for h in PROCESS_HEADER), "|" + "=" * 89 + "|"]
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
    if req.help_query:
        return 0, help_query(req.help_query)
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
        return 0, query_apps(gpus, req.query_apps, fmt, usages)
    if req.query:
        return 0, (query_xml if req.xml else query_text)(inventory, gpus, used, usages)
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
