"""Streams end when their viewer's rights do: logged out, deactivated, no longer staff.
Checked again every WS_RECHECK_SECONDS (30 s in production, a fraction here)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.backends.db import SessionStore

from gpurental.routing import websocket_urlpatterns
from gpurental.telemetry.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def quick_recheck(settings):
    settings.WS_RECHECK_SECONDS = 0.2


def closes_after(user, path, change, session=None):
    """Connect as ``user``, apply ``change`` (sync), and return the close code that follows."""

    async def run():
        communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
        communicator.scope["user"] = user
        if session is not None:
            communicator.scope["session"] = session
        connected, _ = await communicator.connect()
        assert connected
        await communicator.receive_json_from(timeout=5)  # the snapshot
        still_open = await communicator.receive_nothing(timeout=0.5)
        await sync_to_async(change)()
        while True:
            output = await communicator.receive_output(timeout=5)
            if output["type"] == "websocket.close":
                await communicator.wait(timeout=1)
                return still_open, output.get("code")

    return async_to_sync(run)()


def test_a_staff_viewer_who_loses_staff_status_is_cut_off(carol, make_host, a100):
    make_host("node1", a100, count=1)

    def demote():
        carol.is_staff = False
        carol.save(update_fields=["is_staff"])

    still_open, code = closes_after(carol, "/ws/hosts/node1/", demote)
    assert still_open and code == CLOSE_FORBIDDEN


def test_a_deactivated_owner_is_cut_off(alice, run_instance):
    instance = run_instance(alice)

    def deactivate():
        alice.is_active = False
        alice.save(update_fields=["is_active"])

    still_open, code = closes_after(alice, f"/ws/instances/{instance.pk}/", deactivate)
    assert still_open and code == CLOSE_UNAUTHENTICATED


def test_logging_out_elsewhere_ends_the_stream(carol, client):
    client.force_login(carol)
    session = SessionStore(session_key=client.session.session_key)
    still_open, code = closes_after(carol, "/ws/fleet/", client.logout, session=session)
    assert still_open and code == CLOSE_UNAUTHENTICATED
