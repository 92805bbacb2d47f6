"""THE team permission matrix: who may do what to a team's objects, through the API.

The team "acme" is alice's (owner); dave is admin, erin member, frank viewer; each of
them calls with a key of their own made for the team, so it acts as the team's account
with their role there. bob (outsider) and carol (staff) call with their own keys: nothing
of the team's leaks to bob (the same 404 as for an id that exists nowhere); carol keeps
staff's powers over instances (see tests/api/test_permissions.py) but is no member.

Codes: 200/201/204 done; 400 a refused input (none here); 403 the role is too low (the
message names the role needed); 404 not visible.
"""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from gpurental.accounts.models import CUSTOMER_SCOPES, ApiKeyScope
from gpurental.accounts.services import api_key_create
from gpurental.billing.models import Voucher
from gpurental.billing.selectors import balance_of
from gpurental.billing.services.credits import credit_add
from gpurental.notifications.models import WebhookEndpoint
from gpurental.rentals.models import Instance, Reservation
from gpurental.rentals.services.lifecycle import instance_launch, instance_report_running
from gpurental.rentals.services.reservations import reservation_book
from gpurental.teams.models import Membership
from tests.factories import UserFactory

ROLES = ("owner", "admin", "member", "viewer", "outsider", "staff")


def row(owner, admin, member, viewer, outsider, staff) -> dict:
    return dict(zip(ROLES, (owner, admin, member, viewer, outsider, staff), strict=True))


READ_TEAM = row(200, 200, 200, 200, 404, 200)  # staff see every instance
OPERATE = row(200, 200, 200, 403, 404, 200)
EVERYONE = row(200, 200, 200, 200, 200, 200)  # a list: each sees their account's
# (method, path): codes. {instance}, {reservation}, {gina}: the team's.
MATRIX = {
    ("GET", "instances/"): EVERYONE,
    ("GET", "instances/{instance}/"): READ_TEAM,
    ("POST", "instances/"): row(201, 201, 201, 403, 201, 201),  # outsider/staff: their own
    ("POST", "instances/{instance}/stop/"): OPERATE,
    ("POST", "instances/{instance}/terminate/"): OPERATE,
    # Only the owning account's members (member or higher) get into JupyterLab.
    ("POST", "instances/{instance}/connect/"): row(201, 201, 201, 403, 404, 404),
    ("GET", "me/"): EVERYONE,  # balance: the team's for its members
    ("GET", "payments/"): row(200, 200, 200, 200, 200, 200),
    # A top-up: 409 is "no payment provider here" (no Stripe secrets in tests), answered
    # only once the role is allowed; member and viewer are refused before that.
    ("POST", "payments/"): row(409, 409, 403, 403, 409, 409),
    ("GET", "usage/"): row(200, 200, 200, 200, 200, 200),
    ("POST", "vouchers/redeem/"): row(201, 201, 403, 403, 201, 201),
    ("GET", "invoices/"): EVERYONE,
    ("GET", "reservations/"): EVERYONE,
    ("GET", "reservations/{reservation}/"): READ_TEAM,
    ("POST", "reservations/"): row(201, 201, 201, 403, 201, 201),
    ("POST", "reservations/{reservation}/cancel/"): row(200, 200, 200, 403, 404, 200),
    ("GET", "webhooks/"): EVERYONE,
    ("POST", "webhooks/"): row(201, 201, 403, 403, 201, 201),  # a team's: admins
    ("GET", "teams/acme/members/"): row(200, 200, 200, 200, 404, 404),
    ("POST", "teams/acme/invitations/"): row(201, 201, 403, 403, 404, 404),
    ("PATCH", "teams/acme/members/{gina}/"): row(200, 200, 403, 403, 404, 404),
    ("DELETE", "teams/acme/members/{gina}/"): row(204, 204, 403, 403, 404, 404),
}
CASES = [
    pytest.param(method, path, role, expected, id=f"{method} {path} as {role}")
    for (method, path), codes in MATRIX.items()
    for role, expected in codes.items()
]


def in_an_hour():
    return (timezone.now() + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)


BODIES = {
    ("POST", "instances/"): lambda: {"gpu_model": "A100", "gpu_count": 1, "image": "jupyter-cpu"},
    ("POST", "vouchers/redeem/"): lambda: {"code": "TEAM-WEEK"},
    ("POST", "payments/"): lambda: {"amount": "20.00"},
    ("POST", "webhooks/"): lambda: {"url": "http://127.0.0.1:9/hooks"},
    ("POST", "reservations/"): lambda: {
        "gpu_model": "A100",
        "gpu_count": 1,
        "image": "jupyter-cpu",
        "start": (in_an_hour() + timedelta(days=1)).isoformat(),
        "end": (in_an_hour() + timedelta(days=1, hours=2)).isoformat(),
    },
    ("POST", "teams/acme/invitations/"): lambda: {"email": "new@example.com", "role": "viewer"},
    ("PATCH", "teams/acme/members/{gina}/"): lambda: {"role": "viewer"},
}


@pytest.fixture(autouse=True)
def launches_need_no_credit(settings):
    settings.BILLING_ENFORCE_BALANCE = False
    settings.WEBHOOKS_ALLOW_PRIVATE = True  # the webhook row's URL is on loopback


def key_client(user, team=None, scopes=None) -> APIClient:
    if scopes is None and user.is_staff:
        scopes = [*CUSTOMER_SCOPES, ApiKeyScope.STAFF]
    _, raw = api_key_create(user=user, name="matrix", scopes=scopes, team=team)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture
def world(team, crew, a100, image, node, sent):
    gina = UserFactory(email="gina@example.com")
    gina_row = Membership.objects.create(team=team, user=gina, role="member")
    instance = instance_launch(user=team.account, gpu_model=a100, gpu_count=1, image=image)
    instance_report_running(instance_id=str(instance.pk), port=40001, container_id="c0ffee")
    start = in_an_hour() + timedelta(days=2)
    reservation = reservation_book(
        user=team.account,
        image=image,
        gpu_model=a100,
        gpu_count=1,
        start=start,
        end=start + timedelta(hours=2),
    )
    credit_add(user=team.account, amount=Decimal("123.45"), description="team credit")
    Voucher.objects.create(
        code="TEAM-WEEK", amount=Decimal("10.00"), expires_at=timezone.now() + timedelta(days=30)
    )
    return {"instance": instance, "reservation": reservation, "gina": gina_row}


@pytest.mark.parametrize(("method", "path", "role", "expected"), CASES)
def test_team_permission_matrix(method, path, role, expected, team, crew, world):
    person = crew[role]
    member = role not in ("outsider", "staff")
    client = key_client(person, team=team if member else None)
    url = "/api/v1/" + path.format(
        instance=world["instance"].pk, reservation=world["reservation"].pk, gina=world["gina"].pk
    )
    body = BODIES.get((method, path), lambda: None)()

    response = getattr(client, method.lower())(url, body, format="json")

    assert response.status_code == expected, response.content[:400]
    if expected == 403:
        message = response.json()["error"]["message"]
        assert "role" in message and ("member role" in message or "admin role" in message)
    if expected in (403, 404):  # nothing changed
        assert Instance.objects.get(pk=world["instance"].pk).status == "running"
        assert Reservation.objects.get(pk=world["reservation"].pk).status == "booked"
        assert Membership.objects.get(pk=world["gina"].pk).role == "member"
    if (method, path) == ("GET", "instances/"):
        listed = {r["id"] for r in response.json()["results"]}
        assert (str(world["instance"].pk) in listed) == (role != "outsider")
    if (method, path) in (("POST", "instances/"), ("POST", "reservations/")) and expected == 201:
        model = Instance if path == "instances/" else Reservation
        owner = model.objects.get(pk=response.json()["id"]).user
        assert owner == (team.account if member else person)
    if (method, path) == ("GET", "me/"):
        mine = balance_of(user=team.account if member else person)
        assert Decimal(response.json()["balance"]) == mine
        assert (mine > 0) == member  # the team's credit (less its booking); others have none
    if (method, path) == ("POST", "webhooks/") and expected == 201:
        owner = WebhookEndpoint.objects.get(pk=response.json()["id"]).user
        assert owner == (team.account if member else person)
    if (method, path) == ("POST", "vouchers/redeem/") and expected == 201:
        assert Voucher.objects.get().redemptions.get().user == (team.account if member else person)


def test_a_removed_members_team_key_is_refused_at_once(team, crew, world):
    client = key_client(crew["member"], team=team)
    url = f"/api/v1/instances/{world['instance'].pk}/"
    assert client.get(url).status_code == 200
    Membership.objects.filter(team=team, user=crew["member"]).delete()
    refused = client.get(url)
    assert refused.status_code == 403
    assert "no longer a member" in refused.json()["error"]["message"]
    assert client.post(url + "stop/").status_code == 403


def test_a_demoted_members_key_follows_the_new_role(team, crew, world):
    client = key_client(crew["member"], team=team)
    Membership.objects.filter(team=team, user=crew["member"]).update(role="viewer")
    response = client.post(f"/api/v1/instances/{world['instance'].pk}/stop/")
    assert response.status_code == 403
    assert "needs the member role" in response.json()["error"]["message"]


def test_a_key_for_a_team_one_is_not_in_is_refused(team, crew):
    client = key_client(crew["outsider"])
    response = client.post("/api/v1/api-keys/", {"name": "x", "team": "acme"}, format="json")
    assert response.status_code == 400
    assert "team" in response.json()["error"]["fields"]
