#!/usr/bin/env bash
# make galaxy-check: the collection as Galaxy and a user get it. Builds the artifact (and packs the collections it
# depends on, offline, from the control venv's pinned `ansible` package) into build/galaxy/dist/, then, on that
# artifact:
#  1. galaxy-importer, the checks Galaxy and Automation Hub run on an upload (its own venv, .venv-galaxy, pinned by
#     requirements/galaxy.txt; settings in scripts/galaxy-importer.cfg);
#  2. `ansible-test sanity` on the artifact installed in a fresh ansible_collections/sglang/fleet (its per-test venvs
#     from the package index; the pip bootstrap it would download comes from scripts/ansible-test-get-pip.py);
#  3. ansible-lint on that installed artifact (production profile; the checkout's .ansible-lint-ignore and .yamllint,
#     which do not ship);
#  4. `ansible-builder create` (the execution environment's build context) from the checkout's tracked files alone;
#  5. the README's user-project recipe ("As a collection"), verbatim, in a fresh project holding a copy of the
#     sandbox's inventory: the artifact and its dependencies installed from the artifacts, then
#     `ansible-playbook sglang.fleet.deploy --tags preflight` against the sandbox's hosts (started by `make sandbox`).
# `galaxy-check.sh dist` (make galaxy-dist) only builds build/galaxy/dist/. GALAXY_CHECK_RECIPE=false leaves out step 5
# (no sandbox needed).
set -euo pipefail

readonly ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly VENV=${VENV:-$ROOT/.venv}
readonly GALAXY_VENV=$ROOT/.venv-galaxy
readonly OUT=$ROOT/build/galaxy
cd "$ROOT"
export PATH=$VENV/bin:$PATH

step() { printf '\n=== galaxy-check: %s (%ss)\n' "$1" "$SECONDS" >&2; }

step "build the artifact and pack its dependencies"
rm -rf "$OUT"
mkdir -p "$OUT/dist/collections"
(cd "$OUT" && ansible-galaxy collection build --output-path dist "$ROOT" >&2)
artifact=$(cd "$OUT/dist" && echo sglang-fleet-*.tar.gz)
mv "$OUT/dist/$artifact" "$OUT/dist/collections/"
python ee/pack_collections.py requirements/collections.yml "$OUT/dist" "$artifact"
mv "$OUT"/dist/collections/*.tar.gz "$OUT/dist/" && rm -r "$OUT/dist/collections" "$OUT/dist/requirements.yml"
ls "$OUT/dist" >&2
# galaxy.yml's build_ignore names tests/' folders one by one: of tests/, only ansible-test's ignore file and settings ship.
if tar -tzf "$OUT/dist/$artifact" | grep '^tests/' | grep -v '^tests/$\|^tests/sanity/\|^tests/config.yml$'; then
  echo "$artifact: test content above ships (galaxy.yml build_ignore)" >&2
  exit 1
fi
[[ ${1:-} != dist ]] || exit 0
# The steps below run on the artifact, not on this checkout: nothing of the checkout's ansible.cfg applies (Ansible
# would read it from the current directory), an empty one instead.
touch "$OUT/empty.cfg"
export ANSIBLE_CONFIG=$OUT/empty.cfg
# The installed artifact and the user's project outside this checkout: inside its git work tree, ansible-test would
# take the checkout's git files for the collection's (and find none under the ignored build/).
work=$(mktemp -d "${TMPDIR:-/tmp}/sglang-fleet-galaxy-check.XXXXXX")
trap 'rm -rf "$work"' EXIT

step "the changelog's fragments (antsibull-changelog lint)"
if [[ ! -f $GALAXY_VENV/.installed || requirements/galaxy.txt -nt $GALAXY_VENV/.installed ]]; then
  rm -rf "$GALAXY_VENV"
  "$VENV/bin/python" -m venv "$GALAXY_VENV"
  "$GALAXY_VENV/bin/pip" install --quiet --disable-pip-version-check -r requirements/galaxy.txt
  touch "$GALAXY_VENV/.installed"
fi
"$GALAXY_VENV/bin/antsibull-changelog" lint

step "galaxy-importer"
mkdir -p "$OUT/importer"
(cd "$OUT/importer" && GALAXY_IMPORTER_CONFIG=$ROOT/scripts/galaxy-importer.cfg PATH=$GALAXY_VENV/bin:$PATH \
  python -m galaxy_importer.main "$OUT/dist/$artifact") 2>&1 | tee "$OUT/importer/importer.log" >&2
# It fails on errors; its warnings (ansible-lint's findings, a missing changelog, ...) fail this check too, but for its
# notice that the collection has an ansible-test ignore file (tests/sanity/ignore-2.19.txt, each line with its reason).
if grep -E '^(WARNING|ERROR)' "$OUT/importer/importer.log" | grep -v 'Ignore files skip ansible-test sanity tests, found ignore-2.19.txt'; then
  echo "galaxy-importer: the findings above" >&2
  exit 1
fi

step "ansible-test sanity on the installed artifact"
ansible-galaxy collection install --no-deps -p "$work/installed" "$OUT/dist/$artifact" >&2
pip_version=$(sed -n "s/^ *pip='\([0-9.]*\)',\$/\1/p" \
  "$VENV"/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py)
get_pip=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
# Where ansible-test keeps the script it downloaded: a real one found there stays.
if [[ ! -f $get_pip ]]; then
  mkdir -p "$(dirname "$get_pip")"
  cp scripts/ansible-test-get-pip.py "$get_pip"
fi
collection=$work/installed/ansible_collections/sglang/fleet
(cd "$collection" && ansible-test sanity --python 3.11 --requirements --color no) >&2
# The modules and their module_utils run on the managed host's Python, down to tests/config.yml's floor (3.10, Ubuntu
# 22.04's): the tests that load that code (compile, import) on that Python too. PYTHON_MODULES_OLDEST names it; by
# default pyenv's or the PATH's python3.10.
oldest=${PYTHON_MODULES_OLDEST:-$(ls /root/.pyenv/versions/3.10*/bin/python3.10 2>/dev/null | head -n 1 || true)}
oldest=${oldest:-$(command -v python3.10 || true)}
[[ -x $oldest ]] || { echo "galaxy-check: no Python 3.10 for the modules' floor (set PYTHON_MODULES_OLDEST)" >&2; exit 1; }
(cd "$collection" && PATH=$(dirname "$oldest"):$PATH \
  ansible-test sanity --test compile --test import --python 3.10 --requirements --color no) >&2

step "ansible-doc renders every module, filter, lookup, callback and role entry point of the installed artifact"
for kind in module filter lookup callback role; do
  names=$(ANSIBLE_COLLECTIONS_PATH=$work/installed ansible-doc -t "$kind" --list --json sglang.fleet |
    python -c 'import json, sys; print(" ".join(sorted(json.load(sys.stdin))))')
  [[ -n $names ]] || { echo "ansible-doc lists no $kind of sglang.fleet" >&2; exit 1; }
  # shellcheck disable=SC2086  # the names, one word each
  ANSIBLE_COLLECTIONS_PATH=$work/installed ansible-doc -t "$kind" $names >/dev/null
  echo "$kind: $(wc -w <<<"$names") rendered" >&2
done
for role in $(cd "$collection/roles" && echo *); do
  for entry_point in $(python -c 'import sys, yaml; print(" ".join(yaml.safe_load(open(sys.argv[1]))["argument_specs"]))' \
    "$collection/roles/$role/meta/argument_specs.yml"); do
    ANSIBLE_COLLECTIONS_PATH=$work/installed ansible-doc -t role -e "$entry_point" "sglang.fleet.$role" >/dev/null
  done
done

step "ansible-lint on the installed artifact"
(cd "$collection" && ANSIBLE_COLLECTIONS_PATH=$work/installed \
  ansible-lint --offline --profile production --ignore-file "$ROOT/.ansible-lint-ignore" --yamllint-file "$ROOT/.yamllint" \
    --nocolor) >&2

step "ansible-builder create, from the checkout's tracked files alone (as a fresh clone has them)"
mkdir -p "$work/clone"
git ls-files -z | tar --null --files-from - --create --file - | tar --extract --directory "$work/clone"
(cd "$work/clone" && ansible-builder create --file execution-environment.yml --context "$work/ee-context" >&2)

if [[ ${GALAXY_CHECK_RECIPE:-true} == true ]]; then
  step "the README's user-project recipe, against the sandbox's hosts"
  project=$work/project
  mkdir -p "$project"
  # The user's inventory: the sandbox's (production's host_vars, copied), and where the sandbox's simulator runtime
  # comes from (a test double: not in the artifact).
  cp -rL inventory/sandbox "$project/inventory"
  echo "sglang_venv_simulator_source: $ROOT/simulator/src/sglang_simulator" > "$project/inventory/group_vars/sglang_servers.yml"
  recipe=$(sed -n '/^<!-- galaxy-check: user-project recipe -->$/,/^```$/p' README.md | sed '1,2d;$d')
  [[ -n $recipe ]] || { echo "README.md: no user-project recipe" >&2; exit 1; }
  printf '%s\n' "$recipe" >&2
  # The sandbox's hosts are reached with community.docker's connection, from the `ansible` package; everything else
  # from the project's own collections.
  (cd "$project" && unset ANSIBLE_CONFIG && DIST=$OUT/dist bash -euo pipefail -c "$recipe") >&2
fi
step "done"
