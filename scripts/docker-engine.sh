#!/usr/bin/env bash
# Make a Docker engine answer for the sandbox (shared/FIELD-NOTES.md: "Docker works here, but must
# be set up by the project"). Idempotent and instant when an engine already answers:
#
#   engine answers            → reuse it (local daemon, DOCKER_HOST, rootless: whatever `docker info` reaches)
#   root on Debian/Ubuntu     → apt-get install docker.io debootstrap bubblewrap (what is missing), start dockerd
#                               in the background (log: /var/log/curateevo-dockerd.log), wait for it
#   otherwise                 → one line saying Docker is unavailable and how to get it; exit 0
#                               (curateevo then runs candidates in the process executor and says so)
#
# CURATEEVO_NO_DOCKER=1 skips all of this. Exit status is 0 unless the script itself is broken: a
# missing engine is not a setup failure (the Docker tests fail with the fix instead).
set -uo pipefail

LOG=${CURATEEVO_DOCKERD_LOG:-/var/log/curateevo-dockerd.log}
WAIT_S=${CURATEEVO_DOCKERD_WAIT:-60}
HOW="install Docker Engine (https://docs.docker.com/engine/install/) and start it, or re-run scripts/setup.sh as root on Debian"

answers() { command -v docker >/dev/null 2>&1 && timeout 20 docker info >/dev/null 2>&1; }
unavailable() {
  echo "curateevo: Docker is unavailable ($1); candidates will run in the weaker process sandbox. To get Docker: $HOW." >&2
  exit 0
}

debian_root() { [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null 2>&1; }
# The process sandbox (the fallback, and the only one under CURATEEVO_NO_DOCKER=1) runs every
# strategy, the user's own included, under bubblewrap only; without it, it refuses to run one.
command -v bwrap >/dev/null 2>&1 || ! debian_root \
  || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends bubblewrap >>"$LOG" 2>&1 \
  || { apt-get update -q >>"$LOG" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends bubblewrap >>"$LOG" 2>&1; } \
  || echo "curateevo: could not install bubblewrap (see $LOG); the process sandbox refuses generated candidates without it" >&2
[ "${CURATEEVO_NO_DOCKER:-0}" = 1 ] && exit 0
if answers; then
  # The offline image route (no registry) needs debootstrap even beside an existing engine.
  command -v debootstrap >/dev/null 2>&1 || ! debian_root \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >>"$LOG" 2>&1 \
    || echo "curateevo: could not install debootstrap (see $LOG); the offline image build needs it" >&2
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  [ -S /var/run/docker.sock ] && unavailable "the engine's socket is not usable by $(id -un): add the user to the docker group"
  unavailable "no engine answers and this is not root"
fi
debian_root || unavailable "no engine answers and this is not a Debian system"

t0=$(date +%s)
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || missing+=(debian-archive-keyring)
if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  echo "curateevo: installing ${missing[*]} (apt) for the Docker sandbox" >&2
  echo "=== $(date -Is) apt-get install ${missing[*]}" >>"$LOG"
  export DEBIAN_FRONTEND=noninteractive
  apt_install() { apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$LOG" 2>&1; }
  # Update the package lists only when the install cannot proceed without it (empty or stale lists).
  if ! apt_install; then
    apt-get update -q >>"$LOG" 2>&1 && apt_install \
      || unavailable "apt-get install ${missing[*]} failed, see $LOG"
  fi
fi

if ! answers; then
  echo "curateevo: starting dockerd (log: $LOG)" >&2
  start_dockerd() {
    # setsid + nohup: the daemon outlives this script and the shell that ran it.
    echo "=== $(date -Is) dockerd $*" >>"$LOG"
    setsid nohup dockerd "$@" >>"$LOG" 2>&1 < /dev/null &
    local pid=$! i
    for ((i = 0; i < WAIT_S * 2; i++)); do
      answers && return 0
      kill -0 "$pid" 2>/dev/null || return 1   # it exited: try the next configuration
      sleep 0.5
    done
    return 2                                   # still starting after WAIT_S: give up, leave it running
  }
  # A kernel or container without working iptables stops dockerd at start; the sandbox needs no
  # bridge (containers run with --network none), so retry without one.
  start_dockerd; rc=$?
  if [ $rc = 1 ]; then
    echo "curateevo: dockerd exited at start; retrying without iptables and bridge" >&2
    rm -f /var/run/docker.pid
    start_dockerd --iptables=false --bridge=none; rc=$?
  fi
  [ $rc = 0 ] || unavailable "dockerd did not answer within ${WAIT_S} s, see $LOG"
fi
echo "curateevo: Docker engine ready ($(docker version --format '{{.Server.Version}}' 2>/dev/null), $(( $(date +%s) - t0 )) s)" >&2
