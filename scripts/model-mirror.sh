#!/usr/bin/env bash
# The test mirror: olah, a Hugging Face-compatible server, serving the generated model repository
# (tests/fixtures/model_repo.py) offline on 127.0.0.1, for tests of the model download.
#   start   installs git and git-lfs (apt) when absent, creates .mirror-venv/ from requirements/mirror.txt when missing,
#           generates the repository, starts olah and waits until it answers; idempotent
#   stop    ends it
#   status  exits 0 when it answers, 1 otherwise
# start and status print MODEL_MIRROR_ENDPOINT, MODEL_MIRROR_REPO and MODEL_MIRROR_COMMITS as KEY=value lines on stdout.
# Port: MODEL_MIRROR_PORT (18090). Files: build/model-mirror/ (olah.log, olah.pid, configs.toml, mirrors/, cache/).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly ROOT
readonly VENV=$ROOT/.mirror-venv
readonly STATE=$ROOT/build/model-mirror
readonly PORT=${MODEL_MIRROR_PORT:-18090}
readonly ENDPOINT=http://127.0.0.1:$PORT
readonly PID_FILE=$STATE/olah.pid
readonly REPO_FILE=$STATE/repo.json
readonly LOG=$STATE/olah.log
readonly WAIT_S=60

# The pid of our olah when it runs (its pid file names a live olah-cli), else nothing.
running_pid() {
  local pid
  [[ -f $PID_FILE ]] || return 0
  pid=$(<"$PID_FILE")
  if [[ $pid =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q olah-cli; then
    echo "$pid"
  fi
}

# repo.json as KEY=value lines: MODEL_MIRROR_REPO, MODEL_MIRROR_COMMITS.
repo_lines() {
  "$VENV/bin/python" - "$REPO_FILE" <<'EOF'
import json, sys
repo = json.load(open(sys.argv[1]))
print(f"MODEL_MIRROR_REPO={repo['repo']}")
print(f'MODEL_MIRROR_COMMITS="{" ".join(repo["commits"])}"')
EOF
}

# True when the mirror answers for the first commit of repo.json with that commit.
answers() {
  [[ -f $REPO_FILE && -x $VENV/bin/python ]] || return 1
  "$VENV/bin/python" - "$ENDPOINT" "$REPO_FILE" <<'EOF' 2>/dev/null
import json, sys, urllib.request
endpoint, repo = sys.argv[1], json.load(open(sys.argv[2]))
commit = repo["commits"][0]
with urllib.request.urlopen(f"{endpoint}/api/models/{repo['repo']}/revision/{commit}", timeout=2) as response:
    sys.exit(0 if json.load(response).get("sha") == commit else 1)
EOF
}

print_lines() {
  echo "MODEL_MIRROR_ENDPOINT=$ENDPOINT"
  repo_lines
}

stop() {
  local pid
  pid=$(running_pid)
  if [[ -n $pid ]]; then
    kill "$pid"
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid"
    fi
    echo "stopped olah (pid $pid)" >&2
  fi
  rm -f "$PID_FILE"
}

install_packages() {
  local missing=()
  command -v git >/dev/null || missing+=(git)
  command -v git-lfs >/dev/null || missing+=(git-lfs)
  if ((${#missing[@]})); then
    echo "installing Debian's ${missing[*]}" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Dpkg::Use-Pty=0 "${missing[@]}" >&2
  fi
}

# .mirror-venv/ from the pins; recreated when requirements/mirror.txt is newer than its marker.
make_venv() {
  if [[ -f $VENV/.installed && ! $ROOT/requirements/mirror.txt -nt $VENV/.installed ]]; then
    return 0
  fi
  echo "creating $VENV from requirements/mirror.txt" >&2
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$ROOT/requirements/mirror.txt" >&2
  touch "$VENV/.installed"
}

write_config() {
  cat >"$STATE/configs.toml" <<EOF
# Written by scripts/model-mirror.sh: olah serves the repositories under mirrors-path, offline.
[basic]
host = "127.0.0.1"
port = $PORT
repos-path = "$STATE/cache"
mirror-netloc = "127.0.0.1:$PORT"
mirror-lfs-netloc = "127.0.0.1:$PORT"
mirrors-path = ["$STATE/mirrors"]

[accessibility]
offline = true
EOF
}

start() {
  if [[ -n $(running_pid) ]] && answers; then
    print_lines
    return 0
  fi
  stop
  install_packages
  make_venv
  mkdir -p "$STATE"
  rm -rf "$STATE/cache"
  "$VENV/bin/python" "$ROOT/tests/fixtures/model_repo.py" "$STATE/mirrors" >"$REPO_FILE.tmp"
  mv "$REPO_FILE.tmp" "$REPO_FILE"
  write_config
  echo "starting olah on $ENDPOINT (log: $LOG)" >&2
  # The daemon keeps none of this shell's other descriptors: one open on a lock (`flock FILE make sandbox` passes it as
  # 3, `exec 9>FILE` as 9) would hold that lock for as long as the mirror runs.
  (cd "$STATE" && for fd in /proc/$BASHPID/fd/*; do [ "${fd##*/}" -gt 2 ] && eval "exec ${fd##*/}>&-"; done
   exec setsid nohup "$VENV/bin/olah-cli" -c "$STATE/configs.toml" >"$LOG" 2>&1 </dev/null) &
  local pid=$!
  echo "$pid" >"$PID_FILE"
  for _ in $(seq $((WAIT_S * 2))); do
    if answers; then
      print_lines
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "olah exited; the end of $LOG:" >&2
      tail -n 20 "$LOG" >&2
      rm -f "$PID_FILE"
      return 1
    fi
    sleep 0.5
  done
  echo "olah did not answer within $WAIT_S s; the end of $LOG:" >&2
  tail -n 20 "$LOG" >&2
  stop
  return 1
}

# One start or stop at a time (tests of several sessions may start it together); olah itself does not keep the lock.
lock() {
  mkdir -p "$STATE"
  exec 9>"$STATE/lock"
  flock 9
}

case ${1:-} in
  start)
    lock
    start
    ;;
  stop)
    lock
    stop
    ;;
  status)
    if [[ -n $(running_pid) ]] && answers; then
      print_lines
    else
      echo "the model mirror is not running on $ENDPOINT" >&2
      exit 1
    fi
    ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
