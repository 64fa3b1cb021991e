"""Role sglang_server's entry point remove (playbooks/remove.yml) takes away every folder its entry point account
makes, before the account goes: nothing the deleted account owned stays for a later account given its uid."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

TASKS = Path(__file__).resolve().parents[2] / "roles" / "sglang_server" / "tasks"
# A folder below another removed one goes with it.
INSIDE = {"sglang_server_secrets_dir": "sglang_server_config_dir"}


def tasks(name: str) -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load((TASKS / name).read_text())
    return loaded


def test_every_folder_the_account_entry_point_makes_is_removed_and_checked_first() -> None:
    made = [
        re.sub(r"[{}\s]", "", task["ansible.builtin.file"]["path"])
        for task in tasks("account.yml")
        if task.get("ansible.builtin.file", {}).get("state") == "directory"
    ]
    assert "sglang_server_cache_dir" in made
    remove = tasks("remove.yml")
    [refuse] = [task for task in remove if "ansible.builtin.assert" in task]
    [delete] = [task for task in remove if task.get("ansible.builtin.file", {}).get("state") == "absent"]
    for folder in made:
        kept = INSIDE.get(folder, folder)
        assert kept in str(delete["loop"]), f"remove.yml leaves {folder}"
        assert kept in str(refuse["loop"]), f"remove.yml deletes {folder} without refusing a system folder"
