#!/usr/bin/env bash
# Builds the test hosts' base image (Debian bookworm with systemd as PID 1) from a debootstrap'd rootfs.
# No container registry is reachable here, so the image is built locally and cached: its tag is a hash
# of this recipe, and a rebuild happens only when the recipe changes.
# Prints the image reference on stdout.
set -euo pipefail

readonly PACKAGES=systemd,systemd-sysv,dbus,python3,python3-venv,python3-apt,sudo,iproute2,procps,ca-certificates,libc-bin
readonly SUITE=bookworm
readonly REPOSITORY=sglang-fleet-testhost

readonly LIB="$(dirname "${BASH_SOURCE[0]}")/lib/debootstrap.sh"
# shellcheck source=lib/debootstrap.sh
source "$LIB"

recipe_hash=$(cat "${BASH_SOURCE[0]}" "$LIB" | sha256sum | cut -c1-12)
image="${REPOSITORY}:${recipe_hash}"

exit_if_built "$image"

rootfs=$(mktemp -d /var/tmp/testhost-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "building $image (debootstrap $SUITE, about a minute)" >&2
debootstrap_rootfs "$SUITE" "$PACKAGES" "$rootfs"

# A container has no consoles or hardware to wait for; these units only slow boot or fail.
for unit in getty.target console-getty.service systemd-udevd.service systemd-udev-trigger.service \
  systemd-modules-load.service systemd-remount-fs.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
echo testhost >"$rootfs/etc/hostname"
rm -f "$rootfs/etc/machine-id" && touch "$rootfs/etc/machine-id"

tar -C "$rootfs" -c . | docker import \
  -c 'CMD ["/lib/systemd/systemd"]' \
  -c 'ENV container=docker' \
  - "$image" >&2
echo "$image"
