"""The instance websocket: its owner (and staff) get live events; nobody else learns anything."""

import uuid

import pytest

from gpurental.rentals.services import lifecycle as lc
from gpurental.telemetry.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from tests.websockets import watch

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def instance(alice, a100, make_host, image, sent):
    make_host("node1", a100)
    return lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)


def _run(user, path, *, then=None):
    """Connect as ``user``; returns (connected, close code or first messages)."""
    return watch(user, path, then=then, frames=2)


@pytest.mark.backend
def test_owner_gets_a_snapshot_then_live_events(alice, instance):
    def progress():
        lc.instance_report_progress(
            instance_id=str(instance.pk), step="creating", message="creating container"
        )

    connected, messages = _run(alice, f"/ws/instances/{instance.pk}/", then=progress)
    assert connected
    snapshot = messages[0]
    assert (snapshot["type"], snapshot["status"]) == ("snapshot", "pending")
    assert [(e["kind"], e["status"], e["step"]) for e in snapshot["events"]] == [
        ("transition", "pending", ""),
        ("progress", "", "queued"),
    ]
    assert (messages[1]["type"], messages[1]["kind"], messages[1]["status"]) == (
        "event",
        "transition",
        "provisioning",
    )
    assert (messages[2]["kind"], messages[2]["step"]) == ("progress", "creating")


def test_staff_may_watch_any_instance(carol, instance):
    connected, messages = _run(carol, f"/ws/instances/{instance.pk}/")
    assert connected and messages[0]["type"] == "snapshot"


def test_another_customer_is_refused_like_for_a_missing_instance(bob, instance):
    assert _run(bob, f"/ws/instances/{instance.pk}/") == (False, CLOSE_NOT_FOUND)
    assert _run(bob, f"/ws/instances/{uuid.uuid4()}/") == (False, CLOSE_NOT_FOUND)
    assert _run(bob, "/ws/instances/not-a-uuid/") == (False, CLOSE_NOT_FOUND)


def test_anonymous_is_refused(instance):
    from django.contrib.auth.models import AnonymousUser

    assert _run(AnonymousUser(), f"/ws/instances/{instance.pk}/") == (False, CLOSE_UNAUTHENTICATED)
