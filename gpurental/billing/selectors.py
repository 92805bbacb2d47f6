"""Reads: balances."""

from decimal import Decimal

from django.db.models import Sum

from gpurental.accounts.models import User
from gpurental.billing.models import LedgerEntry


def balance_of(*, user: User) -> Decimal:
    return LedgerEntry.objects.filter(user=user).aggregate(total=Sum("amount"))["total"] or Decimal(
        "0"
    )
