"""The instance websocket for a team's instance: every member watches it (viewers
included); anyone else is refused like for an instance that does not exist."""

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from gpurental.groups.services import group_apply
from gpurental.rentals.services import lifecycle as lc
from gpurental.routing import websocket_urlpatterns
from gpurental.teams.models import Membership
from gpurental.telemetry.consumers import CLOSE_NOT_FOUND
from tests.groups import surfaces
from tests.websockets import watch

pytestmark = pytest.mark.django_db(transaction=True)

# The groups tests' catalogue: an A10 plan and a serving image.
a10, serving_echo, group_catalog = surfaces.a10, surfaces.serving_echo, surfaces.group_catalog


def test_a_viewer_watches_the_team_instance_and_an_outsider_is_refused(
    team, frank, bob, a100, make_host, image, sent, settings
):
    settings.BILLING_ENFORCE_BALANCE = False
    make_host("node1", a100)
    instance = lc.instance_launch(user=team.account, image=image, gpu_model=a100, gpu_count=1)
    path = f"/ws/instances/{instance.pk}/"

    connected, messages = watch(frank, path, frames=0)
    assert connected and messages[0]["type"] == "snapshot"
    assert watch(bob, path, frames=0) == (False, CLOSE_NOT_FOUND)


def test_a_removed_member_is_cut_off_from_the_team_instances_stream(
    team, erin, a100, make_host, image, sent, settings
):
    settings.BILLING_ENFORCE_BALANCE = False
    settings.WS_RECHECK_SECONDS = 0.2
    make_host("node1", a100)
    instance = lc.instance_launch(user=team.account, image=image, gpu_model=a100, gpu_count=1)
    code = close_code_after(
        erin,
        f"/ws/instances/{instance.pk}/",
        lambda: Membership.objects.filter(team=team, user=erin).delete(),
    )
    assert code == CLOSE_NOT_FOUND


def close_code_after(user, path, change, wait=3.0):
    """Connect as ``user``, apply ``change``, and the close code that follows within
    ``wait`` seconds (None: the stream stayed open)."""

    async def run():
        communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
        communicator.scope["user"] = user
        connected, _ = await communicator.connect()
        assert connected
        await communicator.receive_json_from(timeout=5)  # the snapshot
        await sync_to_async(change)()
        for _tick in range(int(wait / 0.2)):
            if await communicator.receive_nothing(timeout=0.2):
                continue
            output = await communicator.receive_output(timeout=1)
            if output["type"] == "websocket.close":
                await communicator.wait(timeout=1)
                return output.get("code")
        await communicator.disconnect()
        return None

    return async_to_sync(run)()


def test_every_member_watches_the_team_groups_stream_and_outsiders_do_not(
    team, frank, bob, a10, group_catalog, make_host, sent
):
    make_host("node2", a10, count=4)
    group = group_apply(user=team.account, source=surfaces.SPEC).group
    path = f"/ws/groups/{group.pk}/"
    connected, messages = watch(frank, path, frames=0)  # a viewer
    assert connected and messages[0]["type"] == "snapshot"
    assert watch(bob, path, frames=0) == (False, CLOSE_NOT_FOUND)
