"""Demo data: the starter catalog (``catalog.starter``), two local hosts (8 × A10G, and
4 × A10 for the article's elastic group), two logins.

Idempotent: running it again updates the same rows and adds nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction

from gpurental.accounts.models import User
from gpurental.billing.models import LedgerEntry
from gpurental.billing.services import credit_add
from gpurental.catalog.starter import starter_catalog_load
from gpurental.fleet.models import GPUSource, Host
from gpurental.fleet.services import (
    host_create,
    host_rotate_token,
    host_simulated_gpus_ensure,
    host_token_matches,
)

DEMO_CREDIT_NOTE = "Demo credit"


@dataclass
class SeedResult:
    host_token: str | None  # only when a token was issued now (host "local")


@dataclass(frozen=True)
class DemoHost:
    name: str
    model: str  # the starter catalog's slug
    count: int
    nvml_name: str
    env_name: str  # its agent's settings (the first: --agent-env itself; the Procfile names both)


DEMO_HOSTS = (
    DemoHost("local", "a10g", 8, "NVIDIA A10G", "local-agent.env"),
    DemoHost("local-a10", "a10", 4, "NVIDIA A10", "local-agent-a10.env"),
)


def local_agent_env_write(
    *, host: Host, token: str, path: Path, nvml_name: str = "NVIDIA A10G"
) -> None:
    """The local agent's join settings, readable by the operator only (the token is a secret)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = {
        "GPURENTAL_BROKER_URL": settings.CELERY_BROKER_URL,
        "GPURENTAL_HOST_NAME": host.name,
        "GPURENTAL_HOST_TOKEN": token,
        "GPURENTAL_GPU_SOURCE": "simulated",
        "GPURENTAL_SIMULATED_GPUS": str(host.gpus.count() or 8),
        "GPURENTAL_SIMULATED_MODEL": nvml_name,
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

    models = starter_catalog_load()

    tokens = {}
    for demo_host in DEMO_HOSTS:
        env = agent_env
        if agent_env is not None and demo_host is not DEMO_HOSTS[0]:
            env = agent_env.with_name(demo_host.env_name)  # beside the first one
        tokens[demo_host.name] = _demo_host(demo_host, models[demo_host.model], env)
    return SeedResult(host_token=tokens["local"])


def _demo_host(spec: DemoHost, model, agent_env: Path | None) -> str | None:
    """The host, its simulated GPUs and (with ``agent_env``) its agent's settings; the
    token when one was issued now."""
    token = None
    host = Host.objects.filter(name=spec.name).first()
    if host is None:
        host, token = host_create(
            name=spec.name, address="127.0.0.1", gpu_source=GPUSource.SIMULATED
        )
    host_simulated_gpus_ensure(host=host, model=model, count=spec.count)
    if agent_env is not None:
        # The local agent needs the token, which is stored hashed: keep the one in the
        # env file while it still matches, otherwise issue a new one.
        if token is None and not host_token_matches(host=host, token=_env_token(agent_env)):
            token = host_rotate_token(host=host)
        if token is not None:
            local_agent_env_write(host=host, token=token, path=agent_env, nvml_name=spec.nvml_name)
            # The env file now names the agent's shared Hugging Face cache: record it.
            cache = demo_hf_cache(agent_env)
            (cache / "hub").mkdir(parents=True, exist_ok=True)
            (agent_env.parent / f"agent-{host.name}" / "model-imports").mkdir(
                parents=True, exist_ok=True
            )
            Host.objects.filter(pk=host.pk).update(hf_cache_dir=str(cache))
    return token
