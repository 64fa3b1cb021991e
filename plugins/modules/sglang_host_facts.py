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
  routes_to:
    description:
      - Addresses (names or IPs) whose route is looked up on the host (C(ip route get); for an address of the host
        itself, the interface holding it) and returned by address as C(routes) - the rank 0 nodes of instances across
        hosts, whose interface NCCL and Gloo use when the group names none.
    type: list
    elements: str
    default: []
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
    routes:
      description:
        - Per address of I(routes_to) (only when given), C(ip) and C(interface) it is reached on, or C(error).
      type: dict
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
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.listeners import listening_ports, unit_of
from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import model_facts
from ansible_collections.sglang.fleet.plugins.module_utils.nvidia_smi import (
    APP_QUERY,
    GPU_QUERY,
    PROC_GPUS,
    XML_QUERY,
    NvidiaSmi,
    add_minors,
    device_nodes,
    parse_apps,
    parse_gpus,
)
from ansible_collections.sglang.fleet.plugins.module_utils.pythons import PythonVersions
from ansible_collections.sglang.fleet.plugins.module_utils.routes import route_to

# ansible.builtin.setup's minimal subset, gathered whatever `gather_subset` says.
SETUP_MINIMAL_SUBSET = frozenset(
    ["apparmor", "caps", "cmdline", "date_time", "distribution", "dns", "env", "fips", "local", "lsb", "pkg_mgr",
     "platform", "python", "selinux", "service_mgr", "ssh_pub_keys", "user"]
)  # fmt: skip


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
            "routes_to": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
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
    if module.params.get("routes_to"):
        ip = module.get_bin_path("ip")

        def run(argv: list[str]) -> tuple[int, str, str]:
            if not ip:  # run_command would fail the module
                return 127, "", "the ip command (iproute2) is not installed"
            rc, out, err = module.run_command([ip, *argv[1:]])
            return int(rc), str(out), str(err)

        host["routes"] = {address: route_to(address, run) for address in module.params["routes_to"]}
    module.exit_json(changed=False, ansible_facts={**facts, "sglang_host": host}, **result)


if __name__ == "__main__":
    main()
