"""The control-plane Celery app (web enqueues, the control worker and beat run it).

Agents on GPU hosts use their own app in gpurental.agent, which needs no Django.
"""

import os

from billiard.process import current_process
from celery import Celery, signals
from kombu import Exchange, Queue

from gpurental import protocol

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpurental.settings")

# Every task's class checks where its message came from: from a host's route, only the
# report tasks run (gpurental/fleet/hostlink.py).
app = Celery("gpurental", task_cls="gpurental.fleet.hostlink:ControlTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# The hosts' reports: a topic exchange (routing key report.<host>) into one queue.
REPORTS = Queue(
    protocol.REPORTS_QUEUE,
    Exchange(protocol.REPORTS_EXCHANGE, type="topic", durable=True),
    routing_key="report.#",
)


@signals.worker_init.connect
def _control_workers_consume_reports(sender, **_kwargs) -> None:
    """A worker of the control queue also consumes the reports queue (``-Q control`` is
    enough: the Procfile, the benches and the tests' worker all say so)."""
    if sender.app is app and "control" in app.amqp.queues.consume_from:
        app.amqp.queues.select_add(REPORTS)


WORKER_CONN_MAX_AGE = 300  # seconds a control worker's process keeps its connection

# Celery's Django fixup closes every database connection before and after every task
# unless CELERY_DB_REUSE_MAX is set, whatever CONN_MAX_AGE says: a new PostgreSQL
# connection per task, ~15 ms of each heartbeat's wall time, which capped a control worker
# at ~100 heartbeats a second however many processes it had (bench/fleet.py). So the fixup
# is told to leave them alone, and Django's own rule decides instead, around every task
# (below): a connection older than its CONN_MAX_AGE (0 unless a control worker's pool
# process sets it) or broken goes, as after a web request.
app.conf["CELERY_DB_REUSE_MAX"] = 2**31


@signals.worker_process_init.connect
def _keep_the_database_connection(**_kwargs) -> None:
    """A control worker's pool process keeps its database connection from task to task
    (Django checks it before a task uses it): opening one per task cost each agent report
    ~5-10 ms on a small host, on the way from JupyterLab's answer to the customer's link.
    Web processes keep DATABASE_CONN_MAX_AGE as set (0 unless set), and so does a worker
    where it is set; a solo pool (the tests' in-process worker) is left alone."""
    if "DATABASE_CONN_MAX_AGE" in os.environ or current_process().name == "MainProcess":
        return
    from django.conf import settings

    for database in settings.DATABASES.values():
        database["CONN_MAX_AGE"] = WORKER_CONN_MAX_AGE


@signals.task_prerun.connect
@signals.task_postrun.connect
def _close_old_database_connections(sender=None, **_kwargs) -> None:
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return  # run in the caller's process, inside its transaction: not ours to close
    from django.db import close_old_connections

    close_old_connections()


# Everything of the control plane runs on the "control" queue; agents have their own.
app.conf.task_routes = {
    "gpurental.fleet.*": {"queue": "control"},
    "gpurental.rentals.*": {"queue": "control"},
    "gpurental.billing.*": {"queue": "control"},
    "gpurental.telemetry.*": {"queue": "control"},
    "gpurental.api.*": {"queue": "control"},
    "gpurental.groups.*": {"queue": "control"},
    # Webhook POSTs and e-mails wait on customers' servers: their own queue and worker
    # (the Procfile's notify), so that a slow endpoint never holds a control slot.
    "gpurental.notifications.*": {"queue": "notify"},
    "gpurental.baremetal.*": {"queue": "control"},
    "gpurental.acceptance.*": {"queue": "control"},
}

# Every periodic job is declared here, in one place.
app.conf.beat_schedule = {
    "purge-idempotency-keys": {
        "task": "gpurental.api.tasks.idempotency_keys_purge",
        "schedule": 3600.0,
        "options": {"queue": "control", "expires": 600},
    },
    "reconcile-fleet": {
        "task": "gpurental.rentals.tasks.reconcile",
        "schedule": float(os.environ.get("RECONCILE_INTERVAL", "10")),
        # A reconcile that waited behind a busy control queue is dropped, not run late: the
        # heartbeats queued before it are recorded first, so a late one would judge hosts
        # silent for time the worker itself was behind.
        "options": {
            "queue": "control",
            "expires": float(os.environ.get("RECONCILE_INTERVAL", "10")),
        },
    },
    "groups-tick": {
        "task": "gpurental.groups.tasks.groups_tick",
        "schedule": float(os.environ.get("GROUP_TICK_S", "5")),
        "options": {"queue": "control", "expires": float(os.environ.get("GROUP_TICK_S", "5"))},
    },
    "reservations-tick": {
        "task": "gpurental.rentals.tasks.reservations_tick",
        "schedule": 30.0,
        "options": {"queue": "control", "expires": 25},
    },
    "leases-tick": {
        "task": "gpurental.baremetal.tasks.leases_tick",
        "schedule": 30.0,
        "options": {"queue": "control", "expires": 25},
    },
    "acceptance-expire-runs": {
        "task": "gpurental.acceptance.tasks.acceptance_runs_expire",
        "schedule": 60.0,
        "options": {"queue": "control", "expires": 50},
    },
    # --- billing ---
    "billing-meter": {
        "task": "gpurental.billing.tasks.meter",
        "schedule": float(os.environ.get("BILLING_METER_INTERVAL", "60")),
        "options": {"queue": "control", "expires": 50},
    },
    "storage-meter": {
        "task": "gpurental.storage.tasks.meter",
        "schedule": 600.0,
        "options": {"queue": "control", "expires": 540},
    },
    "storage-retention": {
        "task": "gpurental.storage.tasks.retention",
        "schedule": 3600.0,
        "options": {"queue": "control", "expires": 3000},
    },
    "backups-take": {
        "task": "gpurental.backups.tasks.backup",
        "schedule": float(os.environ.get("BACKUP_INTERVAL_S", "3600")),
        "options": {"queue": "control", "expires": 600},
    },
    "saved-images-expire": {
        "task": "gpurental.rentals.tasks.saved_images_expire",
        "schedule": 600.0,
        "options": {"queue": "control", "expires": 540},
    },
    "volumes-transfers-expire": {
        "task": "gpurental.volumes.tasks.transfers_expire",
        "schedule": 600.0,
        "options": {"queue": "control", "expires": 540},
    },
    "storage-arrears": {
        "task": "gpurental.storage.tasks.arrears",
        "schedule": 3600.0,
        "options": {"queue": "control", "expires": 3000},
    },
    "billing-enforce-limits": {
        "task": "gpurental.billing.tasks.enforce_limits",
        "schedule": 60.0,
        "options": {"queue": "control", "expires": 50},
    },
    "billing-draft-invoices": {
        "task": "gpurental.billing.tasks.draft_invoices",
        "schedule": 6 * 3600.0,
        "options": {"queue": "control", "expires": 3600},
    },
    "billing-expire-voucher-credit": {
        "task": "gpurental.billing.tasks.expire_voucher_credit",
        "schedule": 300.0,
        "options": {"queue": "control", "expires": 250},
    },
    # --- notifications: webhook retries whose task the broker lost ---
    "notifications-webhooks-sweep": {
        "task": "gpurental.notifications.tasks.webhooks_sweep",
        "schedule": 60.0,
        "options": {"queue": "notify", "expires": 50},
    },
    # --- telemetry ---
    "telemetry-idle-check": {
        "task": "gpurental.telemetry.tasks.idle_check",
        "schedule": float(os.environ.get("IDLE_CHECK_INTERVAL", "60")),
        "options": {"queue": "control", "expires": 50},
    },
    "telemetry-maintain": {
        "task": "gpurental.telemetry.tasks.maintain",
        "schedule": 3600.0,
        "options": {"queue": "control", "expires": 1800},
    },
}
