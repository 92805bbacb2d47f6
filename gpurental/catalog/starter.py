"""The starter catalog: real GPU specs, plans for 1, 2, 4 and 8 GPUs, and the images
``make images`` builds. ``make demo`` loads it with its logins; an operator loads it alone
with ``manage.py catalog_starter`` and edits prices in the back-office.

Idempotent: loading it again updates the same rows (by slug) and adds nothing.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction

from gpurental.catalog.models import GPUModel, ImageAlias, ImageTemplate, Interconnect, Plan

# Dense tensor TFLOPS and bandwidths from NVIDIA's data sheets.
GPU_MODELS = [
    {
        "slug": "a10g",
        "name": "A10G 24GB",
        "short_name": "A10G",
        "nvml_names": ["NVIDIA A10G"],
        "memory_gb": 24,
        "fp16_tflops": "125.0",
        "bf16_tflops": "125.0",
        "fp32_tflops": "31.2",
        "memory_bandwidth_gbs": 600,
        "interconnect": Interconnect.PCIE,
        "nvlink_bandwidth_gbs": 0,
        "per_gpu_hour": "1.10",
        "vcpus": 8,
        "ram": 32,
    },
    {
        # The article's warm_pool instance_type = "A10".
        "slug": "a10",
        "name": "A10 24GB",
        "short_name": "A10",
        "nvml_names": ["NVIDIA A10"],
        "memory_gb": 24,
        "fp16_tflops": "125.0",
        "bf16_tflops": "125.0",
        "fp32_tflops": "31.2",
        "memory_bandwidth_gbs": 600,
        "interconnect": Interconnect.PCIE,
        "nvlink_bandwidth_gbs": 0,
        "per_gpu_hour": "0.90",
        "vcpus": 8,
        "ram": 32,
    },
    {
        "slug": "l4",
        "name": "L4 24GB",
        "short_name": "L4",
        "nvml_names": ["NVIDIA L4"],
        "memory_gb": 24,
        "fp16_tflops": "121.0",
        "bf16_tflops": "121.0",
        "fp32_tflops": "30.3",
        "memory_bandwidth_gbs": 300,
        "interconnect": Interconnect.PCIE,
        "nvlink_bandwidth_gbs": 0,
        "per_gpu_hour": "0.80",
        "vcpus": 8,
        "ram": 32,
    },
    {
        "slug": "a100-80gb-sxm",
        "name": "A100 80GB SXM",
        "short_name": "A100",
        "nvml_names": ["NVIDIA A100-SXM4-80GB"],
        "memory_gb": 80,
        "fp16_tflops": "312.0",
        "bf16_tflops": "312.0",
        "fp32_tflops": "19.5",
        "memory_bandwidth_gbs": 2039,
        "interconnect": Interconnect.NVSWITCH,
        "nvlink_bandwidth_gbs": 600,
        "per_gpu_hour": "2.20",
        "vcpus": 16,
        "ram": 120,
    },
    {
        "slug": "h100-80gb-sxm",
        "name": "H100 80GB SXM",
        "short_name": "H100",
        "nvml_names": ["NVIDIA H100 80GB HBM3"],
        "memory_gb": 80,
        "fp16_tflops": "989.4",
        "bf16_tflops": "989.4",
        "fp32_tflops": "66.9",
        "memory_bandwidth_gbs": 3350,
        "interconnect": Interconnect.NVSWITCH,
        "nvlink_bandwidth_gbs": 900,
        "per_gpu_hour": "3.90",
        "vcpus": 24,
        "ram": 240,
    },
]

IMAGES = [
    {
        "slug": "jupyter-cpu",
        "name": "JupyterLab (Python 3.11)",
        "image": "gpurental/jupyter-cpu:latest",
        "description": "JupyterLab 4 on Debian 12, built locally by `make images`.",
        "ssh_port": 2222,  # its entrypoint's sshd (images/jupyter-cpu/start.sh)
    },
    {
        # Both built by images/build.sh: `make images` (CPU), `CUDA=1 make images` (CUDA).
        "slug": "pytorch-2.13",
        "name": "PyTorch 2.13 + CUDA 13.0 + JupyterLab",
        "image": "gpurental/pytorch:2.13.0-cuda",
        "cpu_image": "gpurental/pytorch:2.13.0-cpu",
        "cuda_version": "13.0",
        "ssh_port": 2222,
        "description": "torch 2.13.0 (CUDA 13.0 wheels on NVIDIA hosts, CPU wheels on "
        "simulated ones), transformers 5.18.0, JupyterLab 4.6.6 on Debian 12.",
        # The article's framework="pytorch-2.1" launches this image.
        "aliases": {"pytorch-2.1": "the article's framework name; runs PyTorch 2.13"},
    },
    {
        "slug": "serving-echo",
        "name": "Serving echo (elastic groups)",
        "image": "gpurental/serving-echo:latest",
        "description": "A configurable-latency inference server for elastic groups: "
        "/infer?ms=200 (busy=1 burns CPU, which the simulated GPU follows), /healthz, "
        "/status. Built locally by `make images`.",
        "port": 8000,
        "http_ports": [8000],
    },
]

# What `make images-cuda` builds (images/build.sh cuda): loaded with `manage.py
# catalog_starter --cuda` on a fleet whose GPU hosts have them. Each runs where the host's
# driver supports its CUDA (fleet.drivers); on simulated hosts the CPU build stands in.
CUDA_IMAGES = [
    {
        "slug": "cuda-11.8",
        "name": "CUDA 11.8 runtime + JupyterLab",
        "image": "gpurental/cuda:11.8",
        "cpu_image": "gpurental/jupyter-cpu:latest",
        "cuda_version": "11.8",
        "ssh_port": 2222,
        "description": "cudart, cuBLAS and NVRTC 11.8 (NVIDIA's wheels) with JupyterLab 4 "
        "on Debian 12: bring your own framework. JupyterLab alone on simulated hosts.",
    },
    {
        "slug": "cuda-12.4",
        "name": "CUDA 12.4 runtime + JupyterLab",
        "image": "gpurental/cuda:12.4",
        "cpu_image": "gpurental/jupyter-cpu:latest",
        "cuda_version": "12.4",
        "ssh_port": 2222,
        "description": "cudart, cuBLAS and NVRTC 12.4 (NVIDIA's wheels) with JupyterLab 4 "
        "on Debian 12: bring your own framework. JupyterLab alone on simulated hosts.",
    },
    {
        "slug": "pytorch-2.1.2",
        "name": "PyTorch 2.1.2 + CUDA 12.1 + JupyterLab",
        "image": "gpurental/pytorch:2.1.2-cuda",
        "cuda_version": "12.1",
        "ssh_port": 2222,
        "description": "torch 2.1.2 (CUDA 12.1 wheels), transformers 4.36.2, numpy 1.26, "
        "JupyterLab 4 on Debian 12: the article's PyTorch 2.1.",
    },
    {
        "slug": "tensorflow-2.18",
        "name": "TensorFlow 2.18 + CUDA 12.5 + JupyterLab",
        "image": "gpurental/tensorflow:2.18.1-cuda",
        "cuda_version": "12.5",
        "ssh_port": 2222,
        "description": "tensorflow[and-cuda] 2.18.1 (CUDA 12.5, cuDNN 9 wheels), "
        "JupyterLab 4 on Debian 12.",
    },
]

PLAN_SIZES = (1, 2, 4, 8)


@transaction.atomic
def starter_catalog_load(*, cuda: bool = False) -> dict[str, GPUModel]:
    """GPU models, plans and images as above (with ``cuda``, the CUDA images too); returns
    the GPU models by slug."""
    models = {}
    for spec in GPU_MODELS:
        spec = dict(spec)
        per_gpu_hour, vcpus, ram = (
            Decimal(spec.pop("per_gpu_hour")),
            spec.pop("vcpus"),
            spec.pop("ram"),
        )
        model, _ = GPUModel.objects.update_or_create(slug=spec.pop("slug"), defaults=spec)
        models[model.slug] = model
        for count in PLAN_SIZES:
            Plan.objects.update_or_create(
                slug=f"{model.slug}-x{count}",
                defaults={
                    "name": f"{count}× {model.short_name}",
                    "gpu_model": model,
                    "gpu_count": count,
                    "vcpus": vcpus * count,
                    "memory_gb": ram * count,
                    "disk_gb": 100 * count,
                    "hourly_rate": per_gpu_hour * count,
                    "off_peak_discount": Decimal("0.30"),
                    "reserved_discount": Decimal("0.20") if count >= 4 else Decimal("0.15"),
                },
            )

    for spec in IMAGES + (CUDA_IMAGES if cuda else []):
        spec = dict(spec)
        aliases = spec.pop("aliases", {})
        template, _ = ImageTemplate.objects.update_or_create(slug=spec.pop("slug"), defaults=spec)
        for alias, note in aliases.items():
            ImageAlias.objects.update_or_create(
                name=alias, defaults={"template": template, "note": note}
            )

    return models
