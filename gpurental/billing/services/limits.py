"""Stop what the balance no longer covers.

A customer whose balance falls below ``-credit_limit`` has their active instances
stopped, never deleted, and their active dedicated-host leases ended (their instances
stop the same way): ``/workspace`` stays, and the reason is in each instance's and each
lease's events. The warning before it is the same for both: the low-balance flag and
notice count leases in what runs (``billing.selectors.balance_status``), and the credit
limit is the grace. Instances start again once credit is added.
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
from gpurental.baremetal.models import Lease, LeaseStatus
from gpurental.baremetal.services import lease_end_over_limit
from gpurental.billing.models import LedgerEntry
from gpurental.billing.pricing import quantize_money
from gpurental.billing.selectors import metered_instances, spending_accounts
from gpurental.notifications.services import notify
from gpurental.rentals.exceptions import RentalError
from gpurental.rentals.models import Instance
from gpurental.rentals.services import lifecycle

log = logging.getLogger(__name__)


def users_over_limit() -> list[User]:
    """Users with metered instances or active leases whose balance is below minus their
    credit limit."""
    balance = (
        LedgerEntry.objects.filter(user=OuterRef("pk"))
        .order_by()
        .values("user")
        .annotate(total=Sum("amount"))
        .values("total")
    )
    return list(
        spending_accounts()
        .annotate(balance=Coalesce(Subquery(balance), Value(Decimal(0))))
        .filter(balance__lt=-F("credit_limit"))
    )


def limits_enforce(*, now: datetime | None = None) -> list[Instance]:
    """Stop the active instances and end the active leases of every user over their
    limit; returns the instances stopped (a lease's among them)."""
    now = now or timezone.now()
    cur = settings.BILLING_CURRENCY
    stopped = []
    for user in users_over_limit():
        stopped_now = []
        why = (
            f"your balance is {quantize_money(user.balance)} {cur} and your credit limit is "
            f"{user.credit_limit:.2f} {cur}"
        )
        reason = f"stopped because {why}; /workspace is kept. Add credit, then start it again."
        changes = {"balance": str(user.balance), "credit_limit": str(user.credit_limit)}
        for instance in metered_instances().filter(user=user):
            try:
                lifecycle.instance_stop(instance=instance, reason=reason, now=now)
            except RentalError:
                log.info("instance %s changed state meanwhile; not stopped", instance.pk)
                continue
            audit_record(action="billing.stop_over_limit", obj=instance, changes=changes)
            stopped_now.append(instance)
        for lease in Lease.objects.filter(user=user, status=LeaseStatus.ACTIVE):
            running = list(lease.instances.filter(status__in=lifecycle.STOPPABLE))
            try:
                ended = lease_end_over_limit(lease=lease, reason=f"ended because {why}", now=now)
            except RentalError:
                log.info("lease %s changed state meanwhile; not ended", lease.pk)
                continue
            if ended:
                audit_record(action="billing.lease_ended_over_limit", obj=lease, changes=changes)
                stopped_now += running
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
