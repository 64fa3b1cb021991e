"""The nvidia-smi stand-in and the GPU-hog helper, held to a real driver's recordings."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from xml.etree import ElementTree

import pytest
from ansible_collections.sglang.fleet.plugins.module_utils import nvidia_smi as host_nvidia_smi

from sglang_simulator.gpus import Inventory, load_inventory, visible_gpus

from .simkit import Env, run_sim

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "recordings" / "h200-driver-580.159.04"
FIELDS_DATA = ROOT / "simulator" / "src" / "sglang_simulator" / "data" / "nvidia-smi-580.159.04-fields.json"
H200_UUID = "GPU-44f393d0-11d7-63e7-90fc-6f04b5c785e9"  # the GPU of the *-with-torch recordings
H200_BUS = "00000000:00:06.0"
TORCH_PID, TORCH_MIB = 431, 2566  # the process of the *-with-torch recordings
# The -q -x elements sglang-fleet reads (host facts) or the simulator README promises.
XML_PATHS = {
    "nvidia_smi_log/driver_version",
    "nvidia_smi_log/cuda_version",
    "nvidia_smi_log/attached_gpus",
    "nvidia_smi_log/gpu",
    "nvidia_smi_log/gpu/product_name",
    "nvidia_smi_log/gpu/uuid",
    "nvidia_smi_log/gpu/minor_number",
    "nvidia_smi_log/gpu/pci/pci_bus_id",
    "nvidia_smi_log/gpu/fb_memory_usage/total",
    "nvidia_smi_log/gpu/fb_memory_usage/used",
    "nvidia_smi_log/gpu/fb_memory_usage/free",
    "nvidia_smi_log/gpu/processes/process_info/pid",
    "nvidia_smi_log/gpu/processes/process_info/process_name",
    "nvidia_smi_log/gpu/processes/process_info/used_memory",
}


def smi(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return run_sim("sglang_simulator.nvidia_smi", list(args), env.environ())


def recorded(name: str) -> tuple[str, int | None]:
    """A recorded output and the exit code the recording appends as `rc=N` (None when it has none)."""
    text = (RECORDING / name).read_text()
    match = re.search(r"(?m)^rc=(\d+)\n\Z", text)
    return (text[: match.start()], int(match.group(1))) if match else (text, None)


@pytest.fixture
def h200_env(sim_env: Env) -> Env:
    """The stand-in shaped like the recorded machine: one H200, driver 580.159.04."""
    gpu = {
        "index": 0,
        "name": "NVIDIA H200",
        "memory_total_mib": 143771,
        "uuid": H200_UUID,
        "pci_bus_id": H200_BUS,
    }
    sim_env.gpus_file.write_text(
        json.dumps({"driver_version": "580.159.04", "cuda_version": "13.0", "gpus": [gpu]})
    )
    return sim_env


@contextmanager
def hog(env: Env, gpus: str, mib: int) -> Iterator[int]:
    """A live process holding `mib` MiB on `gpus` (as the recording's torch process did); yields its pid."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang_simulator.gpu_hog", "--gpus", gpus, "--mib", str(mib)],
        env=env.environ(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None and "holds" in proc.stderr.readline()
        yield proc.pid
    finally:
        proc.terminate()
        proc.wait()


def test_query_gpu_formats(sim_env: Env) -> None:
    fields = "index,name,uuid,memory.total,memory.used,memory.free,driver_version,pci.bus_id,count"
    out = smi(sim_env, f"--query-gpu={fields}", "--format=csv")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[0] == (
        "index, name, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
        "driver_version, pci.bus_id, count"
    )
    assert lines[1].startswith("0, NVIDIA B200, GPU-5e1a0000-0000-4000-8000-000000000000, 183359 MiB, 0 MiB")
    assert lines[1].endswith(", 580.95.05, 00000000:18:00.0, 2")
    bare = smi(sim_env, "--query-gpu=memory.total", "--format=csv,noheader,nounits")
    assert bare.stdout.splitlines() == ["183359", "183359"]
    one = smi(sim_env, "-i", "1", "--query-gpu", "index,uuid", "--format", "csv,noheader")
    assert one.stdout.splitlines() == ["1, GPU-5e1a0000-0000-4000-8000-000000000001"]


def test_list_table_and_errors(sim_env: Env) -> None:
    listed = smi(sim_env, "-L").stdout.splitlines()
    assert listed[0] == "GPU 0: NVIDIA B200 (UUID: GPU-5e1a0000-0000-4000-8000-000000000000)"
    table = smi(sim_env).stdout
    assert "Driver Version: 580.95.05" in table and "No running processes found" in table
    bad = smi(sim_env, "--bogus")
    assert bad.returncode == 2 and "Invalid combination of input arguments" in bad.stdout
    field = smi(sim_env, "--query-gpu=temperature.bogus", "--format=csv")
    assert (
        field.returncode == 2 and 'Field "temperature.bogus" is not a valid field to query.' in field.stdout
    )
    missing = run_sim("sglang_simulator.nvidia_smi", [], sim_env.environ(SGLANG_SIM_GPUS_FILE="/nonexistent"))
    assert missing.returncode == 9 and "couldn't communicate with the NVIDIA driver" in missing.stdout


def test_gpu_hog_shows_in_compute_apps(sim_env: Env) -> None:
    hog = subprocess.Popen(
        [sys.executable, "-m", "sglang_simulator.gpu_hog", "--gpus", "1", "--mib", "4096"],
        env=sim_env.environ(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert hog.stderr is not None and "holds 4096 MiB" in hog.stderr.readline()
        apps = smi(sim_env, "--query-compute-apps=pid,gpu_uuid,used_memory,process_name", "--format=csv")
        assert apps.stdout.splitlines() == [
            "pid, gpu_uuid, used_gpu_memory [MiB], process_name",
            f"{hog.pid}, GPU-5e1a0000-0000-4000-8000-000000000001, 4096 MiB, python3",
        ]
        used = smi(sim_env, "--query-gpu=memory.used", "--format=csv,noheader,nounits")
        assert used.stdout.splitlines() == ["0", "4096"]
    finally:
        hog.send_signal(signal.SIGKILL)  # an orphan that dies hard leaves a stale record
        hog.wait()
    assert (sim_env.state_dir / f"gpu-{hog.pid}.json").exists()
    apps = smi(sim_env, "--query-compute-apps=pid,used_memory", "--format=csv,noheader")
    assert apps.stdout == ""  # dead pids are ignored


def test_visible_gpus_follow_cuda_rules(sim_env: Env) -> None:
    inventory: Inventory = load_inventory(sim_env.gpus_file)
    assert [g.index for g in visible_gpus(inventory, None)] == [0, 1]
    assert [g.index for g in visible_gpus(inventory, "1")] == [1]
    assert [g.index for g in visible_gpus(inventory, "0,9,1")] == [0]
    assert visible_gpus(inventory, "GPU-5e1a0000-0000-4000-8000-000000000001")[0].index == 1


def test_fields_data_is_generated_from_the_recorded_help(tmp_path: Path) -> None:
    out = tmp_path / "fields.json"
    tool = ROOT / "simulator" / "tools" / "extract_nvidia_smi_fields.py"
    subprocess.run([sys.executable, str(tool), str(RECORDING), "--output", str(out)], check=True)
    assert out.read_bytes() == FIELDS_DATA.read_bytes()  # regenerate with the tool, never edit by hand
    data = json.loads(out.read_text())
    help_gpu = (RECORDING / "help-query-gpu.txt").read_text()
    assert len(data["query_gpu"]) == len(re.findall(r'(?m)^"[^"\s]+"(?: or "[^"\s]+")*$', help_gpu))
    assert ["uuid", "gpu_uuid"] in data["query_gpu"] and ["memory.total"] in data["query_gpu"]
    assert ["used_gpu_memory", "used_memory"] in data["query_compute_apps"]
    assert not any("minor_number" in names for names in data["query_gpu"] + data["query_compute_apps"])


def test_every_recorded_field_and_alias_is_accepted(h200_env: Env) -> None:
    data = json.loads(FIELDS_DATA.read_text())
    for kind, switch in (("query_gpu", "--query-gpu"), ("query_compute_apps", "--query-compute-apps")):
        names = [name for names in data[kind] for name in names]
        out = smi(h200_env, f"{switch}={','.join(names)}", "--format=csv")
        assert out.returncode == 0, out.stdout
        header = out.stdout.splitlines()[0].split(", ")
        assert len(header) == len(names)
        # The header shows a field's first name, whichever alias was asked for.
        assert [h.split(" [")[0] for h in header] == [ns[0] for ns in data[kind] for _ in ns]
    row = smi(h200_env, "--query-gpu=fan.speed,gpu_uuid,ecc.mode.current", "--format=csv,noheader").stdout
    assert row == f"[N/A], {H200_UUID}, [N/A]\n"  # what the driver prints for values it does not report


@pytest.mark.parametrize(
    ("recording", "switch"),
    [("unknown-field.txt", "--query-gpu"), ("unknown-app-field.txt", "--query-compute-apps")],
)
def test_unknown_field_is_refused_byte_for_byte(h200_env: Env, recording: str, switch: str) -> None:
    text, code = recorded(recording)
    match = re.match(r'Field "([^"]+)"', text)
    assert match
    out = smi(h200_env, f"{switch}={match.group(1)}", "--format=csv,noheader,nounits")
    assert (out.stdout, out.stderr, out.returncode) == (text, "", code)


def test_minor_number_is_refused_as_the_real_driver_does(h200_env: Env) -> None:
    text, code = recorded("unknown-field.txt")
    expected = text.replace('"bogus_field"', '"minor_number"')
    old_query = "index,uuid,name,memory.total,memory.used,driver_version,minor_number"  # what broke preflight
    out = smi(h200_env, f"--query-gpu={old_query}", "--format=csv,noheader,nounits")
    assert (out.stdout, out.stderr, out.returncode) == (expected, "", code)


def test_queries_answer_like_the_recording(h200_env: Env) -> None:
    with hog(h200_env, "0", TORCH_MIB) as pid:
        header_csv, _ = recorded("compute-apps-with-torch-header.csv")
        apps = smi(h200_env, "--query-compute-apps=pid,gpu_uuid,used_memory,process_name", "--format=csv")
        assert apps.stdout == header_csv.replace(str(TORCH_PID), str(pid), 1)
        bare_csv, code = recorded("compute-apps-with-torch.csv")
        fields = f"--query-compute-apps={host_nvidia_smi.APP_FIELDS}"
        bare = smi(h200_env, fields, "--format=csv,noheader,nounits")
        assert (bare.stdout, bare.returncode) == (bare_csv.replace(str(TORCH_PID), str(pid), 1), code)
        gpus_csv, _ = recorded("query-gpu-with-torch.csv")
        gpus = smi(h200_env, f"--query-gpu={host_nvidia_smi.GPU_FIELDS}", "--format=csv,noheader,nounits")
        # The real driver also counts its own context (2575 MiB used for a 2566 MiB process).
        assert gpus.stdout == gpus_csv.replace(", 2575,", f", {TORCH_MIB},")


def xml_paths(root: ElementTree.Element) -> list[str]:
    """Every element path of an XML tree, in document order, each once."""
    out: list[str] = []

    def walk(el: ElementTree.Element, prefix: str) -> None:
        path = f"{prefix}/{el.tag}" if prefix else el.tag
        if path not in out:
            out.append(path)
        for child in el:
            walk(child, path)

    walk(root, "")
    return out


def skeleton(text: str, keep: set[str]) -> list[str]:
    """The -q -x lines of the element paths in `keep`, values blanked: layout, order, indentation."""
    stack: list[str] = []
    out: list[str] = []
    for line in text.splitlines():
        leaf = re.fullmatch(r"(\t*)<(\w+)([^>]*)>.*</\2>", line)
        opening = re.fullmatch(r"(\t*)<(\w+)([^>/]*)>", line)
        closing = re.fullmatch(r"(\t*)</(\w+)>", line)
        if leaf:
            if "/".join([*stack, leaf.group(2)]) in keep:
                out.append(f"{leaf.group(1)}<{leaf.group(2)}{leaf.group(3)}>…</{leaf.group(2)}>")
        elif opening:
            stack.append(opening.group(2))
            if "/".join(stack) in keep:
                out.append(line)
        elif closing:
            if "/".join(stack) in keep:
                out.append(line)
            stack.pop()
        elif not stack or "/".join(stack) in keep:
            out.append(line)  # the declaration, the DOCTYPE, blank lines, <mig_devices>' text
    return out


@pytest.mark.parametrize("recording", ["nvidia-smi-q.xml", "nvidia-smi-q-with-torch.xml"])
def test_xml_follows_the_recorded_structure(h200_env: Env, recording: str) -> None:
    real, _ = recorded(recording)
    real_paths = xml_paths(ElementTree.fromstring(real))
    assert {p for p in XML_PATHS if "torch" in recording or "process_info" not in p} <= set(real_paths)
    with hog(h200_env, "0", TORCH_MIB) if "torch" in recording else _nothing() as _pid:
        out = smi(h200_env, "-q", "-x")
    assert out.returncode == 0
    ours = xml_paths(ElementTree.fromstring(out.stdout))
    wanted = [p for p in real_paths if p in XML_PATHS]
    assert [p for p in ours if p in XML_PATHS] == wanted  # every path sglang-fleet reads, in the real order
    assert [p for p in real_paths if p in ours] == ours  # nothing invented, the real element order
    # Same lines for those elements: declaration, DOCTYPE, tabs, empty elements, the blank line after </gpu>.
    assert skeleton(out.stdout, set(ours)) == skeleton(real, set(ours))
    assert host_nvidia_smi.parse_xml_minors(out.stdout) == {H200_UUID: 0}


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def test_xml_minor_number_comes_from_the_gpu_file(sim_env: Env) -> None:
    raw = json.loads(sim_env.gpus_file.read_text())
    raw["gpus"][0]["minor_number"] = 4  # device nodes need not follow the indexes
    sim_env.gpus_file.write_text(json.dumps(raw))
    root = ElementTree.fromstring(smi(sim_env, "-q", "-x").stdout)
    minors = {gpu.findtext("uuid"): gpu.findtext("minor_number") for gpu in root.iter("gpu")}
    assert minors == {
        "GPU-5e1a0000-0000-4000-8000-000000000000": "4",
        "GPU-5e1a0000-0000-4000-8000-000000000001": "1",
    }
    assert root.findtext("attached_gpus") == "2"
    assert [g.get("id") for g in root.iter("gpu")] == ["00000000:18:00.0", "00000000:28:00.0"]
    one = ElementTree.fromstring(smi(sim_env, "-q", "-x", "-i", "1").stdout)
    assert [g.findtext("minor_number") for g in one.iter("gpu")] == ["1"]
    assert one.findtext("attached_gpus") == "2"
    assert "Minor Number                          : 4" in smi(sim_env, "-q").stdout
    assert smi(sim_env, "-x").returncode == 2


def boxes(line: str) -> list[int]:
    return [i for i, c in enumerate(line) if c in "|+"]


def masked(line: str) -> str:
    """A table line with its numbers (and the padding before them) blanked."""
    return re.sub(r" *\d+(?:\.\d+)*", "#", line)


@pytest.mark.parametrize("recording", ["nvidia-smi.txt", "nvidia-smi-with-torch.txt"])
def test_table_follows_the_recorded_layout(h200_env: Env, recording: str) -> None:
    real, _ = recorded(recording)
    with hog(h200_env, "0", TORCH_MIB) if "torch" in recording else _nothing() as _pid:
        ours = smi(h200_env).stdout
    real_lines, our_lines = real.splitlines(), ours.splitlines()
    assert len(our_lines) == len(real_lines)
    stamp = r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} {7}"
    assert re.fullmatch(stamp, real_lines[0]) and re.fullmatch(stamp, our_lines[0])
    for mine, theirs in zip(our_lines[1:], real_lines[1:], strict=True):
        assert boxes(mine) == boxes(theirs), mine
        assert masked(mine) == masked(theirs), mine


ESCAPED = ["GPU-1", "a & b < c > d", 'say "x"', "it's", "both \" and '", "line\nbreak\ttab\r", ""]


@pytest.mark.parametrize("text", ESCAPED)
def test_the_xml_is_escaped_as_xml_sax_saxutils_escapes_it(text: str) -> None:
    """The stand-in's own escape and quoteattr (importing saxutils' would double the time of a call)."""
    from xml.sax import saxutils

    from sglang_simulator import nvidia_smi

    assert nvidia_smi.escape(text) == saxutils.escape(text)
    assert nvidia_smi.quoteattr(text) == saxutils.quoteattr(text)
