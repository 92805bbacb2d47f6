"""What every bench shares: its own embedded servers, Django set up on them, percentiles.

A bench never touches real data: ``setup_django`` always starts embedded PostgreSQL and
Redis in the bench's temp dir, whatever DATABASE_URL / REDIS_URL say. Under
``make bench-smoke`` (bench/smoke.py) every bench instead gets a fresh database, copied
from one migrated template, on servers the smoke run started once.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Set by bench/smoke.py: the shared servers' DATABASE_URL (of the migrated template),
# REDIS_URL and VAR_DIR (where they run), as JSON.
SHARED_ENV = "GPURENTAL_BENCH_SHARED"


def setup_django(var_dir: Path, **env: str) -> dict[str, str]:
    """Embedded servers in ``var_dir``, ``env`` on top of the bench defaults, Django set
    up and migrated. Returns the servers' URLs (DATABASE_URL, REDIS_URL)."""
    shared = os.environ.get(SHARED_ENV)
    if shared:
        urls = database_from_template(json.loads(shared))
    else:
        from gpurental import embedded

        urls = embedded.ensure(var_dir)
    os.environ.update(urls)
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex * 2)
    os.environ["DJANGO_SETTINGS_MODULE"] = "gpurental.settings"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.update(env)
    import django

    django.setup()
    if not shared:  # a copy of the template is migrated already
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
    return urls


def servers_dir(var_dir: Path) -> Path:
    """Where this bench's servers run (their pid files): its own ``var_dir``, or under
    ``make bench-smoke`` the shared servers' directory."""
    shared = os.environ.get(SHARED_ENV)
    return Path(json.loads(shared)["VAR_DIR"]) if shared else var_dir


def database_from_template(shared: dict[str, str]) -> dict[str, str]:
    """A new database copied from the shared servers' migrated template, and their Redis
    emptied (the smoke run's benches take turns): this bench's URLs."""
    import psycopg
    import redis

    template = shared["DATABASE_URL"]
    name = f"bench_{uuid.uuid4().hex[:12]}"
    base, _, query = template.partition("?")
    template_name = base.rsplit("/", 1)[1]

    def named(database: str) -> str:
        return base.rsplit("/", 1)[0] + f"/{database}" + (f"?{query}" if query else "")

    with psycopg.connect(named("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_name}"')
    redis.Redis.from_url(shared["REDIS_URL"]).flushdb()
    return {"DATABASE_URL": named(name), "REDIS_URL": shared["REDIS_URL"]}


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (nan for no values)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def session_key(user) -> str:
    """A logged-in console session for ``user``, as the login view would make it."""
    from django.conf import settings
    from django.contrib.sessions.backends.db import SessionStore

    store = SessionStore()
    store["_auth_user_id"] = str(user.pk)
    # The backend that logs people in (a session naming one not configured is refused).
    store["_auth_user_backend"] = settings.AUTHENTICATION_BACKENDS[-1]
    store["_auth_user_hash"] = user.get_session_auth_hash()
    store.create()
    return store.session_key


def a100_catalog(nvml_name: str = "NVIDIA A100-SXM4-80GB"):
    """An A100 80GB SXM model, its 1-GPU plan and a JupyterLab image: (model, plan, image)."""
    from gpurental.catalog.models import GPUModel, ImageTemplate, Interconnect, Plan

    model = GPUModel.objects.create(
        slug="a100",
        name="A100 80GB SXM",
        short_name="A100",
        nvml_names=[nvml_name],
        memory_gb=80,
        fp16_tflops=312,
        bf16_tflops=312,
        fp32_tflops=19.5,
        memory_bandwidth_gbs=2039,
        interconnect=Interconnect.NVSWITCH,
        nvlink_bandwidth_gbs=600,
    )
    plan = Plan.objects.create(
        slug="a100-x1",
        name="1× A100",
        gpu_model=model,
        gpu_count=1,
        vcpus=8,
        memory_gb=32,
        disk_gb=100,
        hourly_rate=2,
    )
    image = ImageTemplate.objects.create(slug="jupyter", name="JupyterLab", image="x:latest")
    return model, plan, image


def a10g_model():
    """An A10G 24GB (PCIe) model and its 1-GPU plan (1 vCPU, 1 GB), as the test stack has
    them and as the launch and elastic benches launch on a simulated host: the model."""
    from gpurental.catalog.models import GPUModel, Interconnect, Plan

    model = GPUModel.objects.create(
        slug="a10g",
        name="A10G 24GB",
        short_name="A10G",
        nvml_names=["NVIDIA A10G"],
        memory_gb=24,
        fp16_tflops=125,
        bf16_tflops=125,
        fp32_tflops=31.2,
        memory_bandwidth_gbs=600,
        interconnect=Interconnect.PCIE,
    )
    Plan.objects.create(
        slug="a10g-x1",
        name="1× A10G",
        gpu_model=model,
        gpu_count=1,
        vcpus=1,
        memory_gb=1,
        disk_gb=10,
        hourly_rate=1,
    )
    return model


def h100_catalog(counts=(1,)):
    """An H100 80GB SXM model, an N-GPU plan for each of ``counts`` and a JupyterLab image:
    (model, {N: plan}, image)."""
    from decimal import Decimal

    from gpurental.catalog.models import GPUModel, ImageTemplate, Interconnect, Plan

    model = GPUModel.objects.create(
        slug="h100",
        name="H100 80GB SXM",
        short_name="H100",
        memory_gb=80,
        fp16_tflops=989,
        bf16_tflops=989,
        fp32_tflops=67,
        memory_bandwidth_gbs=3350,
        interconnect=Interconnect.NVSWITCH,
        nvlink_bandwidth_gbs=900,
    )
    plans = {
        n: Plan.objects.create(
            slug=f"h100-x{n}",
            name=f"{n}× H100",
            gpu_model=model,
            gpu_count=n,
            vcpus=16 * n,
            memory_gb=128 * n,
            disk_gb=500,
            hourly_rate=Decimal("3.0000") * n,
        )
        for n in sorted(set(counts))
    }
    image = ImageTemplate.objects.create(slug="jupyter", name="JupyterLab", image="x")
    return model, plans, image
