"""Ansible lookup: the text of one file inside a wheel (a zip archive) on the control node, without unpacking it."""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_wheel_file
short_description: The text of a file inside a wheel on the control node
description:
  - Reads the member I(member) of each wheel (a zip archive) given, as UTF-8 text, without unpacking the wheel (the
    control node needs no C(unzip)). Fails naming the wheel when it lacks the member.
options:
  _terms:
    description: Wheels on the control node.
    type: list
    elements: path
    required: true
  member:
    description: The member's path inside the wheel.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Keep the o200k_base vocabulary litellm's wheel carries
  ansible.builtin.copy:
    content: "{{ lookup('sglang.fleet.sglang_wheel_file', wheel, member='litellm/litellm_core_utils/tokenizers/fb37...') }}"
    dest: ~/.cache/sglang-fleet/o200k_base.tiktoken
"""

RETURN = r"""
_raw:
  description: The member's text, one per wheel.
  type: list
  elements: str
"""

import os
import zipfile
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase


def wheel_file(wheel: str, member: str) -> str:
    """The text of `member` inside the zip archive `wheel`."""
    try:
        with zipfile.ZipFile(os.path.expanduser(wheel)) as archive:
            return archive.read(member).decode("utf-8")
    except KeyError as error:
        raise AnsibleLookupError(f"{wheel} has no {member}") from error
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError) as error:
        raise AnsibleLookupError(f"{wheel}: {error}") from error


class LookupModule(LookupBase):  # type: ignore[misc]
    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[str]:
        self.set_options(var_options=variables, direct=kwargs)
        member = str(self.get_option("member"))
        return [wheel_file(str(term), member) for term in terms]
