#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU, in one run on a lent GPU machine (no Django, no
# database, no Docker there; python3 with torch and nvidia-ml-py): the driver's view, the
# NVML source's hardware tests, the sampler's readings under load, and the acceptance
# probe against the GPU's spec sheet. From the repository root:
#     bash scripts/device/gpu_check.sh [OUT_DIR]
set -uo pipefail
out="${1:-${OUT:-/tmp}}"
export PYTHONUNBUFFERED=1
exec > >(tee "$out/gpu_check.log") 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "== nvidia-smi"
nvidia-smi
nvidia-smi topo -m
echo "== python"
python3 -c "import sys, pynvml, torch; print(sys.version.split()[0], 'pynvml', pynvml.__file__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
echo "== the NVML source on this GPU (tests/agent/test_nvml_hardware.py)"
python3 -m pytest -c /dev/null --rootdir . -p no:cacheprovider -p no:django --noconftest -q -rs tests/agent/test_nvml_hardware.py
echo "== the sampler's readings, idle / under load / idle (bench/nvml_sampler.py)"
python3 bench/nvml_sampler.py --seconds 15 --interval 0.5
echo "== the acceptance probe against the spec sheet (bench/acceptance.py --python python3)"
timeout 300 python3 bench/acceptance.py --python python3
echo "== done $(date -u +%FT%TZ)"
