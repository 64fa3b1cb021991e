"""Ansible lookup: a pip requirements file pinning every wheel of a wheelhouse with its SHA-256.

`lookup('sglang_venv_wheel_hashes', '/path/to/wheelhouse', required=['sglang==0.5.23'])` returns the text of a
requirements file with one `name==version --hash=sha256:<hex>` line per distribution in the directory (every wheel of
it hashed, several --hash options where one version has several wheels), computed on the control node from the
wheels it downloaded. The host's pip installs with `--require-hashes -r` that file, so a wheel changed after the
download, on the way or on the host, is refused. Every `required` pin must be among the wheels.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_venv_wheel_hashes
short_description: A pip requirements file pinning every wheel of a wheelhouse with its SHA-256
description:
  - Returns the text of a requirements file with one C(name==version --hash=sha256:<hex>) line per distribution in
    the directory (several C(--hash) options where one version has several wheels), hashed on the control node.
  - The host's pip installs with C(--require-hashes -r) that file, so a wheel changed after the download, on the way
    or on the host, is refused.
options:
  _terms:
    description: The wheelhouse directories.
    type: list
    elements: path
    required: true
  required:
    description: Pins (C(name==version)) that must be among the wheels; a missing one fails the lookup.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Write the SHA-256 of every wheel, for the host's pip --require-hashes
  ansible.builtin.copy:
    content: "{{ lookup('sglang.fleet.sglang_venv_wheel_hashes', '/var/cache/wheelhouse', required=['sglang==0.5.23']) }}"
    dest: /var/cache/wheelhouse/requirements.txt
    mode: "0644"
"""

RETURN = r"""
_raw:
  description: The requirements file's text, one per wheelhouse.
  type: list
  elements: str
"""

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase
from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import sha256_of

HEADER = (
    "# Every wheel of this wheelhouse, pinned, with its SHA-256 (computed on the control node from the downloaded\n"
    "# wheels). The host installs with: pip install --no-index --find-links <here> --require-hashes -r <this file>.\n"
)


class WheelhouseError(ValueError):
    """The wheelhouse cannot be pinned: no wheels, a name that is no wheel's, two versions of one package."""


def canonical_name(name: str) -> str:
    """PEP 503: lower case, runs of "-", "_" and "." as one "-"."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name_version(filename: str) -> tuple[str, str]:
    """(canonical name, version) from a wheel file name: name-version[-build]-python-abi-platform.whl (PEP 427)."""
    parts = filename.removesuffix(".whl").split("-")
    if not filename.endswith(".whl") or len(parts) not in (5, 6):
        raise WheelhouseError(f"{filename}: not a wheel file name (name-version[-build]-python-abi-platform.whl)")
    return canonical_name(parts[0]), parts[1]


def hashed_requirements(directory: Path, required: Sequence[str] = ()) -> str:
    """The requirements text for every wheel in `directory`, sorted by name; checks `required` ("name==version")."""
    wheels = sorted(directory.glob("*.whl"))
    if not wheels:
        raise WheelhouseError(f"{directory}: no wheels")
    versions: dict[str, str] = {}
    hashes: dict[str, list[str]] = {}
    files: dict[str, str] = {}
    for wheel in wheels:
        name, version = wheel_name_version(wheel.name)
        if versions.setdefault(name, version) != version:
            raise WheelhouseError(
                f"{directory}: two versions of {name} ({files[name]} and {wheel.name}); pip installs one: "
                "remove the wheelhouse directory so that it is downloaded again"
            )
        files.setdefault(name, wheel.name)
        hashes.setdefault(name, []).append(sha256_of(wheel))
    for pin in required:
        name, _equals, version = pin.partition("==")
        if versions.get(canonical_name(name.strip())) != version.strip():
            found = versions.get(canonical_name(name.strip()))
            raise WheelhouseError(f"{directory}: {pin} is not in the wheelhouse" + (f" (it has {found})" if found else ""))
    lines = [
        f"{name}=={versions[name]} " + " ".join(f"--hash=sha256:{digest}" for digest in sorted(hashes[name]))
        for name in sorted(versions)
    ]
    return HEADER + "\n".join(lines) + "\n"


class LookupModule(LookupBase):  # type: ignore[misc]
    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[str]:
        required = [str(pin) for pin in kwargs.get("required") or []]
        try:
            return [hashed_requirements(Path(str(term)), required) for term in terms]
        except (OSError, WheelhouseError) as error:
            raise AnsibleError(f"sglang_venv_wheel_hashes: {error}") from error
