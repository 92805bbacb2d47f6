"""Live instance events: published to the channel-layer group ``instance.<id>``.

Sent after the transaction commits, so nobody sees a state the database does not
have. Losing a live message is harmless (the page reloads state from the API);
failing a transition because Redis hiccupped would not be.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def instance_group(instance_id) -> str:
    return f"instance.{instance_id}"


def publish_instance_event(instance_id, payload: dict) -> None:
    def send() -> None:
        try:
            layer = get_channel_layer()
            if layer is None:
                return
            async_to_sync(layer.group_send)(
                instance_group(instance_id), {"type": "instance.event", **payload}
            )
        except Exception:  # noqa: BLE001 - see module docstring
            log.warning("could not publish event for instance %s", instance_id, exc_info=True)

    transaction.on_commit(send)


# The states that end a wait whatever was waited for: from these the instance moves on
# only when someone acts (the SDK raises on them rather than waiting on).
WAIT_ENDS = frozenset({"failed", "lost", "terminated"})
POLL_FALLBACK_SECONDS = 0.5


def wait_for_status(
    instance_id, wanted: str, timeout: float, current: Callable[[], str]
) -> tuple[str, bool]:
    """Block until the instance is ``wanted`` (or in WAIT_ENDS), for at most ``timeout`` s.

    Listens on the instance's group before reading ``current()`` (the state in the
    database), so a change committed in between is not missed. Returns the last state
    seen and whether the wait ended on a change rather than the timeout. Holds no
    database connection while it waits; the caller reads the instance afresh after.
    """
    stops = WAIT_ENDS | {wanted}

    async def wait() -> tuple[str, bool]:
        layer = get_channel_layer()
        group = instance_group(instance_id)
        # A plain (not process-local "!") channel: any thread's event loop may receive on it.
        channel = f"instance-wait.{uuid.uuid4().hex}"
        await layer.group_add(group, channel)
        try:
            status = await sync_to_async(current)()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while status not in stops:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return status, False
                try:
                    message = await asyncio.wait_for(layer.receive(channel), remaining)
                except TimeoutError:
                    return status, False
                status = message.get("status") or status
            return status, True
        finally:
            await layer.group_discard(group, channel)

    try:
        return async_to_sync(wait)()
    except Exception:  # noqa: BLE001 - the channel layer is down: the database still answers
        log.warning(
            "instance %s: waiting by polling (channel layer failed)", instance_id, exc_info=True
        )
        deadline = time.monotonic() + timeout
        while (status := current()) not in stops:
            if time.monotonic() >= deadline:
                return status, False
            time.sleep(min(POLL_FALLBACK_SECONDS, max(0.0, deadline - time.monotonic())))
        return status, True
