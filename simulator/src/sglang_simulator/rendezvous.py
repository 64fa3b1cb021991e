"""SGLang's multi-node start (``--nnodes N --node-rank i --dist-init-addr host:port``), as the simulator plays
it.

Recorded on real 0.5.17 as node rank 0 of 2 with the other node never started
(tests/recordings/sglang-0.5.17-h100-multinode-missing-node/, tests/simulator/test_rendezvous.py replays
it): the scheduler logs ``Init torch distributed begin.`` and waits at the rendezvous it hosts (torch's
TCPStore at --dist-init-addr) for --dist-timeout seconds, then fails with ``torch.distributed.DistStoreError:
Timed out after <timeout + 1> seconds waiting for clients. <joined>/<world size> clients joined.``, and the
server SIGKILLs itself; tensor x pipeline parallel that does not divide over the nodes is refused by
check_server_args (exit 1).

Recorded on real 0.5.17 as node rank 1 of 2 whose rank 0 never starts
(tests/recordings/sglang-0.5.17-h100-multinode-rank1/, tests/contract/test_multinode_rank1.py replays it):
after ``Init torch distributed begin.`` torch's TCPStore client retries rank 0's address until
--dist-timeout, then ``torch.distributed.DistNetworkError: The client socket has timed out after <timeout>ms
while trying to connect to (<host>, <port>).``, and the server SIGKILLs itself; its --port refuses
connections all the while. Real SGLang exits after the timeout plus torch's random retry delay (34 s for
20); the simulator at the timeout. Without --dist-timeout it was still waiting after 242 s; the timeout is
then torch's default for NCCL, 600 s (that machine's torch.distributed.constants; read in the source, not
waited out). Read in the source (entrypoints/engine.py, utils/common.py), not recorded: a node of another
rank runs its schedulers only, and once they joined ``launch_dummy_health_check_server`` answers
``/health``, ``/health_generate`` and ``/ping`` with 200 on its --port, nothing else.

A peer node that goes away (stopped, crashed, its host lost), read in 0.5.17's source, not recorded (one GPU
cannot run two nodes: NCCL refuses two ranks on one device): every turn of every scheduler's event loop, idle
or not, broadcasts the new requests from the first tensor parallel rank to the others over the Gloo CPU
group (managers/scheduler_components/request_receiver.py, ``recv_requests`` -> ``broadcast_pyobj``), and
weight loading and CUDA graph capture run collectives too. So the survivor's scheduler fails within a turn:
Gloo's TCP pair reads end of stream, ``Connection closed by peer [host]:port``; ``run_scheduler_process``
logs ``Scheduler hit an exception``, sends SIGQUIT to the server, which kills its process tree. Rank 0's HTTP
server goes with it (``/health_generate`` stops answering), and, restarted by systemd, rank 0 waits at the
rendezvous again until the node comes back or --dist-timeout ends it (recorded above). The exception's file
prefix is the simulator's own.

The simulator's rendezvous is a line protocol on that TCP port: a node of another rank sends its rank, rank
0 answers ``ready`` once every node joined; each side keeps its connection and crashes when the other's
closes (a node whose peer is gone cannot serve: its collectives fail).
"""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# check_server_args: tensor x pipeline parallel must divide over the nodes (recorded: tp 1 over 2 nodes).
INDIVISIBLE = "AssertionError: tp_size must be divisible by number of nodes"
# torch.distributed's default process-group timeout for NCCL (seconds), SGLang's when --dist-timeout is unset.
DEFAULT_TIMEOUT = 600


class RendezvousError(Exception):
    """The rendezvous failed: the message is the exception SGLang's scheduler reports."""


@dataclass
class Node:
    """One node's part: its rank, the node count, the address and the ranks (GPUs) per node and in all."""

    rank: int
    nnodes: int
    host: str
    port: int
    timeout: float
    per_node: int
    world: int
    peers: list[socket.socket] = field(default_factory=list)
    listener: socket.socket | None = None


def indivisible(settings: Mapping[str, Any]) -> bool:
    """Whether check_server_args refuses the launch: tp x pp not a multiple of --nnodes."""
    world = int(settings.get("tp_size") or 1) * int(settings.get("pp_size") or 1)
    return world % max(1, int(settings.get("nnodes") or 1)) != 0


def node_of(settings: Mapping[str, Any]) -> Node | None:
    """The node this launch is, or None for a launch on one node."""
    nnodes = int(settings.get("nnodes") or 1)
    if nnodes <= 1:
        return None
    address = str(settings.get("dist_init_addr") or "")
    host, _, port = address.rpartition(":")
    world = int(settings.get("tp_size") or 1) * int(settings.get("pp_size") or 1)
    timeout = settings.get("dist_timeout")
    return Node(
        rank=int(settings.get("node_rank") or 0),
        nnodes=nnodes,
        host=host.strip("[]") or "127.0.0.1",
        port=int(port or 0),
        timeout=float(timeout if timeout else DEFAULT_TIMEOUT),
        per_node=max(1, world // nnodes),
        world=world,
    )


def join(node: Node, stopped: Callable[[], bool]) -> None:
    """Rank 0: host the rendezvous and wait for every other node; another rank: reach rank 0, wait for it."""
    deadline = time.monotonic() + node.timeout
    if node.rank == 0:
        dual = socket.has_dualstack_ipv6()
        listener = socket.create_server(
            ("::" if dual else "", node.port),
            family=socket.AF_INET6 if dual else socket.AF_INET,
            dualstack_ipv6=dual,
        )
        listener.settimeout(0.2)
        node.listener = listener
        joined: set[int] = set()
        while len(joined) < node.nnodes - 1:
            if stopped():
                return
            if time.monotonic() >= deadline:
                clients = node.per_node * (1 + len(joined))
                raise RendezvousError(
                    "torch.distributed.DistStoreError: "
                    f"Timed out after {int(node.timeout) + 1} seconds waiting for "
                    f"clients. {clients}/{node.world} clients joined."
                )
            try:
                peer, _ = listener.accept()
            except TimeoutError:
                continue
            line = peer.makefile("r").readline().strip()
            if line.isdigit() and 0 < int(line) < node.nnodes:
                joined.add(int(line))
                node.peers.append(peer)
            else:
                peer.close()
        for peer in node.peers:
            peer.sendall(b"ready\n")
        return
    # Like torch's client, a node retries until the timeout: rank 0 may not listen yet, or an earlier
    # rank 0 that is stopping may still accept and then drop the connection (every node restarting).
    while True:
        if stopped():
            return
        try:
            peer = socket.create_connection((node.host, node.port), timeout=1.0)
            peer.sendall(f"{node.rank}\n".encode())
            peer.settimeout(max(0.1, deadline - time.monotonic()))
            if peer.makefile("r").readline().strip() == "ready":
                node.peers.append(peer)
                return
            peer.close()
        except OSError:
            pass
        if time.monotonic() >= deadline:
            # Recorded (module docstring): torch's TCPStore client, --dist-timeout in milliseconds.
            raise RendezvousError(
                "torch.distributed.DistNetworkError: The client socket has timed out after "
                f"{int(node.timeout * 1000)}ms while trying to connect to ({node.host}, {node.port})."
            )
        time.sleep(0.2)


def watch(node: Node, lost: Callable[[str], None]) -> None:
    """Calls `lost` with the scheduler's exception when a peer node's connection closes (stopped, died)."""

    def follow(peer: socket.socket) -> None:
        peer.settimeout(None)
        try:
            address, port = peer.getpeername()[:2]
            host = str(address).removeprefix("::ffff:")
        except OSError:
            host, port = node.host, node.port
        try:
            while peer.recv(64):
                pass
        except OSError:
            pass
        # Read from the source, not recorded (module docstring): Gloo's TCP pair fails the broadcast.
        lost(f"RuntimeError: [gloo/transport/tcp/pair.cc] Connection closed by peer [{host}]:{port}")

    for peer in node.peers:
        threading.Thread(target=follow, args=(peer,), name="rendezvous-peer", daemon=True).start()


class _DummyHealth(http.server.BaseHTTPRequestHandler):
    """``launch_dummy_health_check_server``: 200 on /ping, /health, /health_generate (GET), else 404."""

    def do_GET(self) -> None:
        status = 200 if self.path.split("?", 1)[0] in ("/ping", "/health", "/health_generate") else 404
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        return


def dummy_health_server(host: str, port: int) -> http.server.ThreadingHTTPServer:
    """A node of another rank's only HTTP server, serving in a thread once its schedulers are ready."""
    server = http.server.ThreadingHTTPServer((host, port), _DummyHealth)
    threading.Thread(target=server.serve_forever, name="dummy-health", daemon=True).start()
    return server


def close(node: Node) -> None:
    for peer in node.peers:
        peer.close()
    if node.listener is not None:
        node.listener.close()
