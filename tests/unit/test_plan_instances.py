"""Instance derivation: the one data model every role uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Plan = Callable[..., dict[str, Any]]


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_b200_is_seven_single_gpu_instances_on_consecutive_ports(plan: Plan) -> None:
    result = plan("b200")
    assert result["problems"] == []
    instances = result["instances"]
    assert [i["name"] for i in instances] == [f"sglang-{30000 + i}" for i in range(7)]
    for index, instance in enumerate(instances):
        assert instance["gpu_ids"] == [index]
        assert instance["environment"]["CUDA_VISIBLE_DEVICES"] == f"GPU-b200-{index}"
        assert instance["gpu_uuids"] == [f"GPU-b200-{index}"]
        assert instance["gpu_devices"] == [f"/dev/nvidia{index}"]
        assert flag_value(instance["argv"], "--port") == str(30000 + index)
        assert flag_value(instance["argv"], "--nccl-port") == str(31000 + index)
        assert instance["unit"] == f"sglang-{30000 + index}.service"
        assert instance["url"] == f"http://127.0.0.1:{30000 + index}"


def test_b200_renders_eagle_and_the_renamed_flags_of_0_5_23(plan: Plan) -> None:
    argv = plan("b200")["instances"][0]["argv"]
    assert flag_value(argv, "--speculative-algorithm") == "EAGLE"
    assert flag_value(argv, "--speculative-num-steps") == "3"
    assert flag_value(argv, "--speculative-eagle-topk") == "1"
    assert flag_value(argv, "--speculative-num-draft-tokens") == "4"
    assert flag_value(argv, "--mamba-radix-cache-strategy") == "extra_buffer"
    assert flag_value(argv, "--cuda-graph-max-bs-decode") == "512"
    assert flag_value(argv, "--mem-fraction-static") == "0.9"
    assert "--enable-hierarchical-cache" in argv and "--trust-remote-code" in argv
    assert "--cuda-graph-max-bs" not in argv and "--mamba-scheduler-strategy" not in argv


def test_ct129_is_one_tensor_parallel_instance_over_both_gpus(plan: Plan) -> None:
    result = plan("ct129")
    assert result["problems"] == []
    (instance,) = result["instances"]
    assert instance["gpu_ids"] == [0, 1]
    assert instance["environment"]["CUDA_VISIBLE_DEVICES"] == "GPU-ct129-0,GPU-ct129-1"
    assert flag_value(instance["argv"], "--tp-size") == "2"
    assert flag_value(instance["argv"], "--speculative-algorithm") == "NEXTN"
    assert instance["speculative"]["reported_algorithm"] == "EAGLE"
    assert flag_value(instance["argv"], "--dtype") == "bfloat16"


def test_an_instance_override_changes_that_instance_only(plan: Plan) -> None:
    before = plan("b200")["instances"]
    after = plan("b200", sglang_instance_overrides={3: {"server_args": {"max-running-requests": 256}}})["instances"]
    changed = [a["name"] for a, b in zip(after, before, strict=True) if a["argv"] != b["argv"]]
    assert changed == ["sglang-30003"]
    assert flag_value(after[3]["argv"], "--max-running-requests") == "256"


def test_a_new_host_shape_needs_only_its_variables(plan: Plan) -> None:
    result = plan(
        "b200",
        sglang_gpus_per_instance=2,
        sglang_tensor_parallel_size=2,
        sglang_gpu_ids=[1, 2, 3, 4, 5, 6],
        sglang_port_base=40000,
        sglang_nccl_port_base=41000,
    )
    assert result["problems"] == []
    assert [i["gpu_ids"] for i in result["instances"]] == [[1, 2], [3, 4], [5, 6]]
    assert [i["port"] for i in result["instances"]] == [40000, 40001, 40002]


def test_instance_count_limits_the_instances(plan: Plan) -> None:
    assert len(plan("b200", sglang_instance_count=3)["instances"]) == 3


def test_environment_reaches_every_instance(plan: Plan) -> None:
    instances = plan("b200", sglang_environment={"NCCL_DEBUG": "WARN"})["instances"]
    assert len(instances) == 7
    assert [i["environment"]["NCCL_DEBUG"] for i in instances] == ["WARN"] * 7


PLAN_IN_A_NEW_PROCESS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from conftest import host_facts, plan_settings
from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import sglang_plan
model, tables = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
print(json.dumps(sglang_plan(plan_settings("b200"), host_facts("b200", model), tables)))
"""


def test_derivation_is_the_same_in_every_process(
    plan: Plan, model_facts: dict[str, Any], support_tables: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The plan is a function of its inputs only: two fresh interpreters with different hash seeds (set and str hash
    order) give this one's instances, byte for byte."""
    from fleet import ROOT

    (tmp_path / "model.json").write_text(json.dumps(model_facts))
    (tmp_path / "tables.json").write_text(json.dumps(support_tables))
    here = plan("b200")
    assert here["problems"] == [] and len(here["instances"]) == 7
    inputs = [str(ROOT / "tests"), str(tmp_path / "model.json"), str(tmp_path / "tables.json")]
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", PLAN_IN_A_NEW_PROCESS, *inputs],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert done.stdout.strip() == json.dumps(here), f"PYTHONHASHSEED={seed}"


def test_gpus_are_named_by_uuid_and_allowed_by_their_own_device_node(plan: Plan) -> None:
    """Device minors need not follow nvidia-smi's indexes: each instance gets the node of its own GPU's UUID."""
    from conftest import host_facts

    gpus = host_facts("b200", {})["gpus"]
    for gpu in gpus:
        gpu["minor_number"] = 6 - gpu["index"]
        gpu["device"] = f"/dev/nvidia{6 - gpu['index']}"
    instances = plan("b200", facts={"gpus": gpus}, sglang_gpu_ids=[2, 5])["instances"]
    assert [i["environment"]["CUDA_VISIBLE_DEVICES"] for i in instances] == ["GPU-b200-2", "GPU-b200-5"]
    assert [i["gpu_devices"] for i in instances] == [["/dev/nvidia4"], ["/dev/nvidia1"]]


def test_each_instance_carries_its_files_and_a_key_file_only_with_a_key(plan: Plan) -> None:
    instance = plan("b200")["instances"][2]
    assert instance["files"] == {
        "unit": "/etc/systemd/system/sglang-30002.service",
        "environment": "/etc/sglang-fleet/sglang-30002.env",
        "secret": None,
        "last_good": [
            ["/etc/systemd/system/sglang-30002.service", "/etc/sglang-fleet/last-good/sglang-30002.service"],
            ["/etc/sglang-fleet/sglang-30002.env", "/etc/sglang-fleet/last-good/sglang-30002.env"],
            # Without a key now, a key file of the last verified set is still restored (or a stray one removed).
            ["/etc/sglang-fleet/secrets/sglang-30002.yaml", "/etc/sglang-fleet/last-good/sglang-30002.yaml"],
        ],
    }
    keyed = plan("b200", sglang_api_key="k", sglang_server_config_dir="/srv/fleet")["instances"][2]["files"]
    assert keyed["secret"] == "/srv/fleet/secrets/sglang-30002.yaml" and keyed["environment"] == "/srv/fleet/sglang-30002.env"


def test_a_unit_no_longer_planned_has_the_same_files() -> None:
    from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import FilterModule

    files = FilterModule().filters()["sglang_instance_file_set"](
        "sglang-39999.service", "/etc/systemd/system", "/etc/sglang-fleet"
    )
    assert (files["unit"], files["environment"], files["secret"]) == (
        "/etc/systemd/system/sglang-39999.service",
        "/etc/sglang-fleet/sglang-39999.env",
        None,
    )
