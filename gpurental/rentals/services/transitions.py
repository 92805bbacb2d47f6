"""The one way a booking-like row (a reservation, a dedicated-host lease) changes status:
the row and its event, written together by the caller's transaction."""

from __future__ import annotations

from datetime import datetime

from django.db import models

from gpurental.accounts.models import User


def status_move(
    row: models.Model,
    to: str,
    *,
    event_model: type[models.Model],
    reason: str,
    now: datetime,
    actor: User | None = None,
    **fields,
) -> None:
    """Move ``row`` (locked by the caller) to ``to``, set ``fields`` on it, and record an
    ``event_model`` row (its foreign key to ``row`` is named after ``row``'s model)."""
    old = row.status
    row.status = to
    for key, value in fields.items():
        setattr(row, key, value)
    row.save(update_fields=["status", *fields])
    event_model.objects.create(
        **{row._meta.model_name: row},
        from_status=old if old != to else "",
        to_status=to,
        reason=reason,
        actor=actor if actor is not None and actor.pk else None,
        created_at=now,
    )
