"""The storage meter (gpurental/storage/): volumes, saved images and the workspaces of
stopped instances are charged per GB-hour at their kind's GB-month price, on the ledger
and the month's invoice; running the meter twice charges once."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.db.models import Sum
from django.urls import reverse

from gpurental.billing.models import LedgerEntry, RateKind
from gpurental.billing.pricing import local_month
from gpurental.billing.selectors import balance_of, month_spend, usage_by_day
from gpurental.billing.services.invoicing import (
    invoice_credit_note,
    invoice_generate,
    invoice_issue,
)
from gpurental.images.models import SavedImage, SavedImageStatus
from gpurental.storage.models import StorageCharge, StoragePrice, StoredKind
from gpurental.storage.selectors import monthly_cost
from gpurental.storage.services import GB, storage_meter_run
from gpurental.volumes.models import VolumeStatus
from gpurental.volumes.services import volume_create, volume_delete
from tests.factories import ImageTemplateFactory

T0 = datetime(2026, 6, 10, 10, 20, tzinfo=UTC)  # Berlin 12:20
MONTH = local_month(2026, 6, ZoneInfo("Europe/Berlin"))


@pytest.fixture
def prices(db):
    """Round prices: 0.73 per GB-month is 0.001 per GB-hour."""
    for kind, price in {"volume": "0.73", "saved_image": "0.365", "workspace": "1.46"}.items():
        StoragePrice.objects.update_or_create(kind=kind, defaults={"gb_month": Decimal(price)})


def charges(object_id):
    return list(StorageCharge.objects.filter(object_id=object_id).order_by("period_start"))


def total(object_id) -> Decimal:
    found = StorageCharge.objects.filter(object_id=object_id).aggregate(s=Sum("amount"))["s"]
    return found or Decimal(0)


@pytest.fixture
def volume(funded, plan, make_host):
    host = make_host("node1", plan.gpu_model)
    return volume_create(account=funded, name="data", size_gb=100, host=host, actor=funded, now=T0)


def test_a_volume_is_charged_its_size_per_closed_hour(berlin, prices, volume, funded):
    before = balance_of(user=funded)
    now = T0 + timedelta(hours=2, minutes=30)  # 12:50 UTC
    assert storage_meter_run(now=now) == 1
    [charge] = charges(volume.pk)
    # 10:20 → 12:00: 100 GB at 0.001/GB-hour for 1 h 40 min.
    assert (charge.period_start, charge.period_end) == (T0, datetime(2026, 6, 10, 12, tzinfo=UTC))
    assert charge.kind == StoredKind.VOLUME and charge.gb == 100
    assert charge.hourly_rate == Decimal("0.1")
    assert charge.amount == Decimal("0.166667")
    assert balance_of(user=funded) == before - charge.amount
    entry = LedgerEntry.objects.get(pk=charge.ledger_entry_id)
    assert entry.kind == LedgerEntry.Kind.USAGE and "volume data" in entry.description
    # Twice in the same hour: nothing more.
    assert storage_meter_run(now=now + timedelta(minutes=5)) == 0


def test_a_deleted_volume_is_charged_to_the_second_and_then_never(berlin, prices, volume, funded):
    storage_meter_run(now=T0 + timedelta(hours=1))  # to 11:00
    gone = T0 + timedelta(hours=1, minutes=15, seconds=36)  # 11:35:36
    volume_delete(volume=volume, actor=funded, now=gone)
    volume.refresh_from_db()
    assert volume.status == VolumeStatus.DELETED
    storage_meter_run(now=T0 + timedelta(hours=5))
    assert charges(volume.pk)[-1].period_end == gone
    # 10:20 → 11:35:36 is 4536 s: 100 GB × 0.001 × 4536 / 3600.
    assert total(volume.pk) == Decimal("0.126000")
    assert storage_meter_run(now=T0 + timedelta(days=2)) == 0


def test_charges_are_cut_at_the_operators_midnight(berlin, prices, volume):
    # Berlin's midnight is 22:00 UTC in June.
    storage_meter_run(now=datetime(2026, 6, 11, 1, 0, tzinfo=UTC))
    ends = [c.period_end for c in charges(volume.pk)]
    assert ends == [datetime(2026, 6, 10, 22, tzinfo=UTC), datetime(2026, 6, 11, 1, tzinfo=UTC)]


def test_a_stopped_instance_s_workspace_is_charged_until_it_starts_again(
    berlin, prices, funded, plan, make_host, run_instance, stop_instance, start_instance
):
    host = make_host("node1", plan.gpu_model)
    instance = run_instance(funded, plan, host, T0)
    stopped = T0 + timedelta(minutes=40)  # 11:00
    stop_instance(instance, stopped)
    storage_meter_run(now=stopped + timedelta(hours=3, minutes=10))  # to 14:00
    # No meter run after that: the start charges the workspace up to itself.
    started = stopped + timedelta(hours=4, minutes=30)  # 15:30
    start_instance(instance, started)
    spans = [(c.period_start, c.period_end) for c in charges(instance.pk)]
    assert spans == [
        (stopped, stopped + timedelta(hours=3)),
        (stopped + timedelta(hours=3), started),
    ]
    disk = Decimal(plan.disk_gb)
    assert charges(instance.pk)[0].gb == disk
    # 4.5 h of the plan's disk at 1.46 per GB-month (0.002 per GB-hour).
    assert total(instance.pk) == (disk * Decimal("0.002") * Decimal("4.5")).quantize(
        Decimal("0.000001")
    )
    # Running again: its disk is in the plan's hourly price, not charged as storage.
    assert storage_meter_run(now=started + timedelta(hours=5)) == 0


def test_a_saved_image_is_charged_at_its_size(berlin, prices, funded, plan):
    image = SavedImage.objects.create(
        account=funded,
        name="my-env",
        reference="127.0.0.1:5000/a1/my-env:1",
        template=ImageTemplateFactory(),
        status=SavedImageStatus.READY,
        size_bytes=2 * GB,
        ready_at=T0,
    )
    storage_meter_run(now=T0 + timedelta(hours=10))
    # 2 GB at 0.0005 per GB-hour, 10:20 → 20:00.
    assert total(image.pk) == Decimal("0.009667")
    assert charges(image.pk)[0].kind == StoredKind.SAVED_IMAGE


def test_a_free_kind_charges_nothing_and_a_later_price_does_not_reach_back(berlin, prices, volume):
    StoragePrice.objects.filter(kind="volume").update(gb_month=0)
    assert storage_meter_run(now=T0 + timedelta(hours=5)) == 0
    StoragePrice.objects.filter(kind="volume").update(gb_month=Decimal("0.73"))
    storage_meter_run(now=T0 + timedelta(hours=6))
    [charge] = charges(volume.pk)
    assert charge.period_start == datetime(2026, 6, 10, 15, tzinfo=UTC)


def test_the_month_s_invoice_has_a_storage_line_that_a_credit_note_can_pay_back(
    berlin, prices, volume, funded
):
    storage_meter_run(now=datetime(2026, 6, 30, 21, 0, tzinfo=UTC))  # Berlin 23:00
    invoice = invoice_generate(user=funded, year=2026, month=6)
    [line] = [line for line in invoice.lines.all() if line.rate_kind == RateKind.STORAGE]
    assert line.stored_object_id == volume.pk
    assert line.amount == total(volume.pk).quantize(Decimal("0.01"))
    assert "Volume data" in line.description and "GB-hours" in line.description
    assert invoice.total == line.amount
    invoice = invoice_issue(invoice=invoice)
    before = balance_of(user=funded)
    invoice_credit_note(invoice=invoice, credits=[(line, line.amount)], reason="test")
    assert balance_of(user=funded) == before + line.amount


def test_the_usage_report_and_the_month_s_spend_count_storage(
    berlin, prices, volume, funded, client
):
    storage_meter_run(now=datetime(2026, 6, 11, 10, 0, tzinfo=UTC))  # Berlin 12:00 next day
    day1, day2 = usage_by_day(user=funded, start=MONTH[0], end=MONTH[1])
    # 10:20 → 22:00 UTC is Berlin's 10 June; then to 10:00 UTC the 11th.
    assert (day1.day.isoformat(), day1.cost) == ("2026-06-10", Decimal("1.166667"))
    assert (day2.day.isoformat(), day2.cost) == ("2026-06-11", Decimal("1.200000"))
    assert (day1.instance_id, day1.instance_name) == (str(volume.pk), "Volume: data")
    assert (day1.plan, day1.gpu_hours) == ("storage", 0)
    spend = month_spend(user=funded, now=datetime(2026, 6, 11, 10, 30, tzinfo=UTC))
    assert spend.charged == Decimal("2.37") and spend.total == Decimal("2.37")
    client.force_login(funded)
    csv = client.get(reverse("billing_usage_csv"), {"month": "2026-06"}).text
    assert f"2026-06-11,{volume.pk},Volume: data,storage,0.0000,1.20,USD" in csv


def test_monthly_cost_is_the_price_of_730_hours(prices):
    assert monthly_cost(StoredKind.VOLUME, Decimal(100)) == Decimal("73.00")
    assert monthly_cost(StoredKind.SAVED_IMAGE, Decimal("1.5")) == Decimal("0.55")
