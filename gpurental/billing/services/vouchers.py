"""Vouchers: redeeming a code adds credit that is spent before paid credit and expires
by itself (what is left at the end is taken back by a ledger adjustment)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record
from gpurental.billing.models import (
    LedgerEntry,
    Payment,
    PaymentStatus,
    Voucher,
    VoucherRedemption,
)
from gpurental.billing.models_credit import VoucherRefund

ZERO = Decimal(0)


class VoucherRefused(ValueError):
    """A code that cannot be redeemed; ``field`` names the input at fault."""

    def __init__(self, message: str, *, field: str = "code"):
        super().__init__(message)
        self.message, self.field = message, field


def normalize_code(code: str) -> str:
    return "".join(str(code).split()).upper()


@dataclass(frozen=True)
class Redeemed:
    redemption: VoucherRedemption
    created: bool  # False: this account had redeemed it already (nothing added)


def voucher_redeem(*, user: User, code: str, now: datetime | None = None) -> Redeemed:
    """Redeem ``code`` for ``user``: once per account (a repeat returns the first
    redemption), within the voucher's expiry and uses, and for first-top-up vouchers only
    by an account that has never paid."""
    try:
        return _redeem(user=user, code=code, now=now or timezone.now())
    except IntegrityError:
        # The same account redeemed it at the same moment in another request: the unique
        # constraint refused the second, whose use count was rolled back with it.
        first = VoucherRedemption.objects.filter(
            voucher__code=normalize_code(code), user=user
        ).first()
        if first is None:
            raise
        return Redeemed(first, created=False)


def _redeem(*, user: User, code: str, now: datetime) -> Redeemed:
    text = normalize_code(code)
    if not text:
        raise VoucherRefused(_("enter a voucher code"))
    with transaction.atomic():
        voucher = Voucher.objects.filter(code=text).first()
        if voucher is None:
            raise VoucherRefused(
                _("no voucher has the code %(code)s; check it for typos") % {"code": text}
            )
        earlier = VoucherRedemption.objects.filter(voucher=voucher, user=user).first()
        if earlier is not None:
            return Redeemed(earlier, created=False)
        if now >= voucher.expires_at:
            raise VoucherRefused(
                _("voucher %(code)s expired on %(at)s UTC; it can no longer be redeemed")
                % {"code": text, "at": f"{voucher.expires_at:%Y-%m-%d %H:%M}"}
            )
        if (
            voucher.first_topup_only
            and Payment.objects.filter(user=user, status=PaymentStatus.PAID).exists()
        ):
            raise VoucherRefused(
                _(
                    "voucher %(code)s is for accounts that have not paid yet, and this account "
                    "has topped up before"
                )
                % {"code": text}
            )
        # Count the use atomically: only a row with a use left is updated, so two
        # customers racing for the last use cannot both get it.
        counted = Voucher.objects.filter(pk=voucher.pk, uses__lt=F("max_uses")).update(
            uses=F("uses") + 1
        )
        if not counted:
            raise VoucherRefused(
                _("voucher %(code)s has been used up (all %(uses)s uses are taken)")
                % {"code": text, "uses": voucher.max_uses}
            )
        entry = LedgerEntry.objects.create(
            user=user,
            kind=LedgerEntry.Kind.VOUCHER,
            amount=voucher.amount,
            created_at=now,
            description=f"Voucher {text}",
        )
        redemption = VoucherRedemption.objects.create(
            voucher=voucher,
            user=user,
            amount=voucher.amount,
            redeemed_at=now,
            credit_expires_at=now + timedelta(days=voucher.credit_days),
            ledger_entry=entry,
        )
        audit_record(
            action="voucher.redeem",
            actor=user,
            obj=voucher,
            changes={"amount": str(voucher.amount), "user": user.email},
        )
    return Redeemed(redemption, created=True)


@dataclass
class _Grant:
    redemption: VoucherRedemption
    left: Decimal


@dataclass(frozen=True)
class VoucherCredit:
    """Per redemption: what is left now (or was left at its expiry)."""

    redemption: VoucherRedemption
    left: Decimal
    expired: bool


def voucher_waterfall(
    *, user: User, now: datetime
) -> tuple[list[VoucherCredit], dict[int, Decimal]]:
    """Replay the user's ledger from their first redemption: each debit is paid from the
    voucher credit live at that moment (the one expiring first, first), the rest from
    paid credit. Returns each redemption's remainder, and per debit entry id the part
    vouchers paid. A refund of something voucher credit paid gives that credit back to
    its voucher, with its expiry (``VoucherRefund``); the rest of a refund is paid credit."""
    grants, paid = _replay(user=user, now=now)
    credits = [
        VoucherCredit(g.redemption, g.left, now >= g.redemption.credit_expires_at) for g in grants
    ]
    return credits, {entry: sum(parts.values(), ZERO) for entry, parts in paid.items()}


def voucher_parts_of(*, user: User, entries, now: datetime) -> dict[int, dict[int, Decimal]]:
    """Per debit entry id of ``entries``, per redemption id: the part of that debit that
    the redemption's voucher credit paid."""
    _grants, paid = _replay(user=user, now=now)
    return {entry.pk: paid[entry.pk] for entry in entries if entry.pk in paid}


def _replay(*, user: User, now: datetime) -> tuple[list[_Grant], dict[int, dict[int, Decimal]]]:
    redemptions = list(
        VoucherRedemption.objects.filter(user=user)
        .select_related("voucher")
        .order_by("redeemed_at", "id")
    )
    if not redemptions:
        return [], {}
    back = list(
        VoucherRefund.objects.filter(redemption__user=user, created_at__lte=now).values_list(
            "created_at", "refund_entry_id", "redemption_id", "amount", "expiry_entry_id"
        )
    )
    own = (
        {r.ledger_entry_id for r in redemptions}
        | {r.expiry_entry_id for r in redemptions if r.expiry_entry_id}
        | {expired for *_rest, expired in back if expired}
    )
    debits = (
        LedgerEntry.objects.filter(
            user=user, amount__lt=0, created_at__gte=redemptions[0].redeemed_at, created_at__lte=now
        )
        .exclude(pk__in=own)
        .values_list("created_at", "id", "amount")
    )
    # Credit given back while its voucher was live; what came back later was taken back
    # at once (its expiry entry), so it never was voucher credit to spend.
    events = [(at, entry_id, None, amount) for at, entry_id, amount in debits] + [
        (at, entry_id, redemption_id, amount)
        for at, entry_id, redemption_id, amount, expired in back
        if not expired
    ]
    events.sort(key=lambda e: (e[0], e[1], e[2] or 0))
    grants = [_Grant(r, r.amount) for r in redemptions]
    by_id = {g.redemption.pk: g for g in grants}
    paid: dict[int, dict[int, Decimal]] = {}
    for at, entry_id, redemption_id, amount in events:
        if redemption_id is not None:
            by_id[redemption_id].left += amount
            continue
        owed = -amount
        live = sorted(
            (
                g
                for g in grants
                if g.redemption.redeemed_at <= at < g.redemption.credit_expires_at and g.left > 0
            ),
            key=lambda g: (g.redemption.credit_expires_at, g.redemption.pk),
        )
        for grant in live:
            take = min(grant.left, owed)
            grant.left -= take
            owed -= take
            parts = paid.setdefault(entry_id, {})
            parts[grant.redemption.pk] = parts.get(grant.redemption.pk, ZERO) + take
            if owed <= 0:
                break
    return grants, paid


def voucher_credit_of(*, user: User, now: datetime | None = None) -> Decimal:
    """Voucher credit the user can spend now (it is part of the balance, spent first)."""
    credits, _applied = voucher_waterfall(user=user, now=now or timezone.now())
    return sum((c.left for c in credits if not c.expired), ZERO)


def voucher_credit_expire(*, now: datetime | None = None, user: User | None = None) -> int:
    """Take back what is left of every voucher credit past its expiry (once each: the
    redemption row is locked and marked). Returns how many were settled."""
    now = now or timezone.now()
    due = VoucherRedemption.objects.filter(credit_expires_at__lte=now, expired_amount__isnull=True)
    if user is not None:
        due = due.filter(user=user)
    settled = 0
    for user_id in sorted(set(due.values_list("user_id", flat=True))):
        with transaction.atomic():
            owner = User.objects.select_for_update().get(pk=user_id)
            credits, _applied = voucher_waterfall(user=owner, now=now)
            for credit in credits:
                redemption = credit.redemption
                if not credit.expired or redemption.expired_amount is not None:
                    continue
                entry = None
                if credit.left > 0:
                    entry = LedgerEntry.objects.create(
                        user=owner,
                        kind=LedgerEntry.Kind.ADJUSTMENT,
                        amount=-credit.left,
                        created_at=now,
                        description=f"Voucher {redemption.voucher.code}: unspent credit expired",
                    )
                VoucherRedemption.objects.filter(pk=redemption.pk).update(
                    expired_amount=credit.left, expiry_entry=entry
                )
                audit_record(
                    action="voucher.credit_expired",
                    obj=redemption.voucher,
                    changes={"user": owner.email, "expired": str(credit.left)},
                )
                settled += 1
    return settled


def voucher_applied_between(*, user: User, start: datetime, end: datetime) -> Decimal:
    """Voucher credit that paid for charges of [start, end) and for reservations booked
    then: what an invoice for that period shows apart."""
    _credits, applied = voucher_waterfall(user=user, now=timezone.now())
    if not applied:
        return ZERO
    entries = LedgerEntry.objects.filter(pk__in=applied.keys()).select_related("charge")
    total = ZERO
    for entry in entries:
        at = entry.charge.period_start if entry.charge_id else entry.created_at
        if start <= at < end:
            total += applied[entry.pk]
    return total.quantize(Decimal("0.01"))


__all__ = [
    "Redeemed",
    "VoucherCredit",
    "VoucherRefused",
    "normalize_code",
    "voucher_applied_between",
    "voucher_credit_expire",
    "voucher_credit_of",
    "voucher_parts_of",
    "voucher_redeem",
    "voucher_waterfall",
]
