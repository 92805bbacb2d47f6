"""Credits: the ledger's positive side."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction

from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record
from gpurental.billing.models import LedgerEntry


@transaction.atomic
def credit_add(
    *, user: User, amount: Decimal, description: str = "", actor: User | None = None
) -> LedgerEntry:
    if amount <= 0:
        raise ValueError("amount: must be greater than zero")
    entry = LedgerEntry.objects.create(
        user=user,
        kind=LedgerEntry.Kind.CREDIT,
        amount=amount,
        description=description,
        created_by=actor,
    )
    audit_record(action="credit.add", actor=actor, obj=user, changes={"amount": str(amount)})
    return entry
