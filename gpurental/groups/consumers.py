"""``/ws/groups/<id>/``: a group's page, live. On connect, the samples of the last half
hour and the replicas; then, as the autoscaler records them (``group_tick``), each new
sample with the replicas' states and the tick's events (``events.publish_group_frame``).

For the group's owner (a team's: its members) and staff; anyone else is closed with 4404 whether the group
exists or not, and the stream ends when its viewer logs out (``WatchedConsumer``).
"""

from __future__ import annotations

import uuid

from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model

from gpurental.groups.events import group_stream
from gpurental.groups.models import Group
from gpurental.groups.selectors import group_frame, groups_visible_to
from gpurental.telemetry.consumers import (
    CLOSE_NOT_FOUND,
    CLOSE_UNAUTHENTICATED,
    WatchedConsumer,
)


def _snapshot(user, group_id: str) -> dict | None:
    try:
        uuid.UUID(str(group_id))
    except ValueError:
        return None
    group = group_watchable_by(user=user, group_id=group_id)
    return None if group is None else group_frame(group)


def group_watchable_by(*, user, group_id):
    """Its owner's, staff's, and every member's of the team that owns it (viewers too)."""
    return (
        groups_visible_to(user=user).filter(pk=group_id).first()
        or Group.objects.filter(pk=group_id, user__team__memberships__user=user).first()
    )


class GroupConsumer(WatchedConsumer):
    metrics_stream = "group"
    stream: str | None = None

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        group_id = self.scope["url_route"]["kwargs"]["group_id"]
        # Join first, then read: a frame sent in between arrives twice (the page keeps
        # samples by time and drops what it has), never not at all.
        stream = group_stream(group_id)
        await self.channel_layer.group_add(stream, self.channel_name)
        snapshot = await database_sync_to_async(_snapshot)(user, group_id)
        if snapshot is None:
            await self.channel_layer.group_discard(stream, self.channel_name)
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.stream, self.group_id = stream, group_id
        await self.accept()
        await self.send_json({"type": "snapshot", **snapshot})
        self.watch()

    def joined_groups(self) -> list[str]:
        return [self.stream] if self.stream else []

    def object_still_allowed(self, user_id) -> int | None:
        user = get_user_model().objects.get(pk=user_id)
        found = group_watchable_by(user=user, group_id=self.group_id)
        return None if found is not None else CLOSE_NOT_FOUND

    async def disconnect(self, code):
        self.stop_watching()
        if self.stream:
            await self.channel_layer.group_discard(self.stream, self.channel_name)

    async def group_frame(self, message):
        await self.send_json({k: v for k, v in message.items() if k != "type"} | {"type": "frame"})
