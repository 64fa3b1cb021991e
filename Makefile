# sglang-fleet. Quick start on a fresh Debian machine: `make sandbox`, then `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
SANDBOX := -i inventory/sandbox
# The newest ansible-core admitted (2.20, Python 3.12): unit-newest and sandbox-newest, from requirements/control-newest.txt.
PYTHON_NEWEST ?= $(firstword $(wildcard /root/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12))
VENV_NEWEST := $(CURDIR)/.venv-newest

.PHONY: help venv docker sandbox sandbox-hosts sandbox-span sandbox-newest sandbox-down sandbox-scale sandbox-scale-down bench-scale sandbox-prometheus status lint unit unit-newest molecule integration bench bench-install hardware-bundle test checks-then-molecule-default-then-sandbox molecule-install-then-unit-newest ee mirror galaxy-dist galaxy-check

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

venv: $(VENV)/.installed ## Create the project venv from the pinned requirements
$(VENV)/.installed: requirements/control.txt
	scripts/control-packages.sh
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements/control.txt
	touch $@

docker: ## Install and start the Docker engine when it is absent
	scripts/docker-engine.sh

sandbox-hosts: venv docker ## Start the local test hosts (ct129, b200)
	ansible-playbook playbooks/sandbox.yml $(SANDBOX)

sandbox: sandbox-hosts mirror ## Test hosts + deploy to them (their model from the mirror) + print every instance
	ansible-playbook deploy.yml $(SANDBOX)
	ansible-playbook playbooks/status.yml $(SANDBOX)

# The sandbox deployed by the newest ansible-core admitted (meta/runtime.yml: 2.20), then deployed again by it: the second
# run must change nothing (the drift and rollout tests run on 2.19, the unit tests on both).
sandbox-newest: $(VENV_NEWEST)/.installed sandbox-hosts mirror ## Deploy the sandbox with ansible-core 2.20, twice: the second run changes nothing
	$(VENV_NEWEST)/bin/python -c 'import ansible.release; print("ansible-core", ansible.release.__version__)'
	PATH=$(VENV_NEWEST)/bin:$$PATH $(VENV_NEWEST)/bin/ansible-playbook deploy.yml $(SANDBOX)
	mkdir -p build; PATH=$(VENV_NEWEST)/bin:$$PATH $(VENV_NEWEST)/bin/ansible-playbook deploy.yml $(SANDBOX) > build/sandbox-newest.log; \
	  status=$$?; cat build/sandbox-newest.log; test $$status -eq 0 || exit $$status; \
	  ! grep -E "(changed|failed|unreachable)=[1-9]" build/sandbox-newest.log || { echo "sandbox-newest: the second run changed something"; exit 1; }

status: venv ## Print every sandbox instance with its URL and health
	ansible-playbook playbooks/status.yml $(SANDBOX)

# The sandbox's servers and router on every address (with a test API key; the gateway over https with a test CA made
# here), and a real Prometheus on the sandbox's own network scraping them; `make sandbox` puts them back on loopback.
sandbox-prometheus: sandbox-hosts mirror ## The sandbox listening on its network, and Prometheus there on http://127.0.0.1:19090
	python scripts/test_ca.py build/sandbox-tls ct129 b200 127.0.0.1 localhost
	ansible-playbook deploy.yml $(SANDBOX) -e @inventory/sandbox-on-network.yml
	ansible-playbook playbooks/sandbox-prometheus.yml $(SANDBOX) -e @inventory/sandbox-on-network.yml

# Two more test hosts, span0 and span1, serving one instance across hosts (inventory/sandbox-span: the sandbox's inventory
# and these two); `make sandbox` leaves them out.
sandbox-span: sandbox-hosts mirror ## Test hosts span0 and span1 + deploy the instance they serve together
	ansible-playbook playbooks/sandbox.yml -i inventory/sandbox-span --limit span0,span1,localhost
	ansible-playbook deploy.yml -i inventory/sandbox-span --limit span0,span1

sandbox-down: ## Remove the test hosts, the sandbox's Prometheus and their network
	-docker rm --force --volumes $$(docker ps --all --quiet --filter label=sglang-fleet=sandbox) 2>/dev/null
	-docker network rm $$(docker network ls --quiet --filter label=sglang-fleet=sandbox) 2>/dev/null

# The scale rehearsal (issue 41): N light test hosts (inventory/scale) beside the sandbox's, never touching it.
N ?= 12
sandbox-scale: venv docker ## N light test hosts (N=12 at most; inventory/scale), deployed, and their memory
	scripts/scale-hosts.sh start $(N)

sandbox-scale-down: ## Remove the scale rehearsal's hosts and their network
	scripts/scale-hosts.sh stop

bench-scale: venv docker ## For 2, 6 and 12 hosts: no-op deploy, rollouts of a new revision, the model's bytes (control node vs peers)
	python tests/bench/bench_scale.py

lint: venv ## ansible-lint (production profile), yamllint, ruff, mypy
	yamllint --strict .
	ansible-lint
	ruff check .
	mypy

unit: venv ## pytest: instance derivation, templates, modules, simulator
	pytest tests/unit tests/simulator tests/contract

# The newest ansible-core meta/runtime.yml admits (2.20; `unit` runs the lowest, 2.19, from .venv): the same tests, their
# local plays (ansible-playbook of this checkout's actions, modules and templates) included, from .venv-newest/,
# made from requirements/control-newest.txt with Python 3.12 (2.20 needs it) when missing or older than that file.
unit-newest: $(VENV_NEWEST)/.installed ## The unit tests and their local plays on the newest ansible-core admitted (2.20)
	$(VENV_NEWEST)/bin/python -c 'import ansible.release; print("ansible-core", ansible.release.__version__)'
	PATH=$(VENV_NEWEST)/bin:$$PATH $(VENV_NEWEST)/bin/python -m pytest -p no:cacheprovider tests/unit tests/simulator tests/contract
$(VENV_NEWEST)/.installed: requirements/control-newest.txt
	test -n "$(PYTHON_NEWEST)" || { echo "unit-newest: no Python 3.12 (set PYTHON_NEWEST)"; exit 1; }
	rm -rf $(VENV_NEWEST)
	$(PYTHON_NEWEST) -m venv $(VENV_NEWEST)
	$(VENV_NEWEST)/bin/pip install --quiet --disable-pip-version-check --no-deps -r requirements/control-newest.txt
	touch $@

molecule: venv docker ## Molecule scenarios on local systemd containers
	molecule test --all

molecule-%: venv docker ## One molecule scenario: molecule-default, molecule-install
	molecule test --scenario-name $*

integration: venv docker ## pytest + ansible-runner against the sandbox hosts (started if absent)
	pytest --durations=25 tests/integration

bench: sandbox ## Benchmarks that print figures (no-op deploy cost, rollout latencies, rolling restart under load, model fetch, request latency)
	python tests/bench/bench_noop.py
	python tests/bench/bench_rollout.py
	python tests/bench/bench_model.py
	python tests/bench/bench_latency.py

bench-install: venv docker ## Benchmark real installs: bytes fetched and time, cold and warm (~50 GB of disk)
	python tests/bench/bench_install.py

ee: venv docker ## Execution environment image for AWX / ansible-navigator (execution-environment.yml); prints its name
	scripts/ee-image.sh

galaxy-dist: venv ## The collection's artifact and its dependencies' (build/galaxy/dist/), for a project of your own
	scripts/galaxy-check.sh dist

# Needs the sandbox (make sandbox) for its last step, the README's recipe; GALAXY_CHECK_RECIPE=false leaves it out.
galaxy-check: venv ## The artifact as Galaxy and users get it: galaxy-importer, ansible-test sanity, ansible-lint, the README's recipe
	scripts/galaxy-check.sh

hardware-bundle: ## Build .hardware/ (SGLang 0.5.17 wheels, stripped, norm for sm_90a) for tests/hardware/run.sh on a GPU
	python3 tests/hardware/prepare.py

# Two chains on the 2 cores. The real install (a download of several GB, then pip) and then the unit tests on the
# newest ansible-core run beside the checks, the unit tests on 2.19, the default scenario, the sandbox's first deploy
# and galaxy-check (whose last step needs that deploy): they neither need nor disturb each other (each scenario has its
# own containers, the two unit runs their own venvs and no pytest cache between them), and the chains take about as
# long. The integration suite runs alone (its rollouts wait on the clock), on the sandbox deployed before it.
test: venv docker ## Everything CI runs: lint, unit (ansible-core 2.19 and 2.20), molecule (install beside the others), sandbox, galaxy-check, integration, a sandbox deploy on 2.20
	$(MAKE) --jobs=2 --output-sync=target checks-then-molecule-default-then-sandbox molecule-install-then-unit-newest
	$(MAKE) integration sandbox-newest

checks-then-molecule-default-then-sandbox: venv docker
	$(MAKE) --jobs=1 lint unit molecule-default sandbox galaxy-check

molecule-install-then-unit-newest: venv docker
	$(MAKE) --jobs=1 molecule-install unit-newest

# olah from its own venv (.mirror-venv/, requirements/mirror.txt) on 127.0.0.1:$MODEL_MIRROR_PORT (18090); stop it with
# scripts/model-mirror.sh stop.
mirror: ## Start the local Hugging Face-compatible mirror (olah) serving the generated test model
	scripts/model-mirror.sh start
