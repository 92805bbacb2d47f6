"""A cluster: N instances of one plan and image launched in one request, for distributed
training (``torchrun``). Each rank is an ordinary instance (billed, stopped, terminated on
its own) that knows its place: the start spec sets ``MASTER_ADDR`` (rank 0's name on the
account's private network), ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``/``NODE_RANK`` and
the interface NCCL and Gloo must use (the private network's, ``eth1``).

Placement: ``pack`` puts every rank on one host: the one with the fewest free GPUs of the
model that still holds the whole cluster (best fit, as for a single launch). ``spread`` (one rank per host) needs the private network to reach across hosts;
that overlay is not built yet, so it is refused, saying so. All ranks launch or none: one
refusal rolls the others back before any agent hears of them.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.accounts.models import User
from gpurental.catalog.models import GPUModel, ImageTemplate, Plan
from gpurental.fleet.models import Host
from gpurental.rentals.exceptions import NoCapacity, RentalError
from gpurental.rentals.models import Instance
from gpurental.rentals.selectors import free_gpus

MAX_SIZE = 16
PLACEMENTS = ("pack", "spread")
MASTER_PORT = 29500
PRIVATE_INTERFACE = "eth1"  # the private network: joined after the tenant network (eth0)


def cluster_launch(
    *,
    user: User,
    image: ImageTemplate,
    size: int,
    name: str = "",
    plan: Plan | None = None,
    gpu_model: GPUModel | None = None,
    gpu_count: int | None = None,
    placement: str = "pack",
    image_alias: str = "",
    now: datetime | None = None,
) -> list[Instance]:
    """Launch ``size`` ranks named ``<name>-<rank>``; returns them by rank. Raises what
    instance_launch raises (QuotaExceeded, NoCapacity, RentalError): then none is made."""
    # lifecycle's start specs read cluster_env below (hostcalls): imported here, not above.
    from gpurental.rentals.services.lifecycle import instance_launch, resolve_plan

    now = now or timezone.now()
    if not 2 <= size <= MAX_SIZE:
        raise RentalError(
            _("a cluster has 2 to %(max)s instances, not %(size)s")
            % {"max": MAX_SIZE, "size": size},
            field="size",
        )
    if placement not in PLACEMENTS:
        raise RentalError(
            _("placement must be one of: %(choices)s") % {"choices": ", ".join(PLACEMENTS)},
            field="placement",
        )
    if placement == "spread":
        raise RentalError(
            _(
                "placement spread (one instance per host) needs the private network to reach "
                "across hosts, which this platform does not have yet; use placement pack"
            ),
            field="placement",
        )
    resolved = resolve_plan(plan=plan, gpu_model=gpu_model, gpu_count=gpu_count)
    host = _host_for(resolved, size=size, now=now)
    cluster_id = uuid.uuid4()
    base = (name or "").strip() or f"cluster-{str(cluster_id)[:8]}"
    ranks: list[Instance] = []
    with transaction.atomic():
        for rank in range(size):
            ranks.append(
                instance_launch(
                    user=user,
                    image=image,
                    plan=plan,
                    gpu_model=gpu_model,
                    gpu_count=gpu_count,
                    name=f"{base[:90]}-{rank}",
                    image_alias=image_alias,
                    host=host,
                    cluster=(cluster_id, rank, size),
                    now=now,
                )
            )
    return ranks


def _host_for(plan: Plan, *, size: int, now: datetime) -> Host:
    """The host with the fewest free GPUs of the plan's model that holds all ``size`` ranks."""
    need = plan.gpu_count * size
    fits = [h for h in free_gpus(gpu_model=plan.gpu_model, now=now) if len(h.free) >= need]
    if not fits:
        raise NoCapacity(
            _(
                "no host has %(need)s× %(model)s free for a cluster of %(size)s × %(count)s "
                "GPUs (placement pack puts them all on one host)"
            )
            % {
                "need": need,
                "model": plan.gpu_model.short_name,
                "size": size,
                "count": plan.gpu_count,
            },
            field="size",
        )
    best = min(fits, key=lambda h: (len(h.free), h.host_name))
    return Host.objects.get(pk=best.host_id)


def cluster_env(instance: Instance) -> dict[str, str]:
    """What a rank's container is told of its cluster (none for an instance outside one)."""
    if instance.cluster_id is None:
        return {}
    master = (
        Instance.objects.filter(cluster_id=instance.cluster_id, cluster_rank=0)
        .values_list("id", flat=True)
        .first()
    )
    return {
        "GPURENTAL_CLUSTER_ID": str(instance.cluster_id),
        "MASTER_ADDR": f"{master}.internal",
        "MASTER_PORT": str(MASTER_PORT),
        "WORLD_SIZE": str(instance.cluster_size),
        "RANK": str(instance.cluster_rank),
        "NODE_RANK": str(instance.cluster_rank),
        "NNODES": str(instance.cluster_size),
        "NCCL_SOCKET_IFNAME": PRIVATE_INTERFACE,
        "GLOO_SOCKET_IFNAME": PRIVATE_INTERFACE,
    }
