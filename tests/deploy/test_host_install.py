"""deploy/host/install.sh checks what a GPU host needs and refuses, naming what is
missing, before it installs anything. Without NVIDIA hardware here, the driver is an
nvidia-smi on PATH that prints what the real one prints."""

import stat
import subprocess
from pathlib import Path

from tests.agent.conftest import skip_unless_ci

INSTALL = Path(__file__).resolve().parents[2] / "deploy/host/install.sh"

NVIDIA_SMI = """#!/bin/sh
case "$1" in
  -L) echo "GPU 0: NVIDIA A10G (UUID: GPU-0f4c)";;
  --query-gpu=driver_version) echo "{driver}";;
  *) echo "| NVIDIA-SMI {driver}   Driver Version: {driver}   CUDA Version: {cuda}     |";;
esac
"""


def _run(tmp_path, *args, driver=None, cuda=None):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("docker", "sort", "sed", "head", "wc", "grep", "printf"):  # what it calls
        path = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        if path and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(path)
    smi = bin_dir / "nvidia-smi"
    smi.unlink(missing_ok=True)
    if driver:
        smi.write_text(NVIDIA_SMI.format(driver=driver, cuda=cuda))
        smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    return subprocess.run(
        ["/bin/bash", str(INSTALL), *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_no_driver_is_refused_by_name(tmp_path):
    result = _run(tmp_path, "--check-only")
    assert result.returncode == 3
    assert "MISSING  NVIDIA driver: nvidia-smi is missing" in result.stderr
    assert "Refused: install what is MISSING above" in result.stderr


def test_an_old_cuda_and_no_container_toolkit_are_refused_by_name(tmp_path):
    result = _run(tmp_path, "--check-only", driver="470.256.02", cuda="11.4")
    assert result.returncode == 3
    assert "ok    NVIDIA driver 470.256.02, 1 GPU(s)" in result.stdout
    assert "CUDA: the driver supports CUDA 11.4, images need at least 12.0" in result.stderr
    assert "NVIDIA Container Toolkit: Docker has no nvidia runtime" in result.stderr


def test_a_join_command_is_required_to_install(tmp_path):
    result = _run(tmp_path, "--simulated")
    assert result.returncode == 3
    assert "--join: give the host's join command" in result.stderr


def test_a_simulated_host_passes_the_checks_when_docker_answers(tmp_path):
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        skip_unless_ci("no Docker Engine answers")
    result = _run(tmp_path, "--check-only", "--simulated")
    assert result.returncode == 0, result.stderr
    assert "ok    Docker Engine" in result.stdout and "All checks passed." in result.stdout
