#!/usr/bin/env bash
# The control node's Debian packages besides Python: rsync, which sends model files to the hosts (role sglang_model,
# ansible.posix.synchronize). Installed only when absent.
set -euo pipefail

missing=()
command -v rsync >/dev/null || missing+=(rsync)
if ((${#missing[@]})); then
  echo "installing Debian's ${missing[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi
