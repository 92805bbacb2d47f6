"""The gateways under attack: what a customer, a container or an anonymous client sends to
reach what is not theirs.

The instance gateway runs in this process on loopback, in front of small aiohttp servers
standing in for an instance's ports; its routes come from a fixed table instead of the
database. Tickets and revocation use the real Redis. Raw requests are written by hand
where a library would tidy them (a second Host header, an odd request target).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpurental.gateway import routes, tickets
from gpurental.gateway.http import MAX_WS_MESSAGE, Gateway, RouteCache

DOMAIN = "gw.localhost"
TOKEN = "the-instance-secret-token"
OWNER = 7
OTHER_OWNER = 8
BIG = MAX_WS_MESSAGE + 1
CLOSED = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR)


class Echo:
    """An instance's port: answers with what it was sent; ``/set-cookie`` answers with the
    Set-Cookie headers named in its query; ``/ws`` echoes websocket messages."""

    def __init__(self, name: str):
        self.name = name
        self.seen: list[dict] = []
        self.server: TestServer | None = None

    async def start(self) -> Echo:
        app = web.Application()
        app.router.add_get("/ws", self._ws)
        app.router.add_get("/ws-big", self._ws_big)
        app.router.add_get("/set-cookie", self._set_cookie)
        app.router.add_route("*", "/{tail:.*}", self._echo)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        return self

    @property
    def port(self) -> int:
        return self.server.port

    async def _echo(self, request):
        body = await request.read()
        seen = {
            "name": self.name,
            "method": request.method,
            "path": request.raw_path,
            "headers": list(request.headers.items()),
            "body": body.decode(errors="replace"),
        }
        self.seen.append(seen)
        return web.json_response(seen)

    async def _set_cookie(self, request):
        response = web.Response(text="cookies")
        for value in request.query.getall("c", []):
            response.headers.add("Set-Cookie", value)
        return response

    async def _ws(self, request):
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        async for message in ws:
            if message.type == aiohttp.WSMsgType.TEXT:
                await ws.send_str(message.data)
        return ws

    async def _ws_big(self, request):
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        self.seen.append({"ws-big": True})
        await ws.send_bytes(bytes(BIG))
        await ws.receive()
        return ws

    async def close(self):
        await self.server.close()


class Site:
    """The gateway and two instances behind it: A (owner OWNER; JupyterLab and port 8000)
    and B (another customer's)."""

    def __init__(self, base: str, port: int, gateway: Gateway, a: Echo, internal: Echo):
        self.base, self.port, self.gateway = base, port, gateway
        self.a, self.internal = a, internal
        self.a_id, self.b_id = str(uuid.uuid4()), str(uuid.uuid4())
        self.run = routes.run_of(TOKEN)

    def host(self, instance_id: str, port: int | None = None) -> str:
        return f"{routes.Address(instance_id, port).label}.{DOMAIN}"

    def origin(self, instance_id: str, port: int | None = None) -> str:
        return f"http://{self.host(instance_id, port)}"

    def cookie(self, instance_id: str | None = None, port: int | None = None, user=OWNER) -> str:
        label = routes.Address(instance_id or self.a_id, port).label
        value = tickets.cookie_value(user_id=user, label=label, run=self.run)
        return f"{self.gateway.cookie}={value}"

    def route(self, instance_id: str) -> routes.Route | None:
        if instance_id == self.a_id:
            return routes.Route(
                instance_id=self.a_id,
                owner_id=OWNER,
                address="127.0.0.1",
                ports={8888: self.a.port, 8000: self.a.port},
                jupyter_port=8888,
                token=TOKEN,
                run=self.run,
            )
        if instance_id == self.b_id:
            return routes.Route(
                instance_id=self.b_id,
                owner_id=OTHER_OWNER,
                address="127.0.0.1",
                ports={8888: self.internal.port},
                jupyter_port=8888,
                token="b-token",
                run=routes.run_of("b-token"),
            )
        return None

    async def request(self, method: str, path: str, *, host: str | None = None, **kwargs):
        headers = {"Host": host or self.host(self.a_id), **kwargs.pop("headers", {})}
        async with (
            aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session,
            session.request(
                method, f"{self.base}{path}", headers=headers, allow_redirects=False, **kwargs
            ) as answer,
        ):
            return answer.status, answer.headers, await answer.text()

    async def raw(self, data: bytes) -> bytes:
        """Bytes straight onto the gateway's socket; everything it answers until it closes."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(data)
            await writer.drain()
            chunks = []
            async with asyncio.timeout(10):
                while chunk := await reader.read(65536):
                    chunks.append(chunk)
            return b"".join(chunks)
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def site():
    a, internal = await Echo("a").start(), await Echo("internal").start()
    holder: dict = {}
    gateway = Gateway(
        domain=DOMAIN,
        scheme="http",
        route_cache=RouteCache(lookup=lambda instance_id: holder["site"].route(instance_id)),
    )
    server = TestServer(gateway.app(), host="127.0.0.1")
    await server.start_server()
    try:
        await asyncio.wait_for(gateway.listening.wait(), 10)
        holder["site"] = Site(f"http://127.0.0.1:{server.port}", server.port, gateway, a, internal)
        yield holder["site"]
    finally:
        await server.close()
        await a.close()
        await internal.close()


def run(scenario):
    async def main():
        async with site() as s:
            await scenario(s)

    asyncio.run(main())


def header_names(seen: dict) -> list[str]:
    return [name.lower() for name, _ in seen["headers"]]


# --- routing: the Host header and the request target ------------------------------------


def test_the_owner_reaches_their_instance_with_its_token_injected():
    async def scenario(s):
        status, _, body = await s.request("GET", "/api/status", headers={"Cookie": s.cookie()})
        assert status == 200, body
        seen = json.loads(body)
        assert seen["name"] == "a" and seen["path"] == "/api/status"
        assert ["Authorization", f"token {TOKEN}"] in seen["headers"]

    run(scenario)


def test_a_second_host_header_is_refused():
    async def scenario(s):
        answer = await s.raw(
            b"GET /api/status HTTP/1.1\r\n"
            + f"Host: {s.host(s.a_id)}\r\nHost: {s.host(s.b_id)}\r\n".encode()
            + f"Cookie: {s.cookie()}\r\nConnection: close\r\n\r\n".encode()
        )
        assert answer.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request"), answer[:200]
        assert not s.a.seen and not s.internal.seen

    run(scenario)


def test_an_absolute_form_target_naming_another_host_goes_nowhere_else():
    async def scenario(s):
        answer = await s.raw(
            f"GET http://127.0.0.1:{s.internal.port}/secret HTTP/1.1\r\n".encode()
            + f"Host: {s.host(s.a_id)}\r\nCookie: {s.cookie()}\r\n".encode()
            + b"Connection: close\r\n\r\n"
        )
        assert not s.internal.seen, answer[:300]
        if s.a.seen:  # went to the instance the Host names, with the path alone
            assert s.a.seen[-1]["path"] == "/secret"

    run(scenario)


@pytest.mark.parametrize(
    "target",
    ["@{internal}/secret", "{internal}/secret", ".{internal}/secret", "*"],
)
def test_a_request_target_without_a_leading_slash_reaches_no_other_address(target):
    async def scenario(s):
        internal = f"127.0.0.1:{s.internal.port}"
        answer = await s.raw(
            f"GET {target.format(internal=internal)} HTTP/1.1\r\n".encode()
            + f"Host: {s.host(s.a_id)}\r\nCookie: {s.cookie()}\r\n".encode()
            + b"Connection: close\r\n\r\n"
        )
        assert not s.internal.seen, answer[:300]
        assert b" 5" not in answer.split(b"\r\n", 1)[0], answer[:300]

    run(scenario)


# --- what the client may not say to an instance ---------------------------------------


def test_headers_only_the_platform_may_say_are_replaced_not_passed_on():
    async def scenario(s):
        raw = (
            b"GET /api/status?token=guess&%74oken=guess2&keep=1 HTTP/1.1\r\n"
            + f"Host: {s.host(s.a_id)}\r\n".encode()
            + b"authorization: token guess\r\nAUTHORIZATION: Bearer guess\r\n"
            + b"X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Host: evil\r\n"
            + b"X-Forwarded-Proto: https\r\nX-Forwarded-Port: 443\r\n"
            + b"X-Forwarded-Prefix: /evil\r\nX-Forwarded-Server: evil\r\n"
            + b"Forwarded: for=10.0.0.1;proto=https\r\nX-Real-Ip: 10.0.0.1\r\n"
            + b"X-Scheme: https\r\nX-Original-Forwarded-For: 10.0.0.1\r\n"
            + f"Cookie: a=1; {s.cookie()}; b=2\r\nConnection: close\r\n\r\n".encode()
        )
        answer = await s.raw(raw)
        assert b" 200 " in answer.split(b"\r\n", 1)[0], answer[:300]
        seen = s.a.seen[-1]
        headers = {}
        for name, value in seen["headers"]:
            headers.setdefault(name.lower(), []).append(value)
        assert headers["authorization"] == [f"token {TOKEN}"]
        assert headers["x-forwarded-for"] == ["127.0.0.1"]
        assert headers["x-forwarded-proto"] == ["http"]
        assert headers["x-forwarded-host"] == [s.host(s.a_id)]
        for name in ("forwarded", "x-real-ip", "x-scheme", "x-forwarded-port"):
            assert name not in headers, (name, headers)
        assert not [
            n
            for n in headers
            if n.startswith("x-forwarded-")
            and n not in {"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"}
        ], headers
        assert headers["cookie"] == ["a=1; b=2"]
        assert "token" not in seen["path"].replace("%74oken", "token").split("?", 1)[1]
        assert "keep=1" in seen["path"]

    run(scenario)


def test_a_cookie_for_one_origin_opens_no_other():
    async def scenario(s):
        for host, cookie in (
            (s.host(s.a_id, 8000), s.cookie()),  # A's JupyterLab cookie at A's port 8000
            (s.host(s.a_id), s.cookie(port=8000)),  # and the other way round
            (s.host(s.b_id), s.cookie()),  # A's at B
            (s.host(s.b_id), s.cookie(s.b_id)),  # a cookie for B's origin, but not B's owner
        ):
            status, _, _ = await s.request("GET", "/", host=host, headers={"Cookie": cookie})
            assert status == 404, host
        assert not s.a.seen and not s.internal.seen

    run(scenario)


@pytest.mark.parametrize(
    "set_cookie",
    [
        "{name}=forged; Path=/",
        " {name}=forged; Path=/",
        "{name} =forged; Path=/",
        "{name}\t=forged; Path=/",
        "{name}=forged; Domain=gw.localhost; Path=/",
    ],
)
def test_an_instance_cannot_set_the_platform_cookie(set_cookie):
    async def scenario(s):
        value = set_cookie.format(name=s.gateway.cookie)
        status, headers, _ = await s.request(
            "GET", "/set-cookie", params={"c": [value, "theirs=1"]}, headers={"Cookie": s.cookie()}
        )
        assert status == 200
        cookies = headers.getall("Set-Cookie", [])
        assert cookies == ["theirs=1"], cookies

    run(scenario)


def test_a_websocket_needs_this_very_origin():
    async def scenario(s):
        url = f"{s.base.replace('http', 'ws', 1)}/ws"
        base = {"Host": s.host(s.a_id), "Cookie": s.cookie()}
        async with aiohttp.ClientSession() as session:
            for origin in (None, s.origin(s.b_id), "null", s.origin(s.a_id, 8000)):
                headers = dict(base) if origin is None else {**base, "Origin": origin}
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await session.ws_connect(url, headers=headers)
                assert refused.value.status == 403, origin
            async with session.ws_connect(url, headers={**base, "Origin": s.origin(s.a_id)}) as ws:
                await ws.send_str("hello")
                assert (await ws.receive_str(timeout=5)) == "hello"

    run(scenario)


def test_a_websocket_message_too_big_for_the_gateway_closes_the_socket_either_way():
    """One message is held whole in the gateway's memory: without a bound, one customer's
    client, or their container, could take all of it from everyone."""

    async def scenario(s):
        base = {"Host": s.host(s.a_id), "Cookie": s.cookie(), "Origin": s.origin(s.a_id)}
        ws_base = s.base.replace("http", "ws", 1)
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(f"{ws_base}/ws", headers=base, max_msg_size=0) as ws:
                with contextlib.suppress(ConnectionError):  # closed while it was sent
                    await ws.send_bytes(bytes(BIG))
                message = await ws.receive(timeout=30)
                assert message.type in CLOSED, message.type
            async with session.ws_connect(f"{ws_base}/ws-big", headers=base, max_msg_size=0) as ws:
                message = await ws.receive(timeout=30)
                assert message.type in CLOSED, message.type

    run(scenario)


# --- the SSH gateway ---------------------------------------------------------------------


def test_the_ssh_gateway_ends_a_connection_that_keeps_trying_keys(tmp_path, monkeypatch, settings):
    """Every key tried is a database lookup (and tells whether that public key opens that
    instance): a connection gets a few tries, like OpenSSH's MaxAuthTries, not an
    unbounded number until the login timeout."""
    import asyncssh

    from gpurental.gateway import sshd

    settings.SSH_GATEWAY_CLIENT_KEY = str(tmp_path / "client")
    looked_up = []
    monkeypatch.setattr(sshd, "_login", lambda user, line: looked_up.append(line))
    keys = [asyncssh.generate_private_key("ssh-ed25519") for _ in range(40)]

    async def scenario():
        server = await sshd.serve(host="127.0.0.1", port=0, host_key=tmp_path / "host")
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises((asyncssh.PermissionDenied, asyncssh.DisconnectError)):
                async with asyncio.timeout(30):
                    await asyncssh.connect(
                        "127.0.0.1",
                        port,
                        username=str(uuid.uuid4()),
                        client_keys=keys,
                        known_hosts=None,
                        agent_path=None,
                        config=None,
                    )
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
    assert len(looked_up) <= sshd.MAX_AUTH_TRIES


# --- images ---------------------------------------------------------------------------


def test_serving_echo_reads_a_get_body_instead_of_taking_it_for_the_next_request(tmp_path):
    """The group endpoint keeps connections to replicas alive and passes a request's body
    on with its Content-Length, whatever the method. A body left unread on a GET would be
    read as a second request, whose answer goes to whoever sends next on that connection."""
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    from tests.stack import _free_port

    port = _free_port()
    server = subprocess.Popen(  # noqa: S603
        [sys.executable, str(Path("images/serving-echo/server.py").resolve())],
        env={"SERVE_PORT": str(port), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "serving-echo did not start"
                time.sleep(0.05)
        smuggled = b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n"
        with sock:
            sock.sendall(
                b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                + f"Content-Length: {len(smuggled)}\r\n\r\n".encode()
                + smuggled
            )
            time.sleep(0.5)
            sock.settimeout(1)
            answer = b""
            with contextlib.suppress(TimeoutError):
                while chunk := sock.recv(65536):
                    answer += chunk
        assert answer.count(b"HTTP/1.1 ") == 1, answer
    finally:
        server.terminate()
        server.wait(10)


# --- the route: who may reach a running instance --------------------------------------


@pytest.mark.django_db
def test_a_deactivated_owner_loses_the_gateway_as_they_lose_ssh_and_the_api(alice):
    """A session cookie lives GATEWAY_SESSION_TTL_S (12 h); the owner's check is made
    against the route, which must say no once the account is switched off."""
    from tests.factories import HostFactory, InstanceFactory

    instance = InstanceFactory(
        user=alice,
        host=HostFactory(address="127.0.0.1"),
        status="running",
        jupyter_port=40001,
        jupyter_token="t" * 32,
        ports={"8888": 40001},
    )
    assert routes.route_for(str(instance.pk)) is not None
    alice.is_active = False
    alice.save(update_fields=["is_active"])
    assert routes.route_for(str(instance.pk)) is None
