#!/usr/bin/python
"""Ansible module: make the router's workers the planned ones (a run that died mid-rollout leaves one out)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_router_members
short_description: Reconciles sglang-router's workers with the planned ones
description:
  - Lists the router's workers (C(GET /workers)) and compares them with I(workers).
  - A planned worker the router does not list, or lists as unhealthy, is registered (again) when the worker itself
    is ready (its I(ready_path) answers 200); one that is not ready is left out and named in C(skipped).
  - A listed worker that is not planned any more is removed (unless its URL host is one of I(keep_hosts)).
  - Changes nothing when the two agree; check mode reports what would change.
options:
  router_url:
    description: The router's base URL (loopback; C(https://) for a fleet gateway over TLS).
    type: str
    required: true
  ca_file:
    description:
      - The CA file (PEM) on the host that an C(https://) I(router_url) is verified with (the fleet's CA,
        C(sglang_gateway_tls_ca)); empty - the system's CAs.
    type: path
    default: ""
  worker_ca_file:
    description:
      - The CA file (PEM) on the host that workers over https (C(sglang_server_tls_cert)) are verified with when asked
        whether they are ready (C(sglang_server_tls_ca)); empty - the system's CAs.
    type: path
    default: ""
  workers:
    description: The planned worker URLs (the host's C(sglang_instances) urls).
    type: list
    elements: str
    required: true
  models:
    description:
      - The model each planned worker serves, by URL (its served model name), registered with it as its C(model_id);
        a listed worker registered with another model is registered again.
    type: dict
    default: {}
  workers_file:
    description:
      - "A file to keep the router's resulting workers in (JSON: C(workers), a list of C(url) and C(model_id); 0644),
        which a fleet gateway's launcher reads at start - its workers are not on its command line. Written only when it
        differs."
    type: path
  keep_hosts:
    description:
      - URL hosts whose registered workers are left as they are (a fleet gateway - the inventory's hosts outside the
        run); every other listed worker that is not planned is removed (a host dropped from the inventory, an
        address that changed).
    type: list
    elements: str
    default: []
  api_key:
    description: The key the router accepts on C(/workers) (Bearer token); empty for none.
    type: str
    default: ""
  worker_api_key:
    description: The key the workers expect (sent to them for the readiness probe and given to the router with each
      worker it registers); empty for none.
    type: str
    default: ""
  ready_path:
    description: The worker path that answers 200 once it serves (SGLang's C(/health_generate) generates a token).
    type: str
    default: /health_generate
  timeout:
    description: Seconds to wait for each registration to show as healthy.
    type: int
    default: 120
author: sglang-fleet maintainers (@sglang-fleet)
"""

EXAMPLES = r"""
- name: Reconcile the router's workers with the plan
  sglang.fleet.sglang_router_members:
    router_url: http://127.0.0.1:30100
    workers: "{{ sglang_instances | map(attribute='url') | list }}"
    api_key: "{{ sglang_router_admin_key | default(sglang_api_key) }}"
    worker_api_key: "{{ sglang_api_key }}"
"""

RETURN = r"""
workers_file_changed:
  description: Whether the workers file differed and was written (in check mode - would be).
  returned: when workers_file is given
  type: bool
added:
  description: Planned workers that were registered (again).
  returned: always
  type: list
removed:
  description: Workers the plan no longer has, unregistered.
  returned: always
  type: list
skipped:
  description: Planned workers left out because they are not ready, with the reason.
  returned: always
  type: list
"""

import urllib.error
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils import listeners, safe_write, sglang_router_client


def worker_ready(url: str, path: str, api_key: str = "", timeout: float = 30.0, ca_file: str = "") -> str | None:
    """None when the worker answers 200 on `path`, else why not. Another host's worker over plain HTTP (a fleet
    gateway's) is asked without the key, which would cross the network in the clear (SGLang's /health_generate needs
    none); a worker over https is verified against `ca_file` (sglang_server_tls_ca; "" for the system's CAs)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        # The workers' key goes only to the instance itself (a squatter on its port while it loads gets nothing).
        units = {listeners.instance_unit(url)} if api_key else ()
        try:
            response = listeners.open_url(
                url.rstrip("/") + path, units, timeout, headers=headers, this_host_only=True, ca_file=ca_file,
                variable="sglang_server_tls_cert",
            )
        except listeners.PlainHttpRefused:
            response = listeners.open_url(url.rstrip("/") + path, (), timeout, ca_file=ca_file)
        with response:
            status = int(response.status)
    except urllib.error.HTTPError as error:
        status = int(error.code)
    except (urllib.error.URLError, OSError) as error:
        return f"{path}: no answer ({error})"
    return None if status == 200 else f"{path}: HTTP {status}"


def keep_workers(path: str, listed: Sequence[Mapping[str, Any]], check_mode: bool = False) -> bool:
    """Writes the router's workers to `path` (what a router's launcher starts with) when it differs (a file that is no
    text differs); whether it did (or, in check mode, would)."""
    content = sglang_router_client.workers_file_content(listed)
    try:
        if sglang_router_client.read_text(path) == content:
            return False
    except UnicodeDecodeError:
        pass
    if not check_mode:
        # The file is in the service account's home: written without following a link that account planted.
        safe_write.write_file(path, content.encode(), 0o644)
    return True


def reconcile(
    router_url: str,
    planned: Sequence[str],
    api_key: str = "",
    worker_api_key: str = "",
    ready_path: str = "/health_generate",
    timeout: float = 120.0,
    check_mode: bool = False,
    ready: Callable[[str], str | None] | None = None,
    keep_hosts: Sequence[str] = (),
    models: Mapping[str, str] | None = None,
    workers_file: str | None = None,
    ca_file: str = "",
    worker_ca_file: str = "",
) -> dict[str, Any]:
    """Brings the router's workers to `planned`; returns changed, added, removed, skipped."""
    probe = ready or (lambda url: worker_ready(url, ready_path, worker_api_key, ca_file=worker_ca_file))
    listed = sglang_router_client.list_workers(router_url, api_key=api_key, ca_file=ca_file)
    models = {sglang_router_client.normalize_url(url): str(model) for url, model in (models or {}).items()}
    changes = sglang_router_client.plan_changes(listed, planned, probe, keep_hosts, models)
    if not check_mode:
        for url in changes["remove"]:
            sglang_router_client.remove_worker(router_url, url, timeout=30, api_key=api_key, ca_file=ca_file)
        for url in changes["add"]:
            # An unhealthy registration is removed first: a fresh one is routed to at once.
            sglang_router_client.add_worker(
                router_url,
                url,
                timeout=timeout,
                api_key=api_key,
                worker_api_key=worker_api_key,
                replace=True,
                model_id=models.get(url, ""),
                ca_file=ca_file,
            )
    kept = {}
    if workers_file:
        listed = sglang_router_client.list_workers(router_url, api_key=api_key, ca_file=ca_file)
        kept["workers_file_changed"] = keep_workers(workers_file, listed, check_mode)
    return {
        **kept,
        "changed": bool(changes["add"] or changes["remove"] or kept.get("workers_file_changed")),
        "added": changes["add"],
        "removed": changes["remove"],
        "skipped": changes["skipped"],
    }


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "router_url": {"type": "str", "required": True},
            "workers": {"type": "list", "elements": "str", "required": True},
            "keep_hosts": {"type": "list", "elements": "str", "default": []},
            "workers_file": {"type": "path"},
            "ca_file": {"type": "path", "default": ""},
            "worker_ca_file": {"type": "path", "default": ""},
            "models": {"type": "dict", "default": {}},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "worker_api_key": {"type": "str", "default": "", "no_log": True},
            "ready_path": {"type": "str", "default": "/health_generate"},
            "timeout": {"type": "int", "default": 120},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = reconcile(
            params["router_url"],
            params["workers"],
            api_key=params["api_key"],
            worker_api_key=params["worker_api_key"],
            ready_path=params["ready_path"],
            timeout=params["timeout"],
            check_mode=module.check_mode,
            keep_hosts=params["keep_hosts"],
            models=params["models"],
            workers_file=params["workers_file"],
            ca_file=params["ca_file"] or "",
            worker_ca_file=params["worker_ca_file"] or "",
        )
    except sglang_router_client.RouterError as error:
        if module.check_mode and error.status in (None, 401, 403):
            # Not running yet (a first deploy's check: it will start with every planned worker), or running with the
            # keys this run replaces (the real run restarts it first): nothing to compare with.
            module.warn(f"router {params['router_url']}: cannot compare its workers in check mode: {error}")
            module.exit_json(changed=False, added=[], removed=[], skipped=[], msg=f"router {params['router_url']}: {error}")
        module.fail_json(msg=f"router {params['router_url']}: {error}")
    except listeners.ListenerError as error:
        module.fail_json(msg=f"router {params['router_url']}: {error}")
    except ValueError as error:
        module.fail_json(msg=str(error))
    except OSError as error:
        module.fail_json(msg=f"router {params['router_url']}: cannot keep its workers in {params['workers_file']}: {error}")
    for skipped in result["skipped"]:
        module.warn(f"router {params['router_url']}: planned worker {skipped['url']} left out: {skipped['reason']}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
