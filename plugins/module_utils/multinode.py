"""An instance that spans hosts: an sglang_instance_groups entry with `nodes`, the hosts (in rank order) that serve it
together with SGLang's own multi-node launch (`--nnodes N --node-rank i --dist-init-addr <rank 0>:<port>`).

Every node plans its part from the same entry: its rank (its place in `nodes`), the rendezvous at rank 0's address, its
share of the GPUs (tensor x data x pipeline parallel / nodes) and the network interface NCCL and Gloo use. SGLang's
rank 0 hosts the rendezvous (torch.distributed's TCPStore at --dist-init-addr) and serves HTTP; a node of another rank
answers only /health (SGLang's dummy health server, once its schedulers joined rank 0), so only rank 0 is a router's
or gateway's worker. `node_problems` checks the nodes as a whole (one release, model, GPU type and count, rendezvous).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.instance_checks import port_taken
from ansible_collections.sglang.fleet.plugins.module_utils.problems import HostProblems, problem_line

NODE_KEYS = ("nodes", "rendezvous_port", "network_interface")
# SGLang's own example of --dist-init-addr (`192.168.0.2:25000`).
DEFAULT_RENDEZVOUS_PORT = 25000
VARIABLE = "sglang_instance_groups"
# What every node of an instance must have alike, with the variable a difference is fixed in.
ALIKE = (
    ("version", "sglang_version", "the same SGLang release"),
    ("model", "sglang_model", "the same model revision"),
    ("gpu_names", "sglang_gpu_ids", "the same GPU type"),
    ("node_gpus", "sglang_gpu_ids", "the same number of GPUs"),
    ("shape", VARIABLE, "the same tensor, data and pipeline parallel sizes"),
    ("nodes", VARIABLE, "the same nodes in the same order"),
    ("rendezvous", VARIABLE, "the same rendezvous"),
)


def node_address(variables: Mapping[str, Any], host: str) -> str:
    """How the other nodes reach `host`: its sglang_advertise_host, else its ansible_host, else its name."""
    return str(variables.get("sglang_advertise_host") or variables.get("ansible_host") or host)


def host_variables(hostvars: Mapping[str, Any], host: str) -> Mapping[str, Any]:
    """`host`'s variables, or none for a name that is no inventory host: Ansible's hostvars answers such a name with an
    undefined value that fails when tested (`hostvars.get(name) or {}` would), not with a KeyError."""
    return hostvars[host] if host in hostvars else {}  # noqa: SIM401 (.get never misses on hostvars)


def node_addresses(groups: Any, hostvars: Mapping[str, Any]) -> dict[str, str]:
    """The address of every node the groups name (what the plan's rendezvous is built from)."""
    if not isinstance(groups, Sequence) or isinstance(groups, str):
        return {}
    named = {
        str(node)
        for group in groups
        if isinstance(group, Mapping) and isinstance(group.get("nodes"), Sequence) and not isinstance(group["nodes"], str)
        for node in group["nodes"]
    }
    return {node: node_address(host_variables(hostvars, node), node) for node in sorted(named)}


def node_settings(problems: HostProblems, settings: Mapping[str, Any], group: Mapping[str, Any]) -> dict[str, Any] | None:
    """This host's part of a group that spans hosts: {"nodes", "nnodes", "rank", "rendezvous", "rendezvous_port",
    "interface", "peer_address"}; {} for a group on this host alone; None (and problems) when the declaration is wrong."""
    if "nodes" not in group:
        return {}
    name = str(group["name"])
    where = f"group {name}"
    host = str(settings["host"])
    nodes = group["nodes"]
    variable = f"{VARIABLE}.{name}.nodes"
    if (
        not isinstance(nodes, Sequence)
        or isinstance(nodes, str)
        or len(nodes) < 2
        or not all(isinstance(node, str) and node for node in nodes)
        or len(set(nodes)) != len(nodes)
    ):
        problems.add(
            where, variable, nodes, "must list two or more different inventory hosts, rank 0 first", "e.g. nodes: [gpu-a, gpu-b]"
        )
        return None
    if host not in nodes:
        problems.add(
            where,
            variable,
            list(nodes),
            "this host is not one of the group's nodes, yet has the group",
            "set the group only on its nodes (group_vars of an inventory group of exactly these hosts)",
        )
        return None
    port = group.get("rendezvous_port", DEFAULT_RENDEZVOUS_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65535:
        problems.add(
            where, f"{VARIABLE}.{name}.rendezvous_port", port, "must be a port from 1024 to 65535", "set a free port on rank 0"
        )
        return None
    interface = group.get("network_interface") or ""
    if not isinstance(interface, str) or (
        interface and not interface.replace("^", "").replace(",", "").replace("-", "").replace(".", "").isalnum()
    ):
        problems.add(
            where,
            f"{VARIABLE}.{name}.network_interface",
            interface,
            "must be a network interface name (or NCCL's prefix list, e.g. eth0 or ^docker,lo)",
            "name the interface the nodes reach each other on",
        )
        return None
    count = group.get("instance_count", settings.get("instance_count"))
    if count not in (None, 0, 1):
        problems.add(
            where,
            f"{VARIABLE}.{name}.instance_count",
            count,
            "a group across hosts is one instance",
            "remove instance_count (or set 1); declare another group for another instance",
        )
        return None
    addresses = settings.get("node_addresses") or {}
    address = str(addresses.get(nodes[0]) or nodes[0])
    # The node whose route gives this node's interface: rank 0 for the others, rank 1 for rank 0 (its own address may
    # resolve on it to another of its interfaces than the one the others reach it on).
    peer = nodes[1] if nodes[0] == host else nodes[0]
    return {
        "nodes": list(nodes),
        # How the nodes reach each other, in rank order: rank 0's check listener counts connections from these only.
        "addresses": [str(addresses.get(node) or node) for node in nodes],
        "nnodes": len(nodes),
        "rank": nodes.index(host),
        "rendezvous_port": port,
        "rendezvous": f"[{address}]:{port}" if ":" in address else f"{address}:{port}",
        "interface": interface,
        "peer_address": str(addresses.get(peer) or peer),
    }


def node_instance(
    instance: Mapping[str, Any], node: Mapping[str, Any], settings: Mapping[str, Any], facts: Mapping[str, Any]
) -> dict[str, Any]:
    """The instance as this node runs it: SGLang's node flags (before --config, which the unit names last), the NCCL and
    Gloo interface, and what the whole-instance checks and the roles read (rank; only rank 0 serves HTTP)."""
    argv = list(instance["argv"])
    at = argv.index("--config") if "--config" in argv else len(argv)
    argv[at:at] = ["--nnodes", str(node["nnodes"]), "--node-rank", str(node["rank"]), "--dist-init-addr", node["rendezvous"]]
    environment = dict(instance["environment"])
    interface = node["interface"] or routed_interface(facts, node["peer_address"])
    if interface:
        environment.update(NCCL_SOCKET_IFNAME=interface, GLOO_SOCKET_IFNAME=interface)
    names = {gpu["index"]: str(gpu.get("name") or "") for gpu in facts.get("gpus") or []}
    source = settings.get("model_source") or {}
    return {
        **instance,
        "argv": argv,
        "environment": environment,
        "nodes": node["nodes"],
        "node_addresses": node["addresses"],
        "nnodes": node["nnodes"],
        "node_rank": node["rank"],
        "rendezvous": node["rendezvous"],
        "rendezvous_port": node["rendezvous_port"],
        "serves_http": node["rank"] == 0,
        # A node of another rank is no worker of a router or gateway (it answers /health alone).
        **({} if node["rank"] == 0 else {"remote_url": ""}),
        "node_facts": {
            "version": str(settings.get("version") or ""),
            "model": {"path": instance["model_path"], "revision": source.get("revision", "")}
            if source
            else instance["model_path"],
            "gpu_names": sorted({names.get(gpu, "") for gpu in instance["gpu_ids"]}),
            "node_gpus": len(instance["gpu_ids"]),
            "shape": [
                instance["tensor_parallel_size"],
                instance["ranks"] // max(1, instance["tensor_parallel_size"] * instance["pipeline_parallel_size"]),
                instance["pipeline_parallel_size"],
            ],
            "nodes": node["nodes"],
            "rendezvous": node["rendezvous"],
        },
    }


def rendezvous_problems(problems: HostProblems, facts: Mapping[str, Any], instances: Sequence[Mapping[str, Any]]) -> None:
    """Rank 0 hosts the rendezvous: its port must be free on this host (no other program, no port of an instance)."""
    ports = {port: instance["name"] for instance in instances for port in (instance["port"], instance["nccl_port"])}
    listeners = {entry["port"]: entry for entry in facts.get("listening") or []}
    own_units = {str(instance["unit"]) for instance in instances}
    for instance in instances:
        if instance.get("node_rank") != 0:
            continue
        port = instance["rendezvous_port"]
        variable = f"{VARIABLE}.{instance.get('group')}.rendezvous_port"
        where = f"instance {instance['name']}"
        if port in ports:
            problems.add(where, variable, port, f"port {port} is also a port of {ports[port]}", "choose a port no instance uses")
        taken = listeners.get(port)
        if taken and taken.get("unit") not in own_units:
            problems.add(
                where,
                variable,
                port,
                port_taken(port, taken),
                "stop that program or choose another rendezvous_port",
            )


def spans_hosts(variables: Mapping[str, Any]) -> bool:
    """Whether a host runs a part of an instance that spans hosts (a planned instance with a node rank)."""
    return any("node_rank" in instance for instance in variables.get("sglang_instances") or [])


def forks_problem(host: str, play_hosts: Sequence[str], hostvars: Mapping[str, Any], forks: int) -> list[str]:
    """Every node of the run restarts its part in the same task, each waiting until its instance is whole (rank 0 waits
    for every rank at the rendezvous): with more such hosts than Ansible's forks, the nodes queued for a free fork
    never join those that hold one, and every instance times out and rolls back. Counted until past `forks`."""
    nodes = 0
    for other in play_hosts:
        nodes += spans_hosts(host_variables(hostvars, other))
        if nodes > forks:
            return [
                problem_line(
                    host,
                    "host",
                    "forks",
                    forks,
                    f"more than {forks} hosts of the run run a part of an instance that spans hosts, and all of them"
                    " restart together in one task (a node without a fork of its own would never join the others)",
                    "raise forks (ansible-playbook --forks, or forks in ansible.cfg) to at least the number of such hosts",
                )
            ]
    return []


def node_problems(host: str, play_hosts: Sequence[str], hostvars: Mapping[str, Any], forks: int = 0) -> list[str]:
    """The instance checked as a whole from `host`: every other node is in the play with its part planned, alike
    (release, model, GPU type and count, shape, nodes, rendezvous); tensor x pipeline parallel are the GPUs of all the
    nodes; with `forks` (ansible_forks), no more such hosts in the run than Ansible runs a task on at once. One line
    per difference, naming this node, the instance and the variable."""
    lines: list[str] = []
    if forks > 0 and spans_hosts(host_variables(hostvars, host)):
        lines += forks_problem(host, play_hosts, hostvars, forks)
    for instance in (hostvars.get(host) or {}).get("sglang_instances") or []:
        if "node_rank" not in instance:
            continue
        where = f"instance {instance['name']}"
        group = instance.get("group")
        mine = instance["node_facts"]
        total = mine["node_gpus"] * instance["nnodes"]
        if instance["ranks"] != total:
            lines.append(
                problem_line(
                    host,
                    where,
                    f"{VARIABLE}.{group}.tensor_parallel_size",
                    instance["tensor_parallel_size"],
                    f"tensor x data x pipeline parallel = {instance['ranks']} GPUs, the nodes have {total}",
                    "give every node tensor x data x pipeline parallel / nodes GPUs",
                )
            )
        for node in instance["nodes"]:
            if node == host:
                continue
            theirs = next(
                (
                    other["node_facts"]
                    for other in host_variables(hostvars, node).get("sglang_instances") or []
                    if other.get("group") == group and "node_facts" in other
                ),
                None,
            )
            if node not in play_hosts or theirs is None:
                lines.append(
                    problem_line(
                        host,
                        where,
                        f"{VARIABLE}.{group}.nodes",
                        instance["nodes"],
                        f"node {node} has no part of this instance planned in this run"
                        " (not in the play, its preflight found problems, or its group differs)",
                        f"deploy every node together (--limit {','.join(instance['nodes'])}) with the same group on each",
                    )
                )
                continue
            for key, variable, what in ALIKE:
                if mine[key] != theirs[key]:
                    lines.append(
                        problem_line(
                            host,
                            where,
                            variable,
                            mine[key],
                            f"node {node} has {theirs[key]!r}: every node of the instance needs {what}",
                            f"set {variable} alike on {', '.join(instance['nodes'])}",
                        )
                    )
    return lines


def node_instances(instances: Sequence[Mapping[str, Any]], hostvars: Mapping[str, Any], fact: str) -> list[Mapping[str, Any]]:
    """This host's parts of instances that span hosts whose group any of their nodes names in its fact `fact` (a list
    of group names each node published: changed, failed): what every node then does together."""
    return [
        instance
        for instance in instances
        if "nodes" in instance
        and any(instance.get("group") in (host_variables(hostvars, node).get(fact) or []) for node in instance["nodes"])
    ]


# How long a node waits for a TCP connection to rank 0's rendezvous port in preflight (seconds).
REACH_SECONDS = 5


def rendezvous_checks(instances: Sequence[Mapping[str, Any]], listening: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Preflight's TCP check between the nodes, as data for its tasks: `listen`, the rendezvous ports rank 0 opens for
    the check where nothing listens yet ({instance, group, port, peers: the other nodes' addresses, seconds}; a port
    held already, by the running rank 0 or by another program that rendezvous_problems names, is reached as it is), and
    `reach`, what every node of another rank connects to ({instance, group, rank_0, address, port, seconds}). Rank 0's
    listener ends early once each peer connected from its address; a connection from any other address counts for
    nothing, so no other host can end it before the nodes' check (and make preflight refuse them)."""
    held = {entry.get("port") for entry in listening}
    listen, reach = [], []
    for instance in instances:
        if "node_rank" not in instance:
            continue
        port = instance["rendezvous_port"]
        if instance["node_rank"] == 0:
            if port not in held:
                listen.append(
                    {
                        "instance": instance["name"],
                        "group": instance.get("group"),
                        "port": port,
                        "peers": sorted(set(instance["node_addresses"][1:])),
                        "seconds": REACH_SECONDS * 3,
                    }
                )
            continue
        address = rendezvous_host(str(instance["rendezvous"]))
        reach.append(
            {
                "instance": instance["name"],
                "group": instance.get("group"),
                "rank_0": instance["nodes"][0],
                "address": address,
                "port": port,
                "seconds": REACH_SECONDS,
            }
        )
    return {"listen": listen, "reach": reach}


def unreached_problems(host: str, results: Sequence[Mapping[str, Any]], listened: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """A line per rendezvous this node could not reach (the registered wait_for results of rendezvous_checks' reach,
    each made not to fail the task: wait_for says `state: started` when it connected, else why in `msg`), and, on rank
    0, per check listener that did not end well (`listened`: the registered async_status results of its jobs, made not
    to fail the task: `rc` 0 when it listened; else the port was taken after the host's facts were read, by a program
    that answered the other nodes in its stead, or the listener could not run)."""
    lines = [listener_problem(host, result) for result in listened if not result.get("skipped") and result.get("rc") != 0]
    for result in results:
        if result.get("skipped") or result.get("state") == "started":
            continue
        item = result["item"]
        lines.append(
            problem_line(
                host,
                f"instance {item['instance']}",
                f"{VARIABLE}.{item['group']}.rendezvous_port",
                item["port"],
                f"node {host} cannot reach rank 0 ({item['rank_0']}) at {item['address']}:{item['port']} within"
                f" {item['seconds']} s ({str(result.get('msg') or 'no answer').strip()})",
                f"let the nodes reach {item['rank_0']}'s port {item['port']} (a firewall rule), or set the address they"
                f" reach {item['rank_0']} at (sglang_advertise_host or ansible_host of {item['rank_0']})",
            )
        )
    return lines


def listener_problem(host: str, result: Mapping[str, Any]) -> str:
    """The problem line of rank 0's check listener that did not end well (unreached_problems)."""
    item = dict((result.get("item") or {}).get("item") or {})
    why = str(result.get("stderr") or result.get("msg") or "it did not end").strip().splitlines() or ["no answer"]
    return problem_line(
        host,
        f"instance {item.get('instance')}",
        f"{VARIABLE}.{item.get('group')}.rendezvous_port",
        item.get("port"),
        f"rank 0 could not listen on port {item.get('port')} for the other nodes' check ({why[-1]}): another program"
        " may hold it now, and would answer them in rank 0's stead",
        "stop the program that holds the port (ss -ltnp) or choose another rendezvous_port",
    )


def rendezvous_host(rendezvous: str) -> str:
    """The address part of `host:port` or `[v6]:port`."""
    return rendezvous.rpartition(":")[0].strip("[]")


def routed_interface(facts: Mapping[str, Any], address: str) -> str:
    """The interface this host reaches `address` (another node) on (the host's facts `routes`, from route_to), ""
    where unknown or loopback (NCCL and Gloo then choose their own)."""
    route = (facts.get("routes") or {}).get(address) or {}
    interface = str(route.get("interface") or "")
    return "" if interface == "lo" else interface
