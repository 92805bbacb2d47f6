"""Storage with no credit to pay for it. An account whose credit has run out (its balance
and credit limit spent, as the launch check counts them) while it keeps volumes, saved
images or the workspaces of stopped instances is told at once (``storage_unpaid``: by
e-mail and webhook), again ``STORAGE_NOTICE_DAYS`` before the deletion (7 and 1 days by
default), and ``STORAGE_UNPAID_DAYS`` (14) after it was found its stored things are
deleted: the stopped instances terminated with their workspaces, the free volumes, saved
images and snapshots deleted. Nothing goes without the last notice a day before (a late one moves
the deletion), nor anything stored after that notice. Credit added in time ends it all.

A running instance is not storage: the credit-limit stop (billing.services.limits) stops
it first, and its workspace is then a stopped one."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record
from gpurental.billing.services.prepaid import spendable_of
from gpurental.images.models import SavedImage, SavedImageStatus
from gpurental.notifications.services import notify
from gpurental.rentals.exceptions import RentalError
from gpurental.rentals.services import lifecycle
from gpurental.rentals.services.saving import saved_image_delete
from gpurental.storage.models import StorageArrears
from gpurental.storage.services import stopped_workspaces, stored_things
from gpurental.volumes import snapshots
from gpurental.volumes.models import Snapshot, SnapshotStatus, Volume, VolumeStatus
from gpurental.volumes.services import VolumeRefused, in_use, volume_delete

log = logging.getLogger(__name__)
DAY = timedelta(days=1)


def _ahead() -> list[int]:
    """The notices' days ahead of the deletion, farthest first; a day's at least."""
    return sorted(set(settings.STORAGE_NOTICE_DAYS) | {1}, reverse=True)


def _tell(account: User, arrears: StorageArrears, money, what: list[str]) -> None:
    transaction.on_commit(
        partial(
            notify,
            account,
            "storage_unpaid",
            balance=money.balance,
            credit_limit=money.credit_limit,
            currency=settings.BILLING_CURRENCY,
            delete_at=arrears.delete_at,
            stored=what,
        )
    )


def account_arrears(*, account: User, stored: list[str], now: datetime) -> str:
    """Apply the rule to one account, ``stored`` naming what it keeps; returns what was done:
    "", "noticed", "cleared" or "deleted"."""
    with transaction.atomic():
        arrears = StorageArrears.objects.select_for_update().filter(account=account).first()
        money = spendable_of(account=account, now=now)
        if money.available > 0 or not stored:
            if arrears is None:
                return ""
            arrears.delete()
            audit_record(action="storage.arrears_cleared", obj=account)
            return "cleared"
        if arrears is None:
            days = settings.STORAGE_UNPAID_DAYS
            arrears = StorageArrears.objects.create(
                account=account,
                since=now,
                delete_at=now + max(days, 1) * DAY,
                notified_days=max(days, 1),
                notified_at=now,
            )
            audit_record(action="storage.arrears_opened", obj=account)
            _tell(account, arrears, money, stored)
            return "noticed"
        last = _ahead()[-1]
        if (
            now >= arrears.delete_at
            and arrears.notified_days <= last
            and now - arrears.notified_at >= DAY
        ):
            _delete_stored(account, arrears, now)
            return "deleted"
        due = [
            days
            for days in _ahead()
            if days < arrears.notified_days and now >= arrears.delete_at - days * DAY
        ]
        if not due:
            return ""
        arrears.notified_days, arrears.notified_at = min(due), now
        if arrears.notified_days <= last:  # the last notice comes a day ahead, even late
            arrears.delete_at = max(arrears.delete_at, now + DAY)
        arrears.save(update_fields=["notified_days", "notified_at", "delete_at"])
        _tell(account, arrears, money, stored)
        return "noticed"


def _delete_stored(account: User, arrears: StorageArrears, now: datetime) -> None:
    """What the account stored before the last notice: instances terminated with their
    workspaces, then free volumes and saved images deleted. A volume an instance still holds
    (terminating) goes at a later run."""
    why = (
        f"deleted: storage unpaid since {arrears.since:%Y-%m-%d %H:%M} UTC, after notices "
        f"(STORAGE_UNPAID_DAYS)"
    )
    for instance in stopped_workspaces().filter(user=account, stopped_at__lte=arrears.notified_at):
        try:
            lifecycle.instance_terminate(instance=instance, now=now, reason=why)
        except RentalError:
            continue  # started meanwhile: it is not storage any more
    volumes = Volume.objects.filter(
        account=account, status=VolumeStatus.AVAILABLE, created_at__lte=arrears.notified_at
    )
    for volume in volumes.select_related("instance"):
        if not in_use(volume):
            try:
                volume_delete(volume=volume, actor=None, now=now)
            except VolumeRefused:
                continue
    images = SavedImage.objects.filter(
        account=account, status=SavedImageStatus.READY, ready_at__lte=arrears.notified_at
    )
    for image in images:
        saved_image_delete(image=image, actor=None, now=now)
    if snapshots.configured():
        for snapshot in Snapshot.objects.filter(
            account=account, status=SnapshotStatus.READY, ready_at__lte=arrears.notified_at
        ):
            snapshots.snapshot_delete(snapshot=snapshot, actor=None, now=now)
    audit_record(action="storage.deleted_unpaid", obj=account, changes={"reason": why})


def storage_arrears_run(*, now: datetime | None = None) -> dict[str, int]:
    """The rule over every account that stores something or is in arrears; one account's
    trouble is logged and the others go on."""
    now = now or timezone.now()
    stored: dict[int, list[str]] = {}
    for thing in stored_things(now):
        if thing.end is None:
            stored.setdefault(thing.account_id, []).append(f"{thing.kind} {thing.label}")
    ids = set(stored) | set(StorageArrears.objects.values_list("account_id", flat=True))
    done = {"noticed": 0, "cleared": 0, "deleted": 0}
    for account in User.objects.filter(pk__in=ids).order_by("pk"):
        try:
            outcome = account_arrears(account=account, stored=stored.get(account.pk, []), now=now)
        except Exception:
            log.exception("storage arrears: account %s was left as it is", account.pk)
            continue
        if outcome:
            done[outcome] += 1
    return done
