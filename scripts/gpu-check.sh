#!/usr/bin/env bash
# The real-GPU path in one go, on a GPU machine, within a few minutes: writes a report
# (gpu-check.md) and the full log (gpu-check.log) to OUT_DIR. From the repository root:
#
#     bash scripts/gpu-check.sh [OUT_DIR]
#
# 1. The driver: nvidia-smi's inventory and topology.
# 2. NVML through the agent's own sampler (gpurental/agent/gpus, bench/nvml_sampler.py):
#    inventory, topology, readings idle and under load; and the NVML hardware tests.
# 3. The acceptance probe against the data sheet's nominal figures, each with its source
#    (gpurental/acceptance/specsheets.py; thresholds ACCEPTANCE_THRESHOLD_GEMM 60 % for
#    dense GEMMs, ACCEPTANCE_THRESHOLD 80 % for the rest).
# 4. A CUDA matmul in each framework image (label gpurental.cuda set: make images-cuda),
#    in a container with --gpus where Docker and the NVIDIA Container Toolkit are present;
#    otherwise in this machine's Python with each framework it has, which the report says.
#
# Needs python3 with nvidia-ml-py (and torch for the load and the probe). No Django, no
# database. A step that cannot run says why in the report; the script goes on.
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="${1:-${OUT:-/tmp}}"
mkdir -p "$out"
report="$out/gpu-check.md"
log="$out/gpu-check.log"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
cd "$REPO"
: >"$log"

section() { printf '\n## %s\n\n' "$1" >>"$report"; echo "== $1" | tee -a "$log"; }
# Runs a command, its output into the log and, fenced, into the report.
fenced() {
    local rc
    echo '```' >>"$report"
    "$@" 2>&1 | tee -a "$log" >>"$report"
    rc=${PIPESTATUS[0]}
    echo '```' >>"$report"
    [ "$rc" -eq 0 ] || printf '\n(exit status %s)\n' "$rc" >>"$report"
    return 0
}

{
    echo "# gpu-check: $(hostname)"
    echo
    echo "$(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')," \
        "$($PY -c 'import sys; print("Python", sys.version.split()[0])' 2>/dev/null)"
} >"$report"

section "1. The driver (nvidia-smi)"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    fenced nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version,power.limit --format=csv
    fenced nvidia-smi topo -m
    have_gpu=1
else
    echo "No NVIDIA driver answers on this machine (nvidia-smi missing or failing): the" \
        "steps below run on what is here and say so." >>"$report"
    have_gpu=0
fi

section "2. NVML through the agent's sampler"
if [ "$have_gpu" = 1 ]; then
    fenced "$PY" bench/nvml_sampler.py --seconds 15 --interval 0.5
    echo >>"$report"
    fenced "$PY" -m pytest -c /dev/null --rootdir . -p no:cacheprovider -p no:django --noconftest \
        -q -rs tests/agent/test_nvml_hardware.py
else
    echo "No GPU: the sampler read the tests' fake pynvml instead (figures not a GPU's)." >>"$report"
    fenced "$PY" bench/nvml_sampler.py --smoke
fi

section "3. The acceptance probe against the data sheet"
if "$PY" -c 'import torch' 2>/dev/null; then
    fenced timeout 300 "$PY" bench/acceptance.py --python "$PY"
elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    echo "This Python has no torch: the probe ran in the framework image." >>"$report"
    fenced timeout 300 "$PY" bench/acceptance.py
else
    echo "Not run: this Python has no torch and no Docker Engine answers." >>"$report"
fi

section "4. A CUDA matmul in each framework image"
device=cuda
[ "$have_gpu" = 1 ] || device=cpu
size=8192
[ "$have_gpu" = 1 ] || size=512
images=()
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    for image in $(docker images --filter label=gpurental.cuda \
        --format '{{.Repository}}:{{.Tag}}' | grep -v '<none>' | sort -u); do
        # A CPU build (gpurental/pytorch:…-cpu) has the label, empty.
        [ -n "$(docker image inspect --format '{{ index .Config.Labels "gpurental.cuda" }}' "$image")" ] \
            && images+=("$image")
    done
fi
toolkit=0
if command -v docker >/dev/null && docker info 2>/dev/null | grep -qi 'runtimes:.*nvidia'; then
    toolkit=1
fi
if [ "${#images[@]}" -gt 0 ] && { [ "$toolkit" = 1 ] || [ "$have_gpu" = 0 ]; }; then
    gpus=()
    [ "$have_gpu" = 1 ] && gpus=(--gpus all)
    echo "In each image, in a container${gpus[*]:+ with --gpus all} (device $device, n = $size):" >>"$report"
    for image in "${images[@]}"; do
        cuda=$(docker image inspect --format '{{ index .Config.Labels "gpurental.cuda" }}' "$image")
        echo "- \`$image\` (CUDA ${cuda:-none}):" >>"$report"
        fenced docker run --rm "${gpus[@]}" -e TF_CPP_MIN_LOG_LEVEL=2 -v "$REPO/scripts/gpu_matmul.py:/gpu_matmul.py:ro" \
            --entrypoint /opt/venv/bin/python "$image" /gpu_matmul.py --device "$device" --size "$size"
    done
else
    why="no framework image here (make images-cuda)"
    [ "${#images[@]}" -gt 0 ] && why="Docker has no NVIDIA runtime (the NVIDIA Container Toolkit)"
    command -v docker >/dev/null || why="no Docker here"
    echo "Not in the images: $why. In this machine's Python instead, with each framework" \
        "it has (device $device, n = $size):" >>"$report"
    ran=0
    for framework in torch tensorflow; do
        if "$PY" -c "import $framework" 2>/dev/null; then
            echo "- $framework:" >>"$report"
            fenced "$PY" scripts/gpu_matmul.py --framework "$framework" --device "$device" --size "$size"
            ran=1
        fi
    done
    [ "$ran" = 1 ] || echo "- none: this Python has neither torch nor tensorflow." >>"$report"
fi

echo "== report: $report" | tee -a "$log"
