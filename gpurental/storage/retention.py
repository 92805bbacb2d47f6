"""How long the workspace of a stopped instance is kept: ``STORAGE_RETENTION_DAYS`` from
its stop (from the end of its reservation, for a booked instance), with a notice
``STORAGE_NOTICE_DAYS`` before (7 and 1 days by default: in the instance's events, by
e-mail and by webhook, ``workspace_expiring``), then the instance is terminated and its
workspace deleted. Nothing is deleted without the last notice a day before: a notice that
comes late (the policy shortened, the task down) moves the deletion a day past it.
Starting the instance again keeps it, and a later stop counts from that stop."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gpurental.notifications.services import notify
from gpurental.rentals.exceptions import RentalError
from gpurental.rentals.models import Instance, InstanceEvent
from gpurental.rentals.services import lifecycle
from gpurental.storage.services import stopped_workspaces, stored_workspace

log = logging.getLogger(__name__)
STEP = "retention_{days}"


def _notices(instance: Instance) -> dict[str, datetime]:
    """The retention notices of this stop: step → when."""
    return dict(
        instance.events.filter(
            kind=InstanceEvent.Kind.NOTICE,
            step__startswith="retention_",
            created_at__gte=instance.stopped_at,
        ).values_list("step", "created_at")
    )


def workspace_retention(*, instance: Instance, now: datetime) -> str:
    """Apply the policy to one stopped instance; returns what was done ("", "noticed",
    "deleted")."""
    days = settings.STORAGE_RETENTION_DAYS
    if not days:
        return ""  # kept for as long as it is paid for
    deadline = stored_workspace(instance).start + timedelta(days=days)
    notices = _notices(instance)
    ahead = sorted(set(settings.STORAGE_NOTICE_DAYS) | {1}, reverse=True)  # a day's at least
    last = STEP.format(days=ahead[-1])
    if now >= deadline and last in notices and now - notices[last] >= timedelta(days=1):
        try:
            lifecycle.instance_terminate(
                instance=instance,
                now=now,
                reason=f"the workspace was kept {days} days after the stop "
                f"(STORAGE_RETENTION_DAYS); terminated and deleted",
            )
        except RentalError:
            return ""  # changed state meanwhile
        return "deleted"
    for before in ahead:
        step = STEP.format(days=before)
        if now < deadline - timedelta(days=before) or step in notices:
            continue
        # The last notice comes a day ahead, even a late one.
        delete_at = max(deadline, now + timedelta(days=1)) if step == last else deadline
        reason = (
            f"This instance has been stopped since {instance.stopped_at:%Y-%m-%d %H:%M} UTC: "
            f"its /workspace is deleted with it on {delete_at:%Y-%m-%d %H:%M} UTC unless it "
            "is started again (copy your data out, or save it as an image)."
        )
        with transaction.atomic():
            lifecycle.instance_notice(
                instance, reason=reason, step=step, now=now, delete_at=delete_at.isoformat()
            )
            transaction.on_commit(
                partial(
                    notify,
                    instance.user,
                    "workspace_expiring",
                    instance=instance,
                    reason=reason,
                    delete_at=delete_at,
                )
            )
        return "noticed"
    return ""


def workspaces_retention_run(*, now: datetime | None = None) -> dict[str, int]:
    """The policy over every stopped workspace; one instance's trouble is logged and the
    others go on."""
    now = now or timezone.now()
    done = {"noticed": 0, "deleted": 0}
    for instance in stopped_workspaces():
        try:
            outcome = workspace_retention(instance=instance, now=now)
        except Exception:
            log.exception("retention: instance %s was left as it is", instance.pk)
            continue
        if outcome:
            done[outcome] += 1
    return done
