# Sourced by the scripts that build local images (scripts/testhost-image.sh, ee/base-image.sh, scripts/ee-image.sh):
# no container registry is reachable, so images start from a debootstrap'd root file system and are cached by tag.

# The Debian mirror this machine already uses (deb822 or one-line sources), so no host is named here.
debian_mirror() {
  local suite=$1 uri
  uri=$(awk '/^URIs:/ {u=$2} /^Suites:/ && / '"$suite"'( |$)/ && u {print u; exit}' \
    /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [[ -n "$uri" ]] || uri=$(awk '$1 == "deb" && $3 == "'"$suite"'" {print $2; exit}' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
  [[ -n "$uri" ]] || { echo "no Debian $suite mirror found in /etc/apt/sources.list*" >&2; exit 1; }
  echo "$uri"
}

# debootstrap_rootfs SUITE PACKAGES DIR: a minimal Debian SUITE with PACKAGES (comma-separated) in DIR.
debootstrap_rootfs() {
  local suite=$1 packages=$2 rootfs=$3
  if ! command -v debootstrap >/dev/null; then
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2
  fi
  debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$(debian_mirror "$suite")" >&2
}

# exit_if_built IMAGE: print IMAGE and stop the script when docker already has it (the tag names the recipe).
exit_if_built() {
  if docker image inspect "$1" >/dev/null 2>&1; then
    echo "$1"
    exit 0
  fi
}
