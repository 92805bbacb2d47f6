"""Websocket streams.

``/ws/instances/<id>/``: the instance's status and progress events, and the live
samples of **its** GPUs, for its owner and staff; nobody else may subscribe.
``/ws/hosts/<name>/`` (every GPU of one host) and ``/ws/fleet/`` (every host, one
batched message a second) are for staff only.

Close codes: 4401 not logged in, 4403 logged in but not staff (host and fleet
streams), 4404 no such instance *for this user* or no such host (for an instance,
the same answer whether it exists or not, so the stream leaks nothing); 1013 (try
again later) when the periodic check could not be made (the database or Redis is
restarting): the page reconnects, and the new stream checks the viewer afresh.

Servers restarting under an open stream. Redis restarting breaks the consumer's
channel receive, which ends the stream (Daphne closes it) and the page reconnects. A
Redis that lost its data without dropping the connection (a failover, a flush) forgets
the groups the stream joined: each periodic check joins them again (which also keeps a
stream open for days from reaching the layer's group expiry).

How samples reach viewers. Each agent publishes one message per host per second to
the group ``telemetry.host.<name>`` (``gpurental.agent.sampler``). An instance
consumer joins its host's group only while the instance holds GPUs, and forwards
only the GPU entries that pass two independent checks: the index is one the
control plane allocated to this instance (read from the database at connect and
again on every transition event), and the agent stamped the entry with this
instance's id (from the start spec it received). So a renter never sees another
tenant's GPU, even in the moments around a stop and a new launch on that GPU.

Why relay in the consumer, rather than a control-side process that fans host
messages out into per-instance groups: it needs no extra process and no extra hop
(sample → Redis → consumer), the permission check sits where the viewer was
authenticated, and the cost per host message is one ``group_send`` to a group
whose size is the number of people watching that host (a handful). A fan-out relay
would cost one more ``group_send`` per instance per second whether anyone watches
or not, and one more hop of latency. Measured (``bench/telemetry.py``, 2-core VM,
one Daphne process): 100 hosts × 1000 instance viewers at 1 Hz, 0 dropped, p50
7 ms, p99 ~100 ms; one process tops out near 1000 deliveries/s (core layer), so
more viewers need more Daphne processes, not a different fan-out.

The fleet stream does not join host groups: one feed per web process reads every
host's latest sample once a second and sends the same frame to each fleet viewer
(``gpurental.telemetry.feed``), so its cost does not grow with hosts × viewers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from gpurental.agent.sampler import host_group
from gpurental.fleet.models import Host
from gpurental.observability.counters import CountedWebsocket
from gpurental.rentals.events import instance_group
from gpurental.teams.selectors import instance_watchable_by
from gpurental.telemetry.feed import FleetFeed, fleet_feed
from gpurental.telemetry.selectors import recent_samples, telemetry_scope

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_TRY_AGAIN = 1013  # the check could not be made: the page reconnects
SNAPSHOT_EVENTS = 200

logger = logging.getLogger(__name__)


def _viewer_still_allowed(user_id, session_key: str | None, needs_staff: bool) -> int | None:
    """None while the viewer may still watch; else the close code. Logged out (the session
    is gone or now someone else's), deactivated, or no longer staff where staff is needed."""
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.models import Session
    from django.utils import timezone

    user = get_user_model().objects.filter(pk=user_id).only("is_active", "is_staff").first()
    if user is None or not user.is_active:
        return CLOSE_UNAUTHENTICATED
    if session_key is not None:
        session = Session.objects.filter(session_key=session_key, expire_date__gt=timezone.now())
        data = session.first()
        if data is None or str(data.get_decoded().get("_auth_user_id")) != str(user_id):
            return CLOSE_UNAUTHENTICATED
    if needs_staff and not user.is_staff:
        return CLOSE_FORBIDDEN
    return None


class WatchedConsumer(CountedWebsocket, AsyncJsonWebsocketConsumer):
    """A stream that ends when its viewer logs out, is deactivated or loses staff status:
    checked again every ``WS_RECHECK_SECONDS``."""

    needs_staff = False
    _watch: asyncio.Task | None = None

    @classmethod
    async def encode_json(cls, content) -> str:
        # Every viewer gets a frame a second: no spaces in them.
        return json.dumps(content, separators=(",", ":"))

    def watch(self) -> None:
        user = self.scope["user"]
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        self._watch = asyncio.ensure_future(self._recheck(user.pk, key))

    async def _recheck(self, user_id, session_key) -> None:
        while True:
            await asyncio.sleep(settings.WS_RECHECK_SECONDS)
            try:
                code = await database_sync_to_async(_viewer_still_allowed)(
                    user_id, session_key, self.needs_staff
                )
                if code is None:
                    code = await database_sync_to_async(self.object_still_allowed)(user_id)
                if code is None:
                    for group in self.joined_groups():  # a Redis that lost them
                        await self.channel_layer.group_add(group, self.channel_name)
                        if group not in self.joined_groups():  # left it meanwhile
                            await self.channel_layer.group_discard(group, self.channel_name)
            except Exception:  # noqa: BLE001 - whatever failed, the stream is not left unchecked
                logger.warning(
                    "stream %s: the periodic check failed; closing it",
                    self.metrics_stream,
                    exc_info=True,
                )
                code = CLOSE_TRY_AGAIN
            if code is not None:
                await self.close(code=code)
                return

    def joined_groups(self) -> list[str]:
        """The channel-layer groups the stream is in (joined again at each check)."""
        return []

    def object_still_allowed(self, user_id) -> int | None:
        """None while the viewer may still see the streamed object (a team member removed
        since: CLOSE_NOT_FOUND); a consumer of one object overrides it."""
        return None

    def stop_watching(self) -> None:
        if self._watch is not None:
            self._watch.cancel()


def _gpu_fields(gpu: dict) -> dict:
    keys = ("index", "util", "mem_used", "mem_total", "temp", "power", "sm_clock", "stale")
    return {k: gpu.get(k) for k in keys}


class InstanceConsumer(WatchedConsumer):
    metrics_stream = "instance"

    def object_still_allowed(self, user_id) -> int | None:
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.get(pk=user_id)
        found = instance_watchable_by(user=user, instance_id=self.instance_id)
        return None if found is not None else CLOSE_NOT_FOUND

    group: str | None = None
    telemetry_group: str | None = None

    def joined_groups(self) -> list[str]:
        return [g for g in (self.group, self.telemetry_group) if g]

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
        self.instance_id = str(instance_id)
        self.gpu_indices: set[int] = set()
        self.group = instance_group(instance_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        # Read again now that we are subscribed: an event committed between the first
        # read and group_add would otherwise be in neither. (The page drops duplicates.)
        snapshot = await database_sync_to_async(_snapshot)(user, instance_id) or snapshot
        await self._follow(snapshot["telemetry"])
        await self.accept()
        self.watch()
        # The current state first, so a page never misses what happened before it subscribed.
        await self.send_json({"type": "snapshot", **snapshot})
        if self.telemetry_group:
            # The last 5 minutes of samples, so the live chart does not start empty.
            recent = await database_sync_to_async(recent_samples)(
                host=snapshot["telemetry"]["host"],
                instance_id=self.instance_id,
                gpu_indices=self.gpu_indices,
            )
            if recent:
                await self.send_json(
                    {
                        "type": "telemetry_backfill",
                        "samples": [
                            {**s, "gpus": [_gpu_fields(g) for g in s["gpus"]]} for s in recent
                        ],
                    }
                )

    async def _follow(self, scope: dict) -> None:
        """Listen to the host's samples only while the instance holds GPUs there."""
        self.gpu_indices = set(scope["gpus"])
        wanted = host_group(scope["host"]) if scope["host"] and self.gpu_indices else None
        if wanted == self.telemetry_group:
            return
        if self.telemetry_group:
            await self.channel_layer.group_discard(self.telemetry_group, self.channel_name)
        if wanted:
            await self.channel_layer.group_add(wanted, self.channel_name)
        self.telemetry_group = wanted

    async def disconnect(self, code):
        self.stop_watching()
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if self.telemetry_group:
            await self.channel_layer.group_discard(self.telemetry_group, self.channel_name)

    async def instance_event(self, event):
        await self.send_json({k: v for k, v in event.items() if k != "type"} | {"type": "event"})
        if event.get("kind") == "transition":
            # GPUs are taken and released by transitions: re-read what this stream may show.
            scope = await database_sync_to_async(telemetry_scope)(instance_id=self.instance_id)
            await self._follow(scope)

    async def telemetry_sample(self, message):
        gpus = [
            _gpu_fields(gpu)
            for gpu in message.get("gpus", [])
            if gpu.get("index") in self.gpu_indices and gpu.get("instance") == self.instance_id
        ]
        if gpus:
            await self.send_json(
                {
                    "type": "telemetry",
                    "ts": message.get("ts"),
                    "simulated": bool(message.get("simulated")),
                    "gpus": gpus,
                }
            )


def _snapshot(user, instance_id: str) -> dict | None:
    try:
        uuid.UUID(str(instance_id))
    except ValueError:
        return None
    instance = instance_watchable_by(user=user, instance_id=instance_id)
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
                **({"stop_at": e.data["stop_at"]} if e.data.get("stop_at") else {}),
            }
            for e in events
        ],
        "telemetry": telemetry_scope(instance_id=instance_id),
    }


async def _staff_only(consumer: AsyncJsonWebsocketConsumer) -> bool:
    user = consumer.scope.get("user")
    if user is None or not user.is_authenticated:
        await consumer.close(code=CLOSE_UNAUTHENTICATED)
        return False
    if not user.is_staff:
        await consumer.close(code=CLOSE_FORBIDDEN)
        return False
    return True


class HostConsumer(WatchedConsumer):
    """Every GPU of one host, each second, as the agent sent it (staff only)."""

    metrics_stream = "host"

    group: str | None = None
    needs_staff = True

    def joined_groups(self) -> list[str]:
        return [self.group] if self.group else []

    async def connect(self):
        if not await _staff_only(self):
            return
        name = self.scope["url_route"]["kwargs"]["host_name"]
        exists = await database_sync_to_async(Host.objects.filter(name=name).exists)()
        if not exists:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = host_group(name)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.watch()
        await self.send_json({"type": "snapshot", "host": name})

    async def disconnect(self, code):
        self.stop_watching()
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def telemetry_sample(self, message):
        await self.send_json(
            {
                "type": "telemetry",
                "host": message.get("host"),
                "ts": message.get("ts"),
                "simulated": bool(message.get("simulated")),
                "gpus": [_gpu_fields(g) | {"instance": g.get("instance")} for g in message["gpus"]],
            }
        )


class FleetConsumer(WatchedConsumer):
    """Every host's utilisation, at most one message a second (staff only), from this
    process's shared fleet feed (``gpurental.telemetry.feed``)."""

    metrics_stream = "fleet"

    feed: FleetFeed | None = None
    needs_staff = True

    async def connect(self):
        if not await _staff_only(self):
            return
        self.feed = fleet_feed()
        hosts = await self.feed.join(self)
        await self.accept()
        self.watch()
        await self.send_json({"type": "snapshot", "hosts": hosts})

    async def disconnect(self, code):
        self.stop_watching()
        if self.feed is not None:
            await self.feed.leave(self)
