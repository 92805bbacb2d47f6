#!/usr/bin/env bash
# Install the gpurental agent on a GPU host, as a systemd service, and join the platform.
#
#   sudo deploy/host/install.sh --join "<the host's join command>" --address 203.0.113.7 \
#        --broker-ca broker-ca.pem
#
# It first checks what an NVIDIA host needs and refuses, naming what is missing, when one
# of these is not there: the Docker Engine, the NVIDIA driver (nvidia-smi), a CUDA version
# of at least MIN_CUDA (default 12.0) as the driver reports it, and the NVIDIA Container
# Toolkit (the engine's nvidia runtime or a CDI spec). --simulated skips the GPU checks
# (a test host with simulated GPUs); --check-only stops after the checks. --upgrade, on a
# host already joined, installs this checkout's agent and restarts it, keeping its settings
# (the last step of deploy/upgrade.sh).
#
# The join command comes from the back-office (Fleet → Hosts → Rotate join token) or from
# `manage.py host_add NAME --address IP` on the control plane.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MIN_CUDA=${MIN_CUDA:-12.0}
PREFIX=${PREFIX:-/opt/gpurental}
ETC=${ETC:-/etc/gpurental}
join="" address="" broker_ca="" simulated=0 check_only=0 upgrade=0
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        --join) join=$2; shift 2 ;;
        --address) address=$2; shift 2 ;;
        --broker-ca) broker_ca=$2; shift 2 ;;
        --simulated) simulated=1; shift ;;
        --check-only) check_only=1; shift ;;
        --upgrade) upgrade=1; shift ;;
        -h|--help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
failed=0
ok() { echo "  ok    $*"; }
refuse() { echo "  MISSING  $*" >&2; failed=1; }
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

echo "Checking this host:"
if [ "$upgrade" = 1 ]; then
    [ -f "$ETC/agent.env" ] || refuse "--upgrade: $ETC/agent.env is missing; this host never joined (use --join)"
    if grep -q '^GPURENTAL_GPU_SOURCE=simulated' "$ETC/agent.env" 2>/dev/null; then simulated=1; fi
fi
if docker info >/dev/null 2>&1; then
    ok "Docker Engine $(docker version --format '{{.Server.Version}}')"
else
    refuse "Docker Engine: 'docker info' fails. Install Docker Engine (Debian: apt-get install docker.io) and start it."
fi
if [ "$simulated" = 1 ]; then
    ok "GPU checks skipped (--simulated: this host's GPUs are simulated)"
elif ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    refuse "NVIDIA driver: nvidia-smi is missing or sees no GPU. Install the driver (Debian: nvidia-driver, or NVIDIA's .run) and reboot."
else
    driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1)
    cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n1)
    ok "NVIDIA driver $driver, $(nvidia-smi -L | wc -l) GPU(s)"
    if [ -n "$cuda" ] && version_ge "$cuda" "$MIN_CUDA"; then
        ok "CUDA $cuda (at least $MIN_CUDA)"
    else
        refuse "CUDA: the driver supports CUDA ${cuda:-unknown}, images need at least $MIN_CUDA. Upgrade the driver."
    fi
    if docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q nvidia \
        || [ -e /etc/cdi/nvidia.yaml ] || [ -e /var/run/cdi/nvidia.yaml ]; then
        ok "NVIDIA Container Toolkit ($(nvidia-ctk --version 2>/dev/null | head -n1 || echo 'runtime registered'))"
    else
        refuse "NVIDIA Container Toolkit: Docker has no nvidia runtime and there is no CDI spec. Install nvidia-container-toolkit, then: nvidia-ctk runtime configure --runtime=docker && systemctl restart docker"
    fi
fi
[ -n "$join" ] || [ "$check_only" = 1 ] || [ "$upgrade" = 1 ] || refuse "--join: give the host's join command (back-office → Fleet → Hosts, or manage.py host_add)"
if [ "$failed" = 1 ]; then
    echo "Refused: install what is MISSING above, then run this again." >&2
    exit 3
fi
[ "$check_only" = 1 ] && { echo "All checks passed."; exit 0; }
[ "$(id -u)" -eq 0 ] || { echo "run it as root (sudo): it installs a systemd service" >&2; exit 2; }

echo "Installing the agent in $PREFIX"
python3 -m venv "$PREFIX"
"$PREFIX/bin/pip" install --quiet --disable-pip-version-check "$REPO"
if [ "$upgrade" = 1 ]; then
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        systemctl restart gpurental-agent.service
        echo "Upgraded and restarted: $("$PREFIX/bin/python" -c 'from gpurental.protocol import SPEC_VERSION as v; print(f"start spec version {v}")')"
    else
        echo "Upgraded; restart the agent to run it."
    fi
    exit 0
fi
install -d -m 700 "$ETC" && install -d -m 700 /var/lib/gpurental
env_file=$ETC/agent.env
umask 077
{
    echo "# From the join command ($(date -u +%FT%TZ)); deploy/host/install.sh"
    # The join command's words: NAME='value' … python -m gpurental.agent
    eval "set -- $join"
    for word in "$@"; do
        case $word in GPURENTAL_*=*) printf '%s\n' "$word" ;; esac
    done
    echo "GPURENTAL_AGENT_DIR=/var/lib/gpurental"
    [ -n "$address" ] && echo "GPURENTAL_BIND_ADDRESS=$address"
    [ "$simulated" = 1 ] && echo "GPURENTAL_GPU_SOURCE=simulated"
} >"$env_file.new"
if [ -n "$broker_ca" ]; then
    install -m 644 "$broker_ca" "$ETC/broker-ca.pem"
    sed -i '/^GPURENTAL_BROKER_CA_FILE=/d' "$env_file.new"
    echo "GPURENTAL_BROKER_CA_FILE=$ETC/broker-ca.pem" >>"$env_file.new"
fi
mv "$env_file.new" "$env_file"
echo "  wrote $env_file"
install -m 644 "$REPO/deploy/host/gpurental-agent.service" /etc/systemd/system/gpurental-agent.service
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    systemctl enable --now gpurental-agent.service
    echo "Started: systemctl status gpurental-agent; journalctl -u gpurental-agent -f"
else
    echo "No systemd here: start it with  set -a; . $env_file; $PREFIX/bin/python -m gpurental.agent"
fi
