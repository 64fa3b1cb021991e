"""Benchmark of safe rollouts on the sandbox (prints figures; not a test). Run by `make bench`.

Measures, on b200 behind its router with a bounded load of 4 clients:
- how long after a server is ready the deploy notices (readiness polling latency),
- how long after a server crashes at start the deploy fails (fail-fast latency),
- how long a rolling restart of all seven workers takes, and how many client requests failed meanwhile;
and, with the sandbox on its network (inventory/sandbox-on-network.yml), a rolling restart of all eight instances of
both hosts under load through the fleet gateway on ct129, the gateway and b200's workers over https (`python
tests/bench/bench_rollout.py gateway` alone): failed requests and the most workers out of rotation at once; then the
same with two fleet gateways in a mesh, one stopped under load, for a client that retries on the other (`python
tests/bench/bench_rollout.py mesh` runs that piece alone); and the move of a fleet from sglang-router 0.3.2 to smg by
a normal deploy, under load through b200's router (`python tests/bench/bench_rollout.py move` alone).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleet import ROOT, Run, load_through_router, on_host, overlay_inventory, run_module, run_playbook, sandbox_test_ca

ROUTER = "http://127.0.0.1:30100"
ROLL_TASK = "Roll the changed running instances, verified, rolled back on failure"
# Over https with the sandbox's test CA (inventory/sandbox-on-network.yml), as ct129 reaches it.
GATEWAY = "https://127.0.0.1:30200"
GATEWAY_KEYS = "/etc/sglang-router/gateway.json"
# The last commit of main whose fleet ran sglang-router 0.3.2 (the merge before issue 39's smg, 2054185): the move
# starts from a deploy of it. Its router's keys file (this tree's is under the router's own account).
ROUTER_0_3_2_COMMIT = "d2b295788eb748f50ff8c5b1c5bbbb2293931a6e"
ROUTER_0_3_2_KEYS = "/etc/sglang-fleet/secrets/router.json"


def journal_times(unit: str, grep: str, since: float) -> list[float]:
    output = on_host(
        "b200", "journalctl", "--unit", unit, "--output", "short-unix", "--no-pager", "--since", f"@{int(since)}", "--grep", grep
    )
    return [float(line.split()[0]) for line in output.splitlines() if line and line[0].isdigit()]


def roll_task(run: Run, host: str = "b200") -> tuple[dict[str, Any], float]:
    """The rollout module's result on `host` and the task's duration in seconds."""
    for event in run.events:
        data = event.get("event_data", {})
        if (
            data.get("task") == ROLL_TASK
            and data.get("host") == host
            and event.get("event") in ("runner_on_ok", "runner_on_failed")
        ):
            return data["res"], float(data.get("duration") or 0.0)
    raise RuntimeError(f"no rollout on {host} in this run")


def rolling_restart_under_load(environment: dict[str, str]) -> dict[str, Any]:
    started = time.time()
    with tempfile.TemporaryDirectory() as directory, load_through_router(ROUTER) as report:
        inventory = overlay_inventory(Path(directory), group_vars={"sglang_environment": environment})
        run = run_playbook("deploy.yml", inventory=inventory, limit="b200")
    if run.rc != 0:
        raise RuntimeError(run.failure_messages())
    result, duration = roll_task(run)
    noticing = []
    for name, outcome in result["restarted"].items():
        ready = journal_times(f"{name}.service", "ready to roll", started)
        if ready:
            noticing.append(outcome["noticed_at"] - ready[-1])
    startup = dict(result["restarted"])
    return {"duration": duration, "instances": len(result["restarted"]), "noticing": noticing, "startup": startup, **report}


def startup_lines(restarted: dict[str, Any]) -> list[str]:
    """Per instance: the rollout's own restart-to-verified seconds and SGLang's start-up figures (issue 42)."""
    lines = []
    for name, outcome in sorted(restarted.items()):
        figures = outcome.get("startup") or {}
        sglang = ", ".join(
            f"{label} {figures[key]:.2f} s"
            for key, label in (("total", "start-up"), ("weight_load", "weights"), ("cuda_graph", "CUDA graphs"))
            if figures.get(key) is not None
        )
        verified = outcome.get("stop_to_verified_seconds", 0.0)
        lines.append(f"    {name:14} restart -> verified {verified:.2f} s; SGLang: {sglang or '-'}")
    return lines


def both_hosts_rolled(run: Run) -> dict[str, Any]:
    """The rollouts of ct129 and b200 in `run`: their durations summed, and the instances they restarted."""
    rolls = [roll_task(run, host) for host in ("ct129", "b200")]
    return {
        "duration": sum(duration for _, duration in rolls),
        "instances": sum(len(result["restarted"]) for result, _ in rolls),
    }


def rolling_restart_through_the_gateway() -> dict[str, Any]:
    """Both hosts on the sandbox's network behind ct129's fleet gateway; every instance restarted (a changed
    environment) under load through the gateway, one host at a time; then the sandbox back on loopback. The gateway
    serves https (its test CA made here), which the load client verifies."""
    sandbox_test_ca()
    on_network = yaml.safe_load((ROOT / "inventory/sandbox-on-network.yml").read_text())
    try:
        placed = run_playbook("deploy.yml", extravars=on_network)
        if placed.rc != 0:
            raise RuntimeError(placed.failure_messages())
        with load_through_router(GATEWAY, host="ct129", keys_file=GATEWAY_KEYS) as report:
            run = run_playbook("deploy.yml", extravars={**on_network, "sglang_environment": {"SGLANG_FLEET_BENCH": "1"}})
        if run.rc != 0:
            raise RuntimeError(run.failure_messages())
    finally:
        run_playbook("deploy.yml")
    return {**both_hosts_rolled(run), **report}


def container_address(host: str) -> str:
    """A sandbox host's IP address on the sandbox's network (smg's mesh dials IP addresses only)."""
    inspect = ["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", host]
    return subprocess.run(inspect, capture_output=True, text=True, check=True).stdout.split()[0]


def rolling_restart_with_a_mesh_gateway_stopped() -> dict[str, Any]:
    """Issue 39: both hosts on the sandbox's network, each running a fleet gateway, the two in a mesh (over TLS, each
    dialled at its container's IP address); load from ct129 through both gateways by a client that retries on the
    other; b200's gateway stopped under that load, then every instance restarted (a changed environment) - the deploy
    starts b200's gateway again after the rollouts; then the sandbox back on loopback."""
    addresses = {host: container_address(host) for host in ("ct129", "b200")}
    sandbox_test_ca(*addresses.values())
    on_network = yaml.safe_load((ROOT / "inventory/sandbox-on-network.yml").read_text())
    mesh = {**on_network, "sglang_gateway_hosts": ["ct129", "b200"]}
    host_vars = {host: {"sglang_gateway_mesh_host": address} for host, address in addresses.items()}
    try:
        with tempfile.TemporaryDirectory() as directory:
            inventory = overlay_inventory(Path(directory), host_vars=host_vars)
            placed = run_playbook("deploy.yml", inventory=inventory, extravars=mesh)
            if placed.rc != 0:
                raise RuntimeError(placed.failure_messages())
            print(f"two mesh gateways deployed (changed {placed.changed_count()}): {addresses}", file=sys.stderr)
            both = f"{GATEWAY},https://b200:30200"
            with load_through_router(both, host="ct129", keys_file=GATEWAY_KEYS) as report:
                time.sleep(3)
                on_host("b200", "systemctl", "stop", "sglang-gateway.service")
                stopped = time.monotonic()
                print("b200's gateway stopped under load; the rolling restart starts", file=sys.stderr)
                run = run_playbook(
                    "deploy.yml", inventory=inventory, extravars={**mesh, "sglang_environment": {"SGLANG_FLEET_BENCH": "2"}}
                )
                after = time.monotonic() - stopped
            if run.rc != 0:
                raise RuntimeError(run.failure_messages())
    finally:
        run_playbook("deploy.yml")
    return {**both_hosts_rolled(run), "deploy_after_stop": after, **report}


def router_entry_point(host: str = "b200") -> str:
    """The module the host's router unit runs (sglang_router.launch_router: 0.3.2; smg.launch_router: smg), read from
    the launcher its unit starts (the process's own command line shows only the launcher)."""
    exec_start = on_host(host, "systemctl", "show", "--property", "ExecStart", "--value", "sglang-router.service")
    [launcher] = {word for word in exec_start.split() if word.endswith("_launcher.py")}
    [line] = [line for line in on_host(host, "cat", launcher).splitlines() if line.startswith("ENTRY_POINT = ")]
    return line.split("=", 1)[1].strip().strip('"')


def deploy_the_0_3_2_fleet(tree: Path) -> None:
    """The sandbox deployed by `ansible-playbook deploy.yml -i inventory/sandbox` from ROUTER_0_3_2_COMMIT, checked
    out from this clone's history into `tree` (a detached worktree; this tree's venv linked into it)."""
    git = ["git", "-C", str(ROOT)]
    subprocess.run([*git, "worktree", "add", "--detach", str(tree), ROUTER_0_3_2_COMMIT], capture_output=True, check=True)
    (tree / ".venv").symlink_to((ROOT / ".venv").resolve())
    environment = {**os.environ, "ANSIBLE_CONFIG": str(tree / "ansible.cfg")}
    deploy = ["ansible-playbook", "deploy.yml", "-i", "inventory/sandbox"]
    placed = subprocess.run(deploy, cwd=tree, env=environment, capture_output=True, text=True)
    if placed.returncode != 0:
        raise RuntimeError(f"the deploy of {ROUTER_0_3_2_COMMIT[:7]} failed: {placed.stdout[-4000:]}{placed.stderr[-2000:]}")


def move_from_sglang_router_0_3_2() -> dict[str, Any]:
    """Issue 39: the sandbox on sglang-router 0.3.2 (deployed from ROUTER_0_3_2_COMMIT), then this tree deployed to both
    hosts under load through b200's router: the requests that failed, of all, and the window from the first failed
    request to the last; the router's restarts. The sandbox is left deployed from this tree (again, if the move
    failed)."""
    moved = False
    with tempfile.TemporaryDirectory(prefix="bench-move-") as directory:
        tree = Path(directory) / "tree"
        try:
            deploy_the_0_3_2_fleet(tree)
            before = router_entry_point()
            if before != "sglang_router.launch_router":
                raise RuntimeError(f"{ROUTER_0_3_2_COMMIT[:7]}'s deploy left b200's router on {before}")
            print(f"the sandbox on sglang-router 0.3.2 ({ROUTER_0_3_2_COMMIT[:7]}); the move starts", file=sys.stderr)
            started = time.time()
            with load_through_router(ROUTER, keys_file=ROUTER_0_3_2_KEYS) as report:
                time.sleep(3)
                seconds, run = timed(lambda: run_playbook("deploy.yml"))
                time.sleep(3)
            if run.rc != 0:
                raise RuntimeError(run.failure_messages())
            moved = True
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
            if not moved:
                run_playbook("deploy.yml")
    after = router_entry_point()
    if after != "smg.launch_router":
        raise RuntimeError(f"the move left b200's router on {after}")
    failed_from, failed_until = report["failed_from"], report["failed_until"]
    return {
        "deploy": seconds,
        "changed": run.changed_count(),
        "router_restarts": len(journal_times("sglang-router.service", "^Started ", started)),
        "window": failed_until - failed_from if failed_from is not None else 0.0,
        **report,
    }


def crash_to_failure() -> float:
    started = time.time()
    with tempfile.TemporaryDirectory() as directory:
        inventory = overlay_inventory(
            Path(directory),
            host_vars={"b200": {"sglang_instance_overrides": {4: {"environment": {"SGLANG_SIM_FAIL_AT_START": "bench"}}}}},
        )
        run = run_playbook("deploy.yml", inventory=inventory, limit="b200")
    result, _ = roll_task(run)
    # The crash's own last line (the scheduler's exception), milliseconds before the process is gone: systemd's
    # "Main process exited" line is not always journaled before the rollout stops the unit.
    crashed = journal_times("sglang-30004.service", "RuntimeError: bench", started)
    return float(result["failed_at"]) - crashed[0]


def timed(action: Any) -> tuple[float, Run]:
    start = time.monotonic()
    run = action()
    return time.monotonic() - start, run


def noop_redeploy(runs: int = 3) -> tuple[int, list[float], list[float]]:
    """A settling deploy of both hosts (the steps before leave b200 after a failed rollout, and ct129 as another tree
    may have deployed it): its changed count; then the seconds of each no-op redeploy (each must change nothing) and
    of each `ansible -m setup` on the same hosts."""
    settling = run_playbook("deploy.yml")
    if settling.rc != 0:
        raise RuntimeError(f"the settling deploy failed: {settling.failure_messages()}")
    deploys = [timed(lambda: run_playbook("deploy.yml")) for _ in range(runs)]
    for seconds, run in deploys:
        if run.rc != 0 or run.changed_count() != 0:
            raise RuntimeError(f"a no-op redeploy changed {run.changed_count()} (rc {run.rc}, {seconds:.1f} s)")
    setups = [timed(lambda: run_module("setup"))[0] for _ in range(runs)]
    return settling.changed_count(), [seconds for seconds, _ in deploys], setups


def out_of_rotation(roll: dict[str, Any]) -> int:
    """The most workers out of rotation at once: the roll's workers (each restarted, so each was in the router) less
    the fewest the sampler saw in rotation. Every worker must have been seen in rotation at once."""
    if roll["most_in_rotation"] != roll["instances"]:
        raise RuntimeError(f"the router never had all {roll['instances']} workers in rotation: {roll}")
    return int(roll["instances"] - roll["fewest_in_rotation"])


def move_line(move: dict[str, Any]) -> str:
    return (
        f"  move from sglang-router 0.3.2 to smg (deploy of both hosts, {move['deploy']:.1f} s, changed "
        f"{move['changed']}; b200's router started {move['router_restarts']} time(s)): {move['failed']} of "
        f"{move['requests']} requests through b200's router failed, within {move['window']:.2f} s; "
        f"by error: {move['error_counts']}"
    )


def figures(values: list[float]) -> str:
    return f"median {statistics.median(values):.1f} s ({', '.join(f'{v:.1f}' for v in values)})"


def main() -> int:
    if run_playbook("deploy.yml", limit="b200").rc != 0:
        print("the sandbox does not deploy cleanly; run `make sandbox` first", file=sys.stderr)
        return 1
    first = rolling_restart_under_load({"SGLANG_SIM_TOKEN_SECONDS": "0.002"})
    back = rolling_restart_under_load({})
    crash = [crash_to_failure() for _ in range(3)]
    settled, redeploys, setups = noop_redeploy()
    fleet = rolling_restart_through_the_gateway()
    mesh = rolling_restart_with_a_mesh_gateway_stopped()
    move = move_from_sglang_router_0_3_2()
    noticing = first["noticing"] + back["noticing"]
    workers = first["instances"]
    print(f"sglang-fleet rollout benchmark (sandbox b200: {workers} simulator workers behind sglang-router, 4 clients)")
    latencies = (("server ready -> deploy notices", noticing, "restarts"), ("crash at start -> deploy fails", crash, "crashes"))
    for label, values, what in latencies:
        print(f"  {label:32} mean {statistics.mean(values):.2f} s, max {max(values):.2f} s over {len(values)} {what}")
    for label, roll in (("rolling restart (change)", first), ("rolling restart (back)  ", back)):
        print(
            f"  {label}         {roll['duration']:.1f} s for {roll['instances']} workers, "
            f"{roll['failed']} of {roll['requests']} requests failed, "
            f"{out_of_rotation(roll)} worker(s) out of rotation at most"
        )
    print("  start-up per instance (rolling restart, change):")
    for line in startup_lines(first["startup"]):
        print(line)
    print(
        f"  rolling restart through the fleet gateway over https (ct129 + b200) {fleet['duration']:.1f} s "
        f"for {fleet['instances']} "
        f"instances, {fleet['failed']} of {fleet['requests']} requests failed, "
        f"{out_of_rotation(fleet)} worker(s) out of rotation at most"
    )
    print(
        f"  rolling restart, two mesh gateways (ct129 + b200), b200's stopped under load: {mesh['duration']:.1f} s "
        f"for {mesh['instances']} instances, {mesh['failed']} of {mesh['requests']} requests failed for a client that "
        f"retries on the other gateway ({mesh['retried']} retried; failed attempts by gateway: {mesh['failed_by_router']}), "
        f"{out_of_rotation(mesh)} worker(s) out of rotation at most"
    )
    print(move_line(move))
    print(
        f"  no-op redeploy (2 hosts, changed=0 in each run; the settling deploy before changed {settled}) "
        f"{figures(redeploys)}; "
        f"ansible -m setup on the same hosts {figures(setups)}; "
        f"ratio of medians {statistics.median(redeploys) / statistics.median(setups):.1f}x"
    )
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["gateway"]:  # that piece alone (issue 38: the gateway and b200's workers over https)
        fleet = rolling_restart_through_the_gateway()
        print(
            f"{fleet['failed']} of {fleet['requests']} requests failed in {fleet['duration']:.1f} s for {fleet['instances']} "
            f"instances, {out_of_rotation(fleet)} worker(s) out of rotation at most"
        )
        sys.exit(0)
    if sys.argv[1:] == ["mesh"]:  # that piece alone (issue 39)
        print(rolling_restart_with_a_mesh_gateway_stopped())
        sys.exit(0)
    if sys.argv[1:] == ["move"]:  # that piece alone (issue 39)
        move = move_from_sglang_router_0_3_2()
        print(move_line(move))
        print(move)
        sys.exit(0)
    sys.exit(main())
