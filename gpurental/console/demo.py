"""Demo data: real GPU specs, plans for 1/2/4/8 GPUs, images, a local host, two logins.

Idempotent: running it again updates the same rows and adds nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import transaction

from gpurental.accounts.models import User
from gpurental.billing.models import LedgerEntry
from gpurental.billing.services import credit_add
from gpurental.catalog.models import GPUModel, ImageAlias, ImageTemplate, Interconnect, Plan
from gpurental.fleet.models import GPUSource, Host
from gpurental.fleet.services import (
    host_create,
    host_rotate_token,
    host_simulated_gpus_ensure,
    host_token_matches,
)

DEMO_CREDIT_NOTE = "Demo credit"

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

PLAN_SIZES = (1, 2, 4, 8)


@dataclass
class SeedResult:
    host_token: str | None  # only when a token was issued now


def local_agent_env_write(*, host: Host, token: str, path: Path) -> None:
    """The local agent's join settings, readable by the operator only (the token is a secret)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = {
        "GPURENTAL_BROKER_URL": settings.CELERY_BROKER_URL,
        "GPURENTAL_HOST_NAME": host.name,
        "GPURENTAL_HOST_TOKEN": token,
        "GPURENTAL_GPU_SOURCE": "simulated",
        "GPURENTAL_SIMULATED_GPUS": str(host.gpus.count() or 8),
        "GPURENTAL_SIMULATED_MODEL": "NVIDIA A10G",
        "GPURENTAL_AGENT_DIR": str(path.parent / f"agent-{host.name}"),
        # The shared Hugging Face cache (`modelcache fill --host local …`); its import
        # directory is the agent's default, <GPURENTAL_AGENT_DIR>/model-imports.
        "GPURENTAL_HF_CACHE_DIR": str(demo_hf_cache(path)),
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("".join(f"{key}={value}\n" for key, value in lines.items()))


def demo_hf_cache(agent_env: Path) -> Path:
    """The local agent's shared Hugging Face cache, next to its env file (under var/)."""
    return (agent_env.parent / "hf-cache").resolve()


def _env_token(path: Path) -> str:
    if not path.exists():
        return ""
    for line in path.read_text().splitlines():
        if line.startswith("GPURENTAL_HOST_TOKEN="):
            return line.split("=", 1)[1]
    return ""


def _user(email: str, password: str, **fields) -> User:
    user = User.objects.filter(email=email).first()
    if user is None:
        user = User.objects.create_user(email=email, password=password, **fields)
    return user


@transaction.atomic
def seed_demo(*, agent_env: Path | None = None) -> SeedResult:
    admin = _user("admin@example.com", "admin", full_name="Operator Admin")
    if not (admin.is_staff and admin.is_superuser):
        User.objects.filter(pk=admin.pk).update(is_staff=True, is_superuser=True)
    demo = _user("demo@example.com", "demo", full_name="Demo Customer", company="Example Labs")
    if not LedgerEntry.objects.filter(
        user=demo, kind=LedgerEntry.Kind.CREDIT, description=DEMO_CREDIT_NOTE
    ).exists():
        credit_add(user=demo, amount=settings.DEMO_CREDIT, description=DEMO_CREDIT_NOTE)

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

    for spec in IMAGES:
        spec = dict(spec)
        aliases = spec.pop("aliases", {})
        template, _ = ImageTemplate.objects.update_or_create(slug=spec.pop("slug"), defaults=spec)
        for alias, note in aliases.items():
            ImageAlias.objects.update_or_create(
                name=alias, defaults={"template": template, "note": note}
            )

    token = None
    host = Host.objects.filter(name="local").first()
    if host is None:
        host, token = host_create(name="local", address="127.0.0.1", gpu_source=GPUSource.SIMULATED)
    host_simulated_gpus_ensure(host=host, model=models["a10g"], count=8)
    if agent_env is not None:
        # The local agent needs the token, which is stored hashed: keep the one in the
        # env file while it still matches, otherwise issue a new one.
        if token is None and not host_token_matches(host=host, token=_env_token(agent_env)):
            token = host_rotate_token(host=host)
        if token is not None:
            local_agent_env_write(host=host, token=token, path=agent_env)
            # The env file now names the agent's shared Hugging Face cache: record it.
            cache = demo_hf_cache(agent_env)
            (cache / "hub").mkdir(parents=True, exist_ok=True)
            (agent_env.parent / f"agent-{host.name}" / "model-imports").mkdir(
                parents=True, exist_ok=True
            )
            Host.objects.filter(pk=host.pk).update(hf_cache_dir=str(cache))
    return SeedResult(host_token=token)
