"""Outgoing webhooks, the adapter to the outside: the URL rule (no private addresses), the
signature, and one signed POST to an address checked at the moment of sending.

Signature: ``X-Gpurental-Signature: t=<unix seconds>,v1=<hex>`` where ``<hex>`` is
HMAC-SHA256 with the endpoint's secret over ``<t>.<body>`` (the raw body bytes). A receiver
recomputes it, compares in constant time and refuses an old ``t`` (replays).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import ipaddress
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.utils.translation import gettext as _

SIGNATURE_HEADER = "X-Gpurental-Signature"
EVENT_HEADER = "X-Gpurental-Event"
DELIVERY_HEADER = "X-Gpurental-Delivery"
TOLERANCE_S = 300


class WebhookRefused(Exception):
    """A webhook URL the platform will not post to; ``field`` names the input at fault."""

    def __init__(self, message: str, field: str = "url"):
        super().__init__(message)
        self.message = message
        self.field = field


def signature(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"


def signature_verify(
    secret: str, header: str, body: bytes, *, now: float | None = None, tolerance: int = TOLERANCE_S
) -> bool:
    """What a receiver does (the README shows the same in a few lines)."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((now if now is not None else time.time()) - timestamp) > tolerance:
        return False
    return hmac.compare_digest(signature(secret, timestamp, body), parts.get("v1", ""))


def _refuse_address(host: str, address: str) -> None:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_global and not ip.is_multicast:
        return
    kind = next(
        (
            name
            for name, flag in (
                ("loopback", ip.is_loopback),
                ("link-local (cloud metadata lives there)", ip.is_link_local),
                ("unspecified", ip.is_unspecified),
                ("multicast", ip.is_multicast),
                ("private", ip.is_private),
            )
            if flag
        ),
        "non-public",
    )
    raise WebhookRefused(
        _(
            "%(host)s resolves to %(ip)s, a %(kind)s address; webhooks are sent only to public "
            "internet addresses (WEBHOOKS_ALLOW_PRIVATE=1 allows others, for tests and demos)"
        )
        % {"host": host, "ip": ip, "kind": kind}
    )


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str
    address: str  # the checked IP the POST connects to


def _resolve(host: str, port: int, timeout: float | None) -> list:
    """``getaddrinfo`` within ``timeout`` seconds (TimeoutError after): the resolver's own
    timeouts and retries can add up to half a minute, which a POST's deadline must cover.
    The lookup runs on a daemon thread that is left to the resolver when the time is up."""
    if timeout is None:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    answer: dict = {}

    def lookup() -> None:
        try:
            answer["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            answer["error"] = exc

    thread = threading.Thread(target=lookup, name="webhook-dns", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"{host} did not resolve within {timeout:g} s")
    if "error" in answer:
        raise answer["error"]
    return answer["infos"]


def url_check(url: str, *, timeout: float | None = None) -> Target:
    """Refuse what must not be posted to; returns where to connect. Called when an endpoint
    is saved and again before each POST (a name may resolve elsewhere by then), then
    within ``timeout`` seconds (TimeoutError after)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise WebhookRefused(
            _("the URL must start with https:// or http://; got %(url)r") % {"url": url}
        )
    if not parts.hostname:
        raise WebhookRefused(_("the URL has no host name: %(url)r") % {"url": url})
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise WebhookRefused(
            _("the URL's port is not a number from 1 to 65535: %(url)r") % {"url": url}
        ) from None
    try:
        infos = _resolve(parts.hostname, port, timeout)
    except (socket.gaierror, UnicodeError):
        raise WebhookRefused(
            _("the host name %(host)s does not resolve") % {"host": parts.hostname}
        ) from None
    addresses = [info[4][0] for info in infos]
    if not settings.WEBHOOKS_ALLOW_PRIVATE:
        for address in addresses:  # every one: the client may pick any of them
            _refuse_address(parts.hostname, address)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port, path, addresses[0])


class _Deadline:
    """The whole attempt's time limit. A socket timeout bounds one read, so an endpoint
    that trickles a byte now and then would hold the worker for ever; this shuts the
    connection's socket when the attempt's time is up, whatever it is doing (connecting,
    the TLS handshake, sending, reading the status, the headers or the body)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.fired = False
        self.conn: http.client.HTTPConnection | None = None
        # Held while shutting: once ``cancel`` returns, the socket may be closed (and its
        # number reused) without a late shutdown hitting another connection.
        self._lock = threading.Lock()
        self._cancelled = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def left(self) -> float:
        if self.fired:
            raise TimeoutError("the attempt's deadline passed")
        return max(self.at - time.monotonic(), 0.001)

    def watch(self, conn: http.client.HTTPConnection) -> None:
        self.conn = conn
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._cancelled:
                return
            # ``fired`` first: a socket the connection makes after this line is refused in
            # ``left`` (the order the connecting thread checks them in).
            self.fired = True
            sock = self.conn.sock if self.conn is not None else None
            if sock is not None:
                # The plain socket's shutdown, also under TLS: it wakes a read or a write
                # blocked in another thread, which then fails as a closed connection.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
        self._timer.cancel()


class _DeadlineHTTPConnection(http.client.HTTPConnection):
    """Plain HTTP to a checked address; connecting takes only what is left of the deadline."""

    def __init__(self, address: str, port: int, *, deadline: _Deadline):
        super().__init__(address, port, timeout=deadline.seconds)
        self._deadline = deadline

    def connect(self):
        self.sock = socket.create_connection((self.host, self.port), self._deadline.left())
        self._deadline.left()  # the deadline fired while connecting: the socket was missed
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to a checked address, with the URL's host name for SNI and the certificate.
    The handshake runs on ``self.sock``, where the deadline can shut it."""

    def __init__(self, host: str, address: str, *, port: int, deadline: _Deadline):
        super().__init__(
            host, port=port, timeout=deadline.seconds, context=ssl.create_default_context()
        )
        self._address = address
        self._deadline = deadline

    def connect(self):
        sock = socket.create_connection((self._address, self.port), self._deadline.left())
        sock.settimeout(self._deadline.left())
        self.sock = self._context.wrap_socket(
            sock, server_hostname=self.host, do_handshake_on_connect=False
        )
        self._deadline.left()
        self.sock.do_handshake()


@dataclass(frozen=True)
class PostResult:
    status_code: int | None
    error: str
    excerpt: str
    duration_ms: int

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def post(url: str, *, body: bytes, headers: dict[str, str], timeout: float) -> PostResult:
    """One POST, never following redirects (one could point inside). ``timeout`` is the
    whole attempt's, from looking the name up to the last byte read (``_Deadline``)."""
    started = time.monotonic()

    def done(code: int | None, error: str = "", excerpt: str = "") -> PostResult:
        return PostResult(
            code, error[:500], excerpt[:500], int((time.monotonic() - started) * 1000)
        )

    try:
        target = url_check(url, timeout=timeout)  # the name's lookup is within the deadline
    except WebhookRefused as exc:
        return done(None, f"refused: {exc.message}")
    except TimeoutError:
        return done(None, _timed_out(timeout))
    deadline = _Deadline(max(timeout - (time.monotonic() - started), 0.001))
    if target.scheme == "https":
        conn = _PinnedHTTPSConnection(
            target.host, target.address, port=target.port, deadline=deadline
        )
    else:
        conn = _DeadlineHTTPConnection(target.address, target.port, deadline=deadline)
    host_header = target.host if target.port in (80, 443) else f"{target.host}:{target.port}"
    deadline.watch(conn)
    try:
        conn.request(
            "POST",
            target.path,
            body=body,
            headers={
                "Host": host_header,
                "Content-Type": "application/json",
                "User-Agent": "gpurental-webhooks/1",
                **headers,
            },
        )
        response = conn.getresponse()
        excerpt = response.read(500).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:
        if deadline.fired:
            return done(None, _timed_out(timeout))
        return done(None, f"{type(exc).__name__}: {exc}")
    finally:
        deadline.cancel()
        conn.close()
    if deadline.fired:  # an answer without a length, ended by the deadline's shutdown
        return done(None, _timed_out(timeout))
    return done(response.status, "", excerpt)


def _timed_out(timeout: float) -> str:
    return f"timed out: no complete answer within {timeout:g} s (WEBHOOKS_TIMEOUT_S)"
