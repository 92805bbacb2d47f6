"""The agent's GPU sampler: once a second, every GPU, one message per host.

Each tick reads every GPU through the GPU source (NVML or simulated), stamps each
GPU with the instance holding it (from the start specs this agent received, see
``activity.Holdings``) and publishes **one** message for the whole host:

- to the channel-layer group ``telemetry.host.<name>`` (channels-redis, the same
  Redis the web's consumers use); the consumers decide who may see which GPU;
- to the Redis key ``gpurental:telemetry:latest:<name>`` (expires after 15 s), which
  ``/metrics`` reads.

It also folds the samples into per-minute, per-GPU aggregates (avg/max utilisation
and memory, max temperature, avg power) and every ``batch_interval`` seconds sends
the finished minutes to the control queue in one task (``telemetry_record``), which
writes the rollups. Live messages are at-most-once (a lost one is a gap in a chart);
batches that cannot be sent are kept and retried, up to ``MAX_PENDING_MINUTES``.

The agent still has no database access: the live path needs only the Redis URL
(``GPURENTAL_TELEMETRY_URL``, by default the broker URL when the broker is Redis).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpurental import protocol
from gpurental.agent.activity import CpuMeter, Holdings, KernelProbe
from gpurental.agent.gpus import GpuSample, GpuSource
from gpurental.protocol import latest_key, recent_key

log = logging.getLogger(__name__)

MESSAGE_TYPE = "telemetry.sample"  # the consumers' handler: telemetry_sample
LATEST_TTL_S = 15
RECENT_SAMPLES = 300  # the live chart's 5 minutes at 1 Hz
MAX_PENDING_MINUTES = 30  # kept for retry while the broker is unreachable


def host_group(host_name: str) -> str:
    return f"telemetry.host.{host_name}"


def telemetry_url_from_broker(broker_url: str) -> str | None:
    """The channel layer's Redis, from a Celery broker URL (None when the broker is not Redis)."""
    if broker_url.startswith("redis+socket://"):
        # kombu names a socket's database virtual_host; redis-py's unix:// URL says db.
        path, _, query = broker_url[len("redis+socket://") :].partition("?")
        query = "&".join(
            "db=" + part[len("virtual_host=") :] if part.startswith("virtual_host=") else part
            for part in query.split("&")
            if part
        )
        return f"unix://{path}" + (f"?{query}" if query else "")
    if broker_url.startswith(("redis://", "rediss://", "unix://")):
        return broker_url
    return None


# --- per-minute aggregates -----------------------------------------------------


@dataclass
class _Minute:
    n: int = 0
    util_sum: float = 0.0
    util_max: float = 0.0
    mem_sum: float = 0.0
    mem_max: int = 0
    mem_total: int = 0
    temp_max: float | None = None
    power_sum: float = 0.0
    power_n: int = 0
    instances: dict[str, int] = field(default_factory=dict)
    kernel_active: bool | None = None

    def add(self, gpu: dict, kernel: bool | None) -> None:
        if gpu.get("stale") or gpu.get("util") is None:
            return
        self.n += 1
        self.util_sum += gpu["util"]
        self.util_max = max(self.util_max, gpu["util"])
        mem = gpu.get("mem_used") or 0
        self.mem_sum += mem
        self.mem_max = max(self.mem_max, mem)
        self.mem_total = gpu.get("mem_total") or self.mem_total
        if gpu.get("temp") is not None:
            self.temp_max = max(self.temp_max or gpu["temp"], gpu["temp"])
        if gpu.get("power") is not None:
            self.power_sum += gpu["power"]
            self.power_n += 1
        if gpu.get("instance"):
            self.instances[gpu["instance"]] = self.instances.get(gpu["instance"], 0) + 1
        if kernel is not None:
            self.kernel_active = bool(self.kernel_active) or kernel


class MinuteAggregator:
    def __init__(self) -> None:
        self._minutes: dict[tuple[int, int], _Minute] = {}

    def add(self, ts: float, gpus: list[dict], kernels: dict[str, bool | None]) -> None:
        minute = int(ts // 60) * 60
        for gpu in gpus:
            kernel = kernels.get(gpu.get("instance") or "")
            self._minutes.setdefault((minute, gpu["index"]), _Minute()).add(gpu, kernel)

    def pop_complete(self, now: float) -> list[dict]:
        """Minutes that ended before ``now``, as plain dicts; removed from the aggregator."""
        current = int(now // 60) * 60
        done = sorted(key for key in self._minutes if key[0] < current)
        rows = []
        for key in done:
            m = self._minutes.pop(key)
            if m.n == 0:
                continue
            rows.append(
                {
                    "minute": key[0],
                    "gpu": key[1],
                    "n": m.n,
                    "util_avg": round(m.util_sum / m.n, 2),
                    "util_max": m.util_max,
                    "mem_avg": int(m.mem_sum / m.n),
                    "mem_max": m.mem_max,
                    "mem_total": m.mem_total,
                    "temp_max": m.temp_max,
                    "power_avg": round(m.power_sum / m.power_n, 1) if m.power_n else None,
                    # The agent's view; the control plane attributes minutes from its allocations.
                    "instance": max(m.instances, key=m.instances.get) if m.instances else None,
                    "kernel_active": m.kernel_active,
                }
            )
        return rows


# --- publishing -----------------------------------------------------------------


async def store_sample(redis, host_name: str, message: dict) -> None:
    """In one round trip: the host's latest sample (/metrics, the fleet page) and its
    recent ones (a live chart opened later starts full)."""
    text = json.dumps(message)
    recent = recent_key(host_name)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.set(latest_key(host_name), text, ex=LATEST_TTL_S)
        pipe.rpush(recent, text)
        pipe.ltrim(recent, -RECENT_SAMPLES, -1)
        pipe.expire(recent, RECENT_SAMPLES)
        await pipe.execute()


class ChannelPublisher:
    """Sends a host's message to its channel-layer group and the latest-sample key.

    Owns an asyncio loop for the sampler thread; each publish is bounded by
    ``timeout_s`` so a slow Redis costs a gap in the charts, not a stalled tick.
    """

    def __init__(self, url: str, host_name: str, timeout_s: float = 0.5, layer: str = "core"):
        import redis.asyncio as aioredis
        from channels_redis.core import RedisChannelLayer
        from channels_redis.pubsub import RedisPubSubChannelLayer

        self.url = url
        self.host_name = host_name
        self.timeout_s = timeout_s
        self.layer_kind = layer
        self.loop = asyncio.new_event_loop()
        # Must be the web's layer class (settings.CHANNEL_LAYER_BACKEND); group_send
        # never blocks, but reads stay bounded like the web's (settings.py).
        layer_class = RedisPubSubChannelLayer if layer == "pubsub" else RedisChannelLayer
        self.layer = layer_class(hosts=[{"address": url, "socket_timeout": 15}])
        self.redis = aioredis.Redis.from_url(url, socket_timeout=timeout_s)

    async def _send(self, message: dict) -> None:
        await self.layer.group_send(host_group(self.host_name), message)
        await store_sample(self.redis, self.host_name, message)

    def publish(self, message: dict) -> None:
        self.loop.run_until_complete(asyncio.wait_for(self._send(message), self.timeout_s))

    def close(self) -> None:
        async def close():
            if hasattr(self.layer, "close_pools"):
                await self.layer.close_pools()
            else:
                await self.layer.flush()
            await self.redis.aclose()

        try:
            self.loop.run_until_complete(close())
        except Exception:  # noqa: BLE001 - closing on the way out
            log.debug("closing the telemetry publisher failed", exc_info=True)
        self.loop.close()


class HttpPublisher:
    """Sends a host's message to the web tier's ingest endpoint, signed with the host's
    key: for agents that must not hold the channel layer's Redis (production)."""

    def __init__(self, url: str, host_name: str, key: str, timeout_s: float = 0.5):
        import requests

        self.url = url
        self.host_name = host_name
        self.key = key
        self.timeout_s = timeout_s
        self.session = requests.Session()

    def publish(self, message: dict) -> None:
        body = {"host": self.host_name, "sent_at": time.time(), "sample": message}
        response = self.session.post(
            self.url, json=protocol.sign(self.key, body), timeout=self.timeout_s
        )
        if response.status_code != 204:
            raise RuntimeError(
                f"telemetry ingest answered {response.status_code}: {response.text[:200]}"
            )

    def close(self) -> None:
        self.session.close()


# --- the thread -----------------------------------------------------------------


class Sampler:
    """One tick = read, stamp, publish, aggregate; ``SamplerThread`` runs it every second."""

    def __init__(
        self,
        *,
        host_name: str,
        source: GpuSource,
        holdings: Holdings,
        publish: Callable[[dict], None] | None,
        send_batch: Callable[[list[dict], bool], None] | None,
        batch_interval: float = 60.0,
        cpu_meter: CpuMeter | None = None,
        kernels: Callable[[], dict[str, bool | None]] | None = None,
    ):
        self.host_name = host_name
        self.source = source
        self.holdings = holdings
        self.publish = publish
        self.send_batch = send_batch
        self.batch_interval = batch_interval
        self.cpu_meter = cpu_meter or CpuMeter()
        self.kernels = kernels or dict
        self.simulated = source.kind == "simulated"
        self.aggregator = MinuteAggregator()
        self.pending: list[dict] = []
        self._last_batch: float | None = None
        self._last_error_log = 0.0
        self.published = 0
        self.failures = 0

    def _activity(self, now_mono: float) -> dict[int, float | None]:
        by_gpu = self.holdings.by_gpu()
        if not self.simulated:
            return dict.fromkeys(by_gpu)  # real GPUs report their own load
        cores = self.cpu_meter.cores_used(self.holdings.snapshot(), now_mono)
        # One busy CPU core or more reads as a fully busy simulated GPU.
        return {
            i: (None if cores.get(h.instance_id) is None else min(1.0, cores[h.instance_id]))
            for i, h in by_gpu.items()
        }

    def _log_error(self, what: str, now: float) -> None:
        if now - self._last_error_log >= 60:  # once a minute, not every second
            self._last_error_log = now
            log.warning("telemetry: %s failed", what, exc_info=True)

    def tick(self, now: float | None = None, now_mono: float | None = None) -> dict:
        now = time.time() if now is None else now
        now_mono = time.monotonic() if now_mono is None else now_mono
        by_gpu = self.holdings.by_gpu()
        samples: list[GpuSample] = self.source.sample(activity=self._activity(now_mono))
        gpus = []
        for s in samples:
            entry = s.as_dict()
            holder = by_gpu.get(s.index)
            entry["instance"] = holder.instance_id if holder else None
            gpus.append(entry)
        message = {
            "type": MESSAGE_TYPE,
            "host": self.host_name,
            "ts": round(now, 3),
            "simulated": self.simulated,
            "gpus": gpus,
        }
        if self.publish is not None:
            try:
                self.publish(message)
                self.published += 1
            except Exception:  # noqa: BLE001 - at-most-once: a lost tick is a gap
                self.failures += 1
                self._log_error("publishing a sample", now)
        self.aggregator.add(now, gpus, self.kernels())
        self._maybe_flush(now)
        return message

    def _maybe_flush(self, now: float, force: bool = False) -> None:
        if self._last_batch is None:
            self._last_batch = now
        if not force and now - self._last_batch < self.batch_interval:
            return
        self._last_batch = now
        self.pending.extend(self.aggregator.pop_complete(now))
        if not self.pending or self.send_batch is None:
            return
        gpu_count = max(1, len({row["gpu"] for row in self.pending}))
        # Keep the newest minutes when the control plane has been unreachable for long.
        self.pending = self.pending[-MAX_PENDING_MINUTES * gpu_count :]
        try:
            self.send_batch(self.pending, self.simulated)
        except Exception:  # noqa: BLE001 - kept and sent with the next batch
            self._log_error("sending a rollup batch", now)
            return
        self.pending = []

    def flush(self, now: float | None = None) -> None:
        """Send what is finished now (on shutdown)."""
        self._maybe_flush(time.time() if now is None else now, force=True)


class SamplerThread(threading.Thread):
    def __init__(self, sampler: Sampler, interval: float = 1.0, probe: KernelProbe | None = None):
        super().__init__(name="sampler", daemon=True)
        self.sampler = sampler
        self.interval = interval
        self.probe = probe
        self.stopped = threading.Event()

    def run(self) -> None:
        if self.probe is not None:
            self.probe.start()
        next_tick = time.monotonic()
        while not self.stopped.is_set():
            try:
                self.sampler.tick()
            except Exception:  # noqa: BLE001 - one bad tick must not end telemetry
                log.exception("sampler tick failed")
            next_tick += self.interval
            delay = next_tick - time.monotonic()
            if delay < 0:  # overran: skip the missed ticks instead of bursting
                next_tick = time.monotonic()
                delay = 0
            self.stopped.wait(delay)
        if self.probe is not None:
            self.probe.stopped.set()
        try:
            self.sampler.flush()
        except Exception:  # noqa: BLE001 - on the way out
            log.exception("final rollup batch failed")
