"""Ansible lookup: the free bytes of the control node's filesystems, for a room check before anything is written."""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_free_space
short_description: The free bytes of the control node's filesystem that holds, or would hold, each path
description:
  - For each path (existing or to be created) on the control node, the nearest existing directory
    (C(disk_path)), the bytes free on its filesystem (C(disk_free_bytes)) and that filesystem's device number
    (C(disk_device)), with the C(path) asked.
options:
  _terms:
    description: Paths on the control node.
    type: list
    elements: path
    required: true
"""

EXAMPLES = r"""
- name: Refuse a download the cache has no room for
  ansible.builtin.assert:
    that: lookup('sglang.fleet.sglang_free_space', '~/.cache/sglang-fleet').disk_free_bytes > 5368709120
"""

RETURN = r"""
_raw:
  description: One dict per path - path, disk_path, disk_free_bytes, disk_device.
  type: list
  elements: dict
"""

import os
from typing import Any

from ansible.plugins.lookup import LookupBase
from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import free_bytes


class LookupModule(LookupBase):  # type: ignore[misc]
    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[dict[str, Any]]:
        return [{"path": str(term), **free_bytes(os.path.expanduser(str(term)))} for term in terms]
