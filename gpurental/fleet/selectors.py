"""Reads about hosts for the catalog and the staff pages."""

from __future__ import annotations

from collections import Counter

from django.db.models import Count, Q

from gpurental.catalog.models import GPUModel
from gpurental.fleet.models import Host, HostStatus
from gpurental.fleet.topology import host_class


def host_classes(*, gpu_model: GPUModel) -> list[tuple[str, int]]:
    """The builds of active hosts with GPUs of ``gpu_model``, each with how many hosts
    have it, most common first: [("8× H100, NVSwitch, 4× 400 Gb/s", 3), …]."""
    hosts = (
        Host.objects.filter(status=HostStatus.ACTIVE, gpus__model=gpu_model)
        .annotate(n=Count("gpus", filter=Q(gpus__model=gpu_model, gpus__is_enabled=True)))
        .filter(n__gt=0)
        .only("topology")
    )
    classes = Counter(
        host_class(gpu_count=h.n, short_name=gpu_model.short_name, topology=h.topology)
        for h in hosts
    )
    return classes.most_common()


def host_named(name: str):
    """The host of that name, or None."""
    from gpurental.fleet.models import Host

    return Host.objects.filter(name=name).first()
