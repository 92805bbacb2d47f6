"""Periodic looks for what nobody's action triggers: a balance running low."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from gpurental.billing.models import LedgerEntry
from gpurental.billing.selectors import balance_status, spending_accounts
from gpurental.notifications.services import notify


def low_balance_check(*, now: datetime) -> int:
    """Warn each account whose running instances or active leases will soon eat its balance (the console's
    low-balance flag), once per top-up: the key is their latest credit, so a new top-up
    that runs low again is warned again. Returns how many were warned."""
    warned = 0
    for user in spending_accounts():
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
