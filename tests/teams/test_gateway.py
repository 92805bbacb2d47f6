"""JupyterLab through the gateway for a team's instance: its members who may operate it
(member, admin, owner) get in with their own session; viewers and outsiders get 404."""

import asyncio
import dataclasses

import aiohttp
import pytest

from gpurental.gateway import routes
from gpurental.rentals.events import state_channel, state_redis
from gpurental.rentals.services.lifecycle import instance_launch, instance_report_running
from gpurental.teams import services
from gpurental.teams.models import Membership
from tests.gateway.test_security_review import run

MEMBER, STRANGER = 42, 43


def test_the_route_of_a_team_instance_admits_its_operators_only(
    team, alice, dave, erin, frank, bob, a100, image, node, sent, settings
):
    settings.BILLING_ENFORCE_BALANCE = False
    instance = instance_launch(user=team.account, gpu_model=a100, gpu_count=1, image=image)
    instance_report_running(instance_id=str(instance.pk), port=40001, container_id="c0ffee")

    route = routes.route_for(str(instance.pk))

    assert route.owner_id == team.account.pk
    assert {p for p in (alice, dave, erin, frank, bob) if route.admits(p.pk)} == {alice, dave, erin}
    assert not route.admits(None)


def test_the_gateway_lets_in_an_operators_session_and_nobody_elses():
    async def scenario(s):
        table = s.route
        s.route = lambda iid: (
            dataclasses.replace(table(iid), operators=frozenset({MEMBER})) if table(iid) else None
        )
        s.gateway.routes.drop(s.a_id)
        mine = await s.request("GET", "/api/status", headers={"Cookie": s.cookie(user=MEMBER)})
        assert mine[0] == 200, mine[2]
        other = await s.request("GET", "/api/status", headers={"Cookie": s.cookie(user=STRANGER)})
        assert other[0] == 404

    run(scenario)


@pytest.mark.backend
def test_a_removed_members_open_websocket_closes_when_the_gateway_reads_the_route_again():
    async def scenario(s):
        table = s.route
        operators = {"now": frozenset({MEMBER})}
        s.route = lambda iid: (
            dataclasses.replace(table(iid), operators=operators["now"]) if table(iid) else None
        )
        s.gateway.routes.drop(s.a_id)
        headers = {
            "Host": s.host(s.a_id),
            "Cookie": s.cookie(user=MEMBER),
            "Origin": s.origin(s.a_id),
        }
        url = f"{s.base.replace('http', 'ws', 1)}/ws"
        async with (
            aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session,
            session.ws_connect(url, headers=headers) as ws,
        ):
            await ws.send_str("hello")
            assert (await ws.receive_str(timeout=5)) == "hello"
            operators["now"] = frozenset()  # removed from the team
            await asyncio.to_thread(state_redis().publish, state_channel(s.a_id), "changed")
            message = await ws.receive(timeout=3)
            assert message.type in (
                aiohttp.WSMsgType.CLOSE,
                aiohttp.WSMsgType.CLOSED,
                aiohttp.WSMsgType.CLOSING,
            ), message

    run(scenario)


@pytest.mark.backend
def test_removing_a_member_wakes_the_gateway_for_the_teams_running_instances(
    team, alice, erin, a100, image, node, sent, settings, django_capture_on_commit_callbacks
):
    settings.BILLING_ENFORCE_BALANCE = False
    instance = instance_launch(user=team.account, gpu_model=a100, gpu_count=1, image=image)
    instance_report_running(instance_id=str(instance.pk), port=40001, container_id="c0ffee")
    pubsub = state_redis().pubsub()
    pubsub.subscribe(state_channel(instance.pk))
    assert pubsub.get_message(timeout=2)["type"] == "subscribe"
    try:
        with django_capture_on_commit_callbacks(execute=True):
            services.member_remove(
                membership=Membership.objects.get(team=team, user=erin), actor=alice
            )
        message = pubsub.get_message(timeout=2)
        assert message is not None and message["data"] == b"changed"
    finally:
        pubsub.close()
