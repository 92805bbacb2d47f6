"""Idle auto-stop, with explicit ``now=`` (and time-machine for the beat task): a notice
first, then a stop (never a termination), only on minutes that were measured idle."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from gpurental.rentals.models import InstanceEvent, InstanceStatus
from gpurental.telemetry import tasks
from gpurental.telemetry.services import idle_streak, instance_idle_check, rollups_record

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
M = timedelta(minutes=1)


@pytest.fixture
def instance(alice, run_instance):
    instance = run_instance(alice, now=T0)
    instance.idle_stop_minutes = 10  # notice after 5 idle minutes, stop after 10
    instance.save(update_fields=["idle_stop_minutes"])
    return instance


def measure(instance, first: int, last: int, util: float = 1.0, kernel=None, gpus=None):
    """Rollups for minutes T0+first … T0+last (inclusive) of the instance's GPUs."""
    rows = [
        {
            "minute": int((T0 + m * M).timestamp()),
            "gpu": gpu,
            "n": 60,
            "util_avg": util,
            "util_max": util,
            "mem_avg": 0,
            "mem_max": 0,
            "mem_total": 1,
            "kernel_active": kernel,
        }
        for m in range(first, last + 1)
        for gpu in (gpus if gpus is not None else instance.gpu_indices)
    ]
    rollups_record(host=instance.host, minutes=rows, simulated=True, now=T0 + (last + 1) * M)


def check(instance, at_minute: float) -> str:
    instance.refresh_from_db()
    return instance_idle_check(instance=instance, now=T0 + at_minute * M)


def notices(instance):
    return list(
        InstanceEvent.objects.filter(instance=instance, kind="notice").values_list(
            "step", flat=True
        )
    )


def test_warns_then_stops_an_instance_idle_for_its_policy(instance):
    measure(instance, 0, 3)
    assert check(instance, 4.5) == ""  # 4 idle minutes: nothing yet
    measure(instance, 4, 4)
    assert check(instance, 5.5) == "warned"
    assert notices(instance) == ["idle_warning"]
    warning = InstanceEvent.objects.get(instance=instance, kind="notice")
    assert "will be stopped" in warning.reason and warning.data["idle_minutes"] == 5
    assert check(instance, 6) == ""  # warned once, not every minute
    measure(instance, 5, 8)
    assert check(instance, 9.5) == ""  # 9 idle minutes: not yet
    measure(instance, 9, 9)
    assert check(instance, 10.5) == "stopped"
    instance.refresh_from_db()
    assert (
        instance.status == InstanceStatus.STOPPING
    )  # stopped (the agent confirms), not terminated
    assert instance.status_reason.startswith("idle for 10 minutes")
    assert notices(instance) == ["idle_warning"]


def test_activity_after_the_warning_cancels_the_stop(instance):
    measure(instance, 0, 4)
    assert check(instance, 5.5) == "warned"
    measure(instance, 5, 5, util=60)
    assert check(instance, 6.5) == "cleared"
    measure(instance, 6, 12)  # idle again, 7 minutes: a fresh warning, no stop yet
    assert check(instance, 13.5) == "warned"
    assert notices(instance) == ["idle_warning", "idle_cleared", "idle_warning"]
    instance.refresh_from_db()
    assert instance.status == InstanceStatus.RUNNING


def test_missing_measurements_never_count_as_idle(instance):
    measure(instance, 0, 6)
    assert check(instance, 7.5) == "warned"
    # The host's agent went quiet: no data is neither idle (no stop) nor busy (no "resumed").
    assert idle_streak(instance=instance, now=T0 + 30 * M, limit=10) is None
    assert check(instance, 30) == ""
    assert notices(instance) == ["idle_warning"]
    measure(instance, 20, 24)
    measure(instance, 26, 29)  # minute 25 is missing: the streak is only 4 minutes
    assert idle_streak(instance=instance, now=T0 + 30 * M, limit=10) == 4


def test_a_busy_kernel_keeps_the_instance_alive(instance):
    measure(instance, 0, 12, util=0.0, kernel=True)
    assert check(instance, 13.5) == ""
    assert notices(instance) == []


def test_one_busy_gpu_keeps_a_multi_gpu_instance_alive(alice, run_instance):
    instance = run_instance(alice, now=T0, gpu_count=2)
    instance.idle_stop_minutes = 4
    instance.save(update_fields=["idle_stop_minutes"])
    busy, quiet = instance.gpu_indices
    measure(instance, 0, 9, util=0.0, gpus=[quiet])
    measure(instance, 0, 9, util=70.0, gpus=[busy])
    assert check(instance, 10.5) == ""
    measure(instance, 10, 19, util=0.0)  # now both idle: 4-minute policy, 2-minute notice
    assert check(instance, 20.5) == "warned"
    measure(instance, 20, 21, util=0.0)
    assert check(instance, 22.5) == "stopped"


def test_a_policy_of_zero_means_never(instance):
    instance.idle_stop_minutes = 0
    instance.save(update_fields=["idle_stop_minutes"])
    measure(instance, 0, 120)
    assert check(instance, 121) == ""


def test_idle_minutes_from_before_a_restart_do_not_count(alice, run_instance, sent):
    from gpurental.rentals.services import lifecycle as lc

    instance = run_instance(alice, now=T0)
    instance.idle_stop_minutes = 10
    instance.save(update_fields=["idle_stop_minutes"])
    measure(instance, 0, 8)
    lc.instance_stop(instance=instance, now=T0 + 9 * M)
    lc.instance_report_stopped(instance_id=str(instance.pk), now=T0 + 9 * M)
    lc.instance_start(instance=instance, now=T0 + 10 * M)
    lc.instance_report_running(
        instance_id=str(instance.pk), port=40001, container_id="c2", now=T0 + 10 * M
    )
    instance.refresh_from_db()
    instance.gpu_indices = [
        a.gpu.index for a in instance.allocations.filter(period__upper_inf=True)
    ]
    measure(instance, 10, 13)
    assert idle_streak(instance=instance, now=T0 + 14 * M, limit=10) == 4
    assert check(instance, 14.5) == ""


def test_the_beat_job_applies_the_policy_to_every_running_instance(instance, bob, run_instance):
    other = run_instance(bob, now=T0)
    measure(instance, 0, 9)
    measure(other, 0, 9, util=80)
    with time_machine.travel(T0 + 5.5 * M, tick=False):
        tasks.idle_check()
    with time_machine.travel(T0 + 10.5 * M, tick=False):
        tasks.idle_check()
    instance.refresh_from_db()
    other.refresh_from_db()
    assert (instance.status, other.status) == (InstanceStatus.STOPPING, InstanceStatus.RUNNING)
    assert notices(instance) == ["idle_warning"] and notices(other) == []
