"""Where an instance's files live. The plan computes them once and carries them in each instance (`files`); the server
role writes, stats and removes them, the rollout keeps and restores their last verified copies."""

from __future__ import annotations

import os
from typing import Any


def instance_files(unit: str, unit_dir: str, config_dir: str, secrets_dir: str = "", keyed: bool = False) -> dict[str, Any]:
    """The files of the instance whose unit is `unit` (sglang-<port>.service).

    `unit`, `environment`: its unit and its environment file; `secret`: its key file (the API key, SGLang's --config)
    when it has a key (`keyed`) and there is a `secrets_dir`, else None; `last_good`: [file, its last verified copy]
    for each, the copies in <config_dir>/last-good. The key file's pair is there with or without a key now: the key
    file of the last verified set is restored with its unit, and one that set did not have is removed.
    """
    name = unit.removesuffix(".service")
    key_file = f"{secrets_dir.rstrip('/')}/{name}.yaml" if secrets_dir else None
    files = [f"{unit_dir}/{unit}", f"{config_dir}/{name}.env", *([key_file] if key_file else [])]
    return {
        "unit": files[0],
        "environment": files[1],
        "secret": key_file if keyed else None,
        "last_good": [[file, f"{config_dir}/last-good/{os.path.basename(file)}"] for file in files],
    }
