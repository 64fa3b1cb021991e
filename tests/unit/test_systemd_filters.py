"""The server role's filters: systemd quoting, unit states, instances whose files changed."""

from __future__ import annotations

import pytest
from ansible_collections.sglang.fleet.plugins.filter.systemd import systemd_env_quote, systemd_exec_quote


def test_plain_words_stay_plain() -> None:
    assert systemd_exec_quote(["/opt/v/bin/python", "-m", "sglang.launch_server", "--port", 30000]) == (
        "/opt/v/bin/python -m sglang.launch_server --port 30000"
    )


def test_spaces_quotes_and_expansions_survive() -> None:
    line = systemd_exec_quote(["--chat-template", 'a "b" c', "--api-key", "x$HOME%n", ""])
    assert line == '--chat-template "a \\"b\\" c" --api-key x$$HOME%%n ""'


def test_environment_values() -> None:
    assert systemd_env_quote("0,1") == "0,1"
    assert systemd_env_quote("a b") == '"a b"'
    assert systemd_env_quote('say "hi"') == '"say \\"hi\\""'
    with pytest.raises(ValueError):
        systemd_env_quote("two\nlines")


def test_show_states_and_stale_instances() -> None:
    from ansible_collections.sglang.fleet.plugins.filter.systemd import FilterModule
    from ansible_collections.sglang.fleet.plugins.module_utils.instance_files import instance_files
    from ansible_collections.sglang.fleet.plugins.module_utils.systemd import parse_show

    states = parse_show(
        "Id=sglang-30000.service\nActiveState=active\nExecMainStartTimestamp=Thu 1970-01-01 00:16:40.500000 UTC\n\n"
        "Id=sglang-30001.service\nActiveState=active\nExecMainStartTimestamp=Thu 1970-01-01 00:16:40.500000 UTC\n\n"
        "Id=sglang-30002.service\nActiveState=failed\nExecMainStartTimestamp=Thu 1970-01-01 00:00:10.000000 UTC\n"
    )
    assert states["sglang-30002.service"]["ActiveState"] == "failed"
    instances = [
        {"name": f"sglang-{port}", "unit": unit, "files": instance_files(unit, "/u", "/e", "/e/secrets")}
        for port in (30000, 30001, 30002)
        for unit in [f"sglang-{port}.service"]
    ]
    times = {
        "/u/sglang-30000.service": 900.0,
        "/e/sglang-30000.env": 1000.4,
        "/u/sglang-30001.service": 900,
        "/e/sglang-30001.env": 1000.6,
        "/u/sglang-30002.service": 2000,
    }
    units = FilterModule().filters()["sglang_server_units"]
    assert [i["name"] for i in units(instances, {"units": states, "mtimes": times})["stale"]] == ["sglang-30001"]
    assert [i["name"] for i in units(instances, {"units": states, "mtimes": times})["stopped"]] == ["sglang-30002"]
    assert units(instances, {"units": states, "mtimes": times})["failed_units"] == ["sglang-30002.service"]
    times["/e/secrets/sglang-30000.yaml"] = 1000.7
    stale = units(instances, {"units": states, "mtimes": times})["stale"]
    assert [i["name"] for i in stale] == ["sglang-30000", "sglang-30001"], "a key change"
