"""What a GPU host has, for the SGLang plan: its GPUs (nvidia-smi), their processes, device nodes, RAM, glibc, Pythons,
listening ports, Ansible's own facts of the subsets asked and the model directory. Reads only; never changes the host.

Module sglang_host_facts answers with it; so does module sglang_instance_files given `facts` (deploy's plan sends
them there: one module's payload, built once per run, then serves both of deploy's calls to the host)."""

from __future__ import annotations

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

# The options of module sglang_host_facts (and of sglang_instance_files' `facts`), as AnsibleModule's argument_spec.
OPTIONS: dict[str, Any] = {
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
    "pythons": {"type": "list", "elements": "str", "default": []},
}


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

    def __init__(self, nvidia_smi: str, proc_gpus: str = PROC_GPUS, pythons: tuple[str, ...] = ()) -> None:
        self.proc_gpus = proc_gpus
        self.smi = NvidiaSmi(nvidia_smi)
        try:
            # Side by side: the GPUs, their processes and, where the driver has no /proc entries to read minors from,
            # the XML.
            self.smi.start(*GPU_QUERY)
            self.smi.start(*APP_QUERY)
            if not os.path.isdir(proc_gpus):
                self.smi.start(*XML_QUERY)
            self.pythons = PythonVersions(reported=pythons)
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
            "python_errors": self.pythons.errors(),
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


def answer(module: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The host's facts for `params` (OPTIONS, validated), with `module`'s run_command: `ansible_facts` (`sglang_host`
    and Ansible's own of `gather_subset`), and `model` and `group_models` where asked."""
    model = params["model"]
    result: dict[str, Any] = {}
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
    if params["group_models"]:
        account = (model or {}).get("user") or "", (model or {}).get("group") or ""
        result["group_models"] = {
            path: model_facts(path, {}, account[0], account[1], "", "", []) for path in params["group_models"]
        }
    # After the model directory (hashing it may take minutes): the GPUs and their processes as the plan gets them.
    # Its calls run while Ansible's facts are gathered.
    with Gathering(params["nvidia_smi"], PROC_GPUS, tuple(params["pythons"])) as gathering:
        facts = ansible_facts(module, params["gather_subset"]) if params["gather_subset"] else {}
        host = gathering.facts()
    if params.get("routes_to"):
        ip = module.get_bin_path("ip")

        def run(argv: list[str]) -> tuple[int, str, str]:
            if not ip:  # run_command would fail the module
                return 127, "", "the ip command (iproute2) is not installed"
            rc, out, err = module.run_command([ip, *argv[1:]])
            return int(rc), str(out), str(err)

        host["routes"] = {address: route_to(address, run) for address in params["routes_to"]}
    return {"ansible_facts": {**facts, "sglang_host": host}, **result}
