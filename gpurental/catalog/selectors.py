"""Reads for the catalog: the GPU spec matrix of the source article."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count, Q
from django.utils import timezone

from gpurental.catalog.models import GPUModel, ImageAlias, ImageTemplate, Plan


@dataclass(frozen=True)
class CatalogRow:
    model: GPUModel
    gpus_total: int
    gpus_free: int
    single: Plan | None  # the 1-GPU plan: its prices are per GPU-hour
    zones: tuple = ()  # rentals.selectors.ZoneFree, per zone

    @property
    def hourly_rate_per_gpu(self) -> Decimal | None:
        return self.single.hourly_rate if self.single else None


def catalog_rows(*, interconnect: str = "", min_vram: str = "", q: str = "") -> list[CatalogRow]:
    # rentals builds on catalog, not the reverse
    from gpurental.rentals.selectors import free_gpus, zone_availability

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
        hosts = free_gpus(gpu_model=model, now=now)
        zones = tuple(zone_availability(gpu_model=model, now=now, free=hosts))
        free = sum(len(h.free) for h in hosts)
        rows.append(CatalogRow(model, model.gpus_total, free, single, zones))
    return rows


@dataclass(frozen=True)
class ResolvedImage:
    template: ImageTemplate
    alias: str  # the name asked for when it was an alias; "" for the template's own slug
    # A customer's own image reference, run with ``template``'s settings; "" for a template.
    reference: str = ""


def image_resolve(name: str) -> ResolvedImage | None:
    """The image template a launch's framework= / image= names: by slug first, then by
    alias (``ImageAlias``); None when neither matches."""
    template = ImageTemplate.objects.filter(slug=name).first()
    if template is not None:
        return ResolvedImage(template, "")
    alias = ImageAlias.objects.select_related("template").filter(name=name).first()
    if alias is not None:
        return ResolvedImage(alias.template, alias.name)
    return None


def image_names_offered() -> list[str]:
    """Every name a launch may use for an active image: slugs, then aliases."""
    active = ImageTemplate.objects.filter(is_active=True)
    slugs = sorted(active.values_list("slug", flat=True))
    aliases = sorted(ImageAlias.objects.filter(template__in=active).values_list("name", flat=True))
    return slugs + aliases


@dataclass(frozen=True)
class ImageMatrix:
    """Active images as frameworks × CUDA releases: ``cudas`` the columns, oldest first
    ("" last: no CUDA in the image); ``rows`` (framework, [templates per column])."""

    cudas: list[str]
    rows: list[tuple[str, list[list[ImageTemplate]]]]


def image_matrix() -> ImageMatrix:
    def release(cuda: str) -> tuple:
        return (1, ()) if not cuda else (0, tuple(int(p) for p in cuda.split(".")))

    templates = list(ImageTemplate.objects.filter(is_active=True).prefetch_related("aliases"))
    cudas = sorted({t.cuda_version for t in templates}, key=release)
    frameworks = sorted({t.framework for t in templates})
    rows = [
        (
            framework,
            [
                [t for t in templates if t.framework == framework and t.cuda_version == cuda]
                for cuda in cudas
            ],
        )
        for framework in frameworks
    ]
    return ImageMatrix(cudas, rows)
