"""Live samples over HTTP: an agent with no Redis at all signs each sample and POSTs it;
the web tier checks it and passes it on. A forged, stale or foreign sample goes nowhere."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
import redis
from asgiref.sync import async_to_sync
from channels_redis.core import RedisChannelLayer

from gpurental import protocol
from gpurental.accounts.models import AuditEvent
from gpurental.agent.sampler import host_group
from gpurental.fleet.services import host_create
from gpurental.protocol import latest_key
from gpurental.testing.agent_process import AgentProcess, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
URL = f"/{protocol.TELEMETRY_INGEST_PATH}"


def sample(host: str) -> dict:
    return {"type": "telemetry.sample", "host": host, "ts": time.time(), "gpus": [{"index": 0}]}


def post(client, body):
    return client.post(URL, data=json.dumps(body), content_type="application/json")


@pytest.fixture
def node(db):
    host, token = host_create(name=f"ingest-{os.getpid()}-{time.monotonic_ns() % 10**6}")
    return host, protocol.host_key(token)


def latest(name: str):
    raw = redis.Redis.from_url(os.environ["REDIS_URL"]).get(latest_key(name))
    return json.loads(raw) if raw else None


def test_a_signed_sample_is_kept_as_the_hosts_latest(client, node):
    host, key = node
    body = {"host": host.name, "sent_at": time.time(), "sample": sample(host.name)}
    assert post(client, protocol.sign(key, body)).status_code == 204
    assert latest(host.name)["gpus"] == [{"index": 0}]


def test_forged_stale_and_foreign_samples_are_refused(client, node, make_host, a100):
    host, key = node
    other = make_host("ingest-other", a100, count=1)
    now = time.time()
    forged = protocol.sign(
        "not-the-key", {"host": host.name, "sent_at": now, "sample": sample(host.name)}
    )
    stale = protocol.sign(
        key, {"host": host.name, "sent_at": now - 120, "sample": sample(host.name)}
    )
    # Signed by host, but claiming to be the other host's sample: it counts as host's own.
    foreign = protocol.sign(key, {"host": host.name, "sent_at": now, "sample": sample(other.name)})
    assert post(client, forged).status_code == 403
    assert post(client, stale).status_code == 403
    assert post(client, [1, 2]).status_code == 400
    assert client.get(URL).status_code == 405
    assert post(client, foreign).status_code == 204
    assert latest(other.name) is None and latest(host.name)["host"] == host.name
    assert AuditEvent.objects.filter(
        action="host.telemetry_refused", object_repr=host.name
    ).exists()


def test_an_agent_without_redis_streams_through_the_web_tier(live_server, tmp_path, db):
    host, token = host_create(name=f"ingest-agent-{time.monotonic_ns() % 10**6}")
    agent = AgentProcess(
        broker_url="memory://",  # no Redis of any kind reaches this agent
        host_name=host.name,
        token=token,
        log_path=tmp_path / "agent.log",
        GPURENTAL_RUNTIME="process",
        GPURENTAL_AGENT_DIR=str(tmp_path / "work"),
        GPURENTAL_SIMULATED_GPUS="2",
        GPURENTAL_TELEMETRY_URL=f"{live_server.url}{URL}",
    )
    layer = RedisChannelLayer(hosts=[os.environ["REDIS_URL"]])

    async def receive(count: int) -> list[dict]:
        channel = await layer.new_channel()
        await layer.group_add(host_group(host.name), channel)
        try:
            return [await asyncio.wait_for(layer.receive(channel), 30) for _ in range(count)]
        finally:
            await layer.group_discard(host_group(host.name), channel)
            await layer.close_pools()

    agent.start()
    try:
        wait_for(lambda: "sampler:" in agent.log(), 30, "the start-up banner", agent)
        first, second = async_to_sync(receive)(2)
    finally:
        agent.stop()
    assert f"live to {live_server.url}{URL}" in agent.log()
    assert (first["host"], [g["index"] for g in first["gpus"]]) == (host.name, [0, 1])
    assert second["ts"] > first["ts"]
    wait_for(lambda: latest(host.name) is not None, 10, "the latest sample")
