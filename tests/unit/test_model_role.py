"""A model the role sglang_model fetches (sglang_model): the plan's checks of the control node's copy and of the host's
room, the names the role derives, and the host module that checks a revision and switches the stable link."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.filter.sglang_model import (
    sglang_model_dir,
    sglang_model_name,
    sglang_model_problems,
)
from ansible_collections.sglang.fleet.plugins.module_utils import role_decisions
from ansible_collections.sglang.fleet.plugins.modules import sglang_model_revision as revision

Plan = Callable[..., dict[str, Any]]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
SOURCE = {"repo": "Qwen/Qwen3.6-27B", "revision": COMMIT}
PATH = f"/srv/models/Qwen--Qwen3.6-27B/{COMMIT}"
GIB = 1024**3


def fetched(model_facts: dict[str, Any]) -> dict[str, Any]:
    """sglang_model_source as the role's preflight publishes it: the lock's files (the stand-in's 11 shards) and the
    control node's copy."""
    files = {f"model-{n:05d}-of-00011.safetensors": {"size": 5 * GIB, "sha256": "0" * 64} for n in range(1, 12)}
    return {"name": "Qwen3.6-27B", "path": PATH, "files": files, "facts": model_facts}


@pytest.fixture
def plan(support_tables: list[dict[str, Any]]) -> Plan:
    """The plan of ct129 with the host's own reading of the model directory `on_host`."""
    from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import sglang_plan
    from conftest import host_facts, plan_settings

    def run(on_host: dict[str, Any], **overrides: Any) -> dict[str, Any]:
        result: dict[str, Any] = sglang_plan(plan_settings("ct129", **overrides), host_facts("ct129", on_host), support_tables)
        return result

    return run


def sourced(plan: Plan, model_facts: dict[str, Any], on_host: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    settings = {"sglang_model": SOURCE, "sglang_model_path": "", "sglang_model_source": fetched(model_facts), **overrides}
    return plan(on_host, **settings)


def test_the_plan_checks_the_control_nodes_copy_while_the_host_has_none(plan: Plan, model_facts: dict[str, Any]) -> None:
    result = sourced(plan, model_facts, {"path": PATH, "exists": False, "disk_path": "/srv", "disk_free_bytes": 100 * GIB})
    assert result["problems"] == []
    [instance] = result["instances"]
    assert instance["model_path"] == PATH and instance["served_model_name"] == "Qwen3.6-27B"
    assert instance["argv"][instance["argv"].index("--model-path") + 1] == PATH


def test_a_failed_fetch_adds_no_problem_of_the_hosts_missing_directory(plan: Plan) -> None:
    """The fetch's own problem (network, lock) is the one reported (sglang_model_problems); the host that has no copy
    yet is no second one."""
    failed = {**fetched({}), "files": {}}
    settings = {"sglang_model": SOURCE, "sglang_model_path": "", "sglang_model_source": failed}
    assert plan({"path": PATH, "exists": False, "disk_free_bytes": 100 * GIB}, **settings)["problems"] == []
    by_hand = plan({"path": "/srv/models/gone", "exists": False}, sglang_model_path="/srv/models/gone")["problems"]
    assert by_hand == ['ct129 host: sglang_model_path="/srv/models/gone": no such directory on the host; fix: '
                       'copy the model there or fix the path']  # fmt: skip


def test_a_model_that_does_not_fit_is_refused_before_a_byte_is_sent(plan: Plan, model_facts: dict[str, Any]) -> None:
    result = sourced(
        plan, model_facts, {"path": PATH, "exists": False, "disk_free_bytes": 100 * GIB}, sglang_tensor_parallel_size=1
    )
    assert any("short by" in line for line in result["problems"]), result["problems"]


def test_a_host_without_room_for_the_missing_files_is_a_problem(plan: Plan, model_facts: dict[str, Any]) -> None:
    on_host = {
        "path": PATH,
        "exists": True,
        "checksum_problems": {"model-00001-of-00011.safetensors": "file to checksum is missing"},
        "disk_path": "/srv",
        "disk_free_bytes": 2 * GIB,
    }
    [line] = sourced(plan, model_facts, on_host)["problems"]
    assert line.startswith('ct129 host: sglang_model_root="/srv": the model\'s revision (1 file(s) to send) needs 5.0 GiB more')
    assert "has 2.0 GiB free" in line
    roomy = sourced(plan, model_facts, {**on_host, "disk_free_bytes": 6 * GIB, "disk_device": 7})
    assert roomy["problems"] == []
    # What the install's room check sums with its own footprint on the same filesystem (role sglang_venv).
    [need] = roomy["disk_needs"]
    assert need["variable"] == "sglang_model_root" and need["bytes"] == 5 * GIB and need["disk_device"] == 7
    assert need["what"] == "the model's revision (1 file(s) to send)" and need["path"] == PATH


def test_the_hosts_view_of_access_is_kept_and_both_ways_of_naming_the_model_are_refused(
    plan: Plan, model_facts: dict[str, Any]
) -> None:
    hidden = {"path": PATH, "exists": False, "disk_free_bytes": 100 * GIB, "hidden_by": "ProtectHome=yes hides /home"}
    assert any("the servers cannot see it" in line for line in sourced(plan, model_facts, hidden)["problems"])
    both = sourced(plan, model_facts, {"path": PATH, "exists": False}, sglang_model_path="/srv/models/Qwen3.6-27B")
    assert any('sglang_model_path="/srv/models/Qwen3.6-27B": set together with sglang_model' in line for line in both["problems"])


def test_names_derived_from_the_source() -> None:
    assert sglang_model_dir(SOURCE, "/srv/models/") == PATH
    assert sglang_model_name(SOURCE) == "Qwen3.6-27B"
    assert sglang_model_name({"src": "/data/q", "name": "Q", "revision": "2026-11-30"}) == "Q"
    assert sglang_model_name({}) == ""
    [line] = sglang_model_problems("ct129", {"config.json": "SHA-256 differs"}, SOURCE)
    assert line.startswith('ct129 host: sglang_model={"repo": "Qwen/Qwen3.6-27B"') and "config.json: SHA-256 differs" in line
    assert "playbooks/model_lock.yml" in line
    [room] = sglang_model_problems("ct129", {"cache": "3 file(s) to fetch need 50.0 GiB in /c and ..."}, SOURCE)
    assert room.endswith(": cache: 3 file(s) to fetch need 50.0 GiB in /c and ...; fix: free space there, or set "
                         "sglang_model_cache_dir to a filesystem with room for the model")  # fmt: skip


def test_only_a_file_at_its_full_size_is_wrong_a_shorter_one_is_resumed() -> None:
    source = {"path": "/m", "files": {"a": {"size": 10}, "b": {"size": 10}, "c": {"size": 10}}}
    on_host = {"exists": True, "checksum_problems": {"a": "differs", "b": "cut short", "c": "missing"}, "link_target": "/m",
               "verified": {"/m/a": {"size": 10}, "/m/b": {"size": 4}}}  # fmt: skip
    decision = role_decisions.sglang_model({"model": SOURCE, "source": source, "on_host": on_host, "keep_previous": 1}, {})
    assert decision["to_send"] == ["a", "b", "c"] and decision["wrong"] == ["a"]


def write(directory: Path, name: str, content: bytes) -> str:
    (directory / name).write_bytes(content)
    return hashlib.sha256(content).hexdigest()


def test_the_revision_is_checked_remembered_and_the_link_switched_in_one_rename(tmp_path: Path) -> None:
    directory = tmp_path / "rev"
    directory.mkdir()
    wanted = {"config.json": write(directory, "config.json", b"{}"), "w.safetensors": write(directory, "w.safetensors", b"x" * 9)}
    record = str(tmp_path / "verified.json")
    found = revision.check(str(directory), wanted, record)
    assert found["problems"] == {} and sorted(found["hashed"]) == ["config.json", "w.safetensors"]
    revision.write_record(record, found["record"])
    assert revision.check(str(directory), wanted, record)["hashed"] == []
    (directory / "w.safetensors").write_bytes(b"y" * 9)
    os.utime(directory / "w.safetensors", ns=(1, 1))
    assert revision.check(str(directory), wanted, record)["problems"] == {"w.safetensors": "SHA-256 differs from the lock file"}
    (tmp_path / "gone").write_bytes(b"")
    revision.write_record(record, {**found["record"], str(tmp_path / "gone"): {"size": 0}})
    (tmp_path / "gone").unlink()
    assert str(tmp_path / "gone") not in revision.check(str(directory), wanted, record)["record"]
    assert revision.check(str(tmp_path / "absent"), wanted, record)["problems"] == {"": f"{tmp_path / 'absent'} is missing"}

    link = str(tmp_path / "current")
    revision.switch_link(link, str(tmp_path / "old"))
    revision.switch_link(link, str(directory))
    assert os.readlink(link) == str(directory)
    assert sorted(os.listdir(tmp_path)) == ["current", "rev", "verified.json"]


@pytest.mark.parametrize("free", [0, 10**15])
def test_free_bytes_are_those_of_the_nearest_existing_directory(tmp_path: Path, free: int) -> None:
    from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import free_bytes

    found = free_bytes(str(tmp_path / "not" / "yet"))
    assert found["disk_path"] == str(tmp_path) and isinstance(found["disk_free_bytes"], int)
    assert (found["disk_free_bytes"] > free) == (free == 0)


@pytest.mark.parametrize("user", ["sglang", "ubuntu"])
def test_preflight_refuses_a_peer_account_other_than_root_while_hosts_copy_from_each_other(user: str) -> None:
    """root writes the run's key into the peer account's ~/.ssh (ansible.posix.authorized_key chowns and writes through
    whatever links are there): an account other than root could hand itself any file of the host."""
    [line] = sglang_model_problems("ct129", {}, SOURCE, user, 1)
    assert line.startswith(f'ct129 host: sglang_model_peer_user="{user}": root would write the run\'s key')
    assert "fix: leave sglang_model_peer_user at root" in line
    assert sglang_model_problems("ct129", {}, SOURCE, "root", 1) == []
    assert sglang_model_problems("ct129", {}, SOURCE, user, 0) == [], "no copies between hosts: the account is not used"
    assert sglang_model_problems("ct129", {}, {}, user, 1) == [], "no model: nothing is copied"


@pytest.mark.parametrize("root", ['/srv/m"odels', "/srv/m'odels", "/srv/models\n/x", "/srv/\x1bmodels", "srv/models"])
def test_preflight_refuses_a_model_root_the_fan_out_key_s_forced_command_cannot_hold(root: str) -> None:
    """Issue 38: the revision's directory goes into the fan-out key's `command="..."` in a sending host's
    authorized_keys; a quote or a control character there would end the option (or the line) and run what follows."""
    [line] = sglang_model_problems("ct129", {}, SOURCE, "root", 1, root)
    assert line.startswith("ct129 host: sglang_model_root=") and "\n" not in line
    assert "must be an absolute path without control characters or quotes" in line
    assert sglang_model_problems("ct129", {}, {}, "root", 1, root) == [], "no model: the root is not used"
    assert sglang_model_problems("ct129", {}, SOURCE, "root", 1, "/srv/my models;x") == [], "the shell's quoting holds it"


def sshd_dequote(text: str) -> str:
    """An authorized_keys option's quoted value as sshd reads it (auth-options.c opt_dequote: only \\" is an escape)."""
    assert text.startswith('"') and text.endswith('"')
    out, inner, at = [], text[1:-1], 0
    while at < len(inner):
        if inner[at] == "\\" and inner[at + 1 : at + 2] == '"':
            at += 1
        out.append(inner[at])
        at += 1
    return "".join(out)


def test_the_fan_out_key_runs_rrsync_on_the_revision_s_directory_whatever_its_characters() -> None:
    """The key options tasks/peer_key.yml writes, rendered by Ansible, parsed as ansible.posix.authorized_key keeps
    them and as sshd and the account's shell read the forced command: rrsync -ro and the directory as one argument."""
    import shlex

    import yaml
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    from ansible_collections.ansible.posix.plugins.modules.authorized_key import (  # type: ignore[import-untyped]
        parseoptions,
    )
    from fleet import ROOT

    tasks = yaml.safe_load((ROOT / "roles/sglang_model/tasks/peer_key.yml").read_text())
    options = [task["ansible.posix.authorized_key"]["key_options"] for task in tasks if "ansible.posix.authorized_key" in task]
    assert len(options) == 2
    path = "/srv/my models;touch /tmp/owned $(id)/Qwen--Qwen3.6-27B/" + COMMIT
    for template in options:
        source = {"path": path}
        variables = {"_sglang_model_expiry": "20261205190000", "item": "b200", "sglang_model_source": source,
                     "hostvars": {"b200": {"sglang_model_source": source}}}  # fmt: skip
        rendered = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(template))
        parsed = parseoptions(None, rendered)
        assert list(parsed) == ["restrict", "expiry-time", "command"]
        [command] = parsed["command"] if isinstance(parsed["command"], list) else [parsed["command"]]
        assert shlex.split(sshd_dequote(command)) == ["/usr/bin/rrsync", "-ro", path]


def model_settings(**changed: Any) -> dict[str, Any]:
    """Role sglang_model's variables that its preflight publishes from (defaults, and an sglang_model)."""
    return {"sglang_model": SOURCE, "sglang_model_root": "/srv/models", "sglang_model_seed_hosts": 1,
            "sglang_model_peer_address": "10.0.0.5", "sglang_model_peer_port": "22",
            "sglang_model_peer_user": "root"} | changed  # fmt: skip


def test_preflight_publishes_the_source_and_its_problems_computed_in_python() -> None:
    """sglang_model_source, as the role's set_fact once built it in Jinja: the name, the revision's directory and its
    link, the snapshot and the lock's files with their SHA-256, the peer, the snapshot's facts (none with problems)."""
    from ansible_collections.sglang.fleet.plugins.action.sglang_model_fetch import published

    files = {"config.json": {"size": 2, "sha256": "a" * 64}}
    fetched = {"snapshot": "/c/snapshots/x", "files": files, "problems": {}, "facts": {"architectures": ["X"]}}
    done = published("ct129", fetched, model_settings())
    assert done == {
        "source": {"name": "Qwen3.6-27B", "path": f"/srv/models/Qwen--Qwen3.6-27B/{COMMIT}",
                   "link": "/srv/models/Qwen--Qwen3.6-27B/current", "snapshot": "/c/snapshots/x", "files": files,
                   "sha256": {"config.json": "a" * 64}, "peer": {"address": "10.0.0.5", "port": 22, "user": "root"},
                   "facts": {"architectures": ["X"]}},
        "problems": [],
    }  # fmt: skip
    failed = published("ct129", {**fetched, "problems": {"config.json": "differs from the lock"}}, model_settings())
    assert failed["source"]["facts"] == {} and len(failed["problems"]) == 1
    assert failed["problems"][0].startswith("ct129 host: sglang_model=") and "config.json: differs" in failed["problems"][0]
    assert published("ct129", {}, model_settings(sglang_model={})) == {"source": {}, "problems": []}, "no model"
    assert published("ct129", {}, model_settings(sglang_model_peer_user="ubuntu"))["problems"], "the peer account's check"


def test_the_fetch_task_without_arguments_reads_the_role_s_variables(tmp_path: Path) -> None:
    """Role sglang_model's preflight task gives no arguments: the action fetches the sglang_model its variables name
    (the lock file's path a template, as its default is), and fetches nothing without one."""
    import yaml
    from ansible_collections.sglang.fleet.plugins.plugin_utils import model_lock, model_source
    from fleet import local_play

    model = tmp_path / "src"
    model.mkdir()
    (model / "config.json").write_bytes(b"{}\n")
    source = {"src": str(model), "name": "Tiny", "revision": "r1"}
    files = {"config.json": {"size": 3, "sha256": hashlib.sha256(b"{}\n").hexdigest()}}
    assert model_lock.write_lock(str(tmp_path / "model-lock.yml"), model_source.source_key(source), files)
    variables = model_settings(sglang_model=source, sglang_model_lock_file="{{ base }}/model-lock.yml",
                               base=str(tmp_path), sglang_model_cache_dir=str(tmp_path / "cache"),
                               sglang_model_endpoint="", sglang_model_token="")  # fmt: skip
    tasks = [
        {"sglang.fleet.sglang_model_fetch": {}, "register": "fetched"},
        # Without a model, a fetch's or a peer's variable is not read (the role skipped the task): an undefined one
        # (a token from a vault or lookup that only a host with a model has) fails nothing.
        {
            "sglang.fleet.sglang_model_fetch": {},
            "register": "without",
            "vars": {
                "sglang_model": {},
                "sglang_model_token": "{{ no_such_token }}",
                "sglang_model_lock_file": "{{ no_such_dir }}/model-lock.yml",
                "sglang_model_peer_address": "{{ no_such_address }}",
            },
        },
        {"ansible.builtin.copy": {"dest": str(tmp_path / "out.yml"), "content": "{{ [fetched, without] | to_yaml }}"}},
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "vars": variables,
                                                        "tasks": tasks}]))  # fmt: skip
    run = local_play(tmp_path / "play.yml")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    fetched, none = yaml.safe_load((tmp_path / "out.yml").read_text())
    assert fetched["published"]["problems"] == [] and fetched["problems"] == {}, fetched
    assert fetched["published"]["source"]["sha256"] == {"config.json": files["config.json"]["sha256"]}
    assert (Path(fetched["published"]["source"]["snapshot"]) / "config.json").read_bytes() == b"{}\n"
    assert none["published"] == {"source": {}, "problems": []} and "snapshot" not in none
