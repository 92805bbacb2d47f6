"""API keys with scopes: every scope against every area, staff powers only with the staff
scope (which only staff can give), expiry, and revocation by a password reset."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.tokens import default_token_generator
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from gpurental.accounts.models import ApiKey
from tests.api.conftest import assert_error

START = (timezone.now() + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
# (method, path, body): one request per area and kind, and the scopes that allow it.
REQUESTS = {
    "read catalog": ("get", "/api/v1/plans/", None),
    "read account": ("get", "/api/v1/me/", None),
    "list instances": ("get", "/api/v1/instances/", None),
    "launch": ("post", "/api/v1/instances/", {"gpu_model": "A100", "image": "jupyter-cpu"}),
    "list reservations": ("get", "/api/v1/reservations/", None),
    "book": (
        "post",
        "/api/v1/reservations/",
        {
            "gpu_model": "A100",
            "gpu_count": 1,
            "image": "jupyter-cpu",
            "start": START.isoformat(),
            "end": (START + timedelta(hours=1)).isoformat(),
        },
    ),
    "usage": ("get", "/api/v1/usage/", None),
    "invoices": ("get", "/api/v1/invoices/", None),
}
ALLOWED = {
    "read": {"read catalog", "read account", "list instances", "list reservations"},
    "instances": {"read catalog", "read account", "list instances", "launch"},
    "reservations": {"read catalog", "read account", "list reservations", "book"},
    "billing": {"read catalog", "read account", "usage", "invoices"},
}


@pytest.fixture
def world(node, image, alice, settings):
    from gpurental.billing.services import credit_add

    settings.BILLING_ENFORCE_BALANCE = False
    credit_add(user=alice, amount=100)


@pytest.mark.parametrize("scope", sorted(ALLOWED))
def test_each_scope_allows_its_area_and_nothing_else(scope, world, client_for, alice, sent):
    client = client_for(alice, scopes=[scope])
    for name, (method, path, body) in REQUESTS.items():
        response = getattr(client, method)(path, body, format="json")
        if name in ALLOWED[scope]:
            assert response.status_code in (200, 201), (scope, name, response.content[:300])
        else:
            error = assert_error(response, 403, "permission_denied")
            assert "may not do that" in error["message"] and scope in error["message"]


def test_a_key_with_every_customer_scope_does_everything_a_customer_does(
    world, client_for, alice, sent
):
    client = client_for(alice)  # the default: every customer scope
    for name, (method, path, body) in REQUESTS.items():
        response = getattr(client, method)(path, body, format="json")
        assert response.status_code in (200, 201), (name, response.content[:300])


def test_staff_powers_need_the_staff_scope(world, client_for, carol, alice, sent):
    from gpurental.catalog.models import GPUModel, ImageTemplate
    from gpurental.rentals.services.lifecycle import instance_launch

    theirs = instance_launch(
        user=alice,
        image=ImageTemplate.objects.get(slug="jupyter-cpu"),
        gpu_model=GPUModel.objects.get(short_name="A100"),
        gpu_count=1,
    )
    plain = client_for(carol, scopes=["read", "instances"])
    assert plain.get("/api/v1/me/").json()["is_staff"] is False
    assert plain.get("/api/v1/instances/").json()["count"] == 0  # only carol's own
    assert_error(plain.get(f"/api/v1/instances/{theirs.pk}/"), 404, "not_found")
    staff = client_for(carol, scopes=["read", "instances", "staff"])
    assert staff.get("/api/v1/me/").json()["is_staff"] is True
    assert staff.get(f"/api/v1/instances/{theirs.pk}/").status_code == 200


def test_only_staff_can_give_the_staff_scope(client_for, alice, carol, db):
    customer = client_for(alice)
    error = assert_error(
        customer.post("/api/v1/api-keys/", {"name": "x", "scopes": ["staff"]}, format="json"),
        400,
        "invalid",
        field="scopes",
    )
    assert "no staff scope to give" in error["message"]
    from rest_framework.test import APIClient

    session = APIClient()
    session.force_login(alice)  # the console: no key, the user's own rights
    error = assert_error(
        session.post("/api/v1/api-keys/", {"name": "x", "scopes": ["staff"]}, format="json"),
        400,
        "invalid",
        field="scopes",
    )
    assert "staff users only" in error["message"]
    # Staff through a key without the staff scope cannot give it either.
    plain = client_for(carol, scopes=["read", "account"])
    assert_error(
        plain.post("/api/v1/api-keys/", {"name": "x", "scopes": ["read", "staff"]}, format="json"),
        400,
        "invalid",
        field="scopes",
    )
    staff = client_for(carol)  # staff test keys carry the staff scope
    made = staff.post("/api/v1/api-keys/", {"name": "ops", "scopes": ["staff"]}, format="json")
    assert made.status_code == 201 and made.json()["scopes"] == ["staff"]


def test_a_key_cannot_make_a_key_with_more_than_it_has(client_for, alice, db):
    narrow = client_for(alice, scopes=["read", "account"])
    error = assert_error(
        narrow.post("/api/v1/api-keys/", {"name": "x", "scopes": ["billing"]}, format="json"),
        400,
        "invalid",
        field="scopes",
    )
    assert "no billing scope to give" in error["message"]
    made = narrow.post("/api/v1/api-keys/", {"name": "x"}, format="json")
    assert made.status_code == 201 and made.json()["scopes"] == ["account", "read"]


def test_an_expired_key_is_refused_like_an_unknown_one(client_for, alice, db):
    client = client_for(alice)
    assert client.get("/api/v1/me/").status_code == 200
    ApiKey.objects.filter(pk=client.api_key.pk).update(expires_at=timezone.now())
    error = assert_error(client.get("/api/v1/me/"), 401, "authentication_failed")
    assert "expired" in error["message"]
    made = client_for(alice).post(
        "/api/v1/api-keys/", {"name": "x", "expires_at": "2000-01-01T00:00:00Z"}, format="json"
    )
    assert_error(made, 400, "invalid", field="expires_at")


def test_a_password_reset_revokes_the_users_keys(client, client_for, alice, db):
    api = client_for(alice)
    assert api.get("/api/v1/me/").status_code == 200
    uid = urlsafe_base64_encode(force_bytes(alice.pk))
    token = default_token_generator.make_token(alice)
    page = client.get(f"/password/reset/{uid}/{token}/", follow=True)
    form_url = page.redirect_chain[-1][0]
    done = client.post(
        form_url,
        {"new_password1": "a-brand-new-pass-phrase", "new_password2": "a-brand-new-pass-phrase"},
    )
    assert done.status_code == 302
    assert_error(api.get("/api/v1/me/"), 401, "authentication_failed")
    assert ApiKey.objects.filter(user=alice, revoked_at__isnull=True).count() == 0


def test_adding_an_ssh_key_needs_the_account_scope(client_for, alice):
    """An SSH key is a credential (a way into every instance): a read-only key (a
    dashboard's) may list the keys but not add one, nor may a key that only manages
    instances; a key with the account scope may."""
    from tests.gateway.test_ssh_keys import public_line

    for scopes in (["read"], ["read", "instances"]):
        reader = client_for(alice, scopes=scopes)
        assert reader.get("/api/v1/ssh-keys/").status_code == 200
        refused = reader.post("/api/v1/ssh-keys/", {"public_key": public_line()}, format="json")
        assert_error(refused, 403, "permission_denied")
        assert "needs the account scope" in refused.json()["error"]["message"]
    owner = client_for(alice, scopes=["account"])
    added = owner.post("/api/v1/ssh-keys/", {"public_key": public_line()}, format="json")
    assert added.status_code == 201, added.content
    assert alice.ssh_keys.count() == 1


# --- a read-only key changes nothing: every route that changes something, walked --------

# The account area: each write here needs the account scope.
ACCOUNT_WRITES = {
    "api-keys/",
    "api-keys/<id>/",
    "ssh-keys/",
    "ssh-keys/<id>/",
    "webhooks/",
    "webhooks/<id>/",
    "webhook-deliveries/<id>/resend/",
    "notification-preferences/<event>/",
    "me/log-out-everywhere/",
}
UNSAFE = ("post", "put", "patch", "delete")
GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)|<(?:\w+:)?(\w+)>")


def _routes():
    """(path with <names>, path to request, view class, [unsafe methods]) of every API
    route that changes something."""
    from django.urls import URLResolver

    from gpurental.api import urls

    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            else:
                yield prefix + str(pattern.pattern), pattern.callback

    samples = {"slug": "some-team", "member": "1", "event": "instance_running"}
    for raw, callback in walk(urls.v1):
        view = getattr(callback, "cls", None) or callback.view_class
        actions = getattr(callback, "actions", None)
        # A viewset route maps methods to actions; a plain view has a method per verb.
        methods = list(actions) if actions else [m for m in UNSAFE if hasattr(view, m)]
        unsafe = [m for m in methods if m in UNSAFE]
        if not unsafe:
            continue
        shape = GROUP.sub(
            lambda m: f"<{'id' if (m[1] or m[2]) in ('pk', 'invitation') else (m[1] or m[2])}>",
            raw.strip("^$"),
        )
        path = GROUP.sub(lambda m: samples.get(m[1] or m[2], str(uuid.uuid4())), raw.strip("^$"))
        yield shape, "/api/v1/" + path, view, unsafe


def test_a_read_only_key_changes_nothing_and_is_told_the_scope_it_needs(client_for, alice):
    """Every route of the API that changes something, with every method that does: a
    read-only key gets 403 naming the scope it lacks; in the account area, the account
    scope. (The walk covers routes added later: a new write needs a scope from the start.)"""
    reader = client_for(alice, scopes=["read"])
    seen = set()
    for shape, path, view, methods in _routes():
        seen.add(shape)
        for method in methods:
            answer = reader.generic(method.upper(), path, "{}", content_type="application/json")
            error = assert_error(answer, 403, "permission_denied")
            assert "scope" in error["message"], (method, path, error)
            if shape in ACCOUNT_WRITES:
                assert "needs the account scope" in error["message"], (method, path, error)
                assert getattr(view, "scope_area", None) == "account", shape
    assert seen >= ACCOUNT_WRITES, sorted(ACCOUNT_WRITES - seen)


def test_old_full_keys_keep_changing_the_account_and_narrow_ones_do_not(db, alice):
    """The migration that brought the account scope gave it to the keys that held every
    customer scope (the default), so that they go on as before, and to no narrower key."""
    from importlib import import_module

    from django.apps import apps as django_apps

    from gpurental.accounts.services import api_key_create

    migration = import_module(
        "gpurental.accounts.migrations.0008_credentials_generation_and_account_scope"
    )
    full, _ = api_key_create(user=alice, name="full", scopes=migration.FULL_BEFORE)
    narrow, _ = api_key_create(user=alice, name="narrow", scopes=["read", "instances"])
    migration.full_keys_keep_changing_the_account(django_apps, None)
    full.refresh_from_db()
    narrow.refresh_from_db()
    assert full.scopes == sorted([*migration.FULL_BEFORE, "account"])
    assert narrow.scopes == ["instances", "read"]
