"""The instance gateway bounds what one person or one instance can take: open connections
(proxied requests and websockets together) per person and per instance, and the size of
a websocket message it holds. Behind a trusted proxy it passes the client's address on;
from anyone else, a forwarded address is dropped."""

from __future__ import annotations

import asyncio
import contextlib
import json
from unittest import mock

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request

from gpurental.addresses import trusted_networks
from gpurental.gateway import groups
from tests.gateway.test_security_review import CLOSED, run

MiB = 1024 * 1024


def headers_for(s, port: int | None = None) -> dict:
    return {
        "Host": s.host(s.a_id, port),
        "Cookie": s.cookie(port=port),
        "Origin": s.origin(s.a_id, port),
    }


@contextlib.asynccontextmanager
async def websockets(s, session: aiohttp.ClientSession, count: int):
    """``count`` open websockets to instance A, each answering."""
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(count):
            ws = await stack.enter_async_context(
                session.ws_connect(f"{s.base.replace('http', 'ws', 1)}/ws", headers=headers_for(s))
            )
            await ws.send_str("up")
            assert await ws.receive_str(timeout=5) == "up"
        yield


async def refused(s, session, port: int | None = None) -> tuple[int, str]:
    url = f"{s.base.replace('http', 'ws', 1)}/ws"
    with pytest.raises(aiohttp.WSServerHandshakeError) as refusal:
        await session.ws_connect(url, headers=headers_for(s, port))
    return refusal.value.status, refusal.value.message


def test_a_person_past_their_cap_of_connections_is_refused_with_429_naming_it(settings):
    settings.GATEWAY_MAX_CONNECTIONS_PER_USER = 2
    settings.GATEWAY_MAX_CONNECTIONS_PER_INSTANCE = 50

    async def scenario(s):
        async with aiohttp.ClientSession() as session:
            async with websockets(s, session, 2):
                assert (await refused(s, session, port=8000))[0] == 429
                status, _, body = await s.request("GET", "/api/status", headers=headers_for(s))
                assert status == 429
                assert "at most 2 at once per person (GATEWAY_MAX_CONNECTIONS_PER_USER)" in body
            # Closed: the gateway gives them back as their handlers end.
            async with asyncio.timeout(10):
                while (await s.request("GET", "/api/status", headers=headers_for(s)))[0] != 200:
                    await asyncio.sleep(0.05)

    run(scenario)


def test_an_instance_past_its_cap_of_connections_is_refused(settings):
    settings.GATEWAY_MAX_CONNECTIONS_PER_USER = 50
    settings.GATEWAY_MAX_CONNECTIONS_PER_INSTANCE = 2

    async def scenario(s):
        async with aiohttp.ClientSession() as session, websockets(s, session, 2):
            assert (await refused(s, session, port=8000))[0] == 429
            _, _, body = await s.request("GET", "/api/status", headers=headers_for(s))
            assert "(GATEWAY_MAX_CONNECTIONS_PER_INSTANCE)" in body
            assert len(s.a.seen) == 0  # nothing refused reached the instance

    run(scenario)


def test_a_websocket_message_of_a_few_mib_is_the_most_the_gateway_holds():
    async def scenario(s):
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(
                f"{s.base.replace('http', 'ws', 1)}/ws", headers=headers_for(s), max_msg_size=0
            ) as ws,
        ):
            with contextlib.suppress(ConnectionError):
                await ws.send_bytes(bytes(5 * MiB))
            message = await ws.receive(timeout=30)
            assert message.type in CLOSED, message.type

    run(scenario)


# --- X-Forwarded-For ------------------------------------------------------------------------


def forwarded_seen(s, body: str) -> list[str]:
    return [
        value for name, value in json.loads(body)["headers"] if name.lower() == "x-forwarded-for"
    ]


@pytest.mark.parametrize(
    ("trusted", "sent"),
    [
        (["127.0.0.0/8"], "198.51.100.7, 127.0.0.1"),  # behind a proxy: appended
        (["10.9.0.0/16"], "127.0.0.1"),  # from anyone else: replaced
    ],
)
def test_an_instance_gets_the_forwarded_chain_only_from_a_trusted_proxy(settings, trusted, sent):
    settings.TRUSTED_PROXIES = trusted

    async def scenario(s):
        _, _, body = await s.request(
            "GET", "/api/status", headers={**headers_for(s), "X-Forwarded-For": "198.51.100.7"}
        )
        assert forwarded_seen(s, body) == [sent]

    run(scenario)


@pytest.mark.parametrize(
    ("trusted", "sent"),
    [(("127.0.0.1",), "198.51.100.7, 127.0.0.1"), ((), "127.0.0.1")],
)
def test_a_group_endpoint_forwards_the_client_the_same_way(trusted, sent):
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        ("127.0.0.1", 50000) if name == "peername" else default
    )
    request = make_mocked_request(
        "GET", "/", headers={"X-Forwarded-For": "198.51.100.7"}, transport=transport
    )
    endpoints = groups.GroupEndpoints(trusted_proxies=trusted_networks(trusted))
    assert endpoints._upstream_headers(request)["X-Forwarded-For"] == sent
