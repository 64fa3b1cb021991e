"""sglang_host_facts: parsing nvidia-smi and /proc, fed the real driver's recorded output."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.module_utils import host_facts as module
from ansible_collections.sglang.fleet.plugins.module_utils import listeners, nvidia_smi, pythons
from ansible_collections.sglang.fleet.plugins.modules import sglang_host_facts

RECORDING = Path(__file__).resolve().parents[1] / "recordings" / "h200-driver-580.159.04"
H200_UUID = "GPU-44f393d0-11d7-63e7-90fc-6f04b5c785e9"  # the GPU of the *-with-torch recordings
H200_BUS = "00000000:00:06.0"


def recorded(name: str) -> str:
    """A recorded output, without the `rc=N` line the recording appends."""
    return re.sub(r"(?m)^rc=\d+\n\Z", "", (RECORDING / name).read_text())


def help_fields(name: str) -> set[str]:
    """Every name (aliases included) of a recorded `--help-query-*` text."""
    lines = (RECORDING / name).read_text().splitlines()
    return {n for line in lines if re.fullmatch(r'"[^"\s]+"(?: or "[^"\s]+")*', line) for n in re.findall(r'"([^"]+)"', line)}


def fake_nvidia_smi(tmp_path: Path, *, xml: str | None = "nvidia-smi-q-with-torch.xml") -> str:
    """An nvidia-smi that replays the recording for the exact queries the module makes (else the real refusal)."""
    script = tmp_path / "nvidia-smi"
    refuse = f'cat "{RECORDING}/unknown-field.txt" | head -n 2; exit 2'
    xml_branch = f'cat "{RECORDING}/{xml}"' if xml else 'echo "No devices were found"; exit 6'
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f'  "--query-gpu={nvidia_smi.GPU_FIELDS} --format=csv,noheader,nounits") cat "{RECORDING}/query-gpu-with-torch.csv";;\n'
        f'  "--query-compute-apps={nvidia_smi.APP_FIELDS} --format=csv,noheader,nounits")'
        f' head -n 1 "{RECORDING}/compute-apps-with-torch.csv";;\n'
        f'  "-q -x") {xml_branch};;\n'
        f"  *) {refuse};;\n"
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def proc_entry(root: Path, bus: str, minor: int, uuid: str = H200_UUID) -> None:
    """A /proc/driver/nvidia/gpus/<bus>/information as the driver writes it."""
    (root / bus).mkdir(parents=True)
    (root / bus / "information").write_text(
        "Model: \t\t NVIDIA H200\nIRQ:   \t\t 0\n"
        f"GPU UUID: \t {uuid}\nVideo BIOS: \t 96.00.a5.00.1a\nBus Type: \t PCIe\n"
        f"DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n"
        "GPU Firmware: \t 580.159.04\nGPU Excluded:\t No\n"
    )


def test_queried_fields_are_all_in_the_recorded_help() -> None:
    gpu_fields = help_fields("help-query-gpu.txt")
    assert set(nvidia_smi.GPU_FIELDS.split(",")) <= gpu_fields
    assert "minor_number" not in gpu_fields  # what broke preflight on the first real GPU
    assert set(nvidia_smi.APP_FIELDS.split(",")) <= help_fields("help-query-compute-apps.txt")


def test_parse_gpus_reads_the_recorded_query() -> None:
    assert nvidia_smi.parse_gpus(recorded("query-gpu-with-torch.csv")) == [
        {
            "index": 0,
            "uuid": H200_UUID,
            "name": "NVIDIA H200",
            "memory_total_mib": 143771,
            "memory_used_mib": 2575,
            "driver_version": "580.159.04",
            "pci_bus_id": H200_BUS,
        }
    ]


def test_parse_xml_minors_reads_the_recordings() -> None:
    assert nvidia_smi.parse_xml_minors(recorded("nvidia-smi-q-with-torch.xml")) == {H200_UUID: 0}
    assert nvidia_smi.parse_xml_minors(recorded("nvidia-smi-q.xml")) == {"GPU-16a29f6b-5412-7158-14a5-922c67e47101": 0}


def test_parse_apps_reads_the_recording() -> None:
    assert nvidia_smi.parse_apps(recorded("compute-apps-with-torch.csv"), {H200_UUID: 0}) == [
        {"pid": 431, "gpu_index": 0, "used_mib": 2566, "name": "python3"}
    ]
    assert nvidia_smi.parse_apps("", {}) == []


def test_proc_bus_id_is_the_kernels_spelling() -> None:
    assert nvidia_smi.proc_bus_id(H200_BUS) == "0000:00:06.0"
    assert nvidia_smi.proc_bus_id("00000000:1A:00.0") == "0000:1a:00.0"
    assert nvidia_smi.proc_bus_id("00000001:9B:00.0") == "0001:9b:00.0"


def test_parse_proc_information() -> None:
    text = f"Model: \t\t NVIDIA H200\nGPU UUID: \t {H200_UUID}\nDevice Minor: \t 3\n"
    assert nvidia_smi.parse_proc_information(text) == (3, H200_UUID)
    assert nvidia_smi.parse_proc_information("Model: \t\t NVIDIA H200\n") == (None, None)


def test_minor_from_proc_needs_no_nvidia_smi(tmp_path: Path) -> None:
    proc_entry(tmp_path / "gpus", "0000:00:06.0", 3)
    gpus = nvidia_smi.parse_gpus(recorded("query-gpu-with-torch.csv"))
    assert nvidia_smi.add_minors(gpus, nvidia_smi.NvidiaSmi(str(tmp_path / "no-nvidia-smi")), str(tmp_path / "gpus")) is None
    assert (gpus[0]["minor_number"], gpus[0]["device"]) == (3, "/dev/nvidia3")


def test_minor_falls_back_to_the_xml(tmp_path: Path) -> None:
    proc_entry(tmp_path / "gpus", "0000:00:06.0", 3, uuid="GPU-another")  # about another GPU: not trusted
    gpus = nvidia_smi.parse_gpus(recorded("query-gpu-with-torch.csv"))
    assert nvidia_smi.add_minors(gpus, nvidia_smi.NvidiaSmi(fake_nvidia_smi(tmp_path)), str(tmp_path / "gpus")) is None
    assert (gpus[0]["minor_number"], gpus[0]["device"]) == (0, "/dev/nvidia0")


def test_a_gpu_without_minor_is_an_error_not_its_index(tmp_path: Path) -> None:
    gpus = nvidia_smi.parse_gpus(recorded("query-gpu-with-torch.csv"))
    error = nvidia_smi.add_minors(gpus, nvidia_smi.NvidiaSmi(fake_nvidia_smi(tmp_path, xml=None)), str(tmp_path / "gpus"))
    assert error is not None
    assert f"GPU 0 ({H200_UUID}, {H200_BUS})" in error and "No devices were found" in error
    assert (gpus[0]["minor_number"], gpus[0]["device"]) == (None, None)
    # An XML about other GPUs (nvidia-smi-q.xml is another machine) gives no minor either.
    gpus = nvidia_smi.parse_gpus(recorded("query-gpu-with-torch.csv"))
    other_machine = nvidia_smi.NvidiaSmi(fake_nvidia_smi(tmp_path, xml="nvidia-smi-q.xml"))
    assert nvidia_smi.add_minors(gpus, other_machine, str(tmp_path / "gpus"))
    assert gpus[0]["minor_number"] is None


def test_device_nodes(tmp_path: Path) -> None:
    for name in ("nvidiactl", "nvidia-uvm", "nvidia10", "nvidia2", "nvidia-modeset", "nvidia0x"):
        (tmp_path / name).touch()
    (tmp_path / "nvidia-caps").mkdir()
    assert nvidia_smi.device_nodes(str(tmp_path)) == {
        "/dev/nvidiactl": True,
        "/dev/nvidia-uvm": True,
        "/dev/nvidia-uvm-tools": False,
        "/dev/nvidia2": True,
        "/dev/nvidia10": True,
    }
    assert nvidia_smi.device_nodes(str(tmp_path / "missing")) == dict.fromkeys(nvidia_smi.CONTROL_NODES, False)


def test_gather_replays_the_recorded_host(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").touch()
    facts = module.gather(fake_nvidia_smi(tmp_path), str(tmp_path / "no-proc"), str(tmp_path / "dev"))
    assert facts["gpu_error"] is None
    assert facts["driver_version"] == "580.159.04"
    assert facts["gpus"] == [
        {
            "index": 0,
            "uuid": H200_UUID,
            "name": "NVIDIA H200",
            "memory_total_mib": 143771,
            "memory_used_mib": 2575,
            "driver_version": "580.159.04",
            "pci_bus_id": H200_BUS,
            "minor_number": 0,
            "device": "/dev/nvidia0",
        }
    ]
    assert [{k: v for k, v in p.items() if k != "unit"} for p in facts["gpu_processes"]] == [
        {"pid": 431, "gpu_index": 0, "used_mib": 2566, "name": "python3"}
    ]
    assert facts["device_nodes"]["/dev/nvidia0"] is True and facts["device_nodes"]["/dev/nvidiactl"] is False


def test_gather_reports_the_real_refusal(tmp_path: Path) -> None:
    script = tmp_path / "nvidia-smi"
    script.write_text(f'#!/bin/sh\ncat "{RECORDING}/unknown-field.txt" | head -n 2; exit 2\n')
    script.chmod(0o755)
    facts = module.gather(str(script), str(tmp_path), str(tmp_path))
    assert facts["gpu_error"] == 'Field "bogus_field" is not a valid field to query.'
    assert facts["gpus"] == []


def test_parse_listening_keeps_listen_sockets_only() -> None:
    tcp = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n"
        "   1: 0100007F:7531 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n"
    )
    assert listeners.parse_listening([tcp]) == {30000: 111}


def test_unit_of_reads_the_service_from_the_cgroup(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text("0::/system.slice/sglang-30003.service\n")
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "cgroup").write_text("1:name=systemd:/user.slice/session-1.scope\n")
    assert listeners.unit_of(42, str(tmp_path)) == "sglang-30003.service"
    assert listeners.unit_of(43, str(tmp_path)) is None
    assert listeners.unit_of(44, str(tmp_path)) is None


FLEET_RUN = Path(__file__).resolve().parents[1] / "recordings" / "sglang-0.5.17-h200-fleet"


def test_the_module_ran_on_the_real_h200_and_its_parse_replays(tmp_path: Path) -> None:
    """The fleet run's recorded driver answers, replayed through gather(), give what gather() returned on the H200."""
    answers = {
        " ".join(json.loads((FLEET_RUN / "nvidia_smi" / f"{name}.json").read_text())["argv"][1:]): name
        for name in ("query-gpu", "q-x", "compute-apps.idle", "unknown-field.minor_number")
    }
    assert f"--query-gpu={nvidia_smi.GPU_FIELDS} --format=csv,noheader,nounits" in answers, "the query that ran is today's"
    script = tmp_path / "nvidia-smi"
    cases = "".join(
        f'  "{args}") {sys.executable} -c "import json,sys; r=json.load(open(sys.argv[1])); '
        f"print(r['stdout'], end=''); sys.exit(r['returncode'])\" \"{FLEET_RUN}/nvidia_smi/{name}.json\";;\n"
        for args, name in answers.items()
    )
    script.write_text(f'#!/bin/sh\ncase "$*" in\n{cases}  *) exit 2;;\nesac\n')
    script.chmod(0o755)
    information = json.loads((FLEET_RUN / "nvidia_smi" / "proc-information.json").read_text())
    for path, text in information.items():
        entry = tmp_path / "proc" / Path(path).parent.name
        entry.mkdir(parents=True)
        (entry / "information").write_text(text)
    real = json.loads((FLEET_RUN / "facts" / "host_facts.json").read_text())
    replayed = module.gather(str(script), str(tmp_path / "proc"), str(tmp_path))
    assert real["gpu_error"] is None and replayed["gpu_error"] is None
    assert replayed["gpus"] == real["gpus"]
    assert real["gpus"][0]["device"] == "/dev/nvidia0" and real["device_nodes"]["/dev/nvidia-uvm"] is True
    refused = json.loads((FLEET_RUN / "nvidia_smi" / "unknown-field.minor_number.json").read_text())
    assert (refused["returncode"], refused["stdout"]) == (2, 'Field "minor_number" is not a valid field to query.\n\n')


def test_python_versions_are_asked_of_each_python_on_path_by_name_and_path(tmp_path: Path, monkeypatch: Any) -> None:
    for name, version in (("python3", "3.11"), ("python3.12", "3.12")):
        script = tmp_path / name
        script.write_text(f"#!/bin/sh\necho {version}\n")
        script.chmod(0o755)
    broken = tmp_path / "python3.13"
    broken.write_text("#!/bin/sh\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert pythons.PythonVersions().answers() == {
        "python3": "3.11",
        str(tmp_path / "python3"): "3.11",
        "python3.12": "3.12",
        str(tmp_path / "python3.12"): "3.12",
    }, "python3.11 is not on PATH; python3.13 does not answer"


def test_the_venv_s_python_is_asked_too_and_why_it_gave_no_version_is_said(tmp_path: Path, monkeypatch: Any) -> None:
    for name, body in (("python3", "echo 3.11"), ("python3.10", "echo 'python3.10: broken install' >&2; exit 1"),
                       ("quiet", "exit 3"), ("latin", "printf 'caf\\351 broken\\n' >&2; exit 1")):  # fmt: skip
        script = tmp_path / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    (tmp_path / "plain").write_text("#!/bin/sh\necho 3.12\n")  # not executable
    (tmp_path / "plain").chmod(0o644)
    (tmp_path / "no-interpreter").write_bytes(b"\x7fELF not a program\n")  # executable, but the kernel cannot run it
    (tmp_path / "no-interpreter").chmod(0o755)
    custom = tmp_path / "opt" / "python"
    custom.parent.mkdir()
    custom.write_text("#!/bin/sh\necho 3.12\n")
    custom.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    for reported, versions, errors in (
        (str(custom), {str(custom): "3.12"}, {}),
        ("python3", {}, {}),
        ("python3.10", {}, {"python3.10": "python3.10: broken install"}),
        ("quiet", {}, {"quiet": "exit status 3"}),
        ("latin", {}, {"latin": "caf\ufffd broken"}),
        (str(tmp_path / "plain"), {}, {str(tmp_path / "plain"): "not executable"}),
        ("python9", {}, {"python9": "not found"}),
        (str(tmp_path / "nothing"), {}, {str(tmp_path / "nothing"): "not found"}),
    ):
        asked = pythons.PythonVersions(reported=(reported,))
        assert asked.errors() == errors, reported  # the answers read first
        assert asked.answers() == {"python3": "3.11", str(tmp_path / "python3"): "3.11", **versions}, reported
    failed = pythons.PythonVersions(reported=(str(tmp_path / "no-interpreter"),)).errors()
    assert failed[str(tmp_path / "no-interpreter")].startswith("[Errno 8] Exec format error"), failed
    assert pythons.PythonVersions().errors() == {}, "no error said for the usual names a host lacks"


def test_the_python_running_the_module_answers_for_itself(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "python3.13").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", str(tmp_path))
    asked = []
    monkeypatch.setattr(subprocess, "Popen", lambda argv, **_: asked.append(argv))
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert pythons.PythonVersions().answers() == {"python3.13": running, str(tmp_path / "python3.13"): running}
    assert asked == []


def waiting_nvidia_smi(folder: Path, *, refuse_gpus: bool = False, hang_gpus: bool = False) -> str:
    """An nvidia-smi that answers only once all three calls of a host without /proc entries are running (else, after
    20 s, it says it was called one after the other), each writing its pid, and the pid of what it starts, under
    `folder`/calls. With `refuse_gpus`, the GPU query is refused as the real driver refuses a field and the other two
    calls start a `sleep` that never ends; with `hang_gpus`, the GPU query does."""
    calls = folder / "calls"
    calls.mkdir(parents=True)
    never_ends = 'sleep 600 & echo $! > "$1.child"; wait'
    # Refused once the other two calls started what never ends.
    refused = (
        f'i=0; while [ "$(ls "{calls}" | grep -c child)" -lt 2 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; '
        f'cat "{RECORDING}/unknown-field.txt" | head -n 2; exit 2'
    )
    answers = {
        "gpus": refused if refuse_gpus
        else never_ends if hang_gpus else f'cat "{RECORDING}/query-gpu-with-torch.csv"',
        "apps": never_ends if refuse_gpus else f'head -n 1 "{RECORDING}/compute-apps-with-torch.csv"',
        "xml": never_ends if refuse_gpus else f'cat "{RECORDING}/nvidia-smi-q-with-torch.xml"',
    }  # fmt: skip
    script = folder / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'echo $$ > "{calls}/$1"\n'
        f'count() {{ ls "{calls}" | grep -vc child; }}\n'
        'i=0; while [ "$(count)" -lt 3 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done\n'
        '[ "$(count)" -ge 3 ] || { echo "called one after the other"; exit 9; }\n'
        'case "$1" in\n'
        f'  --query-gpu*) set -- "{calls}/$1"; {answers["gpus"]};;\n'
        f'  --query-compute-apps*) set -- "{calls}/$1"; {answers["apps"]};;\n'
        f'  -q) set -- "{calls}/$1"; {answers["xml"]};;\n'
        "esac\n"
    )
    script.chmod(0o755)
    return str(script)


def gone(pid_file: Path) -> bool:
    """Whether the process whose pid `pid_file` holds has ended (killed: a zombie until whoever inherited it reaps it, or
    reaped), waiting up to 5 s for a kill to land."""
    status = Path("/proc", pid_file.read_text().strip(), "stat")
    for _ in range(50):
        try:
            if status.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def test_the_nvidia_smi_calls_run_side_by_side(tmp_path: Path) -> None:
    facts = module.gather(waiting_nvidia_smi(tmp_path), str(tmp_path / "no-proc"), str(tmp_path))
    assert facts["gpu_error"] is None, facts["gpu_error"]
    assert [(gpu["uuid"], gpu["device"]) for gpu in facts["gpus"]] == [(H200_UUID, "/dev/nvidia0")]
    assert [process["pid"] for process in facts["gpu_processes"]] == [431]


def test_a_refused_gpu_query_ends_the_other_calls_and_what_they_started(tmp_path: Path) -> None:
    facts = module.gather(waiting_nvidia_smi(tmp_path, refuse_gpus=True), str(tmp_path / "no-proc"), str(tmp_path))
    assert facts["gpu_error"] == 'Field "bogus_field" is not a valid field to query.'
    for call in ("--query-compute-apps=" + nvidia_smi.APP_FIELDS, "-q"):
        assert gone(tmp_path / "calls" / call), f"{call} left running on the host"
        assert gone(tmp_path / "calls" / f"{call}.child"), f"what {call} started left running on the host"


def test_a_gpu_query_without_answer_is_an_error_and_ends(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(nvidia_smi, "TIMEOUT", 1)
    facts = module.gather(waiting_nvidia_smi(tmp_path, hang_gpus=True), str(tmp_path / "no-proc"), str(tmp_path))
    assert facts["gpu_error"] == f"{tmp_path / 'nvidia-smi'}: no answer within 1 seconds"
    call = "--query-gpu=" + nvidia_smi.GPU_FIELDS
    assert gone(tmp_path / "calls" / call) and gone(tmp_path / "calls" / f"{call}.child")


def slow_python(folder: Path, monkeypatch: Any, seconds: int = 3) -> str:
    """A python3.12 first on PATH that notes it was asked (its pid in `folder`/asked-python), then answers after
    `seconds`."""
    (folder / "bin").mkdir()
    script = folder / "bin" / "python3.12"
    script.write_text(f'#!/bin/sh\necho $$ > "{folder}/asked-python"\nsleep {seconds}\necho 3.12\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder / 'bin'}:/usr/bin:/bin")
    return str(script)


def test_the_calls_start_before_the_rest_is_read_and_answer_after(tmp_path: Path, monkeypatch: Any) -> None:
    """main() reads the model directory first (hashing it may take minutes: the GPUs are read after it, as fresh as
    before), then starts every nvidia-smi and Python call, gathers Ansible's facts while they run, and reads their
    answers."""
    python = slow_python(tmp_path, monkeypatch)
    calls = tmp_path / "calls"
    seen: dict[str, Any] = {}

    def facts_meanwhile(_module: Any, subsets: list[str]) -> dict[str, Any]:
        for _ in range(50):  # a started process may take a moment to note it
            if len(list(calls.iterdir())) == 3 and (tmp_path / "asked-python").exists():
                break
            time.sleep(0.1)
        seen["running while facts were gathered"] = sorted(path.name for path in calls.iterdir())
        seen["python unanswered"] = Path("/proc", (tmp_path / "asked-python").read_text().strip()).exists()
        return {"ansible_subsets": subsets}

    monkeypatch.setattr(module, "ansible_facts", facts_meanwhile)
    monkeypatch.setattr(
        module, "model_facts", lambda *_: seen.update({"started while the model was read": list(calls.iterdir())})
    )
    monkeypatch.setattr(module, "PROC_GPUS", str(tmp_path / "no-proc"))
    fake = SimpleNamespace(
        params={
            "nvidia_smi": waiting_nvidia_smi(tmp_path),
            "gather_subset": ["min"],
            "model": {
                "path": "/srv/models/m",
                "sha256": {},
                "user": "",
                "group": "",
                "verified_file": "",
                "link": "",
                "tokenizer_paths": [],
            },
            "group_models": [],
            "pythons": ["python9"],
        },
        exit_json=lambda **result: seen.update(result),
    )
    monkeypatch.setattr("ansible.module_utils.basic.AnsibleModule", lambda **_: fake)
    sglang_host_facts.main()
    assert seen["started while the model was read"] == [], "no call started before the model directory was read"
    assert seen["running while facts were gathered"] == sorted(
        ["--query-gpu=" + nvidia_smi.GPU_FIELDS, "--query-compute-apps=" + nvidia_smi.APP_FIELDS, "-q"]
    ), "each nvidia-smi call started before Ansible's facts"
    assert seen["python unanswered"], "and the Python asked before, its answer read after"
    host = seen["ansible_facts"]["sglang_host"]
    assert seen["ansible_facts"]["ansible_subsets"] == ["min"]
    assert host["gpu_error"] is None and [gpu["device"] for gpu in host["gpus"]] == ["/dev/nvidia0"]
    assert host["python_versions"]["python3.12"] == host["python_versions"][python] == "3.12", "answered after"
    assert host["python_errors"] == {"python9": "not found"}


def test_calls_left_unread_are_ended_with_what_they_started(tmp_path: Path, monkeypatch: Any) -> None:
    """A module that fails between starting its calls and reading them leaves nothing running on the host."""
    slow_python(tmp_path, monkeypatch, seconds=60)
    with pytest.raises(RuntimeError), module.Gathering(waiting_nvidia_smi(tmp_path, hang_gpus=True), str(tmp_path / "no-proc")):
        for _ in range(50):
            if (tmp_path / "calls" / ("--query-gpu=" + nvidia_smi.GPU_FIELDS + ".child")).exists():
                break
            time.sleep(0.1)
        raise RuntimeError("the model directory could not be read")
    call = "--query-gpu=" + nvidia_smi.GPU_FIELDS
    assert gone(tmp_path / "calls" / call) and gone(tmp_path / "calls" / f"{call}.child")
    assert gone(tmp_path / "asked-python"), "the Python asked is ended too"


def test_the_real_driver_answers_side_by_side_as_one_after_the_other() -> None:
    """Recorded on an H200 (tests/hardware/host_facts_side_by_side.py): the three calls started at once, as gather()
    starts them on a host without /proc entries, and the same calls in turn."""
    recording = json.loads((RECORDING / "host-facts-side-by-side.json").read_text())
    side_by_side, in_turn = recording["answers"]["side_by_side"], recording["answers"]["one_after_the_other"]
    assert side_by_side == in_turn
    assert side_by_side["errors"] == {"query_gpu": None, "query_compute_apps": None, "q_x": None}
    assert side_by_side["xml_minors"] == {side_by_side["gpus"][0]["uuid"]: 0}
    assert recording["gather"]["gpu_error"] is None and recording["gather"]["gpus"][0]["device"] == "/dev/nvidia0"
