"""Who is on the other end: the client's address behind the proxies the operator trusts.

A reverse proxy (nginx, HAProxy, a load balancer) connects from its own address and
appends the address it was connected from to ``X-Forwarded-For``. Only the entries that
trusted proxies wrote are true: anyone may send the header, so everything left of the
first untrusted address is whatever the client chose to write. The client is therefore
the right-most address in ``peer``, then the chain from right to left, that is not a
trusted proxy (``TRUSTED_PROXIES``: addresses or CIDR networks; empty trusts none, so
the header is ignored and the peer is the client).

Every place that needs a client's address asks here: Django (``client_ip``: throttles,
logins, the audit log) and the gateway (``forwarded_for``: what it tells an instance).
The functions below ``client_ip`` are plain, so the gateway and tests use them alone.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.lru_cache(maxsize=16)
def trusted_networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    """``TRUSTED_PROXIES`` as networks; ValueError names an entry that is neither an
    address nor a network."""
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"TRUSTED_PROXIES: {entry!r} is not an IP address or network "
                "(e.g. 10.0.0.5 or 10.0.0.0/24)"
            ) from None
    return tuple(networks)


def _address(text: str) -> Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port, as some proxies write it
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # a dual-stack socket's view of an IPv4 peer
    return address


def _trusted(address: Address, networks: Iterable[Network]) -> bool:
    return any(address in network for network in networks)


def client_address(
    *, peer: str | None, forwarded_for: str | None, trusted: Iterable[Network]
) -> str | None:
    """The client's address: ``peer`` unless it is a trusted proxy, else the right-most
    untrusted address of ``forwarded_for`` (a chain of them, comma-separated, as joined
    from every such header). A chain of nothing but trusted proxies names the left-most;
    an entry that is no address ends the walk at the proxy that wrote it."""
    networks = tuple(trusted)
    current = _address(peer or "")
    if current is None:
        return peer or None
    if not networks or not _trusted(current, networks):
        return str(current)
    for entry in reversed((forwarded_for or "").split(",")):
        if not entry.strip():
            continue
        hop = _address(entry)
        if hop is None:
            break
        current = hop
        if not _trusted(current, networks):
            break
    return str(current)


def forwarded_for(*, peer: str | None, incoming: str | None, trusted: Iterable[Network]) -> str:
    """The ``X-Forwarded-For`` to send on: a trusted proxy's chain with ``peer`` appended;
    from anyone else just ``peer`` (what they wrote is dropped)."""
    peer = peer or ""
    address = _address(peer)
    networks = tuple(trusted)
    if incoming and incoming.strip() and address is not None and _trusted(address, networks):
        return f"{incoming.strip()}, {peer}"
    return peer


def client_ip(request) -> str | None:
    """The client's address of a Django request (``REMOTE_ADDR`` behind TRUSTED_PROXIES)."""
    from django.conf import settings

    return client_address(
        peer=request.META.get("REMOTE_ADDR"),
        forwarded_for=request.META.get("HTTP_X_FORWARDED_FOR"),
        trusted=trusted_networks(tuple(settings.TRUSTED_PROXIES)),
    )
