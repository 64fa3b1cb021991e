"""Ansible filters of the router role: its extra flags as argv words, and its preflight problems."""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ansible_collections.sglang.fleet.plugins.filter.sglang_model import sglang_model_name
from ansible_collections.sglang.fleet.plugins.module_utils.flags import render_flag
from ansible_collections.sglang.fleet.plugins.module_utils.gateways import gateway_layout
from ansible_collections.sglang.fleet.plugins.module_utils.listen import is_loopback
from ansible_collections.sglang.fleet.plugins.module_utils.problems import problem_line
from ansible_collections.sglang.fleet.plugins.module_utils.tls import (
    SERVER_CA,
    certificate_facts,
    given_path,
    names_address,
    pem_files,
    server_tls_paths,
    unnamed_addresses,
)


def sglang_router_flags(extra: dict[str, Any]) -> list[str]:
    """{flag: value} as argv words, by flag (module_utils/flags.py's rule: true is a bare switch, false and null leave
    it out, a list repeats values). The router's flags are taken as spelled (without --, _ kept) and each value as
    its text (str), as this filter always rendered them."""
    return [word for key, value in sorted(extra.items()) for word in render_flag("--" + str(key).removeprefix("--"), value, str)]


def sglang_router_mode_args(by_model: bool, policy: str) -> list[str]:
    """The gateway's mode flags: its multi-model mode (``--enable-igw``) in front of several models (`by_model`), and
    also for the policy power_of_two, which smg 1.13.0 (and sglang-router 0.3.2) refuses in its single-pool mode
    unless given two workers on its command line ("Power-of-two policy requires at least 2 workers"; the fleet
    registers the workers after the start). In the multi-model mode a request names its model."""
    return ["--enable-igw"] if by_model or policy == "power_of_two" else []


def sglang_router_problems(
    host: str,
    port: int,
    prometheus_port: int,
    instances: list[dict[str, Any]],
    listening: list[dict[str, Any]],
    bind: str = "127.0.0.1",
    has_api_key: bool = False,
    kind: str = "router",
    taken_ports: Mapping[int, str] | None = None,
) -> list[str]:
    """The ports of a router (`kind` router or gateway, whose variables are sglang_<kind>_*) must not be an instance's,
    another router's (`taken_ports`), nor taken by another program; beyond loopback it needs a key."""
    problems = []
    if not is_loopback(bind) and not has_api_key:
        problems.append(
            problem_line(
                host,
                kind,
                f"sglang_{kind}_host",
                bind,
                f"a {kind} reachable beyond this host needs an API key",
                "set sglang_api_key (from ansible-vault) or keep 127.0.0.1",
            )
        )
    taken = {instance["port"]: instance["name"] for instance in instances}
    taken.update({instance["nccl_port"]: f"{instance['name']}'s NCCL port" for instance in instances})
    taken.update(taken_ports or {})
    owners = {entry["port"]: entry for entry in listening}
    for variable, value in ((f"sglang_{kind}_port", port), (f"sglang_{kind}_prometheus_port", prometheus_port)):
        if value in taken:
            problems.append(problem_line(host, kind, variable, value, f"port {value} is {taken[value]}", "choose a free port"))
        owner = owners.get(value)
        if owner and owner.get("unit") != f"sglang-{kind}.service":
            problems.append(
                problem_line(
                    host,
                    kind,
                    variable,
                    value,
                    f"port {value} is taken by PID {owner.get('pid')} ({owner.get('name', '?')})",
                    "stop that program or choose another port",
                )
            )
    if port == prometheus_port:
        problems.append(
            problem_line(host, kind, f"sglang_{kind}_prometheus_port", port, f"same as sglang_{kind}_port", "use two ports")
        )
    return problems


def _url_host(url: str) -> str:
    return urlsplit(url).hostname or ""


def sglang_router_account_problems(host: str, user: str, service: Mapping[str, Any]) -> list[str]:
    """The routers' account (`user`, sglang_router_user; its group has the same name) must be its own: not root (the
    role would make root's shell nologin and its home the routers' folder, and run the routers as root), and neither the
    servers' account nor their group (`service`: sglang_service's user and group), which would then read the routers'
    keys and the gateway's TLS key (root:<its group> 0640), and which deploy and remove.yml would change or delete."""
    others = {str(service.get("group") or ""): "the servers' group", str(service.get("user") or ""): "the servers' account"}
    others.update({"root": "root"})
    others.pop("", None)
    cause = "an empty name" if not user else others.get(user)
    if not cause:
        return []
    return [problem_line(host, "router", "sglang_router_user", user, f"{cause}: the routers run as an account (and a group of "
                         "the same name) of their own, which this role creates, changes and removes",
                         "set sglang_router_user to a name of its own (default sglang-router)")]  # fmt: skip


def sglang_gateway_members(
    hostvars: Mapping[str, Any], hosts: Sequence[str], gateway: str, inventory_hosts: Sequence[str] = (), mesh: bool = False
) -> dict[str, Any]:
    """The workers of the fleet gateway on host `gateway`: every planned instance of the run's server hosts (`hosts`)
    that drain their instances from it (their own sglang_router.gateways names it), by the URL the gateway reaches it
    at (its own instances' `url`, other hosts' `remote_url`); the model each serves (`models`, by URL); and the URL
    hosts of the inventory's server hosts outside the run (`keep`: their registered workers are left as they are;
    any other unplanned worker goes); and the workers whose instances a new shape displaces (`displaced`: their
    rollout stops them drained from the gateway, and they start again without it). In a `mesh` of gateways its own
    instances too by `remote_url`: the mesh hands each worker's URL as it is to the other gateways (recorded), where a
    loopback URL would name another host."""
    workers: list[str] = []
    models: dict[str, str] = {}
    displaced: list[str] = []
    for host in hosts:
        routes = (hostvars[host].get("sglang_router") or {}).get("gateways") or []
        if host != gateway and gateway not in [route.get("host") for route in routes]:
            continue
        stopped_first = (hostvars[host].get("sglang_reshape") or {}).get("displaced") or []
        for instance in hostvars[host].get("sglang_instances") or []:
            url = instance["url"] if host == gateway and not mesh else instance.get("remote_url") or ""
            # A node of rank other than 0 of an instance across hosts answers /health alone: rank 0 is the worker.
            if url and instance.get("serves_http", True):
                workers.append(url)
                models[url] = str(instance.get("served_model_name") or "")
                if instance.get("unit") in stopped_first:
                    displaced.append(url)
    keep = set()
    for host in inventory_hosts:
        if host not in hosts:
            variables = hostvars[host]
            # As the URL's host part reads (urlsplit's hostname): an IPv6 address without its brackets.
            address = str(variables.get("sglang_advertise_host") or variables.get("ansible_host") or host)
            keep.add(address.removeprefix("[").removesuffix("]"))
    return {"workers": workers, "models": models, "keep": sorted(keep), "displaced": displaced}


def sglang_fleet_models(hostvars: Mapping[str, Any], hosts: Sequence[str]) -> list[str]:
    """The model names the inventory has `hosts` serve (sglang_served_model_name, else the sglang_model's name, else
    the sglang_model_path directory's name, as the plan names them; each instance group's own), read from the inventory
    alone: the same for a run limited to some hosts. A gateway in front of more than one routes by model name."""
    names = set()
    for host in hosts:
        variables = hostvars[host]
        model_path = str(variables.get("sglang_model_path") or "")
        own = (
            str(variables.get("sglang_served_model_name") or "")
            or sglang_model_name(variables.get("sglang_model") or {})
            or model_path.rstrip("/").rsplit("/", 1)[-1]
        )
        groups = [group for group in variables.get("sglang_instance_groups") or [] if isinstance(group, Mapping)]
        for group in groups or [{}]:
            path = str(group.get("model_path") or "")
            names.add(str(group.get("served_model_name") or "") or path.rstrip("/").rsplit("/", 1)[-1] or own)
    return sorted(names - {""})


# The digest a gateway publishes without a client key (sglang_api_key: ""): a keyless gateway sends no key to workers.
NO_KEY_DIGEST = hashlib.sha256(b"").hexdigest()


def sglang_gateway_problems(
    host: str,
    gateways: Sequence[str],
    hostvars: Mapping[str, Any],
    server_hosts: Sequence[str],
    run_hosts: Sequence[str],
    instances: Sequence[Mapping[str, Any]],
    listen_host: str,
    api_key_digest: str,
    mesh: bool = False,
) -> list[str]:
    """What keeps the fleet gateways (`gateways`, inventory hosts) from routing to this host's instances, or this
    host's rollouts from draining them there: a gateway that is not a server host or not in this run, this host's
    servers on loopback or with another key than the gateway's, a gateway that binds loopback only, a gateway that
    other hosts reach over plain http (their rollouts would send it its admin key across the network in the clear,
    and its clients their key and prompts: issue 38), a keyed gateway that reaches this host's instances across the
    network over plain http (it would send them its client key and the prompts in the clear; an instance with a
    certificate, sglang_server_tls_cert, is reached over https). In a `mesh` of gateways (issue 39) a gateway's own host too: the
    mesh hands its workers' URLs to the others."""
    found: list[tuple[str, str, Any, str, str]] = []  # where, variable, value, cause, fix
    # The gateway's workers here: not a node of another rank of an instance across hosts, which serves no HTTP.
    instances = [instance for instance in instances if instance.get("serves_http", True)]
    for gateway in gateways:
        where = f"gateway {gateway}"
        published = hostvars[gateway].get("sglang_gateway") if gateway in run_hosts else None
        if gateway not in server_hosts:
            found.append(
                (
                    where,
                    "sglang_gateway_hosts",
                    gateway,
                    "names no host of the group sglang_servers (a gateway runs in the SGLang venv of a server host)",
                    "name a host of sglang_servers",
                )
            )
        elif not published:
            outside = gateway not in run_hosts
            found.append(
                (
                    where,
                    "sglang_gateway_hosts",
                    gateway,
                    "the gateway routes to this host's instances but is not in this run (--limit): a rollout here could "
                    "not take them out of its rotation"
                    if outside
                    else f"names {gateway}, whose own sglang_gateway_hosts does not: it runs no gateway",
                    f"add {gateway} to --limit" if outside else "set sglang_gateway_hosts once for the fleet (group_vars)",
                )
            )
        elif (gateway != host or mesh) and instances:
            if not instances[0].get("remote_url"):
                found.append(
                    (
                        "host",
                        "sglang_listen_host",
                        listen_host,
                        f"the gateway on {gateway} routes to this host's instances but cannot reach them on loopback"
                        + (" (in a mesh every gateway registers them by their remote_url)" if gateway == host else ""),
                        "set sglang_listen_host: 0.0.0.0 (or this host's address) with sglang_api_key",
                    )
                )
            if published.get("api_key_digest") not in ("", NO_KEY_DIGEST):
                # A keyed gateway sends its client key, and the clients' prompts, to every worker (issue 38).
                found += [
                    (
                        f"instance {instance.get('name')}",
                        "sglang_server_tls_cert",
                        "",
                        f"the gateway on {gateway} sends its client key and the clients' prompts to this instance across "
                        f"the network over plain http ({instance['remote_url']})",
                        "give this host's instances TLS: sglang_server_tls_cert and sglang_server_tls_key (naming "
                        "sglang_advertise_host), and sglang_server_tls_ca on the gateway's host, or keep them behind this "
                        "host's own gateway",
                    )
                    for instance in instances
                    if str(instance.get("remote_url") or "").startswith("http://")
                ]
            found += _worker_ca_problems(hostvars, host, gateway, instances)
            if published.get("api_key_digest") != api_key_digest:
                found.append(
                    (
                        "host",
                        "sglang_api_key",
                        "(not shown)",
                        f"differs from the key of the gateway on {gateway}, which sends its key to every worker",
                        "use one sglang_api_key for the gateway and the hosts it routes to",
                    )
                )
            if not published.get("remote_url"):
                found.append(
                    (
                        where,
                        "sglang_gateway_host",
                        published.get("bind"),
                        "the gateway listens on loopback only: this host's rollouts cannot take their workers out of it",
                        f"set sglang_gateway_host: 0.0.0.0 on {gateway} (with sglang_api_key)",
                    )
                )
        if published and str(published.get("remote_url") or "").startswith("http://"):
            found.append(
                (
                    where,
                    "sglang_gateway_tls_cert",
                    "",
                    f"the gateway listens beyond loopback ({published.get('bind')}) over plain http: the rollouts' admin "
                    "key, the clients' key and their prompts would cross the network in the clear",
                    f"give the gateway on {gateway} TLS: sglang_gateway_tls_cert, sglang_gateway_tls_key (and "
                    "sglang_gateway_tls_ca for its clients), or bind it to loopback (sglang_gateway_host)",
                )
            )
    return [problem_line(host, *problem) for problem in found]


def _certificates(path: Any) -> set[str]:
    """The PEM certificates of a CA file on the control node (each without its whitespace); none for no readable file."""
    try:
        text = Path(str(path)).read_text() if given_path(path) else ""
    except (OSError, ValueError):
        return set()
    blocks = text.split("-----BEGIN CERTIFICATE-----")[1:]
    return {"".join(block.split("-----END CERTIFICATE-----")[0].split()) for block in blocks}


def _worker_ca_problems(
    hostvars: Mapping[str, Any], host: str, gateway: str, instances: Sequence[Mapping[str, Any]]
) -> list[tuple[str, str, Any, str, str]]:
    """A gateway on another host verifies this host's instances over https with its own host's CA (smg's
    --ca-cert-paths: that host's sglang_server_tls_ca): one that lacks a certificate of this host's CA would refuse every
    instance, the rollout fail, and its rollback put them back over plain http, the gateway's key in the clear."""
    ca = (hostvars.get(host) or {}).get("sglang_server_tls_ca") or ""
    ours, theirs = _certificates(ca), _certificates(hostvars[gateway].get("sglang_server_tls_ca") or "")
    if not ours or ours <= theirs or not any(str(item.get("remote_url") or "").startswith("https://") for item in instances):
        return []
    return [
        (
            "host",
            "sglang_server_tls_ca",
            ca,
            f"the gateway on {gateway} verifies this host's instances over https with its host's sglang_server_tls_ca, "
            "which lacks this CA: it would refuse them (a failed switch to https rolls back to plain http)",
            f"give {gateway} a sglang_server_tls_ca that holds this CA (the same file for the fleet: group_vars)",
        )
    ]


def sglang_gateway_routes(
    hostvars: Mapping[str, Any], host: str, gateways: Sequence[str], ca_file: str = "", mesh: bool = False
) -> list[dict[str, str]]:
    """The fleet gateways a rollout on `host` drains its instances from (sglang_rollout's `gateways`): each as this host
    reaches it, with its admin key, its keys file on its own host, the instance URL it knows workers by, and the CA file
    on `host` that a gateway over TLS is verified with (`ca_file`, "" for the system's CAs). In a `mesh` of gateways
    every gateway knows the workers by `remote_url` (filter sglang_gateway_members)."""
    routes = []
    for gateway in gateways:
        published = hostvars[gateway].get("sglang_gateway") or {}
        local = gateway == host
        url = published.get("url") if local else published.get("remote_url")
        if url:
            routes.append(
                {
                    "host": gateway,
                    "url": url,
                    "admin_key": published.get("admin_key") or "",
                    "keys_file": (published.get("keys_file") or "") if local else "",
                    "worker_url": "url" if local and not mesh else "remote_url",
                    "ca_file": ca_file,
                }
            )
    return routes


def sglang_router_process_files(
    processes: Sequence[Mapping[str, Any]], api_key: str, admin_keys: Mapping[str, str], account: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Each router process's unit (the role's template, rendered with the process as `sglang_router_process`) and keys
    file (the clients' key and the admin key of its kind, `admin_keys`; private: never logged, never in a diff), as
    sglang_instance_files takes them. The keys file is root:<the router's group> 0640 (`account`: the router's account):
    the router's account reads it and can neither replace nor widen it; the servers' account cannot read it."""
    files: list[dict[str, Any]] = []
    for process in processes:
        files.append(
            {
                "src": "sglang-router.service.j2",
                "template": True,
                "vars": {"sglang_router_process": dict(process)},
                "dest": f"/etc/systemd/system/{process['unit']}",
                "owner": "root",
                "group": "root",
                "mode": "0644",
            }
        )
        files.append(
            {
                "content": json.dumps({"api_key": api_key, "admin_key": admin_keys.get(process["kind"]) or ""}) + "\n",
                "private": True,
                "dest": process["keys_file"],
                "owner": "root",
                "group": account["group"],
                "mode": "0640",
            }
        )
    return files


def sglang_router_member_reads(
    processes: Sequence[Mapping[str, Any]], admin_keys: Mapping[str, str], api_key: str
) -> list[dict[str, Any]]:
    """What deploy's probe compares of each router process's workers, as module sglang_router_members would: its URL,
    the planned workers with their models, the hosts whose workers it keeps, its workers file and the key of its
    /workers registry (its kind's admin key, else the clients' key)."""
    return [
        {
            "url": process["url"],
            "workers": list(process["workers"]),
            "keep_hosts": list(process["keep"]),
            "models": dict(process["models"]),
            "workers_file": process["workers_file"],
            "api_key": admin_keys.get(process["kind"]) or api_key,
            "ca_file": process.get("ca_file") or "",
        }
        for process in processes
    ]


UNIT_DIR = "/etc/systemd/system"
# The fleet gateway's TLS files on a host: its certificate and key in the router's folder (root's, 0750, the router's
# group), the fleet's CA (public) in the helpers' folder (root's, 0755).
TLS_FILES = {"cert": "gateway-tls.pem", "key": "gateway-tls.key", "ca": "gateway-ca.pem"}


def sglang_gateway_tls(host: str, settings: Mapping[str, Any], account: Mapping[str, Any]) -> dict[str, Any]:
    """The fleet gateway's TLS on `host` (issue 38, finding 8). `settings`: {gateway: whether `host` runs one, cert, key,
    ca: the control node's PEM files (sglang_gateway_tls_cert, _key, _ca), ca_dir: the helpers' folder}; `account`:
    the router's account and folders ({group, config_dir}). Returns the files to write (`files`, as sglang_instance_files takes
    them: the gateway's certificate and key in the router's folder, root:<router's group> 0640, so that its account
    reads them and cannot replace or widen them, and the servers' account cannot read them; the key private: never
    logged, never in a diff; the CA, root 0644 in the helpers' folder, on every host that sets it, what the fleet's
    clients there verify a gateway with), the paths of those not written, removed when found (`absent`), the paths on
    the host (`cert_path` and `key_path` when the gateway serves TLS, `ca_file` when there is a CA; "" otherwise),
    whether it does (`enabled`), and `problems` (lines naming the host and the variable)."""
    folders = {"cert": account["config_dir"], "key": account["config_dir"], "ca": settings["ca_dir"]}
    paths = {name: f"{str(folders[name]).rstrip('/')}/{file}" for name, file in TLS_FILES.items()}
    return pem_files(host, "gateway", "sglang_gateway_tls", settings, paths, str(account["group"]), bool(settings.get("gateway")))


def sglang_server_tls(host: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The instances' TLS on `host` (issue 38, finding 8). `settings`: {cert, key, ca: the control node's PEM files
    (sglang_server_tls_cert, _key, _ca), secrets_dir: the servers' secrets folder, ca_dir: the helpers' folder, group:
    the servers' group, instances: the planned instances, whose https URLs' hosts the certificate must name (a
    problem otherwise: read on the control node)}.
    As sglang_gateway_tls returns: the certificate and key root:<servers' group> 0640 in the
    secrets folder (what SGLang's --ssl-certfile and --ssl-keyfile name, module_utils/instances.py), the CA root 0644
    in the helpers' folder (what the host's clients and routers verify the instances with)."""
    paths = {**server_tls_paths(str(settings["secrets_dir"])), "ca": f"{str(settings['ca_dir']).rstrip('/')}/{SERVER_CA}"}
    tls = pem_files(host, "host", "sglang_server_tls", settings, paths, str(settings["group"]))
    if tls["enabled"] and not tls["problems"] and settings.get("instances"):
        # Every address the fleet reaches the instances at (their https URLs' hosts: 127.0.0.1 on this host, the
        # advertised address from others), which a client verifying the certificate checks it names.
        addresses = list(dict.fromkeys(
            str(urlsplit(str(instance.get(key) or "")).hostname)
            for instance in settings.get("instances") or [] for key in ("url", "remote_url") if instance.get(key)
        ))  # fmt: skip
        missing, unreadable = unnamed_addresses(str(settings["cert"]), addresses)
        cause = unreadable or (f"the certificate does not name {', '.join(missing)}, where the fleet reaches this "
                               "host's instances over https: every client would refuse them")  # fmt: skip
        if unreadable or missing:
            fix = "give the instances a certificate that names sglang_advertise_host and 127.0.0.1"
            tls["problems"] = [problem_line(host, "host", "sglang_server_tls_cert", settings["cert"], cause, fix)]
            tls["files"] = []
    return tls


WILDCARDS = ("0.0.0.0", "::")


def _mesh_certificate_problems(path: str, address: str) -> list[tuple[str, Any, str, str]]:
    """What keeps the gateway's certificate (`path`, on the control node) from joining a mesh over TLS at `address`
    (recorded, tests/recordings/smg-1.13.0-mesh: a certificate without clientAuth, or that names the node by DNS alone,
    never joins, silently): its usages and its IP addresses."""
    from cryptography.x509.oid import ExtendedKeyUsageOID  # ansible-core's own dependency, on the control node

    fix = "give the gateway a certificate for serverAuth and clientAuth that names this IP address"
    try:
        facts = certificate_facts(path)
    except (OSError, ValueError) as error:
        return [("sglang_gateway_tls_cert", path, f"cannot be read as a PEM certificate ({error})", fix)]
    found: list[tuple[str, Any, str, str]] = []
    if facts["usages"] is not None and ExtendedKeyUsageOID.CLIENT_AUTH not in facts["usages"]:
        found.append(("sglang_gateway_tls_cert", path, "the certificate does not allow clientAuth, which each gateway "
                      "of the mesh presents it for: its mesh would never join", fix))  # fmt: skip
    if _ip_address(address) and not names_address({**facts, "dns": []}, address):
        found.append(("sglang_gateway_tls_cert", path, f"the certificate does not name {address}, the IP address the "
                      "mesh's peers dial: its mesh would never join", fix))  # fmt: skip
    return found


def _ip_address(text: str) -> bool:
    """Whether `text` is an IP address (smg's mesh takes no host name: tests/recordings/smg-1.13.0-mesh)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def sglang_gateway_mesh(host: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The fleet gateways in a mesh (issue 39): with more than one gateway host (`settings.gateways`), each gateway on
    `host` (`settings.gateway`) runs smg 1.13.0's mesh (recorded: tests/recordings/smg-1.13.0-mesh), in which the
    workers registered on one gateway appear on the others, and a gateway that starts takes its peers' workers.
    Settings: bind and port (sglang_gateway_mesh_host, _port), advertise (sglang_advertise_host), peers (the other
    gateways' mesh addresses, host:port, as they publish them), tls (filter sglang_gateway_tls's: cert_path, key_path,
    ca_file), cert (sglang_gateway_tls_cert: the certificate on the control node, which must allow clientAuth and name
    the mesh's IP address), instances (the host's), taken ({port: what holds it}: the routers' ports), listening.
    Returns `enabled`, `args` (the gateway's mesh flags) and `problems` (lines naming the host and the variable): a
    mesh that binds loopback (its peers on other hosts could not reach it), a wildcard bind without an address to
    advertise or a name (smg's mesh takes IP addresses only and exits otherwise), a mesh without TLS and the CA its peers'
    certificates chain to (smg's mesh is otherwise clear text and joins any peer: a peer could add workers to every
    gateway), a port that is taken."""
    layout = gateway_layout(host, settings.get("gateways") or [])
    if not (settings.get("gateway") and layout["mesh"]):
        return {"enabled": False, "args": [], "problems": []}
    bind, port, advertise = str(settings["bind"]), int(settings["port"]), str(settings.get("advertise") or "")
    tls = settings.get("tls") or {}
    found: list[tuple[str, Any, str, str]] = []  # variable, value, cause, fix
    if is_loopback(bind):
        found.append(("sglang_gateway_mesh_host", bind, "the mesh of the fleet gateways listens on loopback: the other "
                      "gateways cannot reach it", "set sglang_gateway_mesh_host to this host's IP address"))  # fmt: skip
    elif not _ip_address(bind):
        found.append(("sglang_gateway_mesh_host", bind, "smg's mesh binds an IP address only (a name makes it exit)",
                      "set sglang_gateway_mesh_host to this host's IP address (or 0.0.0.0)"))  # fmt: skip
    elif bind in WILDCARDS and (advertise in WILDCARDS or is_loopback(advertise) or not _ip_address(advertise)):
        found.append(("sglang_advertise_host", advertise, f"the mesh binds {bind} and advertises this address to its "
                      "peers, which smg takes as an IP address only (a name or none makes it exit)",
                      "set sglang_gateway_mesh_host (or sglang_advertise_host) to this host's IP address"))  # fmt: skip
    address = bind if bind not in WILDCARDS else advertise
    if settings.get("cert") and tls.get("cert_path") and not is_loopback(bind):
        found += _mesh_certificate_problems(str(settings["cert"]), address)
    if not (tls.get("cert_path") and tls.get("ca_file")):
        missing = "sglang_gateway_tls_ca" if tls.get("cert_path") else "sglang_gateway_tls_cert"
        found.append((missing, "", "the mesh of the fleet gateways would be clear text and join any peer that reaches "
                      "its port (which could then add workers to every gateway)", "give the gateways TLS: "
                      "sglang_gateway_tls_cert and sglang_gateway_tls_key (valid for sglang_advertise_host, for "
                      "serverAuth and clientAuth) and sglang_gateway_tls_ca, the CA they chain to"))  # fmt: skip
    taken = {instance["port"]: instance["name"] for instance in settings.get("instances") or []}
    taken.update({instance["nccl_port"]: f"{instance['name']}'s NCCL port" for instance in settings.get("instances") or []})
    taken.update(settings.get("taken") or {})
    if port in taken:
        found.append(("sglang_gateway_mesh_port", port, f"port {port} is {taken[port]}", "choose a free port"))
    owner = next((entry for entry in settings.get("listening") or [] if entry.get("port") == port), None)
    if owner and owner.get("unit") != "sglang-gateway.service":
        found.append(("sglang_gateway_mesh_port", port, f"port {port} is taken by PID {owner.get('pid')} "
                      f"({owner.get('name', '?')})", "stop that program or choose another port"))  # fmt: skip
    peers = sorted({str(peer) for peer in settings.get("peers") or [] if peer})
    args = ["--enable-mesh", "--mesh-server-name", host, "--mesh-host", bind, "--mesh-port", str(port)]
    args += ["--mesh-advertise-host", advertise] if bind in WILDCARDS else []
    args += ["--mesh-peer-urls", *peers] if peers else []
    if tls.get("cert_path") and tls.get("ca_file"):
        args += ["--mesh-tls-ca-cert", tls["ca_file"], "--mesh-tls-cert", tls["cert_path"], "--mesh-tls-key", tls["key_path"]]
    return {"enabled": True, "args": args, "problems": [problem_line(host, "gateway", *problem) for problem in found]}


def sglang_router_request(processes: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> dict[str, Any]:
    """What deploy's probe compares and reads for the host's sglang-router `processes` (the role's request,
    sglang_router_probe): the launcher (`launcher_files`), each enabled process's unit and keys file (written only
    when the plan has no problem: `write`); the files to remove when found (the keys and workers files of a process not
    wanted, `legacy_files`) and every process's unit file; the units' state; the vocabulary (`vocabulary`) of a router
    in front of several models; each enabled process's workers, asked with its admin key only when nothing has a problem
    (`ask`); the router's account and its folders (`account`: {user, group, config_dir, state_dir}, root's, 0750, the
    router's group) where a process is enabled; and the settings of the role's decision (module_utils/role_decisions.py:
    sglang_router). Settings also: role_path, api_key, admin_keys (by kind), tls_files (filter sglang_gateway_tls's)."""
    enabled = [process for process in processes if process["enabled"]]
    unwanted = [process for process in processes if not process["enabled"]]
    files = [*(settings["launcher_files"] if enabled else [])]
    account = settings["account"]
    files += sglang_router_process_files(enabled, settings["api_key"], settings["admin_keys"], account)
    files += settings.get("tls_files") or []  # the gateway's certificate and key, the fleet's CA (sglang_gateway_tls)
    vocabulary = settings["vocabulary"]
    legacy_files = list(settings["legacy_files"])
    removable = [process["keys_file"] for process in unwanted] + [process["workers_file"] for process in unwanted] + legacy_files
    folders = [
        {"path": account[folder], "state": "directory", "owner": "root", "group": account["group"], "mode": "0750"}
        for folder in ("config_dir", "state_dir")
    ] if enabled else []
    read = {
        "globs": [*removable, *(f"{UNIT_DIR}/{process['unit']}" for process in processes)],
        "units": [process["unit"] for process in processes],
        "accounts": [
            {"name": account["user"], "group": account["group"], "home": account["state_dir"], "shell": "/usr/sbin/nologin"}
        ] if enabled else [],
        "paths": folders + ([
            {"path": vocabulary["dest"], "state": "file", "sha256": vocabulary["sha256"], "owner": "root", "group": "root",
             "mode": "0644"}
        ] if any(process["by_model"] for process in enabled) else []),
    }  # fmt: skip
    return {
        "name": "sglang_router",
        "role_path": settings["role_path"],
        "files": files if settings["write"] else [],
        "read": read,
        "routers": sglang_router_member_reads(enabled, settings["admin_keys"], settings["api_key"]) if settings["ask"] else [],
        "decide": {
            "processes": [dict(process) for process in processes],
            "legacy_files": legacy_files,
            "unit_dir": UNIT_DIR,
            "vocabulary": vocabulary["dest"],
        },
    }


# smg 1.13.0's flags that take a key (smg/router_args.py); argparse also takes any unambiguous prefix of them.
SECRET_ROUTER_FLAGS = ("api-key", "tenant-api-key", "control-plane-api-keys", "client-key-path", "tls-key-path")
SECRET_WORDS = ("key", "secret", "password", "passwd", "token")


def sglang_router_secret_args(host: str, extra_args: Mapping[str, Any]) -> list[str]:
    """A problem per `sglang_router_extra_args` entry that may carry a secret: a name with a key's word in it (a file's
    path, `*-path`, aside) or a prefix of one of smg's key flags. Its value would be written into the router's unit,
    which every local user may read (0644, and /proc/PID/cmdline), and shown by --diff: never printed here either."""
    problems = []
    for name in extra_args:
        flag = str(name).lstrip("-").lower().replace("_", "-")
        wordy = any(word in flag for word in SECRET_WORDS) and not flag.endswith("-path")
        prefix = len(flag) >= 3 and any(secret.startswith(flag) for secret in SECRET_ROUTER_FLAGS if not secret.endswith("-path"))
        if wordy or prefix:
            problems.append(
                problem_line(
                    host,
                    "router",
                    f"sglang_router_extra_args.{name}",
                    "<hidden>",
                    "a key in the router's flags would be written into its world-readable unit and command line",
                    "leave it out: sglang_api_key (from ansible-vault) reaches the router through its root-only keys file",
                )
            )
    return problems


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_router_flags": sglang_router_flags,
            "sglang_router_secret_args": sglang_router_secret_args,
            "sglang_router_mode_args": sglang_router_mode_args,
            "sglang_router_problems": sglang_router_problems,
            "sglang_gateway_members": sglang_gateway_members,
            "sglang_gateway_problems": sglang_gateway_problems,
            "sglang_gateway_routes": sglang_gateway_routes,
            "sglang_gateway_tls": sglang_gateway_tls,
            "sglang_server_tls": sglang_server_tls,
            "sglang_gateway_mesh": sglang_gateway_mesh,
            "sglang_router_account_problems": sglang_router_account_problems,
            "sglang_fleet_models": sglang_fleet_models,
            "sglang_router_process_files": sglang_router_process_files,
            "sglang_router_member_reads": sglang_router_member_reads,
            "sglang_router_request": sglang_router_request,
        }
