#!/usr/bin/python
"""Ansible module: compare what an install role would install with what the host has, in one read-only call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_installed
short_description: Says, in one call, whether a role's install steps would change anything on the host
description:
  - An install role (CUDA, the SGLang venv) runs this first and runs its install tasks only when something differs,
    instead of a dozen package, pip and file tasks that each find nothing to do.
  - Exact for what the install tasks manage; it never changes the host (check mode or not).
options:
  packages:
    description: >-
      OS packages (dpkg) that must be installed, C({name: version}); an empty version accepts any.
    type: dict
    default: {}
  venvs:
    description: >-
      Each C({path, pins}): a venv whose C(bin/python) must exist and whose installed distributions must include
      every C(name==version) of C(pins), at that exact version.
    type: list
    elements: dict
    default: []
  paths:
    description: >-
      Each C({path, state}) with C(state) one of C(file), C(directory), C(link), C(exists); a C(file) may give its
      C(content) or C(sha256), and C(mode) (octal string), a C(link) its C(src), a C(directory) its C(mode), C(owner)
      and C(group).
    type: list
    elements: dict
    default: []
  accounts:
    description: >-
      Each C({name, group, groups, home, shell}): a user that must exist with that primary group, be a member of
      every one of C(groups) (others allowed, as ansible.builtin.user with append does), and have that home and shell.
    type: list
    elements: dict
    default: []
  commands:
    description: Each an argv that must exit 0 (and print C(stdout), when given, as its whole output, stripped).
    type: list
    elements: dict
    default: []
  globs:
    description: Directory globs whose matches are returned in C(found) (for the caller's own pruning rules).
    type: list
    elements: str
    default: []
  units:
    description: systemd units whose C(unit_properties) are returned in C(units).
    type: list
    elements: str
    default: []
  unit_properties:
    description: The C(systemctl show) properties returned for each of C(units); times in microseconds, UTC.
    type: list
    elements: str
    default: [ActiveState, UnitFileState]
  mtimes:
    description: Files whose modification times (Unix seconds) are returned in C(mtimes); a missing one is left out.
    type: list
    elements: str
    default: []
  free_space:
    description: >-
      Paths (existing or to be created) whose filesystems' free bytes are returned in C(free_space), for a caller
      that checks the room an install needs before it writes anything.
    type: list
    elements: str
    default: []
author: sglang-fleet maintainers (@sglang-fleet)
"""

EXAMPLES = r"""
- name: Say whether the venv's install steps would change anything
  sglang.fleet.sglang_installed:
    packages: {python3-venv: ""}
    venvs:
      - path: /opt/sglang/sglang-0.5.23
        pins: [sglang==0.5.23, sglang-router==0.3.2]
    paths:
      - {path: /opt/sglang/sglang-0.5.23/check_server_args.py, state: file, mode: "0644"}
    units: [sglang-30000.service]
    free_space: [/opt/sglang]
  register: installed
  check_mode: false
"""

RETURN = r"""
differences:
  description: What the install steps would change, one line each; empty when everything is installed as pinned.
  returned: always
  type: list
found:
  description: For each of C(globs), the matching paths.
  returned: always
  type: dict
units:
  description: For each of C(units), its C(unit_properties) (empty strings for an unknown unit).
  returned: always
  type: dict
mtimes:
  description: For each existing file of C(mtimes), its modification time in Unix seconds.
  returned: always
  type: dict
accounts:
  description: For each of C(accounts), whether the user exists.
  returned: always
  type: dict
differing_paths:
  description: The C(paths) that differ (missing, of another kind, content, target, mode, owner or group).
  returned: always
  type: list
free_space:
  description: >-
    For each of C(free_space), C(disk_path) (the nearest existing directory), C(disk_free_bytes) (free to
    unprivileged users) and C(disk_device) (equal for paths on one filesystem).
  returned: always
  type: dict
"""

from ansible_collections.sglang.fleet.plugins.module_utils.installed import probe


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "dict", "default": {}},
            "venvs": {"type": "list", "elements": "dict", "default": []},
            "paths": {"type": "list", "elements": "dict", "default": []},
            "accounts": {"type": "list", "elements": "dict", "default": []},
            "commands": {"type": "list", "elements": "dict", "default": []},
            "globs": {"type": "list", "elements": "str", "default": []},
            "units": {"type": "list", "elements": "str", "default": []},
            "unit_properties": {"type": "list", "elements": "str", "default": ["ActiveState", "UnitFileState"]},
            "mtimes": {"type": "list", "elements": "str", "default": []},
            "free_space": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    module.exit_json(changed=False, **probe(module.params))


if __name__ == "__main__":
    main()
