#!/usr/bin/env bash
# The scale rehearsal's light test hosts (inventory/scale, issue 41), beside the sandbox's ct129 and b200 and never
# touching them: containers scale01..scaleN (label sglang-fleet=scale, network sglang-fleet-scale).
#   model K   writes the model's revision rK (the generated Qwen3.5 repository, tests/fixtures/model_repo.py, and a
#             4 MiB file of its own, so a model change has bytes to count) under ~/.cache/sglang-fleet/scale/model/
#             and locks it (playbooks/model_lock.yml into ~/.cache/sglang-fleet/scale/model-lock.yml)
#   start N   starts the first N hosts and deploys revision r1 to them. Their image is the test-host image with
#             sshd and rsync (copies between hosts), and what a first deploy installs (CUDA's wheels, the simulator's
#             venv) from one host's deploy: each container shares it instead of downloading and unpacking it again
#   stop      removes every scale host, their network and the image's helper container
#   memory    prints each host's memory use (also after start)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly ROOT
readonly INVENTORY=$ROOT/inventory/scale
readonly STATE=${HOME}/.cache/sglang-fleet/scale
readonly NETWORK=sglang-fleet-scale
readonly LABEL=scale
readonly REPOSITORY=sglang-fleet-scalehost
export ANSIBLE_CONFIG=$ROOT/ansible.cfg PATH=$ROOT/.venv/bin:$PATH
cd "$ROOT"
# scale01's gateway listens beyond loopback, so it serves https, and so do the instances it reaches on the other hosts
# (issue 38): the certificate of a throw-away test CA for inventory/scale's sglang_gateway_tls_* and sglang_server_tls_*,
# naming every scale host (12 at most) and loopback, made here (scripts/test_ca.py keeps it while it covers these names).
python scripts/test_ca.py build/scale-tls scale{01..12} 127.0.0.1 localhost

containers() { docker ps --all --quiet --filter "label=sglang-fleet=$LABEL"; }

# Revision rK of the model: the fixture's files (revision 1 or 2, alternately) and 4 MiB of its own bytes.
model() {
  local k=$1 dir=$STATE/model/r$1
  if [[ ! -f $dir/padding.bin ]]; then
    python - "$dir" "$k" <<'PY'
import hashlib, sys
from pathlib import Path
sys.path.insert(0, "tests/fixtures")
from model_repo import build_repo
path, k = Path(sys.argv[1]), int(sys.argv[2])
build_repo(path, 1 + (k + 1) % 2)
block = hashlib.sha256(f"scale revision {k}".encode()).digest()
(path / "padding.bin").write_bytes(b"".join(hashlib.sha256(block + n.to_bytes(4, "big")).digest() for n in range(131072)))
PY
  fi
  ansible-playbook "$ROOT/playbooks/model_lock.yml" -i "$INVENTORY" --limit scale01 -e "scale_revision=r$k" >/dev/null
}

# start_containers IMAGE HOSTS: the hosts' containers (playbooks/sandbox.yml: stand-in GPUs), without the stand-in
# Qwen3.6-27B (sparse files of 54 GB, which an image would store whole): they serve the scale model only.
start_containers() {
  ansible-playbook "$ROOT/playbooks/sandbox.yml" -i "$INVENTORY" --limit "localhost,$2" \
    -e "testhost_image=$1" -e "testhost_network=$NETWORK" -e "testhost_containers_label=$LABEL" \
    -e '{"testhost_models": []}'

}

# The scale image: the test-host image, with sshd (its host keys made at each container's first boot, never shared)
# and rsync, and scale01 deployed once. Tagged by the hash of these two functions and of the base image.
image() {
  local base tag
  base=$("$ROOT/scripts/testhost-image.sh")
  tag=$REPOSITORY:$( (declare -f image start_containers; docker image inspect --format '{{.Id}}' "$base") | sha256sum | cut -c1-12)
  if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag"
    return
  fi
  echo "building $tag from $base (one host's first deploy, several minutes)" >&2
  start_containers "$base" scale01 >&2
  docker exec scale01 sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -qq -y openssh-server rsync >/dev/null
    rm -f /etc/ssh/ssh_host_*
    mkdir -p /etc/systemd/system/ssh.service.d
    printf "[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n" >/etc/systemd/system/ssh.service.d/host-keys.conf
    apt-get clean' >&2
  ansible-playbook "$ROOT/deploy.yml" -i "$INVENTORY" --limit scale01 >&2
  # No host key in the image; and no sparse file, which an image would store whole.
  docker exec scale01 sh -c 'rm -rf /etc/ssh/ssh_host_* /srv/models/Qwen3.6-27B' >&2
  docker exec scale01 sh -c 'find / -xdev -type f -size +100M -printf "%s %p\n"' >&2
  docker commit scale01 "$tag" >&2
  docker rm --force --volumes scale01 >&2
  echo "$tag"
}

# Each host's memory: the resident memory of every process in its container (the containers share the host's cgroup
# namespace, where docker stats reads nothing).
memory() {
  local name
  for name in $(docker ps --filter "label=sglang-fleet=$LABEL" --format '{{.Names}}' | sort); do
    echo "$name memory $(docker exec "$name" sh -c "ps -e -o rss= | awk '{s += \$1} END {printf \"%.0f MiB\", s / 1024}'")"
  done
}

case ${1:-} in
  model)
    model "${2:?model K}"
    ;;
  start)
    n=${2:?start N}
    ((n >= 1 && n <= 12)) || { echo "N is 1 to 12 (inventory/scale/hosts.yml)" >&2; exit 2; }
    model 1
    tag=$(image)
    start_containers "$tag" "sglang_servers[0:$((n - 1))]"
    ansible-playbook "$ROOT/deploy.yml" -i "$INVENTORY" --limit "sglang_servers[0:$((n - 1))]"
    memory
    ;;
  memory)
    memory
    ;;
  stop)
    # shellcheck disable=SC2046
    [[ -z $(containers) ]] || docker rm --force --volumes $(containers) >/dev/null
    docker network rm "$NETWORK" >/dev/null 2>&1 || true
    ;;
  *)
    sed -n '2,12p' "${BASH_SOURCE[0]}"
    exit 2
    ;;
esac
