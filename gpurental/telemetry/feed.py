"""The fleet feed: one reader per web process for every staff fleet viewer in it.

Each agent keeps its host's newest message under ``latest_key`` (refreshed every second).
While at least one ``/ws/fleet/`` viewer is connected to this process, one task reads
all those keys in one MGET a second, builds one compact frame and sends the same text to
every viewer. Cost per second: one Redis round trip and one JSON encoding per process,
then one send per viewer, whatever the number of hosts. (A viewer that joined every
host's channel-layer group instead would receive hosts × viewers messages a second:
50 viewers on 300 hosts broke one process.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref

import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from redis.exceptions import RedisError

from gpurental.protocol import latest_key
from gpurental.telemetry.selectors import fleet_hosts, layer_redis_url, parse_latest

log = logging.getLogger(__name__)


def heatmap_entry(message: dict) -> dict:
    """What the heatmap needs from one host message."""
    return {
        "ts": message.get("ts"),
        "simulated": bool(message.get("simulated")),
        "gpus": [
            {
                "index": g.get("index"),
                "util": g.get("util"),
                "mem_used": g.get("mem_used"),
                "mem_total": g.get("mem_total"),
                "stale": bool(g.get("stale")),
            }
            for g in message.get("gpus", [])
        ],
    }


class FleetFeed:
    """Reads the fleet's latest samples once per ``interval`` and sends each viewer the
    hosts whose sample is newer than the last frame (every live host, normally), and
    once, with its GPUs marked stale, a host whose sampler went quiet."""

    interval = 1.0
    refresh_interval = 30.0  # how often the host list is read again

    def __init__(self) -> None:
        self.viewers: set = set()
        self.hosts: list[str] = []
        self.task: asyncio.Task | None = None
        self.sent_ts: dict[str, float] = {}  # host → ts of the sample last sent
        self.sent_gpus: dict[str, list[int]] = {}  # host → GPU indices last sent

    async def join(self, viewer) -> list[str]:
        """Adds a viewer (anything with ``send(text_data=)``); returns the host names."""
        if self.task is None:
            self.hosts = await database_sync_to_async(fleet_hosts)()
        self.viewers.add(viewer)
        if self.task is None:
            self.sent_ts, self.sent_gpus = {}, {}
            self.task = asyncio.create_task(self._run())
        return self.hosts

    async def leave(self, viewer) -> None:
        self.viewers.discard(viewer)
        if not self.viewers and self.task is not None:
            task, self.task = self.task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        client = aioredis.Redis.from_url(layer_redis_url(), socket_timeout=2)
        loop = asyncio.get_running_loop()
        next_refresh = loop.time() + self.refresh_interval
        try:
            while True:
                await asyncio.sleep(self.interval)
                if loop.time() >= next_refresh:
                    next_refresh = loop.time() + self.refresh_interval
                    self.hosts = await database_sync_to_async(fleet_hosts)()
                frame = await self._frame(client)
                if frame:
                    # Encoded once for every viewer, without the spaces: at 1000 hosts the
                    # frame is ~0.6 MB, sent once a second to each viewer.
                    text = json.dumps({"type": "fleet", "hosts": frame}, separators=(",", ":"))
                    for viewer in list(self.viewers):
                        try:
                            await viewer.send(text_data=text)
                        except Exception:  # one broken viewer must not stop the others
                            log.warning("fleet frame not sent to a viewer", exc_info=True)
        finally:
            await client.aclose()

    async def _frame(self, client) -> dict[str, dict]:
        hosts = self.hosts
        if not hosts:
            return {}
        try:
            values = await client.mget([latest_key(name) for name in hosts])
        except (RedisError, OSError):
            log.warning("cannot read the fleet's latest samples from Redis", exc_info=True)
            return {}
        latest = parse_latest(hosts, values)
        frame = {}
        for name, message in latest.items():
            ts = message.get("ts")
            if ts is not None and ts == self.sent_ts.get(name):
                continue  # nothing new from this host since the last frame
            self.sent_ts[name] = ts
            frame[name] = heatmap_entry(message)
            self.sent_gpus[name] = [g["index"] for g in frame[name]["gpus"]]
        for name in set(self.sent_gpus) - set(latest):
            # Its sampler went quiet (the latest key expires): grey its cells out once.
            gpus = [{"index": i, "util": None, "stale": True} for i in self.sent_gpus.pop(name)]
            self.sent_ts.pop(name, None)
            frame[name] = {"ts": None, "simulated": False, "gpus": gpus}
        return frame


# One feed per event loop: a web process has one; each test session has its own.
_feeds: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FleetFeed] = (
    weakref.WeakKeyDictionary()
)


def fleet_feed() -> FleetFeed:
    loop = asyncio.get_running_loop()
    feed = _feeds.get(loop)
    if feed is None:
        feed = _feeds[loop] = FleetFeed()
    return feed
