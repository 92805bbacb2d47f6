#!/usr/bin/env bash
# Make sure a Docker Engine answers on this machine, installing and starting one
# when needed. Safe to run again at any time: it does nothing when `docker info`
# already works.
#
# For development machines, CI runners and sandboxes without systemd: it installs
# Debian's `docker.io` (which pulls in containerd, runc and iptables) and starts
# `dockerd` in the background as root, logging to /var/log/dockerd.log.
# On a real GPU host, install Docker Engine and the NVIDIA Container Toolkit
# (1.17.8 or newer) the usual way instead; see the README's host guide.
#
# Environment:
#   DOCKERD_LOG          log file (default /var/log/dockerd.log)
#   DOCKERD_WAIT_S       how long to wait for the engine to answer (default 60)
#   DOCKERD_EXTRA_ARGS   extra dockerd flags, appended as given
#   DOCKERD_USERNS_REMAP user-namespace remapping (default "default": root in a container
#                        is an unprivileged uid of the subordinate range of the dockremap
#                        user on the host); "off" to start without it
#
# Instances run as root inside their containers (customers install packages), so the
# engine must remap: `docker info` then lists "userns" among its security options. An
# engine that already answers without it is left running, with a warning.
set -euo pipefail

LOG=${DOCKERD_LOG:-/var/log/dockerd.log}
WAIT_S=${DOCKERD_WAIT_S:-60}

say() { echo "[docker-engine] $*"; }
die() { echo "[docker-engine] error: $*" >&2; exit 1; }

engine_answers() { docker info >/dev/null 2>&1; }

USERNS=${DOCKERD_USERNS_REMAP:-default}

if command -v docker >/dev/null 2>&1 && engine_answers; then
    say "engine already answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null)); nothing to do"
    if [ "$USERNS" != "off" ] && ! docker info --format '{{.SecurityOptions}}' 2>/dev/null | grep -q userns; then
        say "warning: this engine does not remap user namespaces: a container's root is the"
        say "host's root. Restart it with --userns-remap=default (\"userns-remap\": \"default\""
        say "in /etc/docker/daemon.json), then rebuild the images (make images)"
    fi
    exit 0
fi

[ "$(id -u)" -eq 0 ] || die "no engine answers and starting one needs root; run: sudo $0"

install_engine() {
    if command -v dockerd >/dev/null 2>&1; then
        return
    fi
    # Only refresh the package lists when they do not know docker.io yet:
    # an update is slow and may be unavailable offline.
    # (Capture first: with pipefail, `grep -q` closing the pipe early would make
    # the whole test fail.)
    local policy
    policy=$(apt-cache policy docker.io 2>/dev/null || true)
    if ! grep -q 'Candidate: [0-9]' <<<"$policy"; then
        say "apt-get update"
        apt-get update -qq
    fi
    say "installing docker.io from the Debian archive"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        docker.io iptables ca-certificates >/dev/null
}

# Debian 12 defaults to the nftables backend of iptables. Some kernels (minimal
# VMs) ship without nf_tables but with the legacy xtables modules, and dockerd
# then fails to create its NAT chains; pick whichever backend actually works.
choose_iptables_backend() {
    if iptables -t nat -L -n >/dev/null 2>&1; then
        echo "iptables"
        return
    fi
    if command -v iptables-legacy >/dev/null 2>&1 && iptables-legacy -t nat -L -n >/dev/null 2>&1; then
        update-alternatives --set iptables /usr/sbin/iptables-legacy >/dev/null
        update-alternatives --set ip6tables /usr/sbin/ip6tables-legacy >/dev/null 2>&1 || true
        echo "iptables-legacy"
        return
    fi
    echo "none"
}

wait_for_engine() {
    local pid=$1 deadline=$((SECONDS + WAIT_S))
    while [ $SECONDS -lt $deadline ]; do
        engine_answers && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 1
    done
    return 1
}

start_dockerd() {
    local -a args=(--log-level=warn)
    if [ "$USERNS" != "off" ]; then
        # Containers' root is an unprivileged uid on the host (dockerd adds the dockremap
        # user and its /etc/subuid range the first time). Images live under a root of
        # their own (/var/lib/docker/<uid>.<gid>): build them after this switch.
        args+=(--userns-remap="$USERNS")
    fi
    # --iptables=false is only a fallback: published ports then still work through
    # docker-proxy (the userland proxy listens on the host address and forwards
    # over the bridge), but containers lose NAT to the outside world.
    if [ "$(choose_iptables_backend)" = "none" ]; then
        say "no working iptables backend; starting dockerd with --iptables=false"
        args+=(--iptables=false --ip-masq=false)
    fi
    # shellcheck disable=SC2206  # extra args are word-split on purpose
    args+=(${DOCKERD_EXTRA_ARGS:-})
    say "starting dockerd ${args[*]} (log: $LOG)"
    mkdir -p "$(dirname "$LOG")"
    # setsid: dockerd must outlive this script and the shell that ran it.
    setsid dockerd "${args[@]}" >>"$LOG" 2>&1 </dev/null &
    local pid=$!
    if wait_for_engine "$pid"; then
        say "engine answers: $(docker version --format 'server {{.Server.Version}}, API {{.Server.APIVersion}}') (dockerd pid $pid)"
        return 0
    fi
    kill "$pid" 2>/dev/null || true
    echo "--- last lines of $LOG ---" >&2
    tail -n 30 "$LOG" >&2
    die "dockerd did not answer within ${WAIT_S}s"
}

install_engine

# A dockerd may already run but not answer yet (just started by someone else),
# or have died leaving a stale pid file behind.
if pgrep -x dockerd >/dev/null 2>&1; then
    say "dockerd is running but not answering yet; waiting"
    if wait_for_engine "$(pgrep -x dockerd | head -n1)"; then
        say "engine answers"
        exit 0
    fi
    die "a dockerd process exists but does not answer; see $LOG"
fi
rm -f /var/run/docker.pid

start_dockerd
