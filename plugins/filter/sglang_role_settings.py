"""Ansible filters that derive a role's settings from its plain variables in Python: one template each in the role's
vars, not a structure or chain of templates that Ansible compiles part by part whenever a task reads it."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.filter.systemd import systemd_hardening
from ansible_collections.sglang.fleet.plugins.module_utils.parser_check import checked_command_lines
from ansible_collections.sglang.fleet.plugins.module_utils.role_decisions import unique

# What every instance unit may open besides its GPUs' nodes (filter sglang_server_unit_properties adds those).
NVIDIA_CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


# What the sglang runtime's probe runs with the venv's Python (sglang_venv_request): SGLang's version, or what is wrong.
# Its record is read as it is: Distribution.files leaves out the files that are missing from Python 3.12 on.
VENV_SGLANG_CHECK = """import csv, importlib.metadata as metadata, importlib.util as util
found = list(metadata.distributions(name="sglang"))
listed = [row[0] for row in csv.reader((found[0].read_text("RECORD") or "").splitlines()) if row] if found else []
gone = [path for path in listed if not path.endswith(".pyc") and not found[0].locate_file(path).exists()]
if len(found) == 1 and util.find_spec("sglang") and not gone:
    print(found[0].version)
else:
    print(f"{len(found)} sglang distribution(s), {len(gone)} of its files missing")"""


def _router_process(kind: str, spec: Mapping[str, Any], description: str, worker_ca: str, **members: Any) -> dict[str, Any]:
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
        ] + (["--tls-cert-path", tls[0], "--tls-key-path", tls[1]] if tls else []) + list(spec.get("mesh_args") or [])
        # Workers over https (sglang_server_tls_cert) verified against their CA (smg's --ca-cert-paths, recorded).
        + (["--ca-cert-paths", worker_ca] if worker_ca else []),
    }  # fmt: skip


def sglang_router_processes(instances: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The host's sglang-router processes, each a systemd service with its own port, keys file and workers: the host's
    router (`settings.router`: in front of its own `instances`) and the fleet gateway (`settings.gateway`, in front of
    `settings.gateway_members`: every host's instances). Each of `router` and `gateway` gives enabled, unit, url, host,
    port, prometheus_host, prometheus_port, keys_file and workers_file (and optionally tls_cert_path, tls_key_path:
    its certificate and key on the host, and ca_file: the CA its clients verify it with; mesh_args: the gateway's mesh
    flags, filter sglang_gateway_mesh). `worker_ca`: the CA on the host that workers over https are verified with
    (sglang_server_tls_ca; "" for none). `displaced`: the units a new
    shape stops first (role sglang_plan: sglang_reshape), drained from every process that routes to them; a process in
    front of more than one model (`gateway_models`: the fleet's) runs sglang-router's multi-model mode (`by_model`)."""
    router, gateway = settings["router"], settings["gateway"]
    # The instances a router reaches: an instance across hosts at its rank 0 alone (`serves_http`, role sglang_plan).
    served = [instance for instance in instances if instance.get("serves_http", True)]
    urls = [instance["url"] for instance in served]
    names = [instance["served_model_name"] for instance in served]
    displaced = settings.get("displaced") or []
    members: Mapping[str, Any] = (settings.get("gateway_members") or {}) if gateway["enabled"] else {}
    worker_ca = str(settings.get("worker_ca") or "")
    return [
        _router_process(
            "router",
            router,
            f"SGLang router on port {router['port']} in front of {len(instances)} instance(s)",
            worker_ca,
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
            worker_ca,
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


def python_asked(python: Any, host_facts: Mapping[str, Any]) -> dict[str, Any]:
    """How `python` (sglang_venv_python) failed to answer the plan's gathering, which asked it with the usual names
    (ansible_facts.sglang_host: python_errors), as a command's result: why it gave no version (`stderr`), and the fix
    where it is not to install a Python (`fix`); empty where it answered."""
    if not isinstance(python, str) or not python:
        return {"rc": 1, "stderr": "not a name or a path", "fix": "set sglang_venv_python to a Python's name on PATH or its path"}
    if python in (host_facts.get("python_versions") or {}):
        return {}
    errors: Mapping[str, str] = host_facts.get("python_errors") or {}
    if python in errors:
        return {"rc": 1, "stderr": errors[python]}
    return {
        "rc": 1,
        "stderr": "not asked by the plan's gathering: the value could not be templated then (it reads the host's facts?)",
        "fix": "give sglang_venv_python a value that reads no fact of the host (host_vars, or group_vars per kind of host)",
    }


def sglang_venv_python(
    python: str,
    known: Mapping[str, str],
    asked: Mapping[str, Any] | None,
    install: bool,
    distribution: str,
) -> dict[str, Any]:
    """The Python that builds the venv: how `python` (sglang_venv_python) answered (`answer`: rc and stdout, as the
    plan's gathering found it among `known`, the host's Python versions by name, else `asked`: why it gave none), its
    version (`found`, "3.12"), whether python3.11 is installed to build it instead (`installs`: with `install`,
    sglang_venv_python_install, on Ubuntu, where `found` is a Python 3 older than 3.11), the interpreter that builds it,
    its wheel tag ("312") and the version its site-packages are named by (`minor`)."""
    answer = {"rc": 0, "stdout": known[python]} if isinstance(python, str) and python in known else dict(asked or {})
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


def _file_text(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def sglang_venv_parsed_marker(
    venv: str, parse_input: str, args_checker: Sequence[str], environment: Mapping[str, str], checker: str
) -> str:
    """The marker a venv keeps once its runtime parsed these command lines without a problem: `<venv>/.parsed-<digest>`,
    named by everything the answer depends on: the checker's input (`parse_input`, JSON), its command line
    (`args_checker`), the servers' environment it parses in and the checker's own text (the file at `checker`). The
    same digest as the role's template gave it (`[...] | to_json | hash('sha256')`): a converged host does not parse again."""
    named = json.dumps([parse_input, list(args_checker), dict(environment), _file_text(checker)])
    return f"{venv}/.parsed-{hashlib.sha256(named.encode('utf-8')).hexdigest()}"


def sglang_venv_request(runtime: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """What deploy's probe reads for the runtime `runtime` (the role's request, sglang_venv_probe; nothing for a runtime
    not among `runtimes`): the OS packages it needs (`os_packages`, and python3.11 where `python_installs`), its venv
    (`path`) with its pins (`packages`; SGLang's: every wheel its wheelhouse pinned, `pins_file`,
    sglang_wheelhouse_pins), the simulator's unpacked package and its .pth (`simulator_dir`, `python_minor`), this
    sglang-fleet's checker (`checker`) and CUDA smoke check (role files, `files_dir`) at their content, the runtime's
    version as the venv's Python finds it (SGLang's: VENV_SGLANG_CHECK; the simulator's: imported), the venvs of the
    runtime under `root`, the marker that it parsed these command lines (`marker`), the host's wheelhouse archive and
    unpacked marker (`room`), the free space under `root` and `host_wheelhouse`; and the settings of the role's
    decision (module_utils/role_decisions.py: sglang_venv). Part of sglang_venv_host's answer."""
    path, version, root = settings["path"], settings["version"], settings["root"]
    venvs = f"{root}/{runtime}-*"
    decide = {"venv": path, "venvs": venvs, "keep_previous": settings["keep_previous"], "checker": settings["checker"]}
    if runtime not in settings["runtimes"]:
        return {"name": "sglang_venv", "read": {}, "decide": decide}
    python = f"{path}/bin/python"
    os_packages = [*settings["os_packages"], *(["python3.11", "python3.11-venv"] if settings["python_installs"] else [])]
    packages = list(settings["packages"])
    paths: list[dict[str, Any]] = []
    if runtime == "sglang":
        pins = sglang_wheelhouse_pins(settings["pins_file"], packages)
        # The venv's interpreter runs and finds the pinned SGLang: one installed distribution, its package, and every
        # file its record lists but bytecode (every pin's version is read from its metadata too, `venvs`). Not
        # `import sglang`: it imports torch and transformers, 17-19 s of every host's every run on an H100 host
        # (tests/bench/sglang-import-timing-h100.txt); the install step checks that import once, after it installs
        # (tasks/sglang.yml).
        version_of = VENV_SGLANG_CHECK
        commands = [{"argv": [python, "-I", "-c", version_of], "stdout": version}]
    else:
        pins = packages
        simulator = settings["simulator_dir"]
        paths = [
            {"path": f"{simulator}/sglang_simulator/__init__.py", "state": "file"},
            {"path": f"{path}/lib/python{settings['python_minor']}/site-packages/sglang_simulator.pth", "state": "file",
             "mode": "0644", "content": f"{simulator}\n"},
        ]  # fmt: skip
        version_of = "from sglang_simulator.facts import load_facts, release; print(load_facts(release()).sglang_version)"
        commands = [{"argv": [python, "-c", version_of], "environment": {"SGLANG_SIM_VERSION": version}, "stdout": version}]
    files_dir = settings["files_dir"]
    paths += [
        {"path": root, "state": "directory", "mode": "0755"},
        {"path": settings["checker"], "state": "file", "mode": "0644",
         "content": _file_text(f"{files_dir}/check_server_args.py")},
        {"path": f"{path}/cuda_smoke_check.py", "state": "file", "mode": "0644",
         "content": _file_text(f"{files_dir}/cuda_smoke_check.py")},
    ]  # fmt: skip
    room = settings["room"]
    return {
        "name": "sglang_venv",
        "read": {
            "packages": dict.fromkeys(os_packages, ""),
            "venvs": [{"path": path, "pins": pins}],
            "paths": paths,
            "commands": commands,
            "globs": [venvs, settings["checker"], settings["marker"], room["archive"], room["unpacked"]],
            "free_space": [root, settings["host_wheelhouse"]],
        },
        "decide": decide,
    }


# The two files shipped with the wheels of a wheelhouse: every wheel pinned with its SHA-256 (lookup
# sglang_venv_wheel_hashes, on the control node) and the version's constraints.
WHEELHOUSE_REQUIREMENTS = "requirements-hashed.txt"
WHEELHOUSE_CONSTRAINTS = "constraints.txt"


def _wheelhouses(runtime: str, settings: Mapping[str, Any], python_tag: str, packages: Sequence[str]) -> dict[str, Any]:
    """The control node's wheelhouse for this host (`wheelhouse`: SGLang's only, and only where the version's
    constraints file exists: another release is the plan's problem, refused at the gate) and the host's copy of it."""
    version, files_dir = settings["version"], settings["files_dir"]
    constraints = f"{files_dir}/constraints-{version}.txt"
    glibc_minor = int(str(settings["host_facts"].get("glibc_version") or "2.34").split(".")[1])
    directory = ""
    if runtime == "sglang" and os.path.isfile(constraints):
        directory = sglang_wheelhouse_dir(
            settings["wheelhouse_cache"], version, python_tag, settings["architecture"], glibc_minor, constraints, packages
        )
    host = f"{settings['host_wheelhouse']}/sglang-{version}"
    host_constraints = f"{host}/{WHEELHOUSE_CONSTRAINTS}"
    return {
        "wheelhouse": {
            "cache": settings["wheelhouse_cache"],
            "dir": directory,
            "glibc_minor": glibc_minor,
            # The version's constraints (the role's file) and their copy beside the wheels, with the wheels' hashes.
            "source_constraints": constraints,
            "constraints": f"{directory}/{WHEELHOUSE_CONSTRAINTS}",
            "requirements": f"{directory}/{WHEELHOUSE_REQUIREMENTS}",
            "archive": f"{directory}.tar",
            "complete": bool(directory) and os.path.isfile(f"{directory}/.complete"),
        },
        "host_wheelhouse": {
            "dir": host,
            "archive": f"{host}.tar",
            "requirements": f"{host}/{WHEELHOUSE_REQUIREMENTS}",
            "constraints": host_constraints,
            # The host's pip: the wheelhouse only, every requirement with its hash, and the version's constraints.
            "pip_args": ["--no-index", "--find-links", host, "--require-hashes", "--constraint", host_constraints],
        },
    }


def sglang_venv_host(runtime: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """Everything the sglang_venv role derives for a host from its plain settings, once (set_fact in preflight): the
    venv (`path`, `bin`, `checker`), the Python that builds it (`python`, sglang_venv_python), the runtime's
    top-level pins (`packages`), the control node's wheelhouse and the host's copy (`wheelhouse`, `host_wheelhouse`),
    the simulator's archive and where it is unpacked (`simulator`), the command-line checker's argv and input
    (`args_checker`, `parse_input`) and the marker that it parsed them (`parsed_marker`), the install's footprint and
    the places whose room preflight checks (`footprint`, `room`), the fact the servers run (`runtime`: python, module,
    cuda_check, environment) and deploy's probe request (`request`, sglang_venv_request).

    `settings`: runtimes, root, version, router_version, python (sglang_venv_python), python_install, distribution,
    os_family, os_packages, architecture, host_facts (ansible_facts.sglang_host: python_versions and python_errors, as
    the plan's gathering asked sglang_venv_python, and glibc_version), wheelhouse_cache, host_wheelhouse,
    keep_previous, files_dir (the role's files), instances (sglang_instances), runtime_environment, simulator_archive
    (lookup sglang_venv_archive, runtime "simulator" only), and the role's tables server_modules, args_parsers,
    footprints."""
    version, root = settings["version"], settings["root"]
    known = runtime in settings["runtimes"]
    path = f"{root}/{runtime}-{version}"
    bin_dir = f"{path}/bin"
    host_facts: Mapping[str, Any] = settings["host_facts"] or {}
    python = sglang_venv_python(
        settings["python"], host_facts.get("python_versions") or {}, python_asked(settings["python"], host_facts),
        settings["python_install"], settings["distribution"],
    )  # fmt: skip
    router = f"smg=={settings['router_version']}"
    packages = {"sglang": [f"sglang=={version}", router], "simulator": [router]}.get(runtime, [])
    houses = _wheelhouses(runtime, settings, python["tag"], packages)
    # The environment each runtime gives every server (the simulator stands in for the pinned SGLang version), then
    # sglang_venv_runtime_environment (user-set).
    environment = {**({"SGLANG_SIM_VERSION": version} if runtime == "simulator" else {}), **settings["runtime_environment"]}
    checker = f"{path}/check_server_args.py"
    # Parses every instance's command line with the runtime's own parser, in one process (files/check_server_args.py),
    # in the servers' environment; its input: the exact argv each unit runs (as `to_json` writes it).
    args_checker = [f"{bin_dir}/python", "-I", checker, *settings["args_parsers"].get(runtime, [])]
    parse_input = json.dumps(checked_command_lines(settings["instances"]))
    files_dir = settings["files_dir"]
    marker = (
        sglang_venv_parsed_marker(path, parse_input, args_checker, environment, f"{files_dir}/check_server_args.py")
        if known else ""
    )  # fmt: skip
    archive = str(settings.get("simulator_archive") or "")
    simulator_dir = f"{path}/simulator/{os.path.basename(archive).removesuffix('.tar.gz')}" if archive else ""
    host_wheelhouse = houses["host_wheelhouse"]["dir"]
    room = {
        "venv_root": root,
        "venv": path,
        "venvs": f"{root}/{runtime}-*",
        "host_wheelhouse": settings["host_wheelhouse"],
        "archive": houses["host_wheelhouse"]["archive"],
        "unpacked": f"{host_wheelhouse}/.unpacked-*",
    }
    # The CUDA smoke check preflight runs in each instance's sandbox (--expect N [--all-reduce] follow): torch in
    # SGLang's venv (files/cuda_smoke_check.py), the simulator's own answer on test hosts.
    cuda_check = {
        "sglang": [f"{bin_dir}/python", f"{path}/cuda_smoke_check.py"],
        "simulator": [f"{bin_dir}/python", "-m", "sglang_simulator.cuda_check"],
    }.get(runtime, [])
    # Nothing is read for a runtime not among `runtimes` (preflight refuses it): its request has the decision's settings.
    request = sglang_venv_request(runtime, {
        "runtimes": settings["runtimes"], "root": root, "path": path, "version": version,
        "keep_previous": settings["keep_previous"], "checker": checker, "marker": marker,
        "os_packages": settings["os_packages"] if settings["os_family"] == "Debian" else [],
        "python_installs": python["installs"], "python_minor": python["minor"], "packages": packages,
        "pins_file": houses["wheelhouse"]["requirements"] if runtime == "sglang" else "",
        "simulator_dir": simulator_dir, "files_dir": files_dir, "room": room, "host_wheelhouse": settings["host_wheelhouse"],
    })  # fmt: skip
    return {
        "path": path,
        "bin": bin_dir,
        "checker": checker,
        "python": python,
        "packages": packages,
        **houses,
        "simulator": {"archive": archive, "dir": simulator_dir},
        "args_checker": args_checker,
        "parse_input": parse_input,
        "parsed_marker": marker,
        "footprint": dict((settings["footprints"].get(runtime) or {}).get(version) or {}),
        "room": room,
        "runtime": {
            "python": f"{bin_dir}/python",
            "module": settings["server_modules"].get(runtime, ""),
            "cuda_check": cuda_check,
            "environment": environment,
        },
        "request": request,
    }


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


def sglang_server_request(instances: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> dict[str, Any]:
    """What deploy's probe compares and reads for the servers (the role's request, sglang_server_probe), whatever the
    number of `instances`: their unit, environment and key files (`templates`) and the units' helpers (`files`),
    rendered on the control node and compared in check mode, for a plan without problems (`write`); the service account
    (`user`, `group`, `extra_groups`, `home`) and its folders (`home`, `cache_dir`, `config_dir`, `helper_dir`,
    `secrets_dir`) as the instances need them; the instances' key and unit files on the host (`secrets_dir`, `unit_dir`)
    and `nvidia_modprobe`; the units' states (`unit_properties`, with the device-node unit `devices_unit`) and when each
    instance's verified files last changed; and the settings of the role's decision (module_utils/role_decisions.py:
    sglang_server; `displaced`: the units a new shape stops first). One filter call: the settings are templated once."""
    user, group = settings["user"], settings["group"]
    secrets_dir, unit_dir = settings["secrets_dir"], settings["unit_dir"]
    folder = {"state": "directory", "mode": "0750"}
    return {
        "name": "sglang_server",
        "role_path": settings["role_path"],
        "instances": list(instances) if settings["write"] else [],
        "templates": settings["templates"],
        "files": settings["files"],
        "read": {
            "accounts": [
                {"name": user, "group": group, "groups": settings["extra_groups"], "home": settings["home"],
                 "shell": "/usr/sbin/nologin"}
            ],
            "paths": [
                {"path": settings["home"], **folder, "owner": user, "group": group},
                {"path": settings["cache_dir"], **folder, "owner": user, "group": group},
                {"path": settings["config_dir"], **folder, "owner": "root", "group": group},
                {"path": settings["helper_dir"], "state": "directory", "mode": "0755"},
                {"path": secrets_dir, **folder, "owner": "root", "group": group},
            ],
            # The TLS files no longer wanted (no certificate: filter sglang_server_tls's `absent`) are found by name.
            "globs": [f"{secrets_dir}/sglang-*.yaml", f"{unit_dir}/sglang-*.service", settings["nvidia_modprobe"],
                      *(settings.get("tls_absent") or [])],
            "units": [*(instance["unit"] for instance in instances), settings["devices_unit"]],
            "unit_properties": list(settings["unit_properties"]),
            # And the instances' TLS certificate and key, which they read at their start (role_decisions.server_units).
            "mtimes": list(dict.fromkeys([*(pair[0] for instance in instances for pair in instance["files"]["last_good"]),
                                          *(path for instance in instances for path in instance.get("tls_files") or [])])),
        },
        "decide": {
            "instances": list(instances),
            "unit_dir": unit_dir,
            "secrets_dir": secrets_dir,
            "tls_absent": list(settings.get("tls_absent") or []),
            "devices_unit": settings["devices_unit"],
            "displaced": list(settings["displaced"]),
        },
    }  # fmt: skip


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
            "sglang_venv_host": sglang_venv_host,
            "sglang_server_sandbox": sglang_server_sandbox,
            "sglang_server_request": sglang_server_request,
            "sglang_server_environment": sglang_server_environment,
        }
