"""Reads of the model cache catalog."""

from __future__ import annotations

from django.db.models import QuerySet

from gpurental.modelcache.models import CachedModel, CacheStatus


def hosts_with_model(*, repo_id: str) -> QuerySet:
    """Ids of the hosts whose cache has ``repo_id`` ready (a subquery for placement)."""
    return CachedModel.objects.filter(repo_id=repo_id, status=CacheStatus.READY).values("host_id")


def model_is_cached(*, repo_id: str) -> bool:
    return CachedModel.objects.filter(repo_id=repo_id, status=CacheStatus.READY).exists()


def host_has_model(*, host, repo_id: str) -> bool:
    return CachedModel.objects.filter(host=host, repo_id=repo_id, status=CacheStatus.READY).exists()


def models_offered() -> list[str]:
    """Repository ids ready on at least one host: what launches may ask for."""
    return list(
        CachedModel.objects.filter(status=CacheStatus.READY)
        .order_by("repo_id")
        .values_list("repo_id", flat=True)
        .distinct()
    )


def cache_rows(*, host=None) -> QuerySet:
    rows = CachedModel.objects.select_related("host")
    return rows.filter(host=host) if host is not None else rows
