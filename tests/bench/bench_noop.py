"""Benchmark of a converged fleet's no-op deploy on the sandbox (prints figures; not a test). Run by `make bench`.

Measured in one run, each the median of five, every one through the command line an operator types (`setup`, the no-op
and `--check --diff` in turn, five times: a noisy minute of the shared machine weighs on all three alike):
- `ansible -m setup` on both hosts (fact gathering alone: the floor any playbook pays),
- a no-op `ansible-playbook deploy.yml` (must report changed=0) and `--check --diff`, as ratios to that floor,
- the no-op deploy of b200 alone with 1 instance against the same host with its 7: the cost per instance (b200 is
  deployed with one instance first, then back with its seven, and each shape is timed once converged),
- the sandbox's stand-in nvidia-smi against the real driver's recorded answer time (what the probe's call costs here
  and on a real host),
- the templates Ansible compiles during one no-op deploy (see COUNT_TEMPLATES: jinja2's public `Environment.compile`
  wrapped in the benchmark's own ansible-playbook process, whose workers inherit it; each call appends a byte to a file,
  so the workers' calls are counted too). The product installs no such hook.
`--templates` prints the count alone; `--profile` which tasks (file:line, the innermost task on the compiling stack) and
which templates compile most during one no-op.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleet import ROOT, SANDBOX_INVENTORY, on_host, overlay_inventory

ROUNDS = 5
RECAP = re.compile(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)


def seconds(action: Callable[[], None]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def setup() -> None:
    subprocess.run(
        [str(ROOT / ".venv/bin/ansible"), "sglang_servers", "-m", "ansible.builtin.setup"],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip


def deploy(*options: str, inventory: Path = SANDBOX_INVENTORY, converged: bool = True) -> None:
    """`ansible-playbook deploy.yml` with `options`; a converged host must report changed=0 (in the recap)."""
    run = subprocess.run(
        [str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inventory), "deploy.yml", *options],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    recap = RECAP.findall(run.stdout)
    if run.returncode != 0 or not recap or (converged and any(changed != "0" for _, changed, _, _ in recap)):
        raise RuntimeError(f"not a no-op: rc={run.returncode}, recap={recap}\n{run.stdout[-3000:]}{run.stderr[-2000:]}")


# ansible-playbook as its console script runs it, with jinja2.Environment.compile counting its calls: every template and
# conditional Ansible compiles goes through it (in the controller and in every worker it forks, which inherit the hook).
COUNT_TEMPLATES = """
import functools, os, runpy, sys
import jinja2
counter, script = sys.argv[1], sys.argv[2]
compile_template = jinja2.Environment.compile
@functools.wraps(compile_template)
def counted(*args, **kwargs):
    descriptor = os.open(counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, b"1")
    finally:
        os.close(descriptor)
    return compile_template(*args, **kwargs)
jinja2.Environment.compile = counted
sys.argv = sys.argv[2:]
runpy.run_path(script, run_name="__main__")
"""

# The same, recording for each compile the task compiling it (the innermost caller's `task` or `self._task` with a
# `get_path()`, as `file:line`) and the template's first 160 characters, one JSON line each (a profile, not a count).
PROFILE_TEMPLATES = COUNT_TEMPLATES.replace(
    'os.write(descriptor, b"1")',
    'os.write(descriptor, (json.dumps([compiling_task(), str(args[1] if len(args) > 1 else kwargs.get("source"))[:160]])'
    ' + "\\n").encode())',
).replace(
    "import functools, os, runpy, sys",
    """import functools, json, os, runpy, sys
def compiling_task():
    frame = sys._getframe(2)
    while frame is not None:
        for name in ("task", "self"):
            found = frame.f_locals.get(name)
            found = getattr(found, "_task", found) if name == "self" else found
            path = getattr(found, "get_path", None)
            if callable(path):
                try:
                    return str(path())
                except Exception:
                    pass
        frame = frame.f_back
    return "?"
""",
)


def compiles(hook: str, *options: str) -> bytes:
    """What `hook` (COUNT_TEMPLATES or PROFILE_TEMPLATES) wrote during one `ansible-playbook deploy.yml` with `options`
    (a no-op: changed=0)."""
    with tempfile.TemporaryDirectory(prefix="sglang-fleet-bench-") as directory:
        counter = Path(directory) / "compiled"
        run = subprocess.run(
            [str(ROOT / ".venv/bin/python"), "-c", hook, str(counter), str(ROOT / ".venv/bin/ansible-playbook"),
             "-i", str(SANDBOX_INVENTORY), "deploy.yml", *options],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        recap = RECAP.findall(run.stdout)
        if run.returncode != 0 or not recap or any(changed != "0" for _, changed, _, _ in recap):
            raise RuntimeError(f"not a no-op: rc={run.returncode}, recap={recap}\n{run.stdout[-3000:]}{run.stderr[-2000:]}")
        return counter.read_bytes() if counter.exists() else b""


def templates_compiled(*options: str) -> int:
    """How many templates Ansible compiles during one `ansible-playbook deploy.yml` with `options` (a no-op: changed=0)."""
    return len(compiles(COUNT_TEMPLATES, *options))


def template_profile(*options: str, top: int = 40) -> None:
    """Prints the tasks (file:line) that compile the most templates in one no-op, and the templates compiled most."""
    import json
    from collections import Counter

    records = [json.loads(line) for line in compiles(PROFILE_TEMPLATES, *options).decode().splitlines()]
    root = f"{ROOT}/"
    by_task = Counter(task.replace(root, "") for task, _source in records)
    by_source = Counter(source.replace("\n", " ") for _task, source in records)
    print(f"templates compiled during the no-op: {len(records)}; by task ({len(by_task)} tasks):")
    for task, count in by_task.most_common(top):
        print(f"{count:5d}  {task}")
    print(f"by template ({len(by_source)} distinct):")
    for source, count in by_source.most_common(top):
        print(f"{count:5d}  {source[:150]}")


def median(action: Callable[[], None]) -> float:
    return statistics.median(seconds(action) for _ in range(ROUNDS))


def medians(*actions: Callable[[], None]) -> list[float]:
    """The median seconds of each of `actions`, run in turn ROUNDS times."""
    spent: list[list[float]] = [[] for _ in actions]
    for _ in range(ROUNDS):
        for times, action in zip(spent, actions, strict=True):
            times.append(seconds(action))
    return [statistics.median(times) for times in spent]


# The real driver's answer times for the calls the plan's probe makes (tests/hardware/nvidia_smi_timing.py on an H200).
REAL_SMI = ROOT / "tests/recordings/h200-driver-580.159.04/nvidia-smi-timing.json"
TIME_STANDIN_QUERY = """
import statistics, subprocess, time
def once():
    started = time.perf_counter()
    subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.total,memory.used,driver_version,pci.bus_id",
                    "--format=csv,noheader,nounits"], capture_output=True, check=True)
    return time.perf_counter() - started
print(statistics.median(once() for _ in range(9)))
"""


def smi_query_seconds() -> tuple[float, float]:
    """(the sandbox's stand-in, the real driver) answering the plan's --query-gpu, median seconds."""
    import json

    standin = float(on_host("b200", "python3", "-c", TIME_STANDIN_QUERY))
    return standin, float(json.loads(REAL_SMI.read_text())["query_gpu"]["median"])


def main() -> None:
    deploy(converged=False)  # converged first
    floor, noop, check = medians(setup, deploy, lambda: deploy("--check", "--diff"))
    with tempfile.TemporaryDirectory(prefix="sglang-fleet-bench-") as directory:
        one_instance = overlay_inventory(Path(directory), host_vars={"b200": {"sglang_instance_count": 1}})
        try:
            deploy("--limit", "b200", inventory=one_instance, converged=False)
            deploy("--limit", "b200", inventory=one_instance)  # a converged run first, untimed: the reshape has settled
            one = median(lambda: deploy("--limit", "b200", inventory=one_instance))
        finally:
            deploy("--limit", "b200", converged=False)
    deploy("--limit", "b200")
    seven = median(lambda: deploy("--limit", "b200"))
    standin, real = smi_query_seconds()
    compiled = templates_compiled()
    print(f"ansible -m setup, both hosts:        {floor:6.1f} s")
    print(f"no-op deploy.yml (changed=0):        {noop:6.1f} s  = {noop / floor:4.2f}x setup (goal <= 2.0x)")
    print(f"--check --diff (changed=0):          {check:6.1f} s  = {check / floor:4.2f}x setup")
    print(f"no-op, b200 alone with 1 instance:   {one:6.1f} s")
    print(f"no-op, b200 alone with 7 instances:  {seven:6.1f} s  = {seven / one:4.2f}x 1 instance (goal <= 1.20x)")
    print(f"templates compiled during the no-op: {compiled:5d} (goal <= 100; jinja2.Environment.compile's calls)")
    # The probe calls nvidia-smi 3 times in the sandbox (its containers have no /proc/driver/nvidia: `-q -x` gives the
    # minor numbers), twice on a real host.
    print(f"nvidia-smi --query-gpu, stand-in:    {standin * 1000:6.0f} ms (a real H200's driver: {real * 1000:.0f} ms)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--profile"]:  # which tasks and templates compile most, in a converged sandbox's no-op
        template_profile(*sys.argv[2:])
    elif sys.argv[1:2] == ["--templates"]:  # the count alone, of a converged sandbox: --templates [ansible-playbook options]
        print(f"templates compiled during the no-op: {templates_compiled(*sys.argv[2:])}")
    else:
        main()
