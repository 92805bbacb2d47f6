"""Hosts: joining with a token, status changes."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.conf import settings
from django.db import transaction

from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record
from gpurental.catalog.models import GPUModel
from gpurental.fleet.models import GPU, GPUSource, Host, HostStatus


def _hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def host_token_matches(*, host: Host, token: str) -> bool:
    return bool(host.token_hash) and hmac.compare_digest(host.token_hash, _hash_token(token or ""))


def host_join_command(*, host: Host, token: str) -> str:
    """The command an operator runs on the GPU server to start its agent."""
    broker = settings.CELERY_BROKER_URL
    return (
        f"GPURENTAL_BROKER_URL='{broker}' GPURENTAL_HOST_NAME='{host.name}' "
        f"GPURENTAL_HOST_TOKEN='{token}' python -m gpurental.agent"
    )


@transaction.atomic
def host_create(
    *,
    name: str,
    address: str = "127.0.0.1",
    gpu_source: str = GPUSource.SIMULATED,
    actor: User | None = None,
) -> tuple[Host, str]:
    """Create a host; returns it and its join token (shown once, stored hashed)."""
    token = secrets.token_urlsafe(32)
    host = Host.objects.create(
        name=name, address=address, gpu_source=gpu_source, token_hash=_hash_token(token)
    )
    audit_record(action="host.create", actor=actor, obj=host)
    return host, token


@transaction.atomic
def host_rotate_token(*, host: Host, actor: User | None = None) -> str:
    token = secrets.token_urlsafe(32)
    Host.objects.filter(pk=host.pk).update(token_hash=_hash_token(token))
    host.token_hash = _hash_token(token)
    audit_record(action="host.rotate_token", actor=actor, obj=host)
    return token


@transaction.atomic
def host_set_status(
    *, host: Host, status: HostStatus, actor: User | None = None, reason: str = ""
) -> Host:
    host = Host.objects.select_for_update().get(pk=host.pk)
    if host.status != status:
        old = host.status
        host.status = status
        host.save(update_fields=["status"])
        audit_record(
            action="host.status",
            actor=actor,
            obj=host,
            changes={"status": [old, status], "reason": reason},
        )
    return host


@transaction.atomic
def host_simulated_gpus_ensure(*, host: Host, model: GPUModel, count: int) -> list[GPU]:
    """Give a simulated host ``count`` GPUs of ``model`` (fully NVLink-connected, like an SXM board)."""
    gpus = []
    for index in range(count):
        peers = [i for i in range(count) if i != index]
        gpu, _ = GPU.objects.update_or_create(
            host=host,
            index=index,
            defaults={
                "uuid": f"GPU-sim-{host.name}-{index}",
                "model": model,
                "memory_mb": model.memory_gb * 1024,
                "nvlink_peers": peers if model.nvlink_bandwidth_gbs else [],
            },
        )
        gpus.append(gpu)
    return gpus
