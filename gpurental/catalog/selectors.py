"""Reads for the catalog: the GPU spec matrix of the source article."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count, Q

from gpurental.catalog.models import GPUModel


@dataclass(frozen=True)
class CatalogRow:
    model: GPUModel
    gpus_total: int
    hourly_rate_per_gpu: Decimal | None


def catalog_rows() -> list[CatalogRow]:
    models = GPUModel.objects.annotate(
        gpus_total=Count("gpus", filter=Q(gpus__is_enabled=True), distinct=True)
    ).prefetch_related("plans")
    rows = []
    for model in models:
        single = next((p for p in model.plans.all() if p.is_active and p.gpu_count == 1), None)
        rows.append(CatalogRow(model, model.gpus_total, single.hourly_rate if single else None))
    return rows
