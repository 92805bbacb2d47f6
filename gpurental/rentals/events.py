"""Live instance events: published to the channel-layer group ``instance.<id>`` (the
console's websocket), and each new state on the Redis channel ``state_channel(id)`` (what
a long-poll waits on).

Sent after the transaction commits, so nobody sees a state the database does not
have. Losing a live message is harmless (the page reloads state from the API; a waiter
answers at its timeout with the state then); failing a transition because Redis
hiccupped would not be.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def instance_group(instance_id) -> str:
    return f"instance.{instance_id}"


def state_channel(instance_id) -> str:
    return f"gpurental:instance-state:{instance_id}"


def group_state_channel(group_id) -> str:
    """An elastic group's change channel: the gateways read the group's replica set again."""
    return f"gpurental:group-state:{group_id}"


def group_state_publish(group_id) -> None:
    """Tell the gateways a group changed (call it after commit). A lost message is
    harmless: their route TTL picks the change up."""
    try:
        state_redis().publish(group_state_channel(group_id), "changed")
    except Exception:  # noqa: BLE001 - see above
        log.warning("could not publish the change of group %s", group_id, exc_info=True)


@functools.cache
def _redis(url: str) -> redis.Redis:
    # A stalled Redis fails a publish in 2 s; a waiter's get_message(timeout=...) reads
    # with its own timeout.
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)


def state_redis() -> redis.Redis:
    """The channel layer's Redis (where the console's events go too)."""
    from gpurental.telemetry.selectors import layer_redis_url

    return _redis(layer_redis_url())


def publish_instance_event(instance_id, payload: dict) -> None:
    def send() -> None:
        # The waiters' wake-up first: one PUBLISH, where the channel layer's group send
        # takes several Redis calls (~6 ms on a small host) that a long-poll need not wait for.
        try:
            state_redis().publish(state_channel(instance_id), "changed")
        except Exception:  # noqa: BLE001 - see module docstring
            log.warning("could not publish the state of instance %s", instance_id, exc_info=True)
        try:
            layer = get_channel_layer()
            if layer is not None:
                async_to_sync(layer.group_send)(
                    instance_group(instance_id), {"type": "instance.event", **payload}
                )
        except Exception:  # noqa: BLE001 - see module docstring
            log.warning("could not publish event for instance %s", instance_id, exc_info=True)

    transaction.on_commit(send)


GROUP_SENDS_AT_ONCE = 16


def publish_instance_events(items: list[tuple]) -> None:
    """``publish_instance_event`` for many instances, on commit: their state channels in one
    Redis pipeline, and the channel layer's group sends run together on one event loop."""

    def send() -> None:
        try:
            pipe = state_redis().pipeline(transaction=False)
            for instance_id, _payload in items:
                pipe.publish(state_channel(instance_id), "changed")
            pipe.execute()
        except Exception:  # noqa: BLE001 - see module docstring
            log.warning("could not publish the state of %s instances", len(items), exc_info=True)
        layer = get_channel_layer()
        if layer is None:
            return

        async def group_sends() -> None:
            # A few at a time: each holds one of the layer's Redis connections.
            room = asyncio.Semaphore(GROUP_SENDS_AT_ONCE)

            async def one(instance_id, payload) -> None:
                async with room:
                    await layer.group_send(
                        instance_group(instance_id), {"type": "instance.event", **payload}
                    )

            results = await asyncio.gather(
                *(one(i, payload) for i, payload in items), return_exceptions=True
            )
            failed = [r for r in results if isinstance(r, BaseException)]
            if failed:
                log.warning(
                    "could not publish %s of %s instance events: %s",
                    len(failed),
                    len(items),
                    failed[0],
                )

        try:
            async_to_sync(group_sends)()
        except Exception:  # noqa: BLE001 - see module docstring
            log.warning("could not publish %s instance events", len(items), exc_info=True)

    transaction.on_commit(send)


def instances_wake(instance_ids) -> None:
    """Publish a wake-up on each instance's state channel now (call it after commit): the
    gateway and the SSH gateway ask again who may reach each, and close what they no
    longer admit. A lost wake-up is harmless: the gateway's route TTL ends access too."""
    for instance_id in instance_ids:
        try:
            state_redis().publish(state_channel(instance_id), "changed")
        except Exception:  # noqa: BLE001 - see module docstring
            log.warning("could not wake the gateway for instance %s", instance_id, exc_info=True)


# The states that end a wait whatever was waited for: from these the instance moves on
# only when someone acts (the SDK raises on them rather than waiting on).
WAIT_ENDS = frozenset({"failed", "lost", "terminated"})
POLL_FALLBACK_SECONDS = 0.5


@contextlib.contextmanager
def wait_slot(owner: str, limit: int, ttl: int) -> Iterator[bool]:
    """Count ``owner``'s waits in progress: True while it has at most ``limit``. The count
    expires after ``ttl`` s (a worker killed mid-wait does not hold a slot for ever); when
    Redis cannot count, the wait is allowed (it then polls the database, see below)."""
    key = f"gpurental:waits:{owner}"
    try:
        client = state_redis()
        count = client.incr(key)
        client.expire(key, ttl)
    except (redis.RedisError, OSError):
        yield True
        return
    try:
        yield count <= limit
    finally:
        with contextlib.suppress(redis.RedisError, OSError):
            client.decr(key)


def wait_for_status(
    instance_id, wanted: str, timeout: float, current: Callable[[], str]
) -> tuple[str, bool]:
    """Block until the instance is ``wanted`` (or in WAIT_ENDS), for at most ``timeout`` s.

    Subscribes to the instance's state channel (and waits for Redis to confirm) before
    reading ``current()``, the state in the database, so a change committed in between is
    not missed; each message is a wake-up to read it again. Returns the last state read
    and whether the wait ended on a change rather than the timeout. ``current`` should
    not keep a database connection open (the view's closes it after each read). Plain
    blocking Redis, so it waits the same in a WSGI or an ASGI worker's thread.
    """
    stops = WAIT_ENDS | {wanted}
    deadline = time.monotonic() + timeout
    try:
        pubsub = state_redis().pubsub()
        try:
            pubsub.subscribe(state_channel(instance_id))
            # Only once Redis confirms the subscription can no publish slip past us.
            while (
                confirmed := pubsub.get_message(timeout=max(0.0, deadline - time.monotonic()))
            ) is None or confirmed["type"] != "subscribe":
                if time.monotonic() >= deadline:
                    status = current()
                    return status, status in stops
            status = current()
            while status not in stops:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return status, False
                if pubsub.get_message(timeout=remaining) is not None:
                    # A wake-up, not the truth: messages from different processes may
                    # arrive out of order. The database says where the instance is.
                    status = current()
            return status, True
        finally:
            pubsub.close()
    except (redis.RedisError, OSError):  # Redis is down: the database still answers
        log.warning("instance %s: waiting by polling (Redis failed)", instance_id, exc_info=True)
        while (status := current()) not in stops:
            if time.monotonic() >= deadline:
                return status, False
            time.sleep(min(POLL_FALLBACK_SECONDS, max(0.0, deadline - time.monotonic())))
        return status, True
