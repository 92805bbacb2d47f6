#!/usr/bin/env bash
# A rolling upgrade of the control plane to gpurental/platform:$1, one process at a time,
# with no request lost behind Caddy:
#
#   GPURENTAL_VERSION=v0.4.0 deploy/build.sh      # the new images, beside the running ones
#   deploy/upgrade.sh v0.4.0
#
# 1. a backup (manage.py backup), so a failed migration can be undone;
# 2. migrations, with the new image, while the old code runs: every migration must keep
#    the running release working (add columns nullable or with defaults, and drop or
#    rename only in the release after the one that stopped using them);
# 3. web-1, web-2, gateway-1, gateway-2, the SSH gateway, the workers, notify and beat,
#    one at a time, each waiting for its health check (or 5 s of running) before the next;
# 4. then write GPURENTAL_VERSION into deploy/.env.
#
# GPU hosts come last, one at a time: `deploy/host/install.sh --upgrade` there. An agent
# older than the control plane refuses start specs it does not know, naming both versions
# (protocol.SPEC_VERSION), so nothing runs half-understood in between.
set -euo pipefail
NEW=${1:?usage: deploy/upgrade.sh VERSION   (images built by GPURENTAL_VERSION=VERSION deploy/build.sh)}
DEPLOY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ENV_FILE=${ENV_FILE:-$DEPLOY/.env}
compose=(docker-compose -f "$DEPLOY/compose.yml")
[ -f "$ENV_FILE" ] && compose+=(--env-file "$ENV_FILE")
ROLES=${ROLES:-"web-1 web-2 gateway-1 gateway-2 ssh worker-1 worker-2 notify beat"}
say() { echo "[upgrade $(date +%T)] $*"; }
docker image inspect "gpurental/platform:$NEW" >/dev/null 2>&1 \
    || { echo "no image gpurental/platform:$NEW: build it with GPURENTAL_VERSION=$NEW deploy/build.sh" >&2; exit 2; }

wait_ready() {  # a service's new container: healthy, or running 5 s where it has no check
    local service=$1 cid state health deadline=$((SECONDS + 180))
    while [ $SECONDS -lt $deadline ]; do
        cid=$("${compose[@]}" ps -q "$service")
        state=$(docker inspect -f '{{.State.Status}}' "$cid" 2>/dev/null || echo gone)
        health=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$cid" 2>/dev/null || true)
        if [ "$state" = running ] && { [ "$health" = healthy ] || { [ -z "$health" ] && sleep 5 && [ "$(docker inspect -f '{{.State.Status}}' "$cid")" = running ]; }; }; then
            return 0
        fi
        sleep 1
    done
    echo "$service did not become ready on $NEW within 180 s; it keeps running what it could." >&2
    "${compose[@]}" logs --tail 30 "$service" >&2
    exit 1
}

say "backup before migrating"
"${compose[@]}" exec -T web-1 python manage.py backup
say "migrations with $NEW (the running release keeps serving)"
GPURENTAL_VERSION=$NEW "${compose[@]}" run --rm --no-deps migrate
for service in $ROLES; do
    say "$service → $NEW"
    GPURENTAL_VERSION=$NEW "${compose[@]}" up -d --no-deps --force-recreate "$service" 2>&1 | grep -v '^$' || true
    wait_ready "$service"
done
if [ -f "$ENV_FILE" ]; then
    if grep -q '^GPURENTAL_VERSION=' "$ENV_FILE"; then
        sed -i "s/^GPURENTAL_VERSION=.*/GPURENTAL_VERSION=$NEW/" "$ENV_FILE"
    else
        echo "GPURENTAL_VERSION=$NEW" >>"$ENV_FILE"
    fi
fi
say "the control plane runs $NEW; now each GPU host: deploy/host/install.sh --upgrade"
