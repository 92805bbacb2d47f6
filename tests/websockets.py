"""A websocket session against the project's routes, for the stream tests."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from gpurental.routing import websocket_urlpatterns


def watch(user, path, *, then=None, frames=1):
    """Connect as ``user``: (False, close code), or (True, [the first message, then
    ``frames`` more after calling ``then``])."""

    async def session():
        communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
        communicator.scope["user"] = user
        connected, code = await communicator.connect()
        if not connected:
            # Let the refused consumer finish inside this loop; leaving it to the loop's
            # shutdown can hang on the channel layer's pending receive.
            await communicator.wait(timeout=0.5)
            return False, code
        messages = [await communicator.receive_json_from(timeout=5)]
        if then is not None:
            await database_sync_to_async(then)()
            for _ in range(frames):
                messages.append(await communicator.receive_json_from(timeout=5))
        await communicator.disconnect()
        return True, messages

    return async_to_sync(session)()
