"""JupyterLab through the gateway after a member leaves: an open websocket (a terminal, a
kernel) is a shell into the team's instance, so it must end with the membership."""

import asyncio
import dataclasses

import aiohttp
import pytest

from gpurental.rentals.events import state_channel, state_redis
from tests.gateway.test_security_review import CLOSED, run

pytestmark = pytest.mark.backend  # the gateway is woken over Redis pub/sub

MEMBER, OUTSIDER = 42, 43


def test_a_removed_members_open_websocket_is_closed_when_the_route_is_read_again():
    """Found by this review (fixed in 42e9aa9), a leak: the gateway re-reads a team instance's
    operators with its route (at most 30 s old) and refuses a removed member's next HTTP
    request, but an open websocket (a JupyterLab terminal or kernel: a shell in the team's
    container) is closed on a route change only when the instance stopped or its run changed
    (Gateway._changed compares ``run``, never ``route.admits(user)``). A member removed or
    demoted to viewer keeps their terminal for as long as it stays open. Here the route is
    read again exactly as after a state change (the instance's state channel); the member's
    socket must end."""

    async def scenario(s):
        table = s.route
        operators = {"now": frozenset({MEMBER})}
        s.route = lambda iid: (
            dataclasses.replace(table(iid), operators=operators["now"]) if table(iid) else None
        )
        s.gateway.routes.drop(s.a_id)
        headers = {"Host": s.host(s.a_id), "Cookie": s.cookie(user=MEMBER)}
        url = f"{s.base.replace('http', 'ws', 1)}/ws"
        async with (
            aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session,
            session.ws_connect(url, headers={**headers, "Origin": s.origin(s.a_id)}) as ws,
        ):
            await ws.send_str("whoami")
            assert (await ws.receive_str(timeout=5)) == "whoami"

            operators["now"] = frozenset()  # the member is removed from the team
            await asyncio.to_thread(state_redis().publish, state_channel(s.a_id), "changed")
            await asyncio.sleep(0.5)
            refused = await s.request("GET", "/api/status", headers=headers)
            assert refused[0] == 404  # a new request is refused at once...

            try:  # ...and the open socket must be closed too
                message = await ws.receive(timeout=3)
            except TimeoutError:
                message = None
            assert message is not None and message.type in CLOSED, message

    run(scenario)


def test_an_operators_websocket_stays_open_when_the_route_is_read_again():
    """The other side: re-reading the route leaves an operator's socket alone."""

    async def scenario(s):
        table = s.route
        s.route = lambda iid: (
            dataclasses.replace(table(iid), operators=frozenset({MEMBER})) if table(iid) else None
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
            await asyncio.to_thread(state_redis().publish, state_channel(s.a_id), "changed")
            await asyncio.sleep(0.5)
            await ws.send_str("still here")
            assert (await ws.receive_str(timeout=5)) == "still here"
        outsider = await s.request(
            "GET",
            "/api/status",
            headers={"Host": s.host(s.a_id), "Cookie": s.cookie(user=OUTSIDER)},
        )
        assert outsider[0] == 404

    run(scenario)
