"""Reservations: GPUs booked ahead for [start, end), paid at booking with the reserved discount.

    booked → active (its instance launched at start) → completed (stopped at end)
    booked → cancelled (refund by the policy; or in full when its instance cannot start)

Booking holds the GPUs with allocations over [start, end) (the exclusion constraint
is the referee, as for launches), and debits the price to the ledger in the same
transaction, so a booking is either held and paid, or neither. On-demand instances
hold their GPUs open-ended, so they can never take GPUs a reservation holds.

The instance of a reservation holds the reservation's own allocations; the meter
does not charge it (it was paid at booking). The periodic ``reservations_tick``
launches at start, warns before the end and stops at the end.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_CEILING, Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gpurental.accounts.models import User
from gpurental.billing import pricing
from gpurental.billing.exceptions import InsufficientBalance
from gpurental.billing.models import LedgerEntry
from gpurental.billing.selectors import balance_of, operator_zone
from gpurental.catalog.models import GPUModel, ImageTemplate, Plan
from gpurental.rentals import hostcalls, selectors
from gpurental.rentals.exceptions import InvalidTransition, RentalError
from gpurental.rentals.models import (
    Allocation,
    Instance,
    InstanceEvent,
    InstanceStatus,
    Reservation,
    ReservationEvent,
    ReservationStatus,
)
from gpurental.rentals.services import lifecycle
from gpurental.rentals.services.scheduling import gpus_reserve

log = logging.getLogger(__name__)
R = ReservationStatus
CENT = Decimal("0.01")


# --- building blocks ----------------------------------------------------------


def reservation_price(*, plan: Plan, start: datetime, end: datetime) -> Decimal:
    """The plan's reserved rate over [start, end), rounded once to cents."""
    segments = pricing.price_interval(
        start, end, pricing.Tariff.of(plan, operator_zone()), reserved=True
    )
    return pricing.quantize_money(pricing.total(segments))


def _check_period(start: datetime, end: datetime, now: datetime) -> None:
    if start.tzinfo is None or end.tzinfo is None:
        raise RentalError("start and end need a time zone (e.g. 2026-12-03T10:00Z)", field="start")
    if start.second or start.microsecond or end.second or end.microsecond:
        raise RentalError("start and end must be on whole minutes", field="start")
    if start < now - timedelta(minutes=1):
        raise RentalError(f"start {start:%Y-%m-%d %H:%M} UTC is in the past", field="start")
    horizon = settings.RESERVATION_HORIZON_DAYS
    if start > now + timedelta(days=horizon):
        raise RentalError(f"start must be within {horizon} days from now", field="start")
    minutes = (end - start).total_seconds() / 60
    if minutes < settings.RESERVATION_MIN_MINUTES:
        raise RentalError(
            f"a reservation lasts at least {settings.RESERVATION_MIN_MINUTES} minutes", field="end"
        )
    if minutes > settings.RESERVATION_MAX_HOURS * 60:
        raise RentalError(
            f"a reservation lasts at most {settings.RESERVATION_MAX_HOURS} hours", field="end"
        )


def _event(
    reservation: Reservation,
    to: str,
    *,
    reason: str,
    now: datetime,
    actor: User | None = None,
    **fields,
) -> None:
    """Move the reservation (locked by the caller) to ``to`` and record it."""
    old = reservation.status
    reservation.status = to
    for key, value in fields.items():
        setattr(reservation, key, value)
    reservation.save(update_fields=["status", *fields])
    ReservationEvent.objects.create(
        reservation=reservation,
        from_status=old if old != to else "",
        to_status=to,
        reason=reason,
        actor=actor if actor is not None and actor.pk else None,
        created_at=now,
    )


def _lock(reservation: Reservation | str, *, skip_locked: bool = False) -> Reservation | None:
    pk = reservation.pk if isinstance(reservation, Reservation) else reservation
    return (
        Reservation.objects.select_for_update(of=("self",), skip_locked=skip_locked)
        .select_related("plan", "gpu_model", "image", "user")
        .filter(pk=pk)
        .first()
    )


def _refund(reservation: Reservation, amount: Decimal, *, now: datetime, why: str) -> None:
    if amount <= 0:
        return
    LedgerEntry.objects.create(
        user_id=reservation.user_id,
        kind=LedgerEntry.Kind.REFUND,
        amount=amount,
        reservation=reservation,
        created_at=now,
        description=f"Refund: {reservation}, {why}"[:255],
    )


# --- customer actions ---------------------------------------------------------


@dataclass(frozen=True)
class Quote:
    plan: Plan
    start: datetime  # UTC; now, for a start a moment ago
    end: datetime  # UTC
    price: Decimal

    @property
    def hours(self) -> Decimal:
        return Decimal((self.end - self.start) // timedelta(microseconds=1)) / 3_600_000_000


def reservation_quote(
    *,
    start: datetime,
    end: datetime,
    plan: Plan | None = None,
    gpu_model: GPUModel | None = None,
    gpu_count: int | None = None,
    now: datetime | None = None,
) -> Quote:
    """Price a booking with the booking's own checks; books nothing. Raises RentalError."""
    now = now or timezone.now()
    plan = lifecycle.resolve_plan(plan=plan, gpu_model=gpu_model, gpu_count=gpu_count)
    _check_period(start, end, now)
    # In UTC from here on: what the messages and the ledger say is labelled UTC.
    start = max(start.astimezone(UTC), now.astimezone(UTC).replace(second=0, microsecond=0))
    end = end.astimezone(UTC)
    return Quote(plan, start, end, reservation_price(plan=plan, start=start, end=end))


def reservation_book(
    *,
    user: User,
    image: ImageTemplate,
    start: datetime,
    end: datetime,
    plan: Plan | None = None,
    gpu_model: GPUModel | None = None,
    gpu_count: int | None = None,
    now: datetime | None = None,
) -> Reservation:
    """Hold GPUs over [start, end) and pay for them now. Raises RentalError (NoCapacity,
    InsufficientBalance, …); then nothing is held or charged."""
    now = now or timezone.now()
    if not image.is_active:
        raise RentalError(f"image {image.slug} is no longer offered", field="image")
    quote = reservation_quote(
        start=start, end=end, plan=plan, gpu_model=gpu_model, gpu_count=gpu_count, now=now
    )
    plan, start, end, price = quote.plan, quote.start, quote.end, quote.price
    with transaction.atomic():
        # One booking or launch at a time per user: the balance is checked and spent once.
        locked_user = User.objects.select_for_update().get(pk=user.pk)
        _check_balance(locked_user, price)
        reservation = Reservation.objects.create(
            user=locked_user,
            plan=plan,
            gpu_model=plan.gpu_model,
            gpu_count=plan.gpu_count,
            image=image,
            period=selectors.between(start, end),
            price=price,
            created_at=now,
        )
        proposal = gpus_reserve(
            reservation=reservation,
            gpu_model=plan.gpu_model,
            count=plan.gpu_count,
            start=start,
            end=end,
        )
        if price > 0:
            LedgerEntry.objects.create(
                user=locked_user,
                kind=LedgerEntry.Kind.RESERVATION,
                amount=-price,
                reservation=reservation,
                created_at=now,
                description=f"{reservation} to {end:%Y-%m-%d %H:%M} UTC ({plan.name}), reserved"[
                    :255
                ],
            )
        gpus = ", ".join(str(g.index) for g in proposal.gpus)
        _event(
            reservation,
            R.BOOKED,
            reason=f"booked on {proposal.host_name}, GPUs {gpus}; paid {price} "
            f"{settings.BILLING_CURRENCY}",
            now=now,
            actor=user,
        )
    return reservation


def _check_balance(user: User, price: Decimal) -> None:
    if not settings.BILLING_ENFORCE_BALANCE:
        return
    available = balance_of(user=user) + user.credit_limit
    if available >= price:
        return
    cur = settings.BILLING_CURRENCY
    shortfall = (price - available).quantize(CENT, rounding=ROUND_CEILING)
    raise InsufficientBalance(
        f"this reservation costs {price} {cur}, paid at booking; you have "
        f"{pricing.quantize_money(available)} {cur} to spend. "
        f"Add at least {shortfall:.2f} {cur} of credit.",
        field="plan",
    )


def refund_for(reservation: Reservation, *, now: datetime) -> Decimal | None:
    """What cancelling now would pay back (None: it cannot be cancelled any more)."""
    if reservation.status != R.BOOKED:
        return None
    return pricing.reservation_refund(
        reservation.price,
        start=reservation.start,
        now=now,
        full_refund_before=timedelta(hours=settings.RESERVATION_FULL_REFUND_HOURS),
        late_percent=settings.RESERVATION_LATE_REFUND_PERCENT,
    )


def reservation_cancel(
    *, reservation: Reservation, actor: User | None = None, now: datetime | None = None
) -> Reservation:
    """Cancel before the start: free the GPUs and refund by the policy."""
    now = now or timezone.now()
    with transaction.atomic():
        reservation = _lock(reservation)
        if reservation.status == R.CANCELLED:
            return reservation
        refund = refund_for(reservation, now=now)
        if refund is None:
            raise InvalidTransition(
                f"reservation {reservation.pk} is {reservation.status} and started at "
                f"{reservation.start:%Y-%m-%d %H:%M} UTC: it can only be cancelled before its "
                "start. Stop its instance instead.",
                field="status",
            )
        Allocation.objects.filter(reservation=reservation).delete()
        _refund(reservation, refund, now=now, why="cancelled")
        cur = settings.BILLING_CURRENCY
        _event(
            reservation,
            R.CANCELLED,
            reason=f"cancelled by {actor or 'the operator'}; refunded {refund} of "
            f"{reservation.price} {cur}",
            now=now,
            actor=actor,
            refunded=refund,
            cancelled_at=now,
        )
    return reservation


# --- the clock: launch at start, warn before the end, stop at the end -----------


def reservation_activate(*, reservation: Reservation, now: datetime) -> Instance | None:
    """Launch the reservation's instance on its GPUs (from the periodic tick)."""
    with transaction.atomic():
        reservation = _lock(reservation, skip_locked=True)
        if reservation is None or reservation.status != R.BOOKED:
            return None
        if not reservation.start <= now < reservation.end:
            return None
        allocations = Allocation.objects.filter(reservation=reservation).select_related("gpu")
        host_id = allocations.values_list("gpu__host_id", flat=True).first()
        instance = Instance.objects.create(
            user_id=reservation.user_id,
            name=f"reservation {str(reservation.pk)[:8]}",
            plan=reservation.plan,
            gpu_model=reservation.gpu_model,
            gpu_count=reservation.gpu_count,
            image=reservation.image,
            host_id=host_id,
            reservation=reservation,
            status=InstanceStatus.PENDING,
            status_changed_at=now,
            jupyter_token=secrets.token_hex(24),
            idle_stop_minutes=0,  # paid for already: stopping it early saves nothing
            created_at=now,
        )
        allocations.update(instance=instance)
        gpus = ", ".join(str(i) for i in sorted(allocations.values_list("gpu__index", flat=True)))
        InstanceEvent.objects.create(
            instance=instance,
            kind=InstanceEvent.Kind.TRANSITION,
            to_status=InstanceStatus.PENDING,
            reason=f"launched for reservation {str(reservation.pk)[:8]} on GPUs {gpus}; "
            f"runs until {reservation.end:%Y-%m-%d %H:%M} UTC",
            created_at=now,
        )
        _event(reservation, R.ACTIVE, reason=f"instance {instance.pk} launched", now=now)
        instance = Instance.objects.select_related("host", "image", "plan").get(pk=instance.pk)
        hostcalls.start(instance)
    return instance


def reservation_warn_end(*, reservation: Reservation, now: datetime) -> bool:
    """Tell the customer, on the instance page, that the reservation ends soon."""
    with transaction.atomic():
        reservation = _lock(reservation, skip_locked=True)
        if reservation is None or reservation.status != R.ACTIVE or reservation.end_warned_at:
            return False
        instance = reservation.instances.order_by("-created_at").first()
        if instance is not None and instance.status in selectors.HOLDING:
            lifecycle.instance_notice(
                instance,
                reason=f"Your reservation ends at {reservation.end:%H:%M} UTC: the instance "
                "stops then (/workspace is kept). Save your work.",
                step="reservation_ending",
                now=now,
                ends_at=reservation.end.isoformat(),
            )
        Reservation.objects.filter(pk=reservation.pk).update(end_warned_at=now)
        return True


def reservation_complete(*, reservation: Reservation, now: datetime) -> bool:
    """At the end: stop its instance (never delete it) and close the reservation."""
    with transaction.atomic():
        reservation = _lock(reservation, skip_locked=True)
        if reservation is None or reservation.status not in (R.BOOKED, R.ACTIVE):
            return False
        if now < reservation.end:
            return False
        for instance in reservation.instances.filter(status__in=lifecycle.STOPPABLE):
            lifecycle.instance_stop(
                instance=instance,
                reason=f"the reservation ended at {reservation.end:%Y-%m-%d %H:%M} UTC; "
                "/workspace is kept",
                now=now,
            )
        _event(reservation, R.COMPLETED, reason="the reserved period ended", now=now)
        return True


def reservation_fail(*, reservation: Reservation, instance: Instance, now: datetime) -> bool:
    """Its instance could not start: cancel and refund in full (a failure costs nothing)."""
    with transaction.atomic():
        reservation = _lock(reservation, skip_locked=True)
        if reservation is None or reservation.status != R.ACTIVE:
            return False
        Allocation.objects.filter(reservation=reservation).delete()
        _refund(reservation, reservation.price, now=now, why="its instance could not start")
        _event(
            reservation,
            R.CANCELLED,
            reason=f"its instance could not start ({instance.status_reason}); refunded in full",
            now=now,
            refunded=reservation.price,
            cancelled_at=now,
        )
        return True


def reservations_tick(*, now: datetime | None = None) -> dict[str, int]:
    """One pass of the reservation clock; safe to run from many workers at once."""
    now = now or timezone.now()
    done = {"activated": 0, "warned": 0, "completed": 0, "failed": 0}
    due = Reservation.objects.filter(status=R.BOOKED, period__startswith__lte=now)
    for reservation in due.filter(period__endswith__gt=now):
        done["activated"] += reservation_activate(reservation=reservation, now=now) is not None
    warn_from = now + timedelta(minutes=settings.RESERVATION_END_WARNING_MINUTES)
    for reservation in Reservation.objects.filter(
        status=R.ACTIVE, end_warned_at__isnull=True, period__endswith__lte=warn_from
    ):
        done["warned"] += reservation_warn_end(reservation=reservation, now=now)
    failed = Instance.objects.filter(
        reservation__status=R.ACTIVE, status=InstanceStatus.FAILED
    ).select_related("reservation")
    for instance in failed:
        done["failed"] += reservation_fail(
            reservation=instance.reservation, instance=instance, now=now
        )
    for reservation in Reservation.objects.filter(
        status__in=(R.BOOKED, R.ACTIVE), period__endswith__lte=now
    ):
        done["completed"] += reservation_complete(reservation=reservation, now=now)
    return done
