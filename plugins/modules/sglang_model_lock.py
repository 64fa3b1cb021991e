#!/usr/bin/python
"""Documentation of the action plugin sglang_model_lock, which runs on the control node only (no module code)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_model_lock
short_description: Records a model source's files, size and SHA-256 of each, in the lock file
description:
  - An action plugin, run on the control node and never on a host, whatever the task's host.
  - Reads the source's files as they are now, a Hub repository's from the server's tree at the commit (an LFS file's
    SHA-256 as the server records it, a small file's by downloading it), a directory's by hashing it, and records them
    in the lock file under the source's key. The other entries are kept; the text is stable (sorted, one line per
    file), so locking the same files again changes nothing.
  - A Hub revision may be a branch or a tag here; it is resolved to its commit, the entry is recorded under the commit,
    and a warning says which commit to pin in the source (a deploy accepts only a commit).
  - Check mode reads the source and reports whether the lock file would change, without writing it. With diff mode,
    returns the entry before and after.
  - Fails when the source is invalid, cannot be read (network, HTTP status, a missing directory) or selects no files.
options:
  source:
    description: The model source, as for module sglang_model_fetch; a Hub revision may be a branch or tag.
    type: dict
    required: true
  lock_file:
    description: The lock file (YAML, kept in the inventory); created when missing.
    type: path
    required: true
extends_documentation_fragment: [sglang.fleet.model_source]
author: sglang-fleet maintainers (@sglang-fleet)
"""

EXAMPLES = r"""
- name: Lock the model's files at the commit main names now
  sglang.fleet.sglang_model_lock:
    source:
      repo: Qwen/Qwen3.6-27B
      revision: main
      allow_patterns: ["*.json", "*.jinja", "*.safetensors", "*.txt", "tokenizer*"]
    lock_file: "{{ inventory_dir }}/model-lock.yml"
  run_once: true
"""

RETURN = r"""
key:
  description: The entry's key in the lock file, C(org/name@commit) or C(name@label).
  returned: success
  type: str
revision:
  description: The revision locked; for a Hub source the commit, also when the source named a branch or tag.
  returned: success
  type: str
files:
  description: The files recorded, name -> C({size, sha256}).
  returned: success
  type: dict
diff:
  description: The entry before and after, as the lock file writes it.
  returned: in diff mode, when the entry changes
  type: dict
"""
