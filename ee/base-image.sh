#!/usr/bin/env bash
# The execution environment's base image (scripts/ee-image.sh): Debian bookworm from debootstrap, with Python, its
# pip (which ansible-builder uses; Debian turns ensurepip off for its Python) and venv, the ssh client, and rsync
# (role sglang_model sends the model's files with it). No container
# registry is reachable here, so the image is built locally and cached: its tag is a hash of this recipe and of the
# certificate authorities this machine added (a proxy's, a company's), which the image trusts too: pip needs them
# during the build, and so do the playbooks' downloads on the control node at run time. Prints the image reference.
set -euo pipefail

readonly PACKAGES=python3,python3-pip,python3-venv,openssh-client,rsync,ca-certificates
readonly SUITE=bookworm
readonly REPOSITORY=sglang-fleet-ee-base
readonly LOCAL_CAS=/usr/local/share/ca-certificates

readonly LIB="$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/debootstrap.sh"
# shellcheck source=../scripts/lib/debootstrap.sh
source "$LIB"

cas=()
[[ ! -d "$LOCAL_CAS" ]] || mapfile -t cas < <(find "$LOCAL_CAS" -type f -name '*.crt' | sort)
recipe_hash=$(cat "${BASH_SOURCE[0]}" "$LIB" "${cas[@]}" | sha256sum | cut -c1-12)
image="${REPOSITORY}:${recipe_hash}"

exit_if_built "$image"

rootfs=$(mktemp -d /var/tmp/ee-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "building $image (debootstrap $SUITE, about a minute)" >&2
debootstrap_rootfs "$SUITE" "$PACKAGES" "$rootfs"
for ca in "${cas[@]}"; do
  install -D -m 0644 "$ca" "$rootfs/usr/local/share/ca-certificates/${ca#"$LOCAL_CAS"/}"
done
chroot "$rootfs" update-ca-certificates >&2

tar -C "$rootfs" -c . | docker import -c 'ENV LANG=C.UTF-8' -c 'CMD ["bash"]' - "$image" >&2
echo "$image"
