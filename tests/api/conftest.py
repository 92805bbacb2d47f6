"""API test helpers: clients authenticated with an API key, instances in a given state."""

import pytest
from rest_framework.test import APIClient

from gpurental.accounts.models import CUSTOMER_SCOPES, ApiKeyScope
from gpurental.accounts.services import api_key_create
from gpurental.rentals.models import Instance
from gpurental.rentals.services.lifecycle import (
    instance_launch,
    instance_report_running,
    instance_report_stopped,
    instance_stop,
)

ERROR_KEYS = {"code", "message", "fields"}


def assert_error(response, status: int, code: str, *, field: str | None = None) -> dict:
    """The one error shape, with this status and code (and this field at fault)."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == ERROR_KEYS, error
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["fields"], dict), error
    if field is not None:
        assert field in error["fields"], error
        if status == 400:  # input errors name the field in the sentence too
            message = error["message"]
            assert message.startswith(field) or f"; {field}: " in message, message
    return error


@pytest.fixture(autouse=True)
def fast_password_hasher(settings):
    # UserFactory sets a password; PBKDF2 costs ~0.35 s per user on this machine, which
    # was most of this suite's runtime. Passwords play no part in these tests.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def launches_need_no_credit(settings):
    # Prepaid checks have their own tests (billing, and test_instances here); the rest
    # of these tests launch without first crediting every user.
    settings.BILLING_ENFORCE_BALANCE = False


@pytest.fixture
def client_for(db):
    """An APIClient that sends ``Authorization: Bearer <a new key of user>``."""

    def make(user, scopes=None) -> APIClient:
        if scopes is None and user.is_staff:  # staff test keys carry staff powers
            scopes = [*CUSTOMER_SCOPES, ApiKeyScope.STAFF]
        key, raw = api_key_create(user=user, name="tests", scopes=scopes)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        client.api_key, client.raw_key = key, raw
        return client

    return make


@pytest.fixture
def as_alice(client_for, alice):
    return client_for(alice)


@pytest.fixture
def as_bob(client_for, bob):
    return client_for(bob)


@pytest.fixture
def as_carol(client_for, carol):
    return client_for(carol)


@pytest.fixture
def node(make_host, a100):
    return make_host("node1", a100, count=8, address="203.0.113.7")


@pytest.fixture
def launched(alice, a100, image, node, sent) -> Instance:
    """Alice's 1× A100 instance, pending (the agent has not answered yet)."""
    return instance_launch(user=alice, gpu_model=a100, gpu_count=1, image=image, name="alice-nb")


@pytest.fixture
def running(launched) -> Instance:
    instance_report_running(instance_id=str(launched.pk), port=40001, container_id="c0ffee")
    launched.refresh_from_db()
    return launched


@pytest.fixture
def stopped(running) -> Instance:
    instance_stop(instance=running)
    instance_report_stopped(instance_id=str(running.pk))
    running.refresh_from_db()
    return running
