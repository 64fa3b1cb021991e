"""A host's instances derived from its settings and facts: GPUs, ports, command line, environment and files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.flags import flag_name, render_flag
from ansible_collections.sglang.fleet.plugins.module_utils.instance_files import instance_files
from ansible_collections.sglang.fleet.plugins.module_utils.listen import connect_url, is_loopback, remote_url
from ansible_collections.sglang.fleet.plugins.module_utils.problems import HostProblems
from ansible_collections.sglang.fleet.plugins.module_utils.server_settings import (
    check_environment,
    checked_args,
    speculative_flags,
    truthy,
)
from ansible_collections.sglang.fleet.plugins.module_utils.sglang_support import Support, secret_flag
from ansible_collections.sglang.fleet.plugins.module_utils.tls import server_tls_paths, serves_tls


def _positive_int(problems: HostProblems, variable: str, value: Any, minimum: int = 1) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        problems.add("host", variable, value, f"must be an integer >= {minimum}", f"set {variable} to a whole number")
        return None
    return value


def _override_problems(problems: HostProblems, overrides: Mapping[Any, Any], count: int) -> None:
    """An override must name an instance of this host (0 .. count - 1)."""
    for key in overrides or {}:
        index = key if isinstance(key, int) and not isinstance(key, bool) else None
        if isinstance(key, str) and key.isdigit():
            index = int(key)
        if index is None or not 0 <= index < count:
            problems.add(
                "host",
                f"sglang_instance_overrides.{key}",
                overrides[key],
                f"names no instance: this host has {count} instance(s), numbered 0 to {count - 1}",
                "use the instance's number (its port minus sglang_port_base) or remove the override",
            )


def _instance_override(overrides: Mapping[Any, Any], index: int) -> Mapping[str, Any]:
    for key in (index, str(index)):
        if key in overrides:
            return overrides[key] or {}
    return {}


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    merged = dict(base)
    merged.update(extra or {})
    return merged


@dataclass(frozen=True)
class Shape:
    """The host's instances' shape: parallel sizes, GPUs per instance, how many, and their port bases."""

    tensor: int
    data: int
    pipeline: int
    per_instance: int
    count: int
    port_base: int
    nccl_base: int

    @property
    def ranks(self) -> int:
        return self.tensor * self.data * self.pipeline


@dataclass(frozen=True)
class Common:
    """What every instance of the host serves and how: the host-wide checked flags, the model, the bind address."""

    base_args: Mapping[str, Any] | None
    model_path: str
    served_name: str
    listen_host: str
    has_key: bool
    # The instances' certificate and key on the host ({cert, key}: SGLang's --ssl-certfile, --ssl-keyfile), {} for
    # plain http.
    tls: Mapping[str, str]


def shape(problems: HostProblems, settings: Mapping[str, Any], gpu_ids: Sequence[int]) -> Shape | None:
    """The shape the settings ask for on these GPUs, or None (with the problem added) when it is wrong or does not fit."""
    tensor = _positive_int(problems, "sglang_tensor_parallel_size", settings["tensor_parallel_size"])
    data = _positive_int(problems, "sglang_data_parallel_size", settings["data_parallel_size"])
    pipeline = _positive_int(problems, "sglang_pipeline_parallel_size", settings["pipeline_parallel_size"])
    port_base = _positive_int(problems, "sglang_port_base", settings["port_base"], 1024)
    nccl_base = _positive_int(problems, "sglang_nccl_port_base", settings["nccl_port_base"], 1024)
    if tensor is None or data is None or pipeline is None or port_base is None or nccl_base is None:
        return None
    ranks = tensor * data * pipeline
    # An instance across hosts (module_utils/multinode.py) holds its share of the ranks on each node.
    nodes = int(settings.get("nnodes") or 1)
    per_node = ranks // nodes
    per_instance = settings["gpus_per_instance"] or per_node
    if per_instance != per_node or ranks % nodes:
        across = f" over {nodes} nodes" if nodes > 1 else ""
        problems.add(
            "host",
            "sglang_gpus_per_instance" if settings["gpus_per_instance"] else "sglang_tensor_parallel_size",
            per_instance if settings["gpus_per_instance"] else tensor,
            f"tensor x data x pipeline parallel = {tensor} x {data} x {pipeline} = {ranks} GPUs per instance{across}",
            f"set sglang_gpus_per_instance: {per_node} or change the parallel sizes"
            if not ranks % nodes
            else f"make tensor x data x pipeline parallel a multiple of the {nodes} nodes",
        )
        return None
    fitting = len(gpu_ids) // per_instance
    count = settings["instance_count"] or fitting
    if count < 1 or count > fitting:
        problems.add(
            "host",
            "sglang_instance_count" if settings["instance_count"] else "sglang_gpus_per_instance",
            settings["instance_count"] or per_instance,
            f"{len(gpu_ids)} GPU(s) {list(gpu_ids)} hold {fitting} instance(s) of {per_instance} GPU(s)",
            "use fewer or smaller instances, or list more GPUs in sglang_gpu_ids",
        )
        return None
    return Shape(tensor, data, pipeline, per_instance, count, port_base, nccl_base)


def common(problems: HostProblems, settings: Mapping[str, Any], support: Support) -> Common:
    """The host-wide flags and environment checked, the served model and its name, and the bind address (one
    reachable beyond this host needs an API key)."""
    base_args = checked_args(problems, support, "host", "sglang_server_args", settings["server_args"])
    check_environment(problems, support, "host", "sglang_environment", settings["environment"])
    model_path = str(settings["model_path"])
    served_name = settings["served_model_name"] or model_path.rstrip("/").rsplit("/", 1)[-1]
    listen_host = str(settings["listen_host"])
    has_key = truthy(settings.get("has_api_key"))
    if not is_loopback(listen_host) and not has_key:
        problems.add(
            "host",
            "sglang_listen_host",
            listen_host,
            "servers reachable beyond this host need an API key",
            "set sglang_api_key (from ansible-vault) or keep 127.0.0.1 and put the router in front",
        )
    serves = serves_tls(settings.get("tls_cert"), settings.get("tls_key"))
    tls = server_tls_paths(str(settings.get("secrets_dir") or "")) if serves else {}
    return Common(base_args, model_path, served_name, listen_host, has_key, tls)


def instance_argv(settings: Mapping[str, Any], form: Shape, host: Common, index: int, flags: Mapping[str, Any]) -> list[str]:
    """Instance `index`'s SGLang command line before its key file: the model, its name, its ports and parallel sizes,
    metrics, then `flags` (speculative, host-wide and its own, in that order)."""
    argv = [
        "--model-path", host.model_path,
        "--served-model-name", host.served_name,
        "--host", host.listen_host,
        "--port", str(form.port_base + index),
        "--nccl-port", str(form.nccl_base + index),
        "--tp-size", str(form.tensor),
    ]  # fmt: skip
    if form.data > 1:
        argv += ["--dp-size", str(form.data)]
    if form.pipeline > 1:
        argv += ["--pp-size", str(form.pipeline)]
    if settings["enable_metrics"]:
        argv.append("--enable-metrics")
    for flag, value in flags.items():
        argv += render_flag(flag, value)
    return argv


def instance_environment(
    settings: Mapping[str, Any], override: Mapping[str, Any], gpus: Sequence[int], uuids: Mapping[int, str]
) -> dict[str, str]:
    """The instance's environment: the host's, its override's, and its GPUs. GPUs by UUID: inside the unit's device
    cgroup CUDA numbers only the GPUs it may open, from 0, so a host-wide index would name no GPU (or the wrong one); a
    UUID names the same GPU everywhere."""
    environment = {str(k): str(v) for k, v in _merge(settings["environment"], override.get("environment")).items()}
    environment["CUDA_VISIBLE_DEVICES"] = ",".join(uuids.get(gpu, str(gpu)) for gpu in gpus)
    environment["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return environment


def derive_instance(
    problems: HostProblems,
    settings: Mapping[str, Any],
    support: Support,
    form: Shape,
    host: Common,
    gpu_ids: Sequence[int],
    uuids: Mapping[int, str],
    index: int,
) -> dict[str, Any]:
    """Instance `index` of the host: its override checked, its GPUs, command line, environment and files."""
    override = _instance_override(settings["instance_overrides"], index)
    port = form.port_base + index
    name = f"sglang-{port}"
    where = f"instance {name}"
    unknown = sorted(set(override) - {"server_args", "speculative", "environment"})
    if unknown:
        problems.add(
            where, f"sglang_instance_overrides.{index}", unknown, "unknown keys", "use server_args, speculative or environment"
        )
    speculative = _merge(settings["speculative"], override.get("speculative"))
    spec_flags = speculative_flags(problems, support, where, "sglang_speculative", speculative)
    own_args = checked_args(
        problems, support, where, f"sglang_instance_overrides.{index}.server_args", override.get("server_args") or {}
    )
    check_environment(
        problems, support, where, f"sglang_instance_overrides.{index}.environment", override.get("environment") or {}
    )
    gpus = list(gpu_ids[index * form.per_instance : (index + 1) * form.per_instance])
    argv = instance_argv(settings, form, host, index, {**(spec_flags or {}), **(host.base_args or {}), **(own_args or {})})
    files = instance_files(
        f"{name}.service",
        str(settings["unit_dir"]),
        str(settings["config_dir"]),
        str(settings.get("secrets_dir") or ""),
        host.has_key,
    )
    # With a certificate (sglang_server_tls_cert, _key) SGLang serves only https on its port (uvicorn's TLS).
    if host.tls:
        argv += ["--ssl-certfile", host.tls["cert"], "--ssl-keyfile", host.tls["key"]]
    # The API key reaches SGLang through a root-only YAML file the unit names last: this argv is exactly what the unit
    # runs and what preflight's parser check parses.
    if files["secret"]:
        argv += ["--config", files["secret"]]
    algorithm = speculative.get("algorithm")
    return {
        "name": name,
        "unit": f"{name}.service",
        "index": index,
        "port": port,
        "nccl_port": form.nccl_base + index,
        "gpu_ids": gpus,
        "gpu_uuids": [uuids[gpu] for gpu in gpus if gpu in uuids],
        "url": connect_url(host.listen_host, port, bool(host.tls)),
        # How a gateway on another host reaches it ("" on loopback).
        "remote_url": remote_url(host.listen_host, str(settings.get("advertise_host") or settings["host"]), port, bool(host.tls)),
        # The files SGLang reads as it parses its command line (its TLS certificate and key): preflight's parser check
        # parses with stand-ins where the deploy has not written them yet.
        "tls_files": [host.tls["cert"], host.tls["key"]] if host.tls else [],
        "model_path": host.model_path,
        "served_model_name": host.served_name,
        "tensor_parallel_size": form.tensor,
        "pipeline_parallel_size": form.pipeline,
        "ranks": form.ranks,
        "argv": argv,
        "config_file": files["secret"],
        "files": files,
        "environment": instance_environment(settings, override, gpus, uuids),
        # The given flags that later checks read by name; never one that may hold a secret (the plan is a host fact,
        # shown by -v): preflight refused those already.
        "settings": {
            key: value
            for key, value in _merge(settings["server_args"], override.get("server_args")).items()
            if not secret_flag(support, flag_name(str(key)))
        },
        # The variable its server args come from, for the host-wide checks' messages.
        "settings_variable": str(settings.get("server_args_variable") or "sglang_server_args"),
        "speculative": {
            **{key: value for key, value in speculative.items() if key != "algorithm"},
            "algorithm": algorithm,
            # SGLang reports NEXTN, its alias, as EAGLE in /server_info.
            "reported_algorithm": "EAGLE" if algorithm == "NEXTN" else algorithm,
        },
    }


def derive_instances(
    problems: HostProblems,
    settings: Mapping[str, Any],
    gpu_ids: list[int],
    gpu_facts: Sequence[Mapping[str, Any]],
    support: Support,
) -> list[dict[str, Any]]:
    """The host's instances (none where its shape is wrong or does not fit), their problems added to `problems`."""
    form = shape(problems, settings, gpu_ids)
    if form is None:
        return []
    host = common(problems, settings, support)
    _override_problems(problems, settings["instance_overrides"], form.count)
    uuids = {gpu["index"]: str(gpu["uuid"]) for gpu in gpu_facts if gpu.get("uuid")}
    return [derive_instance(problems, settings, support, form, host, gpu_ids, uuids, index) for index in range(form.count)]


def gpu_device(gpu: Mapping[str, Any]) -> str | None:
    """The device node of a GPU (/dev/nvidia<minor>), as the host facts found it."""
    if gpu.get("device"):
        return str(gpu["device"])
    minor = gpu.get("minor_number")
    return f"/dev/nvidia{minor}" if isinstance(minor, int) else None
