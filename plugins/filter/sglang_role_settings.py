"""Ansible filters that derive a role's settings from its plain variables in Python: one template each in the role's
vars, not a structure or chain of templates that Ansible compiles part by part whenever a task reads it."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.filter.systemd import systemd_hardening
from ansible_collections.sglang.fleet.plugins.module_utils.role_decisions import unique

# What every instance unit may open besides its GPUs' nodes (filter sglang_server_unit_properties adds those).
NVIDIA_CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def _router_process(kind: str, spec: Mapping[str, Any], description: str, **members: Any) -> dict[str, Any]:
    # Over TLS (a fleet gateway with sglang_gateway_tls_cert): smg 1.13.0's --tls-cert-path/--tls-key-path (recorded:
    # tests/recordings/smg-1.13.0-tls), its certificate and key files on the host (`tls_files`, which restart it when
    # they change), and the CA the fleet's clients verify it with (`ca_file`, "" for the system's CAs).
    tls = [spec["tls_cert_path"], spec["tls_key_path"]] if spec.get("tls_cert_path") else []
    return {
        "kind": kind,
        "enabled": spec["enabled"],
        "unit": spec["unit"],
        "url": spec["url"],
        "port": spec["port"],
        "keys_file": spec["keys_file"],
        "description": description,
        "workers_file": spec["workers_file"],
        "tls_files": tls,
        "ca_file": str(spec.get("ca_file") or ""),
        **members,
        "argv": [
            "--host", spec["host"], "--port", str(spec["port"]),
            "--prometheus-host", spec["prometheus_host"], "--prometheus-port", str(spec["prometheus_port"]),
        ] + (["--tls-cert-path", tls[0], "--tls-key-path", tls[1]] if tls else []),
    }  # fmt: skip


def sglang_router_processes(instances: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The host's sglang-router processes, each a systemd service with its own port, keys file and workers: the host's
    router (`settings.router`: in front of its own `instances`) and the fleet gateway (`settings.gateway`, in front of
    `settings.gateway_members`: every host's instances). Each of `router` and `gateway` gives enabled, unit, url, host,
    port, prometheus_host, prometheus_port, keys_file and workers_file (and optionally tls_cert_path, tls_key_path:
    its certificate and key on the host, and ca_file: the CA its clients verify it with). `displaced`: the units a new
    shape stops first (role sglang_plan: sglang_reshape), drained from every process that routes to them; a process in
    front of more than one model (`gateway_models`: the fleet's) runs sglang-router's multi-model mode (`by_model`)."""
    router, gateway = settings["router"], settings["gateway"]
    # The instances a router reaches: an instance across hosts at its rank 0 alone (`serves_http`, role sglang_plan).
    served = [instance for instance in instances if instance.get("serves_http", True)]
    urls = [instance["url"] for instance in served]
    names = [instance["served_model_name"] for instance in served]
    displaced = settings.get("displaced") or []
    members: Mapping[str, Any] = (settings.get("gateway_members") or {}) if gateway["enabled"] else {}
    return [
        _router_process(
            "router",
            router,
            f"SGLang router on port {router['port']} in front of {len(instances)} instance(s)",
            after=[instance["unit"] for instance in instances],
            by_model=bool(router["enabled"]) and len(unique(names)) > 1,
            workers=urls,
            models=dict(zip(urls, names, strict=True)),
            keep=[],
            displaced=[instance["url"] for instance in served if instance["unit"] in displaced],
        ),
        _router_process(
            "gateway",
            gateway,
            f"SGLang fleet gateway on port {gateway['port']} in front of the fleet's instances",
            after=[],
            by_model=bool(gateway["enabled"]) and len(settings.get("gateway_models") or []) > 1,
            workers=members.get("workers", []),
            keep=members.get("keep", []),
            models=members.get("models", {}),
            displaced=members.get("displaced", []),
        ),
    ]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(number) for number in re.findall(r"\d+", text))


def sglang_venv_python(
    python: str,
    known: Mapping[str, str],
    asked: Mapping[str, Any] | None,
    install: bool,
    distribution: str,
) -> dict[str, Any]:
    """The Python that builds the venv: how `python` (sglang_venv_python) answered (`answer`: rc and stdout, as the
    plan's probe found it among `known`, the host's Python versions by name, else as preflight `asked` it), its
    version (`found`, "3.12"), whether python3.11 is installed to build it instead (`installs`: with `install`,
    sglang_venv_python_install, on Ubuntu, where `found` is a Python 3 older than 3.11), the interpreter that builds it,
    its wheel tag ("312") and the version its site-packages are named by (`minor`)."""
    answer = {"rc": 0, "stdout": known[python]} if python in known else dict(asked or {})
    found = str(answer.get("stdout") or "").strip()
    installs = bool(install) and distribution == "Ubuntu" and (3, 0) <= _version(found) < (3, 11)
    return {
        "answer": answer,
        "found": found,
        "installs": installs,
        "interpreter": "/usr/bin/python3.11" if installs else python,
        "tag": "311" if installs else "".join((found or "3.11").split(".")),
        "minor": "3.11" if installs else found,
    }


def sglang_wheelhouse_pins(path: str, fallback: Sequence[str]) -> list[str]:
    """Every wheel a wheelhouse pinned (its requirements file at `path` on the control node, each requirement line
    reduced to `name==version`), or `fallback` (the top-level pins) where this control node has no such file."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read().rstrip()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return list(fallback)
    return [re.sub(r"^(\S+==[^\s;]+).*$", r"\1", line) for line in text.splitlines() if re.match(r"[A-Za-z0-9]", line)]


def sglang_wheelhouse_dir(
    cache: str, version: str, tag: str, architecture: str, glibc_minor: int, constraints: str, packages: Sequence[str]
) -> str:
    """The control node's wheelhouse for a host: one per SGLang `version`, Python wheel `tag`, `architecture` and glibc
    (`glibc_minor`: wheels for manylinux_2_17 up to the host's), named also by the pins (the `constraints` file's text and the
    top-level `packages`): changing either builds a new one. The same name the role's templates gave it."""
    with open(constraints, encoding="utf-8") as handle:
        pinned = handle.read().rstrip() + " ".join(packages)
    pins = hashlib.sha256(pinned.encode("utf-8")).hexdigest()
    return f"{cache}/sglang-{version}-cp{tag}-{architecture}-glibc2.{int(glibc_minor)}-{pins[:12]}"


def sglang_server_sandbox(user: str, group: str, home: str, read_write_paths: Sequence[str], cache_dir: str) -> list[str]:
    """The instance units' account, limits and device policy, then the sandbox every fleet unit shares (filter
    systemd_hardening: writable only `home`, `cache_dir` and `read_write_paths`), one "Key=value" each: the unit renders
    them and preflight's CUDA check runs under the same list (systemd-run --property). The cache directory with '-':
    preflight's checks run in this sandbox before the configure tasks create it (a host deployed before it existed),
    and systemd refuses to start a unit whose ReadWritePaths= names a missing path."""
    return [
        f"User={user}",
        f"Group={group}",
        f"WorkingDirectory={home}",
        "LimitNOFILE=65536",
        "UMask=0027",
        "DevicePolicy=closed",
        *(f"DeviceAllow={device} rw" for device in NVIDIA_CONTROL_DEVICES),
        *systemd_hardening([home, f"-{cache_dir}", *read_write_paths]),
    ]


# Each library's kernel/compile cache in its own folder of sglang_server_cache_dir (persistent, the service account's,
# shared by the host's instances; each library publishes a build atomically or under a file lock: README, "Restart
# times"). SGLANG_JIT_CACHE_DIR is SGLang 0.5.23's JIT kernel cache, TVM_FFI_CACHE_DIR 0.5.17's (apache-tvm-ffi's);
# FlashInfer puts its JIT cache under $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer.
KERNEL_CACHE_FOLDERS = {
    "SGLANG_JIT_CACHE_DIR": "sglang-jit",
    "TVM_FFI_CACHE_DIR": "tvm-ffi",
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "DG_JIT_CACHE_DIR": "deep_gemm",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
}


def sglang_server_environment(cuda: Mapping[str, str], home: str, runtime: Mapping[str, str], cache_dir: str) -> dict[str, str]:
    """The environment of every instance: CUDA's (`cuda`), the service's home and Hugging Face's, each kernel cache's
    folder under `cache_dir`, then the runtime's."""
    caches = {name: f"{cache_dir}/{folder}" for name, folder in KERNEL_CACHE_FOLDERS.items()}
    return {**cuda, "HOME": home, "HF_HOME": f"{home}/huggingface", **caches, **runtime}


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_router_processes": sglang_router_processes,
            "sglang_venv_python": sglang_venv_python,
            "sglang_wheelhouse_pins": sglang_wheelhouse_pins,
            "sglang_wheelhouse_dir": sglang_wheelhouse_dir,
            "sglang_server_sandbox": sglang_server_sandbox,
            "sglang_server_environment": sglang_server_environment,
        }
