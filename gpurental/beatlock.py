"""Exactly one beat at a time, however many run: a leader lock in Redis.

Every periodic job is declared in ``celery_app``'s beat schedule; two beats sending it
would run each job twice as often. Run a second beat as a standby (on another machine)
and the two share the lock ``gpurental:beat:leader``: the one holding it sends the due
jobs and renews it each tick (at most every ``LOCK_RENEW_S``); the other sends nothing
and tries again every ``LOCK_RENEW_S``. A leader that dies stops renewing, its lock runs
out after ``LOCK_TTL_S``, and the standby takes over: at most that long without periodic
jobs. A leader that stops cleanly hands the lock back at once.

The Procfile's beat runs ``-S gpurental.beatlock:LeaderScheduler``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import uuid

import redis
from celery.beat import PersistentScheduler

log = logging.getLogger(__name__)
LOCK_KEY = "gpurental:beat:leader"
LOCK_TTL_S = 30
LOCK_RENEW_S = 5

# Renew only a lock that is still ours; delete only ours (an atomic compare, in Redis).
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


class Leadership:
    """The leader lock of one beat process."""

    def __init__(self, client: redis.Redis, key: str = LOCK_KEY, ttl_s: float = LOCK_TTL_S):
        self.client, self.key, self.ttl_ms = client, key, int(ttl_s * 1000)
        self.me = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.held = False

    def hold(self) -> bool:
        """Take the lock, or renew it if ours; whether this beat leads now."""
        try:
            if self.client.set(self.key, self.me, nx=True, px=self.ttl_ms):
                leads = True
            else:
                leads = bool(self.client.eval(_RENEW, 1, self.key, self.me, self.ttl_ms))
        except redis.RedisError as exc:
            # Redis unreachable: lead no more (another beat may hold it when Redis returns).
            log.warning("beat: cannot reach the leader lock (%s); sending nothing", exc)
            leads = False
        if leads != self.held:
            log.info(
                "beat %s %s", self.me, "leads: sending periodic jobs" if leads else "stands by"
            )
        self.held = leads
        return leads

    def release(self) -> None:
        if self.held:
            with contextlib.suppress(redis.RedisError):  # else it runs out after its TTL
                self.client.eval(_RELEASE, 1, self.key, self.me)
            self.held = False


def _client() -> redis.Redis:
    from django.conf import settings

    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)


class LeaderScheduler(PersistentScheduler):
    """Celery's scheduler, sending jobs only while this beat holds the leader lock."""

    def __init__(self, *args, leadership: Leadership | None = None, **kwargs):
        self.leadership = leadership or Leadership(_client())
        super().__init__(*args, **kwargs)
        # Tick at least every LOCK_RENEW_S, so that the lock is renewed well within its TTL.
        self.max_interval = min(self.max_interval, LOCK_RENEW_S)

    def tick(self, *args, **kwargs) -> float:
        if not self.leadership.hold():
            return LOCK_RENEW_S
        return min(super().tick(*args, **kwargs), LOCK_RENEW_S)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.leadership.release()
