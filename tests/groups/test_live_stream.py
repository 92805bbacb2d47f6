# ruff: noqa: F401, F811 - pytest fixtures imported from tests.groups.surfaces
"""``/ws/groups/<id>/``: the group page's live charts over the websocket machinery. Its
owner (and staff) get the last half hour, then each sample the autoscaler records, with
the replicas and the tick's events; nobody else learns whether the group exists."""

from __future__ import annotations

import uuid

import pytest

from gpurental.groups.services import group_apply, group_tick
from gpurental.telemetry.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from tests.groups.surfaces import SPEC, a10, group_catalog, serving_echo
from tests.websockets import watch

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def group(alice, a10, serving_echo, group_catalog, make_host, sent):
    make_host("node1", a10, count=4)
    return group_apply(user=alice, source=SPEC).group


@pytest.mark.backend
def test_the_owner_gets_the_snapshot_then_each_tick_as_it_is_recorded(alice, group):
    group_tick(group_id=group.pk)  # one sample already recorded before the page opens

    connected, (snapshot, frame) = watch(
        alice, f"/ws/groups/{group.pk}/", then=lambda: group_tick(group_id=group.pk)
    )

    assert connected and snapshot["type"] == "snapshot" and snapshot["status"] == "active"
    assert len(snapshot["samples"]) == 1
    # The first tick launched the minimum and the warm pool (SPEC: 1, and 2 warm).
    assert [r["role"] for r in snapshot["replicas"]] == ["serving", "warm", "warm"]
    assert frame["type"] == "frame" and len(frame["samples"]) == 1
    assert frame["samples"][0]["at"] > snapshot["samples"][0]["at"]
    assert set(frame["samples"][0]) >= {"ready", "rps", "gpu_util", "latency_p99_ms", "queued"}
    assert frame["replicas"] == snapshot["replicas"]


@pytest.mark.backend
def test_a_tick_that_scales_sends_its_event(alice, group):
    connected, (snapshot, frame) = watch(
        alice, f"/ws/groups/{group.pk}/", then=lambda: group_tick(group_id=group.pk)
    )
    assert snapshot["samples"] == [] and snapshot["replicas"] == []
    reasons = [e["reason"] for e in frame["events"]]
    assert any("launched (cold)" in r for r in reasons), reasons
    assert [r["status"] for r in frame["replicas"]] == ["pending"] * 3


def test_staff_may_watch_any_group(carol, group):
    connected, messages = watch(carol, f"/ws/groups/{group.pk}/")
    assert connected and messages[0]["type"] == "snapshot"


def test_another_customer_is_refused_like_for_a_missing_group(bob, group):
    assert watch(bob, f"/ws/groups/{group.pk}/") == (False, CLOSE_NOT_FOUND)
    assert watch(bob, f"/ws/groups/{uuid.uuid4()}/") == (False, CLOSE_NOT_FOUND)
    assert watch(bob, "/ws/groups/not-a-uuid/") == (False, CLOSE_NOT_FOUND)


def test_anonymous_viewers_are_refused(group):
    from django.contrib.auth.models import AnonymousUser

    assert watch(AnonymousUser(), f"/ws/groups/{group.pk}/") == (False, CLOSE_UNAUTHENTICATED)
