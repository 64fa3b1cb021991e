"""The collection's metadata agrees with what the checkout really uses and installs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import yaml
from fleet import ROOT

# The collections and the commands of the ansible-core the tests run under (.venv's, or .venv-newest's: make unit-newest).
SITE = Path(sysconfig.get_paths()["purelib"]) / "ansible_collections"
BIN = Path(sys.executable).parent


def used_collections() -> set[str]:
    """namespace.name of every module, filter or lookup called by its full name outside ansible.builtin and ours."""
    text = "\n".join(
        path.read_text() for pattern in ("roles/**/*.yml", "playbooks/*.yml", "deploy.yml") for path in ROOT.glob(pattern)
    )
    return {f"{ns}.{name}" for ns, name in re.findall(r"\b(community|ansible|containers)\.(\w+)\.\w+", text)} - {
        "ansible.builtin"
    }


def test_requirements_list_every_collection_used_at_the_version_the_checkout_installs() -> None:
    listed = yaml.safe_load((ROOT / "requirements/collections.yml").read_text())["collections"]
    required = {entry["name"]: entry["version"] for entry in listed}
    assert used_collections() <= set(required)
    for name, version in required.items():
        manifest = json.loads((SITE / name.replace(".", "/") / "MANIFEST.json").read_text())
        assert manifest["collection_info"]["version"] == version, name


def test_the_collection_declares_what_its_shipped_content_uses_at_the_tested_floor() -> None:
    """`ansible-galaxy collection install` of the artifact brings what the shipped roles and playbooks call: galaxy.yml's
    dependencies name every collection they use (the sandbox's community.docker is no dependency: it is unshipped), each
    at the floor requirements/collections.yml pins."""
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    ignored = set(galaxy["build_ignore"])
    shipped = [
        path
        for pattern in ("roles/**/*.yml", "playbooks/*.yml", "deploy.yml")
        for path in ROOT.glob(pattern)
        if not any(str(path.relative_to(ROOT)).startswith(prefix) for prefix in ignored)
    ]
    text = "\n".join(path.read_text() for path in shipped)
    found = re.findall(r"\b(community|ansible|containers)\.(\w+)\.\w+", text)
    used = {f"{ns}.{name}" for ns, name in found} - {"ansible.builtin"}
    listed = yaml.safe_load((ROOT / "requirements/collections.yml").read_text())["collections"]
    pinned = {entry["name"]: entry["version"] for entry in listed}
    assert set(galaxy["dependencies"]) == used == {"ansible.posix", "community.general"}
    for name, spec in galaxy["dependencies"].items():
        assert spec == f">={pinned[name]}", name


def test_the_checkout_is_the_collection_it_builds() -> None:
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"]) == ("sglang", "fleet")
    assert (ROOT / "collections/ansible_collections/sglang/fleet").resolve() == ROOT
    assert "roles/testhost" in galaxy["build_ignore"] and "simulator" in galaxy["build_ignore"], "the test double stays out"


def test_every_plugin_of_the_collection_documents_itself_as_ansible_doc_reads_it() -> None:
    """ansible-doc shows every module, action-backed module, lookup and callback: their DOCUMENTATION, EXAMPLES and
    RETURN are YAML Ansible parses (a plain line holding ': ' is not), with the required fields; every action plugin
    has its documentation under plugins/modules/."""
    import subprocess

    for kind, folder in (("module", "modules"), ("lookup", "lookup"), ("callback", "callback")):
        names = sorted(path.stem for path in (ROOT / "plugins" / folder).glob("*.py") if not path.stem.startswith("_"))
        shown = subprocess.run(
            [str(BIN / "ansible-doc"), "--json", "-t", kind, *(f"sglang.fleet.{name}" for name in names)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert shown.returncode == 0 and "ERROR" not in shown.stderr, shown.stderr
        docs = json.loads(shown.stdout)
        assert sorted(docs) == [f"sglang.fleet.{name}" for name in names]
        for name, doc in docs.items():
            assert doc["doc"]["short_description"] and doc["doc"]["description"], name
            if kind != "callback":  # examples call the plugin by its full name
                assert name in (doc["examples"] or ""), name
    actions = {path.stem for path in (ROOT / "plugins/action").glob("*.py") if not path.stem.startswith("_")}
    modules = {path.stem for path in (ROOT / "plugins/modules").glob("*.py")}
    assert actions <= modules, f"an action without its documentation in plugins/modules/: {sorted(actions - modules)}"


def test_the_model_lock_file_beside_the_hosts_is_no_inventory_source() -> None:
    """ansible.cfg ignores <inventory_dir>/model-lock.yml as an inventory source: read as one, its `models` key became an
    empty group and a warning on every run."""
    listed = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", "inventory/sandbox", "--list"],
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert (ROOT / "inventory/sandbox/model-lock.yml").exists()
    assert "models" not in json.loads(listed.stdout) and "WARNING" not in listed.stderr, listed.stderr
    assert set(json.loads(listed.stdout)["sglang_servers"]["hosts"]) == {"ct129", "b200"}


def test_every_shipped_role_has_a_readme_naming_its_entry_points() -> None:
    """galaxy-importer refuses a role without README.md; each names the role by its full name and every entry point."""
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    roles = [path for path in (ROOT / "roles").iterdir() if f"roles/{path.name}" not in galaxy["build_ignore"]]
    assert len(roles) == 6
    for role in roles:
        readme = (role / "README.md").read_text()
        assert f"sglang.fleet.{role.name}" in readme, role.name
        for entry_point in yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]:
            assert f"| `{entry_point}` |" in readme, (role.name, entry_point)


def test_every_filter_is_documented_for_ansible_doc() -> None:
    """`ansible-doc -t filter sglang.fleet.<name>` renders each filter: plugins/filter/<name>.yml, one per filter (the
    filters share files by concern), and no documentation of a filter that is gone."""
    listed = subprocess.run(
        [str(ROOT / ".venv/bin/ansible-doc"), "-t", "filter", "--list", "--json", "sglang.fleet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    filters = json.loads(listed.stdout)
    assert len(filters) >= 30 and all(description != "UNDOCUMENTED" for description in filters.values()), filters
    documented = {f"sglang.fleet.{path.stem}" for path in (ROOT / "plugins/filter").glob("*.yml")}
    assert documented == set(filters)
    shown = subprocess.run(
        [str(ROOT / ".venv/bin/ansible-doc"), "--json", "-t", "filter", *sorted(filters)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    for name, doc in json.loads(shown.stdout).items():
        assert re.search(rf"\| *'?{re.escape(name)}\b", doc["examples"]) or f"map('{name}'" in doc["examples"], name
        assert doc["return"]["_value"]["description"], name


def test_the_execution_environment_names_the_artifacts_it_stages() -> None:
    """ansible-builder create reads ee/requirements.yml (committed, so a fresh clone has it): sglang.fleet at galaxy.yml's
    version and every collection of requirements/collections.yml at its pin, as scripts/ee-image.sh stages them."""
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    definition = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
    assert definition["dependencies"]["galaxy"] == "ee/requirements.yml"
    named = {entry["name"] for entry in yaml.safe_load((ROOT / "ee/requirements.yml").read_text())["collections"]}
    assert f"collections/sglang-fleet-{galaxy['version']}.tar.gz" in named
    for entry in yaml.safe_load((ROOT / "requirements/collections.yml").read_text())["collections"]:
        assert f"collections/{entry['name'].replace('.', '-')}-{entry['version']}.tar.gz" in named, entry["name"]
