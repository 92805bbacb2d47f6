"""Filling, evicting and listing hosts' shared Hugging Face caches.

Operators ask (management command ``modelcache``, the admin); the host's agent does the
filesystem work and reports back (``protocol.MODELCACHE_REPORT``), and these services
keep the catalog (``CachedModel``) in step, with a ``CacheEvent`` row for every change.
Requests go to the agent only once the transaction commits.
"""

from __future__ import annotations

import logging
import re
import uuid
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental import protocol
from gpurental.fleet import hostlink
from gpurental.fleet.hostlink import refuse_message
from gpurental.fleet.models import Host
from gpurental.modelcache.models import CachedModel, CacheEvent, CacheStatus

log = logging.getLogger(__name__)

# The same rule as the agent's (agent/modelcache.py), which checks again.
REPO_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,63}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


class CacheRefused(ValueError):
    """A request that cannot be made; ``field`` names the input at fault."""

    def __init__(self, message: str, *, field: str = ""):
        super().__init__(message)
        self.field = field


def repo_id_check(repo_id: str, *, field: str = "repo_id") -> str:
    repo_id = (repo_id or "").strip()
    if not REPO_ID.match(repo_id) or ".." in repo_id:
        raise CacheRefused(
            _(
                "%(repo)r is not a Hugging Face repository id: org/name, with letters, "
                "digits, '.', '_' and '-'"
            )
            % {"repo": repo_id},
            field=field,
        )
    return repo_id


def _event(host: Host, repo_id: str, kind: str, *, actor=None, reason: str = "", now=None):
    return CacheEvent.objects.create(
        host=host,
        repo_id=repo_id,
        kind=kind,
        actor=actor if actor is not None and getattr(actor, "pk", None) else None,
        reason=reason[:4000],
        created_at=now or timezone.now(),
    )


def _send(host: Host, **payload) -> None:
    hostlink.send(host, protocol.MODELCACHE, **payload)


# The agent's time limit on a model cache task (agent/worker.py): a request older than
# this will never be answered, so it no longer stands in the way of a new one.
REQUEST_EXPIRES = timedelta(hours=3)


def _in_flight(row: CachedModel, now: datetime) -> bool:
    return (
        row.status in (CacheStatus.FILLING, CacheStatus.EVICTING)
        and now - row.updated_at < REQUEST_EXPIRES
    )


def _needs_cache(host: Host) -> None:
    if not host.hf_cache_dir:
        raise CacheRefused(
            f"host {host.name} has no shared Hugging Face cache: set its hf_cache_dir (and "
            "GPURENTAL_HF_CACHE_DIR on its agent) first",
            field="host",
        )


# --- requests ---------------------------------------------------------------------


def cache_fill_request(
    *, host: Host, source: str, repo_id: str = "", actor=None, now: datetime | None = None
) -> CachedModel | None:
    """Ask the host's agent to fill its cache from ``source`` (a file or folder in the
    agent's import directory). With ``repo_id`` (required for a plain model folder) the
    row shows ``filling`` until the agent reports; a cache archive without one gets its
    rows from the report."""
    now = now or timezone.now()
    _needs_cache(host)
    source = (source or "").strip()
    if not source or "\0" in source or len(source) > 255:
        raise CacheRefused(
            "name the source: a folder or .tar/.tar.gz archive in the agent's import "
            "directory (GPURENTAL_MODEL_IMPORT_DIR), at most 255 characters",
            field="source",
        )
    if repo_id:
        repo_id = repo_id_check(repo_id)
    request_id = str(uuid.uuid4())
    with transaction.atomic():
        row = None
        if repo_id:
            row = CachedModel.objects.select_for_update().filter(host=host, repo_id=repo_id).first()
            if row is not None and _in_flight(row, now):
                raise CacheRefused(
                    f"{repo_id} on {host.name} is {row.get_status_display().lower()} already; "
                    "wait for the agent's report",
                    field="repo_id",
                )
            if row is None:
                row = CachedModel(host=host, repo_id=repo_id, created_at=now)
            # A model already there stays usable while a new revision is filled: it is
            # still ready for placement; the report updates its figures.
            if row.status != CacheStatus.READY:
                row.status = CacheStatus.FILLING
            row.source, row.reason, row.updated_at = source, "", now
            row.save()
        _event(host, repo_id, CacheEvent.Kind.FILL_REQUESTED, actor=actor, reason=source, now=now)
        _send(host, action="fill", source=source, repo_id=repo_id, request_id=request_id)
    return row


def cache_evict_request(
    *, host: Host, repo_id: str, actor=None, force: bool = False, now: datetime | None = None
) -> CachedModel:
    """Ask the host's agent to delete a model from its cache. Refused while instances that
    asked for it hold GPUs on the host (their links would break), unless ``force``."""
    from gpurental.rentals.models import Instance
    from gpurental.rentals.selectors import HOLDING

    now = now or timezone.now()
    repo_id = repo_id_check(repo_id)
    with transaction.atomic():
        row = CachedModel.objects.select_for_update().filter(host=host, repo_id=repo_id).first()
        if row is None:
            raise CacheRefused(f"{host.name}'s cache has no {repo_id}", field="repo_id")
        if _in_flight(row, now) and row.status == CacheStatus.EVICTING:
            return row
        users = Instance.objects.filter(host=host, hf_model=repo_id, status__in=HOLDING).count()
        if users and not force:
            raise CacheRefused(
                f"{users} instance(s) on {host.name} launched with {repo_id} are still up; "
                "stop them first, or force the eviction",
                field="repo_id",
            )
        row.status, row.reason, row.updated_at = CacheStatus.EVICTING, "", now
        row.save(update_fields=["status", "reason", "updated_at"])
        why = f"forced with {users} instance(s) using it" if users else ""
        _event(host, repo_id, CacheEvent.Kind.EVICT_REQUESTED, actor=actor, reason=why, now=now)
        _send(host, action="evict", repo_id=repo_id, request_id=str(uuid.uuid4()))
    return row


def cache_list_request(*, host: Host) -> None:
    """Ask the agent what its cache holds; its listing updates the catalog."""
    _needs_cache(host)
    with transaction.atomic():
        _send(host, action="list", repo_id="", request_id=str(uuid.uuid4()))


# --- reports ----------------------------------------------------------------------


def _figures(row: CachedModel, repo: dict) -> None:
    row.revisions = [str(r)[:64] for r in repo.get("revisions") or []][:100]
    row.revision = str((repo.get("refs") or {}).get("main", ""))[:64]
    row.size_bytes = max(0, int(repo.get("size_bytes") or 0))
    row.files = max(0, int(repo.get("files") or 0))


def cache_filled_record(*, host: Host, repo: dict, now: datetime) -> CachedModel:
    repo_id = repo_id_check(str(repo.get("repo_id", "")))
    with transaction.atomic():
        row = CachedModel.objects.select_for_update().filter(host=host, repo_id=repo_id).first()
        if row is None:
            row = CachedModel(host=host, repo_id=repo_id, created_at=now)
        _figures(row, repo)
        row.status, row.reason, row.updated_at = CacheStatus.READY, "", now
        row.save()
        _event(
            host,
            repo_id,
            CacheEvent.Kind.FILLED,
            reason=f"revision {row.revision or '?'}, {row.files} files, {row.size_bytes} bytes",
            now=now,
        )
    return row


def cache_evicted_record(*, host: Host, repo_id: str, now: datetime) -> None:
    with transaction.atomic():
        deleted, _kinds = CachedModel.objects.filter(host=host, repo_id=repo_id).delete()
        if deleted:
            _event(host, repo_id, CacheEvent.Kind.EVICTED, now=now)


def cache_failed_record(*, host: Host, repo_id: str, reason: str, now: datetime) -> None:
    with transaction.atomic():
        row = CachedModel.objects.select_for_update().filter(host=host, repo_id=repo_id).first()
        if row is not None and row.status == CacheStatus.EVICTING:
            row.status, row.reason, row.updated_at = CacheStatus.READY, reason[:4000], now
            row.save(update_fields=["status", "reason", "updated_at"])
            _event(host, repo_id, CacheEvent.Kind.EVICT_FAILED, reason=reason, now=now)
            return
        if row is not None and row.status == CacheStatus.FILLING:
            row.status, row.reason, row.updated_at = CacheStatus.FAILED, reason[:4000], now
            row.save(update_fields=["status", "reason", "updated_at"])
        elif row is not None:  # ready: a new revision failed, the old one is still there
            row.reason, row.updated_at = reason[:4000], now
            row.save(update_fields=["reason", "updated_at"])
        _event(host, repo_id, CacheEvent.Kind.FILL_FAILED, reason=reason, now=now)


def cache_listing_record(*, host: Host, repos: list[dict], now: datetime) -> None:
    """Make the catalog say what the host's cache holds. Rows with a request still out
    (filling, evicting) are left to that request's report."""
    listed = {}
    for repo in repos:
        try:
            listed[repo_id_check(str(repo.get("repo_id", "")))] = repo
        except CacheRefused:
            log.warning("host %s listed a malformed repository %r", host.name, repo.get("repo_id"))
    with transaction.atomic():
        rows = {r.repo_id: r for r in CachedModel.objects.select_for_update().filter(host=host)}
        for repo_id, row in rows.items():
            if repo_id in listed or row.status in (CacheStatus.FILLING, CacheStatus.EVICTING):
                continue
            if row.status == CacheStatus.READY:
                row.delete()
                _event(host, repo_id, CacheEvent.Kind.DISAPPEARED, now=now)
        for repo_id, repo in listed.items():
            row = rows.get(repo_id)
            if row is not None and row.status in (CacheStatus.FILLING, CacheStatus.EVICTING):
                continue
            if row is None or row.status != CacheStatus.READY:
                row = row or CachedModel(host=host, repo_id=repo_id, created_at=now)
                row.status, row.reason = CacheStatus.READY, ""
                _event(host, repo_id, CacheEvent.Kind.APPEARED, now=now)
            _figures(row, repo)
            row.updated_at = now
            row.save()


def modelcache_report_receive(*, message: dict, now: datetime) -> None:
    """A report as it comes off the control queue: verified, then recorded."""
    host, payload = hostlink.receive(message=message, what="model cache report", now=now)
    kind, data = payload.get("kind"), payload.get("data") or {}
    if kind not in protocol.MODELCACHE_KINDS or not isinstance(data, dict):
        refuse_message(name=host.name, what="model cache report", why=f"kind {kind!r}", now=now)
    if kind == "filled":
        for repo in data.get("repos") or []:
            cache_filled_record(host=host, repo=dict(repo), now=now)
    elif kind == "evicted":
        cache_evicted_record(host=host, repo_id=str(data.get("repo_id", "")), now=now)
    elif kind == "failed":
        cache_failed_record(
            host=host,
            repo_id=str(data.get("repo_id", ""))[:96],
            reason=str(data.get("reason", "")),
            now=now,
        )
    else:
        cache_listing_record(host=host, repos=[dict(r) for r in data.get("repos") or []], now=now)


__all__ = [
    "CacheRefused",
    "cache_evict_request",
    "cache_fill_request",
    "cache_list_request",
    "modelcache_report_receive",
    "repo_id_check",
]
