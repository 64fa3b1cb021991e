"""Remote workers over TLS (issue 38, finding 8): the instances' certificate and key from the operator's PEM files
(sglang_server_tls_cert, _key, _ca), SGLang started with --ssl-certfile/--ssl-keyfile, https URLs everywhere the fleet
reaches an instance, the routers verifying workers with the CA (smg's --ca-cert-paths), and preflight refusing a keyed
gateway that would reach another host's instances over plain http."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_router_processes, sglang_server_request
from ansible_collections.sglang.fleet.plugins.filter.sglang_router import sglang_gateway_problems, sglang_server_tls
from ansible_collections.sglang.fleet.plugins.module_utils import role_decisions
from ansible_collections.sglang.fleet.plugins.module_utils.parser_check import checked_command_lines
from ansible_collections.sglang.fleet.plugins.module_utils.rollout_plan import leaving_instances
from fleet import pem_files

Plan = Callable[..., dict[str, Any]]
SECRETS = "/etc/sglang-fleet/secrets"
HELPERS = "/usr/local/lib/sglang-fleet"
TLS = {"sglang_server_tls_cert": "/c/worker.pem", "sglang_server_tls_key": "/c/worker.key"}


def server_tls(cert: str = "/c/worker.pem", key: str = "/c/worker.key", ca: str = "/c/ca.pem") -> dict[str, Any]:
    settings = {"cert": cert, "key": key, "ca": ca, "secrets_dir": SECRETS, "ca_dir": HELPERS, "group": "sglang"}
    return sglang_server_tls("b200", settings)


def test_the_instances_certificate_and_key_are_the_servers_group_to_read_and_root_s_to_write(tmp_path: Path) -> None:
    cert, key, ca = pem_files(tmp_path, "worker.pem", "worker.key", "ca.pem")
    tls = server_tls(cert, key, ca)
    assert tls["enabled"] and tls["problems"] == [] and tls["absent"] == []
    assert tls["files"] == [
        {"src": cert, "dest": f"{SECRETS}/server-tls.pem", "owner": "root", "group": "sglang", "mode": "0640"},
        {"src": key, "dest": f"{SECRETS}/server-tls.key", "owner": "root", "group": "sglang", "mode": "0640",
         "private": True},
        {"src": ca, "dest": f"{HELPERS}/server-ca.pem", "owner": "root", "group": "root", "mode": "0644"},
    ]  # fmt: skip
    assert (tls["cert_path"], tls["key_path"], tls["ca_file"]) == (
        f"{SECRETS}/server-tls.pem",
        f"{SECRETS}/server-tls.key",
        f"{HELPERS}/server-ca.pem",
    )
    # Without a certificate: nothing written, the files an earlier deploy left are removed.
    plain = server_tls("", "", "")
    assert (plain["enabled"], plain["files"], plain["cert_path"], plain["ca_file"]) == (False, [], "", "")
    assert plain["absent"] == [f"{SECRETS}/server-tls.pem", f"{SECRETS}/server-tls.key", f"{HELPERS}/server-ca.pem"]


def test_the_instances_tls_variables_problems_name_host_and_variable_and_write_nothing(tmp_path: Path) -> None:
    cert, ca = pem_files(tmp_path, "worker.pem", "ca.pem")
    [half] = server_tls(cert, "", ca)["problems"]
    assert half.startswith('b200 host: sglang_server_tls_key="": the certificate and its key go together')
    assert "set both sglang_server_tls_cert and sglang_server_tls_key" in half
    bad = server_tls(cert="worker.pem", key=f"{tmp_path}/missing.key", ca=f"{tmp_path}/ca\n.pem")
    assert [line.split(":")[1].split("=")[0].strip() for line in bad["problems"]] == [
        "sglang_server_tls_cert",
        "sglang_server_tls_key",
        "sglang_server_tls_ca",
    ]
    assert bad["files"] == [] and not bad["enabled"]


def test_sglang_serves_https_with_the_installed_certificate_and_every_url_says_so(plan: Plan) -> None:
    instances = plan("b200", sglang_listen_host="0.0.0.0", sglang_api_key="k", sglang_advertise_host="b200", **TLS)["instances"]
    for instance in instances:
        argv = instance["argv"]
        assert argv[argv.index("--ssl-certfile") + 1] == f"{SECRETS}/server-tls.pem"
        assert argv[argv.index("--ssl-keyfile") + 1] == f"{SECRETS}/server-tls.key"
        assert argv[-2] == "--config", "the key file stays last"
        assert instance["url"] == f"https://127.0.0.1:{instance['port']}"
        assert instance["remote_url"] == f"https://b200:{instance['port']}"
        assert instance["tls_files"] == [f"{SECRETS}/server-tls.pem", f"{SECRETS}/server-tls.key"]
    plain = plan("b200", sglang_listen_host="0.0.0.0", sglang_api_key="k", sglang_advertise_host="b200")["instances"][0]
    assert "--ssl-certfile" not in plain["argv"] and plain["url"].startswith("http://") and plain["tls_files"] == []
    half = plan("b200", sglang_server_tls_cert="/c/worker.pem")["instances"][0]
    assert "--ssl-certfile" not in half["argv"], "a certificate without its key (preflight names it) serves nothing"


def test_the_parser_check_stands_in_for_the_certificate_and_key_a_first_deploy_has_not_written(
    plan: Plan, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SGLang 0.5.17's and 0.5.23's ServerArgs check, while parsing, that --ssl-certfile and --ssl-keyfile exist
    (recorded: tests/recordings/smg-1.13.0-tls/sglang-0.5.23-serving-hook-ssl.py.txt); preflight parses before deploy
    writes them."""
    from test_plan_problems import _checker

    checker = _checker(monkeypatch)  # the simulator importable, as the venv has it
    from sglang_simulator.checks import check_ssl
    from sglang_simulator.errors import StartupError

    [instance] = plan("ct129", **TLS)["instances"]
    line = checked_command_lines([instance])["sglang-30000"]
    assert line["stand_in_files"] == instance["tls_files"]
    argv = checker.with_stand_in(line, str(tmp_path))
    cert, key = argv[argv.index("--ssl-certfile") + 1], argv[argv.index("--ssl-keyfile") + 1]
    assert Path(cert).is_file() and Path(key).is_file() and cert.startswith(str(tmp_path)) and key != cert
    stood_in = {cert: instance["tls_files"][0], key: instance["tls_files"][1]}
    assert [stood_in.get(word, word) for word in argv] == instance["argv"], "only the two files stood in for"
    check_ssl({"ssl_certfile": cert, "ssl_keyfile": key})
    with pytest.raises(StartupError, match="SSL key file not found"):
        check_ssl({"ssl_certfile": instance["tls_files"][0], "ssl_keyfile": instance["tls_files"][1]})


def test_the_routers_verify_workers_over_https_with_the_instances_ca() -> None:
    """smg 1.13.0's --ca-cert-paths: "CA certificate(s) for verifying worker TLS certificates" (recorded:
    tests/recordings/smg-1.13.0-tls/smg-1.13.0-launch-router-help.txt)."""
    from test_role_settings import INSTANCES, settings

    base = settings()
    router, gateway = sglang_router_processes(
        INSTANCES, settings(gateway={**base["gateway"], "enabled": True}, worker_ca=f"{HELPERS}/server-ca.pem")
    )
    for process in (router, gateway):
        assert process["argv"][-2:] == ["--ca-cert-paths", f"{HELPERS}/server-ca.pem"]
    router, _gateway = sglang_router_processes(INSTANCES, settings())
    assert "--ca-cert-paths" not in router["argv"]


def test_the_tls_files_no_longer_wanted_are_removed_with_the_unwanted_keys() -> None:
    absent = server_tls("", "", "")["absent"]
    request = sglang_server_request(
        [],
        {"role_path": "r", "write": True, "templates": [], "files": [], "user": "sglang", "group": "sglang",
         "extra_groups": [], "home": "/var/lib/sglang", "cache_dir": "/var/cache/sglang", "config_dir": "/etc/sglang-fleet",
         "helper_dir": HELPERS, "secrets_dir": SECRETS, "unit_dir": "/etc/systemd/system", "nvidia_modprobe": "/usr/bin/x",
         "devices_unit": "sglang-nvidia-devices.service", "unit_properties": [], "displaced": [], "tls_absent": absent},
    )  # fmt: skip
    assert set(absent) <= set(request["read"]["globs"])
    found = {glob: [] for glob in request["read"]["globs"]} | {absent[1]: [absent[1]]}
    answer = {"changed_paths": [], "read": {"differences": [], "found": found, "units": {}, "mtimes": {}}}
    decision = role_decisions.sglang_server(request["decide"], answer)
    assert decision["unwanted_keys"] == [f"{SECRETS}/server-tls.key"] and decision["configure"]


def test_a_leaving_hosts_instances_over_tls_are_drained_by_their_https_urls() -> None:
    [instance] = leaving_instances(["/etc/systemd/system/sglang-30001.service"], "0.0.0.0", "b200", True)
    assert (instance["url"], instance["remote_url"]) == ("https://127.0.0.1:30001", "https://b200:30001")
    [plain] = leaving_instances(["/etc/systemd/system/sglang-30001.service"], "0.0.0.0", "b200")
    assert plain["url"] == "http://127.0.0.1:30001"


KEY = hashlib.sha256(b"client-key").hexdigest()


def gateway_problems(remote_scheme: str, key_digest: str = KEY) -> list[str]:
    instances = [
        {"name": f"sglang-{port}", "url": f"{remote_scheme}://127.0.0.1:{port}", "remote_url": f"{remote_scheme}://b200:{port}"}
        for port in (30000, 30001)
    ]
    gateway = {"url": "https://127.0.0.1:30200", "remote_url": "https://ct129:30200", "bind": "0.0.0.0",
               "admin_key": "a", "api_key_digest": key_digest}  # fmt: skip
    hostvars = {"ct129": {"sglang_gateway": gateway}, "b200": {"sglang_instances": instances}}
    return list(
        sglang_gateway_problems(
            "b200", ["ct129"], hostvars, ["ct129", "b200"], ["ct129", "b200"], instances, "0.0.0.0", key_digest
        )
    )


def test_a_keyed_gateway_reaching_another_hosts_instances_over_plain_http_is_refused_per_instance() -> None:
    found = gateway_problems("http")
    assert [line.split(":")[0] for line in found] == ["b200 instance sglang-30000", "b200 instance sglang-30001"]
    assert found[0].startswith(
        'b200 instance sglang-30000: sglang_server_tls_cert="": the gateway on ct129 sends its client key and the '
        "clients' prompts to this instance across the network over plain http (http://b200:30000)"
    )
    assert "sglang_server_tls_key" in found[0]
    assert gateway_problems("https") == [], "with a certificate the instances are reached over https"
    assert gateway_problems("http", hashlib.sha256(b"").hexdigest()) == [], "a keyless gateway sends no key"


def test_preflight_refuses_a_certificate_that_does_not_name_where_the_instances_are_reached(tmp_path: Path) -> None:
    """Every client verifies the instance's name: 127.0.0.1 on its own host, its advertised address from others (read
    on the control node, as the mesh's certificate is)."""
    import subprocess
    import sys

    from fleet import ROOT

    subprocess.run([sys.executable, str(ROOT / "scripts/test_ca.py"), str(tmp_path), "b200", "127.0.0.1"], check=True)

    def problems(*remote: str, cert: Path = tmp_path / "server.pem") -> list[str]:
        instances = [{"url": "https://127.0.0.1:30000", "remote_url": f"https://{host}:30000"} for host in remote]
        instances = instances or [{"url": "https://127.0.0.1:30000"}]
        settings = {"cert": str(cert), "key": str(tmp_path / "server.key"), "ca": "", "secrets_dir": SECRETS,
                    "ca_dir": HELPERS, "group": "sglang", "instances": instances}  # fmt: skip
        tls = sglang_server_tls("b200", settings)
        assert (tls["files"] == []) == bool(tls["problems"]), "nothing is written for a certificate with a problem"
        return list(tls["problems"])

    assert problems("b200") == problems() == []
    [line] = problems("b200", "10.0.0.9", "gpu-b200.example")
    assert line.startswith(f'b200 host: sglang_server_tls_cert="{tmp_path}/server.pem": the certificate does not name ')
    assert "does not name 10.0.0.9, gpu-b200.example, where the fleet reaches" in line
    [unreadable] = problems("b200", cert=tmp_path / "server.key")
    assert "cannot be read as a PEM certificate" in unreadable


def test_a_rotated_certificate_or_key_restarts_the_instances_that_serve_it(plan: Plan) -> None:
    """SGLang (uvicorn) reads its certificate and key once, at its start. A deploy that writes a new key (one rotated
    after a compromise) or a certificate of a new CA, and nothing else, restarts every running instance of the host:
    the probe reads the files' times (the request's mtimes), the instance is stale once they are newer than its
    process, and in check mode the write says it would roll. Otherwise the old key went on serving, and the routers
    restarted with a new CA (filter sglang_routers_first) refused every instance."""
    instance = plan("b200", **TLS)["instances"][0]
    cert, key = instance["tls_files"]
    request = sglang_server_request(
        [instance],
        {"role_path": "r", "write": True, "templates": [], "files": [], "user": "sglang", "group": "sglang",
         "extra_groups": [], "home": "/var/lib/sglang", "cache_dir": "/var/cache/sglang", "config_dir": "/etc/sglang-fleet",
         "helper_dir": HELPERS, "secrets_dir": SECRETS, "unit_dir": "/etc/systemd/system", "nvidia_modprobe": "/usr/bin/x",
         "devices_unit": "sglang-nvidia-devices.service", "unit_properties": [], "displaced": [], "tls_absent": []},
    )  # fmt: skip
    assert {cert, key} <= set(request["read"]["mtimes"])
    started = "Sat 2026-12-05 11:00:00.000000 UTC"
    units = {instance["unit"]: {"ActiveState": "active", "UnitFileState": "enabled", "ExecMainStartTimestamp": started}}
    before = role_decisions.utc_seconds(started) or 0.0
    unchanged = {path: before - 60 for path, _copy in instance["files"]["last_good"]}
    assert role_decisions.server_units([instance], {"units": units, "mtimes": unchanged})["stale"] == []
    rotated = {**unchanged, key: before + 60}
    assert role_decisions.server_units([instance], {"units": units, "mtimes": rotated})["stale"] == [instance]
    # In check mode nothing is written: the write's changed paths tell that the instance would roll.
    decision = role_decisions.server_units([instance], {"units": units, "mtimes": unchanged})
    written = {"changed": True, "changed_paths": [key], "changed_instances": []}
    rolling = role_decisions.server_rolling([instance], decision, {"instance_files": written}, check_mode=True)
    assert rolling["would_roll"] == [instance] and rolling["to_roll"] == [instance]
    untouched = {"changed": True, "changed_paths": [f"{HELPERS}/server-ca.pem"], "changed_instances": []}
    assert role_decisions.server_rolling([instance], decision, {"instance_files": untouched}, check_mode=True)["would_roll"] == []


def test_a_gateway_whose_ca_lacks_this_hosts_ca_is_refused_before_the_switch_to_https(tmp_path: Path) -> None:
    """The fleet gateway on ct129 verifies b200's instances with ct129's sglang_server_tls_ca (smg's --ca-cert-paths). A
    CA there that lacks b200's would refuse every instance: the rollout fails and its rollback puts them back over plain
    http, the keyed gateway's key in the clear (a downgrade anyone who breaks the switch gets). Preflight refuses it,
    naming the host and the variable; a CA file holding this CA among others is not refused."""
    pem = "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n"
    ours, other = tmp_path / "ours.pem", tmp_path / "other.pem"
    ours.write_text(pem.format("AAAA\nBBBB"))
    other.write_text(pem.format("CCCC"))
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(other.read_text() + pem.format("AAAABBBB"))

    def problems(gateway_ca: Path | None, scheme: str = "https") -> list[str]:
        instances = [{"name": "sglang-30000", "url": f"{scheme}://127.0.0.1:30000", "remote_url": f"{scheme}://b200:30000"}]
        gateway = {"url": "https://127.0.0.1:30200", "remote_url": "https://ct129:30200", "bind": "0.0.0.0",
                   "admin_key": "a", "api_key_digest": KEY}  # fmt: skip
        hostvars = {
            "ct129": {"sglang_gateway": gateway, **({"sglang_server_tls_ca": str(gateway_ca)} if gateway_ca else {})},
            "b200": {"sglang_server_tls_ca": str(ours)},
        }
        return list(sglang_gateway_problems("b200", ["ct129"], hostvars, ["ct129", "b200"], ["ct129", "b200"], instances,
                                            "0.0.0.0", KEY))  # fmt: skip

    [line] = problems(other)
    assert line.startswith(f'b200 host: sglang_server_tls_ca="{ours}": the gateway on ct129 verifies this host\'s instances')
    assert "give ct129 a sglang_server_tls_ca that holds this CA" in line
    assert len(problems(None)) == 1, "a gateway with the system's CAs only"
    assert problems(ours) == [] and problems(bundle) == []
