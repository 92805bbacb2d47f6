"""Storage with no credit left (gpurental/storage/arrears.py): told at once, again 7 and 1
days ahead, then deleted after STORAGE_UNPAID_DAYS; credit in time ends it; never without
the last notice a day before, nor what was stored after it."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from gpurental.accounts.models import AuditEvent
from gpurental.billing.services import credit_add
from gpurental.images.models import SavedImage, SavedImageStatus
from gpurental.notifications.models import Notification
from gpurental.rentals.models import InstanceStatus
from gpurental.storage.arrears import storage_arrears_run
from gpurental.storage.models import StorageArrears
from gpurental.volumes.models import VolumeStatus
from gpurental.volumes.services import volume_create
from tests.factories import ImageTemplateFactory

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.fixture(autouse=True)
def policy(settings):
    settings.STORAGE_UNPAID_DAYS = 14
    settings.STORAGE_NOTICE_DAYS = (7, 1)


@pytest.fixture
def broke(alice, plan, make_host, run_instance, stop_instance):
    """Alice keeps a stopped instance, a volume and a saved image, and has no credit."""
    host = make_host("node1", plan.gpu_model)
    credit_add(user=alice, amount=Decimal("1.00"))
    instance = run_instance(alice, plan, host, T0 - timedelta(minutes=20), name="trainer")
    stop_instance(instance, T0 - timedelta(minutes=5))  # 1.00 of 4.00/h: 15 min, then less
    volume = volume_create(account=alice, name="data", size_gb=10, host=host, actor=alice, now=T0)
    image = SavedImage.objects.create(
        account=alice,
        name="mine",
        template=ImageTemplateFactory(),
        source_instance=instance,
        status=SavedImageStatus.READY,
        reference="registry.example/alice/mine:1",
        size_bytes=10**9,
        created_at=T0,
        ready_at=T0,
    )
    from gpurental.billing.services.metering import meter_run

    meter_run(now=T0)
    return instance, volume, image


def run(at, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        return storage_arrears_run(now=at)


def told(user) -> list:
    return list(
        Notification.objects.filter(user=user, event="storage_unpaid")
        .order_by("created_at")
        .values_list("data", flat=True)
    )


def test_told_at_once_then_7_and_1_days_ahead_then_deleted(
    broke, alice, django_capture_on_commit_callbacks
):
    instance, volume, image = broke
    assert run(T0, django_capture_on_commit_callbacks)["noticed"] == 1
    first = told(alice)[0]
    assert first["delete_at"] == (T0 + 14 * DAY).isoformat()
    assert sorted(first["stored"]) == ["saved_image mine", "volume data", "workspace trainer"]
    assert Decimal(first["balance"]) <= 0
    assert run(T0 + DAY, django_capture_on_commit_callbacks)["noticed"] == 0  # once
    assert run(T0 + 7 * DAY, django_capture_on_commit_callbacks)["noticed"] == 1
    assert run(T0 + 13 * DAY, django_capture_on_commit_callbacks)["noticed"] == 1
    assert len(told(alice)) == 3
    assert run(T0 + 14 * DAY - timedelta(minutes=1), django_capture_on_commit_callbacks) == {
        "noticed": 0,
        "cleared": 0,
        "deleted": 0,
    }

    assert run(T0 + 14 * DAY, django_capture_on_commit_callbacks)["deleted"] == 1
    instance.refresh_from_db()
    image.refresh_from_db()
    volume.refresh_from_db()
    assert instance.status in (InstanceStatus.TERMINATING, InstanceStatus.TERMINATED)
    assert "storage unpaid since 2026-06-01 09:00 UTC" in instance.status_reason
    assert image.status == SavedImageStatus.DELETED
    assert volume.status == VolumeStatus.DELETED  # free: no instance held it
    assert AuditEvent.objects.filter(action="storage.deleted_unpaid").count() == 1


def test_credit_in_time_ends_it_and_nothing_is_deleted(
    broke, alice, django_capture_on_commit_callbacks
):
    instance, volume, _ = broke
    run(T0, django_capture_on_commit_callbacks)
    credit_add(user=alice, amount=Decimal("50.00"))
    assert run(T0 + 2 * DAY, django_capture_on_commit_callbacks)["cleared"] == 1
    assert not StorageArrears.objects.exists()
    assert run(T0 + 30 * DAY, django_capture_on_commit_callbacks)["deleted"] == 0
    volume.refresh_from_db()
    assert volume.status == VolumeStatus.AVAILABLE
    instance.refresh_from_db()
    assert instance.status == InstanceStatus.STOPPED


def test_a_late_last_notice_moves_the_deletion_a_day_past_it(
    broke, alice, django_capture_on_commit_callbacks
):
    run(T0, django_capture_on_commit_callbacks)
    # The task was down for three weeks: the last notice first, the deletion a day later.
    late = T0 + 21 * DAY
    assert run(late, django_capture_on_commit_callbacks)["noticed"] == 1
    assert told(alice)[-1]["delete_at"] == (late + DAY).isoformat()
    assert run(late + 12 * timedelta(hours=1), django_capture_on_commit_callbacks)["deleted"] == 0
    assert run(late + DAY, django_capture_on_commit_callbacks)["deleted"] == 1


def test_what_was_stored_after_the_last_notice_is_kept(
    broke, alice, plan, django_capture_on_commit_callbacks
):
    _, volume, _ = broke
    run(T0, django_capture_on_commit_callbacks)
    run(T0 + 13 * DAY, django_capture_on_commit_callbacks)
    newer = volume_create(
        account=alice,
        name="newer",
        size_gb=1,
        host=volume.host,
        actor=alice,
        now=T0 + 13 * DAY + timedelta(hours=1),
    )
    assert run(T0 + 14 * DAY, django_capture_on_commit_callbacks)["deleted"] == 1
    newer.refresh_from_db()
    volume.refresh_from_db()
    assert (volume.status, newer.status) == (VolumeStatus.DELETED, VolumeStatus.AVAILABLE)


def test_an_account_with_credit_or_nothing_stored_is_left_alone(
    alice, bob, plan, make_host, django_capture_on_commit_callbacks
):
    host = make_host("node1", plan.gpu_model)
    credit_add(user=alice, amount=Decimal("10.00"))
    volume_create(account=alice, name="data", size_gb=10, host=host, actor=alice, now=T0)
    assert run(T0, django_capture_on_commit_callbacks) == {
        "noticed": 0,
        "cleared": 0,
        "deleted": 0,
    }
    assert not StorageArrears.objects.exists() and told(alice) == told(bob) == []
