"""The settings the plan (filter sglang_plan) reads, gathered from a host's variables: plain Python, not a dict of
templates in role sglang_plan's vars (each a template Ansible compiles on every run).

`variable(name, default)` answers a variable's value as Ansible templates it (the action sglang_plan: its templar), or
`default` where the host has no such variable (`MISSING`: none, the variable must exist).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable
from typing import Any

from ansible.errors import AnsibleUndefinedVariable
from ansible_collections.sglang.fleet.plugins.filter.sglang_model import sglang_model_dir, sglang_model_name
from ansible_collections.sglang.fleet.plugins.module_utils.instance_checks import tokenizer_paths
from ansible_collections.sglang.fleet.plugins.module_utils.instance_groups import group_model_paths
from ansible_collections.sglang.fleet.plugins.module_utils.multinode import node_addresses
from ansible_collections.sglang.fleet.plugins.plugin_utils.host_variables import MISSING

Variable = Callable[[str, Any], Any]

# The settings that are one of role sglang_plan's own variables, as they are.
PLAIN = {
    "version": "sglang_version",
    "model_path_given": "sglang_model_path",
    "gpu_ids": "sglang_gpu_ids",
    "tensor_parallel_size": "sglang_tensor_parallel_size",
    "data_parallel_size": "sglang_data_parallel_size",
    "pipeline_parallel_size": "sglang_pipeline_parallel_size",
    "gpus_per_instance": "sglang_gpus_per_instance",
    "instance_count": "sglang_instance_count",
    "port_base": "sglang_port_base",
    "nccl_port_base": "sglang_nccl_port_base",
    "listen_host": "sglang_listen_host",
    "advertise_host": "sglang_advertise_host",
    "enable_metrics": "sglang_enable_metrics",
    "speculative": "sglang_speculative",
    "server_args": "sglang_server_args",
    "environment": "sglang_environment",
    "instance_overrides": "sglang_instance_overrides",
    "instance_groups": "sglang_instance_groups",
    "host_memory_mb": "sglang_host_memory_mb",
    "memory_margin_gib": "sglang_plan_memory_margin_gib",
    "auto_reserve_mib": "sglang_plan_auto_reserve_mib",
    "host_ram_reserve_gib": "sglang_plan_host_ram_reserve_gib",
    "nvidia_smi": "sglang_plan_nvidia_smi",
}
# Other roles' variables (the play may lack the role), with that role's default. Where sglang_server writes each
# instance's unit, environment file and API key file (each planned instance carries its paths, `files`; the planned
# argv names the key file, --config); the venv's Python and CUDA's paths reach the units and environment files: checked
# for control characters with the plan's own text.
OTHER_ROLES = {
    "unit_dir": ("sglang_server_unit_dir", "/etc/systemd/system"),
    "config_dir": ("sglang_server_config_dir", "/etc/sglang-fleet"),
    "venv_root": ("sglang_venv_root", "/opt/sglang"),
    "runtime_environment": ("sglang_venv_runtime_environment", {}),
    "cuda_home": ("cuda_home", "/usr/local/cuda"),
    "allow_model_code": ("sglang_allow_model_code", False),
    # The instances' certificate and key (role sglang_server): with both, SGLang serves https (module_utils/tls.py).
    "tls_cert": ("sglang_server_tls_cert", ""),
    "tls_key": ("sglang_server_tls_key", ""),
}
# The server role's text that its preflight renders into check-mode unit and environment files: with a control
# character in it the plan derives no instances (that role's preflight names the variable), so nothing renders.
SERVER_TEXT: tuple[tuple[str, Any], ...] = (
    ("sglang_server_user", ""),
    ("sglang_server_group", ""),
    ("sglang_server_home", ""),
    ("sglang_server_config_dir", ""),
    ("sglang_server_extra_groups", []),
    ("sglang_server_read_write_paths", []),
)


def served_model_path(variable: Variable) -> Any:
    """The served model directory: a revision's directory under sglang_model_root for an sglang_model (role
    sglang_model puts it there), else sglang_model_path."""
    model = variable("sglang_model", MISSING)
    return sglang_model_dir(model, variable("sglang_model_root", MISSING)) if model else variable("sglang_model_path", MISSING)


def constraints_versions(venv_files: str) -> list[str]:
    """The versions whose exact package set (roles/sglang_venv/files/constraints-<version>.txt) exists."""
    paths = glob.glob(os.path.join(glob.escape(venv_files), "constraints-*.txt"))
    return [os.path.basename(path).removeprefix("constraints-").removesuffix(".txt") for path in sorted(paths)]


def support_tables(plan_files: str) -> list[str]:
    """What each supported SGLang knows (files/sglang-<version>.json, read from its own parser and model registry by
    scripts/extract_sglang_facts.py), by their paths: the plan reads them as plain JSON."""
    return sorted(glob.glob(os.path.join(glob.escape(plan_files), "sglang-*.json")))


def plan_settings(variable: Variable, host: str, variable_names: Iterable[str], versions: list[str]) -> dict[str, Any]:
    """The filter sglang_plan's settings for `host`: `variable_names`, the host's variable names (one no role declares
    is a typo that would change nothing); `versions`, constraints_versions."""
    model = variable("sglang_model", MISSING)
    settings: dict[str, Any] = {name: variable(source, MISSING) for name, source in PLAIN.items()}
    settings.update({name: variable(source, default) for name, (source, default) in OTHER_ROLES.items()})
    settings.update(
        host=host,
        constraints_versions=versions,
        model_path=served_model_path(variable),
        served_model_name=variable("sglang_served_model_name", MISSING) or sglang_model_name(model),
        model_sourced=len(model) > 0,
        # Set both, and the plan says so; with an sglang_model, the control node's copy (deploy) and the lock's files.
        model_source=variable("sglang_model_source", {}) if model else {},
        has_api_key=len(variable("sglang_api_key", MISSING)) > 0,
        secrets_dir=variable("sglang_server_secrets_dir", f"{settings['config_dir']}/secrets"),
        server_text=[variable(name, default) for name, default in SERVER_TEXT],
        variable_names=list(variable_names),
    )
    # How the nodes of a group that spans hosts reach each other (rank 0's is the rendezvous): module_utils/multinode.py.
    # Other hosts' variables are read only for such a group.
    groups = settings["instance_groups"]
    spans = isinstance(groups, list) and any(isinstance(group, dict) and "nodes" in group for group in groups)
    settings["node_addresses"] = node_addresses(groups, variable("hostvars", {})) if spans else {}
    return settings


def host_facts_options(variable: Variable, settings: dict[str, Any]) -> dict[str, Any]:
    """The options of module sglang_host_facts for the plan (role sglang_plan's task): nvidia-smi, Ansible's fact
    subsets, the model directory's files checked by their SHA-256 (an sglang_model's lock file's, from the control
    node's copy, else sglang_model_sha256) readable as the servers' account (the server role's, with its defaults where
    the play lacks that role), the record of the verified files, the tokenizer directories and instance groups'
    model directories of the settings, and the Python the venv is built with (sglang_venv_python, the venv role's: its
    preflight checks how it answered; a value that reads what is not set before this call, the host's facts say, or that
    is no string, is not asked, and that preflight says so)."""
    source = settings["model_source"]
    try:
        python = variable("sglang_venv_python", "python3")
    except AnsibleUndefinedVariable:  # a template that reads what is not set yet: the facts this call gathers, say
        python = None
    sha256 = source.get("sha256", {}) if settings["model_sourced"] and source else variable("sglang_model_sha256", MISSING)
    return {
        "nvidia_smi": settings["nvidia_smi"],
        "gather_subset": variable("sglang_plan_gather_subset", MISSING),
        "model": {
            "sha256": sha256,
            "user": variable("sglang_server_user", "sglang"),
            "group": variable("sglang_server_group", "sglang"),
            "verified_file": variable("sglang_plan_verified_file", MISSING),
            "tokenizer_paths": tokenizer_paths(settings["server_args"], settings["instance_overrides"]),
        },
        "group_models": group_model_paths(settings["instance_groups"]),
        "pythons": [python] if isinstance(python, str) and python else [],
    }
