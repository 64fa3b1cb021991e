"""The wheelhouse the host installs SGLang from: every wheel pinned with its hash (lookup plugin), unpacked as root's,
installed by pip with --require-hashes under the version's constraints (the argv rendered from the role)."""

from __future__ import annotations

import hashlib
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from jinja2.nativetypes import NativeEnvironment

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles/sglang_venv"

from ansible_collections.sglang.fleet.plugins.lookup import sglang_venv_wheel_hashes as hashes  # noqa: E402
from venv_host import ROLE_VARS, venv_host  # noqa: E402


def tasks() -> dict[str, dict[str, Any]]:
    return {task["name"]: task for task in yaml.safe_load((ROLE / "tasks/sglang.yml").read_text())}


def task_with(module: str) -> dict[str, Any]:
    (found,) = [task[module] for task in tasks().values() if module in task]
    return dict(found)


def render(expression: Any, **variables: Any) -> Any:
    """A role expression as Ansible renders it: preflight's fact (filter sglang_venv_host, with `variables` as its
    settings), the role's plain vars, and Ansible's quote filter."""
    environment = NativeEnvironment()
    environment.filters["quote"] = shlex.quote
    known: dict[str, Any] = {"_sglang_venv_host": venv_host(**variables), **ROLE_VARS}

    def one(template: Any) -> Any:
        if isinstance(template, list):
            return [one(item) for item in template]
        return environment.from_string(str(template)).render(**known)

    return one(expression)


def wheel(directory: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal pure-Python wheel of a one-module package."""
    module = name.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": f"VERSION = {version!r}\n",
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {req}\n" for req in requires),
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: sglang-fleet-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist_info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{dist_info}/RECORD"])
    path = directory / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("sglang-0.5.23-py3-none-any.whl", ("sglang", "0.5.23")),
        ("sglang_router-0.3.2-cp38-abi3-manylinux_2_28_x86_64.whl", ("sglang-router", "0.3.2")),
        ("smg-1.13.0-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", ("smg", "1.13.0")),
        (
            "nvidia_cuda_runtime_cu12-12.8.90-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
            ("nvidia-cuda-runtime-cu12", "12.8.90"),
        ),
        ("Jinja2-3.1.6-1-py3-none-any.whl", ("jinja2", "3.1.6")),
    ],
)
def test_wheel_file_names(filename: str, expected: tuple[str, str]) -> None:
    assert hashes.wheel_name_version(filename) == expected


def test_every_wheel_is_pinned_with_its_hash(tmp_path: Path) -> None:
    b = wheel(tmp_path, "fleet-b", "2.0")
    a = wheel(tmp_path, "fleet-a", "1.0", ("fleet-b",))
    other = tmp_path / "fleet_b-2.0-cp311-cp311-manylinux_2_17_x86_64.whl"
    other.write_bytes(b"another build of the same version")
    (tmp_path / "README.txt").write_text("not a wheel")
    text = hashes.hashed_requirements(tmp_path, ["fleet-a==1.0", "fleet_B==2.0"])
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == [
        f"fleet-a==1.0 --hash=sha256:{sha(a)}",
        "fleet-b==2.0 " + " ".join(f"--hash=sha256:{digest}" for digest in sorted([sha(b), sha(other)])),
    ]


@pytest.mark.parametrize(
    ("files", "required", "message"),
    [
        ([], [], "no wheels"),
        ([("fleet-a", "1.0"), ("fleet-a", "1.1")], [], "two versions of fleet-a"),
        ([("fleet-a", "1.0")], ["sglang==0.5.23"], "sglang==0.5.23 is not in the wheelhouse"),
        ([("fleet-a", "1.0")], ["fleet-a==1.1"], "fleet-a==1.1 is not in the wheelhouse (it has 1.0)"),
    ],
)
def test_a_wheelhouse_that_cannot_be_pinned_is_an_error(
    tmp_path: Path, files: list[tuple[str, str]], required: list[str], message: str
) -> None:
    for name, version in files:
        wheel(tmp_path, name, version)
    with pytest.raises(hashes.WheelhouseError, match=message.replace("(", r"\(").replace(")", r"\)")):
        hashes.hashed_requirements(tmp_path, required)


def test_the_lookup_fails_the_task_with_the_reason(tmp_path: Path) -> None:
    from ansible.errors import AnsibleError

    wheel(tmp_path, "fleet-a", "1.0")
    (text,) = hashes.LookupModule().run([str(tmp_path)], required=["fleet-a==1.0"])
    assert "fleet-a==1.0 --hash=sha256:" in text
    with pytest.raises(AnsibleError, match=r"sglang_venv_wheel_hashes: .*sglang==0\.5\.23 is not in the wheelhouse"):
        hashes.LookupModule().run([str(tmp_path)], required=["sglang==0.5.23"])


def test_the_host_unpacks_as_root_and_mends_an_older_unpack() -> None:
    unpack = task_with("ansible.builtin.unarchive")
    assert (unpack["owner"], unpack["group"], unpack["mode"]) == ("root", "root", "0644")
    assert render(unpack["extra_opts"]) == ["--no-same-owner", "--no-same-permissions"]
    mend = tasks()["Keep every file of the host's wheelhouse root's, writable by root only"]["ansible.builtin.file"]
    assert mend["recurse"] is True and (mend["owner"], mend["group"], mend["mode"]) == ("root", "root", "u=rwX,go=rX")
    assert "when" not in tasks()["Keep every file of the host's wheelhouse root's, writable by root only"], "every run"
    packed = task_with("community.general.archive")["path"]
    house = venv_host(wheelhouse_cache="/cache")["wheelhouse"]["dir"]
    assert house.startswith("/cache/sglang-0.5.23-cp311-x86_64-glibc2.36-")
    assert [render(p, wheelhouse_cache="/cache") for p in packed] == [
        f"{house}/*.whl", f"{house}/requirements-hashed.txt", f"{house}/constraints.txt",
    ]  # fmt: skip


def pip_argv(wheelhouse: Path) -> list[str]:
    """The host's `pip install` arguments, as the pip module builds them: extra_args (split), then -r requirements."""
    install = task_with("ansible.builtin.pip")
    assert "name" not in install, "every wheel comes from the hashed requirements"
    variables = {"host_wheelhouse": str(wheelhouse.parent), "version": wheelhouse.name.split("-", 1)[1]}
    return [*shlex.split(render(install["extra_args"], **variables)), "-r", render(install["requirements"], **variables)]


def test_the_pip_arguments(tmp_path: Path) -> None:
    house = tmp_path / "sglang-0.5.23"
    assert pip_argv(house) == [
        "--no-index", "--find-links", str(house), "--require-hashes", "--constraint", f"{house}/constraints.txt",
        "-r", f"{house}/requirements-hashed.txt",
    ]  # fmt: skip


def pip_install(house: Path, target: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--target", str(target), *pip_argv(house)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_pip_installs_the_wheelhouse_only_when_every_hash_and_constraint_holds(tmp_path: Path) -> None:
    house = tmp_path / "sglang-0.5.23"
    house.mkdir()
    wheel(house, "fleet-a", "1.0", ("fleet-b",))
    b = wheel(house, "fleet-b", "2.0")
    (house / "requirements-hashed.txt").write_text(hashes.hashed_requirements(house, ["fleet-a==1.0"]))
    (house / "constraints.txt").write_text("fleet-a==1.0\nfleet-b==2.0\nunrelated==9\n")
    done = pip_install(house, tmp_path / "good")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "good/fleet_b/__init__.py").read_text() == "VERSION = '2.0'\n"

    (house / "constraints.txt").write_text("fleet-b==3.0\n")
    refused = pip_install(house, tmp_path / "constrained")
    assert refused.returncode != 0 and "fleet-b" in refused.stderr, "the constraints file is passed and holds"

    (house / "constraints.txt").write_text("fleet-b==2.0\n")
    b.write_bytes(b.read_bytes() + b"\0")  # rewritten after the hashes were taken
    tampered = pip_install(house, tmp_path / "tampered")
    assert tampered.returncode != 0 and "DO NOT MATCH THE HASHES" in tampered.stderr, tampered.stderr
