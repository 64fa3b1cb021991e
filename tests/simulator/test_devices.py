"""CUDA under a device cgroup: the simulator sees only the stand-in GPUs whose device nodes it may open."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_simulator import cuda_check, nvidia_modprobe
from sglang_simulator.gpus import Inventory, load_inventory, visible_gpus

UUIDS = [f"GPU-0000000{i}-aaaa-bbbb-cccc-000000000000" for i in range(4)]


def inventory_with_nodes(tmp_path: Path, openable_minors: list[int], shared: bool = True) -> Inventory:
    """Four GPUs whose minors run backwards (GPU i is /dev/nvidia<3-i>); only the listed nodes open."""
    devices = tmp_path / "dev"
    devices.mkdir()
    for minor in openable_minors:
        (devices / f"nvidia{minor}").write_text("")
    if shared:
        (devices / "nvidiactl").write_text("")
        (devices / "nvidia-uvm").write_text("")
    gpus = [{"index": i, "memory_total_mib": 1000, "uuid": UUIDS[i], "minor_number": 3 - i} for i in range(4)]
    (tmp_path / "gpus.json").write_text(json.dumps({"device_dir": str(devices), "gpus": gpus}))
    return load_inventory(tmp_path / "gpus.json")


def test_a_unit_allowed_one_gpu_sees_it_as_ordinal_0_and_by_uuid(tmp_path: Path) -> None:
    inventory = inventory_with_nodes(tmp_path, openable_minors=[0])  # /dev/nvidia0 is GPU 3
    assert [g.index for g in visible_gpus(inventory, None)] == [3]
    assert [g.index for g in visible_gpus(inventory, UUIDS[3])] == [3]
    assert [g.index for g in visible_gpus(inventory, "0")] == [3]


def test_a_host_wide_index_names_no_gpu_inside_the_cgroup(tmp_path: Path) -> None:
    """sglang-30003 rendered with CUDA_VISIBLE_DEVICES=3 and allowed only its own node sees no GPU."""
    inventory = inventory_with_nodes(tmp_path, openable_minors=[0])
    assert visible_gpus(inventory, "3") == []
    assert visible_gpus(inventory, UUIDS[1]) == []


def test_without_the_shared_nodes_cuda_sees_nothing(tmp_path: Path) -> None:
    inventory = inventory_with_nodes(tmp_path, openable_minors=[0, 1, 2, 3], shared=False)
    assert visible_gpus(inventory, None) == []


def test_without_modelled_nodes_every_gpu_is_usable(tmp_path: Path) -> None:
    gpus = [{"index": i, "memory_total_mib": 1000, "uuid": UUIDS[i]} for i in range(4)]
    (tmp_path / "gpus.json").write_text(json.dumps({"gpus": gpus}))
    assert [g.index for g in visible_gpus(load_inventory(tmp_path / "gpus.json"), "3,1")] == [3, 1]


@pytest.mark.parametrize(
    ("visible", "expect", "ok", "error"),
    [
        (UUIDS[3], 1, True, None),
        ("3", 1, False, "CUDA sees 0 GPU(s), expected 1"),
        (f"{UUIDS[3]},{UUIDS[2]}", 2, False, "CUDA sees 1 GPU(s), expected 2"),
    ],
)
def test_the_simulators_cuda_check_answers_like_the_real_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], visible: str, expect: int, ok: bool, error: str | None
) -> None:
    inventory_with_nodes(tmp_path, openable_minors=[0])
    env = {
        "SGLANG_SIM_GPUS_FILE": str(tmp_path / "gpus.json"),
        "SGLANG_SIM_STATE_DIR": str(tmp_path / "state"),
        "CUDA_VISIBLE_DEVICES": visible,
    }
    assert cuda_check.main(["--expect", str(expect)], env) == (0 if ok else 1)
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] is ok and result.get("error") == error


def test_the_stand_in_nvidia_modprobe_makes_the_drivers_nodes() -> None:
    assert nvidia_modprobe.nodes(["-u", "-c=0"], "/dev") == [
        ("/dev/nvidia0", 195, 0),
        ("/dev/nvidiactl", 195, 255),
        ("/dev/nvidia-uvm", 511, 0),
        ("/dev/nvidia-uvm-tools", 511, 1),
    ]
    assert nvidia_modprobe.nodes(["-c=6"], "/dev") == [("/dev/nvidia6", 195, 6), ("/dev/nvidiactl", 195, 255)]
