#!/usr/bin/env bash
# Builds the execution environment image (execution-environment.yml) that AWX / Automation Platform and
# ansible-navigator run the playbooks in. Neither a container registry nor a Galaxy server is used:
#  1. the base image: Debian bookworm from debootstrap (ee/base-image.sh), built once per recipe;
#  2. build/ee/: the collection artifacts, those of requirements/collections.yml (and what they depend on) packed
#     from the control venv's pinned `ansible` package (ee/pack_collections.py) and sglang.fleet built from this
#     checkout, and the requirements file naming them;
#  3. the image: ansible-builder with execution-environment.yml, and docker.
# Its tag is a hash of every input (the recipes, execution-environment.yml, the pins, the collections' file
# checksums, the base image): it is rebuilt only when one changes. Prints the image reference on stdout.
set -euo pipefail

readonly ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly VENV=${VENV:-$ROOT/.venv}
readonly STAGE=build/ee
readonly REPOSITORY=sglang-fleet-ee

cd "$ROOT"
# shellcheck source=lib/debootstrap.sh
source scripts/lib/debootstrap.sh
base_image=$(ee/base-image.sh)

rm -rf "$STAGE"
mkdir -p "$STAGE/collections"
"$VENV/bin/ansible-galaxy" collection build --output-path "$STAGE/collections" . >&2
fleet=$(cd "$STAGE/collections" && echo sglang-fleet-*.tar.gz)
"$VENV/bin/python" ee/pack_collections.py requirements/collections.yml "$STAGE" "$fleet"
# execution-environment.yml reads the committed list (ansible-builder create needs it before anything is staged).
if ! diff -u <(grep -v '^#' ee/requirements.yml) "$STAGE/requirements.yml" >&2; then
  echo "ee/requirements.yml does not name the staged artifacts above: update it (and galaxy.yml's version)" >&2
  exit 1
fi

inputs_hash=$(
  {
    echo "$base_image"
    cat "${BASH_SOURCE[0]}" ee/pack_collections.py execution-environment.yml requirements/control.txt \
      "$STAGE/requirements.yml"
    for artifact in "$STAGE"/collections/*.tar.gz; do
      tar -xzOf "$artifact" MANIFEST.json FILES.json
    done
  } | sha256sum | cut -c1-12
)
image="${REPOSITORY}:${inputs_hash}"
exit_if_built "$image"

# A proxy this machine uses, for pip during the build (docker takes these from the environment and does not
# keep them in the image).
proxy_args=()
for name in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [[ -z "${!name:-}" ]] || proxy_args+=(--build-arg "$name")
done

echo "building $image (ansible-builder, a few minutes)" >&2
"$VENV/bin/ansible-builder" build "${proxy_args[@]}" \
  --file execution-environment.yml \
  --context "$STAGE/context" \
  --container-runtime docker \
  --build-arg EE_BASE_IMAGE="$base_image" \
  --tag "$image" \
  --extra-build-cli-args=--force-rm \
  --verbosity 2 >&2
# The build's other stages (untagged now), and nothing else.
docker image prune --force --filter label=sglang-fleet=ee >&2
echo "$image"
