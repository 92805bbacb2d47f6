"""POST /api/v1/instances/{id}/connect/?wait_for=running&timeout=…: a link in one request.

As the GET long-poll (test_instance_long_poll.py): real PostgreSQL and the real Redis
channel; the waiting request runs in its own thread, the transition commits in the
test's thread.
"""

from __future__ import annotations

import time

import pytest

from gpurental.rentals.models import Instance
from gpurental.rentals.services.lifecycle import (
    instance_report_failed,
    instance_report_progress,
    instance_report_running,
)
from tests.api.conftest import assert_error
from tests.api.instances.test_instance_long_poll import Waiter

pytestmark = pytest.mark.django_db(transaction=True)


def url(instance: Instance, query: str = "") -> str:
    return f"/api/v1/instances/{instance.pk}/connect/{query}"


class Connecting(Waiter):
    """One waiting connect in the background; remembers when its answer came."""

    def send(self):
        return self.client.post(self.path, {}, format="json")


def connecting(client, instance: Instance) -> Connecting:
    """A connect that waits up to 60 s, started, and listening once this returns."""
    waiter = Connecting(client, url(instance, "?wait_for=running&timeout=60"))
    waiter.start()
    time.sleep(0.5)  # it is listening by now
    assert waiter.is_alive(), "answered before anything changed"
    return waiter


def answer_of(waiter: Connecting):
    waiter.join(timeout=20)
    assert waiter.response is not None, "no answer 20 s after the change (timeout was 60 s)"
    return waiter.response


@pytest.mark.backend
def test_the_link_comes_when_the_instance_starts_running(as_alice, launched):
    waiter = connecting(as_alice, launched)

    changed_at = time.monotonic()
    instance_report_running(instance_id=str(launched.pk), port=40001, container_id="c0ffee")
    response = answer_of(waiter)

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "running"
    assert body["origin"] == f"https://{launched.pk}.gw.localhost"
    assert body["url"].startswith(body["origin"] + "/_gw/enter?t=") and body["expires_at"]
    assert response["Wait-Outcome"] == "reached"
    assert waiter.answered_at > changed_at


def test_a_running_instance_gets_its_link_at_once(as_alice, running):
    started = time.monotonic()
    response = as_alice.post(url(running, "?wait_for=running&timeout=60"), {}, format="json")

    assert response.status_code == 201 and response.json()["status"] == "running"
    assert response["Wait-Outcome"] == "reached"
    assert time.monotonic() - started < 30


@pytest.mark.backend
def test_the_wait_times_out_with_a_conflict_naming_the_current_status(as_alice, launched):
    instance_report_progress(
        instance_id=str(launched.pk), step="pulling", message="pulling the image"
    )
    started = time.monotonic()
    response = as_alice.post(url(launched, "?wait_for=running&timeout=0.5"), {}, format="json")

    error = assert_error(response, 409, "invalid_state", field="status")
    assert "provisioning" in error["message"] and "once it is running" in error["message"]
    assert response["Wait-Outcome"] == "timeout"
    assert time.monotonic() - started >= 0.5


@pytest.mark.backend
def test_the_wait_ends_with_a_conflict_when_the_launch_fails(as_alice, launched):
    waiter = connecting(as_alice, launched)

    instance_report_failed(instance_id=str(launched.pk), reason="image not on this host")
    response = answer_of(waiter)

    error = assert_error(response, 409, "invalid_state", field="status")
    assert "failed" in error["message"]
    assert response["Wait-Outcome"] == "ended"


@pytest.mark.parametrize("wanted", ["stopped", "bogus"])
def test_a_link_waits_for_running_only(as_alice, launched, wanted):
    response = as_alice.post(url(launched, f"?wait_for={wanted}"), {}, format="json")

    error = assert_error(response, 400, "invalid", field="wait_for")
    assert "running" in error["message"]
    assert "Wait-Outcome" not in response


def test_the_wait_for_refusal_reads_in_chinese_when_asked(as_alice, launched):
    response = as_alice.post(
        url(launched, "?wait_for=stopped"), {}, format="json", HTTP_ACCEPT_LANGUAGE="zh-Hans"
    )

    error = assert_error(response, 400, "invalid", field="wait_for")
    assert "'stopped'：获取链接时只能等待 running 状态" in error["message"]


@pytest.mark.parametrize("timeout", ["-1", "121", "soon"])
def test_a_bad_timeout_is_refused(as_alice, launched, timeout):
    response = as_alice.post(
        url(launched, f"?wait_for=running&timeout={timeout}"), {}, format="json"
    )

    assert_error(response, 400, "invalid", field="timeout")


def test_a_port_the_image_does_not_declare_is_refused_before_waiting(as_alice, launched):
    started = time.monotonic()
    response = as_alice.post(
        url(launched, "?wait_for=running&timeout=30"), {"port": 6006}, format="json"
    )

    assert_error(response, 400, "invalid", field="port")
    assert time.monotonic() - started < 10  # refused before any wait


def test_another_customers_instance_is_not_found_and_not_waited_on(as_bob, as_carol, launched):
    for client in (as_bob, as_carol):  # another customer; staff, who see it but may not enter
        started = time.monotonic()
        response = client.post(url(launched, "?wait_for=running&timeout=30"), {}, format="json")

        assert_error(response, 404, "not_found")
        assert "Wait-Outcome" not in response
        assert time.monotonic() - started < 10  # refused before any wait


def test_a_read_only_key_may_not_connect_waiting_or_not(client_for, alice, launched):
    reader = client_for(alice, scopes=["read"])
    for query in ("", "?wait_for=running&timeout=30"):
        started = time.monotonic()
        response = reader.post(url(launched, query), {}, format="json")

        assert_error(response, 403, "permission_denied")
        assert time.monotonic() - started < 10


def test_without_wait_for_connect_answers_at_once_as_before(as_alice, launched):
    refused = as_alice.post(url(launched), {}, format="json")
    error = assert_error(refused, 409, "invalid_state", field="status")
    assert "pending" in error["message"]
    assert "Wait-Outcome" not in refused

    instance_report_running(instance_id=str(launched.pk), port=40001, container_id="c0ffee")
    answer = as_alice.post(url(launched), {}, format="json")
    assert answer.status_code == 201
    assert set(answer.json()) == {"url", "expires_at", "origin", "status"}
    assert answer.json()["status"] == "running"
    assert "Wait-Outcome" not in answer


@pytest.mark.backend
def test_a_waiting_connect_counts_against_the_long_poll_limit(as_alice, launched, settings):
    settings.API_WAITS_PER_USER = 1
    waiter = connecting(as_alice, launched)

    refused = as_alice.post(url(launched, "?wait_for=running&timeout=3"), {}, format="json")
    assert_error(refused, 429, "throttled")
    assert "Wait-Outcome" not in refused

    instance_report_running(instance_id=str(launched.pk), port=40001, container_id="c0ffee")
    assert answer_of(waiter).status_code == 201
