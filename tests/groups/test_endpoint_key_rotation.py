# ruff: noqa: F811 - pytest fixtures imported from tests.api.conftest
"""A group's endpoint key is rotated with an overlap: a new key at once, the old one until
the end the owner chose (default a day, 0: now), then never again (groups.keys); the
gateway honours both during the overlap (gateway.groups.GroupRoute.endpoint_key_opens)."""

from __future__ import annotations

import hashlib
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from gpurental.gateway.groups import GroupRoute, group_route_read
from gpurental.groups.keys import group_endpoint_key_rotate
from gpurental.groups.models import Group, GroupEvent
from gpurental.rentals.exceptions import InvalidTransition, RentalError
from tests.api.conftest import assert_error, client_for  # noqa: F401 - a fixture
from tests.factories import GroupFactory

OLD_KEY = "gpg_" + "o" * 40


def digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


@pytest.fixture
def group(alice):
    return GroupFactory(user=alice, endpoint_key_hash=digest(OLD_KEY))


def opens(group: Group, raw: str, at: float | None = None) -> bool:
    route = group_route_read(str(group.pk))
    return route.endpoint_key_opens(digest(raw), time.time() if at is None else at)


def test_the_old_key_works_beside_the_new_one_until_the_overlap_ends(group, alice):
    now = timezone.now()
    rotated = group_endpoint_key_rotate(group=group, actor=alice, now=now)
    assert rotated.endpoint_key.startswith("gpg_") and rotated.endpoint_key != OLD_KEY
    assert rotated.previous_key_until == now + timedelta(hours=24)  # the default
    during = now.timestamp() + 3600
    after = now.timestamp() + 24 * 3600 + 1
    assert opens(group, rotated.endpoint_key, during) and opens(group, OLD_KEY, during)
    assert opens(group, rotated.endpoint_key, after) and not opens(group, OLD_KEY, after)
    event = GroupEvent.objects.get(group=group, kind=GroupEvent.Kind.KEY)
    assert "rotated" in event.reason and rotated.previous_key_until.isoformat() in event.reason


def test_an_overlap_of_zero_stops_the_old_key_now_and_a_second_rotation_ends_the_oldest(group):
    first = group_endpoint_key_rotate(group=group)
    second = group_endpoint_key_rotate(group=group, overlap=timedelta(hours=1))
    assert not opens(group, OLD_KEY)  # two rotations ago: at most two keys open a group
    assert opens(group, first.endpoint_key) and opens(group, second.endpoint_key)
    third = group_endpoint_key_rotate(group=group, overlap=timedelta(0))
    assert third.previous_key_until is None
    assert not opens(group, second.endpoint_key) and opens(group, third.endpoint_key)


def test_a_rotation_is_refused_past_thirty_days_or_for_a_deleted_group(group):
    with pytest.raises(RentalError) as refused:
        group_endpoint_key_rotate(group=group, overlap=timedelta(days=31))
    assert refused.value.field == "overlap_s"
    Group.objects.filter(pk=group.pk).update(status=Group.Status.DELETED)
    with pytest.raises(InvalidTransition):
        group_endpoint_key_rotate(group=group)
    assert Group.objects.get(pk=group.pk).endpoint_key_hash == digest(OLD_KEY)


def test_a_route_without_a_previous_key_opens_only_with_the_current_one():
    route = GroupRoute("g", 1, digest("a"), 1, 1, (), previous_key_hash="", previous_key_until=0)
    assert route.endpoint_key_opens(digest("a"), time.time())
    assert not route.endpoint_key_opens(digest(""), time.time())


def test_the_owner_rotates_over_the_api_and_nobody_else_can(group, alice, bob, client_for):
    url = f"/api/v1/groups/{group.pk}/rotate-endpoint-key/"
    assert_error(client_for(bob).post(url, {}, format="json"), 404, "not_found")
    too_long = client_for(alice).post(url, {"overlap_s": 40 * 86400}, format="json")
    assert_error(too_long, 400, "invalid", field="overlap_s")
    answer = client_for(alice).post(url, {"overlap_s": 600}, format="json")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert opens(group, body["endpoint_key"]) and opens(group, OLD_KEY)
    assert body["previous_key_until"] is not None
    assert not opens(group, OLD_KEY, time.time() + 601)


def test_the_console_rotates_the_key_and_shows_the_new_one_once(client, alice, bob, group):
    client.force_login(alice)
    url = f"/groups/{group.pk}/rotate-key/"
    page = client.get(f"/groups/{group.pk}/")
    assert 'action="' + url + '"' in page.text and 'value="86400" selected' in page.text
    before = timezone.now()
    page = client.post(url, {"overlap_s": "3600"})
    assert page.status_code == 200
    group.refresh_from_db()
    shown = page.text.split('id="endpoint-key" class="secret">')[1].split("<")[0]
    assert shown.startswith("gpg_") and digest(shown) == group.endpoint_key_hash
    assert group.previous_key_hash == digest(OLD_KEY)
    assert (
        before + timedelta(hours=1)
        <= group.previous_key_until
        <= timezone.now() + timedelta(hours=1)
    )
    assert "The previous key keeps working until" in page.text
    assert shown not in client.get(f"/groups/{group.pk}/").text  # shown once

    refused = client.post(url, {"overlap_s": "not a number"}, follow=True)
    assert "overlap_s: from 0" in refused.text
    group.refresh_from_db()
    assert digest(shown) == group.endpoint_key_hash  # unchanged

    client.force_login(bob)  # someone else's group: not found, nothing rotated
    assert client.post(url, {"overlap_s": "0"}).status_code == 404
    group.refresh_from_db()
    assert digest(shown) == group.endpoint_key_hash
