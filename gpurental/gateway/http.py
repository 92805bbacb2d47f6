"""The instance gateway: HTTP and websockets, from ``<id>[-<port>].<GATEWAY_DOMAIN>`` to the
instance's port on its GPU host (``python -m gpurental.gateway``).

For every request:
1. The host name names an instance (and a port); anything else is 404.
2. ``/_gw/enter?t=<ticket>`` spends a one-time ticket and sets the session cookie for
   this origin only (no Domain attribute: a sibling instance never receives it).
3. Otherwise the signed cookie must name this very origin, its user must own the
   instance (or, for a team's instance, be a member who may operate it, as of the
   route's last lookup: at most ROUTE_TTL_S old), the instance must be running, and the
   run must be the one the cookie was issued for. Anyone else, logged in or not, gets
   the same 404.
4. A request that can change something (not GET/HEAD/OPTIONS) and every websocket must
   come from this origin (``Origin`` header): the injected token turns off JupyterLab's
   own XSRF and Origin checks, so the gateway makes them.
5. What the client sent that only the platform may say is stripped (``Authorization``,
   ``?token=``, the platform's cookie, ``X-Forwarded-*``); JupyterLab's token is added as
   ``Authorization: token …``. The token never reaches a browser.

Routes are cached in memory and dropped the moment an instance changes state (Redis
pub/sub, the same wake-ups the API's long-poll waits on), so a stopped, terminated or
failed instance stops answering at once, and its open websockets are closed.

Groups' endpoints, ``grp-<group id>.<GATEWAY_DOMAIN>``, are an API with keys, not
cookies; they are handled in groups.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable

import aiohttp
import redis.asyncio as aioredis
from aiohttp import web
from django.conf import settings
from django.db import close_old_connections
from multidict import CIMultiDict

from gpurental.addresses import trusted_networks
from gpurental.gateway import groups, routes, stats, tickets
from gpurental.gateway.groups import HOP_BY_HOP, client_may_not_say, forwarded_chain
from gpurental.gateway.limits import ConnectionCaps
from gpurental.gateway.routes import Address, Route
from gpurental.groups import load as groups_load

log = logging.getLogger("gpurental.gateway")

# Only the platform may say these to an instance (and groups.client_may_not_say).
PLATFORM_ONLY = frozenset({"authorization", "host", "origin", "content-length"})
WEBSOCKET_HANDSHAKE = frozenset(
    {"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions"}
)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
ROUTE_TTL_S = 30.0  # a safety net: state changes drop a route at once
STATE_PATTERN = "gpurental:instance-state:*"
CHUNK = 64 * 1024
# A websocket message is held whole here before it goes on: one bound, both ways, so that
# no client or container can take the gateway's memory (with GATEWAY_MAX_CONNECTIONS_PER_USER
# sockets each). Kernel messages are far smaller; a bigger output should be a file.
MAX_WS_MESSAGE = 4 * 1024 * 1024


class RouteCache:
    """Routes by instance id, looked up in the database on a miss. ``drop`` forgets one at
    once; a lookup that was under way when its instance changed is not kept."""

    def __init__(
        self, lookup: Callable[[str], Route | None] | None = None, ttl: float = ROUTE_TTL_S
    ):
        self._lookup = lookup or _route_from_db
        self._ttl = ttl
        self._entries: dict[str, tuple[float, Route | None]] = {}
        self._drops: dict[str, int] = defaultdict(int)

    async def get(self, instance_id: str) -> Route | None:
        hit = self._entries.get(instance_id)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        before = self._drops[instance_id]
        route = await asyncio.to_thread(self._lookup, instance_id)
        if self._drops[instance_id] == before:
            self._entries[instance_id] = (time.monotonic() + self._ttl, route)
        return route

    def drop(self, instance_id: str) -> None:
        self._drops[instance_id] += 1
        self._entries.pop(instance_id, None)

    def clear(self) -> None:
        for instance_id in list(self._entries):
            self.drop(instance_id)


def _route_from_db(instance_id: str) -> Route | None:
    close_old_connections()
    return routes.route_for(instance_id)


def not_found(detail: str = "") -> web.Response:
    """The one answer to anything the viewer may not reach: it says nothing about whether
    the instance exists."""
    text = detail or "There is nothing here for you. Open your instance from the console."
    body = (
        "<!doctype html><meta charset=utf-8><title>Not found</title>"
        f"<h1>Not found</h1><p>{html.escape(text)}</p>"
    )
    return web.Response(
        status=404,
        text=body,
        content_type="text/html",
        headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
    )


class Gateway:
    def __init__(
        self,
        *,
        domain: str | None = None,
        scheme: str | None = None,
        redis_url: str | None = None,
        route_cache: RouteCache | None = None,
        group_endpoints: groups.GroupEndpoints | None = None,
    ):
        self.domain = (domain or settings.GATEWAY_DOMAIN).lower()
        self.scheme = scheme or settings.GATEWAY_SCHEME
        self.secure = self.scheme == "https"
        self.cookie = tickets.cookie_name(self.secure)
        if redis_url is None:
            from gpurental.telemetry.selectors import layer_redis_url

            redis_url = layer_redis_url()
        self.redis = aioredis.Redis.from_url(redis_url, socket_connect_timeout=2)
        self.routes = route_cache or RouteCache()
        self.trusted_proxies = trusted_networks(tuple(settings.TRUSTED_PROXIES))
        # Groups' endpoints, grp-<id>.<domain> (gpurental/gateway/groups.py).
        self.groups = group_endpoints or groups.GroupEndpoints(
            scheme=self.scheme, trusted_proxies=self.trusted_proxies
        )
        self.caps = ConnectionCaps(
            per_user=settings.GATEWAY_MAX_CONNECTIONS_PER_USER,
            per_instance=settings.GATEWAY_MAX_CONNECTIONS_PER_INSTANCE,
        )
        self.sockets: dict[str, set[web.WebSocketResponse]] = defaultdict(set)
        self.client: aiohttp.ClientSession = None  # type: ignore[assignment]  # made at startup
        self._listener: asyncio.Task | None = None
        self._reporter: asyncio.Task | None = None
        self.stats = stats.GatewayStats()
        self.listening = asyncio.Event()

    # --- the application ---------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(handler_args={"max_field_size": 16384})
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, app: web.Application) -> None:
        self.client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            auto_decompress=False,  # bytes pass through as the instance sent them
            timeout=aiohttp.ClientTimeout(total=None, connect=10, sock_read=None),
            cookie_jar=aiohttp.DummyCookieJar(),  # never keep one viewer's cookies
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"),
        )
        self._listener = asyncio.create_task(self._listen())
        self._reporter = asyncio.create_task(self._report())
        self.groups.start(self.client, self.redis)

    async def _stop(self, app: web.Application) -> None:
        for task in (self._listener, self._reporter):
            if task:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.groups.stop()
        for sockets in list(self.sockets.values()):
            for ws in list(sockets):
                await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=b"gateway stopping")
        if self.client:
            await self.client.close()
        await self.redis.aclose()

    # --- revocation ----------------------------------------------------------

    async def _listen(self) -> None:
        """Forget a route the moment its instance changes state; while Redis is away,
        routes live at most ROUTE_TTL_S."""
        delay = 0.5
        while True:
            try:
                async with self.redis.pubsub() as pubsub:
                    await pubsub.psubscribe(STATE_PATTERN, groups.GROUP_STATE_PATTERN)
                    self.routes.clear()  # whatever changed while we were not listening
                    self.groups.clear()
                    self.listening.set()
                    delay = 0.5
                    async for message in pubsub.listen():
                        if message.get("type") == "pmessage":
                            channel = message["channel"]
                            if isinstance(channel, bytes):
                                channel = channel.decode()
                            changed = channel.rsplit(":", 1)[-1]
                            if channel.startswith(groups.GROUP_STATE_PATTERN[:-1]):
                                self.groups.group_changed(changed)
                                continue
                            self.groups.instance_changed(changed)
                            await self._changed(changed)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - keep listening, whatever Redis did
                self.listening.clear()
                log.warning("instance state feed lost; retrying in %.1f s", delay, exc_info=True)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10)

    async def _changed(self, instance_id: str) -> None:
        self.routes.drop(instance_id)
        open_sockets = self.sockets.get(instance_id)
        if not open_sockets:
            return
        route = await self.routes.get(instance_id)
        for ws in list(open_sockets):
            if route is None or route.run != ws["run"]:
                await ws.close(
                    code=aiohttp.WSCloseCode.POLICY_VIOLATION, message=b"instance stopped"
                )
            elif not route.admits(ws["user"], ws["generation"]):
                # A team member removed or demoted since, or the person's credentials
                # revoked (a password reset, "log out everywhere").
                await ws.close(code=aiohttp.WSCloseCode.POLICY_VIOLATION, message=b"no access")

    # --- requests ------------------------------------------------------------

    async def _report(self) -> None:
        """Every second, this process's counts to Redis for /metrics (stats.py)."""
        key = stats.stats_key(groups_load.process_id())
        while True:
            await asyncio.sleep(1.0)
            self.stats.websockets = sum(len(s) for s in self.sockets.values())
            try:
                await self.redis.set(key, self.stats.encode(), ex=stats.STATS_TTL_S)
            except Exception:  # noqa: BLE001 - metrics must never stop the gateway
                log.debug("could not write the gateway's stats", exc_info=True)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        group_id = groups.parse_group_host(request.host or "", self.domain)
        if group_id is not None:
            return await self.groups.handle(request, group_id)
        started = time.monotonic()
        try:
            response = await self._handle_instance(request)
        finally:
            self.caps.release(request)
        self.stats.answered(response.status, time.monotonic() - started)
        return response

    async def _handle_instance(self, request: web.Request) -> web.StreamResponse:
        address = routes.parse_host(request.host or "", self.domain)
        if address is None:
            if request.path == "/healthz":
                return web.Response(text="ok\n")
            return not_found()
        if request.path == tickets.ENTER_PATH:
            return await self._enter(request, address)
        session = self._session(request, address)
        if session is None:
            return not_found()
        route = await self.routes.get(address.instance_id)
        if (
            route is None
            or not route.admits(session.get("u"), session.get("g"))
            or route.run != session.get("r")
        ):
            return not_found()
        upstream = route.upstream(address.port)
        if upstream is None:
            return not_found("This instance has no such port.")
        websocket = request.headers.get("Upgrade", "").lower() == "websocket"
        if (websocket or request.method not in SAFE_METHODS) and not self._same_origin(request):
            return web.Response(status=403, text="Cross-origin request refused by the gateway.\n")
        refused = self.caps.admit(request, user=session.get("u"), instance=route.instance_id)
        if refused is not None:
            return refused
        headers = self._upstream_headers(request, route)
        url = f"http://{upstream[0]}:{upstream[1]}{_without_token(request)}"
        if websocket:
            return await self._websocket(request, route, url, headers, session=session)
        return await self._http(request, url, headers)

    async def _enter(self, request: web.Request, address: Address) -> web.StreamResponse:
        ticket = request.query.get("t", "")
        raw = None
        if ticket:
            async with self.redis.pipeline(transaction=True) as pipe:
                # Spent as it is read: a second use finds nothing.
                raw, _ = (
                    await pipe.get(tickets.ticket_key(ticket))
                    .delete(tickets.ticket_key(ticket))
                    .execute()
                )
        expired = (
            "This link has been used or has expired. Open the instance again from the console."
        )
        if raw is None:
            return not_found(expired)
        data = json.loads(raw)
        if data.get("label") != address.label:
            return not_found(expired)
        self.routes.drop(address.instance_id)  # the freshest state for a new session
        route = await self.routes.get(address.instance_id)
        if route is None or not route.admits(data.get("user"), data.get("g")):
            return not_found(expired)
        response = web.HTTPFound(data.get("next") or "/")
        response.headers["Cache-Control"] = "no-store"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.set_cookie(
            self.cookie,
            tickets.cookie_value(
                user_id=data["user"],
                label=address.label,
                run=route.run,
                generation=data.get("g") or 0,
            ),
            max_age=settings.GATEWAY_SESSION_TTL_S,
            path="/",
            secure=self.secure,
            httponly=True,
            samesite="Lax",
        )
        log.info("session opened: user %s at %s", data["user"], address.label)
        return response

    def _session(self, request: web.Request, address: Address) -> dict | None:
        """The signed session for this very origin. Every cookie of the platform's name is
        tried: a sibling instance's page may toss one of its own at the parent domain
        (no ``__Host-`` prefix over plain http), which must not shadow the real one."""
        for header in request.headers.getall("Cookie", []):
            for part in header.split(";"):
                name, _, value = part.strip().partition("=")
                if name == self.cookie:
                    session = tickets.cookie_read(value)
                    if session is not None and session.get("l") == address.label:
                        return session
        return None

    def _same_origin(self, request: web.Request) -> bool:
        return request.headers.get("Origin") == f"{self.scheme}://{request.host}"

    def _upstream_headers(self, request: web.Request, route: Route) -> CIMultiDict:
        headers = CIMultiDict()
        for name, value in request.headers.items():
            lower = name.lower()
            if lower in HOP_BY_HOP or lower in PLATFORM_ONLY or lower in WEBSOCKET_HANDSHAKE:
                continue
            if client_may_not_say(lower):
                continue
            if lower == "cookie":
                value = _without_cookie(value, self.cookie)
                if not value:
                    continue
            if lower == "sec-websocket-protocol":
                continue  # negotiated by ws_connect below
            headers.add(name, value)
        headers["Authorization"] = f"token {route.token}"
        headers["X-Forwarded-For"] = forwarded_chain(request, self.trusted_proxies)
        headers["X-Forwarded-Proto"] = self.scheme
        headers["X-Forwarded-Host"] = request.host
        return headers

    async def _http(
        self, request: web.Request, url: str, headers: CIMultiDict
    ) -> web.StreamResponse:
        try:
            upstream = await self.client.request(
                request.method,
                url,
                headers=headers,
                data=request.content if request.body_exists else None,
                allow_redirects=False,
            )
        except (aiohttp.ClientError, OSError) as exc:
            log.info("upstream %s did not answer: %s", url.split("/", 3)[2], exc)
            return web.Response(
                status=502,
                text="The instance is not answering on this port (it may be starting or "
                "restarting). Try again in a moment.\n",
            )
        async with upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                lower = name.lower()
                if lower in HOP_BY_HOP:
                    continue
                if lower == "set-cookie" and _cookie_named(value) == self.cookie:
                    continue  # an instance may not replace the platform's cookie
                response.headers.add(name, value)
            if "Content-Length" not in upstream.headers and request.method != "HEAD":
                response.enable_chunked_encoding()
            await response.prepare(request)
            if request.method != "HEAD":
                async for chunk in upstream.content.iter_chunked(CHUNK):
                    await response.write(chunk)
            await response.write_eof()
            return response

    async def _websocket(
        self, request: web.Request, route: Route, url: str, headers: CIMultiDict, *, session: dict
    ) -> web.StreamResponse:
        offered = [
            p.strip()
            for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")
            if p.strip()
        ]
        try:
            upstream = await self.client.ws_connect(
                url, headers=headers, protocols=offered, max_msg_size=MAX_WS_MESSAGE, autoping=True
            )
        except (aiohttp.ClientError, OSError) as exc:
            log.info("upstream websocket %s refused: %s", url.split("/", 3)[2], exc)
            return web.Response(status=502, text="The instance refused the websocket.\n")
        ws = web.WebSocketResponse(
            protocols=(upstream.protocol,) if upstream.protocol else (),
            heartbeat=30,  # keeps idle kernels' sockets alive through middleboxes
            max_msg_size=MAX_WS_MESSAGE,
        )
        ws["run"], ws["user"], ws["generation"] = route.run, session.get("u"), session.get("g")
        try:
            await ws.prepare(request)
        except Exception:
            await upstream.close()
            raise
        sockets = self.sockets[route.instance_id]
        sockets.add(ws)
        try:
            await _pipe_both(ws, upstream)
        finally:
            sockets.discard(ws)
            if not sockets:
                self.sockets.pop(route.instance_id, None)
            await upstream.close()
            await ws.close()
        return ws


async def _pipe_both(
    client: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse
) -> None:
    async def pipe(source, send_str, send_bytes) -> None:
        async for message in source:
            if message.type == aiohttp.WSMsgType.TEXT:
                await send_str(message.data)
            elif message.type == aiohttp.WSMsgType.BINARY:
                await send_bytes(message.data)
            else:
                break

    tasks = [
        asyncio.create_task(pipe(client, upstream.send_str, upstream.send_bytes)),
        asyncio.create_task(pipe(upstream, client.send_str, client.send_bytes)),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, aiohttp.ClientError):
                await task


def _without_token(request: web.Request) -> str:
    """The path and query, minus any ``token`` a client tried to pass to JupyterLab."""
    url = request.rel_url
    return (url.without_query_params("token") if "token" in url.query else url).raw_path_qs


def _without_cookie(header: str, name: str) -> str:
    kept = [
        part.strip()
        for part in header.split(";")
        if part.strip() and part.strip().split("=", 1)[0].strip() != name
    ]
    return "; ".join(kept)


def _cookie_named(set_cookie: str) -> str:
    """The name a browser gives the cookie of a Set-Cookie value: whitespace around it is
    dropped (RFC 6265 5.2), so ``name =v`` sets ``name``."""
    pair = set_cookie.split(";", 1)[0]
    return pair.split("=", 1)[0].strip() if "=" in pair else ""
