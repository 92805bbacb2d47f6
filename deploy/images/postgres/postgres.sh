#!/bin/sh
# PostgreSQL 15 for the Compose layout. First start: a primary initialises its cluster
# (superuser, the platform's role and database, a replication role, passwords from
# /run/secrets); a replica (PG_ROLE=replica) clones the primary with pg_basebackup and
# follows it by streaming replication. Later starts just run the server.
set -eu
DATA=/var/lib/postgresql/data/pgdata
SECRETS=${SECRETS_DIR:-/run/secrets}
secret() { head -n1 "$SECRETS/$1"; }

init_primary() {
    pw=$(mktemp) && secret postgres_password >"$pw"
    initdb -D "$DATA" -U postgres --auth-local=peer --auth-host=scram-sha-256 --pwfile="$pw" \
        -E UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pw"
    cat >>"$DATA/postgresql.conf" <<CONF
listen_addresses = '*'
password_encryption = 'scram-sha-256'
wal_level = replica
max_wal_senders = 8
max_replication_slots = 8
hot_standby = on
wal_keep_size = '512MB'
CONF
    cat >>"$DATA/pg_hba.conf" <<HBA
host replication replicator all scram-sha-256
host all all all scram-sha-256
HBA
    pg_ctl -D "$DATA" -w -o "-c listen_addresses=''" start >/dev/null
    # Passwords are hex (deploy/secrets.sh): nothing in them needs quoting.
    psql -v ON_ERROR_STOP=1 -q -U postgres <<SQL
CREATE ROLE gpurental LOGIN PASSWORD '$(secret db_password)';
CREATE DATABASE gpurental OWNER gpurental;
CREATE ROLE replicator REPLICATION LOGIN PASSWORD '$(secret replication_password)';
SQL
    pg_ctl -D "$DATA" -w stop >/dev/null
    # From now on a commit returns once the replica has it too: a failover loses no
    # committed charge. While no replica is connected, commits wait (deploy/README.md,
    # "Failover"); the set-up above ran before, with no replica yet.
    echo "synchronous_standby_names = 'ANY 1 (*)'" >>"$DATA/postgresql.conf"
    echo "postgres: initialised a primary in $DATA"
}

init_replica() {
    primary=${PG_PRIMARY:?PG_PRIMARY names the primary to clone}
    until pg_isready -q -h "$primary"; do echo "postgres: waiting for $primary"; sleep 1; done
    PGPASSWORD=$(secret replication_password) pg_basebackup -h "$primary" -U replicator \
        -D "$DATA" -R -X stream -c fast
    echo "postgres: cloned $primary into $DATA; following it"
}

if [ ! -s "$DATA/PG_VERSION" ]; then
    mkdir -p "$DATA" && chmod 700 "$DATA"
    case "${PG_ROLE:-primary}" in
        primary) init_primary ;;
        replica) init_replica ;;
        *) echo "PG_ROLE=${PG_ROLE}: use primary or replica" >&2; exit 2 ;;
    esac
fi
exec postgres -D "$DATA"
