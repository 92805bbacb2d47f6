"""A group's endpoint key and its rotation with an overlap.

A group has one current endpoint key (only its SHA-256 is stored; the key is shown once).
Rotating issues a new one; the key it replaces keeps opening the endpoint until the end
of the overlap the owner chose (default ENDPOINT_KEY_OVERLAP, 0: it stops at once), so
that callers can switch without an outage. Rotating again during an overlap ends the
older key at once: at most two keys open a group at any time. The gateway honours both
(``gateway.groups``), and it hears of a rotation at once (the group's state channel).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.groups.events import publish_group_changed
from gpurental.groups.models import Group, GroupEvent
from gpurental.rentals.exceptions import InvalidTransition, RentalError

ENDPOINT_KEY_PREFIX = "gpg_"
ENDPOINT_KEY_OVERLAP = timedelta(hours=24)
MAX_OVERLAP = timedelta(days=30)


def endpoint_key_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def endpoint_key_new() -> tuple[str, str]:
    """A new key and its hash."""
    raw = ENDPOINT_KEY_PREFIX + secrets.token_urlsafe(32)
    return raw, endpoint_key_hash(raw)


@dataclass(frozen=True)
class Rotated:
    group: Group
    endpoint_key: str  # shown once
    previous_key_until: datetime | None  # None: the replaced key stopped at once


def group_endpoint_key_rotate(
    *,
    group: Group,
    actor=None,
    overlap: timedelta = ENDPOINT_KEY_OVERLAP,
    now: datetime | None = None,
) -> Rotated:
    """Issue a new endpoint key; the current one keeps working for ``overlap``."""
    now = now or timezone.now()
    if not timedelta(0) <= overlap <= MAX_OVERLAP:
        raise RentalError(
            _("overlap_s: from 0 (the old key stops now) to %(most)s seconds (30 days)")
            % {"most": int(MAX_OVERLAP.total_seconds())},
            field="overlap_s",
        )
    with transaction.atomic():
        group = Group.objects.select_for_update().get(pk=group.pk)
        if group.status != Group.Status.ACTIVE:
            raise InvalidTransition(
                _("group %(name)s is %(status)s: only an active group's key can be rotated")
                % {"name": group.name, "status": group.status},
                field="status",
            )
        raw, digest = endpoint_key_new()
        keep_old = overlap > timedelta(0) and bool(group.endpoint_key_hash)
        group.previous_key_hash = group.endpoint_key_hash if keep_old else ""
        group.previous_key_until = now + overlap if keep_old else None
        group.endpoint_key_hash = digest
        group.save(update_fields=["endpoint_key_hash", "previous_key_hash", "previous_key_until"])
        until = group.previous_key_until
        GroupEvent.objects.create(
            group=group,
            kind=GroupEvent.Kind.KEY,
            reason=(
                f"endpoint key rotated by {actor or 'its owner'}; the previous key works "
                + (f"until {until.isoformat()}" if until else "no more")
            ),
            created_at=now,
        )
        publish_group_changed(group.pk)
    return Rotated(group=group, endpoint_key=raw, previous_key_until=until)
