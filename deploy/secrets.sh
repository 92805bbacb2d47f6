#!/usr/bin/env bash
# Make the control plane's secrets once, as files, one folder per service (each readable
# only by that service's uid in its image), so that no secret is a default and none is in
# the environment or the Compose file:
#
#   secrets/platform/   SECRET_KEY, DATABASE_URL (both PostgreSQL servers: whichever takes writes), REDIS_URL, CELERY_BROKER_URL,
#                       RABBITMQ_MANAGEMENT_URL, METRICS_TOKEN, the broker's CA, the SSH
#                       gateway's host and client keys
#   secrets/postgres/   the superuser, platform and replication passwords
#   secrets/redis/      its password
#   secrets/rabbitmq/   the admin password, the Erlang cookie, the amqps certificate and key
#   secrets/agent/      broker-ca.pem, the CA a GPU host checks the broker against (public)
#
# Running it again keeps every value (it only fills what is missing) and fixes owners.
# Usage: deploy/secrets.sh [DIR]   (default: deploy/secrets; BROKER_HOST names the broker
# as GPU hosts reach it, for its certificate; default: the machine's host name)
set -euo pipefail
DIR=${1:-${SECRETS_DIR:-$(cd "$(dirname "$0")" && pwd)/secrets}}
BROKER_HOST=${BROKER_HOST:-$(hostname -f 2>/dev/null || hostname)}
say() { echo "[secrets] $*"; }
umask 077
mkdir -p "$DIR"/{source,platform/ssh,postgres,redis,rabbitmq/tls,agent}
chmod 700 "$DIR"

# One value per name in source/, made once: 32 random bytes as hex (nothing to quote).
value() {
    local file="$DIR/source/$1"
    [ -s "$file" ] || { openssl rand -hex 32 >"$file"; say "made $1" >&2; }
    head -n1 "$file"
}
put() { printf '%s\n' "$2" >"$1"; }

put "$DIR/platform/secret_key" "$(value secret_key)"
put "$DIR/platform/metrics_token" "$(value metrics_token)"
put "$DIR/platform/database_url" \
    "postgres://gpurental:$(value db_password)@postgres,postgres-replica:5432/gpurental?target_session_attrs=read-write&connect_timeout=3"
put "$DIR/platform/redis_url" "redis://:$(value redis_password)@redis:6379/0"
put "$DIR/platform/celery_broker_url" "amqps://admin:$(value rabbitmq_password)@rabbitmq:5671//"
put "$DIR/platform/rabbitmq_management_url" "http://admin:$(value rabbitmq_password)@rabbitmq:15672"
put "$DIR/postgres/postgres_password" "$(value postgres_password)"
put "$DIR/postgres/db_password" "$(value db_password)"
put "$DIR/postgres/replication_password" "$(value replication_password)"
put "$DIR/redis/redis_password" "$(value redis_password)"
put "$DIR/rabbitmq/rabbitmq_password" "$(value rabbitmq_password)"
put "$DIR/rabbitmq/erlang_cookie" "$(value erlang_cookie)"

# The broker's own CA (agents check amqps against it; Caddy's certificates are separate).
TLS=$DIR/source/tls
mkdir -p "$TLS"
if [ ! -s "$TLS/ca.pem" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
        -subj "/CN=gpurental broker CA" -keyout "$TLS/ca.key" -out "$TLS/ca.pem" 2>/dev/null
    say "made the broker CA"
fi
if [ ! -s "$TLS/broker.pem" ] || [ "$(cat "$TLS/broker.names" 2>/dev/null)" != "$BROKER_HOST" ]; then
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=rabbitmq" \
        -keyout "$TLS/broker.key" -out "$TLS/broker.csr" 2>/dev/null
    openssl x509 -req -in "$TLS/broker.csr" -CA "$TLS/ca.pem" -CAkey "$TLS/ca.key" \
        -CAcreateserial -days 825 -out "$TLS/broker.pem" \
        -extfile <(printf 'subjectAltName=DNS:rabbitmq,DNS:%s,DNS:localhost,IP:127.0.0.1\n' "$BROKER_HOST") \
        2>/dev/null
    echo "$BROKER_HOST" >"$TLS/broker.names"
    say "made the broker's certificate for rabbitmq, $BROKER_HOST, localhost and 127.0.0.1"
fi
cp "$TLS/ca.pem" "$TLS/broker.pem" "$TLS/broker.key" "$DIR/rabbitmq/tls/"
cp "$TLS/ca.pem" "$DIR/platform/broker-ca.pem"
cp "$TLS/ca.pem" "$DIR/agent/broker-ca.pem"

for key in gateway_host_ed25519 gateway_client_ed25519; do
    [ -s "$DIR/source/$key" ] || { ssh-keygen -q -t ed25519 -N '' -C "gpurental $key" -f "$DIR/source/$key"; say "made $key"; }
    cp "$DIR/source/$key" "$DIR/source/$key.pub" "$DIR/platform/ssh/"
done

# Owners: the uids fixed in deploy/images/Dockerfile, shifted where the engine remaps user
# namespaces (--userns-remap: container uid N is host uid START+N).
shift_by=0
if docker info --format '{{json .SecurityOptions}}' 2>/dev/null | grep -q userns; then
    shift_by=$(awk -F: '$1 == "dockremap" { print $2; exit }' /etc/subuid)
fi
own() { chown -R "$(($2 + shift_by)):$(($2 + shift_by))" "$DIR/$1"; chmod -R u=rwX,go= "$DIR/$1"; }
own platform 990
own postgres 991
own redis 992
own rabbitmq 993
chmod -R a+rX "$DIR/agent"
say "secrets in $DIR (uids shifted by $shift_by)"
