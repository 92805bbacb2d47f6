"""PostgreSQL stops and starts again while launches are in flight and while the meter
runs: every launch ends running exactly once, every minute is charged exactly once, and
reconciliation agrees with the hosts within two periods.

The embedded test cluster is stopped for real (``pg_ctl stop -m fast``: every session
ends, open transactions roll back), so these tests are ``exclusive``."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from gpurental.billing.models import Charge, LedgerEntry
from gpurental.billing.services import metering
from gpurental.billing.services.metering import meter_run
from gpurental.rentals.models import InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.tasks import reconcile
from gpurental.testing import pytest_plugin
from gpurental.testing.agent_process import wait_for
from tests.billing.conftest import beat
from tests.rentals.test_host_faults import fresh, gpus_held, jupyter

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.exclusive]
S = InstanceStatus
PERIOD = 3  # seconds between two reconcile passes (beat's RECONCILE_INTERVAL; the test plays beat)
OFFLINE_AFTER = 3


@pytest.fixture(autouse=True)
def short_host_timeouts(settings):
    settings.HOST_OFFLINE_AFTER = OFFLINE_AFTER
    settings.HOST_LOST_AFTER = 60


def converges(predicate, what: str, agent=None, periods: int = 2):
    """Beat's reconcile passes, ``PERIOD`` apart: ``predicate`` holds within ``periods``."""
    for period in range(periods):
        reconcile()
        try:
            return wait_for(predicate, PERIOD, what, agent)
        except AssertionError:
            if period == periods - 1:
                raise
    return None


@pytest.mark.docker
def test_launches_in_flight_across_a_postgres_outage_each_end_running_once(
    agent, catalog, alice, docker_client, control_tasks
):
    model, image = catalog
    launches = [
        lc.instance_launch(user=alice, image=image, gpu_model=model, gpu_count=1) for _ in range(2)
    ]
    ids = {str(instance.pk) for instance in launches}
    with pytest_plugin.embedded_postgres_outage():
        down = time.monotonic()
        # The agent starts both containers meanwhile; the control worker takes its reports
        # off the queue while it cannot record them, and its heartbeats too, for longer
        # than a host may be silent.
        wait_for(lambda: ids <= control_tasks.tried("running"), 60, "running reports", agent)
        wait_for(
            lambda: any(
                at > down + OFFLINE_AFTER + 1 for at in control_tasks.heartbeats_since(down)
            ),
            30,
            "heartbeats unrecorded for longer than HOST_OFFLINE_AFTER",
            agent,
        )

    converges(
        lambda: all(fresh(instance).status == S.RUNNING for instance in launches),
        "both launches running",
        agent,
    )
    for instance in map(fresh, launches):
        label = {"label": f"gpurental.instance={instance.pk}"}
        assert len(docker_client.containers.list(all=True, filters=label)) == 1
        running = instance.events.filter(kind="transition", to_status=S.RUNNING)
        assert running.count() == 1
        # The host was never silent: the control plane could not listen.
        assert not instance.events.filter(to_status__in=(S.UNREACHABLE, S.LOST)).exists()
        assert gpus_held(instance) == 1
        assert jupyter(instance, "/api/status")[0] == 200
    meter_run()
    meter_run()
    for instance in launches:
        starts = list(
            Charge.objects.filter(instance=instance).values_list("period_start", flat=True)
        )
        assert len(starts) == len(set(starts))


def pk(instance):
    return instance.pk


def test_the_meter_cut_off_by_a_postgres_outage_charges_each_minute_once(
    funded, plan, make_host, run_instance, monkeypatch
):
    """The meter commits one batch, is stopped inside the next one's transaction, and
    the next run charges what was left: each minute once, each charge on the ledger."""
    host = make_host("node1", plan.gpu_model)
    type(funded).objects.filter(pk=funded.pk).update(gpu_quota=8)
    started = timezone.now() - timedelta(minutes=30)
    # In the meter's order (it takes them by primary key).
    instances = sorted((run_instance(funded, plan, host, started) for _ in range(3)), key=pk)
    beat_at = timezone.now()
    beat(host, beat_at)
    monkeypatch.setattr(metering, "BATCH", 1)  # one transaction per instance
    inside, resume = threading.Event(), threading.Event()
    real_meter = metering.instance_meter

    def meter_then_wait(*, instance, now):
        charges = real_meter(instance=instance, now=now)
        if instance.pk == instances[1].pk:  # the first batch has committed
            inside.set()
            resume.wait(30)
        return charges

    monkeypatch.setattr(metering, "instance_meter", meter_then_wait)
    failed = []

    def meter():
        try:
            meter_run()
        except OperationalError as exc:
            failed.append(exc)
        finally:
            connection.close()

    cut_off = threading.Thread(target=meter)
    cut_off.start()
    assert inside.wait(30), "the meter never reached the second instance"
    with pytest_plugin.embedded_postgres_outage():
        resume.set()
        cut_off.join(30)
    assert failed, "the meter's run went on through the outage"
    assert Charge.objects.filter(instance=instances[0]).exists()  # committed before
    assert not Charge.objects.filter(instance__in=instances[1:]).exists()  # rolled back

    monkeypatch.setattr(metering, "instance_meter", real_meter)
    meter_run()  # beat's next period
    assert meter_run() == 0
    for instance in instances:
        instance.refresh_from_db()
        rows = list(
            Charge.objects.filter(instance=instance)
            .order_by("period_start")
            .values_list("period_start", "period_end")
        )
        assert rows[0][0] == instance.running_since
        assert rows[-1][1] == instance.billed_until == metering.minute_floor(beat_at)
        assert all(a[1] == b[0] for a, b in zip(rows, rows[1:], strict=False))  # no gap, no overlap
    charges = Charge.objects.filter(instance__in=instances)
    assert LedgerEntry.objects.filter(charge__in=charges).count() == charges.count()
