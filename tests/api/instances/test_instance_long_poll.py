"""GET /api/v1/instances/{id}/?wait_for=…&timeout=…: a long-poll that answers on the change.

Real PostgreSQL and the real Redis channel layer: the waiting request runs in its own
thread (as a web worker's thread would), the transition commits in the test's thread.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis

from gpurental.rentals.models import Instance
from gpurental.rentals.services.lifecycle import instance_report_failed, instance_report_running
from tests.api.conftest import assert_error

pytestmark = pytest.mark.django_db(transaction=True)


def url(instance: Instance, query: str = "") -> str:
    return f"/api/v1/instances/{instance.pk}/{query}"


class Waiter(threading.Thread):
    """One long-poll request in the background; remembers when its answer came."""

    def __init__(self, client, path: str):
        super().__init__(daemon=True)
        self.client, self.path = client, path
        self.response = None
        self.answered_at: float | None = None

    def send(self):
        return self.client.get(self.path)

    def run(self) -> None:
        try:
            self.response = self.send()
            self.answered_at = time.monotonic()
        finally:
            from django.db import connection

            connection.close()


@pytest.fixture
def warnings(monkeypatch):
    """What gpurental.rentals.events logs as warnings (whatever the logging setup)."""
    seen: list[str] = []
    monkeypatch.setattr(
        "gpurental.rentals.events.log.warning", lambda msg, *args, **kw: seen.append(msg % args)
    )
    return seen


@pytest.mark.backend
def test_the_long_poll_answers_when_the_instance_starts_running(as_alice, launched, warnings):
    waiter = Waiter(as_alice, url(launched, "?wait_for=running&timeout=60"))
    waiter.start()
    time.sleep(0.5)  # it is listening by now
    assert waiter.is_alive(), "answered before anything changed"

    changed_at = time.monotonic()
    instance_report_running(instance_id=str(launched.pk), port=40001, container_id="c0ffee")
    waiter.join(timeout=20)

    assert waiter.response is not None, "no answer 20 s after the change (timeout was 60 s)"
    assert waiter.response.status_code == 200
    assert waiter.response.json()["status"] == "running"
    assert waiter.response["Wait-Outcome"] == "reached"
    assert waiter.answered_at > changed_at
    assert warnings == []  # woken through Redis, not by polling the database


def test_without_redis_the_long_poll_falls_back_to_reading_the_database(
    as_alice, launched, monkeypatch, warnings
):
    def broken():
        raise redis.ConnectionError("redis is down")

    monkeypatch.setattr("gpurental.rentals.events.state_redis", broken)
    waiter = Waiter(as_alice, url(launched, "?wait_for=running&timeout=60"))
    waiter.start()
    time.sleep(0.5)
    assert waiter.is_alive()

    instance_report_running(instance_id=str(launched.pk), port=40001, container_id="c0ffee")
    waiter.join(timeout=20)

    assert waiter.response is not None and waiter.response.json()["status"] == "running"
    assert waiter.response["Wait-Outcome"] == "reached"
    assert any("waiting by polling" in line for line in warnings)


@pytest.mark.backend
def test_the_long_poll_also_ends_when_the_launch_fails(as_alice, launched):
    waiter = Waiter(as_alice, url(launched, "?wait_for=running&timeout=60"))
    waiter.start()
    time.sleep(0.5)
    assert waiter.is_alive()

    instance_report_failed(instance_id=str(launched.pk), reason="image not on this host")
    waiter.join(timeout=20)

    assert waiter.response is not None
    body = waiter.response.json()
    assert body["status"] == "failed" and "image not on this host" in body["status_reason"]
    assert waiter.response["Wait-Outcome"] == "ended"


def test_the_long_poll_answers_at_once_when_the_status_is_already_there(as_alice, running):
    started = time.monotonic()
    response = as_alice.get(url(running, "?wait_for=running&timeout=60"))

    assert response.status_code == 200 and response.json()["status"] == "running"
    assert response["Wait-Outcome"] == "reached"
    assert time.monotonic() - started < 30


@pytest.mark.backend
def test_the_long_poll_times_out_cleanly_with_the_current_state(as_alice, launched):
    started = time.monotonic()
    response = as_alice.get(url(launched, "?wait_for=running&timeout=0.5"))
    waited = time.monotonic() - started

    assert response.status_code == 200
    assert response.json()["status"] == "pending"
    assert response["Wait-Outcome"] == "timeout"
    assert waited >= 0.5


def test_a_bad_wait_for_is_refused_naming_the_field_and_the_choices(as_alice, launched):
    response = as_alice.get(url(launched, "?wait_for=booting"))

    error = assert_error(response, 400, "invalid", field="wait_for")
    assert "'booting' is not an instance status" in error["message"]
    assert "running" in error["message"]


@pytest.mark.parametrize("timeout", ["-1", "121", "soon"])
def test_a_bad_timeout_is_refused(as_alice, launched, timeout):
    response = as_alice.get(url(launched, f"?wait_for=running&timeout={timeout}"))

    assert_error(response, 400, "invalid", field="timeout")


def test_another_customers_instance_is_not_found_and_not_waited_on(as_bob, launched):
    started = time.monotonic()
    response = as_bob.get(url(launched, "?wait_for=running&timeout=30"))

    assert_error(response, 404, "not_found")
    assert time.monotonic() - started < 10  # refused before any wait


def test_without_wait_for_the_detail_is_as_before(as_alice, launched):
    response = as_alice.get(url(launched))

    assert response.status_code == 200 and "Wait-Outcome" not in response


@pytest.mark.backend
def test_one_customer_cannot_keep_more_than_the_limit_of_long_polls_waiting(
    as_alice, launched, settings
):
    settings.API_WAITS_PER_USER = 1
    waiter = Waiter(as_alice, url(launched, "?wait_for=running&timeout=3"))
    waiter.start()
    time.sleep(0.5)
    assert waiter.is_alive()

    refused = as_alice.get(url(launched, "?wait_for=running&timeout=3"))
    error = assert_error(refused, 429, "throttled")
    assert "1 long-polls of yours are already waiting" in error["message"]
    assert as_alice.get(url(launched)).status_code == 200  # a plain read is not a wait

    waiter.join(timeout=20)
    assert waiter.response["Wait-Outcome"] == "timeout"
    again = as_alice.get(url(launched, "?wait_for=running&timeout=0.2"))
    assert again.status_code == 200  # the slot is free again
