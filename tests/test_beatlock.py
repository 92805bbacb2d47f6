"""One beat leads, any other stands by (gpurental/beatlock.py), on the real Redis: the
leader's lock is renewed while it ticks, handed back when it stops, and taken over once
it runs out (a leader that died)."""

from __future__ import annotations

import uuid

import pytest
import redis
from celery.beat import Scheduler

from gpurental.beatlock import LOCK_RENEW_S, LeaderScheduler, Leadership
from gpurental.celery_app import app
from gpurental.testing.agent_process import wait_for

pytestmark = pytest.mark.backend


@pytest.fixture
def lock(settings):
    client = redis.Redis.from_url(settings.REDIS_URL)
    key = f"test:beat:{uuid.uuid4().hex}"
    yield client, key
    client.delete(key)


def test_one_leads_the_other_stands_by_then_takes_over(lock):
    client, key = lock
    first, second = Leadership(client, key, ttl_s=30), Leadership(client, key, ttl_s=30)
    assert first.hold() and not second.hold()
    assert first.hold() and client.pttl(key) > 25_000  # renewed
    first.release()
    assert second.hold() and not first.hold()

    # The leader dies: no release, no renewal; once its lock runs out the other leads.
    client.pexpire(key, 1)
    wait_for(lambda: not client.exists(key), 5, "the lock to run out")
    assert first.hold() and not second.hold()
    second.release()  # not its lock: the leader keeps it
    assert client.get(key) == first.me.encode()


def test_only_the_leading_scheduler_sends_jobs(lock, tmp_path, monkeypatch):
    client, key = lock
    sent: list[str] = []
    monkeypatch.setattr(Scheduler, "tick", lambda self, *a, **k: sent.append(self.name) or 60)

    def scheduler(name: str) -> LeaderScheduler:
        beat = LeaderScheduler(
            app=app,
            schedule_filename=str(tmp_path / name),
            leadership=Leadership(client, key),
        )
        beat.name = name
        return beat

    first, second = scheduler("first"), scheduler("second")
    assert first.tick() == LOCK_RENEW_S  # it ticks again before its lock needs renewing
    assert second.tick() == LOCK_RENEW_S
    assert sent == ["first"]
    first.close()  # a clean stop hands the lock back
    second.tick()
    assert sent == ["first", "second"]
    second.close()
    assert not client.exists(key)
