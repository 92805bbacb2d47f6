"""The console (and the downloads) on a team's objects: an outsider gets the same 404 as
for an object that does not exist on every URL, GET and POST; a viewer reads and changes
nothing; members download the team's invoices while acting for it."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from gpurental.baremetal import services as baremetal
from gpurental.billing.models import Invoice, InvoiceLine, Payment, PaymentStatus
from gpurental.billing.selectors import balance_of
from gpurental.billing.services.credits import credit_add
from gpurental.billing.services.invoicing import invoice_issue
from gpurental.groups.services import group_apply
from gpurental.notifications.models import Notification, WebhookDelivery, WebhookEndpoint
from gpurental.rentals.models import Instance, InstanceStatus, Reservation
from gpurental.rentals.services.lifecycle import instance_launch, instance_report_running
from gpurental.rentals.services.reservations import reservation_book
from gpurental.teams.acting import SESSION_KEY
from gpurental.teams.models import Membership
from tests.baremetal.conftest import h100, leasable, whole_host_plan  # noqa: F401
from tests.groups.surfaces import SPEC, a10, group_catalog, serving_echo  # noqa: F401


def _switch(client, slug):
    return client.post("/teams/switch/", {"team": slug, "next": "/dashboard/"})


@pytest.fixture
def world(team, a100, image, node, sent, leasable, whole_host_plan, a10, group_catalog):  # noqa: F811
    account = team.account
    instance = instance_launch(
        user=account, gpu_model=a100, gpu_count=1, image=image, name="team-secret-nb"
    )
    instance_report_running(instance_id=str(instance.pk), port=40001, container_id="c0ffee")
    start = (timezone.now() + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    reservation = reservation_book(
        user=account,
        image=image,
        gpu_model=a100,
        gpu_count=1,
        start=start,
        end=start + timedelta(hours=2),
    )
    leasable("node-lease")
    lease = baremetal.lease_book(
        user=account, plan=whole_host_plan, end=datetime.now(UTC) + timedelta(hours=2)
    )
    group = group_apply(user=account, source=SPEC).group
    endpoint = WebhookEndpoint.objects.create(
        user=account, url="https://hooks.example.com/x", description="team hook", secret="whsec_t"
    )
    notification = Notification.objects.create(
        user=account, event="payment_received", channel="webhook", subject="s"
    )
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, notification=notification, event="payment_received", body="{}"
    )
    entry = credit_add(user=account, amount=Decimal("50.00"), description="team credit")
    payment = Payment.objects.create(
        user=account,
        provider="stripe",
        amount=Decimal("50.00"),
        currency="USD",
        status=PaymentStatus.PAID,
        paid_at=timezone.now(),
        ledger_entry=entry,
    )
    invoice = Invoice.objects.create(
        user=account, period_start=date(2026, 10, 1), period_end=date(2026, 11, 1)
    )
    InvoiceLine.objects.create(
        invoice=invoice,
        rate_kind="peak",
        description="team-secret-line",
        gpu_hours=Decimal("4"),
        amount=Decimal("12.00"),
    )
    invoice = invoice_issue(invoice=invoice, now=datetime(2026, 11, 2, 9, tzinfo=UTC))
    return {
        "instance": instance.pk,
        "reservation": reservation.pk,
        "lease": lease.pk,
        "group": group.pk,
        "endpoint": endpoint.pk,
        "delivery": delivery.pk,
        "payment": payment.pk,
        "invoice": invoice.pk,
    }


GETS = [
    "/instances/{instance}/",
    "/instances/{instance}/open/",
    "/reservations/{reservation}/",
    "/dedicated/{lease}/",
    "/groups/{group}/",
    "/groups/{group}/samples/",
    "/notifications/webhooks/{endpoint}/",
    "/credit/payments/{payment}/",
    "/billing/invoices/{invoice}.pdf",
    "/billing/invoices/{invoice}.csv",
    "/telemetry/instances/{instance}/history/?window=1h",
    "/teams/acme/",
]
POSTS = [
    ("/instances/{instance}/stop/", {}),
    ("/instances/{instance}/terminate/", {}),
    ("/instances/{instance}/idle-policy/", {"idle_stop_minutes": "5"}),
    ("/reservations/{reservation}/cancel/", {}),
    ("/reservations/{reservation}/relaunch/", {}),
    ("/dedicated/{lease}/end/", {}),
    ("/dedicated/{lease}/cancel/", {}),
    ("/groups/{group}/delete/", {}),
    ("/notifications/webhooks/{endpoint}/delete/", {}),
    ("/notifications/deliveries/{delivery}/resend/", {}),
    ("/teams/acme/", {"action": "invite", "email": "bob@example.com", "role": "owner"}),
]


def _nothing_changed(team, world):
    assert Instance.objects.get(pk=world["instance"]).status == InstanceStatus.RUNNING
    assert Reservation.objects.get(pk=world["reservation"]).status == "booked"
    assert WebhookEndpoint.objects.filter(pk=world["endpoint"]).exists()
    assert WebhookDelivery.objects.get(pk=world["delivery"]).attempts == 0
    assert not team.invitations.exists()


@pytest.mark.parametrize("acting", ["own account", "switcher forged to the team"])
def test_an_outsider_gets_404_on_every_team_object_url(client, bob, team, world, acting):
    client.force_login(bob)
    if acting != "own account":
        # Bob cannot choose acme in the switcher (404); even a session that names it is
        # ignored, since the membership is read again on every request.
        assert _switch(client, "acme").status_code == 404
        session = client.session
        session[SESSION_KEY] = team.pk
        session.save()
    for path in GETS:
        response = client.get(path.format(**world))
        assert response.status_code == 404, (path, response.status_code)
    for path, body in POSTS:
        response = client.post(path.format(**world), body)
        assert response.status_code == 404, (path, response.status_code)
    _nothing_changed(team, world)
    for page in (
        "/dashboard/",
        "/reservations/",
        "/dedicated/",
        "/groups/",
        "/credit/",
        "/billing/invoices/",
        "/notifications/webhooks/",
    ):
        text = client.get(page).text
        assert "team-secret" not in text and "team hook" not in text, page
        assert str(world["instance"]) not in text and str(world["lease"]) not in text, page


def test_the_api_gives_an_outsider_404_on_the_team_invoice_and_its_downloads(team, bob, world):
    from tests.teams_review.conftest import key_client

    client = key_client(bob)
    for suffix in ("", "pdf/", "csv/"):
        response = client.get(f"/api/v1/invoices/{world['invoice']}/{suffix}")
        assert response.status_code == 404, (suffix, response.status_code)
    assert client.get(f"/api/v1/payments/{world['payment']}/").status_code == 404
    assert client.get(f"/api/v1/leases/{world['lease']}/").status_code == 404
    assert client.get(f"/api/v1/groups/{world['group']}/").status_code == 404
    assert client.get(f"/api/v1/webhooks/{world['endpoint']}/").status_code == 404


@pytest.mark.parametrize("person", ["frank", "erin"])
def test_members_acting_for_the_team_download_its_invoice(client, team, world, person, request):
    client.force_login(request.getfixturevalue(person))
    url = f"/billing/invoices/{world['invoice']}"
    assert client.get(url + ".pdf").status_code == 404  # acting for themselves: not theirs
    _switch(client, "acme")
    pdf = client.get(url + ".pdf")
    assert pdf.status_code == 200 and pdf["Content-Type"] == "application/pdf"
    csv = client.get(url + ".csv")
    assert csv.status_code == 200 and "team-secret-line" in csv.text


VIEWER_REFUSED = [
    ("/instances/{instance}/stop/", {}),
    ("/instances/{instance}/idle-policy/", {"idle_stop_minutes": "5"}),
    ("/reservations/{reservation}/cancel/", {}),
    ("/dedicated/{lease}/end/", {}),
    ("/groups/{group}/delete/", {}),
    ("/launch/", {"gpu_model": "A100", "gpu_count": 1, "image": "jupyter-cpu"}),
    ("/dedicated/", {"plan": "h100-host", "hours": 2}),
    ("/groups/", {"apply": "1", "source": "{}", "format": "json"}),
    ("/notifications/webhooks/", {"url": "https://hooks.example.com/y"}),
    ("/notifications/webhooks/{endpoint}/delete/", {}),
    ("/notifications/deliveries/{delivery}/resend/", {}),
    ("/credit/top-up/", {"amount": "20.00"}),
    ("/credit/redeem/", {"code": "NOPE"}),
    ("/credit/details/", {"company": "Viewer's Corp"}),
    ("/credit/auto-top-up/card/remove/", {}),
]


def test_a_viewer_acting_for_the_team_changes_nothing(client, team, frank, world):
    client.force_login(frank)
    _switch(client, "acme")
    for path, body in VIEWER_REFUSED:
        response = client.post(path.format(**world), body)
        assert response.status_code == 403, (path, response.status_code)
    _nothing_changed(team, world)
    team.account.refresh_from_db()
    assert team.account.company != "Viewer's Corp"
    assert balance_of(user=team.account) > 0
    assert WebhookEndpoint.objects.filter(user=team.account).count() == 1


def test_a_member_may_not_touch_the_teams_billing(client, team, erin, world):
    client.force_login(erin)
    _switch(client, "acme")
    for path, body in VIEWER_REFUSED[-6:]:
        assert client.post(path.format(**world), body).status_code == 403, path
    _nothing_changed(team, world)


def test_staff_acting_for_a_team_still_stop_any_instance_from_the_fleet_page(
    client, carol, bob, team, a100, image, node, sent
):
    """Found by this review (fixed in a38ff1e), a gap: fleet_instance_stop
    looks the instance up with _own_or_404, which now uses the acting account. A staff
    member who is also in a team and has it chosen in the switcher gets 404 stopping a
    customer's instance from /staff/fleet/."""
    Membership.objects.create(team=team, user=carol, role="member")
    instance = instance_launch(user=bob, gpu_model=a100, gpu_count=1, image=image)
    instance_report_running(instance_id=str(instance.pk), port=40002, container_id="b0b")
    client.force_login(carol)
    _switch(client, "acme")

    response = client.post(f"/staff/instances/{instance.pk}/stop/")

    assert response.status_code == 302
    assert Instance.objects.get(pk=instance.pk).status == InstanceStatus.STOPPING


def test_staff_outside_the_team_cannot_choose_it_in_the_switcher(client, carol, team, world):
    client.force_login(carol)
    assert _switch(client, "acme").status_code == 404
    assert client.get("/teams/acme/").status_code == 404


def test_the_api_through_a_console_session_keeps_the_viewers_role(client, team, frank, world):
    """The API also answers the console's session: acting for the team there, a viewer's
    role holds as it does for a key."""
    client.force_login(frank)
    _switch(client, "acme")
    listed = client.get("/api/v1/instances/")
    assert listed.status_code == 200
    assert str(world["instance"]) in {row["id"] for row in listed.json()["results"]}
    assert client.post(f"/api/v1/instances/{world['instance']}/stop/").status_code == 403
    _nothing_changed(team, world)


def test_a_hostile_team_name_is_text_on_every_page_that_shows_it(client, alice, team):
    team.name = '<script>alert("acme")</script>'
    team.save(update_fields=["name"])
    client.force_login(alice)
    _switch(client, "acme")
    for page in ("/dashboard/", "/teams/", "/teams/acme/", "/keys/", "/credit/"):
        text = client.get(page).text
        assert '<script>alert("acme")</script>' not in text, page
    assert "&lt;script&gt;" in client.get("/teams/").text
