"""May this launch (or start) go ahead? The balance must pay for a minimum period.

``lifecycle.instance_launch`` and ``instance_start`` call these first, before they
hold any GPU.
"""

from __future__ import annotations

from datetime import datetime
from decimal import ROUND_CEILING, Decimal

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.accounts.models import User
from gpurental.billing.exceptions import InsufficientBalance
from gpurental.billing.pricing import quantize_money
from gpurental.billing.selectors import balance_of, hourly_burn_of
from gpurental.billing.services.metering import instance_settle
from gpurental.billing.services.vouchers import voucher_credit_expire
from gpurental.catalog.models import Plan
from gpurental.rentals.models import Instance, InstanceStatus

CENT = Decimal("0.01")


def launch_allowed(*, user: User, plan: Plan, now: datetime | None = None) -> None:
    """Refuse, naming the balance, the rate and the shortfall, when the balance (plus the
    credit limit) cannot pay ``BILLING_MIN_PREPAID_MINUTES`` of this plan on top of
    what the user already runs."""
    if not settings.BILLING_ENFORCE_BALANCE:
        return
    # Voucher credit past its expiry is not money to launch on, even before beat's sweep.
    voucher_credit_expire(user=user, now=now)
    minutes = settings.BILLING_MIN_PREPAID_MINUTES
    running = hourly_burn_of(user=user)
    needed = (running + plan.hourly_rate) * minutes / 60
    balance = balance_of(user=user)
    available = balance + user.credit_limit
    if available >= needed:
        return
    cur = settings.BILLING_CURRENCY
    # Display only (nothing is posted): the shortfall is rounded up, so adding it is enough.
    shortfall = (needed - available).quantize(CENT, rounding=ROUND_CEILING)
    values = {
        "cur": cur,
        "balance": quantize_money(balance),
        "limit": f"{user.credit_limit:.2f}",
        "plan": plan.slug,
        "rate": f"{plan.hourly_rate:.2f}",
        "running": f"{running:.2f}",
        "minutes": minutes,
        "needed": f"{needed.quantize(CENT, rounding=ROUND_CEILING):.2f}",
        "shortfall": f"{shortfall:.2f}",
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
        % {**values, "has": has % values, "costs": costs % values},
        field="plan",
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
