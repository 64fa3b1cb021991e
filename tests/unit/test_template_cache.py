"""Jinja's compiled templates kept on disk (plugin_utils/template_cache.py, installed by the callback
sglang.fleet.prefork): a template met again is read, not compiled, and renders the same; an entry is not used once a
filter or test it names is called differently, for other syntax settings or Ansible's backslash escaping, or when it is
damaged; prune keeps what runs read."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
from ansible_collections.sglang.fleet.plugins.plugin_utils import disk_cache, template_cache
from fleet import ROOT, fresh_python, local_play
from jinja2 import pass_context


class Counting:
    """Jinja's own compile, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, environment: jinja2.Environment, *args: Any) -> Any:
        self.calls += 1
        return jinja2.Environment.compile(environment, *args)


def cached_compile(folder: Path) -> tuple[Counting, Callable[..., Any]]:
    counting = Counting()
    return counting, template_cache.caching(counting, folder)


def render(environment: jinja2.Environment, compile_template: Callable[..., Any], source: str, **variables: Any) -> str:
    code = compile_template(environment, source)
    return environment.template_class.from_code(environment, code, environment.make_globals(None), None).render(**variables)


def shouting() -> jinja2.Environment:
    environment = jinja2.Environment()
    environment.filters["shout"] = lambda value: f"{value}!"
    return environment


def test_a_template_met_again_is_read_not_compiled_and_renders_the_same(tmp_path: Path) -> None:
    environment = shouting()
    source = "{{ name | shout }} {% if name is string %}text{% endif %}"
    counting, compile_template = cached_compile(tmp_path)
    assert render(environment, compile_template, source, name="a") == "a! text"
    counting_again, compile_again = cached_compile(tmp_path)  # another process of the run, or the next run
    assert render(environment, compile_again, source, name="b") == "b! text"
    assert (counting.calls, counting_again.calls) == (1, 0)
    assert render(environment, compile_again, "{{ name }}", name="c") == "c"
    assert counting_again.calls == 1
    assert len(list(tmp_path.iterdir())) == 2


def test_a_filter_now_passed_its_context_or_now_defined_is_compiled_again(tmp_path: Path) -> None:
    environment = shouting()
    source = "{{ name | shout }}{% if false %}{{ name | later }}{% endif %}"
    counting, compile_template = cached_compile(tmp_path)
    assert render(environment, compile_template, source, name="a") == "a!"

    @pass_context
    def shout_in_context(context: Any, value: str) -> str:
        return f"{value} to {context['whom']}!"

    environment.filters["shout"] = shout_in_context
    assert render(environment, compile_template, source, name="a", whom="b") == "a to b!"
    assert counting.calls == 2
    environment.filters["later"] = str.upper  # absent when compiled (allowed under a false if): compiled again
    assert render(environment, compile_template, source, name="a", whom="b") == "a to b!"
    assert counting.calls == 3
    assert render(environment, compile_template, source, name="a", whom="b") == "a to b!"
    assert counting.calls == 3


def test_other_syntax_settings_are_another_entry(tmp_path: Path) -> None:
    counting, compile_template = cached_compile(tmp_path)
    assert render(jinja2.Environment(), compile_template, "<< x >> {{ x }}", x=1) == "<< x >> 1"
    other = jinja2.Environment(variable_start_string="<<", variable_end_string=">>")
    assert render(other, compile_template, "<< x >> {{ x }}", x=1) == "1 {{ x }}"
    assert counting.calls == 2


def test_ansible_s_backslash_escaping_is_part_of_the_key() -> None:
    from ansible._internal._templating._jinja_bits import AnsibleEnvironment, _TemplateCompileContext

    environment = AnsibleEnvironment()
    keys = set()
    for escape in (True, False):
        with _TemplateCompileContext(escape_backslashes=escape):
            keys.add(template_cache.key("{{ 'a\\nb' }}", None, None, False, environment))
    keys.add(template_cache.key("{{ 'a\\nb' }}", None, None, False, environment))  # outside Ansible's compile
    assert len(keys) == 3


def test_a_damaged_entry_is_compiled_again_and_replaced(tmp_path: Path) -> None:
    environment = jinja2.Environment()
    counting, compile_template = cached_compile(tmp_path)
    render(environment, compile_template, "{{ x }}", x=1)
    (entry,) = tmp_path.iterdir()
    entry.write_bytes(entry.read_bytes()[:20])
    assert render(environment, compile_template, "{{ x }}", x=2) == "2"
    assert counting.calls == 2
    assert render(environment, compile_template, "{{ x }}", x=3) == "3"
    assert counting.calls == 2


def test_an_unwritable_folder_only_means_compiling(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    counting, compile_template = cached_compile(tmp_path / "file" / "folder")
    assert render(jinja2.Environment(), compile_template, "{{ x }}", x=1) == "1"
    assert render(jinja2.Environment(), compile_template, "{{ x }}", x=1) == "1"
    assert counting.calls == 2


def test_prune_keeps_what_runs_read_and_removes_other_versions_and_stale_writes(tmp_path: Path) -> None:
    current = template_cache.folder_for(tmp_path)
    current.mkdir(parents=True)
    other = tmp_path / "ansible-2.18.0-jinja2-3.1.4-cpython-311-1"
    other.mkdir()
    (other / "entry").write_bytes(b"")
    for name in ("read", "unread", "written1.part", "writing2.part"):
        (current / name).write_bytes(b"")
    now = time.time()
    month = disk_cache.KEEP_UNUSED_SECONDS
    os.utime(current / "read", (now, now - month + 60))
    os.utime(current / "unread", (now, now - month - 60))
    os.utime(current / "written1.part", (now, now - 7200))
    assert template_cache.prune(tmp_path, now) == 3
    assert sorted(path.name for path in current.iterdir()) == ["read", "writing2.part"]
    assert not other.exists()
    assert template_cache.prune(tmp_path / "absent", now) == 0


def test_reading_an_entry_a_day_old_keeps_it_for_another_month(tmp_path: Path) -> None:
    environment = jinja2.Environment()
    _, compile_template = cached_compile(tmp_path)
    render(environment, compile_template, "{{ x }}", x=1)
    (entry,) = tmp_path.iterdir()
    old = time.time() - 2 * disk_cache.REFRESH_SECONDS
    os.utime(entry, (old, old))
    render(environment, compile_template, "{{ x }}", x=1)
    assert time.time() - entry.stat().st_mtime < 60


# In a fresh interpreter, as a run's process: Ansible's Templar with the cache installed under argv[2], templating what
# a role's variables hold (filters of Ansible and of this collection, a test, a conditional). Prints the results and
# how many times Jinja compiled.
ANSIBLE_RUN = """
import json, sys
from pathlib import Path
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible._internal._datatag._tags import TrustedAsTemplate
from ansible._internal._templating._jinja_bits import AnsibleEnvironment
from ansible.template import Templar
from ansible_collections.sglang.fleet.plugins.plugin_utils import disk_cache, template_cache
template_cache.install(Path(sys.argv[2]))
compiled = []
cached = AnsibleEnvironment.compile
uncached = cached.uncached
def counting(self, *args, **kwargs):
    compiled.append(1)
    return uncached(self, *args, **kwargs)
AnsibleEnvironment.compile = template_cache.caching(counting, template_cache.folder_for(Path(sys.argv[2])))
trusted = TrustedAsTemplate().tag
templar = Templar(variables={
    "ports": [30001, 30000], "name": "b200",
    "sorted_ports": trusted("{{ ports | sort | map('string') | join(',') }}"),
    "remote": trusted("{{ '0.0.0.0' | sglang.fleet.sglang_remote_url('10.0.0.7', 30000) }}"),
})
results = [templar.template(trusted(text)) for text in (
    "{{ sorted_ports }} {{ name | upper }}", "{{ remote }}", "{{ 'a\\\\nb' }}")]
results.append(templar.evaluate_conditional(trusted("name is match('b2')")))
print(json.dumps({"results": results, "compiled": len(compiled)}))
"""


def test_a_second_ansible_run_compiles_only_the_conditional_and_templates_the_same(tmp_path: Path) -> None:
    first, second = (fresh_python(ANSIBLE_RUN, str(ROOT / "collections"), str(tmp_path)) for _ in range(2))
    assert first["results"] == ["30000,30001 B200", "http://10.0.0.7:30000", "a\\nb", True]
    assert first["compiled"] >= 4
    # A conditional (an expression: Jinja parses it itself, then compiles the tree) is compiled as before.
    assert second == {"results": first["results"], "compiled": 1}


def test_a_vaulted_template_or_value_is_never_written(tmp_path: Path) -> None:
    from ansible._internal._datatag._tags import SourceWasEncrypted, VaultedValue

    environment = jinja2.Environment()
    counting, compile_template = cached_compile(tmp_path)
    for secret in (SourceWasEncrypted().tag("{{ 'key-123' }}"), VaultedValue(ciphertext="$ANSIBLE_VAULT").tag("{{ 'key-456' }}")):
        assert render(environment, compile_template, secret) in ("key-123", "key-456")
    assert counting.calls == 2
    assert not any(tmp_path.iterdir())


def test_an_entry_is_its_user_s_alone_and_a_folder_others_can_write_is_not_used(tmp_path: Path) -> None:
    _, compile_template = cached_compile(tmp_path / "cache" / "templates")
    render(jinja2.Environment(), compile_template, "{{ x }}", x=1)
    (entry,) = (tmp_path / "cache" / "templates").iterdir()
    assert entry.stat().st_mode & 0o777 == 0o600
    assert disk_cache.private(tmp_path / "new")
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700
    (tmp_path / "shared").mkdir(mode=0o777)
    (tmp_path / "shared").chmod(0o777)
    assert not disk_cache.private(tmp_path / "shared")


PLAY = (
    "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
    "    - ansible.builtin.debug: {msg: \"{{ 'po' ~ 'ng' }}\"}\n"
    "    - ansible.builtin.ping:\n"
)


def test_the_callback_keeps_a_run_s_templates_payload_imports_and_code_under_its_cache_dir(tmp_path: Path) -> None:
    (tmp_path / "play.yml").write_text(PLAY)
    run = local_play(
        tmp_path / "play.yml",
        {"ANSIBLE_CALLBACKS_ENABLED": "sglang.fleet.prefork", "SGLANG_FLEET_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert '"msg": "pong"' in run.stdout
    assert list((tmp_path / "cache" / "templates").glob("ansible-*/*"))
    assert list((tmp_path / "cache" / "code").glob("ansible-*/*")), "the collection's plugins the callback imported"
    imports = list((tmp_path / "cache" / "imports").glob("ansible-*/*"))  # ping's module_utils: basic and what it imports
    assert len(imports) > 10 and all(entry.stat().st_mode & 0o777 == 0o600 for entry in imports)
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700
