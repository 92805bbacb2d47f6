"""Users, API keys and the audit trail."""

from __future__ import annotations

import hashlib
import secrets

from django.db import models, transaction
from django.utils import timezone

from gpurental.accounts.models import ApiKey, AuditEvent, User

API_KEY_PREFIX = "gpr_"


def _hash_key(raw: str) -> str:
    # API keys carry 256 bits of entropy, so a fast hash is enough (no password stretching).
    return hashlib.sha256(raw.encode()).hexdigest()


def audit_record(
    *,
    action: str,
    actor: User | None = None,
    obj: models.Model | None = None,
    changes: dict | None = None,
    ip_address: str | None = None,
) -> AuditEvent:
    return AuditEvent.objects.create(
        actor=actor if actor is not None and actor.pk else None,
        actor_repr=str(actor) if actor is not None and actor.pk else "",
        action=action,
        object_type=obj._meta.label_lower if obj is not None else "",
        object_id=str(obj.pk) if obj is not None else "",
        object_repr=str(obj)[:200] if obj is not None else "",
        changes=changes or {},
        ip_address=ip_address,
    )


@transaction.atomic
def api_key_create(*, user: User, name: str, actor: User | None = None) -> tuple[ApiKey, str]:
    """Create a key; returns the row and the raw key, which is never stored."""
    prefix = secrets.token_hex(4)
    raw = f"{API_KEY_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        user=user, name=name.strip() or "default", prefix=prefix, key_hash=_hash_key(raw)
    )
    audit_record(action="api_key.create", actor=actor or user, obj=key)
    return key, raw


def api_key_authenticate(*, raw: str, now=None) -> ApiKey | None:
    """The active key matching ``raw`` (and its user), or None."""
    if not raw.startswith(API_KEY_PREFIX):
        return None
    key = (
        ApiKey.objects.select_related("user")
        .filter(key_hash=_hash_key(raw), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if key is not None:
        now = now or timezone.now()
        # Touch at most once a minute: a busy key must not write on every request.
        if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
            ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
            key.last_used_at = now
    return key


def api_key_revoke(*, key: ApiKey, actor: User) -> ApiKey:
    updated = ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    if updated:
        audit_record(action="api_key.revoke", actor=actor, obj=key)
    key.refresh_from_db()
    return key
