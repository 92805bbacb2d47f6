"""Keyset pages: every ``next`` link of a list ordered by its own columns is a cursor that
starts where the page ended; the pages add up to the offset list, ties included, and a
cursor never widens what the caller may see."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest

from gpurental.rentals.models import Instance
from tests.api.conftest import assert_error
from tests.factories import InstanceFactory, PlanFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


@pytest.fixture
def instances(alice, bob):
    """Five of alice's and four of bob's, three of alice's made at the same instant."""
    plan = PlanFactory()
    made = []
    for n, (user, minutes) in enumerate(
        [
            (alice, 0),
            (bob, 1),
            (alice, 2),
            (alice, 2),
            (alice, 2),
            (bob, 3),
            (bob, 4),
            (alice, 5),
            (bob, 6),
        ]
    ):
        instance = InstanceFactory(user=user, plan=plan, name=f"i{n}")
        Instance.objects.filter(pk=instance.pk).update(created_at=T0 + timedelta(minutes=minutes))
        made.append(instance.pk)
    return made


def walk(client, url: str, **params) -> tuple[list[str], list[dict]]:
    """Follow ``next`` from the first page to the last: every id, and every page."""
    pages = [client.get(url, params).json()]
    while pages[-1]["next"]:
        assert len(pages) < 20, "the next links go round in circles"
        pages.append(client.get(pages[-1]["next"]).json())
    return [item["id"] for page in pages for item in page["results"]], pages


def test_next_links_are_keyset_pages_that_add_up_to_the_offset_list(as_carol, instances):
    everything = as_carol.get("/api/v1/instances/", {"limit": 200}).json()
    assert everything["count"] == 9 and everything["next"] is None
    ids, pages = walk(as_carol, "/api/v1/instances/", limit=2)
    assert ids == [item["id"] for item in everything["results"]]  # same order, none twice
    assert len(pages) == 5
    assert all("cursor=" in p["next"] and "offset=" not in p["next"] for p in pages[:-1])
    assert all(p["count"] == 9 for p in pages)  # the total, on keyset pages too
    assert all(p["previous"] is None for p in pages[1:])  # keyset pages go forward only
    # Newest first, and the three made at the same instant in id order (the tie-breaker).
    created = {str(i.pk): (i.created_at, str(i.pk)) for i in Instance.objects.all()}
    assert ids == sorted(ids, key=lambda pk: created[pk], reverse=True)


def test_an_offset_still_works_and_its_next_link_continues_with_a_cursor(as_carol, instances):
    everything = [i["id"] for i in as_carol.get("/api/v1/instances/").json()["results"]]
    page = as_carol.get("/api/v1/instances/", {"limit": 3, "offset": 3}).json()
    assert [i["id"] for i in page["results"]] == everything[3:6]
    assert page["previous"] is not None  # an offset page still goes back
    rest = as_carol.get(page["next"]).json()
    assert [i["id"] for i in rest["results"]] == everything[6:9] and rest["next"] is None


def test_a_customers_cursor_pages_hold_only_their_instances(as_alice, as_bob, instances, alice):
    ids, _ = walk(as_alice, "/api/v1/instances/", limit=2)
    assert sorted(ids) == sorted(
        str(pk) for pk in Instance.objects.filter(user=alice).values_list("pk", flat=True)
    )
    # Bob replaying alice's link gets his own list from that position, never hers.
    second = as_alice.get("/api/v1/instances/", {"limit": 2}).json()["next"]
    theirs = as_bob.get(second).json()
    assert theirs["count"] == 4
    assert not {i["id"] for i in theirs["results"]} & set(ids)


@pytest.mark.parametrize(
    "cursor",
    [
        "not base64 at all!",
        "WzFd",  # [1]: one value, two keys
        "WyJ5ZXN0ZXJkYXkiLCJ4Il0",  # ["yesterday", "x"]
        "bnVsbA",  # null
        "W251bGwsbnVsbF0",  # [null, null]
        "W1tdLHt9XQ",  # [[], {}]
        base64.urlsafe_b64encode(b"[" * 100_000).decode(),  # deeper than json can go
    ],
)
def test_a_cursor_that_is_not_one_is_refused_naming_the_field(as_carol, instances, cursor):
    response = as_carol.get("/api/v1/instances/", {"cursor": cursor})
    assert_error(response, 400, "invalid", field="cursor")
