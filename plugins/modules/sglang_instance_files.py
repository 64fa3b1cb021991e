#!/usr/bin/python
"""Ansible module: write a host's instance files in one call, only those whose content or attributes differ."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_instance_files
short_description: Writes many small files in one call; only what differs changes
description:
  - Run through the action plugin of the same name, which renders every instance's templates on the control node
    and sends them here at once (a per-file template task costs a round trip per file).
  - Each file whose content differs is replaced atomically (a temporary file in its directory, renamed); owner,
    group and mode are set where they differ. Check mode changes nothing and reports the same.
  - Returns a diff (before and after) of each file whose content differs, except private ones.
options:
  files:
    description: >-
      Each C({path, owner, group, mode}) and either C(content), or C(private) (an index into C(private_contents))
      for a file that may hold secrets; C(mode) an octal string.
    type: list
    elements: dict
    default: []
  private_contents:
    description: The contents of the private files (API keys, tokens); never logged, never in a diff.
    type: list
    elements: str
    default: []
  read:
    description: >-
      What to read on the host in the same call, after the files: the options of module sglang_installed (a role that
      compares its files in preflight also compares its account and folders and reads its units there, one round trip).
    type: dict
  requests:
    description: >-
      Several callers' C({files, read}) at once, by name (deploy's one probe: every role's files compared and its reads
      made in one round trip); each is handled as C(files) and C(read) are, and answered under its name in C(answers).
      A request's C(routers), each C({url, workers, keep_hosts, models, workers_file, api_key}) with C(api_key) an index
      into C(private_contents), are compared as module sglang_router_members would (in check mode, without asking
      the workers) and answered in its C(routers) - by URL, what differs, empty when nothing does.
      The task may give instead a list of the names of the variables that hold the requests (deploy's probe,
      C(sglang_plan_probes)): the action plugin templates each variable once, answers each request under its variable's
      name, and passes the module this dict.
    type: dict
    default: {}
  facts:
    description: >-
      The options of module sglang_host_facts: gathers what that module gathers, in the same call (after the files and
      reads), and returns it as it does (C(ansible_facts), C(model), C(group_models)). The action sglang_plan sends
      the plan's gathering here rather than to sglang_host_facts, so that deploy's two calls to a host share one module
      payload, which Ansible builds once per run.
    type: dict
author: sglang-fleet maintainers (@sglang-fleet)
"""

EXAMPLES = r"""
# Through the action of the same name, as the roles call it: files of the role's templates/ rendered on the control
# node (or given as content) and written in one call, only those that differ.
- name: Add NVIDIA's CUDA repository and its pin, only what differs
  sglang.fleet.sglang_instance_files:
    files:
      - src: nvidia-cuda.sources.j2
        dest: /etc/apt/sources.list.d/nvidia-cuda.sources
        template: true
        owner: root
        group: root
        mode: "0644"
      - {content: "# {{ ansible_managed }}\n", dest: /etc/sglang-fleet/README, owner: root, group: root, mode: "0644"}

- name: Write every instance's unit and environment file from the role's templates
  sglang.fleet.sglang_instance_files:
    instances: "{{ sglang_instances }}"
    templates:
      - {src: sglang.service.j2, file: unit, owner: root, group: root, mode: "0644"}
      - {src: sglang.env.j2, file: environment, owner: root, group: sglang, mode: "0640"}
  register: written
"""

RETURN = r"""
changed_paths:
  description: The files whose content, owner, group or mode differed (and were set, outside check mode).
  returned: always
  type: list
planned:
  description: >-
    In check mode (added by the action), each instance file in C(changed_paths) with the content a real run would
    write; null for a private one (its content is never returned). sglang_rollout's C(planned) option.
  returned: in check mode
  type: dict
read:
  description: With I(read), what module sglang_installed returns for those options.
  returned: when I(read) is given
  type: dict
answers:
  description: With I(requests), each request's C(changed_paths), C(diff) and C(read) (when it has one), by its name.
  returned: when I(requests) is given
  type: dict
ansible_facts:
  description: With I(facts), the facts module sglang_host_facts returns (C(sglang_host) and Ansible's own).
  returned: when I(facts) is given
  type: dict
model:
  description: With I(facts), the model directory as module sglang_host_facts returns it.
  returned: when I(facts) and its C(model) are given
  type: dict
group_models:
  description: With I(facts), the instance groups' model directories as module sglang_host_facts returns them.
  returned: when I(facts) and its C(group_models) are given
  type: dict
"""

from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils import safe_write
from ansible_collections.sglang.fleet.plugins.module_utils.file_compare import compare_file
from ansible_collections.sglang.fleet.plugins.module_utils.installed import probe
from ansible_collections.sglang.fleet.plugins.module_utils.sglang_router_client import routers_differences


def write(path: str, data: bytes, uid: int, gid: int, mode: int) -> None:
    """Replaces the file atomically: readers see the old or the new content, never a part; never through a link."""
    safe_write.write_file(path, data, mode, uid, gid)


def apply(spec: dict[str, Any], check_mode: bool) -> tuple[bool, dict[str, str] | None]:
    """Brings one file to its spec; returns whether it differed, and its diff when asked for and the content differs."""
    path, data = spec["path"], str(spec["content"]).encode()
    mode = int(str(spec["mode"]), 8)
    found = compare_file(path, data, spec["owner"], spec["group"], mode)
    if not check_mode and found.differs:
        if found.ids is None:
            raise KeyError(f"no such account: {spec['owner']}:{spec['group']}")
        if found.content_differs:
            write(path, data, *found.ids, mode)
        else:
            safe_write.set_attributes(path, mode, *found.ids)
    diff = None
    if spec.get("diff", True) and found.content_differs:
        before = "" if found.current is None else found.current.decode(errors="replace")
        diff = {"before_header": path, "after_header": path, "before": before, "after": data.decode()}
    return found.differs, diff


def handle(module: Any, files: list[dict[str, Any]], private: list[str], reads: dict[str, Any] | None) -> dict[str, Any]:
    """Brings `files` to their specs (reports only, in check mode), then makes the reads: changed_paths, diff, read."""
    changed_paths: list[str] = []
    diffs: list[dict[str, str]] = []
    specs = [
        {**spec, "content": private[spec["private"]], "diff": False} if spec.get("private") is not None else spec
        for spec in files
    ]
    for spec in specs:
        try:
            differs, diff = apply(spec, module.check_mode)
        except (OSError, KeyError) as error:
            module.fail_json(msg=f"{spec.get('path')}: {error}", changed_paths=changed_paths)
        if differs:
            changed_paths.append(spec["path"])
        if diff:
            diffs.append(diff)
    return {"changed_paths": changed_paths, "diff": diffs} | ({} if reads is None else {"read": probe(reads)})


def with_keys(routers: list[dict[str, Any]], private: list[str]) -> list[dict[str, Any]]:
    """Each router with its admin key in place of its index into the private contents."""
    return [{**router, "api_key": private[int(router["api_key"])]} for router in routers]


def host_facts(module: Any, options: dict[str, Any]) -> dict[str, Any]:
    """What module sglang_host_facts answers for `options` (validated as that module validates them, and logged so). Its
    code is imported here, only when asked: a call that writes files does not import Ansible's fact collectors on the
    host (its payload carries them all the same, as it carries every module_utils the module may import)."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    from ansible_collections.sglang.fleet.plugins.module_utils.host_facts import OPTIONS, answer

    validated = ArgumentSpecValidator(OPTIONS).validate(options)
    if validated.error_messages:
        module.fail_json(msg=f"facts: unsupported or invalid options: {'; '.join(validated.error_messages)}")
    module.params["facts"] = validated.validated_parameters
    return answer(module, validated.validated_parameters)


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "default": []},
            # Keys and tokens: masked in the logged invocation, and in anything returned.
            "private_contents": {"type": "list", "elements": "str", "default": [], "no_log": True},
            "read": {"type": "dict"},
            "requests": {"type": "dict", "default": {}},
            "facts": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    private, requests = module.params["private_contents"], module.params["requests"]
    result = handle(module, module.params["files"], private, module.params["read"])
    if requests:
        result["answers"] = {
            name: handle(module, list(request.get("files") or []), private, request.get("read"))
            | ({"routers": routers_differences(with_keys(request["routers"], private))} if request.get("routers") else {})
            for name, request in requests.items()
        }
    if module.params.get("facts") is not None:
        result.update(host_facts(module, module.params["facts"]))
    changed = bool(result["changed_paths"]) or any(each["changed_paths"] for each in result.get("answers", {}).values())
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
