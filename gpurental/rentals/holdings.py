"""What an account holds over [start, end): the one home of the at-once GPU quota rule.

An account (a person, or a team's account) holds GPUs through allocations, whatever
booked them: an on-demand instance holds [start, ∞) until it stops, a reservation and a
dedicated-host lease hold [start, end), the instance launched into a reservation or a
lease holds that booking's own allocations (never a second set), and an elastic group's
replicas, warm ones included, are ordinary instances. So "GPUs held over [start, end)"
is the number of the account's allocations overlapping it: every booking counts once,
and every kind counts against every other over the same hours.

Every path that books GPUs calls ``quota_check`` with the account's row locked
(``account_lock``), in the transaction that books: the instance launch and the start of
a stopped instance (``rentals/services/lifecycle/customer.py``, which group replicas and
warm replicas go through), ``reservation_book`` and ``lease_book``. Launches into a
reservation or a lease hold nothing new and are not checked again.

Each account has its own quota (``User.gpu_quota``); the rule applies to the account that
books. A team's account starts at 0: staff set it in the admin.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q
from django.utils.translation import gettext as _

from gpurental.accounts.models import AccountKind, User
from gpurental.rentals.exceptions import QuotaExceeded
from gpurental.rentals.models import Allocation
from gpurental.rentals.selectors import between, from_now


def account_lock(pk) -> User:
    """Lock the account's row: one booking at a time per account, so that two bookings
    cannot both pass the quota or the balance check."""
    return User.objects.select_for_update().get(pk=pk)


def _allocations_of(account):
    return Allocation.objects.filter(
        Q(instance__user=account) | Q(reservation__user=account) | Q(lease__user=account)
    )


def gpus_held(*, account, start: datetime, end: datetime | None = None) -> int:
    """GPUs the account's allocations hold at any time in [start, end) (no end: from
    ``start`` on), added up: back-to-back bookings do not add, overlapping ones do."""
    period = from_now(start) if end is None else between(start, end)
    return _allocations_of(account).filter(period__overlap=period).count()


def gpus_held_now(*, account, now: datetime) -> int:
    """GPUs the account holds at ``now`` (what the console and the API show in use)."""
    return _allocations_of(account).filter(period__contains=now).count()


def quota_check(
    *,
    account: User,
    count: int,
    start: datetime,
    end: datetime | None = None,
    field: str = "gpu_count",
    hint: str = "",
) -> None:
    """Refuse (QuotaExceeded naming ``field``) a booking of ``count`` GPUs over [start,
    end) that would take ``account`` past its quota. ``account`` is locked by the caller."""
    held = gpus_held(account=account, start=start, end=end)
    if held + count <= account.gpu_quota:
        return
    values = {"quota": account.gpu_quota, "held": held, "count": count}
    if account.kind == AccountKind.TEAM:
        message = (
            _(
                "this team's quota is %(quota)s GPUs at once and it holds %(held)s over that "
                "period; %(count)s more would exceed it. A team's quota is set by the operator: "
                "ask them to raise it."
            )
            % values
        )
        raise QuotaExceeded(message, field=field)
    message = (
        _(
            "your quota is %(quota)s GPUs at once and you hold %(held)s; "
            "%(count)s more would exceed it."
        )
        % values
    )
    raise QuotaExceeded(f"{message} {hint}" if hint else message, field=field)
