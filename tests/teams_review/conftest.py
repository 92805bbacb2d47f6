"""An adversarial review of teams (issue 17). The team "acme" is alice's (owner); dave is
admin, erin member, frank viewer (tests/teams/conftest.py); bob stays outside; carol is
staff. Each problem the review found has a test whose docstring says what leaked and
which commit fixed it; an open one is marked xfail(strict=True) until its fix lands."""

import pytest
from rest_framework.test import APIClient

from gpurental.accounts.models import CUSTOMER_SCOPES, ApiKeyScope
from gpurental.accounts.services import api_key_create

# The team and its people, and the API's helpers, as tests/teams has them.
from tests.api.conftest import client_for, fast_password_hasher, node  # noqa: F401
from tests.teams.conftest import crew, dave, erin, frank, team  # noqa: F401


def key_client(user, *, for_team=None, scopes=None) -> APIClient:
    """An APIClient with a new key of ``user`` (made for ``for_team`` when given)."""
    if scopes is None and user.is_staff:
        scopes = [*CUSTOMER_SCOPES, ApiKeyScope.STAFF]
    _, raw = api_key_create(user=user, name="review", scopes=scopes, team=for_team)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture(autouse=True)
def launches_need_no_credit(settings):
    settings.BILLING_ENFORCE_BALANCE = False
