"""Ansible lookup: a deterministic .tar.gz of a local Python package, for a one-file transfer to hosts.

`lookup('sglang_venv_archive', '/path/to/pkg')` packs the directory (no caches) into
~/.cache/sglang-fleet/<name>-<content hash>.tar.gz, with fixed owners and times, and returns that path.
The same content gives the same bytes, so copying it again changes nothing.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_venv_archive
short_description: A deterministic .tar.gz of a local Python package, for a one-file transfer to hosts
description:
  - Packs each directory given (without caches or compiled files) into
    C(~/.cache/sglang-fleet/<name>-<content hash>.tar.gz) on the control node, with fixed owners and times, and returns
    its path.
  - The same content gives the same bytes, so copying the archive again changes nothing.
options:
  _terms:
    description: The directories of the packages to pack.
    type: list
    elements: path
    required: true
"""

EXAMPLES = r"""
- name: Send the simulator's source as one file
  ansible.builtin.copy:
    src: "{{ lookup('sglang.fleet.sglang_venv_archive', playbook_dir ~ '/simulator') }}"
    dest: /opt/sglang/simulator.tar.gz
    mode: "0644"
"""

RETURN = r"""
_raw:
  description: The archive's path on the control node, one per directory.
  type: list
  elements: path
"""

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path
from typing import Any

from ansible.plugins.lookup import LookupBase

SKIPPED = ("__pycache__",)


def package_files(root: Path) -> list[Path]:
    return sorted(
        path
        for path in root.rglob("*")
        if path.is_file() and not any(part in SKIPPED for part in path.parts) and path.suffix != ".pyc"
    )


def build_archive(root: Path, cache: Path) -> Path:
    """Writes (once) and returns the archive of `root`, named by a hash of its contents."""
    files = package_files(root)
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    target = cache / f"{root.name}-{digest.hexdigest()[:16]}.tar.gz"
    if target.exists():
        return target
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in files:
            info = tarfile.TarInfo(f"{root.name}/{path.relative_to(root)}")
            info.size = path.stat().st_size
            info.mode = 0o644
            info.mtime = 0
            archive.addfile(info, io.BytesIO(path.read_bytes()))
    cache.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.part")
    with open(partial, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as compressed:
        compressed.write(buffer.getvalue())
    partial.replace(target)
    return target


class LookupModule(LookupBase):  # type: ignore[misc]
    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[str]:
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sglang-fleet"
        return [str(build_archive(Path(str(term)).resolve(), cache)) for term in terms]
