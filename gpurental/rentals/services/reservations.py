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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.accounts.models import User
from gpurental.billing import pricing
from gpurental.billing.models import Invoice, InvoiceLine, InvoiceStatus, LedgerEntry
from gpurental.billing.selectors import operator_zone
from gpurental.billing.services import prepaid
from gpurental.billing.services.invoicing import invoice_credit_note
from gpurental.billing.services.refunds import refund_post
from gpurental.catalog.models import GPUModel, ImageTemplate, Plan
from gpurental.fleet.models import Host, HostStatus
from gpurental.notifications.services import notify
from gpurental.rentals import holdings, selectors
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
from gpurental.rentals.services.transitions import status_move

log = logging.getLogger(__name__)
R = ReservationStatus


# --- building blocks ----------------------------------------------------------


def reservation_price(*, plan: Plan, start: datetime, end: datetime) -> Decimal:
    """The plan's reserved rate over [start, end), rounded once to cents."""
    segments = pricing.price_interval(
        start, end, pricing.Tariff.of(plan, operator_zone()), reserved=True
    )
    return pricing.quantize_money(pricing.total(segments))


def _check_period(start: datetime, end: datetime, now: datetime) -> None:
    """The booking rules for a period (start and end in UTC)."""
    if start.second or start.microsecond or end.second or end.microsecond:
        raise RentalError(_("start and end must be on whole minutes"), field="start")
    if start < now - timedelta(minutes=1):
        raise RentalError(
            _("start %(start)s UTC is in the past") % {"start": f"{start:%Y-%m-%d %H:%M}"},
            field="start",
        )
    horizon = settings.RESERVATION_HORIZON_DAYS
    if start > now + timedelta(days=horizon):
        raise RentalError(
            _("start must be within %(days)s days from now") % {"days": horizon}, field="start"
        )
    if end <= start:
        raise RentalError(_("end must be after start"), field="end")
    minutes = (end - start).total_seconds() / 60
    if minutes < settings.RESERVATION_MIN_MINUTES:
        raise RentalError(
            _("a reservation lasts at least %(minutes)s minutes")
            % {"minutes": settings.RESERVATION_MIN_MINUTES},
            field="end",
        )
    if minutes > settings.RESERVATION_MAX_HOURS * 60:
        raise RentalError(
            _("a reservation lasts at most %(hours)s hours")
            % {"hours": settings.RESERVATION_MAX_HOURS},
            field="end",
        )


def _event(reservation: Reservation, to: str, **kwargs) -> None:
    """Move the reservation (locked by the caller) to ``to`` and record it."""
    status_move(reservation, to, event_model=ReservationEvent, **kwargs)


def _lock(reservation: Reservation | str, *, skip_locked: bool = False) -> Reservation | None:
    pk = reservation.pk if isinstance(reservation, Reservation) else reservation
    return (
        Reservation.objects.select_for_update(of=("self",), skip_locked=skip_locked)
        .select_related("plan", "gpu_model", "image", "user")
        .filter(pk=pk)
        .first()
    )


def _refund(reservation: Reservation, amount: Decimal, *, now: datetime, why: str) -> None:
    """Pay ``amount`` back to where it came from (voucher credit returns to its voucher,
    with its expiry: billing.services.refunds). If the invoice that charged the
    reservation is issued already, the refund also comes as a credit note against its
    line, so every refund is on a document."""
    if amount <= 0:
        return
    refund_post(
        user=reservation.user,
        debits=LedgerEntry.objects.filter(
            reservation=reservation, kind=LedgerEntry.Kind.RESERVATION
        ),
        amount=amount,
        reservation=reservation,
        now=now,
        description=f"Refund: {reservation}, {why}",
    )
    line = (
        InvoiceLine.objects.filter(
            reservation=reservation,
            invoice__kind=Invoice.Kind.INVOICE,
            invoice__status__in=(InvoiceStatus.ISSUED, InvoiceStatus.PAID),
        )
        .select_related("invoice")
        .first()
    )
    if line is not None:
        invoice_credit_note(
            invoice=line.invoice,
            credits=[(line, amount)],
            reason=f"reservation refund: {why}",
            now=now,
            refund=False,  # paid back above
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
    if start.tzinfo is None or end.tzinfo is None:
        raise RentalError(
            _("start and end need a time zone (e.g. 2026-12-03T10:00Z)"), field="start"
        )
    # In UTC from here on: what the messages and the ledger say is labelled UTC.
    start, end, now = start.astimezone(UTC), end.astimezone(UTC), now.astimezone(UTC)
    _check_period(start, end, now)
    start = max(start, now.replace(second=0, microsecond=0))  # "now" given a moment ago
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
        raise RentalError(
            _("image %(image)s is no longer offered") % {"image": image.slug}, field="image"
        )
    quote = reservation_quote(
        start=start, end=end, plan=plan, gpu_model=gpu_model, gpu_count=gpu_count, now=now
    )
    plan, start, end, price = quote.plan, quote.start, quote.end, quote.price
    with transaction.atomic():
        # One booking or launch at a time per account: the balance is checked and spent once.
        locked_user = holdings.account_lock(user.pk)
        holdings.quota_check(account=locked_user, count=plan.gpu_count, start=start, end=end)
        prepaid.booking_allowed(account=locked_user, price=price, kind="reservation", now=now)
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
                _(
                    "reservation %(id)s is %(status)s and started at %(start)s UTC: it can only "
                    "be cancelled before its start. Stop its instance instead."
                )
                % {
                    "id": reservation.pk,
                    "status": reservation.status,
                    "start": f"{reservation.start:%Y-%m-%d %H:%M}",
                },
                field="status",
            )
        cur = settings.BILLING_CURRENCY
        _close(
            reservation,
            R.CANCELLED,
            refund=refund,
            reason=f"cancelled by {actor or 'the operator'}; refunded {refund} of "
            f"{reservation.price} {cur}",
            now=now,
            actor=actor,
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
        host = _reserved_host(reservation)
        if host is None or not _host_usable(host, now):
            where = host.name if host else "its host"
            _cancel_in_full(
                reservation,
                reason=f"{where} was not available at the start; refunded in full",
                now=now,
            )
            return None
        instance = _launch(reservation, host=host, now=now, why="launched")
        transaction.on_commit(
            lambda: notify(
                reservation.user, "reservation_started", reservation=reservation, instance=instance
            )
        )
    return instance


def _launch(reservation: Reservation, *, host: Host, now: datetime, why: str) -> Instance:
    """A new instance on the reservation's GPUs (the reservation locked by the caller)."""
    instance = lifecycle.instance_launch_reserved(
        reservation=reservation, host=host, reason=why, now=now
    )
    _event(reservation, R.ACTIVE, reason=f"instance {instance.pk} {why}", now=now)
    return instance


def reservation_relaunch(
    *, reservation: Reservation, actor: User | None = None, now: datetime | None = None
) -> Instance:
    """A new instance (with a new, empty /workspace) on the reservation's GPUs, for a
    customer who terminated theirs before the end: the period is paid for either way."""
    now = now or timezone.now()
    with transaction.atomic():
        reservation = _lock(reservation)
        if reservation.status != R.ACTIVE or now >= reservation.end:
            raise InvalidTransition(
                _(
                    "reservation %(id)s is %(status)s (until %(end)s UTC): only an active "
                    "reservation can launch its instance again, before its end"
                )
                % {
                    "id": reservation.pk,
                    "status": reservation.status,
                    "end": f"{reservation.end:%Y-%m-%d %H:%M}",
                },
                field="status",
            )
        current = (
            reservation.instances.exclude(status=InstanceStatus.TERMINATED)
            .order_by("-created_at")
            .first()
        )
        if current is not None:
            hint = {
                InstanceStatus.STOPPED: _("start it instead"),
                InstanceStatus.FAILED: _("the unused time is refunded"),
                InstanceStatus.LOST: _("the unused time is refunded"),
            }.get(current.status, _("it holds the reserved GPUs"))
            raise InvalidTransition(
                _("instance %(id)s of this reservation is %(status)s: %(hint)s")
                % {"id": current.pk, "status": current.status, "hint": hint},
                field="status",
            )
        host = _reserved_host(reservation)
        if host is None or not _host_usable(host, now):
            raise RentalError(
                _(
                    "the reserved GPUs' host %(host)s is not available now; "
                    "try again in a few minutes"
                )
                % {"host": host.name if host else ""},
                field="host",
            )
        who = f" by {actor}" if actor is not None else ""
        return _launch(reservation, host=host, now=now, why=f"launched again{who}")


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
        transaction.on_commit(
            lambda: notify(
                reservation.user, "reservation_ending", reservation=reservation, instance=instance
            )
        )
        return True


def reservation_remind_start(*, reservation: Reservation, now: datetime) -> bool:
    """Tell the customer their booking starts soon (once: the notification's key)."""
    if reservation.status != R.BOOKED or reservation.start <= now:
        return False
    return bool(
        notify(
            reservation.user,
            "reservation_starting_soon",
            dedupe_key=f"reservation-{reservation.pk}",
            reservation=reservation,
        )
    )


def reservation_complete(*, reservation: Reservation, now: datetime) -> bool:
    """At the end: stop its instance (never delete it) and close the reservation. One that
    never launched (the clock was down all along) is refunded in full."""
    with transaction.atomic():
        reservation = _lock(reservation, skip_locked=True)
        if reservation is None or reservation.status not in (R.BOOKED, R.ACTIVE):
            return False
        if now < reservation.end:
            return False
        if reservation.status == R.BOOKED:
            _cancel_in_full(
                reservation, reason="its instance was never launched; refunded in full", now=now
            )
            return True
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
    """Its instance failed or its host was lost: what is left of the period cannot be used.
    An instance that never ran costs nothing (a full refund); one that ran is refunded the
    unused part, from when it went down to the end."""
    with transaction.atomic():
        reservation = _lock(reservation, skip_locked=True)
        if reservation is None or reservation.status != R.ACTIVE:
            return False
        went_down = min(
            max(instance.stopped_at or instance.status_changed_at, reservation.start),
            reservation.end,
        )
        ran = InstanceEvent.objects.filter(
            instance__reservation=reservation, to_status=InstanceStatus.RUNNING
        )
        if not ran.exists():  # (an earlier instance of the reservation may have run)
            _cancel_in_full(
                reservation,
                reason=f"its instance could not start ({instance.status_reason}); refunded in full",
                now=now,
            )
            return True
        whole = (reservation.end - reservation.start) // timedelta(microseconds=1)
        unused = (reservation.end - went_down) // timedelta(microseconds=1)
        refund = min(
            pricing.quantize_money(reservation.price * unused / whole),
            reservation.price - reservation.refunded,
        )
        minutes = round(unused / 60_000_000)
        _close(
            reservation,
            R.COMPLETED,
            refund=refund,
            reason=f"its instance went {instance.status} at {went_down:%Y-%m-%d %H:%M} UTC "
            f"({instance.status_reason}); the unused {minutes} minutes refunded",
            now=now,
            until=went_down,
        )
        return True


def _close(
    reservation: Reservation,
    to: str,
    *,
    refund: Decimal,
    reason: str,
    now: datetime,
    until: datetime | None = None,
    actor: User | None = None,
) -> None:
    """End the reservation (locked by the caller) early: free its GPUs from ``until`` (all
    of them when None), refund, record."""
    held = Allocation.objects.filter(reservation=reservation)
    if until is None or until <= reservation.start:
        held.delete()
    else:
        held.update(period=selectors.between(reservation.start, until))
    _refund(reservation, refund, now=now, why=reason)
    _event(
        reservation,
        to,
        reason=reason,
        now=now,
        actor=actor,
        refunded=reservation.refunded + max(refund, Decimal(0)),
        cancelled_at=now if to == R.CANCELLED else reservation.cancelled_at,
    )


def _cancel_in_full(reservation: Reservation, *, reason: str, now: datetime) -> None:
    """The customer could not have the GPUs (not their doing): all of it back."""
    _close(
        reservation,
        R.CANCELLED,
        refund=reservation.price - reservation.refunded,
        reason=reason,
        now=now,
    )


def _reserved_host(reservation: Reservation) -> Host | None:
    """The host of the GPUs the reservation holds (one host per booking)."""
    held = Allocation.objects.filter(reservation=reservation).values("gpu__host_id")
    return Host.objects.filter(pk__in=held).first()


def _host_usable(host: Host, now: datetime) -> bool:
    return host.heartbeat_fresh(now) and host.status == HostStatus.ACTIVE


def reservations_tick(*, now: datetime | None = None) -> dict[str, int]:
    """One pass of the reservation clock; safe to run from many workers at once. Ends come
    first, so GPUs booked back to back are stopped before the next booking launches; one
    reservation's trouble is logged and the others go on."""
    now = now or timezone.now()
    done = {"completed": 0, "failed": 0, "activated": 0, "warned": 0, "reminded": 0}
    ending = Reservation.objects.filter(status__in=(R.BOOKED, R.ACTIVE), period__endswith__lte=now)
    broken = Instance.objects.filter(
        reservation__status=R.ACTIVE, status__in=(InstanceStatus.FAILED, InstanceStatus.LOST)
    ).select_related("reservation")
    starting = Reservation.objects.filter(
        status=R.BOOKED, period__startswith__lte=now, period__endswith__gt=now
    )
    warn_from = now + timedelta(minutes=settings.RESERVATION_END_WARNING_MINUTES)
    warning = Reservation.objects.filter(
        status=R.ACTIVE, end_warned_at__isnull=True, period__endswith__lte=warn_from
    )
    remind_until = now + timedelta(minutes=settings.NOTIFY_RESERVATION_START_MINUTES)
    soon = Reservation.objects.filter(
        status=R.BOOKED, period__startswith__gt=now, period__startswith__lte=remind_until
    ).select_related("user", "gpu_model")
    steps = [
        ("completed", ending, lambda r: reservation_complete(reservation=r, now=now)),
        (
            "failed",
            broken,
            lambda i: reservation_fail(reservation=i.reservation, instance=i, now=now),
        ),
        ("activated", starting, lambda r: reservation_activate(reservation=r, now=now) is not None),
        ("warned", warning, lambda r: reservation_warn_end(reservation=r, now=now)),
        ("reminded", soon, lambda r: reservation_remind_start(reservation=r, now=now)),
    ]
    for name, queryset, step in steps:
        for item in queryset:
            try:
                done[name] += bool(step(item))
            except Exception:  # noqa: BLE001 - one reservation must not stop the clock
                log.exception("reservation clock: %s of %s failed", name, item.pk)
    return done
