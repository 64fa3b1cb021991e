"""A role reads another role's data only from a fact that role publishes in its preflight, and declares that fact in
its own argument spec: no role reads another's internal variables."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fleet import ROOT

# The deploy's roles after the plan. The plan runs first and publishes its own facts (sglang_instances,
# ansible_facts.sglang_host, ...).
ROLES = ["cuda", "sglang_venv", "sglang_server", "sglang_router"]
# What each role publishes in its preflight entry point, and the keys its consumers may read.
PUBLISHED = {
    "cuda": {"cuda_environment": {"CUDA_HOME", "PATH", "LD_LIBRARY_PATH"}},
    "sglang_venv": {"sglang_runtime": {"python", "module", "cuda_check", "environment", "installed"}},
    "sglang_server": {
        "sglang_service": {"user", "group", "home", "config_dir", "helper_dir", "secrets_dir", "tls_ca", "sandbox", "environment"}
    },
    "sglang_router": {"sglang_router": {"url", "keys_file", "admin_key", "gateways"}},
}
NAME = re.compile(r"(?<![\w.])((?:sglang|cuda)_\w+)")
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)


def strings(data: Any) -> Iterator[str]:
    """Every key and string value of a loaded YAML document (comments are not in it)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield str(key)
            yield from strings(value)
    elif isinstance(data, list):
        for item in data:
            yield from strings(item)
    elif isinstance(data, str):
        yield data


def yaml_files(role: str) -> list[Path]:
    base = ROOT / "roles" / role
    return sorted(path for folder in ("defaults", "vars", "tasks", "handlers") for path in (base / folder).glob("*.yml"))


def tasks(role: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted((ROOT / "roles" / role / "tasks").glob("*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            yield path.stem, task


def defined(role: str) -> set[str]:
    """The variables a role makes: its defaults and vars, its facts, its registered results and its tasks' vars."""
    names: set[str] = set()
    for folder in ("defaults", "vars"):
        path = ROOT / "roles" / role / folder / "main.yml"
        names.update((yaml.safe_load(path.read_text()) or {}) if path.exists() else {})
    for _, task in tasks(role):
        names.update(task.get("ansible.builtin.set_fact") or {})
        names.update(task.get("vars") or {})
        names.update([task["register"]] if "register" in task else [])
    return {name for name in names if NAME.fullmatch(name)}


def texts(role: str) -> list[str]:
    """What a role's YAML says (not its comments) and its templates' expressions."""
    found = [text for path in yaml_files(role) for text in strings(yaml.safe_load(path.read_text()))]
    templates = (ROOT / "roles" / role / "templates").glob("*.j2")
    return found + [expression for path in templates for expression in JINJA.findall(path.read_text())]


def used(role: str) -> set[str]:
    """The sglang_*/cuda_* names a role mentions."""
    return {name for text in texts(role) for name in NAME.findall(text)}


def spec(role: str) -> dict[str, Any]:
    specs: dict[str, Any] = yaml.safe_load((ROOT / "roles" / role / "meta/argument_specs.yml").read_text())["argument_specs"]
    return specs


def publisher(fact: str) -> str:
    return next(role for role, facts in PUBLISHED.items() if fact in facts)


@pytest.mark.parametrize("role", ROLES)
def test_a_role_reads_of_the_others_only_the_facts_its_argument_spec_declares(role: str) -> None:
    others = {name for other in ROLES if other != role for name in defined(other)} - defined(role)
    declared = {name for entry in spec(role).values() for name in entry.get("options") or {}}
    read = used(role) & others
    assert read <= declared, f"{role} reads another role's variables: {sorted(read - declared)}"
    facts = {fact for published in PUBLISHED.values() for fact in published}
    assert read <= facts, f"{role} declares another role's variables that are not published facts: {sorted(read - facts)}"


@pytest.mark.parametrize("role", ROLES)
def test_each_role_publishes_its_fact_in_its_preflight(role: str) -> None:
    """In its preflight; what only deploy's probe can tell (sglang_runtime.installed) is added in its checks, after it."""
    for fact, keys in PUBLISHED[role].items():
        values = [
            (file, task["ansible.builtin.set_fact"][fact])
            for file, task in tasks(role)
            if fact in (task.get("ansible.builtin.set_fact") or {})
        ]
        [value] = [value for file, value in values if file == "preflight"]
        # A dict, one expression of a dict literal ({'key': ..., ...}), the router's filter call that returns it, or a
        # field of what the sglang_venv role's preflight derived in Python (_sglang_venv_host, filter sglang_venv_host).
        derived = re.fullmatch(r"\{\{ _sglang_venv_host\.(\w+) \}\}", value) if isinstance(value, str) else None
        if derived:
            from venv_host import venv_host

            published = set(venv_host()[derived[1]])
        elif isinstance(value, str) and "sglang.fleet.sglang_router_published(" in value:
            from ansible_collections.sglang.fleet.plugins.filter.sglang_router_settings import sglang_router_published
            from fleet import router_settings

            published = set(sglang_router_published(router_settings(), "ct129", {}, []))
        else:
            published = set(value) if isinstance(value, dict) else set(re.findall(r"'(\w+)': ", value))
        added = {key for file, later in values if file == "checks" for key in re.findall(r"combine\(\{'(\w+)'", later)}
        assert {file for file, _ in values} <= {"preflight", "checks"} and published | added == keys
        assert fact in str(spec(role)["preflight"].get("description")), "the spec's preflight entry point documents it"
        assert re.search(rf"`{fact}`", (ROOT / "README.md").read_text())


def test_the_router_probe_request_is_made_after_every_host_published_its_router() -> None:
    """The gateway's planned workers are the hosts whose `sglang_router` names it, read through hostvars: a task that
    set both facts would read the other hosts' from before it ran (none, on the first host)."""
    steps = [task.get("ansible.builtin.set_fact") or {} for file, task in tasks("sglang_router") if file == "preflight"]
    publishes = next(index for index, facts in enumerate(steps) if "sglang_router" in facts)
    requests = next(index for index, facts in enumerate(steps) if "sglang_router_probe" in facts)
    assert publishes < requests
    [request] = [facts["sglang_router_probe"] for facts in steps if "sglang_router_probe" in facts]
    assert "'hostvars': hostvars" in request, "the gateway's workers: every host's sglang_router"


def test_the_router_fact_is_set_without_logging_its_admin_key() -> None:
    [task] = [task for _, task in tasks("sglang_router") if "sglang_router" in (task.get("ansible.builtin.set_fact") or {})]
    assert task.get("no_log") is True


ROLE_STEPS = ("ansible.builtin.import_role", "ansible.builtin.include_role")


def deploy_steps() -> list[dict[str, Any]]:
    """deploy.yml's tasks that import or include a role, in order."""
    [play] = yaml.safe_load((ROOT / "deploy.yml").read_text())
    return [task for task in play["tasks"] if any(step in task for step in ROLE_STEPS)]


def deploy_order() -> list[tuple[str, str]]:
    steps = [next(task[step] for step in ROLE_STEPS if step in task) for task in deploy_steps()]
    return [(step["name"], step.get("tasks_from", "main")) for step in steps]


def task_tags(path: Path, seen: set[Path] | None = None) -> set[str]:
    """The tags of the tasks of a task file and of the files it imports or includes (a templated name: every file it
    may name); those an include applies are the include's own."""
    seen = set() if seen is None else seen
    seen.add(path)
    found: set[str] = set()
    for task in yaml.safe_load(path.read_text()) or []:
        found.update(task.get("tags") or [])
        for step in ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks"):
            if step in task:
                name = task[step] if isinstance(task[step], str) else task[step]["file"]
                for named in sorted(path.parent.glob(JINJA.sub("*", name))):
                    found |= set() if named in seen else task_tags(named, seen)
    return found


def test_a_role_deploy_includes_has_no_tasks_with_tags_of_their_own() -> None:
    """An included role's tasks are reached only when the include itself is: a task tagged `configure` inside would not
    run under `--tags configure` (the include is not), and `--skip-tags run` on an include tagged `run` would skip its
    other tasks too. deploy.yml includes only roles whose tasks take their tags from the include (apply), so tags select
    them as they did imported."""
    includes = [task for task in deploy_steps() if "ansible.builtin.include_role" in task]
    assert includes, "deploy.yml includes the roles that run after the gate"
    for task in includes:
        role = task["ansible.builtin.include_role"]
        inner = task_tags(ROOT / "roles" / role["name"] / "tasks" / f"{role.get('tasks_from', 'main')}.yml")
        assert inner == set(), f"{task['name']}: its tasks have tags of their own: {sorted(inner)}; import the role"
        assert set((role.get("apply") or {}).get("tags") or []) == set(task.get("tags") or []), f"{task['name']}: applied"


# The published facts each role's entry points declare as options (cuda reads none; the runtime's checks parse as the
# servers' account, in their sandbox, and so does a runtime its main entry point installs: sglang_service).
REQUIRED = {
    "cuda": set(),
    "sglang_venv": {("main", "sglang_service")},
    "sglang_server": {
        *(
            (entry, fact)
            for entry in ("main", "configure", "run")
            for fact in ("sglang_runtime", "cuda_environment", "sglang_router")
        ),
        ("preflight", "sglang_runtime"),
        ("preflight", "cuda_environment"),
    },
    "sglang_router": {
        *((entry, fact) for entry in ("main", "before_roll") for fact in ("sglang_service", "sglang_runtime")),
        ("preflight", "sglang_service"),
    },
}


@pytest.mark.parametrize("role", ROLES)
def test_every_fact_an_entry_point_requires_is_published_before_it_runs(role: str) -> None:
    """A required dict option that is another role's fact; that role's preflight comes earlier in deploy.yml. Each
    role declares exactly the facts listed in REQUIRED, so a role that declares none is checked to declare none."""
    order = deploy_order()
    published = {fact for facts in PUBLISHED.values() for fact in facts}
    declared = {
        (entry, name): option
        for entry, options in spec(role).items()
        for name, option in (options.get("options") or {}).items()
        if name in published
    }
    assert set(declared) == REQUIRED[role]
    for (entry, name), option in declared.items():
        assert option["type"] == "dict" and option["required"] is True, (role, entry, name)
        # The server role's main entry point (configure and run) is not deploy's: it runs the two halves.
        if (role, entry) != ("sglang_server", "main"):
            assert order.index((publisher(name), "preflight")) < order.index((role, entry)), (role, entry, name)


@pytest.mark.parametrize(
    ("consumer", "fact"), [(consumer, fact) for consumer in ROLES for published in PUBLISHED.values() for fact in published]
)
def test_a_consumer_reads_only_keys_its_fact_has(consumer: str, fact: str) -> None:
    keys = {key for text in texts(consumer) for key in re.findall(rf"(?<![\w.]){fact}\.(\w+)", text)}
    assert keys <= PUBLISHED[publisher(fact)][fact], (consumer, fact, keys)


def test_ansible_checks_every_role_entry_point_s_arguments_in_every_playbook() -> None:
    """Ansible's own argument validation (meta/argument_specs.yml) runs before each role's tasks: no playbook turns it
    off for a role it imports or includes."""
    for path in [ROOT / "deploy.yml", *sorted((ROOT / "playbooks").glob("*.yml"))]:
        for play in yaml.safe_load(path.read_text()) or []:
            for task in [*(play.get("tasks") or []), *(play.get("pre_tasks") or []), *(play.get("roles") or [])]:
                step = next((task[name] for name in ROLE_STEPS if name in task), task if "role" in task else None)
                assert step is None or step.get("rolespec_validate", True), f"{path.name}: {task.get('name')}"


def called_by(path: Path) -> set[tuple[str, str]]:
    """(role, entry point) of every role step of the playbook at `path`."""
    called = set()
    for play in yaml.safe_load(path.read_text()) or []:
        for task in play.get("tasks") or []:
            step = next((task[name] for name in ROLE_STEPS if name in task), None)
            if step is not None:
                called.add((step["name"], step.get("tasks_from", "main")))
    return called


def entry_points_called() -> set[tuple[str, str]]:
    """(role, entry point) of every role step of deploy.yml and the playbooks."""
    return set().union(*(called_by(path) for path in [ROOT / "deploy.yml", *sorted((ROOT / "playbooks").glob("*.yml"))]))


def names_read(role: str, entry: str) -> set[str]:
    """The sglang_*/cuda_* names an entry point's task files read (its own and those it includes or imports)."""
    names: set[str] = set()
    pending_files, seen_files = [f"{entry}.yml"], set()
    while pending_files:  # the entry point's file and the task files it includes or imports
        file = pending_files.pop()
        seen_files.add(file)
        loaded = yaml.safe_load((ROOT / "roles" / role / "tasks" / file).read_text()) or []
        names |= {name for text in strings(loaded) for name in NAME.findall(text)}
        for task in loaded:
            step = task.get("ansible.builtin.include_tasks") or task.get("ansible.builtin.import_tasks")
            included = step.get("file") if isinstance(step, dict) else step
            # A templated name (tasks/{{ cuda_install_method }}.yml) may be any file it matches.
            candidates = (
                [path.name for path in (ROOT / "roles" / role / "tasks").glob(JINJA.sub("*", included))]
                if included and "{{" in included
                else [included]
                if included
                else []
            )
            pending_files += [candidate for candidate in candidates if candidate not in seen_files]
    return names


def settings_read(role: str, entry: str) -> set[str]:
    """The role's settings (its defaults) an entry point's task files read, directly or through the role's vars."""
    names = names_read(role, entry)
    derived = yaml.safe_load((ROOT / "roles" / role / "vars/main.yml").read_text()) or {}
    pending = set(names)
    while pending:
        name = pending.pop()
        if name in derived:
            new = {found for text in strings(derived[name]) for found in NAME.findall(text)} - names
            names |= new
            pending |= new
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults/main.yml").read_text()) or {}
    return names & set(defaults)


# Entry points that read no setting: an argument spec would only add a task that validates nothing to every run. The
# probe reads only its input, the list of the roles' request variables deploy.yml gives it, which its action checks.
NO_ARGUMENTS = {("sglang_plan", "gate"), ("sglang_plan", "probe")}
# Entry points that only deploy.yml calls, after its role's preflight in the same play: they read the settings that
# preflight validated and the facts it and deploy's probe published. A spec of their own would only validate them again,
# a task on every run.
AFTER_PREFLIGHT = {("sglang_venv", "checks"), ("sglang_server", "checks"), ("sglang_model", "checks")}


@pytest.mark.parametrize(("role", "entry"), sorted(entry_points_called()))
def test_every_entry_point_a_playbook_calls_declares_the_settings_it_reads(role: str, entry: str) -> None:
    """Ansible validates an entry point's arguments only where its meta/argument_specs.yml names it (remove and status
    had none); there, every setting of the role it reads is declared (and so documented). `checks` runs only after its
    role's preflight in deploy.yml, which validated every setting it reads."""
    if (role, entry) in NO_ARGUMENTS:
        assert entry not in spec(role) and settings_read(role, entry) == set(), (role, entry)
        return
    if (role, entry) in AFTER_PREFLIGHT:
        steps = deploy_order()
        assert entry not in spec(role) and (role, entry) in steps, (role, entry)
        assert (role, "preflight") in steps[: steps.index((role, entry))], f"{role}: {entry} runs before its preflight"
        assert all((role, entry) not in called_by(path) for path in sorted((ROOT / "playbooks").glob("*.yml")))
        declared = set(spec(role)["preflight"].get("options") or {})
        assert settings_read(role, entry) <= declared, sorted(settings_read(role, entry) - declared)
        # Another role's fact it reads: that role's preflight published it earlier in deploy.yml.
        for fact in names_read(role, entry) & {fact for owner, facts in PUBLISHED.items() if owner != role for fact in facts}:
            assert steps.index((publisher(fact), "preflight")) < steps.index((role, entry)), (role, entry, fact)
        return
    assert entry in spec(role), f"{role}: entry point {entry} has no argument spec"
    declared = set(spec(role)[entry].get("options") or {})
    assert settings_read(role, entry) <= declared, sorted(settings_read(role, entry) - declared)


@pytest.mark.parametrize("role", [*ROLES, "sglang_plan", "sglang_model"])
def test_no_role_runs_another_role_s_tasks(role: str) -> None:
    """Each role's tasks are its own: what two roles need (the servers' account) is an entry point of one of them that
    deploy.yml runs as its own step. (The test hosts' role is no deploy role.)"""
    for file, task in tasks(role):
        step = next((task[name] for name in ROLE_STEPS if name in task), None)
        assert step is None or step["name"] in (role, f"sglang.fleet.{role}"), f"{role}/tasks/{file}.yml: {task['name']}"


def test_deploy_makes_the_servers_account_before_the_runtime_that_parses_as_it() -> None:
    order = deploy_order()
    assert order.count(("sglang_server", "account")) == 1
    account = order.index(("sglang_server", "account"))
    assert account < order.index(("sglang_venv", "main")) < order.index(("sglang_server", "configure"))
    assert order.index(("sglang_plan", "gate")) < account


def test_deploy_restarts_the_routers_that_need_the_instances_ca_between_writing_and_rolling_the_instances() -> None:
    """One deploy turns the instances' TLS on: the server role writes their files and CA, then the routers that verify
    them with it restart (a router reads --ca-cert-paths only at its start), then the instances roll to https and go
    back into routers that can verify them; the rest of the router role (keys, reconcile) after the rollout."""
    order = deploy_order()
    configure, first = order.index(("sglang_server", "configure")), order.index(("sglang_router", "before_roll"))
    assert configure < first < order.index(("sglang_server", "run")) < order.index(("sglang_router", "main"))
    assert ("sglang_server", "main") not in order
    main = yaml.safe_load((ROOT / "roles/sglang_server/tasks/main.yml").read_text())
    assert [task["ansible.builtin.import_tasks"] for task in main] == ["configure.yml", "run.yml"]
    tags = {name: set(task["tags"]) for name, task in zip(("configure", "run"), main, strict=True)}
    for task in deploy_steps():
        step = next(task[name] for name in ROLE_STEPS if name in task)
        if step["name"] == "sglang_server" and step.get("tasks_from") in tags:
            assert tags[step["tasks_from"]] <= set(task["tags"]), task["name"]
