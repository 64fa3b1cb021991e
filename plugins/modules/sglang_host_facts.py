#!/usr/bin/python
"""Ansible module: what a GPU host has, for the SGLang plan. Reads only; never changes the host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_host_facts
short_description: Gathers the GPU, memory, port and library facts that sglang-fleet plans with
description:
  - Runs C(nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,driver_version,pci.bus_id
    --format=csv,noheader,nounits) for the GPUs, their memory, the driver version and PCI bus ids. Every field is one
    the driver lists in C(nvidia-smi --help-query-gpu) (C(minor_number) is not; see
    tests/recordings/h200-driver-580.159.04).
  - Takes each GPU's device minor (its C(/dev/nvidia<minor>)) from C(Device Minor) of
    C(/proc/driver/nvidia/gpus/<bus id>/information) (bus id C(0000:18:00.0)) when readable, else from the
    C(<minor_number>) of its C(<gpu>) (matched by C(<uuid>)) in C(nvidia-smi -q -x). A GPU neither gives is an
    error in C(gpu_error); the minor never defaults to the index.
  - Records which of C(/dev/nvidiactl), C(/dev/nvidia-uvm), C(/dev/nvidia-uvm-tools) and C(/dev/nvidia<N>) exist.
  - Runs C(nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory,process_name) for the processes using the GPUs.
    The nvidia-smi calls run side by side (C(-q -x) from the start where C(/proc/driver/nvidia/gpus) is absent).
  - Maps each GPU process and each listening TCP port to its PID, program name and systemd unit.
  - Reads host RAM from C(/proc/meminfo) and the glibc version from the C library, and asks each of C(python3),
    C(python3.11), C(python3.12) and C(python3.13) found on C(PATH) for its version (all at once; the Python running
    the module answers for itself), and each of I(pythons) too.
  - Its calls (nvidia-smi's and the Pythons') all start once the model directory is read (hashing it may take
    minutes; the GPUs' and processes' answers are then as fresh as before) and run while it gathers Ansible's facts.
  - With I(model), also reads the model directory in the same call and returns it as C(model). From C(config.json)
    the architecture, the MTP layer count (top level or C(text_config)) and the text model's attention heads, KV heads,
    hidden size and context length (as SGLang derives it), its model type and whether it has code of its own or a
    vision tower; whether the directory holds a processor's settings (C(preprocessor_config.json)) and a chat template,
    as does each of I(model.tokenizer_paths); from C(model.safetensors.index.json) the declared tensor
    bytes, the shards and whether MTP tensors exist. Checks every listed shard exists and is not empty, sums the shard
    sizes, optionally compares SHA-256 checksums of named files, and checks the servers' account can read it all.
  - With I(gather_subset), also gathers Ansible's own facts of those subsets in the same call, as
    C(ansible.builtin.setup) would (a play that needs only these spares its own fact gathering, a round trip).
  - Sets the fact C(sglang_host). Never changes the host.
options:
  nvidia_smi:
    description: Path or name of nvidia-smi.
    type: str
    default: nvidia-smi
  gather_subset:
    description: Ansible's fact subsets (C(ansible.builtin.setup)'s I(gather_subset)) to gather too; empty gathers none.
    type: list
    elements: str
    default: []
  model:
    description: The model directory to read as well; omitted, C(model) is not returned.
    type: dict
    suboptions:
      path:
        description: The model directory.
        type: path
        required: true
      sha256:
        description: Expected SHA-256 by file name inside the directory; empty skips checksums.
        type: dict
        default: {}
      user:
        description:
          - The account the servers run as. Every file the server reads (config.json, the index, every shard, the
            tokenizer files) is checked readable by it, and the directories on the way searchable. Where the account
            does not exist yet (first deploy), as an account of no extra group (the "other" permission bits).
          - Empty skips the check.
        type: str
        default: ""
      group:
        description: The servers' group (the unit's C(Group=)); empty means the account's primary group.
        type: str
        default: ""
      verified_file:
        description:
          - A JSON file of the files an earlier run verified (the returned C(model.verified), written by the caller).
            A file to checksum whose size, modification time and inode match its entry is not read again.
          - Empty reads every file to checksum.
        type: path
        default: ""
      link:
        description:
          - For a model kept as one directory per revision (role sglang_model), the stable link beside them, e.g.
            C(/srv/models/org--name/current). Returns where it points (C(link_target)) and every revision directory
            beside I(path) with its modification time (C(revisions)).
          - Empty returns neither.
        type: path
        default: ""
      tokenizer_paths:
        description:
          - Tokenizer directories other than the model's (the servers' C(--tokenizer-path) values). Returns, by path,
            whether each is a directory and which files hold a processor's settings and a chat template
            (C(tokenizers)).
          - Empty returns no C(tokenizers).
        type: list
        elements: path
        default: []
  group_models:
    description:
      - The model directories of the host's instance groups that serve a directory of their own, read as I(model) is
        (with its I(user) and I(group); no checksums, revisions or tokenizers) and returned by path as
        C(group_models).
    type: list
    elements: path
    default: []
  routes_to:
    description:
      - Addresses (names or IPs) whose route is looked up on the host (C(ip route get); for an address of the host
        itself, the interface holding it) and returned by address as C(routes) - the rank 0 nodes of instances across
        hosts, whose interface NCCL and Gloo use when the group names none.
    type: list
    elements: str
    default: []
  pythons:
    description:
      - Other Pythons to ask for their version (each a name on C(PATH) or a path, e.g. the one a venv is built with),
        answered in C(python_versions) as the usual ones; why one gives no version is in C(python_errors).
    type: list
    elements: str
    default: []
author: sglang-fleet maintainers (@sglang-fleet)
"""

EXAMPLES = r"""
- name: Gather GPU and host facts
  sglang.fleet.sglang_host_facts:

- name: Gather GPU and host facts and read the model directory
  sglang.fleet.sglang_host_facts:
    model:
      path: /srv/models/Qwen3.6-27B
      user: sglang
  register: host
"""

RETURN = r"""
ansible_facts:
  description: The fact C(sglang_host).
  returned: always
  type: dict
  contains:
    gpus:
      description:
        - One per GPU, by index. Keys C(index), C(uuid), C(name), C(memory_total_mib), C(memory_used_mib),
          C(driver_version), C(pci_bus_id) (as nvidia-smi prints it, C(00000000:18:00.0)), C(minor_number) (int)
          and C(device) (C(/dev/nvidia<minor_number>)).
        - C(minor_number) and C(device) are null for a GPU whose minor could not be found; C(gpu_error) says so.
      type: list
      elements: dict
    gpu_error:
      description: Why the GPU facts are missing or incomplete (nvidia-smi failed, a minor not found); null when fine.
      type: str
    device_nodes:
      description:
        - Path to whether it exists, for C(/dev/nvidiactl), C(/dev/nvidia-uvm) and C(/dev/nvidia-uvm-tools) (always
          listed) and for every C(/dev/nvidia<N>) that exists (listed only when present, as true).
      type: dict
    gpu_processes:
      description: C(pid), C(gpu_index), C(used_mib), C(name) and C(unit) (systemd service or null) per compute process.
      type: list
      elements: dict
    driver_version:
      description: The NVIDIA driver version, from the first GPU; null without GPUs.
      type: str
    listening:
      description: C(port), C(pid), C(name) and C(unit) per listening TCP port.
      type: list
      elements: dict
    routes:
      description:
        - Per address of I(routes_to) (only when given), C(ip) and C(interface) it is reached on, or C(error).
      type: dict
    memtotal_mb:
      description: Host RAM in MB, from C(/proc/meminfo).
      type: int
    glibc_version:
      description: The glibc version, e.g. C(2.36); empty when unknown.
      type: str
    python_versions:
      description: The version (C(3.11)) of each Python found on C(PATH) and of I(pythons), by its name and by its path.
      type: dict
    python_errors:
      description:
        - Why each of I(pythons) gave no version, by name - C(not found), C(not executable), the last line it wrote to
          stderr, its exit status, C(no answer within 30 s) or why it could not start.
      type: dict
model:
  description: >-
    The model directory: exists, config, architectures, mtp_layers, num_attention_heads, num_key_value_heads,
    hidden_size, max_position_embeddings, context_length, model_type, auto_map (config.json names code of the model's
    own), vision_config (config.json has one), language_model_only, processor_config and chat_template (the file that
    holds a processor's settings, and the chat template's, or null), total_size, shard_bytes, shards,
    missing_shards, empty_shards, has_mtp_tensors, tensor_count, checksum_problems, verified (each checksummed file's
    size, mtime_ns, inode and sha256, by path), hashed (the names read and hashed in this call); disk_path,
    disk_free_bytes and disk_device (the nearest existing directory of the path, the bytes free on its filesystem and
    that filesystem's device number); with I(model.link),
    link_target and revisions (path, mtime); hidden_by
    (the sandbox setting that hides the path from the service, or null), unreadable (one "path: reason" per file or
    directory the service account cannot read); with I(model.user), of an existing directory: read_as (the
    account checked, and how); with I(model.tokenizer_paths), tokenizers (by path: path, exists, processor_config,
    chat_template).
  returned: when I(model) is given
  type: dict
"""

from ansible_collections.sglang.fleet.plugins.module_utils.host_facts import OPTIONS, answer


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(argument_spec=OPTIONS, supports_check_mode=True)
    module.exit_json(changed=False, **answer(module, module.params))


if __name__ == "__main__":
    main()
