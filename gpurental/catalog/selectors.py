"""Reads for the catalog: the GPU spec matrix of the source article."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count, Q
from django.utils import timezone

from gpurental.catalog.models import GPUModel, Plan


@dataclass(frozen=True)
class CatalogRow:
    model: GPUModel
    gpus_total: int
    gpus_free: int
    single: Plan | None  # the 1-GPU plan: its prices are per GPU-hour

    @property
    def hourly_rate_per_gpu(self) -> Decimal | None:
        return self.single.hourly_rate if self.single else None


def catalog_rows(*, interconnect: str = "", min_vram: str = "", q: str = "") -> list[CatalogRow]:
    from gpurental.rentals.selectors import free_gpus  # rentals builds on catalog, not the reverse

    models = GPUModel.objects.annotate(
        gpus_total=Count("gpus", filter=Q(gpus__is_enabled=True), distinct=True)
    ).prefetch_related("plans")
    if interconnect:
        models = models.filter(interconnect=interconnect)
    if min_vram.isdigit():
        models = models.filter(memory_gb__gte=int(min_vram))
    if q:
        models = models.filter(Q(name__icontains=q) | Q(short_name__icontains=q))
    now = timezone.now()
    rows = []
    for model in models:
        single = next((p for p in model.plans.all() if p.is_active and p.gpu_count == 1), None)
        free = sum(len(h.free) for h in free_gpus(gpu_model=model, now=now))
        rows.append(CatalogRow(model, model.gpus_total, free, single))
    return rows
