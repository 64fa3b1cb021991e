#!/usr/bin/python
"""Ansible module: what a GPU host has, for the SGLang plan. Reads only; never changes the host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_host_facts
short_description: Gathers the GPU, memory, port and library facts that sglang-fleet plans with
description:
  - Runs C(nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,driver_version,pci.bus_id
    --format=csv,noheader,nounits) for the GPUs, their memory, the driver version and PCI bus ids. Every field is one
    the driver lists in C(nvidia-smi --help-query-gpu) (C(minor_number) is not; see
    tests/recordings/h200-driver-580.159.04).
  - Takes each GPU's device minor (its C(/dev/nvidia<minor>)) from C(Device Minor) of
    C(/proc/driver/nvidia/gpus/<bus id>/information) (bus id C(0000:18:00.0)) when readable, else from the
    C(<minor_number>) of its C(<gpu>) (matched by C(<uuid>)) in C(nvidia-smi -q -x). A GPU neither gives is an
    error in C(gpu_error); the minor never defaults to the index.
  - Records which of C(/dev/nvidiactl), C(/dev/nvidia-uvm), C(/dev/nvidia-uvm-tools) and C(/dev/nvidia<N>) exist.
  - Runs C(nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory,process_name) for the processes using the GPUs.
    The nvidia-smi calls run side by side (C(-q -x) from the start where C(/proc/driver/nvidia/gpus) is absent).
  - Maps each GPU process and each listening TCP port to its PID, program name and systemd unit.
  - Reads host RAM from C(/proc/meminfo) and the glibc version from the C library, and asks each of C(python3),
    C(python3.11), C(python3.12) and C(python3.13) found on C(PATH) for its version (all at once; the Python running
    the module answers for itself).
  - Its calls (nvidia-smi's and the Pythons') all start once the model directory is read (hashing it may take
    minutes; the GPUs' and processes' answers are then as fresh as before) and run while it gathers Ansible's facts.
  - With I(model), also reads the model directory in the same call and returns it as C(model). From C(config.json)
    the architecture, the MTP layer count (top level or C(text_config)) and the text model's attention heads, KV heads,
    hidden size and context length (as SGLang derives it), its model type and whether it has code of its own or a
    vision tower; whether the directory holds a processor's settings (C(preprocessor_config.json)) and a chat template,
    as does each of I(model.tokenizer_paths); from C(model.safetensors.index.json) the declared tensor
    bytes, the shards and whether MTP tensors exist. Checks every listed shard exists and is not empty, sums the shard
    sizes, optionally compares SHA-256 checksums of named files, and checks the servers' account can read it all.
  - With I(gather_subset), also gathers Ansible's own facts of those subsets in the same call, as
    C(ansible.builtin.setup) would (a play that needs only these spares its own fact gathering, a round trip).
  - Sets the fact C(sglang_host). Never changes the host.
options:
  nvidia_smi:
    description: Path or name of nvidia-smi.
    type: str
    default: nvidia-smi
  gather_subset:
    description: Ansible's fact subsets (C(ansible.builtin.setup)'s I(gather_subset)) to gather too; empty gathers none.
    type: list
    elements: str
    default: []
  model:
    description: The model directory to read as well; omitted, C(model) is not returned.
    type: dict
    suboptions:
      path:
        description: The model directory.
        type: path
        required: true
      sha256:
        description: Expected SHA-256 by file name inside the directory; empty skips checksums.
        type: dict
        default: {}
      user:
        description:
          - The account the servers run as. Every file the server reads (config.json, the index, every shard, the
            tokenizer files) is checked readable by it, and the directories on the way searchable. Where the account
            does not exist yet (first deploy), as an account of no extra group (the "other" permission bits).
          - Empty skips the check.
        type: str
        default: ""
      group:
        description: The servers' group (the unit's C(Group=)); empty means the account's primary group.
        type: str
        default: ""
      verified_file:
        description:
          - A JSON file of the files an earlier run verified (the returned C(model.verified), written by the caller).
            A file to checksum whose size, modification time and inode match its entry is not read again.
          - Empty reads every file to checksum.
        type: path
        default: ""
      link:
        description:
          - For a model kept as one directory per revision (role sglang_model), the stable link beside them, e.g.
            C(/srv/models/org--name/current). Returns where it points (C(link_target)) and every revision directory
            beside I(path) with its modification time (C(revisions)).
          - Empty returns neither.
        type: path
        default: ""
      tokenizer_paths:
        description:
          - Tokenizer directories other than the model's (the servers' C(--tokenizer-path) values). Returns, by path,
            whether each is a directory and which files hold a processor's settings and a chat template
            (C(tokenizers)).
          - Empty returns no C(tokenizers).
        type: list
        elements: path
        default: []
  group_models:
    description:
      - The model directories of the host's instance groups that serve a directory of their own, read as I(model) is
        (with its I(user) and I(group); no checksums, revisions or tokenizers) and returned by path as
        C(group_models).
    type: list
    elements: path
    default: []
  probe_ahead:
    description:
      - Deploy's probe request kept on the host by module sglang_instance_files (its I(keep)), made here too, in a
        thread beside the gathering, when it carries its signature under I(key) and only this user could have written
        it (module_utils/probe_ahead.py); returned as C(probe_ahead). Reads only, as the rest of this module.
    type: dict
    suboptions:
      path:
        description: The kept request's file; none there answers nothing.
        type: path
        required: true
      key:
        description: The key (hex) the request's HMAC is made with, the control node's.
        type: str
        required: true
author: sglang-fleet maintainers (@sglang-fleet)
"""

EXAMPLES = r"""
- name: Gather GPU and host facts
  sglang.fleet.sglang_host_facts:

- name: Gather GPU and host facts and read the model directory
  sglang.fleet.sglang_host_facts:
    model:
      path: /srv/models/Qwen3.6-27B
      user: sglang
  register: host
"""

RETURN = r"""
probe_ahead:
  description:
    - With I(probe_ahead), the kept request's C(signature) (its HMAC) and C(answers) (what module sglang_instance_files
      answers for each of its requests, without diffs); empty when none is kept or it could not be answered.
  returned: when I(probe_ahead) is given
  type: dict
ansible_facts:
  description: The fact C(sglang_host).
  returned: always
  type: dict
  contains:
    gpus:
      description:
        - One per GPU, by index. Keys C(index), C(uuid), C(name), C(memory_total_mib), C(memory_used_mib),
          C(driver_version), C(pci_bus_id) (as nvidia-smi prints it, C(00000000:18:00.0)), C(minor_number) (int)
          and C(device) (C(/dev/nvidia<minor_number>)).
        - C(minor_number) and C(device) are null for a GPU whose minor could not be found; C(gpu_error) says so.
      type: list
      elements: dict
    gpu_error:
      description: Why the GPU facts are missing or incomplete (nvidia-smi failed, a minor not found); null when fine.
      type: str
    device_nodes:
      description:
        - Path to whether it exists, for C(/dev/nvidiactl), C(/dev/nvidia-uvm) and C(/dev/nvidia-uvm-tools) (always
          listed) and for every C(/dev/nvidia<N>) that exists (listed only when present, as true).
      type: dict
    gpu_processes:
      description: C(pid), C(gpu_index), C(used_mib), C(name) and C(unit) (systemd service or null) per compute process.
      type: list
      elements: dict
    driver_version:
      description: The NVIDIA driver version, from the first GPU; null without GPUs.
      type: str
    listening:
      description: C(port), C(pid), C(name) and C(unit) per listening TCP port.
      type: list
      elements: dict
    memtotal_mb:
      description: Host RAM in MB, from C(/proc/meminfo).
      type: int
    glibc_version:
      description: The glibc version, e.g. C(2.36); empty when unknown.
      type: str
    python_versions:
      description: The version (C(3.11)) of each Python found on C(PATH), by its name and by its path.
      type: dict
model:
  description: >-
    The model directory: exists, config, architectures, mtp_layers, num_attention_heads, num_key_value_heads,
    hidden_size, max_position_embeddings, context_length, model_type, auto_map (config.json names code of the model's
    own), vision_config (config.json has one), language_model_only, processor_config and chat_template (the file that
    holds a processor's settings, and the chat template's, or null), total_size, shard_bytes, shards,
    missing_shards, empty_shards, has_mtp_tensors, tensor_count, checksum_problems, verified (each checksummed file's
    size, mtime_ns, inode and sha256, by path), hashed (the names read and hashed in this call); disk_path,
    disk_free_bytes and disk_device (the nearest existing directory of the path, the bytes free on its filesystem and
    that filesystem's device number); with I(model.link),
    link_target and revisions (path, mtime); hidden_by
    (the sandbox setting that hides the path from the service, or null), unreadable (one "path: reason" per file or
    directory the service account cannot read); with I(model.user), of an existing directory: read_as (the
    account checked, and how); with I(model.tokenizer_paths), tokenizers (by path: path, exists, processor_config,
    chat_template).
  returned: when I(model) is given
  type: dict
"""

import os
import re
from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree

from ansible_collections.sglang.fleet.plugins.module_utils.calls import answered, started, stop
from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import model_facts

if TYPE_CHECKING:
    from ansible_collections.sglang.fleet.plugins.module_utils.calls import Call

# ansible.builtin.setup's minimal subset, gathered whatever `gather_subset` says.
SETUP_MINIMAL_SUBSET = frozenset(
    ["apparmor", "caps", "cmdline", "date_time", "distribution", "dns", "env", "fips", "local", "lsb", "pkg_mgr",
     "platform", "python", "selinux", "service_mgr", "ssh_pub_keys", "user"]
)  # fmt: skip


GPU_FIELDS = "index,uuid,name,memory.total,memory.used,driver_version,pci.bus_id"
APP_FIELDS = "pid,gpu_uuid,used_memory,process_name"
PROC_GPUS = "/proc/driver/nvidia/gpus"
GPU_QUERY = (f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader,nounits")
APP_QUERY = (f"--query-compute-apps={APP_FIELDS}", "--format=csv,noheader,nounits")
XML_QUERY = ("-q", "-x")
TIMEOUT = 60  # seconds an nvidia-smi call may take
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
TCP_LISTEN = "0A"


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


def unit_of(pid: int, proc: str = "/proc") -> str | None:
    """The systemd service a process runs in, from its cgroup path (v1 or v2)."""
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        for part in reversed(line.rsplit(":", 1)[-1].split("/")):
            if part.endswith(".service"):
                return part
    return None


def process_name(pid: int, proc: str = "/proc") -> str:
    try:
        with open(f"{proc}/{pid}/comm", encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def parse_listening(tables: list[str]) -> dict[int, int]:
    """Socket inode by listening TCP port, from /proc/net/tcp and tcp6 texts."""
    inodes: dict[int, int] = {}
    for text in tables:
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == TCP_LISTEN:
                port = int(fields[1].rsplit(":", 1)[1], 16)
                inodes.setdefault(port, int(fields[9]))
    return inodes


def socket_owners(proc: str = "/proc") -> dict[int, int]:
    """PID by socket inode, from every process's open file descriptors."""
    owners: dict[int, int] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        fd_dir = f"{proc}/{entry}/fd"
        try:
            descriptors = os.listdir(fd_dir)
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                target = os.readlink(f"{fd_dir}/{descriptor}")
            except OSError:
                continue
            match = re.fullmatch(r"socket:\[(\d+)\]", target)
            if match:
                owners.setdefault(int(match.group(1)), int(entry))
    return owners


def listening_ports(proc: str = "/proc") -> list[dict[str, Any]]:
    tables = []
    for name in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/net/{name}", encoding="utf-8") as handle:
                tables.append(handle.read())
        except OSError:
            continue
    owners = socket_owners(proc)
    result = []
    for port, inode in sorted(parse_listening(tables).items()):
        pid = owners.get(inode)
        result.append(
            {
                "port": port,
                "pid": pid,
                "name": process_name(pid, proc) if pid else "?",
                "unit": unit_of(pid, proc) if pid else None,
            }
        )
    return result


def memtotal_mb(proc: str = "/proc") -> int:
    with open(f"{proc}/meminfo", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 0


def glibc_version() -> str:
    try:
        found = os.confstr("CS_GNU_LIBC_VERSION") or ""  # "glibc 2.36"
    except (ValueError, OSError, AttributeError):
        return ""
    return found.split()[-1] if found else ""


class NvidiaSmi:
    """Calls of nvidia-smi that run side by side: each starts when first named (start) and is read when its answer is
    needed (answer); close ends those never read."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.calls: dict[tuple[str, ...], Call] = {}
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


# The Pythons a venv could be built with: SGLang's wheels exist for 3.11-3.13.
PYTHON_NAMES = ("python3", "python3.11", "python3.12", "python3.13")


class PythonVersions:
    """The version (major.minor) of each of `names` found on PATH, by its name and by its path, as it answers: all asked
    at once when made, read by answers() (the Python running this module answers for itself); close ends those unread."""

    def __init__(self, names: tuple[str, ...] = PYTHON_NAMES) -> None:
        import shutil
        import sys

        self.found: dict[str, str] = {}
        self.asked: dict[tuple[str, str], Call] = {}  # (name, path): its answer
        for name in names:
            path = shutil.which(name)
            if not path:
                continue
            if sys.executable and os.path.realpath(path) == os.path.realpath(sys.executable):
                self.found[name] = self.found[path] = f"{sys.version_info.major}.{sys.version_info.minor}"
                continue
            try:
                self.asked[name, path] = started([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
            except OSError:
                continue

    def answers(self) -> dict[str, str]:
        while self.asked:
            (name, path), call = self.asked.popitem()
            output = answered(call, 30)
            if output is not None and call.returncode == 0:
                self.found[name] = self.found[path] = output[0].strip()
        return self.found

    def close(self) -> None:
        while self.asked:
            stop(self.asked.popitem()[1])


class Gathering:
    """The host's facts; its calls (nvidia-smi's, each Python's) all started when made, to run while the module does its
    other work, and read by facts(). As a context manager, ends the calls left unread."""

    def __init__(self, nvidia_smi: str, proc_gpus: str = PROC_GPUS) -> None:
        self.proc_gpus = proc_gpus
        self.smi = NvidiaSmi(nvidia_smi)
        try:
            # Side by side: the GPUs, their processes and, where the driver has no /proc entries to read minors from,
            # the XML.
            self.smi.start(*GPU_QUERY)
            self.smi.start(*APP_QUERY)
            if not os.path.isdir(proc_gpus):
                self.smi.start(*XML_QUERY)
            self.pythons = PythonVersions()
        except BaseException:
            self.smi.close()
            raise

    def __enter__(self) -> Gathering:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.smi.close()
        self.pythons.close()

    def facts(self, dev: str = "/dev") -> dict[str, Any]:
        facts: dict[str, Any] = {
            "gpus": [],
            "gpu_processes": [],
            "gpu_error": None,
            "driver_version": None,
            "device_nodes": device_nodes(dev),
            "memtotal_mb": memtotal_mb(),
            "glibc_version": glibc_version(),
            "python_versions": self.pythons.answers(),
            "listening": listening_ports(),
        }
        text, facts["gpu_error"] = self.smi.answer(*GPU_QUERY)
        if facts["gpu_error"]:
            return facts
        facts["gpus"] = parse_gpus(text)
        if facts["gpus"]:
            facts["driver_version"] = facts["gpus"][0]["driver_version"]
        facts["gpu_error"] = add_minors(facts["gpus"], self.smi, self.proc_gpus)
        text, error = self.smi.answer(*APP_QUERY)
        by_uuid = {gpu["uuid"]: gpu["index"] for gpu in facts["gpus"]}
        facts["gpu_processes"] = [{**app, "unit": unit_of(app["pid"])} for app in ([] if error else parse_apps(text, by_uuid))]
        return facts


def gather(nvidia_smi: str, proc_gpus: str = PROC_GPUS, dev: str = "/dev") -> dict[str, Any]:
    with Gathering(nvidia_smi, proc_gpus) as gathering:
        return gathering.facts(dev)


def ansible_facts(module: Any, subsets: list[str]) -> dict[str, Any]:
    """Ansible's own facts of `subsets`, collected as ansible.builtin.setup collects them."""
    from ansible.module_utils.facts import ansible_collector, default_collectors
    from ansible.module_utils.facts.namespace import PrefixFactNamespace

    collector = ansible_collector.get_ansible_collector(
        all_collector_classes=default_collectors.collectors,
        namespace=PrefixFactNamespace(namespace_name="ansible", prefix="ansible_"),
        filter_spec=[],
        gather_subset=subsets,
        gather_timeout=10,
        minimal_gather_subset=SETUP_MINIMAL_SUBSET,
    )
    facts: dict[str, Any] = collector.collect(module=module)
    return facts


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "gather_subset": {"type": "list", "elements": "str", "default": []},
            "model": {
                "type": "dict",
                "options": {
                    "path": {"type": "path", "required": True},
                    "sha256": {"type": "dict", "default": {}},
                    "user": {"type": "str", "default": ""},
                    "group": {"type": "str", "default": ""},
                    "verified_file": {"type": "path", "default": ""},
                    "link": {"type": "path", "default": ""},
                    "tokenizer_paths": {"type": "list", "elements": "path", "default": [], "no_log": False},  # directories
                },
            },
            "group_models": {"type": "list", "elements": "path", "default": []},
            "probe_ahead": {
                "type": "dict",
                "options": {"path": {"type": "path", "required": True}, "key": {"type": "str", "required": True, "no_log": True}},
            },
        },
        supports_check_mode=True,
    )
    ahead = module.params["probe_ahead"]
    if ahead:  # its reads (most of its time is waiting on the commands it runs) beside the gathering below
        from ansible_collections.sglang.fleet.plugins.module_utils.probe_ahead import AnswerAhead

        answering = AnswerAhead(ahead["path"], ahead["key"])
    model = module.params["model"]
    result = {}
    if model is not None:
        result["model"] = model_facts(
            model["path"],
            model["sha256"],
            model["user"],
            model["group"],
            model["verified_file"],
            model["link"],
            model["tokenizer_paths"],
        )
    if module.params["group_models"]:
        account = (model or {}).get("user") or "", (model or {}).get("group") or ""
        result["group_models"] = {
            path: model_facts(path, {}, account[0], account[1], "", "", []) for path in module.params["group_models"]
        }
    # After the model directory (hashing it may take minutes): the GPUs and their processes as the plan gets them.
    with Gathering(module.params["nvidia_smi"]) as gathering:  # its calls run while Ansible's facts are gathered
        facts = ansible_facts(module, module.params["gather_subset"]) if module.params["gather_subset"] else {}
        host = gathering.facts()
    if ahead:
        result["probe_ahead"] = answering.answer()
    module.exit_json(changed=False, ansible_facts={**facts, "sglang_host": host}, **result)


if __name__ == "__main__":
    main()
