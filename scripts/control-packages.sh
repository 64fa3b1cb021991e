#!/usr/bin/env bash
# The control node's Debian packages besides Python, each installed only when its command is absent: rsync, which
# sends model files to the hosts (role sglang_model, ansible.posix.synchronize), and prometheus for its promtool, which
# checks and unit-tests the alert rules (tests/unit/test_prometheus_rules.py). Without recommends: prometheus would
# bring prometheus-node-exporter, a second daemon the control node does not need.
set -euo pipefail

# The prometheus package also holds a Prometheus server, which its postinst starts where services may start; only
# promtool is wanted here, so a server this install started is stopped and disabled.
stop_prometheus_server() {
  if [[ -d /run/systemd/system ]]; then
    systemctl disable --now prometheus.service >&2
  elif [[ -x /etc/init.d/prometheus ]]; then
    if /etc/init.d/prometheus status >/dev/null 2>&1; then
      /etc/init.d/prometheus stop >&2
    fi
    update-rc.d prometheus disable >&2
  fi
}

missing=()
command -v rsync >/dev/null || missing+=(rsync)
command -v promtool >/dev/null || missing+=(prometheus)
if ((${#missing[@]})); then
  echo "installing Debian's ${missing[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  if [[ " ${missing[*]} " == *" prometheus "* ]]; then
    stop_prometheus_server
  fi
fi
