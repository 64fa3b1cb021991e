#!/usr/bin/env bash
# Makes sure a Docker engine answers: installs Debian's docker.io when dockerd is absent and starts
# dockerd in the background when nothing listens on its socket (this machine has no systemd).
set -euo pipefail

if docker info >/dev/null 2>&1; then
  exit 0
fi
if ! command -v dockerd >/dev/null; then
  echo "installing Debian's docker.io" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >&2
fi
echo "starting dockerd (log: /var/log/dockerd.log)" >&2
# The daemon keeps none of this shell's other descriptors: one open on a lock (`flock FILE make sandbox` passes it as 3)
# would hold that lock for as long as dockerd runs.
(for fd in /proc/$BASHPID/fd/*; do [ "${fd##*/}" -gt 2 ] && eval "exec ${fd##*/}>&-"; done
 exec setsid nohup dockerd >/var/log/dockerd.log 2>&1 </dev/null) &
for _ in $(seq 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 1
done
echo "dockerd did not answer within 60 s; see /var/log/dockerd.log" >&2
exit 1
