"""What a group's endpoint measures, and how the autoscaler reads it: both sides of the
contract in one Django-free file (docs/STYLE.md "a contract between processes").

Every second each gateway process writes its view of each group it serves to the Redis
hash ``gpurental:group-load:<group_id>``, field ``<hostname>:<pid>``, as JSON::

    {"at": epoch s, "rps": completed per s over 60 s, "inflight": mean in flight over 60 s,
     "queued": mean queued over 60 s, "burst": mean (in flight + queued) over 6 s,
     "inflight_now": int, "queued_now": int, "p50_ms": float|null, "p99_ms": float|null,
     "errors": 5xx or failed in 60 s, "requests": completed in 60 s,
     "last_request_at": epoch s|null,
     "replicas": {"<instance id>": {"inflight": int, "healthy": bool}}}

and sets the key to expire in LOAD_TTL_S. Readers (``load_of``) merge the processes whose
report is fresher than FRESH_S: a gateway that died stops counting within seconds.

``LoadWindow`` keeps the figures: 60 one-second buckets of completed requests, errors,
latencies and the time-integral of in-flight and queued requests. It is pure (the caller
passes ``now``), so it is tested with numbers alone.
"""

from __future__ import annotations

import json
import math
import os
import socket
from collections import deque
from dataclasses import dataclass, field

KEY_PREFIX = "gpurental:group-load:"
LOAD_TTL_S = 30  # the hash expires this long after the last write of any gateway
FRESH_S = 10.0  # a process's report older than this is ignored
WINDOW_S = 60  # the stable window: rps, mean in flight, mean queued, latency, errors
BURST_S = 6  # the panic window: mean (in flight + queued)
LATENCIES_PER_BUCKET = 2000  # beyond that, one second's latencies are thinned evenly


def load_key(group_id) -> str:
    return f"{KEY_PREFIX}{group_id}"


def process_id() -> str:
    """This gateway process's field in the hash."""
    return f"{socket.gethostname()}:{os.getpid()}"


class _Bucket:
    __slots__ = ("errors", "inflight_area", "latencies", "queued_area", "requests", "second")

    def __init__(self, second: int):
        self.second = second
        self.requests = 0
        self.errors = 0
        self.latencies: list[float] = []
        self.inflight_area = 0.0  # request-seconds in flight during this second
        self.queued_area = 0.0


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (q in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


class LoadWindow:
    """One group's load as one gateway process sees it, over the last WINDOW_S seconds.

    Call ``queued``/``dequeued``, ``started``/``finished`` as requests wait, go to a
    replica and complete; ``report(now)`` gives the JSON-ready figures. In-flight and
    queued means are time-weighted (integrated between changes), so a burst shorter than
    a second still counts. Until the window has been open WINDOW_S seconds, means and
    rates are taken over the time it has been open.
    """

    def __init__(self, now: float):
        self.opened_at = now
        self._last = now  # integrated up to here
        self._buckets: deque[_Bucket] = deque()
        self.inflight_now = 0
        self.queued_now = 0
        self.last_request_at: float | None = None

    # --- recording -----------------------------------------------------------

    def arrived(self, now: float) -> None:
        """A request reached the endpoint (authenticated)."""
        self.last_request_at = now

    def queued(self, now: float) -> None:
        self._advance(now)
        self.queued_now += 1

    def dequeued(self, now: float) -> None:
        self._advance(now)
        self.queued_now = max(0, self.queued_now - 1)

    def started(self, now: float) -> None:
        self._advance(now)
        self.inflight_now += 1

    def finished(self, now: float, latency_ms: float, *, error: bool = False) -> None:
        """A request that ``started`` is done (``error``: a 5xx, or no answer at all)."""
        self.left(now)
        self.completed(now, latency_ms, error=error)

    def left(self, now: float) -> None:
        """A request that ``started`` is no longer in flight, not yet done (it is tried
        again elsewhere)."""
        self._advance(now)
        self.inflight_now = max(0, self.inflight_now - 1)

    def completed(self, now: float, latency_ms: float | None, *, error: bool = False) -> None:
        """A request counted without having been in flight (a 503 from the queue)."""
        self._advance(now)
        bucket = self._bucket(now)
        bucket.requests += 1
        if error:
            bucket.errors += 1
        if latency_ms is not None:
            if len(bucket.latencies) < LATENCIES_PER_BUCKET:
                bucket.latencies.append(latency_ms)
            else:  # keep an even sample of a very busy second
                bucket.latencies[bucket.requests % LATENCIES_PER_BUCKET] = latency_ms

    # --- reading -------------------------------------------------------------

    def report(self, now: float) -> dict:
        self._advance(now)
        self._trim(now)
        stable = [b for b in self._buckets if b.second > now - WINDOW_S - 1]
        burst = [b for b in self._buckets if b.second > now - BURST_S - 1]
        span = max(min(WINDOW_S, now - self.opened_at), 1.0)
        burst_span = max(min(BURST_S, now - self.opened_at), 1.0)
        latencies = [ms for b in stable for ms in b.latencies]
        requests = sum(b.requests for b in stable)
        return {
            "at": now,
            "rps": requests / span,
            "inflight": sum(b.inflight_area for b in stable) / span,
            "queued": sum(b.queued_area for b in stable) / span,
            "burst": sum(b.inflight_area + b.queued_area for b in burst) / burst_span,
            "inflight_now": self.inflight_now,
            "queued_now": self.queued_now,
            "p50_ms": percentile(latencies, 50),
            "p99_ms": percentile(latencies, 99),
            "errors": sum(b.errors for b in stable),
            "requests": requests,
            "last_request_at": self.last_request_at,
        }

    def idle_since(self, now: float) -> float:
        """Seconds since the last request (since the window opened, if none came)."""
        return now - (self.last_request_at or self.opened_at)

    # --- inside --------------------------------------------------------------

    def _bucket(self, now: float) -> _Bucket:
        second = int(now)
        if not self._buckets or self._buckets[-1].second < second:
            self._buckets.append(_Bucket(second))
            self._trim(now)
        if self._buckets[-1].second == second:
            return self._buckets[-1]
        for bucket in reversed(self._buckets):  # a clock that stepped back a little
            if bucket.second <= second:
                return bucket
        return self._buckets[0]

    def _trim(self, now: float) -> None:
        while self._buckets and self._buckets[0].second <= now - WINDOW_S - 1:
            self._buckets.popleft()

    def _advance(self, now: float) -> None:
        """Integrate the current in-flight and queued counts from the last change to now,
        split at second boundaries."""
        t = self._last
        if now <= t:
            return
        if self.inflight_now or self.queued_now:
            t = max(t, now - WINDOW_S - 1)  # nothing older matters
            while t < now:
                end = min(float(int(t) + 1), now)
                bucket = self._bucket(t)
                bucket.inflight_area += self.inflight_now * (end - t)
                bucket.queued_area += self.queued_now * (end - t)
                t = end
        self._last = now


@dataclass
class GroupLoad:
    """A group's load, merged over the gateway processes that reported in the last FRESH_S."""

    rps: float = 0.0
    inflight: float = 0.0
    queued: float = 0.0
    burst: float = 0.0
    inflight_now: int = 0
    queued_now: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    errors: int = 0
    requests: int = 0
    last_request_at: float | None = None
    replicas: dict[str, dict] = field(default_factory=dict)  # id → {"inflight", "healthy"}
    gateways: int = 0  # processes whose reports were merged

    @property
    def reported(self) -> bool:
        """Whether any gateway reported: without one, the figures are unknown, not zero."""
        return self.gateways > 0


def merge_reports(reports: list[dict], now: float) -> GroupLoad:
    """Sum the fresh reports; latency percentiles are the request-weighted mean of the
    processes' own (an approximation: exact merging would need the samples)."""
    load = GroupLoad()
    weighted = {"p50_ms": 0.0, "p99_ms": 0.0}
    weights = {"p50_ms": 0.0, "p99_ms": 0.0}
    for report in reports:
        at = report.get("at")
        if not isinstance(at, int | float) or now - at >= FRESH_S:
            continue
        load.gateways += 1
        load.rps += float(report.get("rps", 0))
        load.inflight += float(report.get("inflight", 0))
        load.queued += float(report.get("queued", 0))
        load.burst += float(report.get("burst", 0))
        load.inflight_now += int(report.get("inflight_now", 0))
        load.queued_now += int(report.get("queued_now", 0))
        load.errors += int(report.get("errors", 0))
        load.requests += int(report.get("requests", 0))
        last = report.get("last_request_at")
        if last is not None and (load.last_request_at is None or last > load.last_request_at):
            load.last_request_at = float(last)
        weight = max(int(report.get("requests", 0)), 1)
        for name in weighted:
            if report.get(name) is not None:
                weighted[name] += float(report[name]) * weight
                weights[name] += weight
        for instance_id, replica in (report.get("replicas") or {}).items():
            merged = load.replicas.setdefault(instance_id, {"inflight": 0, "healthy": False})
            merged["inflight"] += int(replica.get("inflight", 0))
            merged["healthy"] = merged["healthy"] or bool(replica.get("healthy"))
    load.p50_ms = weighted["p50_ms"] / weights["p50_ms"] if weights["p50_ms"] else None
    load.p99_ms = weighted["p99_ms"] / weights["p99_ms"] if weights["p99_ms"] else None
    return load


def _decode(raw: dict) -> list[dict]:
    reports = []
    for value in raw.values():
        try:
            report = json.loads(value)
        except (TypeError, ValueError):
            continue
        if isinstance(report, dict):
            reports.append(report)
    return reports


def _default_redis():
    from gpurental.rentals.events import state_redis  # the gateway's Redis (the layer's)

    return state_redis()


def load_of(group_id, *, redis=None, now: float | None = None) -> GroupLoad:
    """The group's load as all live gateway processes see it (zeros when none reported)."""
    import time

    client = redis or _default_redis()
    raw = client.hgetall(load_key(group_id))
    return merge_reports(_decode(raw), time.time() if now is None else now)


def replica_inflight(group_id, instance_id, *, redis=None, now: float | None = None) -> int:
    """Requests in flight on one replica, over all gateways (draining waits for 0)."""
    replica = load_of(group_id, redis=redis, now=now).replicas.get(str(instance_id))
    return int(replica["inflight"]) if replica else 0


def encode(report: dict) -> str:
    return json.dumps(report, separators=(",", ":"))


def load_write(redis, group_id, report: dict, *, process: str | None = None) -> None:
    """Write one process's report (a synchronous Redis client)."""
    key = load_key(group_id)
    pipe = redis.pipeline(transaction=False)
    pipe.hset(key, process or process_id(), encode(report))
    pipe.expire(key, LOAD_TTL_S)
    pipe.execute()


async def load_write_async(redis, group_id, report: dict, *, process: str | None = None) -> None:
    """Write one process's report (a ``redis.asyncio`` client): the gateway's side."""
    key = load_key(group_id)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hset(key, process or process_id(), encode(report))
        pipe.expire(key, LOAD_TTL_S)
        await pipe.execute()
