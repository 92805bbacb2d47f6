#!/usr/bin/env bash
# Build the control plane's images, FROM the project's base image (images/build.sh base:
# debootstrap, no registry), tagged gpurental/<role>:$GPURENTAL_VERSION (default latest):
#
#   platform  the project, its runtime wheels (downloaded here by pip at the versions in
#             requirements.lock; the image installs them with --no-index)
#   postgres, redis, rabbitmq, caddy   Debian's packages, installed from the Debian mirror
#
# Each image is skipped when its inputs are unchanged (label gpurental.inputs), so a second
# run takes seconds. FORCE=1 rebuilds everything.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=$REPO/var/deploy
VERSION=${GPURENTAL_VERSION:-latest}
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
FORCE=${FORCE:-0}
# Wheels the image's Python needs beyond this machine's resolution (see wheels()).
EXTRA_WHEELS='async-timeout==5.0.1'
say() { echo "[deploy] $*"; }
die() { echo "[deploy] error: $*" >&2; exit 1; }
hash_of() { sha256sum | cut -c1-16; }
label() { docker image inspect --format '{{ index .Config.Labels "gpurental.inputs" }}' "$1" 2>/dev/null || true; }
docker buildx version >/dev/null 2>&1 || export DOCKER_BUILDKIT=0

mkdir -p "$CACHE"
"$REPO/images/build.sh" base
BASE_ID=$(docker image inspect --format '{{.Id}}' gpurental/base:bookworm)

# The project's files as git sees them (tracked and new, nothing ignored).
app_files() {
    git -C "$REPO" ls-files -co --exclude-standard -- gpurental templates static locale \
        manage.py pyproject.toml deploy/images | sort
}

wheels() {
    local dir=$CACHE/wheels want
    # The lock and the project's dependencies (not the rest of pyproject.toml: lint settings).
    want=$({ cat "$REPO/requirements.lock"; echo "$EXTRA_WHEELS"
             "$PYTHON" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"])' \
                 "$REPO/pyproject.toml"; } | hash_of)
    if [ "$FORCE" != 1 ] && [ "$(cat "$dir/.inputs" 2>/dev/null)" = "$want" ]; then return; fi
    say "platform: downloading the runtime wheels (requirements.lock)…"
    rm -rf "$dir" && mkdir -p "$dir"
    "$PYTHON" -m pip wheel --quiet --disable-pip-version-check -c "$REPO/requirements.lock" \
        --wheel-dir "$dir" "$REPO" >"$CACHE/wheels.log" 2>&1 \
        || { tail -n 20 "$CACHE/wheels.log" >&2; die "pip wheel failed; log: $CACHE/wheels.log"; }
    rm -f "$dir"/gpurental-*.whl  # the project itself goes in as files, at /app
    # Resolved on this machine's Python; Debian 12's 3.11.2 in the image also needs what
    # redis asks for below 3.11.3 (the image's pip resolves again and would refuse without it).
    "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        -d "$dir" $EXTRA_WHEELS >>"$CACHE/wheels.log" 2>&1 \
        || { tail -n 20 "$CACHE/wheels.log" >&2; die "pip download failed; log: $CACHE/wheels.log"; }
    echo "$want" >"$dir/.inputs"
}

build() {  # build ROLE CONTEXT INPUTS-HASH
    local role=$1 ctx=$2 want=$3 tag=gpurental/$1:$VERSION
    if [ "$FORCE" != 1 ] && [ "$(label "$tag")" = "$want" ]; then
        say "$role: $tag is up to date"
        return
    fi
    say "$role: docker build → $tag"
    docker build --label "gpurental.inputs=$want" --label "gpurental.deploy=$role" \
        -t "$tag" "$ctx" >"$CACHE/$role.log" 2>&1 \
        || { tail -n 30 "$CACHE/$role.log" >&2; die "docker build of $role failed; log: $CACHE/$role.log"; }
}

t0=$SECONDS
wheels
ctx=$CACHE/context/platform
rm -rf "$ctx" && mkdir -p "$ctx/app"
cp "$REPO/deploy/images/platform/Dockerfile" "$ctx/"
cp -r "$CACHE/wheels" "$ctx/wheels"
app_files | tar -C "$REPO" -cf - -T - | tar -C "$ctx/app" -xf -
want=$({ echo "$BASE_ID"; cat "$CACHE/wheels/.inputs"; app_files | (cd "$REPO" && xargs sha256sum); } | hash_of)
build platform "$ctx" "$want"
for role in postgres redis rabbitmq caddy; do
    src=$REPO/deploy/images/$role
    want=$({ echo "$BASE_ID"; cat "$src"/*; } | hash_of)
    build "$role" "$src" "$want"
done
docker image prune --force --filter label=gpurental.deploy >/dev/null
say "done in $((SECONDS - t0)) s: gpurental/{platform,postgres,redis,rabbitmq,caddy}:$VERSION"
