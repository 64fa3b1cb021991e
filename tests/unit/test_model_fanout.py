"""The model's fan-out (filter sglang_model_fanout): the control node sends a revision to the seed hosts only, every
other host copies it from a host that holds it, the holders doubling each wave; a host that cannot reach its peer
falls back to the control node; hosts on one network filesystem get one copy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.filter.sglang_model import (
    RRSYNC,
    RSYNC,
    sglang_model_fanout,
    sglang_model_key_expiry,
    sglang_model_sender_problems,
)

LOCK = {"config.json": "a" * 64, "model.safetensors": "b" * 64}
OTHER_LOCK = {"config.json": "c" * 64}


def host(
    lacks: bool = True, lock: dict[str, str] | None = None, mount: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    """A host's variables as the play has them after deploy's probe."""
    return {
        "sglang_model_source": {"sha256": lock or LOCK, "path": "/srv/models/org--m/rev"},
        "sglang_probe": {"answers": {"sglang_model": {"decision": {"to_send": ["model.safetensors"] if lacks else []}}}},
        "_sglang_model_mount": mount or {"fstype": "ext4", "source": "/dev/nvme0n1p1", "target": "/"},
        **extra,
    }


def fleet(count: int, **kwargs: Any) -> dict[str, dict[str, Any]]:
    return {f"h{n:02d}": host(**kwargs) for n in range(count)}


def control_sends(plan: dict[str, dict[str, Any]]) -> int:
    return sum(entry["source"] == "control" for entry in plan.values())


@pytest.mark.parametrize("count", [2, 6, 12, 1000])
def test_the_control_node_sends_to_the_seed_hosts_only_whatever_the_number_of_hosts(count: int) -> None:
    hosts = fleet(count)
    plan = sglang_model_fanout(list(hosts), hosts, 1)
    assert control_sends(plan) == 1
    assert set(plan) == set(hosts)
    assert plan["h00"] == {"wave": 0, "source": "control", "shared": False, "fallback": False, "source_path": ""}


def test_holders_double_each_wave_and_a_peer_sends_only_what_it_received_in_an_earlier_wave() -> None:
    hosts = fleet(12)
    plan = sglang_model_fanout(list(hosts), hosts, 2)
    waves = [sorted(name for name, entry in plan.items() if entry["wave"] == wave) for wave in range(4)]
    # Two seeds, then 2, 4 and the last 4 (8 could have gone).
    assert [len(wave) for wave in waves] == [2, 2, 4, 4]
    for entry in plan.values():
        if entry["source"] != "control":
            assert plan[entry["source"]]["wave"] < entry["wave"]
            assert entry["source_path"] == "/srv/models/org--m/rev"
    # Each sender sends to at most one host a wave.
    for wave in range(4):
        sources = [entry["source"] for entry in plan.values() if entry["wave"] == wave and entry["source"] != "control"]
        assert len(sources) == len(set(sources))


def test_waves_grow_with_the_logarithm_of_the_hosts() -> None:
    hosts = fleet(1000)
    plan = sglang_model_fanout(list(hosts), hosts, 1)
    assert max(entry["wave"] for entry in plan.values()) == 10  # 2**10 = 1024 >= 1000


def test_a_host_that_holds_the_revision_already_sends_it_and_the_control_node_sends_nothing() -> None:
    hosts = {"old": host(lacks=False), **fleet(3)}
    plan = sglang_model_fanout(list(hosts), hosts, 1)
    assert "old" not in plan
    assert control_sends(plan) == 0
    assert plan["h00"]["source"] == "old" and plan["h00"]["wave"] == 0


def test_a_host_that_cannot_reach_its_peer_gets_the_revision_from_the_control_node_in_the_same_wave() -> None:
    hosts = fleet(4)
    first = sglang_model_fanout(list(hosts), hosts, 1)
    for name, entry in first.items():
        hosts[name]["_check"] = {"skipped": True} if entry["source"] == "control" else {"state": "started"}
    hosts["h02"]["_check"] = {"msg": "Timeout when waiting for h00:22", "elapsed": 3}
    plan = sglang_model_fanout(list(hosts), hosts, 1, None, "_check")
    assert plan["h02"] == {**first["h02"], "source": "control", "fallback": True, "source_path": ""}
    # The others keep their peers (h03 still copies from h01): the tree's shape does not change.
    assert {name: plan[name] for name in ("h00", "h01", "h03")} == {name: first[name] for name in ("h00", "h01", "h03")}


def test_hosts_on_one_nfs_export_get_one_copy_and_the_others_only_verify() -> None:
    nfs = {"fstype": "nfs4", "source": "filer:/models", "target": "/srv/models"}
    hosts = {**fleet(2), "n1": host(mount=nfs), "n2": host(mount=nfs), "n3": host(mount=nfs)}
    plan = sglang_model_fanout(list(hosts), hosts, 1)
    assert [name for name, entry in plan.items() if not entry["shared"]] == ["h00", "h01", "n1"]
    assert plan["n2"]["source"] == plan["n3"]["source"] == "n1"
    assert plan["n2"]["wave"] == plan["n1"]["wave"]


def test_another_export_or_a_local_disk_is_not_shared() -> None:
    hosts = {
        "a": host(mount={"fstype": "nfs4", "source": "filer:/models", "target": "/srv/models"}),
        "b": host(mount={"fstype": "nfs4", "source": "filer2:/models", "target": "/srv/models"}),
        "c": host(mount={"fstype": "xfs", "source": "/dev/md0", "target": "/srv/models"}),
        "d": host(mount={"fstype": "xfs", "source": "/dev/md0", "target": "/srv/models"}),
    }
    plan = sglang_model_fanout(list(hosts), hosts, 1)
    assert not any(entry["shared"] for entry in plan.values())


def test_each_revision_has_its_own_tree_and_hosts_without_a_model_are_left_out() -> None:
    hosts = {**fleet(3), "x0": host(lock=OTHER_LOCK), "x1": host(lock=OTHER_LOCK), "none": {"sglang_model_source": {}}}
    plan = sglang_model_fanout(list(hosts), hosts, 1)
    assert plan["x0"]["source"] == "control" and plan["x1"]["source"] == "x0"
    assert control_sends(plan) == 2
    assert "none" not in plan


def test_no_seed_hosts_means_the_control_node_sends_every_host_its_files() -> None:
    hosts = {"old": host(lacks=False), **fleet(3)}
    plan = sglang_model_fanout(list(hosts), hosts, 0)
    assert control_sends(plan) == 3 and {entry["wave"] for entry in plan.values()} == {0}


def test_a_host_no_longer_in_the_play_is_sent_nothing_but_a_holder_that_ended_its_run_still_sends() -> None:
    hosts = {"old": host(lacks=False), **fleet(3)}
    plan = sglang_model_fanout(list(hosts), hosts, 1, ["h00", "h02"])
    assert set(plan) == {"h00", "h02"}
    assert plan["h00"]["source"] == "old" and plan["h02"]["source"] == "old"


def probed(variables: dict[str, Any], *found: str) -> dict[str, Any]:
    """A host's variables with its probe's read of RRSYNC and RSYNC (the paths in `found` present)."""
    model = variables["sglang_probe"]["answers"]["sglang_model"]
    model["read"] = {"found": {path: [path] if path in found else [] for path in (RRSYNC, RSYNC)}}
    return variables


def test_a_host_that_will_send_without_rrsync_is_refused_naming_it_and_the_variable() -> None:
    # h00 holds the revision and sends it to h01 (wave 0): the run's key may run rrsync only, which h00 lacks.
    hosts = {"h00": probed(host(lacks=False), RSYNC), "h01": probed(host(), RSYNC)}
    [line] = sglang_model_sender_problems("h00", list(hosts), hosts, 1)
    assert line.startswith("h00 host: sglang_model_seed_hosts=1: this host sends the model's revision to other hosts")
    assert "/usr/bin/rrsync only, which the host lacks (its rsync package does not ship it)" in line
    assert "fix: install rrsync as /usr/bin/rrsync" in line and "sglang_model_seed_hosts: 0" in line
    # The receiver sends to nobody: no problem there; with rrsync, none on the sender either.
    assert sglang_model_sender_problems("h01", list(hosts), hosts, 1) == []
    probed(hosts["h00"], RRSYNC, RSYNC)
    assert sglang_model_sender_problems("h00", list(hosts), hosts, 1) == []


def test_a_holder_lacking_rsync_and_rrsync_is_refused_but_a_receiver_that_installs_rsync_first_is_not() -> None:
    # 4 hosts, none holds it: h00 gets it from the control node (wave 0) and sends to h01 (wave 1); h00 and h01 send in
    # wave 2. Without rsync, each receives (and installs rsync) before it sends.
    hosts = {name: probed(variables) for name, variables in fleet(4).items()}
    assert [sglang_model_sender_problems(name, list(hosts), hosts, 1) for name in hosts] == [[], [], [], []]
    # With rsync already there and no rrsync, installing rsync brings nothing: the senders are refused.
    hosts = {name: probed(variables, RSYNC) for name, variables in fleet(4).items()}
    assert [bool(sglang_model_sender_problems(name, list(hosts), hosts, 1)) for name in hosts] == [True, True, False, False]
    # A host holding the revision without rsync receives nothing, so nothing installs it before it sends.
    hosts = {"h00": probed(host(lacks=False)), "h01": probed(host())}
    [line] = sglang_model_sender_problems("h00", list(hosts), hosts, 1)
    assert "which the host lacks; fix:" in line


def test_no_copies_between_hosts_means_no_host_needs_rrsync() -> None:
    hosts = {"h00": probed(host(lacks=False)), "h01": probed(host())}
    assert sglang_model_sender_problems("h00", list(hosts), hosts, 0) == []


@pytest.mark.parametrize(
    ("tz_offset", "expected"),
    # 2026-12-05 14:00:00 UTC, plus 24 hours, in the host's own zone.
    [("+0000", "20261206140000"), ("+0530", "20261206193000"), ("-0800", "20261206060000")],
)
def test_the_key_expires_hours_after_the_host_s_fact_time_written_in_its_own_zone(tz_offset: str, expected: str) -> None:
    facts = {"epoch": str(int(datetime(2026, 12, 5, 14, tzinfo=UTC).timestamp())), "tz_offset": tz_offset}
    assert sglang_model_key_expiry(facts, 24) == expected


def test_without_the_host_s_facts_the_key_lasts_at_least_its_hours_in_any_zone() -> None:
    before = datetime.now(UTC).replace(microsecond=0, tzinfo=None)
    written = datetime.strptime(sglang_model_key_expiry({}, 2), "%Y%m%d%H%M%S")
    # Read in the zone furthest ahead of UTC (UTC+14), the time is still 2 hours away at least.
    assert written - timedelta(hours=14) >= before + timedelta(hours=2)
    assert written <= before + timedelta(hours=16, seconds=5)
