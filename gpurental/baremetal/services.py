"""Dedicated hosts: book, start, launch into, end and cancel a whole-host lease; meter it;
the BMC's power actions. Every state change writes an event row.

    booked → active (at its start, by the clock) → ended (at its end, or early)
    booked → cancelled (before the start)

Booking inserts the lease row and an allocation on every GPU of the host in one
transaction. Two constraints referee, so a race can never give one host to two
tenants: ``lease_no_host_double_booking`` between leases, and the allocations'
``allocation_no_gpu_double_booking`` between a lease and any on-demand launch or
reservation (an on-demand instance holds its GPUs open-ended, so a host with a
running instance cannot be leased, and a leased host takes no instance but the
tenant's).

Billing is per second, by ``lease_meter``: the closed seconds of the lease, priced by
``billing.pricing`` with the plan's tariff. A lease that starts when it is booked pays
the on-demand rate with the off-peak discount inside the window; one booked ahead pays
the reserved rate for its whole period (the reserved discount replaces the off-peak
one, as for reservations). The host is billed while leased, whether an instance runs
on it or not: it is the host that is rented.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.accounts.models import User
from gpurental.baremetal import secrets, selectors
from gpurental.baremetal.models import (
    BareMetalHost,
    DedicatedPlan,
    Lease,
    LeaseCharge,
    LeaseEvent,
    LeaseStatus,
    PowerAction,
    PowerEvent,
)
from gpurental.baremetal.redfish import BMC, BMCError
from gpurental.billing import pricing
from gpurental.billing.models import LedgerEntry
from gpurental.billing.selectors import operator_zone
from gpurental.billing.services import prepaid
from gpurental.catalog.models import ImageTemplate
from gpurental.fleet.models import GPU, Host
from gpurental.rentals import holdings
from gpurental.rentals import selectors as rental_selectors
from gpurental.rentals.exceptions import (
    InvalidTransition,
    NoCapacity,
    RentalError,
)
from gpurental.rentals.models import Allocation, Instance
from gpurental.rentals.services import lifecycle
from gpurental.rentals.services.transitions import status_move

log = logging.getLogger(__name__)
L = LeaseStatus
SECOND = timedelta(seconds=1)


# --- building blocks ----------------------------------------------------------


def _event(lease: Lease, to: str, **kwargs) -> None:
    """Move the lease (locked by the caller) to ``to`` and record it."""
    status_move(lease, to, event_model=LeaseEvent, **kwargs)


def _lock(lease: Lease | str, *, skip_locked: bool = False) -> Lease | None:
    pk = lease.pk if isinstance(lease, Lease) else lease
    return (
        Lease.objects.select_for_update(of=("self",), skip_locked=skip_locked)
        .select_related("plan", "plan__instance_plan", "host", "user")
        .filter(pk=pk)
        .first()
    )


def _second_floor(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


def _second_ceil(moment: datetime) -> datetime:
    floor = _second_floor(moment)
    return floor if floor == moment else floor + SECOND


def _check_period(start: datetime, end: datetime, now: datetime) -> None:
    """The booking rules (the RESERVATION_* settings), start and end in UTC."""
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
            _("a lease lasts at least %(minutes)s minutes")
            % {"minutes": settings.RESERVATION_MIN_MINUTES},
            field="end",
        )
    if minutes > settings.RESERVATION_MAX_HOURS * 60:
        raise RentalError(
            _("a lease lasts at most %(hours)s hours") % {"hours": settings.RESERVATION_MAX_HOURS},
            field="end",
        )


def lease_quote(
    *,
    plan: DedicatedPlan,
    end: datetime,
    start: datetime | None = None,
    now: datetime | None = None,
) -> tuple[datetime, datetime, bool, Decimal]:
    """(start, end, reserved, price) of a lease; books nothing. No start (or one in the
    past minute) starts now, at the on-demand rate; a later start is booked ahead, at the
    reserved rate. Raises RentalError naming the field."""
    now = _second_floor((now or timezone.now()).astimezone(UTC))
    if not plan.is_active:
        raise RentalError(
            _("plan %(plan)s is no longer offered") % {"plan": plan.slug}, field="plan"
        )
    for name, value in (("start", start), ("end", end)):
        if value is not None and value.tzinfo is None:
            raise RentalError(
                _("%(field)s needs a time zone (e.g. 2026-12-03T10:00Z)") % {"field": name},
                field=name,
            )
    start = now if start is None else _second_floor(start.astimezone(UTC))
    end = _second_floor(end.astimezone(UTC))
    _check_period(start, end, now)
    reserved = start > now
    start = max(start, now)
    price = selectors.lease_price(plan=plan, start=start, end=end, reserved=reserved)
    return start, end, reserved, price


def _hold_host(lease: Lease, host: Host) -> bool:
    """Insert the lease on ``host`` with an allocation on every GPU, in a savepoint;
    False (nothing left behind) when the host is taken over the period."""
    gpu_ids = list(
        GPU.objects.filter(host=host, is_enabled=True).order_by("pk").values_list("pk", flat=True)
    )
    try:
        with transaction.atomic():
            # The GPU rows first, in one order for everyone (as placement locks them): a
            # concurrent placement's try-lock passes this host over instead of waiting.
            list(
                GPU.objects.select_for_update(no_key=True)
                .filter(pk__in=gpu_ids)
                .order_by("pk")
                .values_list("pk", flat=True)
            )
            lease.host = host
            lease.save(force_insert=True)
            Allocation.objects.bulk_create(
                Allocation(gpu_id=gpu_id, lease=lease, period=lease.period) for gpu_id in gpu_ids
            )
        return True
    except IntegrityError:
        lease._state.adding = True  # the insert was rolled back with the savepoint
        return False


# --- customer actions ---------------------------------------------------------


def lease_book(
    *,
    user: User,
    plan: DedicatedPlan,
    end: datetime,
    start: datetime | None = None,
    host_network: bool = False,
    now: datetime | None = None,
) -> Lease:
    """Lease a whole host of ``plan`` over [start, end) (start: now when omitted).
    Raises RentalError (NoCapacity, InsufficientBalance, …); then nothing is held."""
    now = now or timezone.now()
    start, end, reserved, price = lease_quote(plan=plan, start=start, end=end, now=now)
    starts_now = not reserved
    with transaction.atomic():
        # One booking at a time per account: the quota and the balance are checked once.
        locked_user = holdings.account_lock(user.pk)
        holdings.quota_check(
            account=locked_user, count=plan.gpu_count, start=start, end=end, field="plan"
        )
        # The whole period's price is held against the balance from now on (billed as it runs).
        prepaid.booking_allowed(account=locked_user, price=price, kind="lease", now=now)
        candidates = selectors.matching_hosts(plan=plan, start=start, end=end, now=now)
        if host_network:
            candidates = [h for h in candidates if selectors.allows_host_network(h)]
        period = rental_selectors.between(start, end)
        for host in candidates:
            lease = Lease(
                user=locked_user,
                plan=plan,
                period=period,
                status=L.ACTIVE if starts_now else L.BOOKED,
                reserved=reserved,
                host_network=host_network,
                created_at=now,
            )
            if _hold_host(lease, host):
                break
        else:
            raise NoCapacity(_no_host_message(plan, start, end, host_network), field="plan")
        rate = "reserved rate" if reserved else "on-demand rate, off-peak discount in the window"
        LeaseEvent.objects.create(
            lease=lease,
            to_status=L.BOOKED,
            reason=f"booked {host.name} for {start:%Y-%m-%d %H:%M:%S}–{end:%Y-%m-%d %H:%M:%S} "
            f"UTC at the {rate}: {price} {settings.BILLING_CURRENCY} over the whole period",
            actor=user,
            created_at=now,
        )
        if starts_now:
            LeaseEvent.objects.create(
                lease=lease,
                from_status=L.BOOKED,
                to_status=L.ACTIVE,
                reason="started at booking",
                actor=user,
                created_at=now,
            )
    return lease


def _no_host_message(plan: DedicatedPlan, start: datetime, end: datetime, network: bool) -> str:
    values = {
        "count": plan.gpu_count,
        "model": plan.gpu_model.short_name,
        "start": f"{start:%Y-%m-%d %H:%M}",
        "end": f"{end:%Y-%m-%d %H:%M}",
    }
    if network:
        return (
            _(
                "no whole %(count)s× %(model)s host that allows host networking is free from "
                "%(start)s to %(end)s UTC (a host with any instance, reservation or lease over "
                "that period cannot be leased); try a later start"
            )
            % values
        )
    return (
        _(
            "no whole %(count)s× %(model)s host is free from %(start)s to %(end)s UTC (a host "
            "with any instance, reservation or lease over that period cannot be leased); try a "
            "later start"
        )
        % values
    )


def lease_cancel(*, lease: Lease, actor: User | None = None, now: datetime | None = None) -> Lease:
    """Cancel a booked lease before its start: nothing has been billed, nothing is.
    Within RESERVATION_FULL_REFUND_HOURS of the start the host is committed: refused."""
    now = now or timezone.now()
    with transaction.atomic():
        lease = _lock(lease)
        if lease.status == L.CANCELLED:
            return lease
        window = timedelta(hours=settings.RESERVATION_FULL_REFUND_HOURS)
        if lease.status != L.BOOKED or lease.start - now < window:
            raise InvalidTransition(
                _(
                    "lease %(id)s is %(status)s, starting %(start)s UTC: a lease can be "
                    "cancelled only up to %(hours)s hours before its start"
                )
                % {
                    "id": lease.pk,
                    "status": lease.status,
                    "start": f"{lease.start:%Y-%m-%d %H:%M}",
                    "hours": settings.RESERVATION_FULL_REFUND_HOURS,
                },
                field="status",
            )
        Allocation.objects.filter(lease=lease).delete()
        _event(
            lease,
            L.CANCELLED,
            reason=f"cancelled by {actor or 'the operator'} before its start; nothing billed",
            now=now,
            actor=actor,
            ended_at=now,
        )
    return lease


def lease_start(*, lease: Lease, now: datetime | None = None) -> bool:
    """At its start (the clock): booked → active. The tenant then launches into it."""
    now = now or timezone.now()
    with transaction.atomic():
        lease = _lock(lease, skip_locked=True)
        if lease is None or lease.status != L.BOOKED or not lease.start <= now < lease.end:
            return False
        _event(lease, L.ACTIVE, reason="its period started", now=now)
        return True


def lease_launch(
    *, lease: Lease, image: ImageTemplate, actor: User | None = None, now: datetime | None = None
) -> Instance:
    """An instance on every GPU of the leased host, with the whole host's CPUs and memory
    and the dedicated container options (hostcalls.container_spec)."""
    now = now or timezone.now()
    if not image.is_active:
        raise RentalError(
            _("image %(image)s is no longer offered") % {"image": image.slug}, field="image"
        )
    with transaction.atomic():
        lease = _lock(lease)
        if lease.status != L.ACTIVE or not lease.start <= now < lease.end:
            raise InvalidTransition(
                _(
                    "lease %(id)s is %(status)s (%(start)s–%(end)s UTC): launch into it while it is active"
                )
                % {
                    "id": lease.pk,
                    "status": lease.status,
                    "start": f"{lease.start:%Y-%m-%d %H:%M}",
                    "end": f"{lease.end:%Y-%m-%d %H:%M}",
                },
                field="status",
            )
        holding = lease.instances.filter(status__in=rental_selectors.HOLDING).first()
        if holding is not None:
            raise InvalidTransition(
                _("instance %(id)s already runs on this host (%(status)s): terminate it first")
                % {"id": holding.pk, "status": holding.status},
                field="status",
            )
        if not lease.host.heartbeat_fresh(now):
            raise RentalError(
                _("host %(host)s is not answering now; try again in a few minutes")
                % {"host": lease.host.name},
                field="host",
            )
        return lifecycle.instance_launch_leased(lease=lease, image=image, actor=actor, now=now)


def lease_end(
    *, lease: Lease, actor: User | None = None, reason: str = "", now: datetime | None = None
) -> bool:
    """End an active lease: at its end (the clock), or early at the tenant's request (a
    lease that started at booking only: one booked ahead is committed to its period) or
    by staff (any lease).
    Its instances stop (/workspace kept), the host is free from ``now``, billing ends."""
    return _lease_end(lease=lease, actor=actor, reason=reason, now=now or timezone.now())


def lease_end_over_limit(*, lease: Lease, reason: str, now: datetime | None = None) -> bool:
    """End an active lease early because its tenant's balance is past their credit limit
    (``billing.services.limits``, after the low-balance warning, as for instances): any
    lease, booked ahead or not. Its instances stop with /workspace kept, billing ends."""
    now = now or timezone.now()
    return _lease_end(lease=lease, actor=None, reason=reason, now=now, over_limit=True)


def _lease_end(
    *, lease: Lease, actor: User | None, reason: str, now: datetime, over_limit: bool = False
) -> bool:
    with transaction.atomic():
        lease = _lock(lease)
        if lease.status != L.ACTIVE:
            if lease.status == L.ENDED:
                return False
            raise InvalidTransition(
                _("lease %(id)s is %(status)s: only an active lease ends")
                % {"id": lease.pk, "status": lease.status},
                field="status",
            )
        early = now < lease.end
        # Staff may end any lease early (a failing host, an abuse case); billing stops then.
        if (
            early
            and lease.reserved
            and not over_limit
            and not (actor is not None and actor.is_staff)
        ):
            raise InvalidTransition(
                _(
                    "lease %(id)s was booked ahead at the reserved rate and runs until %(end)s "
                    "UTC: it cannot end early"
                )
                % {"id": lease.pk, "end": f"{lease.end:%Y-%m-%d %H:%M}"},
                field="status",
            )
        # Billed per second: the second it ends in counts, so the period is never empty.
        end = max(_second_ceil(now), lease.start + SECOND) if early else lease.end
        for instance in lease.instances.filter(status__in=lifecycle.STOPPABLE):
            why = f"{reason}: " if over_limit else ""
            lifecycle.instance_stop(
                instance=instance,
                actor=actor,
                reason=f"{why}the dedicated-host lease ended at {end:%Y-%m-%d %H:%M:%S} UTC; "
                "/workspace is kept",
                now=now,
            )
        if early:
            Allocation.objects.filter(lease=lease).update(
                period=rental_selectors.between(lease.start, end)
            )
        _lease_meter(lease, now=max(now, end), until=end)
        who = f"ended early by {actor}" if early and actor else "its period ended"
        _event(
            lease,
            L.ENDED,
            reason=reason or who,
            now=now,
            actor=actor,
            ended_at=end,
            period=rental_selectors.between(lease.start, end),
        )
        return True


# --- billing ------------------------------------------------------------------


def _lease_meter(
    lease: Lease, *, now: datetime, until: datetime | None = None
) -> list[LeaseCharge]:
    """Charge the lease (locked by the caller) for its closed seconds up to ``until``
    (default: now, never past its end); one charge per pricing segment.

    A silent host cannot be used, so its silence is not billed, as for instances: while
    the host is not heart-beating, billing stops at its last heartbeat; once it answers
    again, billing resumes from then, and the stretch in between is recorded as unbilled.
    """
    end = min(_second_floor(until or now), lease.end)
    start = max(lease.start, lease.billed_until or lease.start)
    host = lease.host
    if not host.heartbeat_fresh(now):
        beat = host.last_heartbeat_at
        end = min(end, max(_second_floor(beat) if beat else lease.start, start))
        if lease.unbilled_since is None:
            lease.unbilled_since = end
            Lease.objects.filter(pk=lease.pk).update(unbilled_since=end)
    elif lease.unbilled_since is not None:
        back = max(min(_second_floor(now), lease.end), start)
        LeaseEvent.objects.create(
            lease=lease,
            to_status=lease.status,
            reason=f"host {host.name} was silent from {lease.unbilled_since:%Y-%m-%d %H:%M:%S} "
            f"to about {back:%H:%M:%S} UTC: that time is not billed",
            created_at=now,
        )
        Lease.objects.filter(pk=lease.pk).update(unbilled_since=None, billed_until=back)
        lease.unbilled_since, lease.billed_until, start = None, back, back
    if end <= start:
        return []
    tariff = pricing.Tariff.of(lease.plan, operator_zone())
    charges = []
    for segment in pricing.price_interval(start, end, tariff, reserved=lease.reserved):
        amount = pricing.charge_amount(segment)
        entry = LedgerEntry.objects.create(
            user_id=lease.user_id,
            created_at=now,
            kind=LedgerEntry.Kind.USAGE,
            amount=-amount,
            description=f"Dedicated host {lease.host.name} ({lease.plan.name}), "
            f"{segment.start:%Y-%m-%d %H:%M:%S}–{segment.end:%H:%M:%S} UTC, "
            f"{segment.rate_kind.replace('_', '-')}"[:255],
        )
        charges.append(
            LeaseCharge.objects.create(
                lease=lease,
                period_start=segment.start,
                period_end=segment.end,
                rate_kind=segment.rate_kind,
                hourly_rate=segment.hourly_rate,
                amount=amount,
                ledger_entry=entry,
                created_at=now,
            )
        )
    Lease.objects.filter(pk=lease.pk).update(billed_until=end)
    lease.billed_until = end
    return charges


def lease_meter(
    *, lease: Lease, now: datetime | None = None, until: datetime | None = None
) -> list[LeaseCharge]:
    """Charge one lease up to ``until`` (default now, to the second); running it twice
    charges once (the watermark, and the unique (lease, period_start) constraint)."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = _lock(lease, skip_locked=True)
        if locked is None or locked.status not in (L.ACTIVE, L.ENDED):
            return []
        return _lease_meter(locked, now=now, until=until)


# --- the clock ------------------------------------------------------------------


def leases_tick(*, now: datetime | None = None) -> dict[str, int]:
    """One pass: end leases past their end, start those due, meter the active ones. Safe
    from many workers at once (rows are taken with SKIP LOCKED); one lease's trouble is
    logged and the others go on."""
    now = now or timezone.now()
    done = {"ended": 0, "started": 0, "charges": 0}
    steps = [
        (
            "ended",
            Lease.objects.filter(status=L.ACTIVE, period__endswith__lte=now),
            lambda lease: lease_end(lease=lease, now=now),
        ),
        (
            "started",
            Lease.objects.filter(
                status=L.BOOKED, period__startswith__lte=now, period__endswith__gt=now
            ),
            lambda lease: lease_start(lease=lease, now=now),
        ),
        (
            "charges",
            Lease.objects.filter(status=L.ACTIVE),
            # Closed minutes, as the instance meter: one ledger debit per minute at most.
            lambda lease: len(
                lease_meter(lease=lease, now=now, until=now.replace(second=0, microsecond=0))
            ),
        ),
    ]
    for name, queryset, step in steps:
        for lease in queryset:
            try:
                done[name] += int(step(lease))
            except Exception:  # noqa: BLE001 - one lease must not stop the clock
                log.exception("lease clock: %s of %s failed", name, lease.pk)
    return done


# --- staff: the host's bare-metal settings and its BMC ------------------------------


def baremetal_host_set(
    *,
    host: Host,
    leasable: bool = True,
    allow_host_network: bool = False,
    bmc_url: str = "",
    bmc_username: str = "",
    bmc_password: str | None = None,
    bmc_system_id: str = "",
    bmc_verify_tls: bool = True,
) -> BareMetalHost:
    """Create or change a host's bare-metal settings. ``bmc_password`` None keeps the
    stored one; "" clears it."""
    if bmc_url and not bmc_url.startswith(("https://", "http://")):
        raise RentalError("bmc_url must start with https:// (or http://)", field="bmc_url")
    settings_row, _ = BareMetalHost.objects.get_or_create(host=host)
    settings_row.leasable = leasable
    settings_row.allow_host_network = allow_host_network
    settings_row.bmc_url = bmc_url
    settings_row.bmc_username = bmc_username
    settings_row.bmc_system_id = bmc_system_id
    settings_row.bmc_verify_tls = bmc_verify_tls
    if bmc_password is not None:
        settings_row.bmc_password_encrypted = secrets.encrypt(bmc_password)
    settings_row.save()
    return settings_row


def bmc_for(row: BareMetalHost) -> BMC:
    if not row.has_bmc:
        raise BMCError(f"host {row.host.name} has no BMC configured")
    return BMC(
        url=row.bmc_url,
        username=row.bmc_username,
        password=secrets.decrypt(row.bmc_password_encrypted),
        system_id=row.bmc_system_id,
        verify_tls=row.bmc_verify_tls,
    )


_POWER_CALLS = {
    PowerAction.READ: lambda bmc: None,
    PowerAction.ON: BMC.power_on,
    PowerAction.OFF: BMC.power_off,
    PowerAction.CYCLE: BMC.power_cycle,
}


def host_power(
    *, host: Host, action: str, actor: User | None = None, now: datetime | None = None
) -> PowerEvent:
    """Read the power state, or power on / off / cycle, through the host's BMC. The BMC
    call happens outside any transaction; its outcome (ok or the BMC's error) is recorded
    as a PowerEvent either way. A host leased to a tenant is not powered off or cycled."""
    now = now or timezone.now()
    action = PowerAction(action)
    row = BareMetalHost.objects.select_related("host").filter(host=host).first()
    if row is None or not row.has_bmc:
        raise RentalError(f"host {host.name} has no BMC configured", field="host")
    if action in (PowerAction.OFF, PowerAction.CYCLE):
        leased = Lease.objects.filter(host=host, status=L.ACTIVE, period__contains=now).exists()
        if leased:
            raise InvalidTransition(
                f"host {host.name} is leased to a tenant now: end the lease first",
                field="host",
            )
    ok, state, detail = True, "", ""
    try:
        bmc = bmc_for(row)
        _POWER_CALLS[action](bmc)
        state = bmc.power_state()
    except (BMCError, secrets.SecretUnreadable) as exc:
        ok, detail = False, str(exc)
    with transaction.atomic():
        if ok:
            BareMetalHost.objects.filter(pk=row.pk).update(power_state=state, power_checked_at=now)
        return PowerEvent.objects.create(
            host=host,
            action=action,
            ok=ok,
            power_state=state,
            detail=detail,
            actor=actor if actor is not None and actor.pk else None,
            created_at=now,
        )


def host_power_read(*, host: Host, actor: User | None = None) -> PowerEvent:
    return host_power(host=host, action=PowerAction.READ, actor=actor)


def host_power_on(*, host: Host, actor: User | None = None) -> PowerEvent:
    return host_power(host=host, action=PowerAction.ON, actor=actor)


def host_power_off(*, host: Host, actor: User | None = None) -> PowerEvent:
    return host_power(host=host, action=PowerAction.OFF, actor=actor)


def host_power_cycle(*, host: Host, actor: User | None = None) -> PowerEvent:
    return host_power(host=host, action=PowerAction.CYCLE, actor=actor)


__all__ = [
    "baremetal_host_set",
    "host_power",
    "host_power_cycle",
    "host_power_off",
    "host_power_on",
    "host_power_read",
    "lease_book",
    "lease_cancel",
    "lease_end",
    "lease_end_over_limit",
    "lease_launch",
    "lease_meter",
    "lease_quote",
    "lease_start",
    "leases_tick",
]
