"""A host's instance groups (sglang_instance_groups): one or more groups of instances, each with its own model, shape
and server settings, laid out one after the other on the host's GPUs and ports. A host without groups is one group
of its own settings."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.problems import HostProblems

# What a group may set: its own value of the host's variable sglang_<key> (a group's value replaces the host's; a key it
# does not set comes from the host). GPUs and ports are not among them: they are derived once, group after group.
GROUP_KEYS = (
    "model_path",
    "served_model_name",
    "tensor_parallel_size",
    "data_parallel_size",
    "pipeline_parallel_size",
    "gpus_per_instance",
    "instance_count",
    "speculative",
    "server_args",
    "environment",
    "instance_overrides",
    # An instance across hosts (module_utils/multinode.py).
    "nodes",
    "rendezvous_port",
    "network_interface",
)
NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
VARIABLE = "sglang_instance_groups"


class GroupProblems(HostProblems):
    """A group's problems, in the host's lines: a variable the group sets is named as its own
    (sglang_instance_groups.<name>.<key>), and a problem of the host's settings as the group's."""

    def __init__(self, host_problems: HostProblems, group: Mapping[str, Any]) -> None:
        super().__init__(host_problems.host, host_problems.lines)
        self.name = str(group["name"])
        self.own = set(group) & set(GROUP_KEYS)

    def add(self, where: str, variable: str, value: Any, cause: str, fix: str) -> None:
        key = re.split(r"[.\[]", variable.removeprefix("sglang_"), maxsplit=1)[0]
        if variable.startswith("sglang_") and key in self.own:
            own = f"{VARIABLE}.{self.name}.{variable.removeprefix('sglang_')}"
            fix = fix.replace(variable, own)
            variable = own
        super().add(f"group {self.name}" if where == "host" else where, variable, value, cause, fix)


def checked_groups(problems: HostProblems, groups: Any) -> list[dict[str, Any]] | None:
    """The host's groups when they are well formed (a list of mappings with unique names and known keys); None
    (and problems) otherwise; [] for a host without groups."""
    if not groups:
        return []
    if not isinstance(groups, Sequence) or isinstance(groups, str) or not all(isinstance(g, Mapping) for g in groups):
        problems.add("host", VARIABLE, groups, "must be a list of groups (mappings)", "see the README's instance groups")
        return None
    valid = True
    names: set[str] = set()
    for index, group in enumerate(groups):
        name = group.get("name")
        variable = f"{VARIABLE}[{index}]"
        if not isinstance(name, str) or not NAME.match(name) or name in names:
            problems.add(
                "host",
                f"{variable}.name",
                name,
                "each group needs a name of its own (lower case letters, digits, '-', '_', '.')",
                "name the group, e.g. coder",
            )
            valid = False
            continue
        names.add(name)
        unknown = sorted(set(group) - set(GROUP_KEYS) - {"name"})
        if unknown:
            problems.add(
                f"group {name}",
                f"{VARIABLE}.{name}",
                unknown,
                "unknown keys"
                + (" (a group serves a model directory, model_path, or the host's sglang_model)" if "model" in unknown else ""),
                "use " + ", ".join(GROUP_KEYS),
            )
            valid = False
    return [dict(group) for group in groups] if valid else None


def _after(base: Any, count: int) -> Any:
    """A port base moved past `count` instances (a value that is no port base is left for the plan to report)."""
    return base + count if isinstance(base, int) and not isinstance(base, bool) else base


def group_settings(settings: Mapping[str, Any], group: Mapping[str, Any], first_instance: int) -> dict[str, Any]:
    """The settings a group's instances are derived from: the host's, with the group's own values, its ports after the
    instances of the groups before it, and its model (a directory of its own, or the host's)."""
    own = {key: group[key] for key in GROUP_KEYS if key in group}
    derived = {
        **settings,
        # The host's per-index overrides name the host's instances, not a group's.
        "instance_overrides": {},
        **own,
        # How a problem of the group's server args names them (the host's, unless the group sets its own).
        "server_args_variable": f"{VARIABLE}.{group['name']}.server_args" if "server_args" in own else "sglang_server_args",
        "port_base": _after(settings["port_base"], first_instance),
        "nccl_port_base": _after(settings["nccl_port_base"], first_instance),
    }
    if "model_path" in own:
        # A directory of the group's own, managed by hand: not the host's fetched model.
        derived.update(group_model=True, model_sourced=False, model_source={}, model_path_given=own["model_path"])
        derived["served_model_name"] = own.get("served_model_name") or str(own["model_path"]).rstrip("/").rsplit("/", 1)[-1]
    return derived


def group_model_paths(groups: Any) -> list[str]:
    """The absolute model directories the groups serve of their own, each once (what the plan's probe reads); read
    before the plan checks the groups: anything else is skipped here and reported there."""
    if not isinstance(groups, Sequence) or isinstance(groups, str):
        return []
    paths = [group.get("model_path") for group in groups if isinstance(group, Mapping)]
    return sorted({path for path in paths if isinstance(path, str) and path.startswith("/")})
