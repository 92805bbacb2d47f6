"""Live streams survive the servers restarting under them: a Redis that lost the groups
a stream joined is given them again at the next check, and a check that cannot be made
(the database or Redis is down) closes the stream for the page to reconnect. A Redis
restart, with the page reconnecting by itself, is tests/browser/test_live_reconnect.py."""

from __future__ import annotations

import os

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import OperationalError

from gpurental.agent.sampler import host_group
from gpurental.routing import websocket_urlpatterns
from gpurental.telemetry import consumers
from tests.telemetry.conftest import host_message

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stream(alice, run_instance, settings):
    """Alice's instance, its telemetry message, and a function opening its stream."""
    settings.WS_RECHECK_SECONDS = 0.3
    instance = run_instance(alice)
    (gpu,) = instance.gpu_indices
    message = host_message((gpu, str(instance.pk), 42.0))

    async def open_stream():
        ws = WebsocketCommunicator(
            URLRouter(websocket_urlpatterns), f"/ws/instances/{instance.pk}/"
        )
        ws.scope["user"] = alice
        connected, _ = await ws.connect()
        assert connected
        assert (await ws.receive_json_from(timeout=5))["type"] == "snapshot"
        return ws

    return open_stream, message


async def _sample_arrives(ws, message, *, tries: int = 25) -> bool:
    """Send the host's sample until the stream forwards one (False: it never did). Other
    frames (a backfill of earlier samples) are passed over."""
    layer = get_channel_layer()
    for _ in range(tries):
        await layer.group_send(host_group("node1"), message)
        while not await ws.receive_nothing(timeout=0.2):
            if (await ws.receive_json_from())["type"] == "telemetry":
                return True
    return False


def test_a_stream_joins_its_groups_again_when_redis_lost_them(stream):
    open_stream, message = stream

    async def session():
        ws = await open_stream()
        assert await _sample_arrives(ws, message)
        # Redis lost its data but not the connection (a failover, a flush).
        redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()
        assert await _sample_arrives(ws, message), "the stream stayed open and silent"
        await ws.disconnect()

    async_to_sync(session)()


def test_a_check_that_cannot_be_made_closes_the_stream_for_the_page_to_reconnect(
    stream, monkeypatch
):
    open_stream, _message = stream

    def database_down(*args):
        raise OperationalError("the database system is starting up")

    async def session():
        ws = await open_stream()
        monkeypatch.setattr(consumers, "_viewer_still_allowed", database_down)
        closed = await ws.receive_output(timeout=5)
        while closed["type"] == "websocket.send":  # a backfill sent at the connect
            closed = await ws.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": consumers.CLOSE_TRY_AGAIN}
        await ws.wait(timeout=1)

    async_to_sync(session)()
