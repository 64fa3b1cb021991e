"""The cuda role's apt method: NVIDIA's repository for the host's distribution, and the toolkit pin."""

from __future__ import annotations

from typing import Any

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters
from fleet import ROOT

CUDA = ROOT / "roles/cuda"


def defaults(**facts: Any) -> dict[str, Any]:
    """The role's defaults rendered for a host with these facts, as Ansible resolves them."""
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined)
    environment.filters.update(CoreFilters().filters())
    raw: dict[str, Any] = yaml.safe_load((CUDA / "defaults/main.yml").read_text())
    context: dict[str, Any] = {"ansible_facts": facts, "ansible_managed": "Managed by Ansible", **raw}
    for _ in range(5):  # defaults refer to defaults
        context.update(
            {key: environment.from_string(value).render(**context) for key, value in raw.items() if isinstance(value, str)}
        )
    return context


def host(distribution: str, version: str, architecture: str = "x86_64") -> dict[str, Any]:
    return {
        "distribution": distribution,
        "distribution_major_version": version.split(".")[0],
        "distribution_version": version,
        "architecture": architecture,
    }


@pytest.mark.parametrize(
    ("facts", "repository"),
    [
        (host("Debian", "12.8"), "/debian12/x86_64"),
        (host("Ubuntu", "22.04"), "/ubuntu2204/x86_64"),
        (host("Ubuntu", "24.04", "aarch64"), "/ubuntu2404/sbsa"),
    ],
)
def test_repository_and_key_follow_the_host_distribution(facts: dict[str, Any], repository: str) -> None:
    variables = defaults(**facts)
    base = variables["cuda_apt_repository_base"]
    assert variables["cuda_apt_keyring_url"] == f"{base}{repository}/3bf863cc.pub"
    assert variables["cuda_apt_package"] == "cuda-toolkit-13-0"


def test_pin_holds_the_toolkit_at_the_tested_version() -> None:
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(CUDA / "templates"), undefined=jinja2.StrictUndefined)
    environment.filters.update(CoreFilters().filters())
    variables = defaults(
        distribution="Debian", distribution_major_version="12", distribution_version="12.8", architecture="x86_64"
    )
    pin = environment.get_template("cuda-pin.j2").render(**variables)
    assert pin.startswith("#\n# Managed by Ansible\n#\n")
    stanza = dict(line.split(": ", 1) for line in pin.splitlines() if ": " in line and not line.startswith("#"))
    assert stanza == {"Package": "cuda-toolkit-13-0", "Pin": "version 13.0.2-1", "Pin-Priority": "1001"}
