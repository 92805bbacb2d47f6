"""Stop what the balance no longer covers.

A customer whose balance falls below ``-credit_limit`` has their active instances
stopped, never deleted: ``/workspace`` stays, and the reason is in each instance's
events. They start again once credit is added.
"""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db.models import F, OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record
from gpurental.billing.models import LedgerEntry
from gpurental.billing.pricing import quantize_money
from gpurental.billing.selectors import ACTIVE
from gpurental.notifications.services import notify
from gpurental.rentals.exceptions import RentalError
from gpurental.rentals.models import Instance
from gpurental.rentals.services import lifecycle

log = logging.getLogger(__name__)


def _unpaid_active():
    """Active instances that cost money as they run (a reservation's was paid ahead)."""
    return Instance.objects.filter(status__in=ACTIVE, reservation__isnull=True)


def users_over_limit() -> list[User]:
    """Users with active instances whose balance is below minus their credit limit."""
    balance = (
        LedgerEntry.objects.filter(user=OuterRef("pk"))
        .order_by()
        .values("user")
        .annotate(total=Sum("amount"))
        .values("total")
    )
    return list(
        User.objects.filter(pk__in=_unpaid_active().values("user"))
        .annotate(balance=Coalesce(Subquery(balance), Value(Decimal(0))))
        .filter(balance__lt=-F("credit_limit"))
    )


def limits_enforce(*, now: datetime | None = None) -> list[Instance]:
    """Stop the active instances of every user over their limit; returns those stopped."""
    now = now or timezone.now()
    cur = settings.BILLING_CURRENCY
    stopped = []
    for user in users_over_limit():
        stopped_now = []
        reason = (
            f"stopped because your balance is {quantize_money(user.balance)} {cur} and your "
            f"credit limit is {user.credit_limit:.2f} {cur}; /workspace is kept. "
            "Add credit, then start it again."
        )
        for instance in _unpaid_active().filter(user=user):
            try:
                lifecycle.instance_stop(instance=instance, reason=reason, now=now)
            except RentalError:
                log.info("instance %s changed state meanwhile; not stopped", instance.pk)
                continue
            audit_record(
                action="billing.stop_over_limit",
                obj=instance,
                changes={"balance": str(user.balance), "credit_limit": str(user.credit_limit)},
            )
            stopped_now.append(instance)
        if stopped_now:
            notify(
                user,
                "spend_stopped",
                balance=user.balance,
                credit_limit=user.credit_limit,
                instances=stopped_now,
                currency=cur,
            )
        stopped += stopped_now
    return stopped
