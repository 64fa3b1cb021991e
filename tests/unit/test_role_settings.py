"""Role settings derived in Python (plugins/filter/sglang_role_settings.py) instead of structures of templates in the
roles' vars."""

from __future__ import annotations

from typing import Any

import yaml
from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_router_processes
from fleet import ROOT

INSTANCES = [
    {"unit": "sglang-30000.service", "url": "http://127.0.0.1:30000", "served_model_name": "qwen"},
    {"unit": "sglang-30001.service", "url": "http://127.0.0.1:30001", "served_model_name": "qwen"},
]


def settings(**overrides: Any) -> dict[str, Any]:
    def process(kind: str, enabled: bool, port: int) -> dict[str, Any]:
        return {
            "enabled": enabled, "unit": f"sglang-{kind}.service", "url": f"http://127.0.0.1:{port}", "host": "127.0.0.1",
            "port": port, "prometheus_host": "127.0.0.2", "prometheus_port": port + 1, "keys_file": f"/etc/s/{kind}.json",
            "workers_file": f"/var/lib/sglang/{kind}-workers.json",
        }  # fmt: skip

    return {
        "router": process("router", True, 30080),
        "gateway": process("gateway", False, 30090),
        "displaced": [],
        "gateway_members": {},
        "gateway_models": [],
        **overrides,
    }


def test_the_host_s_router_fronts_its_instances() -> None:
    router, gateway = sglang_router_processes(INSTANCES, settings())
    assert router == {
        "kind": "router",
        "enabled": True,
        "unit": "sglang-router.service",
        "url": "http://127.0.0.1:30080",
        "port": 30080,
        "keys_file": "/etc/s/router.json",
        "description": "SGLang router on port 30080 in front of 2 instance(s)",
        "workers_file": "/var/lib/sglang/router-workers.json",
        "tls_files": [],
        "ca_file": "",
        "after": ["sglang-30000.service", "sglang-30001.service"],
        "by_model": False,
        "workers": ["http://127.0.0.1:30000", "http://127.0.0.1:30001"],
        "models": {"http://127.0.0.1:30000": "qwen", "http://127.0.0.1:30001": "qwen"},
        "keep": [],
        "displaced": [],
        "argv": ["--host", "127.0.0.1", "--port", "30080", "--prometheus-host", "127.0.0.2", "--prometheus-port", "30081"],
    }
    assert gateway["kind"] == "gateway" and gateway["enabled"] is False
    assert (gateway["workers"], gateway["keep"], gateway["models"], gateway["displaced"]) == ([], [], {}, [])


def test_a_gateway_over_tls_runs_with_its_certificate_and_key() -> None:
    """Issue 38, finding 8: smg 1.13.0's --tls-cert-path/--tls-key-path (tests/recordings/smg-1.13.0-tls)."""
    tls = {"tls_cert_path": "/etc/s/gateway-tls.pem", "tls_key_path": "/etc/s/gateway-tls.key", "ca_file": "/etc/s/ca.pem"}
    base = settings()
    _router, gateway = sglang_router_processes(INSTANCES, settings(gateway={**base["gateway"], "enabled": True, **tls}))
    assert gateway["argv"][-4:] == ["--tls-cert-path", "/etc/s/gateway-tls.pem", "--tls-key-path", "/etc/s/gateway-tls.key"]
    assert gateway["tls_files"] == ["/etc/s/gateway-tls.pem", "/etc/s/gateway-tls.key"]
    assert gateway["ca_file"] == "/etc/s/ca.pem"


def test_a_node_of_another_rank_than_0_is_no_worker_of_its_host_s_router() -> None:
    """Issue 43: an instance across hosts serves HTTP at its rank 0 alone; the router starts after its unit still."""
    other_rank = {**INSTANCES[1], "served_model_name": "llama", "serves_http": False}
    router, _gateway = sglang_router_processes([INSTANCES[0], other_rank], settings(displaced=["sglang-30001.service"]))
    assert router["workers"] == ["http://127.0.0.1:30000"] and router["models"] == {"http://127.0.0.1:30000": "qwen"}
    assert router["by_model"] is False and router["displaced"] == []
    assert router["after"] == ["sglang-30000.service", "sglang-30001.service"]


def test_several_models_and_a_reshape() -> None:
    two_models = [INSTANCES[0], {**INSTANCES[1], "served_model_name": "llama"}]
    (router, _gateway) = sglang_router_processes(two_models, settings(displaced=["sglang-30001.service"]))
    assert router["by_model"] is True, "in front of two models: the multi-model mode"
    assert router["displaced"] == ["http://127.0.0.1:30001"], "the instance a new shape stops first is drained"
    disabled = settings(router={**settings()["router"], "enabled": False})
    assert sglang_router_processes(two_models, disabled)[0]["by_model"] is False


def test_the_gateway_takes_its_members_only_where_it_runs() -> None:
    members = {
        "workers": ["http://10.0.0.2:30000"],
        "keep": ["10.0.0.9"],
        "models": {"http://10.0.0.2:30000": "q"},
        "displaced": [],
    }
    enabled = {**settings()["gateway"], "enabled": True}
    _router, gateway = sglang_router_processes(
        INSTANCES, settings(gateway=enabled, gateway_members=members, gateway_models=["q", "l"])
    )
    assert (gateway["workers"], gateway["keep"], gateway["models"]) == (members["workers"], ["10.0.0.9"], members["models"])
    assert gateway["by_model"] is True and gateway["after"] == []
    assert gateway["description"] == "SGLang fleet gateway on port 30090 in front of the fleet's instances"
    _router, off = sglang_router_processes(INSTANCES, settings(gateway_members=members, gateway_models=["q", "l"]))
    assert (off["workers"], off["by_model"]) == ([], False), "a host that runs no gateway registers nothing"


def test_the_role_s_processes_are_those_its_templates_gave() -> None:
    """The role's processes (its preflight's settings task, then filter sglang_router_probe_request: one call each) are
    what the list of templates they replaced rendered (tests/fixtures/router_processes_templated.yml), for a host with a
    router in front of two models, a gateway in front of another host's instance too, and a reshape that stops one
    instance first; with what the unit adds to every process (the routers' account, the launcher, the common flags)."""
    from ansible.plugins.filter.core import FilterModule as CoreFilters
    from ansible.plugins.filter.mathstuff import FilterModule as MathFilters
    from ansible_collections.sglang.fleet.plugins.filter.sglang_router_settings import sglang_router_probe_request
    from fleet import router_settings
    from jinja2.nativetypes import NativeEnvironment

    environment = NativeEnvironment()
    environment.filters.update({**CoreFilters().filters(), **MathFilters().filters()})
    two_models = [INSTANCES[0], {**INSTANCES[1], "served_model_name": "llama"}]
    remote = {"unit": "sglang-30000.service", "url": "http://127.0.0.1:30000", "remote_url": "http://10.0.0.2:30000",
              "served_model_name": "q"}  # fmt: skip
    hostvars: dict[str, Any] = {
        "ct129": {"sglang_instances": two_models, "sglang_router": {"gateways": []}, "sglang_served_model_name": "qwen"},
        "b200": {"sglang_instances": [remote], "sglang_router": {"gateways": [{"host": "ct129"}]}},
        "c9": {"sglang_advertise_host": "10.0.0.9", "sglang_served_model_name": "q"},
    }
    changes: dict[str, Any] = {
        "sglang_router_enabled": True, "sglang_router_host": "127.0.0.1", "sglang_router_port": 30080,
        "sglang_router_prometheus_host": "127.0.0.2", "sglang_router_prometheus_port": 29000,
        "sglang_gateway_hosts": ["ct129"], "sglang_gateway_host": "0.0.0.0", "sglang_gateway_port": 30090,
        "sglang_gateway_prometheus_host": "10.0.0.3", "sglang_gateway_prometheus_port": 29001,
    }  # fmt: skip
    settings = router_settings("ct129", **changes)
    context = {"role_path": "/r", "instances": two_models, "hostvars": hostvars, "server_hosts": ["ct129", "b200", "c9"],
               "run_hosts": ["b200"], "reshape": {"displaced": ["sglang-30001.service"]}}  # fmt: skip
    after = sglang_router_probe_request(settings, "ct129", context)["decide"]["processes"]
    members = {"workers": ["http://10.0.0.2:30000"], "keep": ["10.0.0.9", "ct129"],
               "models": {"http://10.0.0.2:30000": "q"}, "displaced": []}  # fmt: skip
    variables: dict[str, Any] = {
        **changes,
        "sglang_instances": two_models,
        "sglang_reshape": context["reshape"],
        "_sglang_router_account": settings["account"],
        "_sglang_router_unit": "sglang-router.service",
        "_sglang_router_gateway_unit": "sglang-gateway.service",
        "_sglang_router_url": "http://127.0.0.1:30080",
        "_sglang_router_gateway_url": "http://127.0.0.1:30090",
        "_sglang_router_keys_file": "/etc/sglang-router/router.json",
        "_sglang_router_gateway_keys_file": "/etc/sglang-router/gateway.json",
        "_sglang_router_gateway_enabled": True,
        "_sglang_router_gateway_members": members,
        "_sglang_router_tls": {"ca_file": ""},
        "_sglang_router_by_model": True,
        "_sglang_router_gateway_by_model": True,
    }

    def render(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: render(item) for key, item in value.items()}
        if isinstance(value, list):
            return [render(item) for item in value]
        return environment.from_string(value).render(**variables) if isinstance(value, str) else value

    fixture = yaml.safe_load((ROOT / "tests/fixtures/router_processes_templated.yml").read_text())
    before = render(fixture["_sglang_router_processes"])
    common = {"user": "sglang-router", "group": "sglang-router", "state_dir": "/var/lib/sglang-router",
              "launcher": "/usr/local/lib/sglang-fleet/sglang_router_launcher.py", "helper_dir": "/usr/local/lib/sglang-fleet",
              "policy": "cache_aware",
              "common_args": ["--policy", "cache_aware", "--health-check-interval-secs", "5", "--log-level", "warn"]}  # fmt: skip
    assert after == [{**process, **common} for process in before]
    assert after[0]["displaced"] == ["http://127.0.0.1:30001"] and after[1]["workers"] == members["workers"]


def test_the_venv_s_python_as_the_probe_found_it() -> None:
    from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_venv_python

    assert sglang_venv_python("python3", {"python3": "3.12"}, {"skipped": True}, True, "Ubuntu") == {
        "answer": {"rc": 0, "stdout": "3.12"},
        "found": "3.12",
        "installs": False,
        "interpreter": "python3",
        "tag": "312",
        "minor": "3.12",
    }
    older = sglang_venv_python("python3", {"python3": "3.10"}, {}, True, "Ubuntu")
    assert (older["installs"], older["interpreter"], older["tag"], older["minor"]) == (True, "/usr/bin/python3.11", "311", "3.11")
    assert sglang_venv_python("python3", {"python3": "3.10"}, {}, False, "Ubuntu")["installs"] is False, "not asked to"
    assert sglang_venv_python("python3", {"python3": "3.10"}, {}, True, "Debian")["installs"] is False, "Ubuntu only"
    assert sglang_venv_python("python3", {"python3": "2.7"}, {}, True, "Ubuntu")["installs"] is False, "not a Python 3"


def test_a_python_that_gave_no_version_answers_as_it_failed() -> None:
    from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_venv_python

    asked = {"rc": 0, "stdout": "3.11\n", "stderr": ""}
    found = sglang_venv_python("/opt/py/bin/python", {"python3": "3.12"}, asked, True, "Ubuntu")
    assert (found["answer"], found["found"], found["installs"], found["tag"]) == (asked, "3.11", False, "311")
    missing = sglang_venv_python("python9", {}, {"rc": 2, "msg": "No such file"}, True, "Ubuntu")
    assert (missing["found"], missing["installs"], missing["tag"], missing["interpreter"]) == ("", False, "311", "python9")
    assert missing["answer"]["rc"] == 2, "the failed answer reaches the checks, which name the variable"


def test_the_venv_s_python_as_the_plan_s_gathering_asked_it() -> None:
    """The plan's gathering asks sglang_venv_python with the usual names (module option `pythons`): its version, or
    why it gave none (python_errors), which the venv's checks name."""
    from ansible_collections.sglang.fleet.plugins.filter.sglang_venv import sglang_venv_problems
    from venv_host import venv_host

    facts = {"python_versions": {"python3": "3.11", "/opt/py/bin/python": "3.12"}, "glibc_version": "2.36"}
    found = venv_host(python="/opt/py/bin/python", host_facts=facts)["python"]
    assert (found["answer"], found["tag"]) == ({"rc": 0, "stdout": "3.12"}, "312")
    failed = {**facts, "python_errors": {"python3.9": "not found"}}
    missing = venv_host(python="python3.9", host_facts=failed)["python"]
    assert missing["answer"] == {"rc": 1, "stderr": "not found"}
    problems = sglang_venv_problems("h", "sglang", ["sglang"], "python3.9", missing["answer"], False, "2.36", "0.5.23")
    assert len(problems) == 1 and problems[0].startswith('h host: sglang_venv_python="python3.9": does not run (not found)')
    # Not asked: a value that reads the facts the gathering returns (it could not be known before), or no string.
    unasked = venv_host(python="python3.12", host_facts=facts)["python"]["answer"]
    assert unasked["rc"] == 1 and unasked["stderr"].startswith("not asked by the plan's gathering")
    problems = sglang_venv_problems("h", "sglang", ["sglang"], "python3.12", unasked, False, "2.36", "0.5.23")
    assert problems[0].endswith("fix: give sglang_venv_python a value that reads no fact of the host (host_vars, or group_vars"
                                " per kind of host)"), problems
    for odd in (["python3"], ""):
        answer = venv_host(python=odd, host_facts=facts)["python"]["answer"]
        assert (answer["rc"], answer["stderr"]) == (1, "not a name or a path"), odd


def test_the_wheelhouse_s_pins_or_the_top_level_ones(tmp_path: Any) -> None:
    from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_wheelhouse_pins

    requirements = tmp_path / "requirements-hashed.txt"
    requirements.write_text(
        "# pinned by sglang_venv_wheel_hashes\n"
        "sglang==0.5.23 --hash=sha256:aa\n"
        "torch==2.9.1 ; platform_machine == 'x86_64' --hash=sha256:bb\n"
        "    --hash=sha256:cc\n"
        "smg==1.13.0\n\n"
    )
    assert sglang_wheelhouse_pins(str(requirements), ["sglang==0.5.23"]) == ["sglang==0.5.23", "torch==2.9.1", "smg==1.13.0"]
    assert sglang_wheelhouse_pins(str(tmp_path / "absent.txt"), ["sglang==0.5.23", "smg==1.13.0"]) == [
        "sglang==0.5.23",
        "smg==1.13.0",
    ]


def test_the_wheelhouse_keeps_the_name_the_role_s_templates_gave_it() -> None:
    """The same name as `(lookup('file', constraints) ~ packages | join(' ')) | hash('sha256')` in the role's vars gave
    it: a new name would build every control node's wheelhouse (gigabytes) again."""
    from ansible.plugins.filter.core import FilterModule
    from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_wheelhouse_dir

    constraints = ROOT / "roles/sglang_venv/files/constraints-0.5.23.txt"
    packages = ["sglang==0.5.23", "smg==1.13.0"]
    digest = FilterModule().filters()["hash"](constraints.read_text().rstrip() + " ".join(packages), "sha256")
    expected = f"/cache/sglang-0.5.23-cp312-x86_64-glibc2.35-{digest[:12]}"
    assert sglang_wheelhouse_dir("/cache", "0.5.23", "312", "x86_64", 35, str(constraints), packages) == expected
    other = sglang_wheelhouse_dir("/cache", "0.5.23", "312", "x86_64", 35, str(constraints), ["sglang==0.5.23"])
    assert other != expected, "other pins: another wheelhouse"


def test_the_instances_sandbox_and_environment_as_the_role_s_templates_gave_them() -> None:
    from ansible.plugins.filter.core import FilterModule as CoreFilters
    from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import (
        sglang_server_environment,
        sglang_server_sandbox,
    )
    from ansible_collections.sglang.fleet.plugins.filter.systemd import FilterModule as SystemdFilters
    from fleet import collection_filters
    from jinja2.nativetypes import NativeEnvironment

    environment = NativeEnvironment()
    environment.filters.update(CoreFilters().filters())
    environment.filters.update(collection_filters(SystemdFilters))
    before = (
        "{{ ['User=' ~ sglang_server_user, 'Group=' ~ sglang_server_group, 'WorkingDirectory=' ~ sglang_server_home,"
        " 'LimitNOFILE=65536', 'UMask=0027', 'DevicePolicy=closed', 'DeviceAllow=/dev/nvidiactl rw',"
        " 'DeviceAllow=/dev/nvidia-uvm rw', 'DeviceAllow=/dev/nvidia-uvm-tools rw']"
        " + ([sglang_server_home, '-' ~ sglang_server_cache_dir] + sglang_server_read_write_paths)"
        " | sglang.fleet.systemd_hardening }}"
    )
    variables = {"sglang_server_user": "svc", "sglang_server_group": "grp", "sglang_server_home": "/var/lib/s",
                 "sglang_server_read_write_paths": ["/srv/cache", "/data"],
                 "sglang_server_cache_dir": "/var/cache/k"}  # fmt: skip
    sandbox = sglang_server_sandbox("svc", "grp", "/var/lib/s", ["/srv/cache", "/data"], "/var/cache/k")
    rendered: Any = environment.from_string(before).render(**variables)
    assert sandbox == rendered
    assert "ReadWritePaths=/var/lib/s -/var/cache/k /srv/cache /data" in sandbox and sandbox[:2] == ["User=svc", "Group=grp"]
    cuda = {"CUDA_HOME": "/usr/local/cuda", "HOME": "/root"}
    runtime = {"SGLANG_SIM_VERSION": "0.5.23", "HF_HOME": "/elsewhere"}
    runtime["TRITON_CACHE_DIR"] = "/runtime/triton"
    assert sglang_server_environment(cuda, "/var/lib/s", runtime, "/var/cache/k") == {
        "CUDA_HOME": "/usr/local/cuda",
        "HOME": "/var/lib/s",
        "HF_HOME": "/elsewhere",
        "SGLANG_JIT_CACHE_DIR": "/var/cache/k/sglang-jit",
        "TVM_FFI_CACHE_DIR": "/var/cache/k/tvm-ffi",
        "TRITON_CACHE_DIR": "/runtime/triton",
        "FLASHINFER_WORKSPACE_BASE": "/var/cache/k/flashinfer",
        "DG_JIT_CACHE_DIR": "/var/cache/k/deep_gemm",
        "TORCHINDUCTOR_CACHE_DIR": "/var/cache/k/inductor",
        "SGLANG_SIM_VERSION": "0.5.23",
    }, "the service's home over CUDA's, the caches under cache_dir, the runtime's over all"


# The templates of roles/sglang_venv/vars/main.yml that filter sglang_venv_host replaced (main before issue 37's
# sglang_venv part), in dependency order: each is rendered with the ones above it.
VENV_TEMPLATES = r"""
_sglang_venv_path: "{{ sglang_venv_root }}/{{ sglang_venv_runtime }}-{{ sglang_version }}"
_sglang_venv_bin: "{{ _sglang_venv_path }}/bin"
_sglang_venv_packages:
  sglang: ["sglang=={{ sglang_version }}", "smg=={{ sglang_venv_router_version }}"]
  simulator: ["smg=={{ sglang_venv_router_version }}"]
_sglang_venv_constraints: "{{ role_path }}/files/constraints-{{ sglang_version }}.txt"
_sglang_venv_python: >-
  {{ sglang_venv_python | sglang_venv_python(ansible_facts.sglang_host.python_versions | default({}),
                                             _sglang_venv_python_version | default({}),
                                             sglang_venv_python_install, ansible_facts.distribution | default('')) }}
_sglang_venv_glibc_minor: "{{ (ansible_facts.sglang_host.glibc_version | default('2.34')).split('.')[1] | int }}"
_sglang_venv_wheelhouse_dir: >-
  {{ sglang_venv_wheelhouse_cache | sglang_wheelhouse_dir(sglang_version, _sglang_venv_python.tag, ansible_facts.architecture,
     _sglang_venv_glibc_minor, _sglang_venv_constraints, _sglang_venv_packages.sglang) }}
_sglang_venv_cuda_check:
  sglang: ["{{ _sglang_venv_bin }}/python", "{{ _sglang_venv_path }}/cuda_smoke_check.py"]
  simulator: ["{{ _sglang_venv_bin }}/python", -m, sglang_simulator.cuda_check]
_sglang_venv_checker: "{{ _sglang_venv_path }}/check_server_args.py"
_sglang_venv_args_checker: >-
  {{ [_sglang_venv_bin ~ '/python', '-I', _sglang_venv_checker] + _sglang_venv_args_parser[sglang_venv_runtime] }}
_sglang_venv_parse_input: "{{ sglang_instances | sglang_checked_command_lines | to_json }}"
_sglang_venv_runtime_default_environment:
  sglang: {}
  simulator:
    SGLANG_SIM_VERSION: "{{ sglang_version }}"
_sglang_venv_server_environment: >-
  {{ _sglang_venv_runtime_default_environment[sglang_venv_runtime] | default({}) | combine(sglang_venv_runtime_environment) }}
_sglang_venv_parsed_marker: >-
  {{ _sglang_venv_path | sglang_venv_parsed_marker(_sglang_venv_parse_input, _sglang_venv_args_checker,
                                                   _sglang_venv_server_environment, role_path ~ '/files/check_server_args.py') }}
_sglang_venv_simulator_dir: >-
  {{ _sglang_venv_path }}/simulator/{{ _sglang_venv_simulator_archive | basename | regex_replace('\\.tar\\.gz$', '') }}
_sglang_venv_host_wheelhouse_dir: "{{ sglang_venv_host_wheelhouse }}/sglang-{{ sglang_version }}"
_sglang_venv_footprint: "{{ _sglang_venv_footprints[sglang_venv_runtime][sglang_version] | default({}) }}"
_sglang_venv_room_places:
  venv_root: "{{ sglang_venv_root }}"
  venv: "{{ _sglang_venv_path }}"
  venvs: "{{ sglang_venv_root }}/{{ sglang_venv_runtime }}-*"
  host_wheelhouse: "{{ sglang_venv_host_wheelhouse }}"
  archive: "{{ _sglang_venv_host_wheelhouse_dir }}.tar"
  unpacked: "{{ _sglang_venv_host_wheelhouse_dir }}/.unpacked-*"
"""


def old_venv_vars(runtime: str, facts: dict[str, Any], **variables: Any) -> dict[str, Any]:
    """The role's vars as those templates gave them for a host, with Ansible's own filters."""
    import jinja2
    from ansible.plugins.filter.core import FilterModule as CoreFilters
    from ansible.plugins.filter.mathstuff import FilterModule as MathFilters
    from ansible_collections.sglang.fleet.plugins.filter import sglang_role_settings as role_settings
    from ansible_collections.sglang.fleet.plugins.module_utils.parser_check import checked_command_lines
    from jinja2.nativetypes import NativeEnvironment
    from venv_host import DEFAULTS, ROLE, ROLE_VARS

    environment = NativeEnvironment(undefined=jinja2.ChainableUndefined)  # as Ansible's, for `x[a][b] | default`
    environment.filters.update(CoreFilters().filters() | MathFilters().filters())
    environment.filters["default"] = jinja2.filters.do_default  # Ansible's own expects its templar's undefined
    environment.filters.update(
        sglang_venv_python=role_settings.sglang_venv_python, sglang_wheelhouse_dir=role_settings.sglang_wheelhouse_dir,
        sglang_venv_parsed_marker=role_settings.sglang_venv_parsed_marker, sglang_checked_command_lines=checked_command_lines,
    )  # fmt: skip
    known: dict[str, Any] = {
        **{name: value for name, value in DEFAULTS.items() if "{{" not in str(value)}, **ROLE_VARS,
        "role_path": str(ROLE), "sglang_version": "0.5.23", "sglang_venv_runtime": runtime, "ansible_facts": facts,
        "sglang_venv_wheelhouse_cache": "/home/me/.cache/sglang-fleet/wheelhouse", **variables,
    }  # fmt: skip

    def one(template: Any) -> Any:
        if isinstance(template, dict):
            return {key: one(value) for key, value in template.items()}
        if isinstance(template, list):
            return [one(item) for item in template]
        return environment.from_string(template).render(**known) if isinstance(template, str) else template

    for name, template in yaml.safe_load(VENV_TEMPLATES).items():
        if name == "_sglang_venv_wheelhouse_dir" and runtime != "sglang":
            continue  # read for SGLang only
        known[name] = one(template)
    return known


INSTANCES_TO_PARSE = [
    {"name": "sglang-30000", "argv": ["--port", "30000", "--model-path", "/m"], "config_file": "/etc/k.yaml", "tls_files": []},
    {"name": "sglang-30001", "argv": ["--port", "30001", "--model-path", "/m"]},
]


def test_the_venv_host_derives_what_the_role_s_templates_did() -> None:
    """Every path, argv, name and digest the role's vars templated, for each runtime: the same values (a converged host
    stays converged: its venv, wheelhouse and parsed marker keep their names)."""
    from venv_host import venv_host

    facts = {"sglang_host": {"python_versions": {"python3": "3.12"}, "glibc_version": "2.39"}, "architecture": "aarch64",
             "distribution": "Ubuntu"}  # fmt: skip
    for runtime, archive in (("sglang", ""), ("simulator", "/home/me/.cache/sglang-fleet/sglang_simulator-0123abcd.tar.gz")):
        old = old_venv_vars(runtime, facts, sglang_instances=INSTANCES_TO_PARSE, _sglang_venv_simulator_archive=archive,
                            sglang_venv_runtime_environment={"SGLANG_SIM_LOAD_SECONDS": "1"})  # fmt: skip
        new = venv_host(
            runtime, distribution="Ubuntu", architecture="aarch64", host_facts=facts["sglang_host"], instances=INSTANCES_TO_PARSE,
            simulator_archive=archive, runtime_environment={"SGLANG_SIM_LOAD_SECONDS": "1"},
        )  # fmt: skip
        assert [new["path"], new["bin"], new["checker"]] == [old[f"_sglang_venv_{name}"] for name in ("path", "bin", "checker")]
        assert new["python"] == old["_sglang_venv_python"] and new["python"]["tag"] == "312"
        assert new["packages"] == old["_sglang_venv_packages"][runtime]
        assert new["args_checker"] == old["_sglang_venv_args_checker"]
        assert new["parse_input"] == old["_sglang_venv_parse_input"]
        assert new["parsed_marker"] == old["_sglang_venv_parsed_marker"], "a converged host does not parse again"
        assert new["runtime"] == {
            "python": f"{old['_sglang_venv_bin']}/python", "module": ROLE_MODULES[runtime],
            "cuda_check": old["_sglang_venv_cuda_check"][runtime], "environment": old["_sglang_venv_server_environment"],
        }  # fmt: skip
        assert new["host_wheelhouse"]["dir"] == old["_sglang_venv_host_wheelhouse_dir"]
        assert new["room"] == old["_sglang_venv_room_places"] and new["footprint"] == old["_sglang_venv_footprint"]
        if runtime == "sglang":
            assert new["wheelhouse"]["dir"] == old["_sglang_venv_wheelhouse_dir"], "the control node's cache is found again"
            assert new["wheelhouse"]["glibc_minor"] == 39 and new["simulator"] == {"archive": "", "dir": ""}
            assert new["footprint"]["wheels_bytes"] > 0
        else:
            assert new["simulator"] == {"archive": archive, "dir": old["_sglang_venv_simulator_dir"]}
            assert new["wheelhouse"]["dir"] == "" and not new["wheelhouse"]["complete"]


ROLE_MODULES = {"sglang": "sglang.launch_server", "simulator": "sglang_simulator"}


def test_the_venv_host_s_probe_request_is_the_one_the_role_built() -> None:
    from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_venv_request
    from venv_host import venv_host

    host = venv_host("simulator", simulator_archive="/c/sglang_simulator-1.tar.gz", instances=INSTANCES_TO_PARSE)
    assert host["request"] == sglang_venv_request("simulator", {
        "runtimes": ["sglang", "simulator"], "root": "/opt/sglang", "path": host["path"], "version": "0.5.23",
        "keep_previous": 1, "checker": host["checker"], "marker": host["parsed_marker"],
        "os_packages": ["python3-venv", "python3-packaging"], "python_installs": False, "python_minor": "3.11",
        "packages": ["smg==1.13.0"], "pins_file": "",
        "simulator_dir": "/opt/sglang/simulator-0.5.23/simulator/sglang_simulator-1",
        "files_dir": str(ROOT / "roles/sglang_venv/files"), "room": host["room"],
        "host_wheelhouse": "/var/cache/sglang-fleet/wheelhouse",
    })  # fmt: skip
    assert host["parsed_marker"] in host["request"]["read"]["globs"]
    # Not Debian: no OS packages to compare; Ubuntu's Python 3.10: python3.11 installed, and read.
    assert venv_host("sglang", os_family="RedHat")["request"]["read"]["packages"] == {}
    older = venv_host("sglang", distribution="Ubuntu", host_facts={"python_versions": {"python3": "3.10"}})
    assert older["python"]["interpreter"] == "/usr/bin/python3.11" and older["python"]["tag"] == "311"
    assert {"python3.11", "python3.11-venv"} <= set(older["request"]["read"]["packages"])
    assert older["wheelhouse"]["glibc_minor"] == 34, "no glibc found: manylinux_2_34's wheels, as before"


def test_the_venv_host_of_a_release_or_runtime_it_cannot_install(tmp_path: Any) -> None:
    """A release without its constraints file (the plan refuses it, at the gate) or an unknown runtime (the venv checks
    refuse it): derived without an error, nothing read for the unknown runtime."""
    from venv_host import venv_host

    release = venv_host("sglang", version="0.4.0")
    assert release["wheelhouse"]["dir"] == "" and release["footprint"] == {}
    assert release["request"]["read"]["venvs"][0]["pins"] == ["sglang==0.4.0", "smg==1.13.0"], "the top-level pins"
    unknown = venv_host("conda")
    assert unknown["request"]["read"] == {} and unknown["parsed_marker"] == "" and unknown["runtime"]["module"] == ""
    assert unknown["packages"] == [] and unknown["runtime"]["cuda_check"] == []


def test_the_venv_host_knows_a_complete_wheelhouse(tmp_path: Any) -> None:
    from venv_host import venv_host

    house = venv_host("sglang", wheelhouse_cache=str(tmp_path))["wheelhouse"]
    assert not house["complete"] and house["dir"].startswith(f"{tmp_path}/sglang-0.5.23-cp311-x86_64-glibc2.36-")
    assert house["cache"] == str(tmp_path), "where checks look for the control node's room"
    (tmp_path / house["dir"]).mkdir()
    (tmp_path / house["dir"] / ".complete").write_text("sglang==0.5.23\n")
    assert venv_host("sglang", wheelhouse_cache=str(tmp_path))["wheelhouse"]["complete"]
    host = venv_host("sglang")["host_wheelhouse"]
    copy = "/var/cache/sglang-fleet/wheelhouse/sglang-0.5.23"
    assert host["pip_args"] == ["--no-index", "--find-links", copy, "--require-hashes", "--constraint", f"{copy}/constraints.txt"]
