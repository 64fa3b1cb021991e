#!/usr/bin/python
"""Ansible module: restart SGLang instances one batch at a time, verify each, roll back a failed one."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_rollout
short_description: Restarts SGLang instances in batches, verifies each, and rolls a failed one back
description:
  - For each batch of instances (in order), takes them out of every router that routes to them (the host's router and
    the fleet's gateways, when given), restarts their units, waits for C(/health_generate), then verifies each, puts
    them back into those routers, and goes on to the next batch.
  - Verification reads C(/server_info) (the speculative algorithm and settings SGLang resolved; NEXTN is
    reported as EAGLE), sends one probe generation that must return tokens, and, with speculative decoding
    on, requires C(avg_spec_accept_length) above a minimum.
  - On a failed start, a readiness timeout or a verification mismatch, restores the instance's last verified
    unit, environment file and key file (the copies its C(files.last_good) names), restarts it, confirms it is ready
    again, puts it back into the router, stops the rollout (later instances are not touched) and fails with the reason and the
    journal tail of the failed start.
  - An instance whose new files differ from its last verified ones only in a revision of the same model and layout
    (module_utils/in_place.py) is not restarted - its new weights are loaded with C(/update_weights_from_disk) and
    verified the same way; on failure the previous revision is loaded back (or, failing that, restored and restarted).
    Check mode tells such instances apart (C(would_update_in_place)).
  - With C(stop=true) it only stops the instances (each taken out of the router and drained first); a reshape
    stops the instances it displaces before any instance restarts on their GPUs.
options:
  instances:
    description: >-
      Instances to restart, each C({name, unit, url, speculative, files}) as planned; C(files.last_good) pairs each of
      its files with the copy kept once it passed verification, which a rollback restores.
    type: list
    elements: dict
    required: true
  stop:
    description: Stop the instances (drained from the router first) instead of restarting them.
    type: bool
    default: false
  drain:
    description: >-
      With C(stop=true), wait for each instance's running requests to finish also where no router is given here (the
      instances left their gateways elsewhere first: playbooks/remove.yml).
    type: bool
    default: false
  leave:
    description: >-
      Only take the instances out of the routers given (by the URL each knows them by), and stop nothing: run on a
      gateway's host by playbooks/remove.yml, before the leaving host drains and stops its instances.
    type: bool
    default: false
  nodes:
    description: >-
      For the nodes of instances that span hosts (each planned with C(nodes)), the same task on every node: C(start)
      restarts all the given instances at once, waits for them and verifies them (rank 0 over HTTP, another rank by its
      unit and C(/health)), and reports a failure in C(failed_instance) instead of failing or rolling back (the next task decides
      for every node of the instance); C(keep) keeps their files as verified; C(roll_back) restores their last verified
      files and restarts them all at once, waited for. Empty - the rollout above.
    type: str
    default: ""
    choices: ["", start, keep, roll_back]
  batch:
    description: Instances restarted at once.
    type: int
    default: 1
  later:
    description: >-
      This host's instances of later waves of a fleet rollout (C(sglang_rollout_max_unavailable)): not restarted by this
      call; when it fails, their last verified files are put back as for its own instances not attempted.
    type: list
    elements: dict
    default: []
  planned:
    description: >-
      In check mode, the instance files this run would change (C(planned) of the sglang_instance_files action that
      writes them), each with its content (null for a private file, the environment or key file): with them and the
      model directories on the host the result tells which instances a real run would update in place. Ignored
      otherwise.
    type: dict
    default: {}
  canary_seconds:
    description: >-
      With more than 0, each instance of this call is a canary: once verified and back in its routers, the rollout watches
      it for this many seconds (a probe generation every C(interval) seconds, to it and to C(canary_peers), the instances
      of its model not yet rolled) and compares it with them; a regression beyond C(canary_max_regression) rolls it back
      and fails.
    type: float
    default: 0
  canary_max_regression:
    description: >-
      The regression a canary may show, as a fraction: its C(avg_spec_accept_length) (C(/server_info)) below the peers'
      mean by more than this, or its mean time to first token over the watch (C(sglang:time_to_first_token_seconds) of
      C(/metrics), where both sides served requests) above the peers' by more than this, fails it; so does any failed
      probe generation.
    type: float
    default: 0.2
  canary_peers:
    description: For each served model, the URLs of its instances not yet rolled, which a canary is compared with.
    type: dict
    default: {}
  halted:
    description: >-
      Why the fleet's rollout stopped before this call (another host's failure in an earlier wave): nothing restarts; the
      instances' (and C(later)'s) last verified files are put back and the module fails with this reason.
    type: str
    default: ""
  router_url:
    description: The host's sglang-router; empty when there is none.
    type: str
    default: ""
  router_admin_key:
    description: The router's admin key (its C(/workers) registry; never logged).
    type: str
    default: ""
  router_keys_file:
    description: >-
      The router's keys file (JSON, read by its launcher at start); its admin key is the one the running router holds,
      tried before C(router_admin_key).
    type: path
    default: ""
  gateways:
    description: >-
      The fleet gateways that route to these instances, each C({host, url, admin_key, keys_file, worker_url, ca_file}) - the
      gateway's inventory host, its URL as this host reaches it, its admin key (never logged), its keys file when it
      runs on this host (else empty), and which of an instance's URLs it knows the worker by (C(url) on its own host,
      C(remote_url) on another).
    type: list
    elements: dict
    default: []
    suboptions:
      host:
        description: The gateway's inventory host.
        type: str
        default: ""
      url:
        description: The gateway's URL, as this host reaches it.
        type: str
        required: true
      admin_key:
        description: The gateway's admin key (its C(/workers) registry); never logged.
        type: str
        default: ""
      keys_file:
        description: The gateway's keys file when it runs on this host, else empty.
        type: str
        default: ""
      worker_url:
        description: Which of an instance's URLs the gateway knows the worker by.
        type: str
        default: url
        choices: [url, remote_url]
      ca_file:
        description:
          - The CA file (PEM) on this host that a gateway over TLS (an C(https://) I(url)) is verified with (the
            fleet's CA, C(sglang_gateway_tls_ca)); empty - the system's CAs. A key never goes to another host's
            gateway over plain C(http://).
        type: str
        default: ""
  drain_timeout:
    description: Seconds to wait, after taking an instance out of the router, for its running requests to finish.
    type: float
    default: 60
  timeout:
    description: Seconds to wait for readiness after each restart.
    type: int
    default: 900
  interval:
    description: Seconds between readiness polls.
    type: float
    default: 2
  probe_tokens:
    description: Tokens the probe generation asks for (SGLang updates the accept length every 40 decode steps).
    type: int
    default: 256
  min_accept_length:
    description: Lowest acceptable C(avg_spec_accept_length) with speculative decoding on.
    type: float
    default: 1.0
  journal_lines:
    description: Journal lines in the failure message.
    type: int
    default: 40
  api_key:
    description: The servers' API key, which the router's workers expect (never logged).
    type: str
    default: ""
  ca_file:
    description:
      - The CA file (PEM) on this host that instances over TLS (C(https://) URLs, C(sglang_server_tls_cert)) are
        verified with (C(sglang_server_tls_ca)); empty - the system's CAs.
    type: str
    default: ""
author: sglang-fleet maintainers (@sglang-fleet)
"""

EXAMPLES = r"""
- name: Roll the changed instances
  sglang.fleet.sglang_rollout:
    instances: "{{ changed_instances }}"
    router_url: http://127.0.0.1:30100
"""

RETURN = r"""
stopped:
  description: With C(stop=true), the names of the instances stopped, in order.
  returned: when stop is true
  type: list
left:
  description: With C(leave=true), the names of the instances taken out of the routers (none when no router answered).
  returned: when leave is true
  type: list
restarted:
  description:
    - Names of the instances restarted and verified, in order, each with seconds to ready, its verification, the
      rollout's own seconds from the restart to verified (C(stop_to_verified_seconds)) and SGLang's start-up figures
      from its metrics (C(startup) - C(total), C(weight_load), C(kv_cache_allocation), C(cuda_graph), C(scheduler),
      C(weight_update); empty without C(--enable-metrics)).
  returned: always
  type: dict
failed_instance:
  description:
    - The instance that failed to start, to become ready or its verification (then C(reason), C(journal)), in a failed
      rollout or, with C(nodes=start), in a node's result (which does not fail; the next task decides).
  returned: when an instance failed
  type: str
kept:
  description: With C(nodes=keep), the instances whose files were kept as verified.
  returned: when nodes is keep
  type: list
rollback:
  description: With C(nodes=roll_back) (or a failed rollout), what each instance's rollback did.
  returned: when rolled back
  type: dict
would_restart:
  description: In check mode, the names of the instances a real run would restart.
  returned: in check mode, without leave or stop
  type: list
would_update_in_place:
  description: >-
    In check mode, the names of the instances a real run would update in place (module_utils/in_place.py: a new
    revision of the same model and layout, already on the host).
  returned: in check mode, without leave or stop
  type: list
would_restart_or_update_in_place:
  description: >-
    In check mode, the names of the instances whose new revision is not on the host yet (the run sends it): a real run
    updates them in place or restarts them, decided once the files are there.
  returned: in check mode, without leave or stop
  type: list
would_leave:
  description: In check mode with C(leave=true), the names of the instances a real run would take out of the routers.
  returned: in check mode, when leave is true
  type: list
would_stop:
  description: In check mode with C(stop=true), the names of the instances a real run would stop.
  returned: in check mode, when stop is true
  type: list
reason:
  description: Why the failed instance failed (its start, its verification, the canary's regression).
  returned: when an instance failed
  type: str
journal:
  description: The failed instance's journal since its restart (C(journal_lines) lines at most).
  returned: when an instance failed
  type: str
failed_at:
  description: When the failure was noticed (seconds since the epoch, the host's clock).
  returned: when a rollout failed
  type: float
not_attempted:
  description:
    - The instances not restarted after a failure (or, with C(halted), none restarted); their last verified files are
      put back on disk.
  returned: when a rollout failed or was halted
  type: list
"""

import functools
import json
import os
import subprocess
import time
import urllib.error
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils import (
    in_place,
    listeners,
    safe_write,
    sglang_router_client,
    startup_metrics,
)
from ansible_collections.sglang.fleet.plugins.module_utils.role_decisions import utc_seconds
from ansible_collections.sglang.fleet.plugins.module_utils.sglang_readiness import http_json, http_status, journal_tail, wait

ACCEPT_LENGTH_WAIT = 15.0


class RolloutError(Exception):
    """An instance failed to start, to become ready, or its verification."""


class LoadedBack(RolloutError):
    """An in-place update failed and the previous revision was loaded back in place: no restart to roll back."""

    def __init__(self, message: str, instance: str, outcome: str) -> None:
        super().__init__(message)
        self.instance, self.outcome = instance, outcome


def metrics_text(url: str, ca_file: str = "") -> str | None:
    """The server's Prometheus metrics (None without --enable-metrics, or when it does not answer); over https verified
    against `ca_file`."""
    try:
        with listeners.open_url(f"{url.rstrip('/')}/metrics", (), 10, ca_file=ca_file) as response:
            return str(response.read().decode())
    except (urllib.error.URLError, OSError):
        return None


def metric_sum(text: str | None, name: str) -> float | None:
    """The sum of a metric's samples over its labels (None when the text has none)."""
    values = [
        float(line.rsplit(" ", 1)[1]) for line in (text or "").splitlines() if line.split("{", 1)[0].split(" ", 1)[0] == name
    ]
    return sum(values) if values else None


def running_requests(url: str, ca_file: str = "") -> float | None:
    """Requests the server is working on, from its Prometheus metrics (None without --enable-metrics)."""
    return metric_sum(metrics_text(url, ca_file), "sglang:num_running_reqs")


def settle_files(instance: dict[str, Any]) -> None:
    """After an in-place update: the verified set's files dated just before the process start, so that later deploys
    read the running process as running them (role_decisions.server_units counts an instance stale when one of its
    files changed after its process started) instead of restarting it once more."""
    shown = subprocess.run(
        ["systemctl", "show", "--timestamp=us+utc", "--property=ExecMainStartTimestamp", "--value", instance["unit"]],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    started = utc_seconds(shown)
    if started is None:
        return
    for current, _copy in instance["files"]["last_good"]:
        if os.path.isfile(current) and not os.path.islink(current):
            os.utime(current, (started - 1, started - 1), follow_symlinks=False)


@dataclass
class Host:
    """What the rollout does on the machine; replaced by fakes in tests."""

    systemctl: Callable[..., Any] = lambda *args: subprocess.run(["systemctl", *args], check=True, capture_output=True)
    wait_ready: Callable[..., dict[str, Any]] = wait
    get_json: Callable[..., Any] = http_json
    journal: Callable[..., str] = journal_tail
    now: Callable[[], float] = time.time
    routers: list[Any] = field(default_factory=list)
    running: Callable[[str], float | None] = running_requests
    metrics: Callable[[str], str | None] = metrics_text
    settle: Callable[[dict[str, Any]], None] = settle_files
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    log: list[str] = field(default_factory=list)


def expected_speculative(instance: dict[str, Any]) -> dict[str, Any]:
    """The settings /server_info must report for the instance (keys as SGLang names them)."""
    speculative = instance.get("speculative") or {}
    expected: dict[str, Any] = {"speculative_algorithm": speculative.get("reported_algorithm")}
    for key in ("num_steps", "eagle_topk", "num_draft_tokens"):
        if speculative.get(key) is not None:
            expected[f"speculative_{key}"] = speculative[key]
    return expected


def verify(host: Host, instance: dict[str, Any], probe_tokens: int, min_accept: float) -> str:
    """Checks what the running server resolved and that it generates; returns a one-line summary."""
    if not instance.get("serves_http", True):
        # A node of rank other than 0 of an instance across hosts: SGLang serves only /health there, once its
        # schedulers joined rank 0 (what the wait for readiness saw, with its unit running); rank 0 is verified.
        return f"node rank {instance.get('node_rank')}: unit running, joined rank 0"
    url = instance["url"].rstrip("/")
    info = host.get_json(f"{url}/server_info")
    for key, value in expected_speculative(instance).items():
        if info.get(key) != value:
            raise RolloutError(f"{instance['name']}: /server_info reports {key}={info.get(key)!r}, expected {value!r}")
    probe = {
        "text": "sglang-fleet rollout probe:",
        "sampling_params": {"max_new_tokens": probe_tokens, "temperature": 0, "ignore_eos": True},
    }
    answer = host.get_json(f"{url}/generate", probe)
    tokens = int(((answer or {}).get("meta_info") or {}).get("completion_tokens") or 0)
    if tokens < 1:
        raise RolloutError(f"{instance['name']}: the probe generation returned no tokens")
    if not (instance.get("speculative") or {}).get("reported_algorithm"):
        return f"{tokens} tokens"
    deadline = host.clock() + ACCEPT_LENGTH_WAIT
    while True:
        states = host.get_json(f"{url}/server_info").get("internal_states") or [{}]
        accept = states[0].get("avg_spec_accept_length")
        if accept is not None:
            break
        if host.clock() >= deadline:
            raise RolloutError(
                f"{instance['name']}: speculative decoding did not engage (no avg_spec_accept_length after a probe)"
            )
        host.sleep(1.0)
    if float(accept) <= min_accept:
        raise RolloutError(
            f"{instance['name']}: avg_spec_accept_length {accept} is not above {min_accept}: speculative decoding does not help"
        )
    return f"{tokens} tokens, accept length {float(accept):.2f}"


def startup_figures(host: Host, instance: dict[str, Any], stop_to_verified: float) -> dict[str, Any]:
    """The rollout's own time from the restart to verified, and SGLang's start-up figures from the instance's metrics
    (module_utils/startup_metrics.py; `startup` is {} without --enable-metrics)."""
    text = host.metrics(instance["url"])
    return {
        "stop_to_verified_seconds": round(stop_to_verified, 2),
        "startup": startup_metrics.startup(text) if text else {},
    }


def update_in_place(host: Host, instance: dict[str, Any], params: dict[str, Any], done: dict[str, Any]) -> bool:
    """A new revision of the same model, layout and settings (module_utils/in_place.py), out of the routers already:
    loaded with /update_weights_from_disk, verified (the revision as weight_version, the probe, the accept length),
    the new files kept as verified, back into the routers; True. On a refusal or a failed verification, the previous
    revision is loaded back the same way and its files restored: the instance keeps serving it and the rollout fails
    (RolloutError). False when the change needs a restart, or the server is gone (then the restart, and its rollback
    on failure, take over: the unit's files name the new revision)."""
    change = in_place.in_place_revision(instance)
    if change is None:
        return False
    url = instance["url"].rstrip("/")
    started = host.now()
    try:
        host.get_json(f"{url}/update_weights_from_disk", {"model_path": change["to"], "weight_version": change["weight_version"]})
    except Exception as error:
        if not alive(host, url):
            host.log.append(f"{instance['name']}: in-place update lost the server ({error}); restarting it")
            return False
        restore(instance)  # SGLang refused before it loaded anything: the previous revision still serves
        host.systemctl("daemon-reload")
        rejoin_routers(host, instance)
        outcome = f"refused, nothing loaded; {change['from']} still serves and its files are restored"
        message = f"{instance['name']}: /update_weights_from_disk refused {change['to']}: {error}"
        raise LoadedBack(message, instance["name"], outcome) from error
    try:
        reported = (host.get_json(f"{url}/model_info") or {}).get("weight_version")
        if reported != change["weight_version"]:
            raise RolloutError(
                f"{instance['name']}: /model_info reports weight_version {reported!r}, expected {change['weight_version']!r}"
            )
        summary = verify(host, instance, params["probe_tokens"], params["min_accept_length"])
    except Exception as error:
        back = load_back(host, instance, url, change)
        message = f"{instance['name']}: the in-place update to {change['to']} failed verification ({error}); {back}"
        if back.startswith("loaded back"):
            raise LoadedBack(message, instance["name"], back) from error
        raise RolloutError(message) from error
    host.systemctl("daemon-reload")
    rejoin_routers(host, instance)
    save_last_good(instance)
    host.settle(instance)
    done[instance["name"]] = {
        "in_place": True,
        "weight_version": change["weight_version"],
        "verified": summary,
        "update_to_verified_seconds": round(host.now() - started, 2),
        "startup": startup_metrics.startup(host.metrics(instance["url"]) or ""),
    }
    return True


def alive(host: Host, url: str) -> bool:
    try:
        host.get_json(f"{url}/model_info")
    except Exception:
        return False
    return True


def load_back(host: Host, instance: dict[str, Any], url: str, change: dict[str, str]) -> str:
    """The previous revision loaded back in place and its files restored (the instance keeps serving it, out of the
    routers until the next deploy); what was done, as a clause."""
    previous = change["from"].rstrip("/").rsplit("/", 1)[-1]
    try:
        host.get_json(f"{url}/update_weights_from_disk", {"model_path": change["from"], "weight_version": previous})
        reported = (host.get_json(f"{url}/model_info") or {}).get("weight_version")
        if reported != previous:
            raise RolloutError(f"/model_info reports weight_version {reported!r}, expected {previous!r}")
        restore(instance)
        host.systemctl("daemon-reload")
        rejoin_routers(host, instance)
    except Exception as error:
        return f"loading back {change['from']} failed too ({error}); the rollback restarts it"
    return f"loaded back {change['from']} in place (weight_version {previous}) and restored its files"


def accept_length(host: Host, url: str) -> float | None:
    """The server's average speculative accept length (/server_info), None without one or when it does not answer."""
    try:
        states = (host.get_json(f"{url.rstrip('/')}/server_info") or {}).get("internal_states") or [{}]
        value = states[0].get("avg_spec_accept_length")
    except Exception:
        return None
    return None if value is None else float(value)


def ttft_totals(host: Host, url: str) -> tuple[float, float] | None:
    """(sum, count) of the server's time-to-first-token histogram (/metrics, with --enable-metrics)."""
    text = host.metrics(url)
    total, count = (
        metric_sum(text, "sglang:time_to_first_token_seconds_sum"),
        metric_sum(text, "sglang:time_to_first_token_seconds_count"),
    )
    return None if total is None or count is None else (total, count)


def mean_ttft(readings: list[tuple[tuple[float, float] | None, tuple[float, float] | None]]) -> float | None:
    """Mean time to first token of the requests served between two readings (before, after) of some servers (None
    without any)."""
    pairs = [(b, a) for b, a in readings if b is not None and a is not None]
    count = sum(a[1] - b[1] for b, a in pairs)
    return sum(a[0] - b[0] for b, a in pairs) / count if count > 0 else None


def answers(host: Host, url: str, probe: dict[str, Any]) -> bool:
    """Whether a probe generation at the server returns tokens."""
    try:
        answer = host.get_json(f"{url.rstrip('/')}/generate", probe)
    except Exception:
        return False
    return int(((answer or {}).get("meta_info") or {}).get("completion_tokens") or 0) >= 1


def canary_watch(host: Host, batch: list[dict[str, Any]], params: dict[str, Any], verified: dict[str, str]) -> dict[str, str]:
    """Watches the verified, routed canaries for canary_seconds against their models' instances not yet rolled
    (canary_peers): probe errors, accept length, time to first token. Returns why each canary that regressed beyond
    canary_max_regression did (its summary in `verified` gets the figures of those that did not)."""
    seconds, allowed = float(params["canary_seconds"]), float(params["canary_max_regression"])
    peers = {i["name"]: list((params.get("canary_peers") or {}).get(i.get("served_model_name") or "") or []) for i in batch}
    urls = list(dict.fromkeys([i["url"] for i in batch] + [url for found in peers.values() for url in found]))
    before = {url: ttft_totals(host, url) for url in urls}
    probes = dict.fromkeys(verified, 0)
    errors = dict.fromkeys(verified, 0)
    probe = {
        "text": "sglang-fleet canary probe:",
        "sampling_params": {"max_new_tokens": params["probe_tokens"], "temperature": 0},
    }
    deadline = host.clock() + seconds
    while host.clock() < deadline:
        for instance in batch:
            probes[instance["name"]] += 1
            if not answers(host, instance["url"], probe):
                errors[instance["name"]] += 1
        # The peers get the same probes: their figures cover the same requests (and a peer that served none since it
        # started has an accept length to compare with). Their errors are not the canary's.
        for url in urls[len(batch) :]:
            answers(host, url, probe)
        host.sleep(max(0.0, min(float(params["interval"]), deadline - host.clock())))
    after = {url: ttft_totals(host, url) for url in urls}
    regressed = {}
    for instance in batch:
        name, own = instance["name"], [instance["url"]]
        reasons, figures = [], [f"{probes[name] - errors[name]}/{probes[name]} probes answered"]
        if errors[name]:
            reasons.append(f"{errors[name]} of {probes[name]} probe generations failed")
        accepts = [value for value in (accept_length(host, url) for url in peers[name]) if value is not None]
        mine = accept_length(host, instance["url"])
        if mine is not None and accepts:
            peer = sum(accepts) / len(accepts)
            figures.append(f"accept length {mine:.2f} vs {peer:.2f}")
            if mine < peer * (1 - allowed):
                reasons.append(f"avg_spec_accept_length {mine:.2f} is more than {allowed:.0%} below the peers' {peer:.2f}")
        ttft = mean_ttft([(before[url], after[url]) for url in own])
        peer_ttft = mean_ttft([(before[url], after[url]) for url in peers[name]])
        if ttft is not None and peer_ttft is not None:
            figures.append(f"TTFT {ttft:.3f} s vs {peer_ttft:.3f} s")
            if ttft > peer_ttft * (1 + allowed):
                reasons.append(
                    f"mean time to first token {ttft:.3f} s is more than {allowed:.0%} above the peers' {peer_ttft:.3f} s"
                )
        if reasons:
            regressed[name] = (
                f"{name}: the canary regressed over {seconds:g} s against {len(peers[name])} peer(s), its model's instances "
                "not yet rolled: " + "; ".join(reasons)
            )
        else:
            verified[name] += f"; canary {seconds:g} s: " + ", ".join(figures)
    return regressed


def save_last_good(instance: dict[str, Any]) -> None:
    """Keeps a copy of the files a verified instance runs with, to roll back to (owner and mode kept).

    The files are the planned [file, last verified copy] pairs (module_utils/instance_files.py): unit, environment
    file and key file (SGLang's --config with the API key), so a failed key change rolls back to the previous key.
    """
    for current, last_good in instance["files"]["last_good"]:
        os.makedirs(os.path.dirname(last_good), mode=0o750, exist_ok=True)
        if os.path.lexists(current):
            safe_write.copy_file(current, last_good)
        elif os.path.lexists(last_good):
            os.unlink(last_good)


def restore(instance: dict[str, Any]) -> list[str]:
    """Puts the instance's last verified files back, removing one the verified set did not have.

    Returns what was restored or removed; nothing when the instance was never verified (the unit comes first: a
    verified set exists when its copy does).
    """
    files = instance["files"]["last_good"]
    if not os.path.exists(files[0][1]):
        return []
    restored = []
    for current, last_good in files:
        if os.path.lexists(last_good):
            safe_write.copy_file(last_good, current)
            restored.append(current)
        elif os.path.exists(current):
            os.unlink(current)
            restored.append(f"{current} (removed)")
    return restored


def start_and_check(host: Host, batch: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, float]:
    host.systemctl("daemon-reload")
    for instance in batch:
        host.systemctl("restart", instance["unit"])
    result = host.wait_ready(batch, "/health_generate", params["timeout"], params["interval"])
    if "failed" in result:
        raise RolloutError(f"{result['failed']}: {result['reason']}")
    return dict(result["ready"])


def roll_back(host: Host, instance: dict[str, Any], params: dict[str, Any]) -> str:
    restored = restore(instance)
    if not restored:
        return "no verified configuration to restore (the instance never passed verification); it is left as it is"
    # Waited for and put back at the URLs of what it restored (plain http where the failed switch was to https).
    back = in_place.as_verified(instance)
    local_only = downgraded(instance, back)
    try:
        # It may be back in some routers already (a gateway's rejoin failed after its host's router took it back).
        leave_routers(host, instance, params["drain_timeout"])
        start_and_check(host, [back], params)
        rejoin_routers(host, back, local_only=local_only)
    except Exception as error:
        return f"restored {', '.join(restored)} but it did not come back: {error}"
    return f"restored {', '.join(restored)}; the previous configuration is serving again" + (LEFT_OUT if local_only else "")


def rollout(host: Host, instances: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    """Restarts and verifies batch after batch; on a failure rolls that instance back and stops."""
    done: dict[str, Any] = {}
    size = max(1, int(params["batch"]))
    for start in range(0, len(instances), size):
        batch = instances[start : start + size]
        current = batch[0]
        started = host.now()
        try:
            for instance in batch:
                current = instance
                # The routers know it by the URL it runs at: its last verified files' (http before TLS turns on).
                leave_routers(host, in_place.as_verified(instance), params["drain_timeout"])
            updated = [instance for instance in batch if update_in_place(host, instance, params, done)]
            batch = [instance for instance in batch if instance not in updated]
            current = batch[0] if batch else current
            stopped_at = host.now()
            ready = start_and_check(host, batch, params) if batch else {}
            noticed_at = host.now()
            verified, verified_at = {}, {}
            for instance in batch:
                current = instance
                verified[instance["name"]] = verify(host, instance, params["probe_tokens"], params["min_accept_length"])
                verified_at[instance["name"]] = host.now()
                rejoin_routers(host, instance)
            regressed = canary_watch(host, batch, params, verified) if float(params.get("canary_seconds") or 0) > 0 else {}
            for instance in batch:
                if instance["name"] in regressed:
                    continue
                save_last_good(instance)
                done[instance["name"]] = {
                    "ready_seconds": ready.get(instance["unit"]),
                    "noticed_at": noticed_at,
                    "verified": verified[instance["name"]],
                    **startup_figures(host, instance, verified_at[instance["name"]] - stopped_at),
                }
            for instance in batch:
                if instance["name"] in regressed:
                    current = instance
                    raise RolloutError(regressed[instance["name"]])
        except Exception as error:
            failed_at = host.now()
            journal = host.journal(current["unit"], params["journal_lines"], since=started - 1)
            outcomes = {
                instance["name"]: error.outcome
                if isinstance(error, LoadedBack) and error.instance == instance["name"]
                else roll_back(host, instance, params)
                for instance in batch
                if instance["name"] not in done
            }
            later = [*instances[start + size :], *params.get("later", [])]
            untouched = [instance["name"] for instance in later]
            # Their processes still run the last verified files: put those back on disk too, so a crash does not
            # restart them into an unverified configuration. The next deploy writes and rolls them again.
            restore_all(host, later)
            return {
                "restarted": done,
                # Not `failed`: fail_json sets that key to true, and the instance's name would be lost.
                "failed_instance": current["name"],
                "failed_at": failed_at,
                "reason": str(error),
                "journal": journal,
                "rollback": outcomes,
                "not_attempted": untouched,
            }
    return {"restarted": done}


def restore_all(host: Host, instances: list[dict[str, Any]]) -> None:
    """Puts back the last verified files of instances left running their previous files; one reload if any changed.
    Every one of them restored (a list, not any()'s short cut)."""
    restored = [restore(instance) for instance in instances]
    if any(restored):
        host.systemctl("daemon-reload")


def start_nodes(host: Host, instances: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    """This node's part of instances that span hosts, restarted on every node by the same task: all at once (SGLang's
    rank 0 waits for the other ranks at the rendezvous, so no node waits for another's restart), waited for and
    verified; a failure is returned, not rolled back here: every node of the instance rolls back together."""
    done: dict[str, Any] = {}
    current = instances[0]
    started = host.now()
    try:
        for instance in instances:
            current = instance
            leave_routers(host, in_place.as_verified(instance), params["drain_timeout"])
        current = instances[0]
        ready = start_and_check(host, instances, params)
        for instance in instances:
            current = instance
            summary = verify(host, instance, params["probe_tokens"], params["min_accept_length"])
            done[instance["name"]] = {"ready_seconds": ready.get(instance["unit"]), "verified": summary}
    except Exception as error:
        # Not `failed`: Ansible reads that key of a module's result as the task's failure.
        return {
            "restarted": done,
            "failed_instance": current["name"],
            "reason": str(error),
            "journal": host.journal(current["unit"], params["journal_lines"], since=started - 1),
        }
    return {"restarted": done}


def keep_nodes(host: Host, instances: list[dict[str, Any]]) -> list[str]:
    """Every node of the instances passed: their files become the verified ones, and rank 0 serves its routers again."""
    for instance in instances:
        save_last_good(instance)
        rejoin_routers(host, instance)
    return [instance["name"] for instance in instances]


def roll_back_nodes(host: Host, instances: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, str]:
    """A node of the instances failed: every node restores its last verified files and restarts at once, waited for."""
    restored = {instance["name"]: restore(instance) for instance in instances}
    # At the URLs of what they restored (plain http where the failed switch was to https).
    back = [in_place.as_verified(instance) for instance in instances if restored[instance["name"]]]
    planned = {instance["name"]: instance for instance in instances}
    local_only = {instance["name"]: downgraded(planned[instance["name"]], instance) for instance in back}
    outcomes = {
        name: "no verified configuration to restore (the instance never passed verification); it is left as it is"
        for name, files in restored.items()
        if not files
    }
    if back:
        try:
            start_and_check(host, back, params)
            for instance in back:
                rejoin_routers(host, instance, local_only=local_only[instance["name"]])
            outcomes.update(
                {
                    i["name"]: f"restored {', '.join(restored[i['name']])}; serving again"
                    + (LEFT_OUT if local_only[i["name"]] else "")
                    for i in back
                }
            )
        except Exception as error:
            outcomes.update(
                {i["name"]: f"restored {', '.join(restored[i['name']])} but it did not come back: {error}" for i in back}
            )
    return outcomes


def stop(host: Host, instances: list[dict[str, Any]], params: dict[str, Any]) -> list[str]:
    """Takes each instance out of every router, lets it finish its requests, and stops its unit."""
    stopped = []
    for instance in instances:
        running = in_place.as_verified(instance)
        leave_routers(host, running, params["drain_timeout"])
        if params.get("drain") and not host.routers:
            drain(host, running, params["drain_timeout"])
        host.systemctl("stop", instance["unit"])
        stopped.append(instance["name"])
    return stopped


class Router:
    """A sglang-router (the host's, or a fleet gateway): workers leave rotation before a restart and rejoin after
    verification.

    `api_key` is the key the running router accepts on /workers (its admin key); `worker_api_key` the key the workers
    now expect (the client key, `sglang_api_key`, which may have changed in this run: the router is restarted with it
    after its workers); `worker_url` the instance's URL the router knows the worker by (`url`, or `remote_url` for a
    gateway on another host).
    """

    def __init__(
        self,
        url: str,
        api_key: str = "",
        worker_api_key: str = "",
        timeout: float = 120.0,
        worker_url: str = "url",
        ca_file: str = "",
    ) -> None:
        self.url, self.api_key, self.worker_api_key, self.timeout = url, api_key, worker_api_key, timeout
        self.worker_url, self.ca_file = worker_url, ca_file

    def remove(self, worker_url: str) -> None:
        sglang_router_client.remove_worker(self.url, worker_url, timeout=30, api_key=self.api_key, ca_file=self.ca_file)

    def add(self, worker_url: str, model_id: str = "") -> None:
        sglang_router_client.add_worker(
            self.url,
            worker_url,
            timeout=self.timeout,
            api_key=self.api_key,
            worker_api_key=self.worker_api_key,
            replace=True,
            model_id=model_id,
            ca_file=self.ca_file,
        )


# Routers deployed by sglang-fleet before the launcher took their one key (--api-key, which also unlocked /workers)
# from this environment file beside the keys file; the rollout runs before the router role replaces it.
LEGACY_ROUTER_ENV = "router.env"


def legacy_router_key(path: str) -> str:
    """SGLANG_API_KEY of an environment file as sglang-fleet wrote it (KEY=value, the value maybe quoted); "" if none."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return ""
    for line in lines:
        if line.startswith("SGLANG_API_KEY="):
            value = line.split("=", 1)[1]
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            return value
    return ""


def router_keys(keys_file: str, admin_key: str, api_key: str = "") -> list[str]:
    """The keys that may unlock the running router's /workers, most likely first.

    The rollout runs before the router role rewrites the router's files, so the admin key in the router's keys file
    (0600, JSON, read by its launcher at start) is the one the running router holds; then the admin key of this run
    (a keys file written by a run that stopped before restarting the router may hold a key the router does not); the
    key of a router an earlier sglang-fleet started (router.env: its one --api-key also unlocked /workers); then the
    client key; then no key at all (a router without keys).
    """
    candidates = []
    if keys_file:
        try:
            with open(keys_file, encoding="utf-8") as handle:
                held = json.load(handle)
            candidates.append(str(held.get("admin_key") or "") if isinstance(held, dict) else "")
        except (OSError, ValueError):
            pass
        candidates.append(legacy_router_key(os.path.join(os.path.dirname(keys_file), LEGACY_ROUTER_ENV)))
    candidates += [admin_key, api_key]
    keys = list(dict.fromkeys(key for key in candidates if key))
    return keys or [""]


def router_for(
    url: str, control_keys: list[str], worker_api_key: str = "", worker_url: str = "url", ca_file: str = ""
) -> Router | None:
    """The router at `url`, managed with the first of `control_keys` it accepts on /workers; None when nothing
    answers there (not deployed yet: nothing to take out of rotation).

    A router that answers but refuses every key (401/403) is an error: it still routes to the workers, so skipping
    the drain would cut requests.
    """
    refused: int | None = None
    for key in control_keys or [""]:
        try:
            sglang_router_client.list_workers(url, api_key=key, ca_file=ca_file)
        except sglang_router_client.RouterError as error:
            if error.status in (401, 403):
                refused = error.status
                continue
            if error.status is not None:
                raise RolloutError(f"the router at {url} answered HTTP {error.status}: {error}") from error
            return None
        return Router(url, key, worker_api_key, worker_url=worker_url, ca_file=ca_file)
    raise RolloutError(
        f"the router at {url} refuses the fleet's admin key on /workers (HTTP {refused}); it would keep routing to "
        "workers that restart: check its admin key (sglang_router_admin_key for a host's router, "
        "sglang_gateway_admin_key for a fleet gateway) against the key the running router was started with (the "
        "admin key in its keys file, /etc/sglang-router/router.json or gateway.json), or restart it (systemctl "
        "restart sglang-router or sglang-gateway: it reads that file again) and deploy again"
    )


def leave_routers(host: Host, instance: dict[str, Any], timeout: float) -> None:
    """Takes the instance out of every router that routes to it (when there is one) and lets it finish its requests."""
    if not instance.get("serves_http", True):
        return
    for router in host.routers:
        router.remove(instance[router.worker_url])
    if host.routers:
        drain(host, instance, timeout)


def rejoin_routers(host: Host, instance: dict[str, Any], local_only: bool = False) -> None:
    """Puts a verified instance back into every router that routes to it; with `local_only`, only those that reach it
    on its own host's loopback (not the fleet gateways that know it by its `remote_url`, across the network: those on
    other hosts, and a gateway of a mesh on its own host)."""
    if not instance.get("serves_http", True):
        return
    for router in host.routers:
        if local_only and router.worker_url == "remote_url":
            continue
        router.add(instance[router.worker_url], instance.get("served_model_name") or "")


def downgraded(planned: Mapping[str, Any], back: Mapping[str, Any]) -> bool:
    """Whether a rollback put back on plain http an instance the failed run switched to https: the fleet gateways that
    reach it by its `remote_url` would send it their key (where they have one, which preflight then requires https for)
    and users' prompts across the network in the clear, so they do not take it back and the rollout's failure says so;
    the next deploy that serves it over https adds it back."""
    return str(planned.get("remote_url") or "").startswith("https://") and not str(back.get("remote_url") or "").startswith(
        "https://"
    )


LEFT_OUT = (
    "; the fleet gateways that reach it across the network (by its remote URL) do not take it back over plain http: "
    "the next deploy that serves it over https adds it back"
)


def drain(host: Host, instance: dict[str, Any], timeout: float) -> None:
    """After leaving the router: wait until the server finished its requests (stopping cuts them)."""
    deadline = host.clock() + timeout
    while host.clock() < deadline:
        running = host.running(instance["url"])
        if not running:
            return
        host.sleep(0.5)


ARGUMENT_SPEC: dict[str, Any] = {
    "instances": {"type": "list", "elements": "dict", "required": True},
    "stop": {"type": "bool", "default": False},
    "leave": {"type": "bool", "default": False},
    "drain": {"type": "bool", "default": False},
    "nodes": {"type": "str", "default": "", "choices": ["", "start", "keep", "roll_back"]},
    "batch": {"type": "int", "default": 1},
    "later": {"type": "list", "elements": "dict", "default": []},
    "planned": {"type": "dict", "default": {}},
    "canary_seconds": {"type": "float", "default": 0.0},
    "canary_max_regression": {"type": "float", "default": 0.2},
    "canary_peers": {"type": "dict", "default": {}},
    "halted": {"type": "str", "default": ""},
    "router_url": {"type": "str", "default": ""},
    "router_admin_key": {"type": "str", "default": "", "no_log": True},
    "router_keys_file": {"type": "path", "default": ""},
    "gateways": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {
            "host": {"type": "str", "default": ""},
            "url": {"type": "str", "required": True},
            "admin_key": {"type": "str", "default": "", "no_log": True},
            "keys_file": {"type": "str", "default": ""},
            "worker_url": {"type": "str", "default": "url", "choices": ["url", "remote_url"]},
            "ca_file": {"type": "str", "default": ""},
        },
    },
    "drain_timeout": {"type": "float", "default": 60.0},
    "timeout": {"type": "int", "default": 900},
    "interval": {"type": "float", "default": 2.0},
    "probe_tokens": {"type": "int", "default": 256, "no_log": False},  # a count of tokens, no secret
    "min_accept_length": {"type": "float", "default": 1.0},
    "journal_lines": {"type": "int", "default": 40},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "ca_file": {"type": "str", "default": ""},
}


def check_mode_plans(params: dict[str, Any]) -> dict[str, Any]:
    """What a real run would do with each instance, by in_place.check_mode_plan (instances across hosts restart on
    every node: never in place), as the result's would_* lists and a diff line per instance."""
    plans = {
        instance["name"]: in_place.check_mode_plan(instance, params["planned"]) if not params["nodes"] else in_place.RESTART
        for instance in params["instances"]
    }
    return {
        "would_restart": [name for name, plan in plans.items() if plan == in_place.RESTART],
        "would_update_in_place": [name for name, plan in plans.items() if plan == in_place.IN_PLACE],
        "would_restart_or_update_in_place": [name for name, plan in plans.items() if plan == in_place.UNDECIDED],
        **({"diff": {"prepared": "".join(f"{name}: {plan}\n" for name, plan in plans.items())}} if plans else {}),
    }


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    params = module.params
    names = [instance["name"] for instance in params["instances"]]
    if module.check_mode or not names:
        if params["leave"]:
            module.exit_json(changed=bool(names), left=[], would_leave=names)
        if params["stop"]:
            module.exit_json(changed=bool(names), stopped=[], would_stop=names)
        module.exit_json(changed=bool(names), restarted={}, **check_mode_plans(params))
    if params["halted"].strip():
        later = [*params["instances"], *params["later"]]
        restore_all(Host(), later)
        module.fail_json(
            msg=f"Rollout stopped before {', '.join(names)}: {params['halted'].strip()}",
            changed=False,
            restarted={},
            not_attempted=[instance["name"] for instance in later],
        )
    wanted = [{"url": params["router_url"], "admin_key": params["router_admin_key"], "keys_file": params["router_keys_file"]}]
    routers = []
    try:
        for spec in [*wanted, *params["gateways"]]:
            if not spec.get("url"):
                continue
            router = router_for(
                str(spec["url"]),
                router_keys(str(spec.get("keys_file") or ""), str(spec.get("admin_key") or ""), params["api_key"]),
                params["api_key"],
                str(spec.get("worker_url") or "url"),
                str(spec.get("ca_file") or ""),
            )
            if router:
                routers.append(router)
            elif spec in params["gateways"]:
                # Not started yet (the run that adds it starts it after the servers), or not reachable from here.
                module.warn(f"the gateway at {spec['url']} did not answer: these instances restart without leaving it")
    except (RolloutError, listeners.ListenerError) as error:
        module.fail_json(msg=f"Rollout not started: {error}", changed=False, restarted={}, not_attempted=names)
    # The instances over https (sglang_server_tls_cert) verified against their CA on this host (sglang_server_tls_ca).
    ca_file = params["ca_file"]
    host = Host(
        get_json=functools.partial(http_json, api_key=params["api_key"], ca_file=ca_file),
        wait_ready=functools.partial(wait, status=functools.partial(http_status, ca_file=ca_file)),
        running=functools.partial(running_requests, ca_file=ca_file),
        metrics=functools.partial(metrics_text, ca_file=ca_file),
        routers=routers,
    )
    if params["leave"]:
        for instance in params["instances"]:
            for router in routers:
                router.remove(instance[router.worker_url])
        module.exit_json(changed=bool(routers), left=names if routers else [])
    if params["stop"]:
        module.exit_json(changed=True, stopped=stop(host, params["instances"], params))
    if params["nodes"] == "start":
        module.exit_json(changed=True, **start_nodes(host, params["instances"], params))
    if params["nodes"] == "keep":
        module.exit_json(changed=True, restarted={}, kept=keep_nodes(host, params["instances"]))
    if params["nodes"] == "roll_back":
        module.exit_json(changed=True, restarted={}, rollback=roll_back_nodes(host, params["instances"], params))
    result = rollout(host, params["instances"], params)
    if "failed_instance" in result:
        rollback = "; ".join(f"{name}: {outcome}" for name, outcome in result["rollback"].items())
        module.fail_json(
            msg=(
                f"Rollout stopped at {result['failed_instance']}: {result['reason']}. Rollback: {rollback}. "
                f"Not attempted: {', '.join(result['not_attempted']) or 'none'}. "
                f"Journal of the failed start:\n{result['journal']}"
            ),
            changed=True,
            **result,
        )
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
