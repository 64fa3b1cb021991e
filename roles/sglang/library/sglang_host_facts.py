#!/usr/bin/python
"""Ansible module: what a GPU host has, for the SGLang plan. Reads only; never changes the host."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

DOCUMENTATION = r"""
module: sglang_host_facts
short_description: Gathers the GPU, memory, port and library facts that sglang-fleet plans with
description:
  - Runs C(nvidia-smi) for the GPUs, their memory, the driver version and the processes using them.
  - Maps each GPU process and each listening TCP port to its PID, program name and systemd unit.
  - Reads host RAM from C(/proc/meminfo) and the glibc version from the C library.
  - Sets the fact C(sglang_host). Never changes the host.
options:
  nvidia_smi:
    description: Path or name of nvidia-smi.
    type: str
    default: nvidia-smi
author: sglang-fleet
"""

EXAMPLES = r"""
- name: Gather GPU and host facts
  sglang_host_facts:
"""

RETURN = r"""
ansible_facts:
  description: C(sglang_host) with gpus, gpu_processes, listening, driver_version, memtotal_mb, glibc_version.
  returned: always
  type: dict
"""

GPU_FIELDS = "index,uuid,name,memory.total,memory.used,driver_version,minor_number"
APP_FIELDS = "pid,gpu_uuid,used_memory,process_name"
TCP_LISTEN = "0A"


def parse_csv(text: str) -> list[list[str]]:
    """Rows of `nvidia-smi --format=csv,noheader,nounits` output."""
    return [[cell.strip() for cell in line.split(",")] for line in text.splitlines() if line.strip()]


def parse_gpus(text: str) -> list[dict[str, Any]]:
    gpus = []
    for index, uuid, name, total, used, driver, minor in parse_csv(text):
        gpus.append(
            {
                "index": int(index),
                "uuid": uuid,
                "name": name,
                "memory_total_mib": int(float(total)),
                "memory_used_mib": int(float(used)),
                "driver_version": driver,
                "minor_number": int(minor) if minor.isdigit() else None,
            }
        )
    return gpus


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


def gather(nvidia_smi: str) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "gpus": [],
        "gpu_processes": [],
        "gpu_error": None,
        "driver_version": None,
        "memtotal_mb": memtotal_mb(),
        "glibc_version": glibc_version(),
        "listening": listening_ports(),
    }
    query = [nvidia_smi, f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader,nounits"]
    try:
        gpus = subprocess.run(query, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        facts["gpu_error"] = f"{nvidia_smi}: {error}"
        return facts
    if gpus.returncode != 0:
        facts["gpu_error"] = (gpus.stderr or gpus.stdout).strip() or f"{nvidia_smi} exited {gpus.returncode}"
        return facts
    facts["gpus"] = parse_gpus(gpus.stdout)
    if facts["gpus"]:
        facts["driver_version"] = facts["gpus"][0]["driver_version"]
    by_uuid = {gpu["uuid"]: gpu["index"] for gpu in facts["gpus"]}
    apps = subprocess.run(
        [nvidia_smi, f"--query-compute-apps={APP_FIELDS}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    for row in parse_csv(apps.stdout) if apps.returncode == 0 else []:
        pid, uuid, used, name = row[0], row[1], row[2], ",".join(row[3:])
        facts["gpu_processes"].append(
            {
                "pid": int(pid),
                "gpu_index": by_uuid.get(uuid),
                "used_mib": int(float(used)) if used.replace(".", "", 1).isdigit() else None,
                "name": name,
                "unit": unit_of(int(pid)),
            }
        )
    return facts


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(argument_spec={"nvidia_smi": {"type": "str", "default": "nvidia-smi"}}, supports_check_mode=True)
    module.exit_json(changed=False, ansible_facts={"sglang_host": gather(module.params["nvidia_smi"])})


if __name__ == "__main__":
    main()
