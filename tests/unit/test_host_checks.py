"""Preflight checks of the CUDA and venv roles: driver, runtime, Python and glibc."""

from __future__ import annotations

from ansible_collections.sglang.fleet.plugins.filter.cuda import cuda_problems
from ansible_collections.sglang.fleet.plugins.filter.sglang_venv import sglang_venv_problems

RUNTIMES = ["sglang", "simulator"]


def venv(
    python: str = "3.11",
    installs: bool = False,
    glibc: str = "2.36",
    runtime: str = "sglang",
    rc: int = 0,
    version: str = "0.5.23",
    router: str = "1.13.0",
) -> list[str]:
    result = {"rc": rc, "stdout": python, "stderr": "" if rc == 0 else "python3.9: not found"}
    return sglang_venv_problems("h", runtime, RUNTIMES, "python3", result, installs, glibc, version, router)


def test_supported_hosts_have_no_problems() -> None:
    assert venv("3.11") == [] and venv("3.12") == []


def test_python_outside_the_wheels_is_refused_unless_it_will_be_installed() -> None:
    (problem,) = venv("3.10")
    assert problem.startswith('h host: sglang_venv_python="python3": Python 3.10 cannot install SGLang 0.5.23\'s pinned packages')
    assert venv("3.10", installs=True) == []
    assert "3.14" in venv("3.14")[0]


def test_missing_python_old_glibc_and_unknown_runtime() -> None:
    assert "does not run (python3.9: not found)" in venv(rc=2)[0]
    assert "manylinux_2_34: they need glibc 2.34 or newer" in venv(glibc="2.31")[0]
    assert "unknown runtime" in venv(runtime="vllm")[0]


def test_driver_must_run_cuda_13() -> None:
    assert cuda_problems("h", "wheels", ["apt", "wheels", "none"], "580.95.05", 580, "13.0") == []
    (problem,) = cuda_problems("h", "wheels", ["apt", "wheels", "none"], "550.163.01", 580, "13.0")
    assert 'NVIDIA driver="550.163.01": CUDA 13.0 needs driver 580 or newer' in problem
    assert "unknown method" in cuda_problems("h", "conda", ["apt", "wheels", "none"], None, 580, "13.0")[0]


def test_python_is_checked_against_what_the_chosen_releases_constraints_install_on() -> None:
    """Each release's pinned package set resolves to wheels on 3.11 and 3.12 only (on 3.10 airportsdata, on 3.13
    outlines-core have no wheel), though SGLang 0.5.17 itself publishes cp310-cp313 wheels."""
    for version in [f"0.5.{n}" for n in range(17, 24)]:
        assert venv("3.11", version=version) == [] and venv("3.12", version=version) == []
        for python in ("3.10", "3.13"):
            (problem,) = venv(python, version=version)
            assert f"Python {python} cannot install SGLang {version}'s pinned packages (wheels for 3.11-3.12 only)" in problem
            assert venv(python, version=version, installs=True) == []


def test_the_retired_sglang_router_is_named_with_its_move() -> None:
    (problem,) = venv(router="0.3.2")
    assert problem.startswith('h host: sglang_venv_router_version="0.3.2": sglang-router is retired')
    assert "smg" in problem and "remove sglang_venv_router_version" in problem
    assert venv(router="1.13.0") == []
