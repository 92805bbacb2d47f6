"""A group's endpoint, ``grp-<id>.<GATEWAY_DOMAIN>``, in the real gateway application (in
this process, on loopback) in front of real HTTP servers standing in for replicas: each is
registered as a running Instance of the group with its port published, as the agent
would report it. The database, Redis and the proxying are real; only the launch is
skipped (rows made directly)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
import uuid
from types import SimpleNamespace

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpurental.accounts.services import api_key_create
from gpurental.gateway import groups, routes
from gpurental.gateway.http import Gateway
from gpurental.groups.events import group_channel
from gpurental.groups.load import load_of
from gpurental.rentals.events import state_redis
from gpurental.rentals.models import Instance, InstanceStatus
from tests.factories import GroupFactory, HostFactory, InstanceFactory

pytestmark = pytest.mark.django_db(transaction=True)

DOMAIN = "gw.localhost"
ENDPOINT_KEY = "gek_" + "k" * 40


def test_group_hosts_are_parsed_and_instance_hosts_are_not_groups():
    group_id = str(uuid.uuid4())
    assert groups.parse_group_host(f"grp-{group_id}.{DOMAIN}", DOMAIN) == group_id
    assert groups.parse_group_host(f"grp-{group_id}.{DOMAIN}:8001", DOMAIN) == group_id
    assert groups.parse_group_host(f"GRP-{group_id.upper()}.GW.localhost", DOMAIN) == group_id
    for host in (
        f"{group_id}.{DOMAIN}",  # an instance
        f"grp-{group_id}.example.com",
        f"grp-{group_id.replace('-', '')}.{DOMAIN}",  # not the canonical form
        f"x.grp-{group_id}.{DOMAIN}",
        f"grp-{group_id}-8000.{DOMAIN}",
        f"grp-.{DOMAIN}",
        DOMAIN,
    ):
        assert groups.parse_group_host(host, DOMAIN) is None, host
    assert routes.parse_host(f"grp-{group_id}.{DOMAIN}", DOMAIN) is None


class Upstream:
    """A replica stand-in: /healthz (switchable), and /work, which answers once its gate
    opens (at once when there is no gate), recording what it was sent."""

    def __init__(self, name: str):
        self.name = name
        self.healthy = True
        self.gate: asyncio.Event | None = None
        self.seen: list[dict] = []
        self.active = 0
        self.transports: set = set()  # of the requests it holds: a test may reset them
        self.server: TestServer | None = None

    async def start(self) -> Upstream:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_route("*", "/work", self._work)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        return self

    @property
    def port(self) -> int:
        return self.server.port

    async def _healthz(self, request):
        return web.Response(text="ok") if self.healthy else web.Response(status=500)

    async def _work(self, request):
        body = await request.text()
        self.seen.append(
            {"headers": dict(request.headers), "path": request.path_qs, "method": request.method}
        )
        self.active += 1
        self.transports.add(request.transport)
        try:
            if self.gate is not None:
                await self.gate.wait()
        finally:
            self.active -= 1
            self.transports.discard(request.transport)
        return web.json_response({"replica": self.name, "body": body})


async def db(fn, *args, **kwargs):
    """Run database work from the event loop, in a thread whose connection is closed after
    (a connection left open would keep the test database from being dropped)."""
    from django.db import connection

    def work():
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    return await asyncio.to_thread(work)


async def until(condition, timeout: float = 15, what: str = "the condition"):
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)
    del what


@contextlib.asynccontextmanager
async def running_gateway(woken: list | None = None):
    endpoints = groups.GroupEndpoints(
        wake=(woken.append if woken is not None else lambda group_id: None)
    )
    gateway = Gateway(domain=DOMAIN, scheme="http", group_endpoints=endpoints)
    server = TestServer(gateway.app(), host="127.0.0.1")
    await server.start_server()
    try:
        await asyncio.wait_for(gateway.listening.wait(), 10)
        yield gateway, f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()


class Client:
    def __init__(self, base: str, group, key: str | None):
        self.base, self.group, self.key = base, group, key
        self.session = aiohttp.ClientSession()

    async def call(self, method="GET", path="/work", key=..., **kwargs):
        headers = {"Host": f"grp-{self.group.pk}.{DOMAIN}", **kwargs.pop("headers", {})}
        key = self.key if key is ... else key
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        async with self.session.request(
            method, f"{self.base}{path}", headers=headers, **kwargs
        ) as answer:
            text = await answer.text()
            return answer.status, answer.headers, (json.loads(text) if text else None)

    async def close(self):
        await self.session.close()


@pytest.fixture
def group(alice):
    host = HostFactory(address="127.0.0.1")
    made = GroupFactory(
        user=alice,
        max_concurrency=2,
        queue_size=10,
        endpoint_key_hash=hashlib.sha256(ENDPOINT_KEY.encode()).hexdigest(),
    )
    made.test_host = host
    return made


@pytest.fixture
def alice_key(alice):
    return api_key_create(user=alice, name="test")[1]


def add_replica(group, upstream: Upstream, role: str = "serving") -> Instance:
    return InstanceFactory(
        user=group.user,
        plan=group.plan,
        image=group.image,
        host=group.test_host,
        status=InstanceStatus.RUNNING,
        group=group,
        group_role=role,
        ports={str(group.port): upstream.port},
    )


def announce(group) -> None:
    """What the groups' services do after a change: tell the gateways."""
    state_redis().publish(group_channel(group.pk), "changed")


def waiting(gateway, group) -> int:
    balancer = gateway.groups.balancers.get(str(group.pk))
    return 0 if balancer is None else len(balancer.waiters)


async def replicas_ready(gateway, group, count: int):
    await gateway.groups.balancer_for(str(group.pk))  # as the first request would

    def ready():
        balancer = gateway.groups.balancers.get(str(group.pk))
        return balancer is not None and sum(r.healthy for r in balancer.replicas.values()) >= count

    await until(ready, what=f"{count} healthy replicas")


def test_only_the_owner_s_key_or_the_endpoint_key_opens_the_group(group, alice_key, bob):
    bob_key = api_key_create(user=bob, name="bob")[1]
    read_only = api_key_create(user=group.user, name="read", scopes=["read"])[1]

    async def scenario():
        upstream = await Upstream("r1").start()
        await db(add_replica, group, upstream)
        async with running_gateway() as (gateway, base):
            client = Client(base, group, alice_key)
            try:
                status, headers, body = await client.call(key=None)
                assert status == 401 and "error" in body
                assert headers["Content-Type"].startswith("application/json")
                for wrong in ("gpr_nothing", bob_key, read_only, "", ENDPOINT_KEY + "x"):
                    status, _, body = await client.call(key=wrong)
                    assert status == 401, wrong
                    assert "key" in body["error"]
                status, _, body = await client.call(
                    headers={"Authorization": f"Basic {ENDPOINT_KEY}"}, key=None
                )
                assert status == 401
                assert upstream.seen == []  # nothing reached the replica

                status, _, body = await client.call(
                    "POST", "/work?x=1", data=b"payload", headers={"X-Custom": "yes"}
                )
                assert status == 200 and body == {"replica": "r1", "body": "payload"}
                status, _, body = await client.call(key=ENDPOINT_KEY)
                assert status == 200 and body["replica"] == "r1"

                sent = upstream.seen[0]
                assert sent["method"] == "POST" and sent["path"] == "/work?x=1"
                assert sent["headers"]["X-Custom"] == "yes"
                assert sent["headers"]["Content-Length"] == "7"  # not re-chunked
                assert "Authorization" not in sent["headers"]  # the key stays at the gateway
                assert "Authorization" not in upstream.seen[1]["headers"]
                assert sent["headers"]["X-Forwarded-Host"] == f"grp-{group.pk}.{DOMAIN}"

                # An unknown group is 404, whatever the key.
                stranger = Client(base, SimpleNamespace(pk=uuid.uuid4()), alice_key)
                status, _, body = await stranger.call()
                await stranger.close()
                assert status == 404 and body == {"error": "No such group."}
            finally:
                await client.close()
                await upstream.server.close()

    asyncio.run(scenario())


def test_what_only_the_platform_may_say_is_replaced_not_passed_on_to_replicas(group, alice_key):
    async def scenario():
        upstream = await Upstream("r1").start()
        await db(add_replica, group, upstream)
        async with running_gateway() as (gateway, base):
            client = Client(base, group, alice_key)
            try:
                spoofed = {
                    "X-Forwarded-For": "10.0.0.1",
                    "X-Forwarded-Proto": "https",
                    "X-Forwarded-Port": "443",
                    "X-Forwarded-Prefix": "/evil",
                    "Forwarded": "for=10.0.0.1;proto=https",
                    "X-Real-Ip": "10.0.0.1",
                    "X-Scheme": "https",
                }
                status, _, _ = await client.call(headers=spoofed)
                assert status == 200
                sent = {k.lower(): v for k, v in upstream.seen[0]["headers"].items()}
                assert sent["x-forwarded-for"] == "127.0.0.1"
                assert sent["x-forwarded-proto"] == "http"
                for name in ("x-forwarded-port", "x-forwarded-prefix", "forwarded"):
                    assert name not in sent, name
                assert "x-real-ip" not in sent and "x-scheme" not in sent
            finally:
                await client.close()
                await upstream.server.close()

    asyncio.run(scenario())


@pytest.mark.backend
def test_a_deleted_group_stops_answering_at_once(group, alice_key):
    async def scenario():
        upstream = await Upstream("r1").start()
        await db(add_replica, group, upstream)
        async with running_gateway() as (gateway, base):
            client = Client(base, group, alice_key)
            try:
                assert (await client.call())[0] == 200
                group.status = "deleted"
                await db(group.save, update_fields=["status"])
                await db(announce, group)
                await until(lambda: str(group.pk) not in gateway.groups.balancers)
                assert (await client.call())[0] == 404
            finally:
                await client.close()
                await upstream.server.close()

    asyncio.run(scenario())


def test_requests_spread_by_least_outstanding_and_the_load_is_reported(group, alice_key):
    async def scenario():
        a, b = await Upstream("a").start(), await Upstream("b").start()
        a.gate, b.gate = asyncio.Event(), asyncio.Event()
        for upstream in (a, b):
            await db(add_replica, group, upstream)
        async with running_gateway() as (gateway, base):
            client = Client(base, group, alice_key)
            try:
                await replicas_ready(gateway, group, 2)
                calls = []
                for expected in range(1, 5):
                    calls.append(asyncio.create_task(client.call()))
                    await until(lambda n=expected: a.active + b.active == n)
                # Least outstanding: each held request went to the less busy replica.
                assert (a.active, b.active) == (2, 2)
                balancer = gateway.groups.balancers[str(group.pk)]
                assert balancer.window.inflight_now == 4
                a.gate.set()
                b.gate.set()
                answers = await asyncio.gather(*calls)
                assert sorted(body["replica"] for _, _, body in answers) == ["a", "a", "b", "b"]

                def reported():
                    return load_of(group.pk).requests >= 4

                await until(lambda: reported(), what="the load report")
                seen = await db(load_of, group.pk)
                assert seen.gateways == 1 and seen.errors == 0 and seen.p50_ms is not None
                assert set(seen.replicas) == set(balancer.replicas)
                assert all(r["healthy"] for r in seen.replicas.values())
                assert seen.last_request_at is not None
            finally:
                await client.close()
                for upstream in (a, b):
                    await upstream.server.close()

    asyncio.run(scenario())


@pytest.mark.backend
def test_requests_wait_while_there_is_no_replica_and_go_out_when_one_appears(group, alice_key):
    woken: list[str] = []

    async def scenario():
        upstream = await Upstream("late").start()
        async with running_gateway(woken) as (gateway, base):
            client = Client(base, group, alice_key)
            try:
                held = [asyncio.create_task(client.call()) for _ in range(3)]
                await until(lambda: waiting(gateway, group) == 3)
                await until(lambda: woken, what="the autoscaler's wake-up")
                assert woken[0] == str(group.pk)
                assert not any(task.done() for task in held)

                await db(add_replica, group, upstream)
                await db(announce, group)
                answers = await asyncio.gather(*held)
                assert [status for status, _, _ in answers] == [200, 200, 200]
                assert {body["replica"] for _, _, body in answers} == {"late"}
                # Woken at most once per WAKE_EVERY_S, not once per waiting request.
                assert len(woken) <= 3
            finally:
                await client.close()
                await upstream.server.close()

    asyncio.run(scenario())


def test_requests_waiting_on_full_replicas_wake_the_autoscaler_at_once(group, alice_key):
    """A step in load: every replica is busy and requests queue; the autoscaler is asked to
    look now rather than at its next round."""
    woken: list[str] = []

    async def scenario():
        busy = await Upstream("busy").start()
        busy.gate = asyncio.Event()
        async with running_gateway(woken) as (gateway, base):
            await db(add_replica, group, busy)
            client = Client(base, group, alice_key)
            try:
                await replicas_ready(gateway, group, 1)
                calls = [asyncio.create_task(client.call()) for _ in range(3)]  # 2 fit
                await until(lambda: waiting(gateway, group) == 1)
                await until(lambda: woken, what="the autoscaler's wake-up")
                assert woken == [str(group.pk)] and busy.active == 2
                busy.gate.set()
                assert [s for s, _, _ in await asyncio.gather(*calls)] == [200, 200, 200]
            finally:
                await client.close()
                await busy.server.close()

    asyncio.run(scenario())


def test_a_full_queue_answers_503_with_retry_after(group, alice_key):
    group.max_concurrency = 1
    group.queue_size = 1
    group.save()

    async def scenario():
        upstream = await Upstream("only").start()
        upstream.gate = asyncio.Event()
        await db(add_replica, group, upstream)
        async with running_gateway() as (gateway, base):
            client = Client(base, group, alice_key)
            try:
                await replicas_ready(gateway, group, 1)
                first = asyncio.create_task(client.call())
                await until(lambda: upstream.active == 1)
                second = asyncio.create_task(client.call())
                balancer = gateway.groups.balancers[str(group.pk)]
                await until(lambda: len(balancer.waiters) == 1)
                status, headers, body = await client.call()
                assert status == 503
                assert int(headers["Retry-After"]) > 0
                assert "waiting" in body["error"]
                upstream.gate.set()
                assert [(await t)[0] for t in (first, second)] == [200, 200]
                assert len(upstream.seen) == 2  # the refused one never reached the replica
                assert balancer.window.report(time.time())["errors"] == 1
            finally:
                await client.close()
                await upstream.server.close()

    asyncio.run(scenario())


@pytest.mark.backend
def test_a_draining_replica_gets_no_new_requests_but_finishes_its_own(group, alice_key):
    async def scenario():
        old, new = await Upstream("old").start(), await Upstream("new").start()
        old.gate = asyncio.Event()
        old_row = await db(add_replica, group, old)
        async with running_gateway() as (gateway, base):
            client = Client(base, group, alice_key)
            try:
                await replicas_ready(gateway, group, 1)
                in_flight = asyncio.create_task(client.call())
                await until(lambda: old.active == 1)

                await db(add_replica, group, new)
                await db(Instance.objects.filter(pk=old_row.pk).update, group_role="draining")
                await db(announce, group)
                balancer = gateway.groups.balancers[str(group.pk)]
                await until(lambda: balancer.replicas[str(old_row.pk)].role == "draining")
                await replicas_ready(gateway, group, 2)

                for _ in range(4):
                    status, _, body = await client.call()
                    assert status == 200 and body["replica"] == "new"
                assert len(old.seen) == 1
                assert balancer.replicas[str(old_row.pk)].outstanding == 1
                old.gate.set()
                status, _, body = await in_flight
                assert status == 200 and body["replica"] == "old"
                assert balancer.replicas[str(old_row.pk)].outstanding == 0
            finally:
                await client.close()
                for upstream in (old, new):
                    await upstream.server.close()

    asyncio.run(scenario())


def test_an_unhealthy_replica_is_skipped_until_it_answers_again(group, alice_key):
    async def scenario():
        sick, well = await Upstream("sick").start(), await Upstream("well").start()
        sick_row = await db(add_replica, group, sick)
        await db(add_replica, group, well)
        async with running_gateway() as (gateway, base):
            client = Client(base, group, alice_key)
            try:
                await replicas_ready(gateway, group, 2)
                balancer = gateway.groups.balancers[str(group.pk)]
                sick.healthy = False
                await until(lambda: not balancer.replicas[str(sick_row.pk)].healthy, 20)
                sick.seen.clear()
                for _ in range(6):
                    status, _, body = await client.call()
                    assert status == 200 and body["replica"] == "well"
                assert sick.seen == []

                sick.healthy = True
                await replicas_ready(gateway, group, 2)
                sick.gate, well.gate = asyncio.Event(), asyncio.Event()
                held = [asyncio.create_task(client.call()) for _ in range(2)]
                await until(lambda: sick.active + well.active == 2)
                assert sick.active == 1  # back in the rotation
                sick.gate.set()
                well.gate.set()
                assert [status for status, _, _ in await asyncio.gather(*held)] == [200, 200]
            finally:
                await client.close()
                for upstream in (sick, well):
                    await upstream.server.close()

    asyncio.run(scenario())


def test_a_replica_that_dies_mid_request_loses_no_get_and_is_ejected_at_once(group, alice_key):
    """Its GETs in flight go to another replica (no byte of an answer had come back); a
    POST in flight is not sent twice: it is a 502. No new request goes to the dead one."""

    async def scenario():
        one, two = await Upstream("one").start(), await Upstream("two").start()
        rows = {"one": await db(add_replica, group, one), "two": await db(add_replica, group, two)}
        async with running_gateway() as (gateway, base):
            client = Client(base, group, alice_key)
            try:
                await replicas_ready(gateway, group, 2)
                balancer = gateway.groups.balancers[str(group.pk)]
                one.gate, two.gate = asyncio.Event(), asyncio.Event()
                # A POST first: the replica it lands on is the one that dies, holding it and
                # a GET (max_concurrency 2); the other holds two GETs.
                post = asyncio.create_task(client.call("POST", data="once"))
                await until(lambda: one.active + two.active == 1)
                dying, well = (one, two) if one.active else (two, one)
                gets = [asyncio.create_task(client.call()) for _ in range(3)]
                await until(lambda: dying.active == 2 and well.active == 2)
                # The container dies: its connections are reset, its port refuses.
                for transport in list(dying.transports):
                    transport.abort()
                await dying.server.close()
                dead = balancer.replicas[str(rows[dying.name].pk)]
                await until(lambda: not dead.healthy, 5)
                well.gate.set()
                answers = await asyncio.gather(*gets)
                assert [(status, body["replica"]) for status, _, body in answers] == [
                    (200, well.name)
                ] * 3
                status, _, body = await post
                assert (status, body) == (502, {"error": "The replica did not answer."})
                assert [seen["method"] for seen in well.seen].count("POST") == 0  # not repeated
                # Ejected: every new request goes to the live replica, none is lost.
                for _ in range(4):
                    status, _, body = await client.call()
                    assert (status, body["replica"]) == (200, well.name)
                assert not dead.healthy  # its probes fail
            finally:
                await client.close()
                for upstream in (one, two):
                    await upstream.server.close()

    asyncio.run(scenario())


def test_a_serving_replica_s_gpu_sample_above_the_threshold_wakes_the_autoscaler(group, alice_key):
    """The group's gpu_utilization rule (70 %): the newest sample of a serving replica's
    GPU, as the host's sampler keeps it in Redis, is read every second; above 70 % the
    autoscaler is asked to look now. Below it, nothing is asked."""
    import redis

    from gpurental.groups.models import ScalingRule
    from gpurental.protocol import latest_key
    from gpurental.telemetry.selectors import layer_redis_url

    woken: list[str] = []
    ScalingRule.objects.create(group=group, metric="gpu_utilization", threshold=70)
    samples = redis.Redis.from_url(layer_redis_url())

    def sample(replica, util: float) -> None:
        gpus = [{"index": 0, "instance": str(replica.pk), "util": util}]
        samples.set(latest_key(group.test_host.name), json.dumps({"gpus": gpus}), ex=15)

    async def scenario():
        up = await Upstream("up").start()
        replica = await db(add_replica, group, up)
        sample(replica, 30.0)
        async with running_gateway(woken) as (gateway, base):
            client = Client(base, group, alice_key)
            try:
                await replicas_ready(gateway, group, 1)
                assert (await client.call())[0] == 200
                balancer = gateway.groups.balancers[str(group.pk)]
                first = balancer.next_gpu_check
                await until(lambda: balancer.next_gpu_check > first, 5, "another look")
                await until(lambda: balancer.next_gpu_check > first + 0.9, 5, "a third look")
                assert woken == []  # looked at 30 %: nothing to say
                sample(replica, 95.0)
                await until(lambda: woken, 5, "the autoscaler's wake-up")
                assert woken == [str(group.pk)]
            finally:
                await client.close()
                await up.server.close()
                samples.delete(latest_key(group.test_host.name))

    asyncio.run(scenario())
