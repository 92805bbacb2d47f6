"""scripts/gpu_matmul.py, the matmul scripts/gpu-check.sh runs in each framework image on a
GPU: here, in the PyTorch CPU image, on the CPU, and refusing CUDA where there is none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_matmul.py"
IMAGE = "gpurental/pytorch:2.13.0-cpu"


def run(docker_client, *args: str) -> tuple[int, dict]:
    container = docker_client.containers.run(
        IMAGE,
        entrypoint=["/opt/venv/bin/python", "/gpu_matmul.py", *args],
        command=[],
        volumes={str(SCRIPT): {"bind": "/gpu_matmul.py", "mode": "ro"}},
        detach=True,
        network_disabled=True,
    )
    try:
        code = container.wait(timeout=120)["StatusCode"]
        lines = container.logs(stdout=True, stderr=False).decode().strip().splitlines()
    finally:
        container.remove(force=True)
    return code, json.loads(lines[-1])


def test_a_matmul_on_the_cpu_is_right_and_timed(docker_client):
    code, report = run(docker_client, "--device", "cpu", "--size", "256")
    assert code == 0 and report["ok"] is True
    assert report["framework"] == "torch" and report["device"] == "cpu"
    assert report["max_error"] < 1e-3  # float32 against float64
    assert report["fp32_tflops"] > 0


def test_cuda_asked_where_there_is_none_says_so(docker_client):
    code, report = run(docker_client, "--device", "cuda", "--size", "256")
    assert code == 1 and report["ok"] is False
    assert "torch.cuda.is_available() is False" in report["error"]
