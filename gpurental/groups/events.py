"""Telling others that a group changed, after commit:

- the gateways (its replicas' roles, its spec): they drop their cached view of it at
  once; losing one is harmless, as they also expire what they cache;
- the console's group pages (``GroupConsumer``, ``/ws/groups/<id>/``), through the
  channel layer: each new load sample with the replicas' states, as the autoscaler
  records it, and the replicas again when they change; a page that misses one has the
  next within a tick.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from gpurental.rentals.events import group_state_channel, group_state_publish

log = logging.getLogger(__name__)


def group_channel(group_id) -> str:
    return group_state_channel(group_id)


def publish_group_changed(group_id) -> None:
    transaction.on_commit(lambda: group_state_publish(group_id))


def group_stream(group_id) -> str:
    """The channel-layer group of a group's page viewers."""
    return f"groups.{group_id}"


def publish_group_frame(group_id, frame: dict) -> None:
    """Send ``frame`` (``{"samples": [...], "replicas": [...], "status": ...}``, see
    ``selectors.group_frame``) to the group's page viewers, after commit."""

    def send() -> None:
        try:
            layer = get_channel_layer()
            if layer is not None:
                async_to_sync(layer.group_send)(
                    group_stream(group_id), {"type": "group.frame", **frame}
                )
        except Exception:  # noqa: BLE001 - see the module docstring
            log.warning("could not publish to the viewers of group %s", group_id, exc_info=True)

    transaction.on_commit(send)
