"""A slow endpoint cannot hold a worker: each attempt has one deadline for the whole
transfer (connect, send, the answer's headers and body), an attempt cut short by the
worker's time limit is still recorded, and deliveries and e-mails run on their own queue,
never on the control queue that launches, metering and reconcile share."""

import re
import socket
import threading
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from gpurental import protocol
from gpurental.celery_app import app
from gpurental.notifications import tasks, webhooks
from gpurental.notifications.models import Notification, WebhookDelivery
from gpurental.notifications.services import delivery_attempt, notify

DEADLINE_S = 1.5
# What the deadline may overrun by: the socket is shut at the deadline, the rest is
# bookkeeping. A trickle that is not cut off runs for TRICKLE_S.
SLACK_S = 1.0
TRICKLE_S = 8

HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Padding: " + b"x" * 40 + b"\r\n"


class Trickler:
    """An HTTP endpoint on 127.0.0.1 that reads the request, then answers one byte a
    second: its status line and headers (``part="headers"``), or, after prompt headers, its
    body (``part="body"``). Each byte comes well within any per-read timeout."""

    def __init__(self, part: str):
        self.part = part
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hooks"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        try:
            conn, _address = self.sock.accept()
        except OSError:
            return
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            while len(body) < length:
                body += conn.recv(65536)
            if self.part == "headers":
                slow = HEADERS + b"Content-Length: 2\r\n\r\nok"
            else:
                conn.sendall(HEADERS + b"Content-Length: 600\r\n\r\n")
                slow = b"y" * 600
            for i in range(TRICKLE_S):
                if i and self.stop.wait(1.0):
                    return
                try:
                    conn.sendall(slow[i : i + 1])
                except OSError:
                    return

    def close(self):
        self.stop.set()
        self.sock.close()
        self.thread.join(5)


@pytest.fixture(params=["headers", "body"])
def trickler(request):
    t = Trickler(request.param)
    yield t
    t.close()


def test_a_trickling_endpoint_fails_the_delivery_within_its_deadline(
    alice, trickler, fire, settings
):
    from gpurental.notifications.services import endpoint_create

    settings.WEBHOOKS_TIMEOUT_S = DEADLINE_S
    settings.WEBHOOKS_MAX_ATTEMPTS = 1
    endpoint_create(user=alice, url=trickler.url)
    started = time.monotonic()
    fire(notify, alice, "payment_received", amount=Decimal("10"), reference="r1")
    elapsed = time.monotonic() - started
    assert elapsed < DEADLINE_S + SLACK_S, f"the {trickler.part} trickled on for {elapsed:.1f} s"
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "failed" and delivery.next_attempt_at is None
    attempt = delivery.attempt_log.get()
    assert not attempt.ok and attempt.status_code is None
    assert "timed out" in attempt.error and "1.5 s" in attempt.error
    assert attempt.duration_ms < (DEADLINE_S + SLACK_S) * 1000
    assert Notification.objects.get(channel="webhook").status == "failed"


def test_a_name_that_takes_long_to_resolve_is_within_the_deadline(
    alice, fire, settings, monkeypatch
):
    """A resolver that stalls (its own timeouts and retries can add up to half a minute)
    is part of the attempt: the delivery fails within its deadline."""
    from gpurental.notifications.services import endpoint_create

    settings.WEBHOOKS_TIMEOUT_S = DEADLINE_S
    settings.WEBHOOKS_MAX_ATTEMPTS = 1
    endpoint_create(user=alice, url="http://localhost:9/hooks")  # resolves at once here
    real, released = socket.getaddrinfo, threading.Event()

    def stalling(host, *args, **kwargs):
        if host == "localhost":
            released.wait(TRICKLE_S)  # a resolver waiting on a server that never answers
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", stalling)
    started = time.monotonic()
    try:
        fire(notify, alice, "payment_received", amount=Decimal("10"), reference="r1")
    finally:
        released.set()
    elapsed = time.monotonic() - started
    assert elapsed < DEADLINE_S + SLACK_S, f"the lookup held the worker for {elapsed:.1f} s"
    attempt = WebhookDelivery.objects.get().attempt_log.get()
    assert attempt.status_code is None and "timed out" in attempt.error


def test_an_attempt_stopped_by_the_time_limit_is_recorded_and_retried(alice, endpoint, monkeypatch):
    def stopped(*args, **kwargs):
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(webhooks, "post", stopped)
    notify(alice, "payment_received", amount=Decimal("10"), reference="r1")
    delivery = WebhookDelivery.objects.get()
    with pytest.raises(SoftTimeLimitExceeded):  # the task still ends as stopped
        delivery_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    attempt = delivery.attempt_log.get()
    assert not attempt.ok and "time limit" in attempt.error
    # Backed off as any failure, not left to the lease (the sweep re-queued it every minute).
    assert delivery.status == "pending" and delivery.attempts == 1
    assert delivery.next_attempt_at - attempt.at == timedelta(seconds=10)


def _queue(task_name: str) -> str:
    return app.amqp.router.route({}, task_name)["queue"].name


def test_deliveries_and_emails_run_on_the_notify_queue_not_the_control_queue():
    for task in (tasks.webhook_deliver, tasks.email_send, tasks.webhooks_sweep):
        assert _queue(task.name) == "notify", task.name
    # The launch path stays on control, with nothing of notifications in its way.
    assert _queue(protocol.INSTANCE_REPORT) == "control"
    assert _queue("gpurental.rentals.tasks.reconcile") == "control"
    sweep = next(
        entry
        for entry in app.conf.beat_schedule.values()
        if entry["task"] == tasks.webhooks_sweep.name
    )
    assert sweep["options"]["queue"] == "notify"


def test_the_procfile_runs_a_notify_worker_apart_from_the_control_worker():
    procfile = Path(__file__).resolve().parents[2] / "Procfile"
    lines = dict(line.split(": ", 1) for line in procfile.read_text().splitlines() if line)
    assert re.search(r"-Q control\s", lines["worker"])
    assert re.search(r"-Q notify\s", lines["notify"])
