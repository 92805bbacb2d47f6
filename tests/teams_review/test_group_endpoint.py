"""A team group's endpoint (``grp-<id>.<GATEWAY_DOMAIN>``) and the API keys that open it."""

import asyncio
import hashlib

import pytest

from gpurental.accounts.services import api_key_create
from gpurental.gateway import groups
from gpurental.teams.models import Membership
from tests.factories import GroupFactory, HostFactory
from tests.gateway.test_group_endpoint import (
    ENDPOINT_KEY,
    Client,
    Upstream,
    add_replica,
    db,
    running_gateway,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def team_group(team):
    host = HostFactory(address="127.0.0.1")
    made = GroupFactory(
        user=team.account,
        max_concurrency=2,
        queue_size=10,
        endpoint_key_hash=hashlib.sha256(ENDPOINT_KEY.encode()).hexdigest(),
    )
    made.test_host = host
    return made


def _statuses(group, keys: dict[str, str], then=None) -> dict[str, int]:
    """The status of one call to the group's endpoint with each key (``then`` runs, in the
    database, before a second round named with a trailing "!")."""

    async def scenario():
        upstream = await Upstream("r1").start()
        await db(add_replica, group, upstream)
        seen: dict[str, int] = {}
        async with running_gateway() as (_gateway, base):
            client = Client(base, group, None)
            try:
                for name, key in keys.items():
                    seen[name] = (await client.call(key=key))[0]
                if then is not None:
                    await db(then)
                    await asyncio.sleep(0.3)  # past the key cache (AUTH_TTL_S, shortened)
                    for name, key in keys.items():
                        seen[name + "!"] = (await client.call(key=key))[0]
            finally:
                await client.close()
                await upstream.server.close()
        return seen

    return asyncio.run(scenario())


def test_only_the_endpoint_key_opens_a_team_group_for_outsiders(team_group, bob):
    bob_key = api_key_create(user=bob, name="bob")[1]
    seen = _statuses(team_group, {"endpoint": ENDPOINT_KEY, "bob": bob_key})
    assert seen == {"endpoint": 200, "bob": 401}


def test_a_members_team_key_opens_the_team_groups_endpoint_and_a_viewers_does_not(
    team, team_group, erin, frank, monkeypatch
):
    """Found by this review (fixed in 43c2a62), a gap: the group endpoint admits "the owner's
    API key", i.e. a key whose user_id is the group's owner (gateway/groups.py,
    api_key_owner and GroupEndpoints._authorised). A team group's owner is the team account,
    which has no keys, so no member can call the team's group with their key made for the
    team; only the endpoint key (shown once, to whoever created the group) works. A fix must
    keep the role rule: calling scales the group, which costs money, so member or higher;
    not a viewer, not a removed member."""
    monkeypatch.setattr(groups, "AUTH_TTL_S", 0.1)
    keys = {
        "member": api_key_create(user=erin, name="ci", team=team)[1],
        "viewer": api_key_create(user=frank, name="ci", team=team)[1],
        "member's own": api_key_create(user=erin, name="own")[1],
    }

    seen = _statuses(
        team_group, keys, then=lambda: Membership.objects.filter(team=team, user=erin).delete()
    )

    assert seen["member"] == 200
    assert seen["viewer"] == seen["member's own"] == 401
    assert seen["member!"] == 401  # removed since
