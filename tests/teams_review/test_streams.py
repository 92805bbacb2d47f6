"""Websockets of a team's objects: who may watch, and for how long."""

import uuid

import pytest

from gpurental.groups.services import group_apply
from gpurental.rentals.services import lifecycle as lc
from gpurental.teams.models import Membership
from gpurental.telemetry.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from tests.groups.surfaces import SPEC, a10, group_catalog, serving_echo  # noqa: F401
from tests.teams.test_streams import close_code_after
from tests.websockets import watch

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def quick_recheck(settings):
    settings.WS_RECHECK_SECONDS = 0.2


@pytest.fixture
def team_instance(team, a100, make_host, image, sent):
    make_host("node1", a100)
    return lc.instance_launch(user=team.account, image=image, gpu_model=a100, gpu_count=1)


@pytest.fixture
def team_group(team, a10, serving_echo, group_catalog, make_host, sent):  # noqa: F811
    make_host("node2", a10, count=4)
    return group_apply(user=team.account, source=SPEC).group


def test_a_removed_member_is_cut_off_from_the_team_instances_stream(team, erin, team_instance):
    """Found by this review (fixed in d317185), a leak: the instance websocket checks
    membership only when it connects; the periodic recheck (WatchedConsumer) asks only
    "still logged in, still active". A member removed from the team keeps receiving the
    instance's status events and GPU samples for as long as the page stays open (hours),
    where the gateway shuts them out within 30 s."""
    code = close_code_after(
        erin,
        f"/ws/instances/{team_instance.pk}/",
        lambda: Membership.objects.filter(team=team, user=erin).delete(),
    )
    assert code == CLOSE_NOT_FOUND


def test_an_outsider_and_staff_on_a_team_instances_stream(team, bob, carol, team_instance):
    path = f"/ws/instances/{team_instance.pk}/"
    assert watch(bob, path, frames=0) == (False, CLOSE_NOT_FOUND)
    assert watch(bob, f"/ws/instances/{uuid.uuid4()}/", frames=0) == (False, CLOSE_NOT_FOUND)
    connected, messages = watch(carol, path, frames=0)  # staff watch every instance
    assert connected and messages[0]["type"] == "snapshot"


def test_a_member_watches_the_team_groups_stream(team, erin, team_group):
    """Found by this review (fixed in d317185), a gap: GroupConsumer looks the
    group up with groups_visible_to(user=the person), never the team's account, so every
    member (owner included) is refused 4404 on the team's group page and its charts fall
    back to polling."""
    connected, messages = watch(erin, f"/ws/groups/{team_group.pk}/", frames=0)
    assert connected and messages[0]["type"] == "snapshot"


def test_an_outsider_is_refused_the_team_groups_stream(team, bob, team_group):
    assert watch(bob, f"/ws/groups/{team_group.pk}/", frames=0) == (False, CLOSE_NOT_FOUND)


def test_a_deactivated_member_is_cut_off_from_the_team_instances_stream(erin, team_instance):
    """What the recheck does catch today (and proof that close_code_after sees a close)."""

    def deactivate():
        erin.is_active = False
        erin.save(update_fields=["is_active"])

    code = close_code_after(erin, f"/ws/instances/{team_instance.pk}/", deactivate)
    assert code == CLOSE_UNAUTHENTICATED
