# ruff: noqa: F811 - pytest fixtures imported from tests.gateway.test_ssh_keys
"""A revocation of a person's credentials (accounts.credentials) reaches the gateways: the
gateway cookie and one-time tickets carry the person's credentials generation, which the
route checks; the person's running instances are woken on their state channels; the
gateway then closes the person's open websockets, and the SSH gateway their connections."""

from __future__ import annotations

import asyncio
import dataclasses

import aiohttp
import asyncssh
import pytest

from gpurental.accounts.credentials import Reason, account_credentials_revoke
from gpurental.accounts.services import ssh_key_add
from gpurental.gateway import routes, sshd, tickets
from gpurental.gateway.sshroutes import ssh_login
from gpurental.rentals.events import state_channel, state_redis
from tests.gateway.test_security_review import CLOSED, OWNER, run
from tests.gateway.test_ssh_keys import (  # noqa: F401 - fixtures
    alice_running,
    bare,
    public_line,
    ssh_image,
)


def test_the_route_admits_only_sessions_of_the_persons_current_generation(alice_running, alice):
    route = routes.route_for(str(alice_running.pk))
    assert route.admits(alice.pk, 0) and route.admits(alice.pk, None)
    ticket = tickets.ticket_mint(user=alice, instance=alice_running)
    account_credentials_revoke(user=alice, reason=Reason.LOGOUT_EVERYWHERE)
    route = routes.route_for(str(alice_running.pk))
    assert not route.admits(alice.pk, 0)  # a cookie or ticket from before
    assert not route.admits(alice.pk, None)  # one from before generations existed
    assert route.admits(alice.pk, 1)
    # A ticket minted before the revocation names the old generation: spending it opens nothing.
    raw = state_redis().get(tickets.ticket_key(ticket.url.rsplit("t=", 1)[1]))
    assert b'"g": 0' in raw


def test_ssh_login_names_the_key_holders_generation(alice_running, alice):
    line = public_line()
    key = ssh_key_add(user=alice, public_key=line)
    before = ssh_login(instance_id=str(alice_running.pk), public_key_line=bare(line))
    account_credentials_revoke(user=alice, reason=Reason.PASSWORD_CHANGE, keep_ssh_key_ids=[key.pk])
    after = ssh_login(instance_id=str(alice_running.pk), public_key_line=bare(line))
    assert (before.holder_id, before.generation) == (alice.pk, 0)
    assert (after.holder_id, after.generation) == (alice.pk, 1)  # a kept key, a new generation
    account_credentials_revoke(user=alice, reason=Reason.LOGOUT_EVERYWHERE)  # not kept now
    assert ssh_login(instance_id=str(alice_running.pk), public_key_line=bare(line)) is None


@pytest.mark.backend
def test_a_revocation_wakes_the_persons_running_instances_after_commit(
    alice_running, alice, django_capture_on_commit_callbacks
):
    pubsub = state_redis().pubsub()
    pubsub.subscribe(state_channel(alice_running.pk))
    try:
        assert pubsub.get_message(timeout=5)["type"] == "subscribe"
        with django_capture_on_commit_callbacks(execute=True):
            account_credentials_revoke(user=alice, reason=Reason.LOGOUT_EVERYWHERE)
        message = pubsub.get_message(timeout=5)
        assert message is not None and message["type"] == "message", message
    finally:
        pubsub.close()


class FakeConnection:
    closed = False
    disconnected = None

    def close(self):
        self.closed = True

    def disconnect(self, code, reason):
        self.disconnected = (code, reason)


def _server(target) -> sshd.GatewayServer:
    server = sshd.GatewayServer(client_key=None)
    server._conn, server._target, server._line = FakeConnection(), target, "ssh-ed25519 AAAA"
    server.instance_id = target.instance_id
    return server


def test_the_ssh_gateway_closes_a_connection_whose_holders_generation_moved_on(monkeypatch):
    then = sshd_target(generation=0)
    now = {"target": then}
    monkeypatch.setattr(sshd, "_login", lambda instance_id, line: now["target"])
    server = _server(then)
    asyncio.run(server.recheck())
    assert not server._conn.closed  # the same generation: it goes on
    now["target"] = dataclasses.replace(then, generation=1)
    asyncio.run(server.recheck())
    assert server._conn.closed


def sshd_target(**changes):
    from gpurental.gateway.sshroutes import Upstream

    return Upstream(
        instance_id="00000000-0000-4000-8000-000000000001",
        user_email="alice@example.com",
        key_id=None,
        key_fingerprint="SHA256:x",
        address="127.0.0.1",
        port=1,
        host_public_key="ssh-ed25519 AAAA",
        holder_id=OWNER,
        **changes,
    )


@pytest.mark.backend
def test_an_open_websocket_of_a_revoked_session_is_closed_and_its_cookie_opens_nothing():
    """The gateway in this process (tests.gateway.test_security_review): the person's
    generation moves on, the instance's state channel speaks, as after a revocation."""

    async def scenario(s):
        table = s.route
        generation = {"now": 0}
        s.route = lambda iid: (
            dataclasses.replace(table(iid), generations={OWNER: generation["now"]})
            if table(iid)
            else None
        )
        s.gateway.routes.drop(s.a_id)
        headers = {"Host": s.host(s.a_id), "Cookie": s.cookie()}
        url = f"{s.base.replace('http', 'ws', 1)}/ws"
        async with (
            aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session,
            session.ws_connect(url, headers={**headers, "Origin": s.origin(s.a_id)}) as ws,
        ):
            await ws.send_str("hello")
            assert (await ws.receive_str(timeout=5)) == "hello"

            generation["now"] = 1  # account_credentials_revoke
            await asyncio.to_thread(state_redis().publish, state_channel(s.a_id), "changed")
            message = await ws.receive(timeout=5)
            assert message.type in CLOSED, message

        assert (await s.request("GET", "/api/status", headers=headers))[0] == 404
        fresh = tickets.cookie_value(user_id=OWNER, label=s.a_id, run=s.run, generation=1)
        answer = await s.request(
            "GET", "/api/status", headers={**headers, "Cookie": f"{s.gateway.cookie}={fresh}"}
        )
        assert answer[0] == 200  # a session opened after the revocation works

    run(scenario)


def test_the_ssh_gateway_caps_logins_per_person_and_per_instance(monkeypatch, settings):
    """Past a cap the new connection is disconnected naming it; a closed one gives its
    place back (the same caps as the HTTP gateway's, for SSH)."""
    settings.SSH_GATEWAY_MAX_CONNECTIONS_PER_USER = 3
    settings.SSH_GATEWAY_MAX_CONNECTIONS_PER_INSTANCE = 2

    async def no_upstream(self):
        return None

    monkeypatch.setattr(sshd.GatewayServer, "_connect_upstream", no_upstream)
    one = sshd_target()
    other = dataclasses.replace(one, instance_id="00000000-0000-4000-8000-000000000002")

    async def scenario():
        def login(target):
            server = _server(target)
            server.auth_completed()
            return server

        a, b = login(one), login(one)
        third_here = login(one)  # the instance's cap
        assert third_here._conn.disconnected[0] == asyncssh.DISC_TOO_MANY_CONNECTIONS
        assert "SSH_GATEWAY_MAX_CONNECTIONS_PER_INSTANCE" in third_here._conn.disconnected[1]
        third_here.connection_lost(None)  # it held nothing: nothing is given back
        c = login(other)
        fourth = login(other)  # the person's cap (3), on another instance
        assert "at most 3 at once per person" in fourth._conn.disconnected[1]
        a.connection_lost(None)
        again = login(other)
        assert again._conn.disconnected is None
        for server in (b, c, again):
            server.connection_lost(None)
        assert not sshd._open

    asyncio.run(scenario())
