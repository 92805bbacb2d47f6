"""Per-minute rollups: written in batches from the agent's minutes, attributed from the
control plane's allocations, kept for the retention period; paid vs used."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from gpurental.agent.activity import Holdings
from gpurental.agent.gpus import SimulatedSource
from gpurental.agent.sampler import Sampler
from gpurental.telemetry import tasks
from gpurental.telemetry.models import GpuMinute
from gpurental.telemetry.selectors import instance_history, instance_usage
from gpurental.telemetry.services import rollups_expire, rollups_record
from tests.messages import signed

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def row(minute: datetime, gpu: int, util: float, **extra) -> dict:
    return {
        "minute": int(minute.timestamp()),
        "gpu": gpu,
        "n": 60,
        "util_avg": util,
        "util_max": min(100.0, util + 5),
        "mem_avg": 2_000_000_000,
        "mem_max": 3_000_000_000,
        "mem_total": 85_899_345_920,
        "temp_max": 55.0,
        "power_avg": 180.0,
        "instance": None,
        "kernel_active": None,
        **extra,
    }


def test_the_agents_batches_become_rollups_through_the_control_task(node1, alice, run_instance):
    """The agent's real Sampler, its reporter's task arguments, the control task, the table."""
    mine = run_instance(alice, now=T0)
    (gpu,) = mine.gpu_indices
    batches = []
    sampler = Sampler(
        host_name="node1",
        source=SimulatedSource(host_name="node1", model_name="NVIDIA A100-SXM4-80GB", count=4),
        holdings=Holdings(),
        publish=None,
        send_batch=lambda minutes, simulated: batches.append((minutes, simulated)),
        batch_interval=60,
    )
    start = T0.timestamp() + 60
    for second in range(125):
        sampler.tick(now=start + second, now_mono=float(second))
    assert len(batches) == 2  # one a minute
    with time_machine.travel(T0 + timedelta(minutes=3), tick=False):
        for minutes, simulated in batches:
            tasks.telemetry_record(**signed(node1, minutes=minutes, simulated=simulated))
    rows = GpuMinute.objects.filter(host=node1).order_by("minute", "gpu_index")
    assert rows.count() == 8  # 2 finished minutes × 4 GPUs
    held = rows.get(gpu_index=gpu, minute=T0 + timedelta(minutes=1))
    assert held.instance_id == mine.pk and held.simulated and held.samples == 60
    assert rows.filter(instance__isnull=False).count() == 2


def test_a_wrong_signature_writes_nothing(node1):
    recent = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
    tasks.telemetry_record(**signed(node1, "nope", minutes=[row(recent, 0, 50)], simulated=True))
    ghost = {**signed(node1, minutes=[row(recent, 0, 50)]), "host": "ghost"}
    tasks.telemetry_record(**ghost)
    assert not GpuMinute.objects.exists()
    tasks.telemetry_record(**signed(node1, minutes=[row(recent, 0, 50)]))
    assert GpuMinute.objects.count() == 1


def test_a_repeated_batch_rewrites_the_same_rows(node1):
    now = T0 + timedelta(minutes=5)
    assert rollups_record(host=node1, minutes=[row(T0, 0, 10)], simulated=True, now=now) == 1
    assert rollups_record(host=node1, minutes=[row(T0, 0, 30)], simulated=True, now=now) == 1
    (only,) = GpuMinute.objects.all()
    assert only.util_avg == 30


def test_unbelievable_rows_are_dropped(node1):
    now = T0 + timedelta(minutes=5)
    written = rollups_record(
        host=node1,
        minutes=[
            row(T0, 9, 10),  # no such GPU on this host
            row(T0 + timedelta(hours=1), 0, 10),  # from the future
            row(T0 - timedelta(days=400), 0, 10),  # older than the retention
            {"minute": "soon", "gpu": 0},
            row(T0, 1, 250),  # clamped to 100
        ],
        simulated=False,
        now=now,
    )
    assert written == 1
    assert GpuMinute.objects.get().util_avg == 100


def test_minutes_are_attributed_from_allocations_not_the_agents_stamp(node1, alice, run_instance):
    mine = run_instance(alice, now=T0)
    (gpu,) = mine.gpu_indices
    other = next(i for i in range(4) if i != gpu)
    rollups_record(
        host=node1,
        minutes=[
            row(T0 + timedelta(minutes=1), gpu, 80),
            row(T0 + timedelta(minutes=1), other, 90, instance=str(mine.pk)),  # wrong stamp
            row(T0 - timedelta(minutes=5), gpu, 70),  # before the launch
        ],
        simulated=True,
        now=T0 + timedelta(minutes=3),
    )
    attributed = dict(
        GpuMinute.objects.values_list("gpu_index", "instance_id").filter(
            minute=T0 + timedelta(minutes=1)
        )
    )
    assert attributed == {gpu: mine.pk, other: None}
    assert GpuMinute.objects.get(minute=T0 - timedelta(minutes=5)).instance_id is None


def test_retention_deletes_only_old_rollups(node1, settings):
    settings.TELEMETRY_RETENTION_DAYS = 30
    now = T0
    rollups_record(
        host=node1,
        minutes=[row(T0 - timedelta(days=29), 0, 1), row(T0 - timedelta(days=29), 1, 1)],
        simulated=True,
        now=now,
    )
    GpuMinute.objects.create(
        host=node1,
        gpu_index=0,
        minute=T0 - timedelta(days=31),
        samples=60,
        util_avg=1,
        util_max=1,
        mem_used_avg=0,
        mem_used_max=0,
        mem_total=1,
    )
    assert rollups_expire(now=now, batch=1) == 1
    assert GpuMinute.objects.count() == 2
    assert rollups_expire(now=now + timedelta(days=2)) == 2


def test_paid_vs_used_averages_utilisation_over_the_running_time(node1, alice, run_instance):
    mine = run_instance(alice, now=T0)
    (gpu,) = mine.gpu_indices
    minutes = [row(T0 + timedelta(minutes=m), gpu, 20 if m % 2 else 60) for m in range(10)]
    rollups_record(host=node1, minutes=minutes, simulated=True, now=T0 + timedelta(minutes=11))
    usage = instance_usage(instance=mine, now=T0 + timedelta(minutes=20))
    assert usage["paid_hours"] == pytest.approx(20 / 60, abs=0.01)
    assert usage["avg_util"] == 40.0
    assert usage["measured_minutes"] == 10
    assert usage["coverage"] == pytest.approx(0.5)
    assert usage["simulated"] is True


def test_history_buckets_per_gpu(node1, alice, run_instance):
    mine = run_instance(alice, now=T0)
    (gpu,) = mine.gpu_indices
    minutes = [row(T0 + timedelta(minutes=m), gpu, float(m)) for m in range(30)]
    rollups_record(host=node1, minutes=minutes, simulated=True, now=T0 + timedelta(minutes=31))
    hour = instance_history(instance=mine, window="1h", now=T0 + timedelta(minutes=31))
    (series,) = hour["gpus"]
    assert series["index"] == gpu and len(series["points"]) == 30
    assert series["points"][3]["util"] == 3.0 and hour["simulated"] is True
    day = instance_history(instance=mine, window="24h", now=T0 + timedelta(minutes=31))
    assert [p["util"] for p in day["gpus"][0]["points"]] == [4.5, 14.5, 24.5]  # 10-minute buckets


def test_history_endpoint_is_for_the_owner_and_staff(
    client, node1, alice, bob, carol, run_instance
):
    mine = run_instance(alice)
    url = f"/telemetry/instances/{mine.pk}/history/?window=1h"
    assert client.get(url).status_code == 401
    client.force_login(bob)
    assert client.get(url).status_code == 404
    client.force_login(alice)
    response = client.get(url)
    assert response.status_code == 200 and response.json()["window"] == "1h"
    assert client.get(url.replace("1h", "1y")).status_code == 400
    client.force_login(carol)
    assert client.get(url).status_code == 200


def test_instance_page_shows_paid_vs_used_and_charts(client, node1, alice, run_instance):
    mine = run_instance(alice, now=T0)
    (gpu,) = mine.gpu_indices
    rollups_record(
        host=node1, minutes=[row(T0, gpu, 37)], simulated=True, now=T0 + timedelta(minutes=2)
    )
    client.force_login(alice)
    page = client.get(f"/instances/{mine.pk}/").content.decode()
    assert 'id="gpu-charts"' in page and "chart-4.6.1" in page
    assert "37.0 %" in page and "simulated" in page
