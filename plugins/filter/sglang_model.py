"""Ansible filters of a fetched model's names (plugins/plugin_utils/model_source.py): the directory a host serves it
from and the name clients ask for."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.problems import problem_line
from ansible_collections.sglang.fleet.plugins.module_utils.role_decisions import unique
from ansible_collections.sglang.fleet.plugins.plugin_utils.model_source import CACHE_ROOM, slug

CACHE_FIX = "free space there, or set sglang_model_cache_dir to a filesystem with room for the model"
LOCK_FIX = (
    "fetch from the source the lock file was written from (sglang_model_endpoint, the revision), or, when the source "
    "changed on purpose, write the lock again with playbooks/model_lock.yml and review its diff"
)


def sglang_model_dir(source: Mapping[str, Any], root: str) -> str:
    """The host's directory of the source's revision: <root>/<org>--<name>/<revision>."""
    return f"{root.rstrip('/')}/{slug(source)}/{source.get('revision', '')}"


def sglang_model_name(source: Mapping[str, Any]) -> str:
    """The name clients use for the model by default: the repository's name, or a local source's `name`; empty
    without a source."""
    if source.get("repo"):
        return str(source["repo"]).rstrip("/").rsplit("/", 1)[-1]
    return str(source.get("name") or "")


def sglang_model_sha256(files: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The lock file's SHA-256 by file name, as the plan's probe checks them."""
    return {name: str(entry["sha256"]) for name, entry in files.items()}


# What the revision's directory may not hold: it is written into the fan-out key's forced command (tasks/peer_key.yml,
# `command="/usr/bin/rrsync -ro <path>"`, the path shell-quoted), where a control character ends the authorized_keys
# line and a quote ends the option or the shell's quoting: either would run what follows as the peer account.
UNQUOTABLE = re.compile(r"[\x00-\x1f\x7f\"']")


def sglang_model_problems(
    host: str,
    problems: Mapping[str, str],
    source: Mapping[str, Any],
    peer_user: str = "root",
    seed_hosts: int = 0,
    root: str = "/srv/models",
) -> list[str]:
    """The fetch's problems (by file, by the lock file, or the cache's) as preflight problem lines of `host`; a model
    root (`root`, sglang_model_root) that is not absolute or holds what the fan-out's forced command cannot (UNQUOTABLE);
    and, where hosts copy the revision from each other (`seed_hosts` above 0), a `peer_user` other than root: the run's
    key goes into that account's ~/.ssh/authorized_keys, which root would create, chown and write through folders that
    account controls (ansible.posix.authorized_key follows links there: a link planted in place of ~/.ssh or the file
    gives that account whatever file it names)."""
    fixes = {CACHE_ROOM: CACHE_FIX}
    lines = [
        problem_line(host, "host", "sglang_model", dict(source), f"{name}: {cause}", fixes.get(name, LOCK_FIX))
        for name, cause in sorted(problems.items())
    ]
    if source and (not str(root).startswith("/") or UNQUOTABLE.search(str(root))):
        lines.append(
            problem_line(
                host,
                "host",
                "sglang_model_root",
                root,
                "must be an absolute path without control characters or quotes (the revision's directory under it is "
                "the fan-out key's forced command on the hosts that send it)",
                "set sglang_model_root to an absolute path of plain characters, e.g. /srv/models",
            )
        )
    if source and int(seed_hosts) > 0 and peer_user != "root":
        lines.append(
            problem_line(
                host,
                "host",
                "sglang_model_peer_user",
                peer_user,
                "root would write the run's key into that account's ~/.ssh, a folder the account controls (a link "
                "planted there hands it the file the link names)",
                "leave sglang_model_peer_user at root (the key is restricted to a read-only rsync of the revision's "
                "directory), or set sglang_model_seed_hosts: 0 (no copies between hosts)",
            )
        )
    return lines


# The fan-out's key is allowed on a sending host for this program only (tasks/peer_key.yml); rsync's own package ships
# it there on Debian 12 and Ubuntu 24.04 (rsync 3.2.4 and later), not on Ubuntu 22.04.
RRSYNC = "/usr/bin/rrsync"
RSYNC = "/usr/bin/rsync"
# The largest offset from UTC of any time zone (UTC+14): a time written without knowing the host's zone, moved by it, so
# that the key never expires early.
LARGEST_UTC_OFFSET = timedelta(hours=14)


def sglang_model_sender_problems(host: str, hosts: Sequence[str], hostvars: Mapping[str, Any], seed_hosts: int) -> list[str]:
    """Where `host` will send the revision to another host in this run's fan-out (the plan sglang_model_fanout makes
    from every host's probe) and lacks rrsync, to which the run's key is restricted: a problem line naming it, unless
    the host lacks rsync too and receives the revision first (the rsync package, installed before it sends, may bring
    rrsync; the copy fails naming it where it does not). Its probe's read (`found`) says which of RRSYNC and RSYNC it
    has."""
    plan = sglang_model_fanout(hosts, hostvars, seed_hosts)
    senders = {entry["source"] for entry in plan.values() if entry["source"] != "control" and not entry["shared"]}
    if host not in senders:
        return []
    probe = hostvars[host].get("sglang_probe") or {}
    found = (((probe.get("answers") or {}).get("sglang_model") or {}).get("read") or {}).get("found") or {}
    if found.get(RRSYNC):
        return []
    if not found.get(RSYNC) and host in plan:
        return []
    return [
        problem_line(
            host,
            "host",
            "sglang_model_seed_hosts",
            int(seed_hosts),
            f"this host sends the model's revision to other hosts (the fan-out), and the run's key may run {RRSYNC} "
            f"only, which the host lacks{' (its rsync package does not ship it)' if found.get(RSYNC) else ''}",
            f"install rrsync as {RRSYNC} (rsync 3.2.4 and later ship it: Debian 12, Ubuntu 24.04; on Ubuntu 22.04 "
            "copy it from /usr/share/doc/rsync/scripts/rrsync), or set sglang_model_seed_hosts: 0 (the control node "
            "sends every host its files)",
        )
    ]


def sglang_model_key_expiry(date_time: Mapping[str, Any], hours: float) -> str:
    """The fan-out key's `expiry-time` (sshd's authorized_keys option): `hours` after the host's fact time
    (`ansible_facts.date_time`: `epoch`, `tz_offset` as +HHMM), as YYYYMMDDHHMMSS in the host's own time zone, which sshd
    reads it in: the form every sshd with the option reads (the `Z` suffix for UTC, in Debian 12's OpenSSH 9.2, came
    later than the option). Without those facts: the control node's clock in UTC moved by LARGEST_UTC_OFFSET, so that
    in any zone the key lasts at least `hours`."""
    offset = str(date_time.get("tz_offset") or "")
    if date_time.get("epoch") and len(offset) == 5 and offset[0] in "+-" and offset[1:].isdigit():
        sign = -1 if offset[0] == "-" else 1
        zone = timezone(sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[3:5])))
        moment = datetime.fromtimestamp(float(date_time["epoch"]), zone) + timedelta(hours=float(hours))
    else:
        moment = datetime.fromtimestamp(time.time(), UTC) + timedelta(hours=float(hours)) + LARGEST_UTC_OFFSET
    return moment.strftime("%Y%m%d%H%M%S")


# Where a host's model root is on one of these, every host mounting the same export sees one copy.
SHARED_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "ceph",
        "fuse.cephfs",
        "glusterfs",
        "fuse.glusterfs",
        "lustre",
        "beegfs",
        "gpfs",
        "fuse.juicefs",
        "9p",
        "virtiofs",
    }
)


def _shared_key(mount: Mapping[str, Any]) -> str:
    """A network filesystem's identity (type, export, mount point) for a host's model root; empty on a local one."""
    fstype = str(mount.get("fstype") or "")
    return f"{fstype} {mount.get('source', '')} {mount.get('target', '')}" if fstype in SHARED_FILESYSTEMS else ""


def sglang_model_fanout(
    hosts: Sequence[str],
    hostvars: Mapping[str, Any],
    seed_hosts: int,
    active: Sequence[str] | None = None,
    reached: str = "",
) -> dict[str, dict[str, Any]]:
    """Who sends each host its model revision, and in which wave: a tree that doubles the hosts holding it each wave.

    Per host of `hosts` (in that order) with a model, from its variables: `sglang_model_source` (its revision, by
    `sha256`; `path`), `sglang_probe`'s model decision (`to_send`: the files it lacks), `_sglang_model_mount` (its
    model root's filesystem: `fstype`, `source`, `target`) and, named by `reached`, the result of its check that it
    reaches its peer (`reached` empty: not checked yet, every peer counts as reachable). Of the hosts lacking files,
    only those in `active` (the hosts still in the play; default all) are sent them; any host holding it sends.
    Hosts holding the revision already send it from the start; without any, the control node sends it to the first
    `seed_hosts` hosts (wave 0; 0: to every host, no copies between hosts), then each host that holds it sends it to
    one more host per wave. A host that cannot reach its peer gets it from the control node in the same wave (its own
    receivers are unchanged). Hosts whose model root is the same network filesystem (NFS, ...) get one copy: the
    first receives it, the others (`shared`) only verify it.
    Returns, per host that lacks files: `wave`, `source` ("control" or a peer's inventory name), `source_path` (the
    peer's directory of the revision), `shared` and `fallback` (a peer it could not reach). Hosts with nothing to send
    are left out."""
    seeds = int(seed_hosts)
    running = set(hosts if active is None else active)
    groups: dict[str, list[str]] = {}
    for host in hosts:
        source = hostvars[host].get("sglang_model_source") or {}
        if source.get("sha256") and (host in running or not _to_send(hostvars[host])):
            groups.setdefault(repr(sorted(source["sha256"].items())), []).append(host)
    plan: dict[str, dict[str, Any]] = {}
    for members in groups.values():
        plan.update(_fanout_group(members, hostvars, seeds, reached))
    return plan


def _to_send(variables: Mapping[str, Any]) -> list[str]:
    probe = variables.get("sglang_probe") or {}
    return list((((probe.get("answers") or {}).get("sglang_model") or {}).get("decision") or {}).get("to_send") or [])


def _fanout_group(members: Sequence[str], hostvars: Mapping[str, Any], seeds: int, reached: str) -> dict[str, dict[str, Any]]:
    """sglang_model_fanout for the hosts of one revision."""
    holders = [host for host in members if not _to_send(hostvars[host])]
    needing = [host for host in members if _to_send(hostvars[host])]
    copy_of: dict[str, str] = {}
    for host in holders + needing:
        key = _shared_key(hostvars[host].get("_sglang_model_mount") or {})
        if key:
            copy_of.setdefault(key, host)
    plan: dict[str, dict[str, Any]] = {}
    senders = list(holders)
    receivers: list[str] = []
    for host in needing:
        first = copy_of.get(_shared_key(hostvars[host].get("_sglang_model_mount") or {}), host)
        if first != host:
            plan[host] = {"wave": -1, "source": first, "shared": True, "fallback": False}
        else:
            receivers.append(host)
    wave = 0
    if seeds <= 0:  # No copies between hosts: the control node sends every host its files.
        plan.update({host: {"wave": 0, "source": "control", "shared": False, "fallback": False} for host in receivers})
        senders, receivers = [], []
    if not senders and receivers:
        for host in receivers[:seeds]:
            plan[host] = {"wave": 0, "source": "control", "shared": False, "fallback": False}
        senders, receivers, wave = receivers[:seeds], receivers[seeds:], 1
    while receivers:
        batch, receivers = receivers[: len(senders)], receivers[len(senders) :]
        for host, peer in zip(batch, senders, strict=False):
            check = (hostvars[host].get(reached) or {}) if reached else {}
            fallback = bool(check) and not check.get("skipped") and not check.get("state")
            plan[host] = {"wave": wave, "source": "control" if fallback else peer, "shared": False, "fallback": fallback}
        senders += batch
        wave += 1
    for entry in plan.values():
        if entry["shared"]:
            entry["wave"] = plan.get(entry["source"], {}).get("wave", -1)
        peer = entry["source"]
        entry["source_path"] = "" if peer == "control" else (hostvars[peer].get("sglang_model_source") or {}).get("path", "")
    return plan


def sglang_model_fanout_part(
    plan: Mapping[str, Mapping[str, Any]], host: str, active: Sequence[str], hostvars: Mapping[str, Any]
) -> dict[str, Any]:
    """`host`'s part in the fan-out `plan` (filter sglang_model_fanout; empty where the host had nothing to send):
    its `entry` (its wave, who sends it the revision, whether it shares another host's copy), the `peer` it copies
    from as that host published it (sglang_model_source.peer: address, port, user; with `ssh_host`, the address as ssh
    takes it, an IPv6 one in brackets, and `known_host`, the name known_hosts has it under), whether the control node
    sends it the files (`from_control`: its plan says so, or its peer is no longer among the `active` hosts), the
    copies between hosts of the whole run (`copies`: their entries), who sends them (`senders`; `senders_unplanned`:
    those that held the revision before the run), who receives one (`receivers`) and how many waves there are."""
    entry = dict(plan.get(host) or {"source": "control", "wave": 0, "shared": False})
    copies = [part for part in plan.values() if part["source"] != "control" and not part["shared"]]
    senders = unique(part["source"] for part in copies)
    source = entry["source"]
    peer = dict(((hostvars[source].get("sglang_model_source") or {}).get("peer") or {}) if source != "control" else {})
    if peer:
        address, port = str(peer["address"]), int(peer["port"])
        peer["ssh_host"] = f"[{address}]" if ":" in address else address
        peer["known_host"] = address if port == 22 else f"[{address}]:{port}"
    return {
        "entry": entry,
        "peer": peer,
        "from_control": source == "control" or (source in plan and source not in active),
        "copies": copies,
        "senders": senders,
        "senders_unplanned": [sender for sender in senders if sender not in plan],
        "receivers": [name for name, part in plan.items() if part["source"] != "control" and not part["shared"]],
        "waves": max((int(part["wave"]) for part in plan.values()), default=-1) + 1,
    }


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_model_dir": sglang_model_dir,
            "sglang_model_fanout": sglang_model_fanout,
            "sglang_model_fanout_part": sglang_model_fanout_part,
            "sglang_model_key_expiry": sglang_model_key_expiry,
            "sglang_model_name": sglang_model_name,
            "sglang_model_problems": sglang_model_problems,
            "sglang_model_sender_problems": sglang_model_sender_problems,
            "sglang_model_sha256": sglang_model_sha256,
        }
