"""The sglang_venv role's preflight fact (_sglang_venv_host) as its set_fact derives it: filter sglang_venv_host with
the role's defaults and vars (its plain settings) and a host's facts, each overridable."""

from __future__ import annotations

from typing import Any

import yaml
from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_venv_host
from fleet import ROOT

ROLE = ROOT / "roles/sglang_venv"
ROLE_VARS: dict[str, Any] = yaml.safe_load((ROLE / "vars/main.yml").read_text())
DEFAULTS: dict[str, Any] = yaml.safe_load((ROLE / "defaults/main.yml").read_text())


def settings(**overrides: Any) -> dict[str, Any]:
    """What roles/sglang_venv/tasks/preflight.yml hands the filter, for a Debian host with Python 3.11 and glibc 2.36."""
    return {
        "runtimes": ROLE_VARS["_sglang_venv_runtimes"], "root": DEFAULTS["sglang_venv_root"], "version": "0.5.23",
        "router_version": DEFAULTS["sglang_venv_router_version"], "python": DEFAULTS["sglang_venv_python"],
        "python_install": DEFAULTS["sglang_venv_python_install"], "distribution": "Debian",
        "os_family": "Debian", "os_packages": DEFAULTS["sglang_venv_os_packages"], "architecture": "x86_64",
        "host_facts": {"python_versions": {"python3": "3.11"}, "glibc_version": "2.36"},
        "wheelhouse_cache": "/home/me/.cache/sglang-fleet/wheelhouse", "host_wheelhouse": DEFAULTS["sglang_venv_host_wheelhouse"],
        "keep_previous": DEFAULTS["sglang_venv_keep_previous"], "files_dir": str(ROLE / "files"), "instances": [],
        "runtime_environment": {}, "simulator_archive": "", "server_modules": ROLE_VARS["_sglang_venv_server_module"],
        "args_parsers": ROLE_VARS["_sglang_venv_args_parser"], "footprints": ROLE_VARS["_sglang_venv_footprints"],
        **overrides,
    }  # fmt: skip


def venv_host(runtime: str = "sglang", **overrides: Any) -> dict[str, Any]:
    return sglang_venv_host(runtime, settings(**overrides))
