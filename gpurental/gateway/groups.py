"""A group's endpoint: ``grp-<group id>.<GATEWAY_DOMAIN>``, balanced over its replicas.

For every request:
1. ``Authorization: Bearer <key>``: the owner's active API key or the group's endpoint
   key (after a rotation, the replaced key too until its overlap ends: ``groups.keys``);
   anything else is 401 (JSON: this is an API, not a page). An unknown or deleted
   group is 404. No cookies, no Origin rule; the key is not passed on to replicas.
2. The request goes to the healthy ``serving`` replica with the fewest outstanding
   requests, among those below the group's ``max_concurrency``. ``draining`` replicas
   only finish what they have.
3. When none can take it, it waits in the group's FIFO queue (``queue_size`` long, at
   most QUEUE_WAIT_S) and goes out as soon as a replica frees up or a new one passes its
   health check. A full queue, or a wait that runs out, is 503 with ``Retry-After``.
   A request that waits wakes the autoscaler (at most every WAKE_EVERY_S per group):
   scale from zero, and a step in load, are decided at once, not at the next round. So
   does a serving replica's newest GPU sample (read every GPU_CHECK_EVERY_S, 1 Hz like
   the samplers) above the group's ``gpu_utilization`` threshold.
4. Each replica's ``GET /healthz`` is probed every HEALTH_EVERY_S; UNHEALTHY_AFTER
   failures in a row take it off the balancer until it answers again. A new replica is
   probed at once and serves from its first good answer.
5. A request whose replica failed before answering (refused, reset, closed: a replica
   that died) goes to another one (``RETRIES``, ``REPEATABLE``), and the failed replica
   is ejected at once: no new request goes to it until a probe passes again.

The replica set comes from the database and is cached; it is dropped the moment the
group (``gpurental:group-state:<id>``) or one of its replicas
(``gpurental:instance-state:<id>``) changes, with ROUTE_TTL_S as the safety net. Every
second the load each group saw here goes to Redis (gpurental/groups/load.py), where the
autoscaler reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from gpurental import addresses
from gpurental.groups import load
from gpurental.protocol import latest_key

log = logging.getLogger("gpurental.gateway.groups")

LABEL_PREFIX = "grp-"
GROUP_STATE_PATTERN = "gpurental:group-state:*"
ROUTE_TTL_S = 5.0  # a safety net: events drop a group's replica set at once
QUEUE_WAIT_S = 60.0  # shorter than any front proxy's timeout
RETRY_AFTER_S = 5
HEALTH_EVERY_S = 2.0
HEALTH_TIMEOUT_S = 1.0
UNHEALTHY_AFTER = 2  # failed probes in a row
WAKE_EVERY_S = 2.0
GPU_CHECK_EVERY_S = 1.0  # a group with a gpu_utilization rule: its replicas' newest samples
TICK_S = 0.5  # each group's housekeeping: refresh, probes
REPORT_EVERY_S = 1.0
FORGET_AFTER_S = 600.0  # a group with no request for this long is dropped from memory
AUTH_TTL_S = 5.0  # an API key's answer is reused this long (revocation takes effect after)
AUTH_CACHE_MAX = 10_000
# A request that failed before any byte of an answer goes to another replica, this many
# times: always when the connection was refused (nothing was sent); after it was sent only
# for a method that is safe to repeat and has no body (Envoy's and nginx's rule:
# connect-failure/reset, proxy_next_upstream).
RETRIES = 3
REPEATABLE = frozenset({"GET", "HEAD", "OPTIONS"})
CHUNK = 64 * 1024

# Hop-by-hop headers: never passed on, either way (the instance gateway's too).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# Where a request came from and how: only the platform says this to an upstream (both
# gateways). Tornado (JupyterLab, trust_xheaders) takes X-Scheme before X-Forwarded-Proto
# and X-Real-Ip before X-Forwarded-For; other servers read other X-Forwarded-* names.
FORWARDING = frozenset({"forwarded", "x-real-ip", "x-scheme"})


def client_may_not_say(lower_name: str) -> bool:
    """A request header the client sent that no upstream may receive from it."""
    return lower_name in FORWARDING or lower_name.startswith("x-forwarded-")


def forwarded_chain(request: web.Request, trusted: tuple[addresses.Network, ...]) -> str:
    """The X-Forwarded-For an upstream gets (both gateways): behind a trusted proxy (the
    platform's TRUSTED_PROXIES) its chain with the proxy appended; from anyone else only
    the address it connected from."""
    return addresses.forwarded_for(
        peer=request.remote,
        incoming=", ".join(request.headers.getall("X-Forwarded-For", [])),
        trusted=trusted,
    )


# Not forwarded to a replica: what only the platform may say (and client_may_not_say).
# Content-Length is kept: the body goes on with its length, not re-chunked (http.server,
# for one, reads no chunks).
DROPPED = HOP_BY_HOP | {"authorization", "host"}
RESPONSE_DROPPED = HOP_BY_HOP | {"set-cookie"}  # no cookies on the API host


def parse_group_host(host: str, domain: str) -> str | None:
    """``grp-<uuid>.<domain>[:port]`` → the group id (canonical); anything else → None."""
    domain = domain.lower()
    name = host.lower().rsplit(":", 1)[0] if host.count(":") == 1 else host.lower()
    suffix = "." + domain
    if not name.endswith(suffix):
        return None
    label = name[: -len(suffix)]
    if not label.startswith(LABEL_PREFIX) or "." in label:
        return None
    raw = label[len(LABEL_PREFIX) :]
    try:
        canonical = str(uuid.UUID(raw))
    except ValueError:
        return None
    return canonical if canonical == raw else None


def group_host(group_id, domain: str) -> str:
    return f"{LABEL_PREFIX}{group_id}.{domain}"


# --- the replica set, from the database ----------------------------------------------


@dataclass(frozen=True)
class ReplicaRoute:
    instance_id: str
    address: str
    port: int  # the published host port of the group's port
    role: str  # serving | draining
    host: str = ""  # its host's name: where its GPU samples are kept


@dataclass(frozen=True)
class GroupRoute:
    group_id: str
    owner_id: int
    endpoint_key_hash: str
    max_concurrency: int
    queue_size: int
    replicas: tuple[ReplicaRoute, ...]
    # The key a rotation replaced, and until when (epoch seconds) it still opens the group.
    previous_key_hash: str = ""
    previous_key_until: float = 0.0
    gpu_threshold: float | None = None  # the gpu_utilization rule's target %, if any

    def endpoint_key_opens(self, digest: str, now: float) -> bool:
        """Whether a key of SHA-256 ``digest`` is the group's endpoint key: the current
        one, or the one a rotation replaced while its overlap lasts (groups.keys)."""
        if self.endpoint_key_hash and hmac.compare_digest(digest, self.endpoint_key_hash):
            return True
        return (
            bool(self.previous_key_hash)
            and now < self.previous_key_until
            and hmac.compare_digest(digest, self.previous_key_hash)
        )


def group_route_for(group_id: str) -> GroupRoute | None:
    """``group_route_read`` in a worker thread: the connection is closed after use."""
    from django.db import close_old_connections, connection

    close_old_connections()
    try:
        return group_route_read(group_id)
    finally:
        connection.close()


def group_route_read(group_id: str) -> GroupRoute | None:
    """The active group and its running serving/draining replicas; None if there is no
    such active group."""
    from gpurental.groups.models import Group
    from gpurental.rentals.models import Instance, InstanceStatus

    group = (
        Group.objects.filter(pk=group_id, status=Group.Status.ACTIVE)
        .only(
            "id",
            "user_id",
            "endpoint_key_hash",
            "previous_key_hash",
            "previous_key_until",
            "max_concurrency",
            "queue_size",
            "port",
        )
        .first()
    )
    if group is None:
        return None
    rows = Instance.objects.filter(
        group_id=group.pk,
        group_role__in=("serving", "draining"),
        status=InstanceStatus.RUNNING,
        host__isnull=False,
    ).values_list("id", "group_role", "ports", "host__address", "host__name")
    replicas = []
    for instance_id, role, ports, address, host_name in rows:
        host_port = (ports or {}).get(str(group.port))
        if host_port is None or not address:
            continue  # not (yet) published: nothing to send to
        replicas.append(ReplicaRoute(str(instance_id), address, int(host_port), role, host_name))
    gpu_rule = group.rules.filter(metric="gpu_utilization").values_list("threshold", flat=True)
    return GroupRoute(
        group_id=str(group.pk),
        owner_id=group.user_id,
        endpoint_key_hash=group.endpoint_key_hash,
        previous_key_hash=group.previous_key_hash if group.previous_key_until else "",
        previous_key_until=(
            group.previous_key_until.timestamp() if group.previous_key_until else 0.0
        ),
        max_concurrency=group.max_concurrency,
        queue_size=group.queue_size,
        replicas=tuple(sorted(replicas, key=lambda r: r.instance_id)),
        gpu_threshold=float(gpu_rule[0]) if gpu_rule and gpu_rule[0] is not None else None,
    )


def api_key_owner(raw: str) -> int | None:
    """The id of the account an active API key with the ``instances`` scope acts for
    (calling a group makes it scale, which costs money), or None: its user's own, or for a
    key made for a team, the team's account while its holder may operate there (member or
    higher, the team not switched off). A worker thread; closes its connection."""
    from django.db import close_old_connections, connection

    from gpurental.accounts.models import ApiKeyScope
    from gpurental.accounts.services import api_key_authenticate
    from gpurental.teams import roles
    from gpurental.teams.models import Membership

    close_old_connections()
    try:
        key = api_key_authenticate(raw=raw)
        if key is None or ApiKeyScope.INSTANCES not in (key.scopes or []):
            return None
        if key.team_id is None:
            return key.user_id
        operates = Membership.objects.filter(
            team_id=key.team_id,
            user_id=key.user_id,
            role__in=roles.OPERATORS,
            team__account__is_active=True,
        ).values_list("team__account_id", flat=True)
        return operates.first()
    finally:
        connection.close()


def wake_autoscaler(group_id: str) -> None:
    """Ask for an autoscaler tick now (blocking: call it from a thread)."""
    from gpurental.celery_app import app

    app.send_task(
        "gpurental.groups.tasks.group_tick", kwargs={"group_id": str(group_id)}, queue="control"
    )


# --- balancing ---------------------------------------------------------------------


class QueueFull(Exception):
    pass


class QueueTimeout(Exception):
    pass


class Replica:
    """One replica as this gateway process sees it."""

    def __init__(self, route: ReplicaRoute):
        self.instance_id = route.instance_id
        self.address = route.address
        self.port = route.port
        self.role = route.role
        self.host = route.host
        self.outstanding = 0
        self.healthy = False  # until its first probe answers
        self.failures = 0
        self.next_probe_at = 0.0
        self.probing = False

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def same_place(self, route: ReplicaRoute) -> bool:
        return (self.address, self.port) == (route.address, route.port)


class GroupBalancer:
    """One group's replicas, outstanding requests, queue and load window."""

    def __init__(self, route: GroupRoute, *, now: float):
        self.group_id = route.group_id
        self.route = route
        self.replicas: dict[str, Replica] = {}
        self.waiters: deque[asyncio.Future] = deque()
        self.window = load.LoadWindow(now)
        self.route_expires = 0.0
        self.drops = 0  # bumped by every event: a lookup under way when it came is stale
        self.last_wake = -float("inf")
        self.next_gpu_check = 0.0
        self.poke = asyncio.Event()  # wakes the housekeeping loop at once
        self.task: asyncio.Task | None = None
        self.apply(route)

    # --- the replica set ---------------------------------------------------

    def apply(self, route: GroupRoute) -> list[Replica]:
        """Take a fresh replica set; returns the replicas that are new (to probe now)."""
        self.route = route
        self.route_expires = time.monotonic() + ROUTE_TTL_S
        fresh = []
        seen = set()
        for replica_route in route.replicas:
            seen.add(replica_route.instance_id)
            replica = self.replicas.get(replica_route.instance_id)
            if replica is None or not replica.same_place(replica_route):
                replica = Replica(replica_route)  # a restart publishes new ports: probe again
                self.replicas[replica_route.instance_id] = replica
                fresh.append(replica)
            replica.role = replica_route.role
        for instance_id in set(self.replicas) - seen:
            # Gone (stopped, terminated): requests in flight keep their own reference.
            del self.replicas[instance_id]
        self.dispatch()
        return fresh

    def drop(self) -> None:
        self.drops += 1
        self.route_expires = 0.0
        self.poke.set()

    def route_age(self) -> float:
        return time.monotonic() - (self.route_expires - ROUTE_TTL_S)

    @property
    def stale(self) -> bool:
        return time.monotonic() >= self.route_expires

    # --- choosing a replica -------------------------------------------------

    def pick(self) -> Replica | None:
        """The healthy serving replica with the fewest outstanding requests, below the
        group's concurrency; None when none can take one more."""
        best = None
        for replica in self.replicas.values():
            if replica.role != "serving" or not replica.healthy:
                continue
            if replica.outstanding >= self.route.max_concurrency:
                continue
            if best is None or replica.outstanding < best.outstanding:
                best = replica
        return best

    def serving_ready(self) -> bool:
        return any(r.role == "serving" and r.healthy for r in self.replicas.values())

    async def acquire(self, *, timeout: float = QUEUE_WAIT_S) -> Replica:
        """A replica with one outstanding request reserved for the caller, who must
        ``release`` it. Waits in FIFO order; QueueFull or QueueTimeout otherwise."""
        if not self.waiters:
            replica = self.pick()
            if replica is not None:
                replica.outstanding += 1
                return replica
        if len(self.waiters) >= self.route.queue_size:
            raise QueueFull
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self.waiters.append(future)
        self.window.queued(time.time())
        self.poke.set()  # the housekeeping loop looks for new replicas (and wakes the autoscaler)
        try:
            done, _ = await asyncio.wait({future}, timeout=timeout)
        except asyncio.CancelledError:
            self._abandon(future)
            raise
        finally:
            self.window.dequeued(time.time())
        if not done:
            self._abandon(future)
            raise QueueTimeout
        return future.result()

    def _abandon(self, future: asyncio.Future) -> None:
        if future.done() and not future.cancelled():
            self.release(future.result())  # handed a replica just as the caller gave up
            return
        future.cancel()
        with contextlib.suppress(ValueError):
            self.waiters.remove(future)

    def release(self, replica: Replica) -> None:
        replica.outstanding = max(0, replica.outstanding - 1)
        self.dispatch()

    def dispatch(self) -> None:
        """Hand free capacity to waiting requests, oldest first."""
        while self.waiters:
            if self.waiters[0].done():  # cancelled by its caller
                self.waiters.popleft()
                continue
            replica = self.pick()
            if replica is None:
                return
            replica.outstanding += 1
            self.waiters.popleft().set_result(replica)

    # --- health ---------------------------------------------------------------

    def probed(self, replica: Replica, ok: bool) -> None:
        if ok:
            replica.failures = 0
            if not replica.healthy:
                replica.healthy = True
                log.info("group %s: replica %s is healthy", self.group_id, replica.instance_id)
                self.dispatch()
        else:
            replica.failures += 1
            if replica.healthy and replica.failures >= UNHEALTHY_AFTER:
                replica.healthy = False
                log.warning(
                    "group %s: replica %s failed %d health checks; no new requests",
                    self.group_id,
                    replica.instance_id,
                    replica.failures,
                )

    def eject(self, replica: Replica, why: str) -> None:
        """Passive health check: a replica that failed a request takes no new one until an
        active probe (sent at once) passes."""
        replica.failures = max(replica.failures, UNHEALTHY_AFTER)
        replica.next_probe_at = 0.0
        if replica.healthy:
            replica.healthy = False
            log.warning(
                "group %s: replica %s ejected (%s) until a health check passes",
                self.group_id,
                replica.instance_id,
                why,
            )
        self.poke.set()

    def report(self, now: float) -> dict:
        figures = self.window.report(now)
        figures["replicas"] = {
            r.instance_id: {"inflight": r.outstanding, "healthy": r.healthy}
            for r in self.replicas.values()
        }
        return figures


def _json_error(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response(
        {"error": message}, status=status, headers={"Cache-Control": "no-store", **headers}
    )


class GroupEndpoints:
    """Every group endpoint this gateway process serves."""

    def __init__(
        self,
        *,
        scheme: str = "http",
        lookup: Callable[[str], GroupRoute | None] = group_route_for,
        authenticate: Callable[[str], int | None] = api_key_owner,
        wake: Callable[[str], None] = wake_autoscaler,
        process: str | None = None,
        trusted_proxies: tuple[addresses.Network, ...] = (),
    ):
        self.scheme = scheme
        self.trusted_proxies = trusted_proxies
        self._lookup = lookup
        self._authenticate = authenticate
        self._wake = wake
        self.process = process or load.process_id()
        self.balancers: dict[str, GroupBalancer] = {}
        self._missing: dict[str, float] = {}  # unknown groups, until this monotonic time
        self._keys: dict[str, tuple[int | None, float]] = {}
        self._loading: dict[str, asyncio.Future] = {}
        self.client: aiohttp.ClientSession | None = None
        self.redis = None
        self._samples_redis = None
        self._reporter: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()

    # --- lifecycle -------------------------------------------------------------

    def start(self, client: aiohttp.ClientSession, redis) -> None:
        self.client = client
        self.redis = redis
        self._reporter = asyncio.create_task(self._report_loop())

    async def stop(self) -> None:
        tasks = [self._reporter, *(b.task for b in self.balancers.values()), *self._background]
        for task in tasks:
            if task is not None:
                task.cancel()
        for task in tasks:
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    # --- events ----------------------------------------------------------------

    def group_changed(self, group_id: str) -> None:
        self._missing.pop(group_id, None)
        balancer = self.balancers.get(group_id)
        if balancer is not None:
            balancer.drop()

    def instance_changed(self, instance_id: str) -> None:
        """One of our replicas changed, or perhaps a new one started: a group whose
        requests are waiting looks again at once."""
        for balancer in self.balancers.values():
            if instance_id in balancer.replicas or balancer.waiters:
                balancer.drop()

    def clear(self) -> None:
        self._missing.clear()
        for balancer in self.balancers.values():
            balancer.drop()

    # --- the replica set ----------------------------------------------------------

    async def _fetch(self, group_id: str) -> GroupRoute | None:
        """One lookup at a time per group; callers at once share it."""
        pending = self._loading.get(group_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future = asyncio.get_running_loop().create_future()
        self._loading[group_id] = future
        try:
            route = await asyncio.to_thread(self._lookup, group_id)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody waits
            raise
        finally:
            self._loading.pop(group_id, None)
        future.set_result(route)
        return route

    async def balancer_for(self, group_id: str) -> GroupBalancer | None:
        balancer = self.balancers.get(group_id)
        if balancer is not None:
            if balancer.stale:
                await self._refresh(balancer)
            return None if balancer.group_id not in self.balancers else balancer
        if self._missing.get(group_id, 0) > time.monotonic():
            return None
        route = await self._fetch(group_id)
        if route is None:
            if len(self._missing) > AUTH_CACHE_MAX:
                self._missing.clear()
            self._missing[group_id] = time.monotonic() + ROUTE_TTL_S
            return None
        balancer = self.balancers.get(group_id)  # another request may have made it meanwhile
        if balancer is None:
            balancer = GroupBalancer(route, now=time.time())
            self.balancers[group_id] = balancer
            balancer.task = asyncio.create_task(self._housekeeping(balancer))
            self._probe_all(balancer, balancer.replicas.values())
        return balancer

    async def _refresh(self, balancer: GroupBalancer) -> None:
        before = balancer.drops
        route = await self._fetch(balancer.group_id)
        if route is None:
            self._forget(balancer, "the group is gone")
            return
        fresh = balancer.apply(route)
        if balancer.drops != before:
            balancer.route_expires = 0.0  # changed while we looked: look again next time
        self._probe_all(balancer, fresh)

    def _forget(self, balancer: GroupBalancer, why: str) -> None:
        if self.balancers.get(balancer.group_id) is balancer:
            del self.balancers[balancer.group_id]
            log.info("group %s: no longer served here (%s)", balancer.group_id, why)
        for waiter in balancer.waiters:
            if not waiter.done():
                waiter.set_exception(QueueTimeout())
        balancer.waiters.clear()
        if balancer.task is not None and balancer.task is not asyncio.current_task():
            balancer.task.cancel()

    # --- housekeeping: refresh, health, wake-ups --------------------------------------

    async def _housekeeping(self, balancer: GroupBalancer) -> None:
        while True:
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(balancer.poke.wait(), TICK_S)
                balancer.poke.clear()
                if balancer.stale or (balancer.waiters and balancer.route_age() >= 1.0):
                    # Waiting requests: look for new replicas every tick, whatever the events.
                    await self._refresh(balancer)
                    if self.balancers.get(balancer.group_id) is not balancer:
                        return
                if balancer.waiters:
                    # Requests wait: at zero replicas (scale from zero), or because every
                    # replica is full (a step in load). Either way the autoscaler looks now,
                    # not at its next round.
                    self._wake_autoscaler(balancer, f"{len(balancer.waiters)} request(s) wait")
                now = time.monotonic()
                if balancer.route.gpu_threshold is not None and now >= balancer.next_gpu_check:
                    balancer.next_gpu_check = now + GPU_CHECK_EVERY_S
                    self._spawn(self._gpu_check(balancer))
                self._probe_all(
                    balancer, [r for r in balancer.replicas.values() if r.next_probe_at <= now]
                )
                idle = balancer.window.idle_since(time.time())
                if (
                    idle > FORGET_AFTER_S
                    and not balancer.waiters
                    and balancer.window.inflight_now == 0
                ):
                    self._forget(balancer, f"idle for {idle:.0f} s")
                    return
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - one bad tick must not end the group's care
                log.warning("group %s: housekeeping failed", balancer.group_id, exc_info=True)
                await asyncio.sleep(TICK_S)

    def _wake_autoscaler(self, balancer: GroupBalancer, why: str) -> None:
        now = time.monotonic()
        if now - balancer.last_wake < WAKE_EVERY_S:
            return
        balancer.last_wake = now
        log.info("group %s: %s; waking the autoscaler", balancer.group_id, why)
        self._spawn(self._wake_in_thread(balancer.group_id))

    async def _gpu_check(self, balancer: GroupBalancer) -> None:
        """Wake the autoscaler when the newest GPU sample of the serving replicas is above
        the group's threshold: it decides on its short window (groups.services) now."""
        serving = {r.instance_id: r.host for r in balancer.replicas.values() if r.role == "serving"}
        hosts = sorted({host for host in serving.values() if host})
        threshold = balancer.route.gpu_threshold
        if not hosts or threshold is None:
            return
        try:
            values = await self._samples().mget([latest_key(host) for host in hosts])
        except Exception:  # noqa: BLE001 - the periodic round still looks at utilisation
            log.warning("group %s: cannot read GPU samples", balancer.group_id, exc_info=True)
            return
        utils = []
        for raw in values:
            try:
                message = json.loads(raw) if raw else {}
            except ValueError:
                continue
            utils.extend(
                gpu["util"]
                for gpu in message.get("gpus", [])
                if gpu.get("instance") in serving and gpu.get("util") is not None
            )
        if utils and sum(utils) / len(utils) > threshold:
            mean = sum(utils) / len(utils)
            self._wake_autoscaler(balancer, f"GPU utilisation {mean:.0f} % > {threshold:g} %")

    def _samples(self):
        """The Redis the samplers keep each host's newest sample in (the channel layer's)."""
        if self._samples_redis is None:
            import redis.asyncio as aioredis

            from gpurental.telemetry.selectors import layer_redis_url

            self._samples_redis = aioredis.Redis.from_url(layer_redis_url(), socket_timeout=2)
        return self._samples_redis

    async def _wake_in_thread(self, group_id: str) -> None:
        try:
            await asyncio.to_thread(self._wake, group_id)
        except Exception:  # noqa: BLE001 - the next wait wakes it again; the tick runs anyway
            log.warning("group %s: could not wake the autoscaler", group_id, exc_info=True)

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _probe_all(self, balancer: GroupBalancer, replicas) -> None:
        for replica in list(replicas):
            if not replica.probing:
                replica.probing = True
                replica.next_probe_at = time.monotonic() + HEALTH_EVERY_S
                self._spawn(self._probe(balancer, replica))

    async def _probe(self, balancer: GroupBalancer, replica: Replica) -> None:
        ok = False
        try:
            async with self.client.get(
                f"{replica.url}/healthz",
                timeout=aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_S),
                allow_redirects=False,
            ) as answer:
                ok = 200 <= answer.status < 300
        except (aiohttp.ClientError, OSError, TimeoutError):
            ok = False
        except Exception:  # noqa: BLE001 - a probe that cannot even be made counts as failed
            log.warning(
                "group %s: probing %s failed", balancer.group_id, replica.url, exc_info=True
            )
            ok = False
        finally:
            replica.probing = False
        balancer.probed(replica, ok)

    # --- the load report ------------------------------------------------------------

    async def _report_loop(self) -> None:
        while True:
            await asyncio.sleep(REPORT_EVERY_S)
            now = time.time()
            for balancer in list(self.balancers.values()):
                try:
                    await load.load_write_async(
                        self.redis, balancer.group_id, balancer.report(now), process=self.process
                    )
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - Redis away: the next second tries again
                    log.warning("group %s: load report failed", balancer.group_id, exc_info=True)
                    break

    # --- requests -----------------------------------------------------------------

    async def _authorised(self, request: web.Request, route: GroupRoute) -> bool:
        scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
        raw = raw.strip()
        if scheme.lower() != "bearer" or not raw:
            return False
        digest = hashlib.sha256(raw.encode()).hexdigest()
        if route.endpoint_key_opens(digest, time.time()):
            return True
        cached = self._keys.get(digest)
        if cached is not None and cached[1] > time.monotonic():
            user_id = cached[0]
        else:
            user_id = await asyncio.to_thread(self._authenticate, raw)
            if len(self._keys) >= AUTH_CACHE_MAX:
                self._keys.clear()
            self._keys[digest] = (user_id, time.monotonic() + AUTH_TTL_S)
        return user_id is not None and user_id == route.owner_id

    async def handle(self, request: web.Request, group_id: str) -> web.StreamResponse:
        if not request.headers.get("Authorization"):
            return _json_error(
                401,
                "Send Authorization: Bearer <key>, with your API key or the group's endpoint key.",
                **{"WWW-Authenticate": "Bearer"},
            )
        balancer = await self.balancer_for(group_id)
        if balancer is None:
            return _json_error(404, "No such group.")
        if not await self._authorised(request, balancer.route):
            return _json_error(
                401,
                "This key does not open this group: use the owner's API key or the "
                "group's endpoint key.",
                **{"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        window = balancer.window
        arrived = time.time()
        window.arrived(arrived)
        attempts = 0
        while True:
            try:
                replica = await balancer.acquire()
            except QueueFull:
                window.completed(time.time(), None, error=True)
                return _json_error(
                    503,
                    f"All replicas are busy and {balancer.route.queue_size} requests are "
                    "already waiting; retry later.",
                    **{"Retry-After": str(RETRY_AFTER_S)},
                )
            except QueueTimeout:
                window.completed(time.time(), None, error=True)
                return _json_error(
                    503,
                    f"No replica could take the request within {QUEUE_WAIT_S:.0f} s; retry later.",
                    **{"Retry-After": str(RETRY_AFTER_S)},
                )
            window.started(time.time())
            try:
                response = await self._proxy(request, replica)
            except _Unanswered as exc:
                window.left(time.time())
                balancer.eject(replica, exc.why)
                balancer.release(replica)
                attempts += 1
                if exc.repeatable and attempts <= RETRIES:
                    continue
                window.completed(time.time(), None, error=True)
                if not exc.repeatable:
                    return _json_error(502, "The replica did not answer.")
                return _json_error(502, "The group's replicas are not answering.")
            except BaseException:
                ended = time.time()
                window.finished(ended, (ended - arrived) * 1000, error=True)
                balancer.release(replica)
                raise
            ended = time.time()
            window.finished(ended, (ended - arrived) * 1000, error=response.status >= 500)
            balancer.release(replica)
            return response

    def _upstream_headers(self, request: web.Request) -> CIMultiDict:
        headers = CIMultiDict()
        for name, value in request.headers.items():
            lower = name.lower()
            if lower not in DROPPED and not client_may_not_say(lower):
                headers.add(name, value)
        headers["X-Forwarded-For"] = forwarded_chain(request, self.trusted_proxies)
        headers["X-Forwarded-Proto"] = self.scheme
        headers["X-Forwarded-Host"] = request.host
        return headers

    async def _proxy(self, request: web.Request, replica: Replica) -> web.StreamResponse:
        url = f"{replica.url}{request.rel_url.raw_path_qs}"
        try:
            upstream = await self.client.request(
                request.method,
                url,
                headers=self._upstream_headers(request),
                data=request.content if request.body_exists else None,
                allow_redirects=False,
            )
        except aiohttp.ClientConnectorError as exc:
            # Nothing was sent: another replica may take it, whatever the method.
            log.info("group replica %s refused: %s", replica.instance_id, exc)
            raise _Unanswered(f"refused: {exc}", repeatable=True) from exc
        except (aiohttp.ClientError, OSError) as exc:
            # Sent, and no byte of an answer came back (reset, closed: the replica died).
            log.info("group replica %s failed: %s", replica.instance_id, exc)
            repeatable = request.method in REPEATABLE and not request.body_exists
            raise _Unanswered(f"failed: {exc!r}", repeatable=repeatable) from exc
        async with upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in RESPONSE_DROPPED:
                    response.headers.add(name, value)
            if "Content-Length" not in upstream.headers and request.method != "HEAD":
                response.enable_chunked_encoding()
            await response.prepare(request)
            if request.method != "HEAD":
                async for chunk in upstream.content.iter_chunked(CHUNK):
                    await response.write(chunk)
            await response.write_eof()
            return response


class _Unanswered(Exception):
    """The replica gave no byte of an answer; ``repeatable``: another may take it."""

    def __init__(self, why: str, *, repeatable: bool):
        super().__init__(why)
        self.why = why
        self.repeatable = repeatable
