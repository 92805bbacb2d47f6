#!/usr/bin/env bash
# Promote the streaming replica (postgres-replica) after the primary (postgres) is lost.
# The platform's DATABASE_URL names both with target_session_attrs=read-write, so its new
# connections go to the promoted one by themselves; nothing else is restarted.
#
#   deploy/pg-failover.sh            (the same environment as docker-compose: deploy/.env,
#                                     COMPOSE_PROJECT_NAME)
#
# It refuses while the old primary still answers: two primaries would split the data.
# Afterwards the new primary has no replica, and commits no longer wait for one. Rebuild a
# replica from it (deploy/README.md, "Failover") before the next failure.
set -euo pipefail
DEPLOY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ENV_FILE=${ENV_FILE:-$DEPLOY/.env}
compose=(docker-compose -f "$DEPLOY/compose.yml")
[ -f "$ENV_FILE" ] && compose+=(--env-file "$ENV_FILE")
DATA=/var/lib/postgresql/data/pgdata

if "${compose[@]}" exec -T postgres pg_isready -q -h 127.0.0.1 >/dev/null 2>&1; then
    echo "pg-failover: the primary (postgres) still answers: refusing to promote." >&2
    echo "  Stop it first if it must go: docker-compose stop postgres" >&2
    exit 2
fi
"${compose[@]}" exec -T postgres-replica pg_ctl promote -w -t 30 -D "$DATA"
# Its configuration came from the old primary: commits would wait for a replica forever.
"${compose[@]}" exec -T postgres-replica psql -q -v ON_ERROR_STOP=1 -U postgres \
    -c "ALTER SYSTEM SET synchronous_standby_names = ''" -c "SELECT pg_reload_conf()" >/dev/null
echo "pg-failover: postgres-replica is the primary now"
