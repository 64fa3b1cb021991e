"""Role sglang_router's settings and decisions on a host, in Python: one filter call per preflight step, from the role's
plain variables, returning the data its tasks read (issue 37), instead of vars/main.yml's chain of templates that Ansible
compiled part by part whenever a task read one. The fleet gateways' layout (a gateway, a mesh, its peers, the URL each
gateway knows a host's workers by) is module_utils/gateways.py's, here and in playbooks/remove.yml and tasks/status.yml."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_router_processes
from ansible_collections.sglang.fleet.plugins.filter.sglang_router import (
    sglang_fleet_models,
    sglang_gateway_members,
    sglang_gateway_mesh,
    sglang_gateway_problems,
    sglang_gateway_routes,
    sglang_gateway_tls,
    sglang_router_account_problems,
    sglang_router_flags,
    sglang_router_problems,
    sglang_router_request,
    sglang_router_secret_args,
)
from ansible_collections.sglang.fleet.plugins.filter.systemd import systemd_text_problems
from ansible_collections.sglang.fleet.plugins.module_utils.gateways import gateway_layout
from ansible_collections.sglang.fleet.plugins.module_utils.listen import connect_url, remote_url

# The units' folder, and the router role's two processes' units.
UNIT_DIR = "/etc/systemd/system"
UNITS = {"router": "sglang-router.service", "gateway": "sglang-gateway.service"}
# The routers' folders (root's, 0750, the routers' group): their keys files and the gateway's TLS certificate and key;
# their workers files (and the processes' working directory).
CONFIG_DIR = "/etc/sglang-router"
STATE_DIR = "/var/lib/sglang-router"
KEYS_FILES = {"router": f"{CONFIG_DIR}/router.json", "gateway": f"{CONFIG_DIR}/gateway.json"}
# Where releases up to issue 38's finding 8 kept the routers' files, the servers' account's to read (and, in the
# secrets folder, router.env: the router's key of an earlier release, passed as --api-key): removed when found.
LEGACY_SECRETS = ("router.env", "router.json", "gateway.json", "gateway-tls.pem", "gateway-tls.key", "gateway-ca.pem")
LEGACY_HOME = ("router-workers.json", "gateway-workers.json")


def _account(user: str) -> dict[str, str]:
    return {"user": user, "group": user, "config_dir": CONFIG_DIR, "state_dir": STATE_DIR}


def sglang_router_settings(host: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The router role's settings on `host`, from its plain variables (`settings`: enabled, user, host, port,
    prometheus_host, prometheus_port, gateway_hosts, gateway_host, gateway_port, gateway_prometheus_host,
    gateway_prometheus_port, mesh_host, mesh_port, advertise, tls_cert, tls_key, tls_ca, policy, health_check_interval,
    log_level, extra_args, admin_key, gateway_admin_key, api_key, admin_key_dir, vocabulary {package, member, sha256}
    and service: sglang_service, the server role's account and folders; status.yml gives those it reads: no mesh, flags,
    admin keys nor folders). Returns the settings (`settings`), the
    gateways' layout (`layout`, module_utils/gateways.py), the routers' account and folders (`account`), the units, URLs
    and keys files, the launcher and its listeners check (`launcher_files`), the files of earlier releases
    (`legacy_files`), the gateway's TLS (`tls`, filter sglang_gateway_tls), the vocabulary of the multi-model mode, the
    flags both processes run with (`common_args`), the admin keys by kind (`admin_keys`, secrets) and, on a gateway
    host, the gateway it publishes for every host's preflight (`published`: sglang_gateway)."""
    service: Mapping[str, Any] = settings.get("service") or {}
    helper_dir = str(service.get("helper_dir") or "")
    account = _account(str(settings.get("user") or ""))
    layout = gateway_layout(host, settings.get("gateway_hosts") or [])
    tls = sglang_gateway_tls(
        host,
        {"gateway": layout["gateway"], "cert": settings.get("tls_cert"), "key": settings.get("tls_key"),
         "ca": settings.get("tls_ca"), "ca_dir": helper_dir},
        account,
    )  # fmt: skip
    url = connect_url(str(settings["host"]), settings["port"])
    gateway_url = connect_url(str(settings["gateway_host"]), settings["gateway_port"], tls["enabled"])
    # The admin keys (secrets), where the caller reads them (status asks nothing that needs one).
    admin_keys = {"router": str(settings.get("admin_key") or ""), "gateway": str(settings.get("gateway_admin_key") or "")}
    launcher, listeners = f"{helper_dir}/sglang_router_launcher.py", f"{helper_dir}/sglang_fleet_listeners.py"
    vocabulary = dict(settings.get("vocabulary") or {})
    key_dir = str(settings.get("admin_key_dir") or "").rstrip("/")
    vocabulary.update(cache=f"{key_dir.rsplit('/', 1)[0]}/router-vocabulary",
                      dest=f"{helper_dir}/o200k_base.tiktoken")  # fmt: skip
    advertise = str(settings.get("advertise") or "")
    # A digest of the clients' key: a fleet gateway sends its key to every worker, so the hosts it routes to share it.
    digest = hashlib.sha256(str(settings.get("api_key") or "").encode()).hexdigest()
    published = {
        "url": gateway_url,
        "remote_url": remote_url(str(settings["gateway_host"]), advertise, settings["gateway_port"], tls["enabled"]),
        "bind": settings["gateway_host"],
        "keys_file": KEYS_FILES["gateway"],
        "admin_key": admin_keys["gateway"],
        "api_key_digest": digest,
        # The address (host:port) the other gateways of a mesh dial, "" on loopback (none asked: status).
        "mesh": urlsplit(remote_url(str(settings["mesh_host"]), advertise, settings["mesh_port"])).netloc
        if "mesh_host" in settings
        else "",
    }
    return {
        "settings": dict(settings),
        "layout": layout,
        "account": account,
        "units": dict(UNITS),
        "url": url,
        "remote_url": remote_url(str(settings["host"]), advertise, settings["port"]),
        "gateway_url": gateway_url,
        "keys_files": dict(KEYS_FILES),
        "launcher": launcher,
        "listeners": listeners,
        "launcher_files": [
            {"src": "sglang_router_launcher.py", "dest": launcher, "owner": "root", "group": "root", "mode": "0644"},
            {"module_utils": "listeners.py", "dest": listeners, "owner": "root", "group": "root", "mode": "0644"},
        ],
        "legacy_files": [
            *(f"{service.get('secrets_dir')}/{name}" for name in LEGACY_SECRETS),
            *(f"{service.get('home')}/{name}" for name in LEGACY_HOME),
        ],
        "tls": tls,
        "vocabulary": vocabulary,
        "helper_dir": helper_dir,
        "common_args": [
            "--policy", str(settings["policy"]), "--health-check-interval-secs", str(settings["health_check_interval"]),
            "--log-level", str(settings["log_level"]), *sglang_router_flags(dict(settings.get("extra_args") or {})),
        ] if "policy" in settings else [],
        "admin_keys": admin_keys,
        "api_key_digest": digest,
        "published": published if layout["gateway"] else {},
    }  # fmt: skip


def sglang_router_published(
    router: Mapping[str, Any], host: str, hostvars: Mapping[str, Any], play_hosts: Sequence[str]
) -> dict[str, Any]:
    """The role's published fact, sglang_router (`router`: filter sglang_router_settings's answer on `host`): the host's
    router (url, keys_file, admin_key; empty without one) and the fleet gateways of the run (`play_hosts`: all of it) that
    route to this host (`gateways`, filter sglang_gateway_routes, as each published itself in `hostvars`)."""
    enabled = bool(router["settings"]["enabled"])
    layout = router["layout"]
    return {
        "url": router["url"] if enabled else "",
        "keys_file": router["keys_files"]["router"] if enabled else "",
        "admin_key": router["admin_keys"]["router"] if enabled else "",
        "gateways": sglang_gateway_routes(
            hostvars,
            host,
            [gateway for gateway in layout["gateways"] if gateway in play_hosts],
            router["tls"]["ca_file"],
            layout["mesh"],
        ),
    }


def _taken(settings: Mapping[str, Any]) -> dict[int, str]:
    """The router's ports (where it runs), which the gateway and its mesh must not take."""
    if not settings["enabled"]:
        return {}
    return {settings["port"]: "the router's port", settings["prometheus_port"]: "the router's Prometheus port"}


def _mesh(
    router: Mapping[str, Any], host: str, instances: Sequence[Mapping[str, Any]], listening: Any, peers: Any
) -> dict[str, Any]:
    """The gateway's mesh on `host` (filter sglang_gateway_mesh): its flags and the problems of its variables."""
    settings = router["settings"]
    return sglang_gateway_mesh(host, {
        "gateway": router["layout"]["gateway"], "gateways": router["layout"]["gateways"],
        "bind": settings["mesh_host"], "port": settings["mesh_port"], "advertise": settings.get("advertise"),
        "peers": peers, "tls": router["tls"], "cert": settings.get("tls_cert"), "instances": instances,
        "taken": {**_taken(settings), settings["gateway_port"]: "the gateway's port",
                  settings["gateway_prometheus_port"]: "the gateway's Prometheus port"},
        "listening": listening,
    })  # fmt: skip


def sglang_router_checks(router: Mapping[str, Any], host: str, context: Mapping[str, Any]) -> list[str]:
    """The problems of the router role's variables on `host` (`router`: filter sglang_router_settings's answer), each naming
    the host and the variable: the router's and the gateway's ports, keys and binds, the fleet gateways that route to
    this host (as they published themselves: `context.hostvars`, `server_hosts`, `play_hosts`), control characters in
    text that reaches a unit, a key among the extra flags, the routers' account, the gateway's TLS and its mesh.
    `context` also: instances (the host's planned ones), listening (the host's listeners), listen_host
    (sglang_listen_host)."""
    settings, layout = router["settings"], router["layout"]
    instances = list(context.get("instances") or [])
    listening = list(context.get("listening") or [])
    has_key = bool(settings.get("api_key"))
    problems: list[str] = []
    if settings["enabled"]:
        problems += sglang_router_problems(host, settings["port"], settings["prometheus_port"], instances, listening,
                                           settings["host"], has_key)  # fmt: skip
    if layout["gateway"]:
        problems += sglang_router_problems(host, settings["gateway_port"], settings["gateway_prometheus_port"], instances,
                                           listening, settings["gateway_host"], has_key, "gateway", _taken(settings))  # fmt: skip
    problems += sglang_gateway_problems(
        host,
        layout["gateways"],
        context["hostvars"],
        context["server_hosts"],
        context["play_hosts"],
        instances,
        str(context.get("listen_host") or ""),
        router["api_key_digest"],
        layout["mesh"],
    )
    problems += systemd_text_problems(host, {
        "sglang_router_user": settings["user"], "sglang_router_host": settings["host"],
        "sglang_gateway_host": settings["gateway_host"], "sglang_router_policy": settings["policy"],
        "sglang_router_log_level": settings["log_level"], "sglang_router_extra_args": settings.get("extra_args") or {},
    }, where="router")  # fmt: skip
    problems += sglang_router_secret_args(host, settings.get("extra_args") or {})
    problems += sglang_router_account_problems(host, settings["user"], settings.get("service") or {})
    return [*problems, *router["tls"]["problems"], *_mesh(router, host, instances, listening, [])["problems"]]


def sglang_router_probe_request(router: Mapping[str, Any], host: str, context: Mapping[str, Any]) -> dict[str, Any]:
    """What deploy's probe compares and reads for the routers (filter sglang_router_request) on `host` (`router`: filter
    sglang_router_settings's answer), with the host's processes (filter sglang_router_processes) in its `decide`: the host's
    router in front of its `instances` and, on a gateway host, the fleet gateway in front of the planned instances of
    the run's server hosts (`run_hosts`) that route to it, the models of the inventory's (`server_hosts`, read through
    `hostvars`, whose published sglang_router and sglang_gateway this reads: every host's preflight set them first) and
    its mesh's peers. `context` also: role_path, reshape (sglang_reshape), listening, write and ask (booleans)."""
    settings, layout, tls = router["settings"], router["layout"], router["tls"]
    hostvars, server_hosts = context["hostvars"], context["server_hosts"]
    instances = list(context.get("instances") or [])
    service: Mapping[str, Any] = settings.get("service") or {}
    peers = gateway_layout(host, layout["gateways"], hostvars)["peers"] if layout["in_mesh"] else []
    gateway = layout["gateway"]
    # What the unit adds to every process (its template reads the process alone, and sglang_runtime).
    account = router["account"]
    common = {"user": account["user"], "group": account["group"], "state_dir": STATE_DIR, "launcher": router["launcher"],
              "helper_dir": router["helper_dir"], "common_args": router["common_args"], "policy": settings["policy"]}  # fmt: skip
    processes = sglang_router_processes(instances, {
        "router": {"enabled": settings["enabled"], "unit": UNITS["router"], "url": router["url"], "host": settings["host"],
                   "port": settings["port"], "prometheus_host": settings["prometheus_host"],
                   "prometheus_port": settings["prometheus_port"], "keys_file": KEYS_FILES["router"],
                   "workers_file": f"{STATE_DIR}/router-workers.json"},
        "gateway": {"enabled": gateway, "unit": UNITS["gateway"], "url": router["gateway_url"],
                    "host": settings["gateway_host"], "port": settings["gateway_port"],
                    "prometheus_host": settings["gateway_prometheus_host"],
                    "prometheus_port": settings["gateway_prometheus_port"], "keys_file": KEYS_FILES["gateway"],
                    "workers_file": f"{STATE_DIR}/gateway-workers.json", "tls_cert_path": tls["cert_path"],
                    "tls_key_path": tls["key_path"], "ca_file": tls["ca_file"],
                    "mesh_args": _mesh(router, host, instances, context.get("listening"), peers)["args"]},
        "displaced": (context.get("reshape") or {}).get("displaced") or [],
        "worker_ca": service.get("tls_ca") or "",
        "gateway_members": sglang_gateway_members(hostvars, context.get("run_hosts") or [], host, server_hosts, layout["mesh"])
        if gateway else {},
        "gateway_models": sglang_fleet_models(hostvars, server_hosts) if gateway else [],
    })  # fmt: skip
    processes = [{**process, **common} for process in processes]
    return sglang_router_request(processes, {
        "role_path": context["role_path"], "api_key": str(settings.get("api_key") or ""), "admin_keys": router["admin_keys"],
        "account": router["account"], "launcher_files": router["launcher_files"], "vocabulary": router["vocabulary"],
        "legacy_files": router["legacy_files"] + tls["absent"], "tls_files": tls["files"],
        "write": bool(context.get("write")), "ask": bool(context.get("ask")),
    })  # fmt: skip


def sglang_gateway_layout(host: str, gateways: Sequence[str], hostvars: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Filter form of module_utils/gateways.py's gateway_layout: the fleet gateways as `host` sees them."""
    return gateway_layout(host, gateways, hostvars)


def sglang_router_leave(host: str, hostvars: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """Where deploy left the routers of `host`, for playbooks/remove.yml and the role's tasks/remove.yml (which run no
    preflight): the units (`units`, by kind), the routers' folders (`folders`), the host's router (`router_url`,
    `router_keys_file`: "" without one, `own.sglang_router_enabled`) and the fleet gateways the removal takes `host`'s
    instances out of (`gateways`, module sglang_rollout's, run on each gateway's host): each at the URL its own host
    reaches it, its keys file there, the fleet's CA there (where it has one, sglang_gateway_tls_ca, in the helpers'
    folder `own.helper_dir`), and the URL it knows `host`'s workers by (module_utils/gateways.py). Each gateway's
    sglang_gateway_host, _port, _tls_cert and _tls_ca as `hostvars` have them, else as `own` has them (this host's:
    the role's defaults, which another host's hostvars lack in a play that loads no role's defaults)."""
    layout = gateway_layout(host, own.get("sglang_gateway_hosts") or [])
    names = ("sglang_gateway_host", "sglang_gateway_port", "sglang_gateway_tls_cert", "sglang_gateway_tls_ca")
    gateways = []
    for gateway in layout["gateways"]:
        # Not .get(): Ansible's hostvars answers a host outside the inventory with an undefined value, not a KeyError.
        found = hostvars[gateway] if gateway in hostvars else {}  # noqa: SIM401
        values = {name: found.get(name, own.get(name)) for name in names}
        tls = sglang_gateway_tls(gateway, {"ca": values["sglang_gateway_tls_ca"], "ca_dir": own.get("helper_dir") or ""},
                                 _account(""))  # fmt: skip
        gateways.append({
            "host": gateway,
            "url": connect_url(str(values["sglang_gateway_host"]), str(values["sglang_gateway_port"]),
                               bool(values["sglang_gateway_tls_cert"])),
            "keys_file": KEYS_FILES["gateway"],
            "ca_file": tls["ca_file"],
            "worker_url": layout["worker_url"][gateway],
        })  # fmt: skip
    enabled = bool(own.get("sglang_router_enabled"))
    return {
        "units": dict(UNITS),
        "folders": [CONFIG_DIR, STATE_DIR],
        "router_url": connect_url(str(own["sglang_router_host"]), own["sglang_router_port"]) if enabled else "",
        "router_keys_file": KEYS_FILES["router"] if enabled else "",
        "gateways": gateways,
    }


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_router_settings": sglang_router_settings,
            "sglang_router_published": sglang_router_published,
            "sglang_router_checks": sglang_router_checks,
            "sglang_router_probe_request": sglang_router_probe_request,
            "sglang_gateway_layout": sglang_gateway_layout,
            "sglang_router_leave": sglang_router_leave,
        }
