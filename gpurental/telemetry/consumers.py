"""Websocket streams. An instance stream carries its status and progress events to
its owner (and staff); nobody else may subscribe.

Close codes: 4401 not logged in, 4404 no such instance *for this user* (the same
answer whether it exists or not, so the stream leaks nothing).
"""

from __future__ import annotations

import uuid

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from gpurental.rentals.events import instance_group
from gpurental.rentals.selectors import instance_visible_to

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
SNAPSHOT_EVENTS = 200


class InstanceConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        instance_id = self.scope["url_route"]["kwargs"]["instance_id"]
        snapshot = await database_sync_to_async(_snapshot)(user, instance_id)
        if snapshot is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = instance_group(instance_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        # The current state first, so a page never misses what happened before it subscribed.
        await self.send_json({"type": "snapshot", **snapshot})

    async def disconnect(self, code):
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def instance_event(self, event):
        await self.send_json({k: v for k, v in event.items() if k != "type"} | {"type": "event"})


def _snapshot(user, instance_id: str) -> dict | None:
    try:
        uuid.UUID(str(instance_id))
    except ValueError:
        return None
    instance = instance_visible_to(user=user, instance_id=instance_id)
    if instance is None:
        return None
    events = list(instance.events.order_by("-created_at", "-id")[:SNAPSHOT_EVENTS])[::-1]
    return {
        "status": instance.status,
        "reason": instance.status_reason,
        "events": [
            {
                "kind": e.kind,
                "status": e.to_status,
                "step": e.step,
                "reason": e.reason,
                "at": e.created_at.isoformat(),
            }
            for e in events
        ],
    }
