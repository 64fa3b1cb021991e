#!/usr/bin/python
"""Ansible module: a model revision's files checked against the lock file, remembered, and the stable link switched."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_model_revision
short_description: Checks a model revision's files by SHA-256, remembers them and points the stable link at it
description:
  - Hashes every file of I(sha256) in I(path) that the record I(verified_file) does not know at its size,
    modification time and inode, and fails, naming each file, when one is missing or differs.
  - Adds the files to I(verified_file) (a cache of this check, so writing it is no change), and points I(link) at
    I(path) by renaming a new link over it, in one step (a reader sees the old revision or the new one).
  - Reports a change only when the link moved. In check mode (where nothing was sent), reports the files that differ as
    C(would_send) and a change, and fails for none.
options:
  path:
    description: The revision's directory.
    type: path
    required: true
  sha256:
    description: SHA-256 by file name inside I(path), from the lock file.
    type: dict
    required: true
  verified_file:
    description: The JSON record of verified files (C(sglang_host_facts)'s C(model.verified) format).
    type: path
    required: true
  link:
    description: The stable link to point at I(path); empty leaves links alone.
    type: path
    default: ""
author: sglang-fleet maintainers (@sglang-fleet)
"""

EXAMPLES = r"""
- name: Check the revision and switch to it
  sglang.fleet.sglang_model_revision:
    path: /srv/models/Qwen--Qwen3.6-27B/0123456789abcdef0123456789abcdef01234567
    sha256: {config.json: "..."}
    verified_file: /var/lib/sglang-fleet/model-sha256.json
    link: /srv/models/Qwen--Qwen3.6-27B/current
"""

RETURN = r"""
hashed:
  description: The files read and hashed in this call.
  type: list
  elements: str
  returned: always
link_target:
  description: Where I(link) pointed before.
  type: str
  returned: when I(link) is given
"""

import json
import os
from collections.abc import Mapping
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils import safe_write
from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import describe, read_verified


def check(path: str, sha256: Mapping[str, str], verified_file: str) -> dict[str, Any]:
    """describe()'s checksum part: the problems by file, what was hashed, and the record with these files added."""
    known = read_verified(verified_file)
    facts = describe(path, sha256, known)
    problems = {name: "SHA-256 differs from the lock file" if "differs" in problem else problem
                for name, problem in (facts.get("checksum_problems") or {}).items()}  # fmt: skip
    # The record keeps files that exist: a revision removed since (pruned) leaves no entries behind.
    record = {file: entry for file, entry in {**known, **facts.get("verified", {})}.items() if os.path.exists(file)}
    return {
        "problems": problems if facts["exists"] else {"": f"{path} is missing"},
        "hashed": facts.get("hashed", []),
        "record": record,
    }


def write_record(verified_file: str, record: Mapping[str, Any]) -> None:
    os.makedirs(os.path.dirname(verified_file), mode=0o755, exist_ok=True)
    safe_write.write_file(verified_file, (json.dumps(record, indent=4, sort_keys=True) + "\n").encode(), 0o644)


def switch_link(link: str, target: str) -> None:
    """Points `link` at `target` in one rename, so no reader ever finds no link."""
    partial = f"{link}.{os.getpid()}"
    if os.path.lexists(partial):
        os.unlink(partial)
    os.symlink(target, partial)
    os.replace(partial, link)


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "sha256": {"type": "dict", "required": True},
            "verified_file": {"type": "path", "required": True},
            "link": {"type": "path", "default": ""},
        },
        supports_check_mode=True,
    )
    path, link = module.params["path"], module.params["link"]
    found = check(path, module.params["sha256"], module.params["verified_file"])
    if found["problems"] and module.check_mode:
        # Check mode sent nothing: the files are what this run would send, the link would follow them.
        module.exit_json(changed=True, hashed=found["hashed"], would_send=sorted(found["problems"]))
    if found["problems"]:
        lines = [f"{name}: {problem}" for name, problem in sorted(found["problems"].items())]
        module.fail_json(msg=f"{path}: the files differ from the lock file: " + "; ".join(lines), hashed=found["hashed"])
    if found["hashed"] and not module.check_mode:
        write_record(module.params["verified_file"], found["record"])
    result: dict[str, Any] = {"changed": False, "hashed": found["hashed"]}
    if link:
        result["link_target"] = os.readlink(link) if os.path.islink(link) else None
        if result["link_target"] != path:
            result["changed"] = True
            result["diff"] = {"before": f"{link} -> {result['link_target']}\n", "after": f"{link} -> {path}\n"}
            if not module.check_mode:
                switch_link(link, path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
