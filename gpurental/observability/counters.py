"""Counts every process must see alike, kept in Redis (the cache's): Celery task runs,
failures and durations (from Celery signals, in whichever worker ran the task) and open
websocket connections per stream (per process, with an expiry, so a process that dies
takes its counts with it within ``WS_TTL_S``)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from functools import cache

import redis
from django.conf import settings

log = logging.getLogger(__name__)

PREFIX = "gpurental:obs:"
TASK_RUNS = PREFIX + "task_runs"  # hash: task name -> runs (any outcome)
TASK_FAILURES = PREFIX + "task_failures"  # hash: task name -> failures
TASK_DURATION = PREFIX + "task_duration:"  # + task name: hash le -> count, sum, count
TASK_NAMES = PREFIX + "task_names"  # set of task names with a duration histogram
WS_PROCESS = PREFIX + "ws:"  # + process id: hash stream -> open connections
WS_TTL_S = 90
WS_REFRESH_S = 30
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

PROCESS_ID = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@cache
def client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)


# --- Celery tasks -------------------------------------------------------------

_started: dict[str, float] = {}


def task_observe(*, task: str, seconds: float | None, failed: bool) -> None:
    """One finished run of ``task``: counted, and its duration put in the histogram."""
    pipe = client().pipeline(transaction=False)
    pipe.hincrby(TASK_RUNS, task, 1)
    if failed:
        pipe.hincrby(TASK_FAILURES, task, 1)
    if seconds is not None:
        key = TASK_DURATION + task
        pipe.sadd(TASK_NAMES, task)
        for bound in DURATION_BUCKETS:
            if seconds <= bound:
                pipe.hincrby(key, str(bound), 1)
        pipe.hincrby(key, "count", 1)
        pipe.hincrbyfloat(key, "sum", seconds)
    try:
        pipe.execute()
    except redis.RedisError:
        log.warning("cannot count task %s in Redis", task, exc_info=True)


def _prerun(task_id=None, **kwargs) -> None:
    if task_id:
        _started[task_id] = time.monotonic()


def _postrun(task_id=None, task=None, state=None, **kwargs) -> None:
    started = _started.pop(task_id, None)
    seconds = None if started is None else time.monotonic() - started
    task_observe(task=getattr(task, "name", str(task)), seconds=seconds, failed=state == "FAILURE")


def connect_celery() -> None:
    from celery.signals import task_postrun, task_prerun

    task_prerun.connect(_prerun, weak=False, dispatch_uid="gpurental-obs-prerun")
    task_postrun.connect(_postrun, weak=False, dispatch_uid="gpurental-obs-postrun")


def task_counts() -> tuple[dict[str, int], dict[str, int], dict[str, dict[str, float]]]:
    """(runs per task, failures per task, duration histogram fields per task)."""
    r = client()
    runs = {k.decode(): int(v) for k, v in r.hgetall(TASK_RUNS).items()}
    failures = {k.decode(): int(v) for k, v in r.hgetall(TASK_FAILURES).items()}
    names = sorted(n.decode() for n in r.smembers(TASK_NAMES))
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(TASK_DURATION + name)
    durations = {
        name: {k.decode(): float(v) for k, v in fields.items()}
        for name, fields in zip(names, pipe.execute(), strict=True)
    }
    return runs, failures, durations


# --- websocket connections ------------------------------------------------------

_open: dict[str, int] = {}
_refresher: asyncio.Task | None = None


async def _aclient():
    import redis.asyncio

    return redis.asyncio.Redis.from_url(settings.REDIS_URL, socket_timeout=2)


async def _write() -> None:
    r = await _aclient()
    try:
        key = WS_PROCESS + PROCESS_ID
        pipe = r.pipeline(transaction=False)
        pipe.delete(key)
        live = {stream: n for stream, n in _open.items() if n > 0}
        if live:
            pipe.hset(key, mapping=live)
            pipe.expire(key, WS_TTL_S)
        await pipe.execute()
    finally:
        await r.aclose()


async def _refresh_forever() -> None:
    while True:
        await asyncio.sleep(WS_REFRESH_S)
        try:
            await _write()
        except redis.RedisError:
            log.warning("cannot refresh websocket counts in Redis", exc_info=True)


async def websocket_change(stream: str, delta: int) -> None:
    """A websocket of ``stream`` opened (+1) or closed (-1) in this process."""
    global _refresher
    _open[stream] = max(0, _open.get(stream, 0) + delta)
    loop = asyncio.get_running_loop()
    if _refresher is None or _refresher.done() or _refresher.get_loop() is not loop:
        _refresher = loop.create_task(_refresh_forever())
    try:
        await _write()
    except redis.RedisError:
        log.warning("cannot count websockets in Redis", exc_info=True)


def websocket_counts() -> dict[str, int]:
    """Open websockets per stream, over every live process."""
    r = client()
    totals: dict[str, int] = {}
    keys = list(r.scan_iter(match=WS_PROCESS + "*", count=500))
    pipe = r.pipeline(transaction=False)
    for key in keys:
        pipe.hgetall(key)
    for fields in pipe.execute():
        for stream, n in fields.items():
            totals[stream.decode()] = totals.get(stream.decode(), 0) + int(n)
    return totals


class CountedWebsocket:
    """Mixin for a Channels websocket consumer: counts it under ``metrics_stream`` while
    it is accepted."""

    metrics_stream = "websocket"
    _counted = False

    async def accept(self, *args, **kwargs):
        await super().accept(*args, **kwargs)
        if not self._counted:
            self._counted = True
            await websocket_change(self.metrics_stream, +1)

    async def websocket_disconnect(self, message):
        if self._counted:
            self._counted = False
            await websocket_change(self.metrics_stream, -1)
        await super().websocket_disconnect(message)
