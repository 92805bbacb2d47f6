"""The host link (gpurental/fleet/hostlink.py): what a host may have the control plane run,
each report once and fresh, keys that a database read does not give, and start specs
whose secrets only their host can read."""

from __future__ import annotations

import hashlib
import json
import time

import pytest
from django.utils import timezone

from gpurental import protocol
from gpurental.accounts.models import AuditEvent
from gpurental.celery_app import app as control_app
from gpurental.fleet import hostlink
from gpurental.fleet.hostlink import MessageRefused
from gpurental.fleet.models import Host
from gpurental.fleet.services import host_token_matches
from gpurental.rentals import hostcalls
from gpurental.rentals.services import lifecycle as lc
from tests.messages import signed

FROM_HOST = {"exchange": protocol.REPORTS_EXCHANGE, "routing_key": "report.node1"}


def run_as_delivered(task_name: str, delivery_info: dict, **kwargs):
    """Run a control task as the worker does, with the route its message took."""
    task = control_app.tasks[task_name]
    task.push_request(delivery_info=delivery_info)
    try:
        return task(**kwargs)
    finally:
        task.pop_request()


@pytest.fixture
def reconcile_runs(monkeypatch):
    from gpurental.rentals import tasks

    runs = []
    monkeypatch.setattr(tasks, "reconcile_pass", lambda: runs.append(1))
    return runs


def test_a_control_task_from_a_hosts_route_is_refused_and_audited(db, reconcile_runs):
    control_app.loader.import_default_modules()
    for route in (FROM_HOST, {"exchange": "", "routing_key": protocol.REPORTS_QUEUE}):
        run_as_delivered("gpurental.rentals.tasks.reconcile", route)
    assert reconcile_runs == []
    assert AuditEvent.objects.filter(action="host.task_refused").count() == 2  # one per route
    refused = AuditEvent.objects.get(action="host.task_refused", object_repr="node1")
    assert "gpurental.rentals.tasks.reconcile" in refused.changes["why"]
    # From the control plane's own route it runs.
    run_as_delivered("gpurental.rentals.tasks.reconcile", {"routing_key": "control"})
    assert reconcile_runs == [1]


def test_a_report_task_from_a_hosts_route_runs_and_checks_its_signature(a100, make_host):
    host = make_host("node1", a100, last_heartbeat_at=None)
    beat = signed(host, inventory=None, containers=None, runtime="docker", gpu_source="")
    run_as_delivered(protocol.HEARTBEAT, FROM_HOST, **beat)
    host.refresh_from_db()
    assert host.last_heartbeat_at is not None and host.runtime == "docker"


def test_a_report_is_accepted_once_and_only_while_fresh(a100, make_host):
    host = make_host("node1", a100)
    now = timezone.now()
    message = signed(host, kind="x", sent_at=now.timestamp())
    assert hostlink.receive(message=message, what="report", now=now)[0] == host
    with pytest.raises(MessageRefused, match="a replay"):
        hostlink.receive(message=message, what="report", now=now)
    for sent_at in (
        now.timestamp() - protocol.REPORT_MAX_AGE_S - 1,
        now.timestamp() + protocol.REPORT_MAX_AHEAD_S + 1,
    ):
        with pytest.raises(MessageRefused, match="outside"):
            hostlink.receive(message=signed(host, sent_at=sent_at), what="report", now=now)
    unsigned_time = protocol.sign(protocol.host_key(host.token), {"host": host.name})
    with pytest.raises(MessageRefused, match="no sent_at"):
        hostlink.receive(message=unsigned_time, what="report", now=now)


def test_a_replayed_instance_report_does_not_act_twice(alice, a100, image, make_host, sent):
    from gpurental.rentals.tasks import instance_report

    host = make_host("node1", a100)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    stopped = signed(host, instance_id=str(instance.pk), kind="removed", data={})
    instance_report(**stopped)
    assert AuditEvent.objects.filter(action="host.report_refused").count() == 0
    instance_report(**stopped)
    assert "a replay" in AuditEvent.objects.get(action="host.report_refused").changes["why"]


def test_a_database_read_is_not_a_hosts_key(a100, make_host):
    host = make_host("node1", a100)
    stored = Host.objects.values("token_hash", "keys_sealed").get(pk=host.pk)
    assert host.token not in json.dumps(stored)
    key = protocol.host_key(host.token)
    assert key not in stored.values() and protocol.host_root(host.token) not in stored.values()
    for guess in stored.values():  # neither stored value signs for the host
        forged = protocol.sign(guess, {"host": host.name, "sent_at": time.time()})
        with pytest.raises(MessageRefused, match="bad signature"):
            hostlink.receive(message=forged, what="report", now=timezone.now())
    assert host_token_matches(host=host, token=host.token)
    assert not host_token_matches(host=host, token=stored["token_hash"])


def test_keys_at_rest_open_only_with_the_secret_key(a100, make_host, settings):
    host = make_host("node1", a100)
    hostlink.keys_of(host.keys_sealed)
    old = settings.SECRET_KEY
    settings.SECRET_KEY = "another-secret-key-" + "x" * 40
    with pytest.raises(hostlink.NoKeys):
        hostlink.keys_of(host.keys_sealed)
    settings.SECRET_KEY_FALLBACKS = [old]  # a rotation: the old key still opens them
    assert hostlink.keys_of(host.keys_sealed).sign == protocol.host_key(host.token)


def test_a_start_spec_carries_its_secrets_sealed_for_its_host_only(
    alice, a100, make_host, sent, image
):
    from tests.factories import ImageTemplateFactory

    host = make_host("node1", a100)
    other = make_host("node2", a100)
    ssh_image = ImageTemplateFactory(slug="with-ssh", ssh_port=2222)
    instance = lc.instance_launch(user=alice, image=ssh_image, gpu_model=a100, gpu_count=1)
    spec = hostcalls.container_spec(instance)
    text = json.dumps(spec)
    assert instance.jupyter_token not in text
    assert "PRIVATE KEY" not in text and instance.ssh_host_key not in text
    owner, stranger = (host, other) if instance.host_id == host.pk else (other, host)
    opened = protocol.spec_open(protocol.host_keys(protocol.host_root(owner.token)).spec, spec)
    assert opened["token"] == instance.jupyter_token
    assert opened["ssh"]["host_key"] == instance.ssh_host_key
    with pytest.raises(protocol.SpecRefused, match="not sealed for this host"):
        protocol.spec_open(protocol.host_keys(protocol.host_root(stranger.token)).spec, spec)


def test_existing_hosts_keep_their_tokens_through_the_migration(db):
    """Before: token_hash held the SHA-256 of the token, which was also the signing key."""
    from importlib import import_module

    from django.apps import apps

    migration = import_module("gpurental.fleet.migrations.0003_host_keys_sealed")
    token = "an-old-join-token"
    Host.objects.create(name="old", token_hash=hashlib.sha256(token.encode()).hexdigest())
    migration.seal_roots(apps, None)
    host = Host.objects.get(name="old")
    assert host.token_hash != hashlib.sha256(token.encode()).hexdigest()
    assert host_token_matches(host=host, token=token)
    message = protocol.sign(protocol.host_key(token), {"host": "old", "sent_at": time.time()})
    assert hostlink.receive(message=message, what="report", now=timezone.now())[0] == host
    migration.unseal_roots(apps, None)  # and back
    assert Host.objects.get(name="old").token_hash == hashlib.sha256(token.encode()).hexdigest()


@pytest.mark.slow  # a control worker (a thread of this process)
def test_a_control_worker_on_redis_refuses_a_forged_reconcile_from_the_reports_queue(
    transactional_db, reconcile_runs
):
    """Redis has no broker accounts: a host can put anything on the reports queue. The
    control worker (``-Q control``, which consumes the reports queue too) does not run it."""
    from celery.contrib.testing.worker import start_worker
    from celery.signals import task_postrun
    from django.db import connection

    from gpurental.testing.agent_process import wait_for

    done = []

    def close_connection(**kwargs):
        connection.close()  # the worker thread's own
        done.append(kwargs["task"].name)

    # Nothing an earlier test left: its agents' reports would be taken (one by one) first.
    with control_app.connection_for_write() as conn:
        for queue in ("control", protocol.REPORTS_QUEUE):
            conn.default_channel.queue_purge(queue)
    task_postrun.connect(close_connection, weak=False)
    try:
        with start_worker(control_app, pool="solo", perform_ping_check=False, queues=["control"]):
            route = protocol.report_route(control_app.conf.broker_url, "node1")
            control_app.send_task("gpurental.rentals.tasks.reconcile", declare=[], **route)
            # Only this message counts: another test may have left a task on the queue.
            wait_for(
                lambda: "gpurental.rentals.tasks.reconcile" in done,
                20,
                "the worker to take the forged reconcile",
            )
    finally:
        task_postrun.disconnect(close_connection)
    assert reconcile_runs == []
    assert AuditEvent.objects.filter(action="host.task_refused").exists()


def test_a_report_whose_handling_failed_is_not_a_replay_when_retried(
    alice, a100, image, make_host, sent, monkeypatch
):
    from django.db import OperationalError

    from gpurental.rentals import tasks

    host = make_host("node1", a100)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    report = signed(host, instance_id=str(instance.pk), kind="removed", data={})
    real = tasks.REPORTS["removed"]

    def database_down(*args):
        raise OperationalError("the database is restarting")

    monkeypatch.setitem(tasks.REPORTS, "removed", database_down)
    with pytest.raises(Exception, match="restarting"):  # the worker retries it
        tasks.instance_report(**report)
    monkeypatch.setitem(tasks.REPORTS, "removed", real)
    tasks.instance_report(**report)  # the retry: the same message
    assert not AuditEvent.objects.filter(action="host.report_refused").exists()
