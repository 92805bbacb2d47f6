"""``python -m gpurental.agent`` runs the sampler: a real agent process (simulated GPUs,
process runtime) publishes one message per host per second on the test Redis."""

from __future__ import annotations

import asyncio
import json
import os
import uuid

import pytest
import redis
from asgiref.sync import async_to_sync
from channels_redis.core import RedisChannelLayer
from django.conf import settings

from gpurental.agent.sampler import host_group, latest_key
from gpurental.testing.agent_process import AgentProcess, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.backend]  # an agent process, the channel layer


def test_the_agent_process_streams_samples_and_says_so(tmp_path):
    name = f"sampler-{uuid.uuid4().hex[:8]}"
    agent = AgentProcess(
        broker_url=settings.CELERY_BROKER_URL,
        host_name=name,
        token="not-checked-here",
        log_path=tmp_path / "agent.log",
        GPURENTAL_RUNTIME="process",
        GPURENTAL_AGENT_DIR=str(tmp_path / "work"),
        GPURENTAL_SIMULATED_GPUS="3",
    )
    layer = RedisChannelLayer(hosts=[os.environ["REDIS_URL"]])

    async def receive(count: int) -> list[dict]:
        channel = await layer.new_channel()
        await layer.group_add(host_group(name), channel)
        try:
            return [await asyncio.wait_for(layer.receive(channel), 30) for _ in range(count)]
        finally:
            await layer.group_discard(host_group(name), channel)
            await layer.close_pools()

    agent.start()
    try:
        wait_for(lambda: "sampler:" in agent.log(), 30, "the start-up banner", agent)
        messages = async_to_sync(receive)(2)
    finally:
        agent.stop()
    banner = agent.log()
    assert "sampler: simulated samples every 1 s, live to" in banner
    first, second = messages
    assert (first["type"], first["host"], first["simulated"]) == ("telemetry.sample", name, True)
    assert [g["index"] for g in first["gpus"]] == [0, 1, 2]
    assert all(g["util"] == 0.0 and g["instance"] is None for g in first["gpus"])  # nothing runs
    assert 0.5 < second["ts"] - first["ts"] < 2.5
    latest = redis.Redis.from_url(os.environ["REDIS_URL"]).get(latest_key(name))
    assert json.loads(latest)["host"] == name
