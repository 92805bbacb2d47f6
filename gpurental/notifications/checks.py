"""Periodic looks for what nobody's action triggers: a balance running low."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from gpurental.accounts.models import User
from gpurental.billing.models import LedgerEntry
from gpurental.billing.selectors import ACTIVE, balance_status
from gpurental.notifications.services import notify
from gpurental.rentals.models import Instance


def low_balance_check(*, now: datetime) -> int:
    """Warn each user whose running instances will soon eat their balance (the console's
    low-balance flag), once per top-up: the key is their latest credit, so a new top-up
    that runs low again is warned again. Returns how many were warned."""
    running = Instance.objects.filter(status__in=ACTIVE, reservation__isnull=True)
    warned = 0
    for user in User.objects.filter(pk__in=running.values("user")):
        status = balance_status(user=user)
        if not status.low:
            continue
        last_credit = LedgerEntry.objects.filter(user=user, amount__gt=0).order_by("-pk").first()
        warned += bool(
            notify(
                user,
                "low_balance",
                dedupe_key=f"credit-{last_credit.pk if last_credit else 0}",
                balance=status.balance,
                credit_limit=status.credit_limit,
                hourly_burn=status.hourly_burn,
                hours_left=status.hours_left,
                currency=settings.BILLING_CURRENCY,
            )
        )
    return warned
