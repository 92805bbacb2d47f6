"""Periodic billing jobs (declared in celery_app's beat schedule). Each is idempotent:
a run repeated, or run by two workers at once, changes nothing more."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from gpurental.billing.selectors import operator_zone
from gpurental.billing.services.autotopup import auto_topup_run
from gpurental.billing.services.invoicing import invoices_generate
from gpurental.billing.services.limits import limits_enforce
from gpurental.billing.services.metering import meter_run
from gpurental.billing.services.vouchers import voucher_credit_expire
from gpurental.celery_app import app
from gpurental.notifications.checks import low_balance_check

DRAFT_DAYS = 3


@app.task(name="gpurental.billing.tasks.meter", time_limit=120, soft_time_limit=100)
def meter() -> int:
    return meter_run(now=timezone.now())


@app.task(name="gpurental.billing.tasks.enforce_limits", time_limit=120, soft_time_limit=100)
def enforce_limits() -> int:
    now = timezone.now()
    # Automatic top-ups first: a charge started now is credited when its webhook comes.
    auto_topup_run(now=now)
    low_balance_check(now=now)
    return len(limits_enforce(now=now))


@app.task(name="gpurental.billing.tasks.draft_invoices", time_limit=1800, soft_time_limit=1700)
def draft_invoices() -> int:
    """Drafts for last month (the operator's) during the first days of a month, from two
    hours in, when the meter has long closed it; staff review and issue them in the
    back-office. Beat runs this every few hours: drafts are rebuilt, issued ones kept."""
    now = timezone.now()
    local = now.astimezone(operator_zone())
    if local.day > DRAFT_DAYS or (local.day == 1 and local.hour < 2):
        return 0
    last_month = local.replace(day=1) - timedelta(days=1)
    return invoices_generate(year=last_month.year, month=last_month.month, now=now)


@app.task(name="gpurental.billing.tasks.expire_voucher_credit", time_limit=300, soft_time_limit=270)
def expire_voucher_credit() -> int:
    """Take back the unspent part of voucher credit past its expiry (once each)."""
    return voucher_credit_expire(now=timezone.now())
