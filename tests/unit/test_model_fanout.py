"""The model's fan-out (filter sglang_model_fanout): the control node sends a revision to the seed hosts only, every
other host copies it from a host that holds it, the holders doubling each wave; a host that cannot reach its peer
falls back to the control node; hosts on one network filesystem get one copy."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.filter.sglang_model import sglang_model_fanout

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
