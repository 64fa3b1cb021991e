"""An instance that spans hosts (module_utils/multinode.py): an sglang_instance_groups entry with `nodes` planned on
each node as its part of one SGLang multi-node launch, the manual ways of spanning hosts refused, and the nodes checked
as a whole."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import yaml
from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import http_instances
from ansible_collections.sglang.fleet.plugins.module_utils.multinode import node_addresses, node_problems
from fleet import ROOT

Plan = Callable[..., dict[str, Any]]
NODES = ["ct129", "ct130"]
# tensor parallel 4 over two nodes of two RTX A6000 each; no speculative draft (the group's own settings).
BIG = {"name": "big", "nodes": NODES, "tensor_parallel_size": 4, "speculative": {}, "network_interface": "eth1"}
ADDRESSES = {"ct129": "10.0.0.29", "ct130": "10.0.0.30"}


@pytest.fixture
def node_plan(plan: Plan) -> Plan:
    """plan() of one node of the group (both nodes have ct129's shape and settings)."""

    def run(
        node: str = "ct129", group: dict[str, Any] | None = None, facts: dict[str, Any] | None = None, **overrides: Any
    ) -> dict[str, Any]:
        hostvars = {name: {"ansible_host": address} for name, address in ADDRESSES.items()}
        return plan(
            "ct129", facts, inventory_hostname=node, hostvars=hostvars, sglang_instance_groups=[group or BIG], **overrides
        )

    return run


def test_each_node_runs_its_rank_of_one_instance_with_the_rendezvous_at_rank_0(node_plan: Plan) -> None:
    zero, one = node_plan("ct129"), node_plan("ct130")
    assert zero["problems"] == [] and one["problems"] == []
    [first], [second] = zero["instances"], one["instances"]
    for rank, instance in enumerate((first, second)):
        argv = instance["argv"]
        assert argv[argv.index("--tp-size") + 1] == "4"
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--node-rank") + 1] == str(rank)
        assert argv[argv.index("--dist-init-addr") + 1] == "10.0.0.29:25000"
        # Two GPUs each: half the ranks.
        assert instance["gpu_ids"] == [0, 1] and instance["node_rank"] == rank
        assert instance["environment"]["NCCL_SOCKET_IFNAME"] == "eth1" == instance["environment"]["GLOO_SOCKET_IFNAME"]
    assert first["serves_http"] and not second["serves_http"]
    # Only rank 0 is a router's or a gateway's worker.
    assert http_instances([first, second]) == [first]
    assert second["remote_url"] == ""


def test_without_an_interface_nccl_and_gloo_choose_their_own(node_plan: Plan) -> None:
    result = node_plan(group={key: value for key, value in BIG.items() if key != "network_interface"})
    assert result["problems"] == []
    [instance] = result["instances"]
    assert "NCCL_SOCKET_IFNAME" not in instance["environment"] and "GLOO_SOCKET_IFNAME" not in instance["environment"]


def test_the_rendezvous_takes_the_groups_port_and_an_ipv6_address_in_brackets(plan: Plan) -> None:
    group = {**BIG, "rendezvous_port": 29500}
    result = plan("ct129", hostvars={"ct129": {"sglang_advertise_host": "fd00::29"}}, sglang_instance_groups=[group])
    argv = result["instances"][0]["argv"]
    assert argv[argv.index("--dist-init-addr") + 1] == "[fd00::29]:29500"


def test_the_addresses_come_from_advertise_host_then_ansible_host_then_the_name() -> None:
    hostvars = {"a": {"sglang_advertise_host": "10.1.1.1", "ansible_host": "x"}, "b": {"ansible_host": "10.1.1.2"}}
    groups = [{"name": "g", "nodes": ["a", "b", "c"]}, {"name": "h"}]
    assert node_addresses(groups, hostvars) == {"a": "10.1.1.1", "b": "10.1.1.2", "c": "c"}


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        (
            {**BIG, "nodes": ["ct129"]},
            'ct129 group big: sglang_instance_groups.big.nodes=["ct129"]: must list two or more different inventory hosts,'
            " rank 0 first; fix: e.g. nodes: [gpu-a, gpu-b]",
        ),
        (
            {**BIG, "nodes": ["gpu-a", "gpu-b"]},
            'ct129 group big: sglang_instance_groups.big.nodes=["gpu-a", "gpu-b"]: this host is not one of the group\'s'
            " nodes, yet has the group; fix: set the group only on its nodes (group_vars of an inventory group of exactly"
            " these hosts)",
        ),
        (
            {**BIG, "rendezvous_port": 80},
            "ct129 group big: sglang_instance_groups.big.rendezvous_port=80: must be a port from 1024 to 65535; fix: set a"
            " free port on rank 0",
        ),
        (
            {**BIG, "instance_count": 2},
            "ct129 group big: sglang_instance_groups.big.instance_count=2: a group across hosts is one instance; fix:"
            " remove instance_count (or set 1); declare another group for another instance",
        ),
        (
            {**BIG, "tensor_parallel_size": 3},
            "ct129 group big: sglang_instance_groups.big.tensor_parallel_size=3: tensor x data x pipeline parallel = 3 x 1"
            " x 1 = 3 GPUs per instance over 2 nodes; fix: make tensor x data x pipeline parallel a multiple of the 2 nodes",
        ),
        (
            {**BIG, "gpus_per_instance": 1},
            "ct129 group big: sglang_instance_groups.big.gpus_per_instance=1: tensor x data x pipeline parallel = 4 x 1 x 1"
            " = 4 GPUs per instance over 2 nodes; fix: set sglang_instance_groups.big.gpus_per_instance: 2 or change the"
            " parallel sizes",
        ),
    ],
)
def test_a_wrong_declaration_is_named_and_plans_nothing_of_it(node_plan: Plan, group: dict[str, Any], expected: str) -> None:
    result = node_plan(group=group)
    assert result["problems"] == [expected]
    assert result["instances"] == []


def test_the_rendezvous_port_must_be_free_on_rank_0(node_plan: Plan) -> None:
    taken = {"listening": [{"port": 25000, "pid": 77, "name": "nc"}]}
    assert node_plan("ct129", facts=taken)["problems"] == [
        "ct129 instance sglang-30000: sglang_instance_groups.big.rendezvous_port=25000: port 25000 is taken by PID 77 (nc);"
        " fix: stop that program or choose another rendezvous_port"
    ]
    # Rank 1 does not bind it.
    assert node_plan("ct130", facts=taken)["problems"] == []
    clash = node_plan("ct129", group={**BIG, "rendezvous_port": 31000})
    assert clash["problems"] == [
        "ct129 instance sglang-30000: sglang_instance_groups.big.rendezvous_port=31000: port 31000 is also a port of"
        " sglang-30000; fix: choose a port no instance uses"
    ]


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "sglang_server_args",
            {"nnodes": 2},
            "ct129 host: sglang_server_args.nnodes=2: --nnodes is set by sglang-fleet; fix: list the hosts in an"
            " sglang_instance_groups entry's nodes (README: An instance across hosts); sglang-fleet passes the node flags"
            " to every node",
        ),
        (
            "sglang_server_args",
            {"nccl-init-addr": "10.0.0.1:5000"},
            'ct129 host: sglang_server_args.nccl-init-addr="10.0.0.1:5000": --nccl-init-addr (an alias of'
            " --dist-init-addr) is set by sglang-fleet; fix: list the hosts in an sglang_instance_groups entry's nodes"
            " (README: An instance across hosts); sglang-fleet passes the node flags to every node",
        ),
        (
            "sglang_environment",
            {"MASTER_ADDR": "10.0.0.1"},
            'ct129 host: sglang_environment.MASTER_ADDR="10.0.0.1": an instance spans hosts only as sglang-fleet plans it'
            " (ranks, rendezvous, every node restarted together); fix: remove MASTER_ADDR; list the hosts in an"
            " sglang_instance_groups entry's nodes (README: An instance across hosts)",
        ),
    ],
)
def test_spanning_hosts_by_hand_is_refused_with_the_supported_way(
    plan: Plan, variable: str, value: dict[str, Any], expected: str
) -> None:
    assert expected in plan("ct129", **{variable: value})["problems"]


def node_hostvars(node_plan: Plan, **per_node: dict[str, Any]) -> dict[str, Any]:
    return {node: {"sglang_instances": node_plan(node, **per_node.get(node, {}))["instances"]} for node in NODES}


def test_the_nodes_are_checked_as_a_whole(node_plan: Plan) -> None:
    alike = node_hostvars(node_plan)
    assert node_problems("ct129", NODES, alike) == [] == node_problems("ct130", NODES, alike)
    # ct130 runs another release, and another GPU type.
    other = {
        "facts": {
            "gpus": [
                {
                    "index": i,
                    "uuid": f"GPU-{i}",
                    "name": "NVIDIA L40S",
                    "memory_total_mib": 46068,
                    "memory_used_mib": 0,
                    "minor_number": i,
                }
                for i in range(2)
            ]
        },
        "sglang_version": "0.5.17",
    }
    differ = node_hostvars(node_plan, ct130=other)
    lines = node_problems("ct129", NODES, differ)
    assert lines[0].startswith("ct129 instance sglang-30000: sglang_version=\"0.5.23\": node ct130 has '0.5.17':")
    assert lines[1].startswith(
        "ct129 instance sglang-30000: sglang_gpu_ids=[\"NVIDIA RTX A6000\"]: node ct130 has ['NVIDIA L40S']: every node of"
        " the instance needs the same GPU type; fix: set sglang_gpu_ids alike on ct129, ct130"
    )
    assert len(lines) == 2


def test_a_node_left_out_of_the_run_stops_the_instance(node_plan: Plan) -> None:
    alike = node_hostvars(node_plan)
    assert node_problems("ct129", ["ct129"], alike) == [
        'ct129 instance sglang-30000: sglang_instance_groups.big.nodes=["ct129", "ct130"]: node ct130 has no part of this'
        " instance planned in this run (not in the play, its preflight found problems, or its group differs);"
        " fix: deploy every node together"
        " (--limit ct129,ct130) with the same group on each"
    ]


def test_more_nodes_in_the_run_than_forks_is_refused_before_anything_restarts(node_plan: Plan) -> None:
    alike = node_hostvars(node_plan)
    # Both nodes restart in one task, each waiting for the other: one fork would run ct129's part alone until it times out.
    [line] = node_problems("ct129", NODES, alike, 1)
    assert line.startswith("ct129 host: forks=1: more than 1 hosts of the run run a part of an instance that spans hosts")
    assert line.endswith(
        "fix: raise forks (ansible-playbook --forks, or forks in ansible.cfg) to at least the number of such hosts"
    )
    assert node_problems("ct129", NODES, alike, 2) == [] == node_problems("ct130", NODES, alike, 2)
    # A host with no part of such an instance is not held back by them.
    alike["other"] = {"sglang_instances": [{"name": "sglang-30000"}]}
    assert node_problems("other", [*NODES, "other"], alike, 1) == []


class Undefined:
    """What Ansible's hostvars answers for a name that is no inventory host: an undefined value that fails when tested."""

    def __bool__(self) -> bool:
        raise AssertionError("an undefined host's variables were tested")


class HostVars(Mapping[str, Any]):
    """Ansible's hostvars as the plugins see it: `in` asks the inventory; an unknown name gives Undefined, no KeyError."""

    def __init__(self, variables: dict[str, Any]) -> None:
        self.variables = variables

    def __getitem__(self, host: str) -> Any:
        return self.variables.get(host, Undefined())

    def __contains__(self, host: object) -> bool:
        return host in self.variables

    def __iter__(self) -> Iterator[str]:
        return iter(self.variables)

    def __len__(self) -> int:
        return len(self.variables)


def test_a_node_that_is_no_inventory_host_is_a_problem_line_not_a_crash(node_plan: Plan) -> None:
    hostvars = HostVars(node_hostvars(node_plan))
    groups = [{"name": "big", "nodes": ["ct129", "ct13O"]}]
    assert node_addresses(groups, hostvars) == {"ct129": "ct129", "ct13O": "ct13O"}
    instances = node_plan("ct129", group={**BIG, "nodes": ["ct129", "ct13O"]})["instances"]
    hostvars.variables["ct129"] = {"sglang_instances": instances}
    [line] = node_problems("ct129", ["ct129", "ct130"], hostvars)
    assert "node ct13O has no part of this instance planned in this run" in line


def test_a_gateway_routes_to_rank_0_alone_also_on_a_node_of_another_rank(node_plan: Plan) -> None:
    from ansible_collections.sglang.fleet.plugins.filter.sglang_router import sglang_gateway_members

    on_network = {"sglang_listen_host": "0.0.0.0", "sglang_api_key": "k"}
    hostvars = node_hostvars(node_plan, **{node: {**on_network, "sglang_advertise_host": ADDRESSES[node]} for node in NODES})
    for node in NODES:
        hostvars[node]["sglang_router"] = {"gateways": [{"host": "ct130"}]}
    members = sglang_gateway_members(hostvars, NODES, "ct130", NODES)
    assert members["workers"] == ["http://10.0.0.29:30000"]


def test_every_node_of_a_group_any_node_names_acts_together(node_plan: Plan) -> None:
    from ansible_collections.sglang.fleet.plugins.module_utils.multinode import node_instances

    hostvars = node_hostvars(node_plan)
    mine = hostvars["ct130"]["sglang_instances"]
    # Only rank 0's files changed: rank 1 restarts too; a group no node names stays.
    hostvars["ct129"]["_sglang_server_nodes_changed"] = ["big"]
    assert [i["name"] for i in node_instances(mine, hostvars, "_sglang_server_nodes_changed")] == ["sglang-30000"]
    assert node_instances(mine, hostvars, "_sglang_server_nodes_failed") == []
    hostvars["ct129"]["_sglang_server_nodes_changed"] = ["other"]
    assert node_instances(mine, hostvars, "_sglang_server_nodes_changed") == []


def test_preflight_checks_every_node_reaches_rank_0s_rendezvous_port(node_plan: Plan) -> None:
    from ansible_collections.sglang.fleet.plugins.module_utils.multinode import rendezvous_checks, unreached_problems

    zero, one = node_plan("ct129")["instances"], node_plan("ct130")["instances"]
    # Rank 0 listens for the check where nothing listens yet, until its one other node connected from its address.
    listen = {"instance": "sglang-30000", "group": "big", "port": 25000, "peers": ["10.0.0.30"], "seconds": 15}
    assert rendezvous_checks(zero, []) == {"listen": [listen], "reach": []}
    # Its running rank 0 (or another program, which the plan names) holds the port: reached as it is.
    assert rendezvous_checks(zero, [{"port": 25000}]) == {"listen": [], "reach": []}
    reach = {"instance": "sglang-30000", "group": "big", "rank_0": "ct129", "address": "10.0.0.29", "port": 25000, "seconds": 5}
    assert rendezvous_checks(one, [{"port": 25000}]) == {"listen": [], "reach": [reach]}
    # An instance on one host takes no part.
    assert rendezvous_checks(node_plan(group={"name": "solo"})["instances"], []) == {"listen": [], "reach": []}
    # As registered with failed_when: false (wait_for's own results: connected, or why not).
    reached = [{"item": reach, "state": "started", "port": 25000, "elapsed": 0, "failed": False}]
    assert unreached_problems("ct130", [*reached, {"item": reach, "skipped": True}]) == []
    timeout = "Timeout when waiting for 10.0.0.29:25000"
    timed_out = [{"item": reach, "msg": timeout, "elapsed": 5, "failed": False, "failed_when_result": False}]
    assert unreached_problems("ct130", timed_out) == [
        "ct130 instance sglang-30000: sglang_instance_groups.big.rendezvous_port=25000: node ct130 cannot reach rank 0"
        " (ct129) at 10.0.0.29:25000 within 5 s (Timeout when waiting for 10.0.0.29:25000); fix: let the nodes reach"
        " ct129's port 25000 (a firewall rule), or set the address they reach ct129 at (sglang_advertise_host or"
        " ansible_host of ct129)"
    ]


def test_rank_0_whose_check_listener_could_not_listen_is_a_problem(node_plan: Plan) -> None:
    """The port taken between the host's facts and the listener (another program then answers the other nodes'
    check in rank 0's stead), or a listener that did not run: a problem line on rank 0, naming the variable."""
    from ansible_collections.sglang.fleet.plugins.module_utils.multinode import rendezvous_checks, unreached_problems

    [listen] = rendezvous_checks(node_plan("ct129")["instances"], [])["listen"]
    job = {"ansible_job_id": "j1.2", "item": listen}
    # As registered from async_status with failed_when: false: the listener's own answer.
    listened = [{"item": job, "finished": 1, "rc": 0, "stderr": "", "failed": False}, {"item": job, "skipped": True}]
    assert unreached_problems("ct129", [], listened) == []
    taken = "cannot listen on port 25000: [Errno 98] Address already in use"
    failed = [{"item": job, "finished": 1, "rc": 1, "stderr": taken + "\n", "failed": False, "failed_when_result": False}]
    assert unreached_problems("ct129", [], failed) == [
        "ct129 instance sglang-30000: sglang_instance_groups.big.rendezvous_port=25000: rank 0 could not listen on port"
        f" 25000 for the other nodes' check ({taken}): another program may hold it now, and would answer them in rank"
        " 0's stead; fix: stop the program that holds the port (ss -ltnp) or choose another rendezvous_port"
    ]
    # Its job file gone (async_status: could not find job), or still running after its seconds.
    for result in ({"item": job, "finished": 1, "msg": "could not find job"}, {"item": job, "finished": 0}):
        assert "rank 0 could not listen on port 25000" in unreached_problems("ct129", [], [result])[0]


LISTENER = "_sglang_plan_rendezvous_listener"


def listener_script() -> str:
    script: str = yaml.safe_load((ROOT / "roles/sglang_plan/vars/main.yml").read_text())[LISTENER]
    return script


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def connect(port: int, source: str) -> None:
    """One connection to the listener from the loopback address `source` (the listener may not listen yet)."""
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1, source_address=(source, 0)).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port}")


def test_the_check_listener_says_why_it_cannot_listen() -> None:
    """Rank 0's listener (roles/sglang_plan/vars/main.yml) run as the task runs it: on a port another socket holds it
    exits non-zero naming the port; on a free one it accepts its peer's connection and exits 0."""
    script = listener_script()
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        held = subprocess.run([sys.executable, "-c", script, str(port), "2", "127.0.0.1"], capture_output=True, text=True,
                              timeout=30)  # fmt: skip
    assert held.returncode != 0 and f"cannot listen on port {port}" in held.stderr
    free = free_port()
    listener = subprocess.Popen([sys.executable, "-c", script, str(free), "20", "127.0.0.1"], stderr=subprocess.PIPE, text=True)
    try:
        connect(free, "127.0.0.1")
        assert listener.wait(timeout=10) == 0
    finally:
        listener.kill()


def test_the_check_listener_counts_only_the_other_nodes_connections() -> None:
    """Issue 38: any host's connection once ended rank 0's listener early, so the nodes' own check then failed and
    preflight refused them. A connection from another address counts for nothing: the listener waits on for its peers
    (here 127.0.0.2 and 127.0.0.3: every 127/8 address is the loopback's) and ends once each of them connected."""
    port = free_port()
    listener = subprocess.Popen([sys.executable, "-c", listener_script(), str(port), "20", "127.0.0.2 127.0.0.3"], text=True)
    try:
        for _ in range(3):
            connect(port, "127.0.0.1")
        connect(port, "127.0.0.2")
        connect(port, "127.0.0.2")
        time.sleep(1)
        assert listener.poll() is None, "a stranger's connections, or one peer's twice, ended the check's listener"
        connect(port, "127.0.0.3")
        assert listener.wait(timeout=10) == 0
    finally:
        listener.kill()


def test_without_an_interface_each_node_takes_the_one_its_route_to_another_node_leaves_on(node_plan: Plan) -> None:
    """Rank 1 and on: the route to rank 0; rank 0: the route to rank 1 (its own name may resolve, on it, to another of
    its interfaces than the one the others reach it on)."""
    group = {key: value for key, value in BIG.items() if key != "network_interface"}
    routes = {
        "routes": {"10.0.0.29": {"ip": "10.0.0.29", "interface": "ens5"}, "10.0.0.30": {"ip": "10.0.0.30", "interface": "ens6"}}
    }
    for node, interface in (("ct129", "ens6"), ("ct130", "ens5")):
        [instance] = node_plan(node, group=group, facts=routes)["instances"]
        assert instance["environment"]["NCCL_SOCKET_IFNAME"] == interface == instance["environment"]["GLOO_SOCKET_IFNAME"]
    # Unknown (the route's error) or loopback: NCCL and Gloo choose their own.
    for route in ({"error": "10.0.0.29 does not resolve here"}, {"ip": "10.0.0.29", "interface": "lo"}):
        [instance] = node_plan("ct130", group=group, facts={"routes": {"10.0.0.29": route}})["instances"]
        assert "NCCL_SOCKET_IFNAME" not in instance["environment"]
    # A group's own network_interface wins.
    [instance] = node_plan("ct130", facts=routes)["instances"]
    assert instance["environment"]["NCCL_SOCKET_IFNAME"] == "eth1"


def test_the_route_to_rank_0_is_read_with_ip_on_the_host() -> None:
    from ansible_collections.sglang.fleet.plugins.module_utils.routes import route_to

    said: dict[str, tuple[int, str, str]] = {
        "ip -o route get 10.0.0.29": (0, "10.0.0.29 dev ens5 src 10.0.0.30 uid 0 \\    cache ", ""),
        "ip -o route get 10.0.0.30": (0, "local 10.0.0.30 dev lo table local src 10.0.0.30 uid 0 \\    cache <local> ", ""),
        "ip -o addr show to 10.0.0.30": (0, "2: ens5    inet 10.0.0.30/24 brd 10.0.0.255 scope global ens5\\n", ""),
        "ip -o route get 192.0.2.1": (2, "", "RTNETLINK answers: Network is unreachable"),
    }
    asked: list[str] = []

    def run(argv: list[str]) -> tuple[int, str, str]:
        asked.append(" ".join(argv))
        return said[" ".join(argv)]

    assert route_to("10.0.0.29", run) == {"ip": "10.0.0.29", "interface": "ens5"}
    # Rank 0's own address: the interface that holds it, not loopback.
    assert route_to("10.0.0.30", run) == {"ip": "10.0.0.30", "interface": "ens5"}
    unreachable = "ip route get 192.0.2.1: RTNETLINK answers: Network is unreachable"
    assert route_to("192.0.2.1", run) == {"ip": "192.0.2.1", "error": unreachable}
    assert "does not resolve here" in route_to("no-such-host.invalid", run)["error"]
    assert asked == list(said)


def test_a_node_of_another_rank_alone_on_its_host_needs_nothing_of_the_gateway(node_plan: Plan) -> None:
    """It is no worker of the fleet gateway: neither its (empty) remote URL nor the gateway's reach is a problem."""
    from ansible_collections.sglang.fleet.plugins.filter.sglang_router import sglang_gateway_problems

    hostvars = node_hostvars(node_plan)
    hostvars["ct129"]["sglang_gateway"] = {"bind": "127.0.0.1", "url": "http://127.0.0.1:30200", "remote_url": ""}
    rank_1 = hostvars["ct130"]["sglang_instances"]
    assert sglang_gateway_problems("ct130", ["ct129"], hostvars, NODES, NODES, rank_1, "0.0.0.0", "") == []
    # Rank 0's host on another host than the gateway would be: its worker must be reachable.
    rank_0 = hostvars["ct129"]["sglang_instances"]
    [line, *_] = sglang_gateway_problems("ct130", ["ct129"], hostvars, NODES, NODES, rank_0, "127.0.0.1", "")
    assert "cannot reach them on loopback" in line
