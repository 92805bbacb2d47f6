"""Live instance events: published to the channel-layer group ``instance.<id>``.

Sent after the transaction commits, so nobody sees a state the database does not
have. Losing a live message is harmless (the page reloads state from the API);
failing a transition because Redis hiccupped would not be.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def instance_group(instance_id) -> str:
    return f"instance.{instance_id}"


def publish_instance_event(instance_id, payload: dict) -> None:
    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(
                instance_group(instance_id), {"type": "instance.event", **payload}
            )
        except Exception:  # noqa: BLE001 - see module docstring
            log.warning("could not publish event for instance %s", instance_id, exc_info=True)

    transaction.on_commit(send)
