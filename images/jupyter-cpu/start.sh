#!/bin/bash
# Entrypoint of gpurental's instance images (run by tini as the container's user: root,
# which the engine remaps to an unprivileged host uid; jovyan where it cannot remap).
#
# When the platform gives the container an sshd port (GPURENTAL_SSH_PORT), start sshd as
# this user before JupyterLab. Only the platform's SSH gateway may log in: the one line in
# authorized_keys is the gateway's client key; customers' keys never reach the host. The
# host key is new at every run, and the gateway checks it against the platform's copy.
#
# sshd logs in only the user it runs as (root, or jovyan), which the gateway asks for.
# As root it separates privileges into /run/sshd (the container keeps SYS_CHROOT for it).
# Then exec "$@".
set -euo pipefail

start_sshd() {
    local dir="/run/gpurental-ssh/$(id -un)" config permit=no
    if [ "$(id -u)" -eq 0 ]; then
        mkdir -p /run/sshd && chmod 0755 /run/sshd
        permit=prohibit-password
    fi
    mkdir -p "$dir"
    chmod 0700 "$dir"
    umask 077
    printf '%s\n' "$GPURENTAL_SSH_HOST_KEY" >"$dir/host_ed25519_key"
    printf '%s\n' "$GPURENTAL_SSH_AUTHORIZED_KEYS" >"$dir/authorized_keys"
    chmod 0600 "$dir/host_ed25519_key" "$dir/authorized_keys"
    config="$dir/sshd_config"
    {
        echo "Port $GPURENTAL_SSH_PORT"
        echo "HostKey $dir/host_ed25519_key"
        echo "AuthorizedKeysFile $dir/authorized_keys"
        echo "PidFile $dir/sshd.pid"
        echo "AuthenticationMethods publickey"
        echo "PubkeyAuthentication yes"
        echo "PasswordAuthentication no"
        echo "KbdInteractiveAuthentication no"
        echo "PermitRootLogin $permit"
        # The keys live in a 0700 folder of the user's own, under /run/gpurental-ssh (1777,
        # so that root and jovyan can each make theirs): sshd's StrictModes would refuse
        # that parent's mode.
        echo "StrictModes no"
        echo "AllowUsers $(id -un)"
        echo "UsePAM no"
        echo "AllowTcpForwarding yes"
        echo "AllowAgentForwarding no"
        echo "X11Forwarding no"
        echo "PermitTunnel no"
        echo "PermitUserEnvironment no"
        echo "PrintMotd no"
        echo "PrintLastLog no"
        echo "Subsystem sftp internal-sftp"
        echo "LogLevel INFO"
        # sshd gives sessions a bare environment; pass on the container's own variables
        # (PATH with the venv, GPU and cache settings), never the platform's secrets.
        setenv_line
    } >"$config"
    unset GPURENTAL_SSH_HOST_KEY GPURENTAL_SSH_AUTHORIZED_KEYS GPURENTAL_SSH_PORT
    # -D -e: stay a child of this process tree (tini reaps it) and log to the container's
    # output, where `docker logs` shows it.
    env -u JUPYTER_TOKEN /usr/sbin/sshd -D -e -f "$config" &
}

setenv_line() {
    local name value line=""
    while IFS= read -r name; do
        case "$name" in
            GPURENTAL_SSH_* | JUPYTER_TOKEN | HOSTNAME | HOME | USER | SHELL | PWD | SHLVL | _ | TERM) continue ;;
        esac
        value=${!name}
        # Only values sshd_config can hold without quoting rules of its own.
        [[ "$value" =~ ^[A-Za-z0-9_./:,=@+%-]*$ ]] || continue
        line+=" $name=$value"
    done < <(compgen -e)
    if [ -n "$line" ]; then echo "SetEnv$line"; fi
}

if [ -n "${GPURENTAL_SSH_PORT:-}" ]; then
    start_sshd
fi
# The host's shared Hugging Face cache is mounted read-only (GPURENTAL_HF_SHARED); HF_HOME
# is the instance's own: lay links to the shared files into it (hf_cache_seed.py).
if [ -n "${GPURENTAL_HF_SHARED:-}" ] && [ -x /usr/local/bin/gpurental-hf-seed ]; then
    /usr/local/bin/gpurental-hf-seed || true
fi
unset GPURENTAL_SSH_HOST_KEY GPURENTAL_SSH_AUTHORIZED_KEYS GPURENTAL_SSH_PORT
exec "$@"
