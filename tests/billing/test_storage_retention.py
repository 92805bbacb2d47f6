"""The retention of stopped workspaces (gpurental/storage/retention.py): notices 7 and 1
days ahead, in the events and to the customer, then the instance goes with its workspace;
never without the last notice a day before, and a start keeps it."""

from datetime import UTC, datetime, timedelta

import pytest

from gpurental.notifications.models import Notification
from gpurental.rentals.models import InstanceEvent, InstanceStatus
from gpurental.storage.retention import workspaces_retention_run

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.fixture
def stopped(funded, plan, make_host, run_instance, stop_instance, settings):
    settings.STORAGE_RETENTION_DAYS = 30
    settings.STORAGE_NOTICE_DAYS = (7, 1)
    host = make_host("node1", plan.gpu_model)
    instance = run_instance(funded, plan, host, T0 - timedelta(hours=1), name="trainer")
    return stop_instance(instance, T0)


def notices(instance):
    return list(
        InstanceEvent.objects.filter(instance=instance, kind="notice", step__startswith="retention")
        .order_by("created_at")
        .values_list("step", flat=True)
    )


def run(at, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        return workspaces_retention_run(now=at)


def test_notices_at_7_and_1_days_then_the_workspace_goes(
    stopped, django_capture_on_commit_callbacks
):
    assert run(T0 + 22 * DAY, django_capture_on_commit_callbacks) == {"noticed": 0, "deleted": 0}
    assert run(T0 + 23 * DAY, django_capture_on_commit_callbacks)["noticed"] == 1
    assert run(T0 + 23 * DAY + timedelta(hours=1), django_capture_on_commit_callbacks) == {
        "noticed": 0,
        "deleted": 0,
    }  # once
    assert run(T0 + 29 * DAY, django_capture_on_commit_callbacks)["noticed"] == 1
    assert notices(stopped) == ["retention_7", "retention_1"]
    last = InstanceEvent.objects.get(instance=stopped, step="retention_1")
    assert "deleted with it on 2026-07-01 09:00 UTC" in last.reason
    told = Notification.objects.filter(user=stopped.user, event="workspace_expiring")
    assert told.count() == 2
    assert run(T0 + 30 * DAY, django_capture_on_commit_callbacks)["deleted"] == 1
    stopped.refresh_from_db()
    assert stopped.status in (InstanceStatus.TERMINATING, InstanceStatus.TERMINATED)
    assert "kept 30 days after the stop" in stopped.status_reason


def test_a_late_notice_moves_the_deletion_a_day_past_it(
    stopped, settings, django_capture_on_commit_callbacks
):
    # The policy shortened to 10 days after 20 days stopped: no notice yet, so none deletes.
    settings.STORAGE_RETENTION_DAYS = 10
    at = T0 + 20 * DAY
    assert run(at, django_capture_on_commit_callbacks) == {"noticed": 1, "deleted": 0}
    assert run(at + timedelta(hours=1), django_capture_on_commit_callbacks)["noticed"] == 1
    assert notices(stopped) == ["retention_7", "retention_1"]
    assert run(at + timedelta(hours=23), django_capture_on_commit_callbacks)["deleted"] == 0
    assert run(at + DAY + timedelta(hours=1), django_capture_on_commit_callbacks)["deleted"] == 1


def test_a_start_keeps_it_and_a_later_stop_counts_afresh(
    stopped, start_instance, stop_instance, django_capture_on_commit_callbacks
):
    run(T0 + 23 * DAY, django_capture_on_commit_callbacks)  # the 7-day notice
    start_instance(stopped, T0 + 25 * DAY)
    stop_instance(stopped, T0 + 26 * DAY)
    assert run(T0 + 31 * DAY, django_capture_on_commit_callbacks) == {"noticed": 0, "deleted": 0}
    assert run(T0 + 49 * DAY, django_capture_on_commit_callbacks)["noticed"] == 1


def test_no_retention_keeps_it_for_as_long_as_it_is_paid_for(
    stopped, settings, django_capture_on_commit_callbacks
):
    settings.STORAGE_RETENTION_DAYS = 0
    assert run(T0 + 400 * DAY, django_capture_on_commit_callbacks) == {"noticed": 0, "deleted": 0}
