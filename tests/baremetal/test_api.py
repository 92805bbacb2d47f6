"""Dedicated hosts over the API: plans, booking, launching into a lease, ending it; a
customer sees only their own leases (another's is a 404)."""

from datetime import UTC, datetime, timedelta

import pytest

from gpurental.accounts.models import ApiKeyScope
from gpurental.baremetal.models import Lease
from tests.api.conftest import assert_error, client_for  # noqa: F401 - fixture

URL = "/api/v1/leases/"


@pytest.fixture
def as_alice(client_for, alice):  # noqa: F811
    return client_for(alice)


@pytest.fixture
def as_bob(client_for, bob):  # noqa: F811
    return client_for(bob)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@pytest.fixture
def node(leasable):
    return leasable("node1", last_heartbeat_at=datetime.now(UTC))


def test_plans_are_listed_with_their_rates(as_alice, whole_host_plan):
    response = as_alice.get("/api/v1/dedicated-plans/")
    assert response.status_code == 200
    (plan,) = response.json()
    assert (plan["slug"], plan["gpu_count"], plan["vcpus"]) == ("h100-host", 4, 64)
    assert plan["rates"] == {"peak": "20.00", "off_peak": "14.00", "reserved": "16.00"}


def test_book_now_launch_into_it_and_end_it(as_alice, whole_host_plan, node, image, sent):
    end = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    response = as_alice.post(URL, {"plan": "h100-host", "end": iso(end)}, format="json")
    assert response.status_code == 201, response.content
    lease = response.json()
    assert (lease["host"], lease["status"], lease["reserved"]) == ("node1", "active", False)
    assert lease["end"] == iso(end)

    launched = as_alice.post(f"{URL}{lease['id']}/launch/", {"image": image.slug}, format="json")
    assert launched.status_code == 201, launched.content
    assert launched.json()["gpu_count"] == 4

    ended = as_alice.post(f"{URL}{lease['id']}/end/")
    assert ended.status_code == 200, ended.content
    assert ended.json()["status"] == "ended"
    assert [e["to_status"] for e in ended.json()["events"]] == ["booked", "active", "ended"]


def test_another_customer_s_lease_is_a_404(as_alice, as_bob, alice, whole_host_plan, node):
    end = datetime.now(UTC) + timedelta(hours=2)
    lease_id = as_alice.post(URL, {"plan": "h100-host", "end": iso(end)}, format="json").json()[
        "id"
    ]
    assert as_bob.get(URL).json()["results"] == []
    for response in (
        as_bob.get(f"{URL}{lease_id}/"),
        as_bob.post(f"{URL}{lease_id}/end/"),
        as_bob.post(f"{URL}{lease_id}/cancel/"),
    ):
        assert_error(response, 404, "not_found")
    assert Lease.objects.get(pk=lease_id).status == "active"


def test_bad_input_is_a_400_naming_the_field(as_alice, whole_host_plan, node):
    assert_error(
        as_alice.post(URL, {"plan": "nope", "end": "2030-01-01T00:00Z"}),
        400,
        "invalid",
        field="plan",
    )
    naive = {"plan": "h100-host", "end": "2030-01-01T00:00"}
    assert_error(as_alice.post(URL, naive), 400, "invalid", field="end")
    past = {"plan": "h100-host", "start": "2020-01-01T00:00Z", "end": "2020-01-01T05:00Z"}
    assert_error(as_alice.post(URL, past), 400, "invalid", field="start")
    # A NUL byte never reaches PostgreSQL (which would refuse the query: a 500).
    nul = {"plan": "h100\x00host", "end": "2030-01-01T00:00Z"}
    assert_error(as_alice.post(URL, nul, format="json"), 400, "invalid", field="plan")


def test_no_free_host_is_a_409(as_alice, as_bob, whole_host_plan, node):
    end = iso(datetime.now(UTC) + timedelta(hours=2))
    assert as_alice.post(URL, {"plan": "h100-host", "end": end}).status_code == 201
    assert_error(as_bob.post(URL, {"plan": "h100-host", "end": end}), 409, "no_capacity")


def test_a_read_only_key_cannot_book(client_for, alice, whole_host_plan, node):  # noqa: F811
    reader = client_for(alice, scopes=[ApiKeyScope.READ])
    end = iso(datetime.now(UTC) + timedelta(hours=2))
    assert reader.get(URL).status_code == 200
    assert_error(reader.post(URL, {"plan": "h100-host", "end": end}), 403, "permission_denied")
