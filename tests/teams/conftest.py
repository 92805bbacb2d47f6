"""A team "acme" owned by alice, with one person per role; bob stays outside, carol is
staff (and outside the team)."""

import pytest

from gpurental.accounts.models import User
from gpurental.teams import services
from gpurental.teams.models import Membership

# Imported for their fixtures (client_for, node, ...): the API's helpers.
from tests.api.conftest import client_for, fast_password_hasher, node  # noqa: F401
from tests.factories import UserFactory

TEAM_QUOTA = 8


def with_quota(team, gpus: int = TEAM_QUOTA):
    """A new team's quota is 0 until staff set it (in the admin): set it as they would."""
    User.objects.filter(pk=team.account_id).update(gpu_quota=gpus)
    team.account.refresh_from_db()
    return team


@pytest.fixture
def team(alice):
    return with_quota(services.team_create(creator=alice, name="Acme Research", slug="acme"))


def _join(team, email: str, role: str):
    person = UserFactory(email=email, full_name=email.split("@")[0].title())
    Membership.objects.create(team=team, user=person, role=role)
    return person


@pytest.fixture
def dave(team):
    return _join(team, "dave@example.com", "admin")


@pytest.fixture
def erin(team):
    return _join(team, "erin@example.com", "member")


@pytest.fixture
def frank(team):
    return _join(team, "frank@example.com", "viewer")


@pytest.fixture
def crew(alice, dave, erin, frank, bob, carol):
    return {
        "owner": alice,
        "admin": dave,
        "member": erin,
        "viewer": frank,
        "outsider": bob,
        "staff": carol,
    }
