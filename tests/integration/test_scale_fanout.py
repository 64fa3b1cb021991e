"""The model fan-out between hosts (issue 41), on two of the scale rehearsal's hosts (inventory/scale,
scripts/scale-hosts.sh: containers with sshd and rsync on a network of their own, started for 2 when absent; the
sandbox's ct129 and b200 are not touched): a new revision goes from the control node to one host only, the other copies
it from that host over ssh with the run's key (restricted to rrsync, with an expiry-time), and afterwards neither host
keeps the key."""

from __future__ import annotations

import re
import subprocess
import time
from typing import Any

import pytest
from fleet import ROOT, Run, on_host, run_playbook

INVENTORY = ROOT / "inventory/scale"
SCRIPT = ROOT / "scripts/scale-hosts.sh"
SEND = "Send the files the host lacks from the control node"
COPY = "Copy the files the host lacks from its peer"
ALLOW = "Allow the run's key, on each host that sends"
# ssh-keygen's comment on the run's key (roles/sglang_model/tasks/peer_key.yml).
KEY_COMMENT = "sglang-fleet-model-fanout"
# The 4 MiB file of its own each scale revision has (scripts/scale-hosts.sh), which a copy must carry.
PADDING = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def scale_pair() -> None:
    running = subprocess.run(
        ["docker", "ps", "--filter", "label=sglang-fleet=scale", "--format", "{{.Names}}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if not {"scale01", "scale02"} <= set(running):
        subprocess.run([str(SCRIPT), "start", "2"], check=True, cwd=ROOT)


def results(run: Run, task: str) -> dict[str, dict[str, Any]]:
    """The task's result by host, where it ran."""
    return {data["host"]: data["res"] for data in run.results() if data["task"].startswith(task)}


def stats_bytes(result: dict[str, Any], label: str) -> int:
    text = str(result.get("msg", "")) + str(result.get("stdout", ""))
    return sum(int(found.replace(",", "")) for found in re.findall(rf"{label}: ([\d,]+)", text))


def test_a_new_revision_leaves_the_control_node_once_and_the_second_host_copies_it_from_the_first(scale_pair: None) -> None:
    revision = f"r{int(time.time())}"  # A revision neither host has had.
    subprocess.run([str(SCRIPT), "model", revision[1:]], check=True, cwd=ROOT)
    run = run_playbook(
        "deploy.yml", INVENTORY, {"scale_revision": revision, "sglang_model_seed_hosts": 1}, limit="scale01,scale02"
    )
    assert run.rc == 0, run.failure_messages()

    sent, copied = results(run, SEND), results(run, COPY)
    # Wave 0: the control node sends scale01 (the seed) the revision; wave 1: scale02 copies it from scale01.
    assert [host for host, result in sent.items() if not result.get("skipped")] == ["scale01"]
    assert [host for host, result in copied.items() if not result.get("skipped")] == ["scale02"]
    assert stats_bytes(sent["scale01"], "Total bytes sent") > PADDING
    assert stats_bytes(copied["scale02"], "Total bytes received") > PADDING, "the peer-to-peer copy carried the files"
    # The sender allowed the run's key for rrsync only, expiring by itself.
    allowed = results(run, ALLOW)["scale01"]
    assert re.fullmatch(r'restrict,expiry-time="\d{14}",command="/usr/bin/rrsync -ro \S+"', allowed["key_options"])

    for host in ("scale01", "scale02"):
        # Both serve the revision, verified against the lock on arrival.
        link = on_host(host, "sh", "-c", "readlink /srv/models/*/current").strip()
        assert link.endswith(f"/{revision}"), (host, link)
        # Neither keeps the run's key: not allowed on the sender, no private half left on the receiver.
        allowed_keys = on_host(host, "sh", "-c", "cat /root/.ssh/authorized_keys 2>/dev/null || true")
        assert KEY_COMMENT not in allowed_keys, host
        assert on_host(host, "sh", "-c", "ls -d /tmp/*.sglang-model-fanout 2>/dev/null || true") == "", host


def test_a_host_that_would_send_without_rrsync_is_refused_by_preflight_and_nothing_changes(scale_pair: None) -> None:
    revision = f"r{int(time.time())}"
    subprocess.run([str(SCRIPT), "model", revision[1:]], check=True, cwd=ROOT)
    before = {host: on_host(host, "sh", "-c", "readlink /srv/models/*/current").strip() for host in ("scale01", "scale02")}
    on_host("scale01", "mv", "/usr/bin/rrsync", "/usr/bin/rrsync.away")
    try:
        run = run_playbook(
            "deploy.yml", INVENTORY, {"scale_revision": revision, "sglang_model_seed_hosts": 1}, limit="scale01,scale02"
        )
    finally:
        on_host("scale01", "mv", "/usr/bin/rrsync.away", "/usr/bin/rrsync")
    assert run.rc != 0
    messages = "\n".join(run.failure_messages())
    # scale01, the seed, would send scale02 the revision; scale02 sends to nobody.
    assert "scale01 host: sglang_model_seed_hosts=1: this host sends the model's revision to other hosts" in messages
    assert "(its rsync package does not ship it); fix: install rrsync as /usr/bin/rrsync" in messages
    assert "scale02 host: sglang_model_seed_hosts" not in messages
    after = {host: on_host(host, "sh", "-c", "readlink /srv/models/*/current").strip() for host in ("scale01", "scale02")}
    assert after == before, "nothing changed on either host"
    assert on_host("scale01", "sh", "-c", f"ls -d /srv/models/*/{revision} 2>/dev/null || true") == ""
