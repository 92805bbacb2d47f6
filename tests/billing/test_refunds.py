"""Refunds return credit to where it came from: what voucher credit paid goes back to that
voucher and expires with it; what paid credit paid stays paid credit."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from gpurental.billing.models import LedgerEntry, Voucher, VoucherRedemption
from gpurental.billing.selectors import balance_of
from gpurental.billing.services import credit_add
from gpurental.billing.services.vouchers import (
    voucher_credit_expire,
    voucher_credit_of,
    voucher_redeem,
)
from gpurental.rentals.services import reservations as rs
from tests.factories import PlanFactory

NOW = datetime(2026, 6, 10, 9, 0, tzinfo=UTC)
START = NOW + timedelta(days=3)


@pytest.fixture
def one_gpu(h100, make_host):
    """1× H100 at 2.00/h with no reserved discount: five hours cost 10.00."""
    make_host("node1", h100, count=1, last_heartbeat_at=NOW)
    return PlanFactory(
        gpu_model=h100,
        gpu_count=1,
        slug="h100-x1",
        hourly_rate=Decimal("2.00"),
        reserved_discount=Decimal("0"),
    )


def redeem(user, amount, days, code="WELCOME"):
    Voucher.objects.create(
        code=code, amount=Decimal(amount), credit_days=days, expires_at=NOW + timedelta(days=30)
    )
    return voucher_redeem(user=user, code=code, now=NOW).redemption


def book(user, plan, image):
    return rs.reservation_book(
        user=user, plan=plan, image=image, start=START, end=START + timedelta(hours=5), now=NOW
    )


def test_a_refunded_voucher_paid_reservation_s_credit_expires_at_the_voucher_s_expiry(
    alice, one_gpu, image
):
    redemption = redeem(alice, "100.00", days=7)
    reservation = book(alice, one_gpu, image)  # 10.00, all of it voucher credit
    rs.reservation_cancel(reservation=reservation, actor=alice, now=NOW + timedelta(hours=1))
    assert balance_of(user=alice) == Decimal("100.00")
    assert voucher_credit_of(user=alice, now=NOW + timedelta(hours=2)) == Decimal("100.00")

    voucher_credit_expire(now=NOW + timedelta(days=7))
    redemption.refresh_from_db()
    assert redemption.expired_amount == Decimal("100.00")  # the refund expired with it
    assert balance_of(user=alice) == 0


def test_a_refund_splits_between_voucher_and_paid_credit_as_they_paid(alice, one_gpu, image):
    credit_add(user=alice, amount=Decimal("5.00"))
    redemption = redeem(alice, "5.00", days=7)
    reservation = book(alice, one_gpu, image)  # 10.00: 5.00 voucher first, 5.00 paid
    late = START - timedelta(hours=2)  # within the window: half back
    rs.reservation_cancel(reservation=reservation, actor=alice, now=late)
    assert balance_of(user=alice) == Decimal("5.00")
    assert voucher_credit_of(user=alice, now=late) == Decimal("2.50")

    voucher_credit_expire(now=NOW + timedelta(days=7))
    redemption.refresh_from_db()
    assert redemption.expired_amount == Decimal("2.50")
    assert balance_of(user=alice) == Decimal("2.50")  # the paid half stays


def test_voucher_credit_refunded_after_its_expiry_is_taken_back_at_once(alice, one_gpu, image):
    redemption = redeem(alice, "100.00", days=1)
    reservation = book(alice, one_gpu, image)
    voucher_credit_expire(now=NOW + timedelta(days=1))  # 90.00 unspent: taken back
    redemption.refresh_from_db()
    assert redemption.expired_amount == Decimal("90.00")

    rs.reservation_cancel(
        reservation=reservation, actor=alice, now=NOW + timedelta(days=1, hours=1)
    )
    assert balance_of(user=alice) == 0
    taken = LedgerEntry.objects.get(user=alice, kind="adjustment", amount=Decimal("-10.00"))
    assert "refunded credit expired" in taken.description
    assert VoucherRedemption.objects.get(pk=redemption.pk).expired_amount == Decimal("90.00")
