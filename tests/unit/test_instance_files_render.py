"""Action sglang_instance_files renders a template byte for byte as ansible.builtin.template does (its template
variables from Ansible's public generate_ansible_template_vars; an ansible_managed the user set is kept, as the template
action keeps it). Run through ansible-playbook on this machine (local connection)."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

import pytest
import yaml
from fleet import local_play

OWNER, GROUP = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_gid
TEMPLATE = """{{ ansible_managed | comment }}
# {{ template_path }} -> {{ template_destpath }}, by {{ template_uid }}
{% for name in names %}
{{ name | upper }}
{% endfor %}
  kept:   {{ extra }}
"""


@pytest.mark.parametrize("managed", [None, "Written by sglang-fleet"])
def test_a_template_is_rendered_as_the_template_action_renders_it(tmp_path: Path, managed: str | None) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates/unit.j2").write_text(TEMPLATE)
    attributes = {"owner": OWNER, "group": grp.getgrgid(GROUP).gr_name, "mode": "0640"}
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {"names": ["a", "b"], "extra": "x"} | ({"ansible_managed": managed} if managed else {}),
            "tasks": [
                {"ansible.builtin.template": {"src": "unit.j2", "dest": str(tmp_path / "by-template"), **attributes}},
                {
                    "sglang.fleet.sglang_instance_files": {
                        "files": [{"src": "unit.j2", "dest": str(tmp_path / "by-action"), "template": True, **attributes}]
                    },
                    "register": "written",
                },
                {"ansible.builtin.copy": {"dest": str(tmp_path / "written.yml"), "content": "{{ written | to_yaml }}"}},
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    run = local_play(tmp_path / "play.yml")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    by_action = (tmp_path / "by-action").read_text()
    by_action = by_action.replace(str(tmp_path / "by-action"), str(tmp_path / "by-template"))  # template_destpath
    assert by_action == (tmp_path / "by-template").read_text()
    assert ("Written by sglang-fleet" in by_action) == bool(managed), by_action
    assert "A\nB\n" in by_action and f"unit.j2 -> {tmp_path / 'by-template'}, by {OWNER}" in by_action
    assert yaml.safe_load((tmp_path / "written.yml").read_text())["changed_paths"] == [str(tmp_path / "by-action")]


def test_check_mode_gives_the_content_the_run_would_write_of_each_changed_instance_file_but_a_private_ones(
    tmp_path: Path,
) -> None:
    """sglang_rollout tells from it which instances a real run would update in place (module_utils/in_place.py)."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates/unit.j2").write_text("ExecStart=/bin/serve {{ sglang_server_instance.name }}\n")
    (tmp_path / "templates/env.j2").write_text("KEY=private\n")
    (tmp_path / "same.service").write_text("ExecStart=/bin/serve same\n")
    attributes = {"owner": OWNER, "group": grp.getgrgid(GROUP).gr_name, "mode": "0640"}
    os.chmod(tmp_path / "same.service", 0o640)
    instances = [
        {"name": name, "files": {"unit": str(tmp_path / f"{name}.service"), "environment": str(tmp_path / f"{name}.env")}}
        for name in ("new", "same")
    ]
    (tmp_path / "same.env").write_text("KEY=private\n")
    os.chmod(tmp_path / "same.env", 0o640)
    task = {
        "instances": instances,
        "templates": [
            {"src": "unit.j2", "file": "unit", "private": False, **attributes},
            {"src": "env.j2", "file": "environment", "private": True, **attributes},
        ],
    }
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {"sglang.fleet.sglang_instance_files": task, "register": "written", "check_mode": True},
                {"ansible.builtin.copy": {"dest": str(tmp_path / "written.yml"), "content": "{{ written | to_yaml }}"}},
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    run = local_play(tmp_path / "play.yml")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    written = yaml.safe_load((tmp_path / "written.yml").read_text())
    assert written["planned"] == {str(tmp_path / "new.service"): "ExecStart=/bin/serve new\n", str(tmp_path / "new.env"): None}
    assert not (tmp_path / "new.service").exists(), "check mode writes nothing"


def test_a_setting_the_instances_templates_read_is_templated_once_for_all_their_renders(tmp_path: Path) -> None:
    """Each render would template every variable it reads anew (a setting that is a template compiled again per instance
    and file): the action templates those that do not name the instance once, and the instance's own per render."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates/unit.j2").write_text("{{ shared }} {{ own }} {{ sglang_server_instance.name }}\n")
    (tmp_path / "templates/env.j2").write_text("{% for word in [shared] %}{{ word }}{% endfor %}\n")
    counter = tmp_path / "templated"
    names = ["a", "b", "c"]
    instances = [
        {"name": name, "files": {"unit": str(tmp_path / f"{name}.service"), "environment": str(tmp_path / f"{name}.env")}}
        for name in names
    ]
    attributes = {"owner": OWNER, "group": grp.getgrgid(GROUP).gr_name, "mode": "0644", "private": False}
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                # A line in `counter` each time Ansible templates it.
                "shared": "{{ lookup('ansible.builtin.pipe', 'echo . >> " + str(counter) + "') }}{{ base }}/x",
                "base": "/srv",
                "own": "{{ sglang_server_instance.name | upper }}",
            },
            "tasks": [
                {
                    "sglang.fleet.sglang_instance_files": {
                        "instances": instances,
                        "templates": [{"src": "unit.j2", "file": "unit", **attributes},
                                      {"src": "env.j2", "file": "environment", **attributes}],
                    }
                }
            ],
        }
    ]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    run = local_play(tmp_path / "play.yml")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for name in names:
        assert (tmp_path / f"{name}.service").read_text() == f"/srv/x {name.upper()} {name}\n"
        assert (tmp_path / f"{name}.env").read_text() == "/srv/x\n"
    assert counter.read_text() == ".\n", "templated once, not once per instance and template (6)"


def test_requests_given_by_their_variables_names_are_each_read_once_and_answered_under_the_request_s_name(
    tmp_path: Path,
) -> None:
    """deploy's probe: the roles' requests by the names of the variables that hold them (a fact as it was published; a
    variable that is one template, templated once), answered and decided under each request's own `name`, in order; a
    name that is no variable, or a `requests` that is neither a list nor a dict, fails the task, naming it."""
    (tmp_path / "same").write_text("same\n")
    os.chmod(tmp_path / "same", 0o644)
    counter = tmp_path / "templated"
    attributes = {"owner": OWNER, "group": grp.getgrgid(GROUP).gr_name, "mode": "0644"}
    plan_request = (
        "{{ {'name': 'sglang_plan', 'decide': {'verified_file': lookup('ansible.builtin.pipe', 'echo . >> "
        + str(counter)
        + "') ~ '/v.json', 'hashed': hashed}} }}"
    )
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {"hashed": ["a"], "plan_request": plan_request, "names": ["plan_request", "files_request"]},
            "tasks": [
                {"ansible.builtin.set_fact": {"files_request": {
                    "name": "files", "files": [{"content": "same\n", "dest": str(tmp_path / "same"), **attributes},
                                               {"content": "new\n", "dest": str(tmp_path / "new"), **attributes}]}}},
                {"sglang.fleet.sglang_instance_files": {"requests": "{{ names }}"}, "check_mode": True, "register": "probe"},
                {"ansible.builtin.copy": {"dest": str(tmp_path / "probe.yml"), "content": "{{ probe | to_yaml }}"}},
                {"sglang.fleet.sglang_instance_files": {"requests": ["no_such_request"]},
                 "check_mode": True, "register": "missing", "failed_when": False},
                {"ansible.builtin.copy": {"dest": str(tmp_path / "missing.yml"), "content": "{{ missing | to_yaml }}"}},
                {"sglang.fleet.sglang_instance_files": {"requests": "plan_request"},
                 "check_mode": True, "register": "bare", "failed_when": False},
                {"ansible.builtin.copy": {"dest": str(tmp_path / "bare.yml"), "content": "{{ bare | to_yaml }}"}},
            ],
        }
    ]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    run = local_play(tmp_path / "play.yml")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    probe = yaml.safe_load((tmp_path / "probe.yml").read_text())
    assert sorted(probe["answers"]) == ["files", "sglang_plan"]
    assert probe["answers"]["files"]["changed_paths"] == [str(tmp_path / "new")]
    assert probe["answers"]["sglang_plan"]["decision"] == {"changes": ["/v.json: 1 file(s) verified to record"]}
    assert probe["changes"] == ["/v.json: 1 file(s) verified to record"]
    assert counter.read_text() == ".\n", "the request variable templated once"
    assert not (tmp_path / "new").exists(), "check mode writes nothing"
    missing = yaml.safe_load((tmp_path / "missing.yml").read_text())
    assert "'no_such_request' is no variable of this host" in missing["msg"], missing
    bare = yaml.safe_load((tmp_path / "bare.yml").read_text())
    assert bare["msg"].startswith("requests: the requests by name, or a list"), bare


# Texts where one text rendered for every instance at once could differ from each rendered alone: a leading newline
# (after the scope's tag), trailing newlines (dropped and given back), a block tag at the end (trim_blocks), a value that
# ends with a newline at the end, the instance's own template_destpath (read directly, through a lookup, or through a
# variable), a value one render changes, a text that renders nothing or one value, one without Jinja (kept as it is, a
# CR LF included), a parent template, the template's own `loop` (in a loop's filter too), a name each render binds
# set by the template, and variables that read the instance or the template's own variables through a default.
EDGES = {
    "lead.j2": "\n{{ sglang_server_instance.name }} -> {{ template_destpath }}\n",
    "trail.j2": "{{ sglang_server_instance.name }}\n\n\n",
    "block.j2": "{% if sglang_server_instance.name %}\n{{ sglang_server_instance.name }}\n{% endif %}\n",
    "value.j2": "{% set line = sglang_server_instance.name ~ '\\n' %}{{ line }}",
    "bare.j2": "{{ sglang_server_instance.name }}",
    "loop.j2": "{% for word in [sglang_server_instance.name, 'x'] %}{{ loop.index }}={{ word }}\n{% endfor %}",
    "lookup.j2": "{{ lookup('ansible.builtin.vars', 'template_destpath') }} {{ lookup('ansible.builtin.vars', 'dest') }}\n",
    "shared.j2": "{% set _ = seen.append(sglang_server_instance.name) %}{{ seen }}\n",
    "nothing.j2": "{% if sglang_server_instance.name == 'b' %}x{% endif %}\n",
    "one.j2": "{{ sglang_server_instance.name | length }}\n",
    "static.j2": "no template\r\nat all\r\n",
    "child.j2": "{%+ extends 'parent.txt' %}{% block name %}{{ sglang_server_instance.name }}{% endblock %}\n",
    "filtered.j2": "{% for x in [1, 2] if loop is defined %}{{ x }}{% endfor %} {{ sglang_server_instance.name }}\n",
    "rebound.j2": "{% set template_destpath = 'x' %}{{ template_destpath }} {{ sglang_server_instance.name }}\n",
    "defaults.j2": "{{ label }} {{ header }} {{ dated }}\n",
}
# A variable that reads what each render names for itself, through `default` or `is defined`: templated per render.
VARIABLES = {
    "seen": [], "dest": "{{ template_destpath }}", "label": "{{ sglang_server_instance.name | default('server') }}",
    "header": "{{ ansible_managed | default('no header') }}", "dated": "{{ template_run_date is defined }}",
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EDGES))
def test_every_instance_s_file_is_what_the_template_action_writes_for_it(tmp_path: Path, name: str) -> None:
    """The action renders a template's text once for all the instances (one compile), and each instance's file is still
    byte for byte what ansible.builtin.template writes for that instance alone."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / name).write_bytes(EDGES[name].encode())
    (tmp_path / "templates/parent.txt").write_text("<{% block name %}{% endblock %}>\n")
    attributes = {"owner": OWNER, "group": grp.getgrgid(GROUP).gr_name, "mode": "0644"}
    instances = [{"name": each, "files": {"unit": str(tmp_path / f"{each}.action")}} for each in ("a", "b", "c")]
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": VARIABLES,
            "tasks": [
                {
                    "ansible.builtin.template": {"src": name, "dest": str(tmp_path / "{{ sglang_server_instance.name }}.action"),
                                                 **attributes},
                    "loop": instances,
                    "loop_control": {"loop_var": "sglang_server_instance"},
                },
                {"ansible.builtin.command": {"argv": ["sh", "-c", "for f in *.action; do mv $f ${f%.action}.template; done"],
                                             "chdir": str(tmp_path)}},
                {"sglang.fleet.sglang_instance_files": {"instances": instances,
                                                        "templates": [{"src": name, "file": "unit", "private": False,
                                                                       **attributes}]}},
            ],
        }
    ]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    run = local_play(tmp_path / "play.yml")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for each in ("a", "b", "c"):
        assert (tmp_path / f"{each}.action").read_bytes() == (tmp_path / f"{each}.template").read_bytes(), each
    assert f"{tmp_path / 'b.action'}" in (tmp_path / "b.action").read_text() or name != "lead.j2"


# Counts jinja2's compiles in ansible-playbook (the workers it forks inherit the count's hook): one line per compile.
COUNTING_SITE = """
import os, sys
if sys.argv and sys.argv[0].endswith("ansible-playbook"):
    import jinja2
    compile_template = jinja2.Environment.compile
    def counted(*args, **kwargs):
        with open(os.environ["SGLANG_FLEET_TEST_COMPILES"], "a", encoding="utf-8") as handle:
            handle.write(".\\n")
        return compile_template(*args, **kwargs)
    jinja2.Environment.compile = counted
"""


@pytest.mark.parametrize(("text", "batched"), [("{{ sglang_server_instance.name }} unit\n", True),
                                               ("{{ lookup('ansible.builtin.vars', 'x') }} unit\n", False)])  # fmt: skip
def test_a_template_is_compiled_once_for_all_the_instances_it_can_be(tmp_path: Path, text: str, batched: bool) -> None:
    """Ansible compiles a template's text at every render: for a text render_each may batch, the action renders every
    instance's file from one compile (as many compiles for six instances as for one); one it may not (a lookup) is
    compiled once per instance."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates/unit.j2").write_text(text)
    (tmp_path / "site").mkdir()
    (tmp_path / "site/sitecustomize.py").write_text(COUNTING_SITE)
    attributes = {"owner": OWNER, "group": grp.getgrgid(GROUP).gr_name, "mode": "0644", "private": False}

    def compiles(count: int) -> int:
        instances = [{"name": f"i{n}", "files": {"unit": str(tmp_path / f"{count}-{n}.service")}} for n in range(count)]
        task = {"instances": instances, "templates": [{"src": "unit.j2", "file": "unit", **attributes}]}
        play = [{"hosts": "localhost", "gather_facts": False, "vars": {"x": "y"},
                 "tasks": [{"sglang.fleet.sglang_instance_files": task}]}]  # fmt: skip
        (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
        counter = tmp_path / f"compiles-{count}"
        counting = {"PYTHONPATH": str(tmp_path / "site"), "SGLANG_FLEET_TEST_COMPILES": str(counter)}
        run = local_play(tmp_path / "play.yml", counting)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert (tmp_path / f"{count}-{count - 1}.service").read_text().endswith(" unit\n")
        return len(counter.read_text().splitlines())

    one, six = compiles(1), compiles(6)
    assert (six == one) if batched else (six >= one + 5), (one, six)
