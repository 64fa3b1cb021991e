#!/usr/bin/python
"""Documentation of the action plugin sglang_model_fetch, which runs on the control node only (no module code)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_model_fetch
short_description: Brings a model source's locked files into the control node's cache, verified, as a snapshot
description:
  - An action plugin, run on the control node and never on a host, whatever the task's host.
  - Reads the lock file's entry for the source (written by playbooks/model_lock.yml) and brings exactly those files
    into a content-addressed cache, I(cache_dir)/blobs/<sha256>, each checked against the lock's size and SHA-256
    before it is kept. A Hub source downloads at its pinned commit; a directory source copies from I(source.src).
  - A cached blob is reused without reading it when its size, modification time and inode match what
    I(cache_dir)/verified.json recorded when it was verified; otherwise it is hashed again, and a wrong one (truncated,
    corrupted) is deleted and fetched again.
  - Lays out I(cache_dir)/snapshots/<slug>/<revision>/, relative symlinks to the blobs named as the files in the lock
    (a file no longer in the lock is removed from it), and describes it as module sglang_host_facts describes a
    model directory.
  - Never fails for what it finds (no lock entry, a network error, a file that differs from the lock); those are
    returned as I(problems), for the role to report with its other preflight problems. It fails only for invalid
    arguments.
  - Check mode fetches too; the cache is the control node's own, and the deploy's check needs the model's facts.
  - Two runs sharing a cache wait for each other (a lock on I(cache_dir)/.lock).
  - Without any option (role sglang_model's preflight), the options are the role's variables C(sglang_model),
    C(sglang_model_lock_file), C(sglang_model_cache_dir), C(sglang_model_endpoint) and C(sglang_model_token), each read
    once (nothing is fetched where C(sglang_model) is empty), and the result's I(published) is what the role publishes
    of the fetch.
options:
  source:
    description: >-
      The model source. A Hub repository at a pinned commit, C({repo: org/name, revision: <40-hex commit>}), or a
      directory on the control node, C({src: /abs/dir, name: <model name>, revision: <a label you choose>}); either
      may select files with C(allow_patterns) and C(ignore_patterns) (fnmatch patterns, as huggingface_hub's
      C(filter_repo_objects) applies them; C(dir/) means everything under it). Required, as I(lock_file) and
      I(cache_dir) are, where any option is given.
    type: dict
    required: false
  lock_file:
    description: The lock file (YAML, kept in the inventory), e.g. C(inventory/production/model-lock.yml).
    type: path
    required: false
  cache_dir:
    description: The cache on the control node; blobs, the verified memo and the snapshots live under it.
    type: path
    required: false
extends_documentation_fragment: [sglang.fleet.model_source]
author: sglang-fleet maintainers (@sglang-fleet)
"""

EXAMPLES = r"""
- name: Fetch the model at its locked revision
  sglang.fleet.sglang_model_fetch:
    source:
      repo: Qwen/Qwen3.6-27B
      revision: 0123456789abcdef0123456789abcdef01234567
      allow_patterns: ["*.json", "*.jinja", "*.safetensors", "*.txt", "tokenizer*"]
    lock_file: "{{ inventory_dir }}/model-lock.yml"
    cache_dir: "{{ lookup('env', 'HOME') }}/.cache/sglang-fleet/models"
  run_once: true
  register: model

- name: Fetch a model copied to the control node by hand (air-gapped site)
  sglang.fleet.sglang_model_fetch:
    source:
      src: /srv/models/Qwen3.6-27B
      name: Qwen3.6-27B
      revision: "2026-11-30"
    lock_file: "{{ inventory_dir }}/model-lock.yml"
    cache_dir: /var/cache/sglang-fleet/models
  run_once: true
  register: model
"""

RETURN = r"""
key:
  description: The source's key in the lock file, C(org/name@commit) or C(name@label).
  returned: when the source is valid
  type: str
slug:
  description: The source's folder name under C(snapshots/), C(org--name) or C(name).
  returned: when the source is valid
  type: str
revision:
  description: The source's revision, the snapshot's folder name under its slug.
  returned: when the source is valid
  type: str
snapshot:
  description: The snapshot directory, I(cache_dir)/snapshots/<slug>/<revision>.
  returned: when the lock has an entry for the source
  type: str
files:
  description: The lock entry's files, name -> C({size, sha256}).
  returned: when the source is valid
  type: dict
fetched:
  description: The files downloaded or copied in this run (changed is true when any bytes were).
  returned: when the lock has an entry for the source
  type: list
fetched_bytes:
  description: The bytes fetched in this run.
  returned: when the lock has an entry for the source
  type: int
reused:
  description: The files whose cached blob was reused.
  returned: when the lock has an entry for the source
  type: list
hashed:
  description: The reused files whose blob was read again to trust it (its size, time or inode had changed).
  returned: when the lock has an entry for the source
  type: list
problems:
  description: >-
    What kept a file (or the whole source) from the snapshot, by file name; by C(source) for an invalid source, by the
    lock file's path for a missing lock entry. Empty when the snapshot holds every locked file.
  returned: unless, without options, C(sglang_model) is empty
  type: dict
facts:
  description: >-
    The snapshot as module sglang_host_facts describes a model directory (config, architectures, shards, index, ...);
    empty when nothing was fetched.
  returned: unless, without options, C(sglang_model) is empty
  type: dict
published:
  description: >-
    Without options, what role sglang_model publishes - C(source), the fact C(sglang_model_source) (the model's name,
    the host's directory of the revision and its C(current) link, the snapshot, the lock's files and their SHA-256,
    how other hosts reach this one as a peer, the snapshot's facts; empty without a model) and C(problems), the
    preflight problem lines of the fetch and of C(sglang_model_root) and C(sglang_model_peer_user).
  returned: when no option is given
  type: dict
"""
