"""Live samples from agents over HTTP (``protocol.TELEMETRY_INGEST_PATH``): checked, then
sent to the host's viewers and kept as its latest and recent samples, exactly as an
agent on the single-box Redis does itself (``agent.sampler.ChannelPublisher``).

Only the web tier holds the channel layer's Redis; an agent holds its key, nothing more.
"""

from __future__ import annotations

import asyncio
import time
import weakref

import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.utils import timezone

from gpurental import protocol
from gpurental.agent.sampler import MESSAGE_TYPE, host_group, store_sample
from gpurental.fleet.hostlink import MessageRefused, NoKeys, keys_of, refuse_message
from gpurental.fleet.models import Host
from gpurental.telemetry.selectors import layer_redis_url

KEY_TTL_S = 60.0  # a rotated token takes effect here within a minute
_keys: dict[str, tuple[str, float]] = {}
# One client per event loop (Daphne has one; a test server may start one per request).
_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class SampleRefused(Exception):
    pass


async def _host_key(name: str) -> str | None:
    cached = _keys.get(name)
    if cached and cached[1] > time.monotonic():
        return cached[0]
    sealed = await Host.objects.filter(name=name).values_list("keys_sealed", flat=True).afirst()
    try:
        key = keys_of(sealed).sign if sealed is not None else None
    except NoKeys:
        key = None
    if key:
        _keys[name] = (key, time.monotonic() + KEY_TTL_S)
    return key


def _redis() -> aioredis.Redis:
    loop = asyncio.get_running_loop()
    if loop not in _clients:
        _clients[loop] = aioredis.Redis.from_url(layer_redis_url(), socket_timeout=2)
    return _clients[loop]


async def _refuse(name: str, why: str) -> None:
    """Audited (once a minute per host, like every refused message) and raised."""
    try:
        await sync_to_async(refuse_message)(
            name=name, what="telemetry", why=why, now=timezone.now()
        )
    except MessageRefused as exc:
        raise SampleRefused(str(exc)) from exc


async def sample_ingest(*, message: dict, now: float) -> None:
    name = str(message.get("host", ""))[:63]
    key = await _host_key(name)
    if key is None:
        await _refuse(name, "no host of that name")
    try:
        payload = protocol.verify(key, message, host=name)
    except protocol.Forged as exc:
        await _refuse(name, str(exc))
    sent_at = payload.get("sent_at")
    if (
        not isinstance(sent_at, int | float)
        or abs(now - sent_at) > protocol.TELEMETRY_INGEST_MAX_AGE_S
    ):
        raise SampleRefused(f"sample from {name!r} refused: sent_at is not within the last minute")
    sample = payload.get("sample")
    if not isinstance(sample, dict) or not isinstance(sample.get("gpus"), list):
        raise SampleRefused(f"sample from {name!r} refused: no GPUs in it")
    # The host is the one that signed: a sample never speaks for another host.
    sample = {**sample, "type": MESSAGE_TYPE, "host": name}
    await get_channel_layer().group_send(host_group(name), sample)
    await store_sample(_redis(), name, sample)
