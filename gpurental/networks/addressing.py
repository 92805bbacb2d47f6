"""Subnets of the private networks, carved from the operator's pool."""

from __future__ import annotations

import ipaddress

from django.conf import settings


def _pool() -> ipaddress.IPv4Network:
    return ipaddress.ip_network(settings.PRIVATE_NETWORK_POOL)


def capacity() -> int:
    """How many private networks the pool holds."""
    return 2 ** (settings.PRIVATE_NETWORK_PREFIX - _pool().prefixlen)


def subnet_of(index: int) -> str:
    pool, prefix = _pool(), settings.PRIVATE_NETWORK_PREFIX
    size = 2 ** (32 - prefix)
    if not 0 <= index < capacity():
        raise ValueError(f"private network {index} is outside the pool {pool}")
    return str(ipaddress.ip_network((int(pool.network_address) + index * size, prefix)))
