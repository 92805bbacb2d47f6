"""The console's dedicated-host pages: empty and full, booking, one's own leases only."""

from datetime import UTC, datetime, timedelta

import pytest

from gpurental.baremetal import services
from gpurental.baremetal.models import Lease


@pytest.fixture
def node(leasable):
    return leasable("node1", last_heartbeat_at=datetime.now(UTC))


def test_the_page_says_when_nothing_is_offered_or_leased(client, alice):
    client.force_login(alice)
    page = client.get("/dedicated/").content.decode()
    assert "No dedicated hosts are offered yet." in page
    assert "You have no dedicated hosts." in page


def test_book_from_the_form_then_see_launch_and_end(client, alice, whole_host_plan, node, image):
    client.force_login(alice)
    page = client.get("/dedicated/").content.decode()
    assert "Dedicated 4× H100 host" in page and "14.00" in page and "16.00" in page
    response = client.post("/dedicated/", {"plan": "h100-host", "hours": 2})
    lease = Lease.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/dedicated/{lease.pk}/"
    detail = client.get(f"/dedicated/{lease.pk}/").content.decode()
    assert "node1" in detail and "Launch on every GPU" in detail and "End now" in detail
    listing = client.get("/dedicated/").content.decode()
    assert f"/dedicated/{lease.pk}/" in listing
    client.post(f"/dedicated/{lease.pk}/end/")
    lease.refresh_from_db()
    assert lease.status == "ended"


def test_a_refusal_comes_back_on_the_field(client, alice, bob, whole_host_plan, node):
    services.lease_book(user=bob, plan=whole_host_plan, end=datetime.now(UTC) + timedelta(hours=3))
    client.force_login(alice)
    page = client.post("/dedicated/", {"plan": "h100-host", "hours": 2}).content.decode()
    assert "no whole 4× H100 host" in page
    assert Lease.objects.filter(user=alice).count() == 0


def test_another_customer_s_lease_is_a_404(client, alice, bob, whole_host_plan, node):
    lease = services.lease_book(
        user=alice, plan=whole_host_plan, end=datetime.now(UTC) + timedelta(hours=2)
    )
    client.force_login(bob)
    assert client.get(f"/dedicated/{lease.pk}/").status_code == 404
    assert client.post(f"/dedicated/{lease.pk}/end/").status_code == 404
    assert f"/dedicated/{lease.pk}/" not in client.get("/dedicated/").content.decode()
    lease.refresh_from_db()
    assert lease.status == "active"


def test_a_hostile_plan_name_is_shown_as_text(client, alice, whole_host_plan, node):
    whole_host_plan.name = '<script>alert("x")</script>'
    whole_host_plan.save()
    services.lease_book(
        user=alice, plan=whole_host_plan, end=datetime.now(UTC) + timedelta(hours=2)
    )
    client.force_login(alice)
    for url in ("/dedicated/", f"/dedicated/{Lease.objects.get().pk}/"):
        page = client.get(url).content.decode()
        assert '<script>alert("x")' not in page and "&lt;script&gt;" in page
