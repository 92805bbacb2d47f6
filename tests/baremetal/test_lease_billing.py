"""A lease is billed per second: the on-demand rate with the off-peak discount inside the
window (operator's time zone), or the reserved rate when booked ahead."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from gpurental.baremetal import services
from gpurental.baremetal.models import LeaseCharge, LeaseStatus
from gpurental.billing import pricing
from gpurental.billing.exceptions import InsufficientBalance
from gpurental.billing.models import Charge, LedgerEntry
from gpurental.billing.selectors import balance_of
from gpurental.billing.services import credit_add
from gpurental.billing.services.invoicing import invoice_generate
from gpurental.billing.services.metering import instance_meter, meter_run
from gpurental.fleet.models import Host
from gpurental.rentals.models import Allocation, Instance

# 07:59:30 in Berlin (summer, UTC+2): 30 s before the off-peak window (00:00–08:00) closes.
NOW = datetime(2026, 6, 10, 5, 59, 30, tzinfo=UTC)


@pytest.fixture(autouse=True)
def berlin(settings):
    settings.TIME_ZONE = "Europe/Berlin"


def exact(rate: str, seconds: int) -> Decimal:
    return Decimal(rate) * seconds / 3600


def beat(host, at):
    Host.objects.filter(pk=host.pk).update(last_heartbeat_at=at)


def test_a_lease_started_now_is_billed_per_second_with_the_off_peak_split(
    alice, whole_host_plan, leasable
):
    host = leasable("node1", last_heartbeat_at=NOW)
    lease = services.lease_book(
        user=alice, plan=whole_host_plan, end=NOW + timedelta(hours=2), now=NOW
    )
    beat(host, NOW + timedelta(seconds=75))
    charges = services.lease_meter(lease=lease, now=NOW + timedelta(seconds=75, microseconds=9))
    # 30 s off-peak at 14.00/h (30 % off 20.00), then 45 s at the peak 20.00/h; whole seconds.
    assert [(c.rate_kind, (c.period_end - c.period_start).total_seconds()) for c in charges] == [
        ("off_peak", 30.0),
        ("peak", 45.0),
    ]
    assert [c.hourly_rate for c in charges] == [Decimal("14.0"), Decimal("20.0")]
    assert abs(charges[0].amount - exact("14", 30)) < Decimal("0.000001")
    assert abs(charges[1].amount - exact("20", 45)) < Decimal("0.000001")
    assert balance_of(user=alice) == -(charges[0].amount + charges[1].amount)
    # Running the meter again charges nothing more for the same seconds.
    assert services.lease_meter(lease=lease, now=NOW + timedelta(seconds=75)) == []
    assert LeaseCharge.objects.count() == 2

    # Ending early: billing stops at the end of the second it ends in, and the host is free
    # from then.
    end = NOW + timedelta(seconds=100, microseconds=500_000)
    beat(host, end)
    services.lease_end(lease=lease, actor=alice, now=end)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ENDED
    assert lease.billed_until == lease.end == NOW + timedelta(seconds=101)
    last = LeaseCharge.objects.order_by("period_start").last()
    assert (last.rate_kind, (last.period_end - last.period_start).total_seconds()) == ("peak", 26)
    total = sum(LeaseCharge.objects.values_list("amount", flat=True))
    assert pricing.quantize_money(total) == pricing.quantize_money(
        exact("14", 30) + exact("20", 71)
    )
    assert all(a.period.upper == lease.end for a in Allocation.objects.filter(lease=lease))
    assert LedgerEntry.objects.filter(user=alice, kind="usage").count() == 3


def test_a_lease_booked_ahead_pays_the_reserved_rate_off_peak_or_not(
    alice, whole_host_plan, leasable, image, sent
):
    host = leasable("node1", last_heartbeat_at=NOW)
    start = NOW + timedelta(days=1)  # 07:59:30 local again: half a minute of off-peak
    lease = services.lease_book(
        user=alice, plan=whole_host_plan, start=start, end=start + timedelta(hours=1), now=NOW
    )
    beat(host, start)
    services.leases_tick(now=start)
    beat(host, start + timedelta(seconds=90))
    charges = services.lease_meter(lease=lease, now=start + timedelta(seconds=90))
    assert [c.rate_kind for c in charges] == ["reserved"]  # replaces off-peak, as for reservations
    assert charges[0].hourly_rate == Decimal("16.0")  # 20 % off 20.00
    assert abs(charges[0].amount - exact("16", 90)) < Decimal("0.000001")
    # The tenant's instance on the leased host is not metered as well.
    host.last_heartbeat_at = start
    host.save()
    instance = services.lease_launch(lease=lease, image=image, actor=alice, now=start)
    Instance.objects.filter(pk=instance.pk).update(running_since=start, status="running")
    assert meter_run(now=start + timedelta(minutes=5)) == 0
    instance.refresh_from_db()
    assert instance_meter(instance=instance, now=start + timedelta(minutes=5)) == []
    assert not Charge.objects.exists()


def test_a_lease_needs_credit_for_its_whole_period_when_balance_is_enforced(
    alice, whole_host_plan, leasable, settings
):
    settings.BILLING_ENFORCE_BALANCE = True
    leasable("node1", last_heartbeat_at=NOW)
    with pytest.raises(InsufficientBalance, match="this lease costs") as refused:
        services.lease_book(user=alice, plan=whole_host_plan, end=NOW + timedelta(hours=2), now=NOW)
    assert refused.value.field == "plan"
    credit_add(user=alice, amount=Decimal("40.00"), description="top-up")
    lease = services.lease_book(
        user=alice, plan=whole_host_plan, end=NOW + timedelta(hours=2), now=NOW
    )
    assert lease.status == LeaseStatus.ACTIVE


def test_the_month_s_invoice_has_a_line_per_lease_and_rate_kind(alice, whole_host_plan, leasable):
    host = leasable("node1", last_heartbeat_at=NOW)
    lease = services.lease_book(
        user=alice, plan=whole_host_plan, end=NOW + timedelta(hours=2), now=NOW
    )
    beat(host, NOW + timedelta(minutes=30, seconds=30))
    services.lease_meter(lease=lease, now=NOW + timedelta(minutes=30, seconds=30))
    invoice = invoice_generate(user=alice, year=2026, month=6, now=NOW + timedelta(hours=1))
    lines = {line.rate_kind: line for line in invoice.lines.all()}
    assert set(lines) == {"off_peak", "peak"}
    assert (
        lines["off_peak"].description == "Dedicated host node1 (Dedicated 4× H100 host), off-peak"
    )
    assert lines["off_peak"].amount == pricing.quantize_money(exact("14", 30))
    assert lines["peak"].amount == pricing.quantize_money(exact("20", 30 * 60))
    assert lines["peak"].gpu_hours == Decimal("2.0000")  # 30 min × 4 GPUs
    assert invoice.total == lines["off_peak"].amount + lines["peak"].amount


def test_a_silent_host_s_time_is_not_billed_and_billing_resumes_when_it_answers(
    alice, whole_host_plan, leasable, settings
):
    host = leasable("node1", last_heartbeat_at=NOW)
    lease = services.lease_book(
        user=alice, plan=whole_host_plan, end=NOW + timedelta(hours=2), now=NOW
    )
    beat(host, NOW + timedelta(seconds=60))
    # Silent from +60 s: at +200 s it is past HOST_OFFLINE_AFTER, billed only to its last beat.
    assert settings.HOST_OFFLINE_AFTER < 140
    services.lease_meter(lease=lease, now=NOW + timedelta(seconds=200))
    lease.refresh_from_db()
    assert lease.billed_until == NOW + timedelta(seconds=60)
    assert lease.unbilled_since == NOW + timedelta(seconds=60)
    # Back at +500 s; the meter notices at +510 s and bills from then on.
    beat(host, NOW + timedelta(seconds=500))
    assert services.lease_meter(lease=lease, now=NOW + timedelta(seconds=510)) == []
    beat(host, NOW + timedelta(seconds=600))
    services.lease_meter(lease=lease, now=NOW + timedelta(seconds=600))
    lease.refresh_from_db()
    assert lease.unbilled_since is None and lease.billed_until == NOW + timedelta(seconds=600)
    billed = sum((c.period_end - c.period_start).total_seconds() for c in LeaseCharge.objects.all())
    assert billed == 60 + 90  # [0, 60) and [510, 600): the silence in between is free
    note = lease.events.get(reason__contains="silent")
    assert "not billed" in note.reason


def test_a_credit_note_on_a_voucher_paid_lease_gives_the_voucher_credit_back_with_its_expiry(
    alice, whole_host_plan, leasable, carol
):
    """Refunds go back where the money came from: voucher credit that paid a lease returns
    to its voucher (and expires with it), not as paid credit that never expires."""
    from gpurental.billing.models import Voucher
    from gpurental.billing.services.invoicing import invoice_credit_note, invoice_issue
    from gpurental.billing.services.vouchers import (
        voucher_credit_expire,
        voucher_credit_of,
        voucher_redeem,
    )

    Voucher.objects.create(
        code="LEASE", amount=Decimal("50.00"), credit_days=60, expires_at=NOW + timedelta(days=1)
    )
    redemption = voucher_redeem(user=alice, code="LEASE", now=NOW).redemption
    host = leasable("node1", last_heartbeat_at=NOW)
    lease = services.lease_book(
        user=alice, plan=whole_host_plan, end=NOW + timedelta(hours=2), now=NOW
    )
    later = NOW + timedelta(minutes=30, seconds=30)
    beat(host, later)
    services.lease_meter(lease=lease, now=later)
    issued = invoice_issue(
        invoice=invoice_generate(user=alice, year=2026, month=6, now=later), now=later
    )
    peak = issued.lines.get(rate_kind="peak")  # 10.00 of the voucher's credit paid for it
    assert peak.lease == lease
    spent_left = voucher_credit_of(user=alice, now=later)
    note = invoice_credit_note(
        invoice=issued,
        credits=[(peak, Decimal("4.00"))],
        reason="slow disks",
        actor=carol,
        now=later,
    )
    assert note.lines.get().lease == lease
    assert voucher_credit_of(user=alice, now=later) == spent_left + Decimal("4.00")
    voucher_credit_expire(now=redemption.credit_expires_at)
    redemption.refresh_from_db()
    assert redemption.expired_amount == spent_left + Decimal("4.00")  # the refund expired too
    with pytest.raises(Exception, match="more than the 6.00 left"):
        invoice_credit_note(invoice=issued, credits=[(peak, Decimal("6.01"))], reason="again")
