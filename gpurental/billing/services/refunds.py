"""Refunds: credit goes back to where it came from, with its expiry.

A refund pays back (part of) a debit. Where voucher credit paid for that debit, the same
share of the refund goes back to that voucher's credit (a ``VoucherRefund``): it is spent
first again and expires when the voucher's credit expires, as if it had never been spent.
Refunded after that expiry, it is taken back at once by an adjustment that says so. The
rest of the refund is paid credit, which does not expire.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

from django.db import transaction

from gpurental.accounts.models import User
from gpurental.billing.models import LedgerEntry, VoucherRedemption
from gpurental.billing.models_credit import VoucherRefund
from gpurental.billing.services.vouchers import voucher_parts_of

ZERO = Decimal(0)
PLACES = Decimal("0.000001")  # the ledger's


def _voucher_shares(
    user: User, debits: Sequence[LedgerEntry], amount: Decimal, now: datetime
) -> dict[tuple[int, int], Decimal]:
    """Per (debit id, redemption id), the part of a refund of ``amount`` for ``debits``
    that goes back to that voucher: its share of what the debits cost, less what earlier
    refunds of the same debits gave back to it already."""
    parts = voucher_parts_of(user=user, entries=debits, now=now)
    whole = -sum((debit.amount for debit in debits), ZERO)
    if not parts or whole <= 0:
        return {}
    given: dict[tuple[int, int], Decimal] = {}
    earlier = VoucherRefund.objects.filter(debit_entry__in=debits)
    for debit_id, redemption_id, back in earlier.values_list(
        "debit_entry_id", "redemption_id", "amount"
    ):
        given[debit_id, redemption_id] = given.get((debit_id, redemption_id), ZERO) + back
    shares = {}
    for debit_id, by_redemption in sorted(parts.items()):
        for redemption_id, part in sorted(by_redemption.items()):
            left = part - given.get((debit_id, redemption_id), ZERO)
            share = min((amount * part / whole).quantize(PLACES), left)
            if share > 0:
                shares[debit_id, redemption_id] = share
    return shares


def refund_post(
    *,
    user: User,
    debits: Sequence[LedgerEntry],
    amount: Decimal,
    description: str,
    now: datetime,
    reservation=None,
    actor: User | None = None,
) -> LedgerEntry | None:
    """Pay ``amount`` of what ``debits`` cost back to ``user``: one refund entry in the
    ledger, with the share that voucher credit had paid given back to those vouchers
    (expiring with them). No debits known: all of it is paid credit. Nothing for an
    amount of zero or less."""
    if amount <= 0:
        return None
    debits = list(debits)
    with transaction.atomic():
        # The account's row first, as every booking and the voucher sweep lock it: the
        # replay that splits the refund sees a ledger nobody else is writing to.
        owner = User.objects.select_for_update().get(pk=user.pk)
        shares = _voucher_shares(owner, debits, amount, now)
        entry = LedgerEntry.objects.create(
            user=owner,
            kind=LedgerEntry.Kind.REFUND,
            amount=amount,
            reservation=reservation,
            created_at=now,
            created_by=actor if actor is not None and actor.pk else None,
            description=description[:255],
        )
        redemptions = VoucherRedemption.objects.select_related("voucher").in_bulk(
            {redemption_id for _debit, redemption_id in shares}
        )
        for (debit_id, redemption_id), share in shares.items():
            redemption = redemptions[redemption_id]
            expired = None
            if now >= redemption.credit_expires_at:
                expired = LedgerEntry.objects.create(
                    user=owner,
                    kind=LedgerEntry.Kind.ADJUSTMENT,
                    amount=-share,
                    created_at=now,
                    description=f"Voucher {redemption.voucher.code}: refunded credit expired "
                    f"on {redemption.credit_expires_at:%Y-%m-%d %H:%M} UTC"[:255],
                )
            VoucherRefund.objects.create(
                redemption=redemption,
                refund_entry=entry,
                debit_entry_id=debit_id,
                amount=share,
                expiry_entry=expired,
                created_at=now,
            )
    return entry


__all__ = ["refund_post"]
