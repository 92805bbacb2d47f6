#!/bin/sh
# Redis 7 for the Compose layout: a password from /run/secrets, append-only on /data.
set -eu
conf=$(mktemp)
chmod 600 "$conf"
cat >"$conf" <<CONF
bind 0.0.0.0
port 6379
dir /data
appendonly yes
save ""
requirepass $(head -n1 "${SECRETS_DIR:-/run/secrets}/redis_password")
CONF
exec redis-server "$conf"
