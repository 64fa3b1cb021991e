"""Ansible filters of the planning role: a host's instances and problems (plugins/module_utils/plan.py and the modules
it imports), the runtime parser check's input and verdicts, and the file set of an instance no longer planned."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.instance_checks import tokenizer_paths
from ansible_collections.sglang.fleet.plugins.module_utils.instance_files import instance_files
from ansible_collections.sglang.fleet.plugins.module_utils.instance_groups import group_model_paths
from ansible_collections.sglang.fleet.plugins.module_utils.listen import connect_host, connect_url, remote_url, url_host
from ansible_collections.sglang.fleet.plugins.module_utils.multinode import (
    node_addresses,
    node_instances,
    node_problems,
    unreached_problems,
)
from ansible_collections.sglang.fleet.plugins.module_utils.parser_check import checked_command_lines, parse_problems
from ansible_collections.sglang.fleet.plugins.module_utils.plan import plan_host
from ansible_collections.sglang.fleet.plugins.module_utils.problems import problem_line
from ansible_collections.sglang.fleet.plugins.plugin_utils import safe_yaml


@functools.lru_cache(maxsize=1)
def declared_variables(root: str = "") -> frozenset[str]:
    """Every sglang_*/cuda_* variable a role declares (meta/argument_specs.yml) or sets itself (its vars, defaults,
    set_fact and register names in roles/, playbooks/ and molecule/, and the facts its modules return). Read once
    per run, from the checkout the plugin lives in, as the plugin is imported (below): in the controller, before the
    workers fork, where the callback sglang.fleet.prefork imports it (each worker would read them again, ~0.06 s)."""
    base = Path(root) if root else Path(__file__).resolve().parents[2]
    names: set[str] = set()
    for spec in base.glob("roles/*/meta/argument_specs.yml"):
        data = safe_yaml.load(spec.read_text()) or {}
        for entry in (data.get("argument_specs") or {}).values():
            names.update((entry or {}).get("options") or {})
    assigned = re.compile(r"^[ \t-]*(?:register:\s*)?((?:sglang|cuda)_\w+)\s*:?", re.MULTILINE)
    for path in [
        *base.glob("roles/**/*.yml"),
        *base.glob("playbooks/**/*.yml"),
        *base.glob("molecule/**/*.yml"),
        *base.glob("*.yml"),
    ]:
        names.update(match.group(1) for match in assigned.finditer(path.read_text(errors="replace")))
    # Facts the roles' own modules return (ansible_facts={"sglang_host": ...}).
    quoted = re.compile(r"[\"']((?:sglang|cuda)_\w+)[\"']")
    for path in base.glob("plugins/modules/*.py"):
        names.update(match.group(1) for match in quoted.finditer(path.read_text(errors="replace")))
    return frozenset(names)


@functools.lru_cache(maxsize=8)
def support_table(path: str, modified_ns: int) -> Mapping[str, Any]:
    """A support table read once per run (and again when its file changes)."""
    table: Mapping[str, Any] = json.loads(Path(path).read_text())
    return table


def sglang_plan(
    settings: Mapping[str, Any], facts: Mapping[str, Any], tables: Sequence[Mapping[str, Any] | str] | Mapping[str, Any]
) -> dict[str, Any]:
    """A host's instances, its problems and its reshape, from its settings, its facts and the support tables of every
    supported SGLang version (one table alone is taken as the pinned one). A table may be given by its file's path: read
    here as plain JSON, which is much cheaper than a table passed through Ansible's templating."""
    loaded: Sequence[Mapping[str, Any]] | Mapping[str, Any] = (
        tables
        if isinstance(tables, Mapping)
        else [support_table(table, Path(table).stat().st_mtime_ns) if isinstance(table, str) else table for table in tables]
    )
    return plan_host(settings, facts, loaded, declared_variables())


def http_instances(instances: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The instances that serve HTTP: all but the nodes of rank other than 0 of an instance across hosts."""
    return [instance for instance in instances if instance.get("serves_http", True)]


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_plan": sglang_plan,
            "sglang_parse_problems": parse_problems,
            "sglang_checked_command_lines": checked_command_lines,
            # The files of an instance unit the plan no longer has (a planned instance carries its own: `files`).
            "sglang_instance_file_set": instance_files,
            "sglang_problem": problem_line,
            "sglang_connect_host": connect_host,
            "sglang_connect_url": connect_url,
            "sglang_url_host": url_host,
            # How another host reaches a server bound to an address: (listen_host, advertised host, port) -> URL or "".
            "sglang_remote_url": remote_url,
            # The --tokenizer-path directories the plan's probe reads beside the model's.
            "sglang_tokenizer_paths": tokenizer_paths,
            # The model directories of the instance groups that serve one of their own.
            "sglang_group_model_paths": group_model_paths,
            # An instance across hosts (module_utils/multinode.py): its nodes' addresses, its whole-instance checks, and
            # the instances a router or gateway reaches (not a node of a rank other than 0).
            "sglang_node_addresses": node_addresses,
            "sglang_node_problems": node_problems,
            "sglang_http_instances": http_instances,
            # What the nodes of an instance across hosts do together (restart, keep, roll back), from their facts.
            "sglang_node_instances": node_instances,
            # The problem lines of preflight's TCP check from every node to rank 0's rendezvous port.
            "sglang_rendezvous_unreached": unreached_problems,
        }


declared_variables()
