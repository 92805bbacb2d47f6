"""May this booking go ahead? What the balance must hold for it, and what it holds already.

A booking of any kind holds its price, or its first billing period, against the balance
at the moment it is made, with the account's row locked by the caller:

- an instance launch (or the start of a stopped one): ``BILLING_MIN_PREPAID_MINUTES`` of
  its plan, on top of the same period of every metered instance that runs already;
- a reservation: its price (it is debited at booking);
- a dedicated-host lease: its price over the whole period (it is billed as it runs).

What is committed and not yet in the ledger counts against what the next booking may
spend: the rest of every booked or active lease, and the time that running instances
have used and the meter has not charged yet. One hour's balance books one hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_CEILING, Decimal

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.accounts.models import User
from gpurental.baremetal.selectors import leases_committed
from gpurental.billing.exceptions import InsufficientBalance
from gpurental.billing.pricing import quantize_money
from gpurental.billing.selectors import (
    balance_of,
    hourly_burn_of,
    metered_instances,
    unbilled_cost,
)
from gpurental.billing.services.metering import instance_settle
from gpurental.billing.services.vouchers import voucher_credit_expire
from gpurental.catalog.models import Plan
from gpurental.rentals.models import Instance, InstanceStatus

CENT = Decimal("0.01")


@dataclass(frozen=True)
class Spendable:
    balance: Decimal
    credit_limit: Decimal
    committed: Decimal  # the rest of the account's leases, and metered use not charged yet

    @property
    def available(self) -> Decimal:
        return self.balance + self.credit_limit - self.committed


def spendable_of(*, account: User, now: datetime) -> Spendable:
    """The account's balance, credit limit and commitments at ``now``."""
    # Voucher credit past its expiry is not money to book with, even before beat's sweep.
    voucher_credit_expire(user=account, now=now)
    metered = metered_instances().filter(user=account).select_related("plan")
    unbilled = sum((unbilled_cost(i, now=now) for i in metered), Decimal(0))
    return Spendable(
        balance=balance_of(user=account),
        credit_limit=account.credit_limit,
        committed=leases_committed(user=account) + unbilled,
    )


def _shortfall(needed: Decimal, available: Decimal) -> str:
    # Display only (nothing is posted): rounded up, so adding it is enough.
    return f"{(needed - available).quantize(CENT, rounding=ROUND_CEILING):.2f}"


def _committed_note(money: Spendable) -> str:
    if not money.committed:
        return ""
    return " " + _(
        "(Your balance is %(balance)s %(cur)s, and %(committed)s %(cur)s of it is committed "
        "to your leases and to use not billed yet.)"
    ) % {
        "balance": quantize_money(money.balance),
        "committed": quantize_money(money.committed),
        "cur": settings.BILLING_CURRENCY,
    }


def launch_allowed(
    *, user: User, plan: Plan, now: datetime | None = None, hourly_rate: Decimal | None = None
) -> None:
    """Refuse, naming the balance, the rate and the shortfall, when what the account may
    spend cannot pay ``BILLING_MIN_PREPAID_MINUTES`` of this plan (at ``hourly_rate``,
    the plan's own by default) on top of the same period of what it already runs."""
    if not settings.BILLING_ENFORCE_BALANCE:
        return
    now = now or timezone.now()
    rate = plan.hourly_rate if hourly_rate is None else hourly_rate
    money = spendable_of(account=user, now=now)
    minutes = settings.BILLING_MIN_PREPAID_MINUTES
    running = hourly_burn_of(user=user, leases=False)
    needed = (running + rate) * minutes / 60
    available = money.available
    if available >= needed:
        return
    cur = settings.BILLING_CURRENCY
    values = {
        "cur": cur,
        "balance": quantize_money(money.balance),
        "limit": f"{user.credit_limit:.2f}",
        "plan": plan.slug,
        "rate": f"{rate:.2f}",
        "running": f"{running:.2f}",
        "minutes": minutes,
        "needed": f"{needed.quantize(CENT, rounding=ROUND_CEILING):.2f}",
        "shortfall": _shortfall(needed, available),
    }
    if user.credit_limit:
        has = _("your balance is %(balance)s %(cur)s and a credit limit of %(limit)s %(cur)s")
    else:
        has = _("your balance is %(balance)s %(cur)s")
    if running:
        costs = _(
            "plan %(plan)s costs %(rate)s %(cur)s/h besides the %(running)s %(cur)s/h you run already"
        )
    else:
        costs = _("plan %(plan)s costs %(rate)s %(cur)s/h")
    raise InsufficientBalance(
        _(
            "%(has)s; %(costs)s, and a launch needs %(minutes)s minutes paid ahead "
            "(%(needed)s %(cur)s). Add at least %(shortfall)s %(cur)s of credit."
        )
        % {**values, "has": has % values, "costs": costs % values}
        + _committed_note(money),
        field="plan",
    )


def booking_allowed(*, account: User, price: Decimal, kind: str, now: datetime) -> None:
    """Refuse a reservation or a lease (``kind``) whose ``price`` is more than what the
    account may spend now, naming the price, what is left and the shortfall."""
    if not settings.BILLING_ENFORCE_BALANCE:
        return
    money = spendable_of(account=account, now=now)
    available = money.available
    if available >= price:
        return
    if kind == "lease":
        message = _(
            "this lease costs %(price)s %(cur)s over its period; you have %(available)s "
            "%(cur)s to spend. Add at least %(shortfall)s %(cur)s of credit."
        )
    else:
        message = _(
            "this reservation costs %(price)s %(cur)s, paid at booking; you have "
            "%(available)s %(cur)s to spend. Add at least %(shortfall)s %(cur)s of credit."
        )
    values = {
        "price": price,
        "cur": settings.BILLING_CURRENCY,
        "available": quantize_money(available),
        "shortfall": _shortfall(price, available),
    }
    raise InsufficientBalance(message % values + _committed_note(money), field="plan")


def leased_run_allowed(*, account: User, now: datetime) -> None:
    """An instance is launched or started into an active lease only while the account's
    money still covers what it has committed (the lease is billed as it runs)."""
    if not settings.BILLING_ENFORCE_BALANCE:
        return
    money = spendable_of(account=account, now=now)
    if money.available >= 0:
        return
    raise InsufficientBalance(
        _(
            "your balance is %(balance)s %(cur)s and a credit limit of %(limit)s %(cur)s, and "
            "%(committed)s %(cur)s of it is committed to your leases and to use not billed "
            "yet: add at least %(shortfall)s %(cur)s of credit, then start the instance."
        )
        % {
            "balance": quantize_money(money.balance),
            "limit": f"{money.credit_limit:.2f}",
            "committed": quantize_money(money.committed),
            "cur": settings.BILLING_CURRENCY,
            "shortfall": _shortfall(Decimal(0), money.available),
        },
        field="status",
    )


def start_allowed(*, instance: Instance, now: datetime | None = None) -> None:
    """Charge the last run in full (``instance_start`` clears its ``stopped_at``), then
    check the balance as for a launch. Starting what is not stopped is left to
    ``instance_start`` (it is harmless, or refused with its own message)."""
    now = now or timezone.now()
    instance_settle(instance_id=instance.pk, now=now)
    fresh = Instance.objects.select_related("user", "plan").get(pk=instance.pk)
    if fresh.status == InstanceStatus.STOPPED:
        launch_allowed(user=fresh.user, plan=fresh.plan, now=now)
