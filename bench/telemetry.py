"""Live telemetry fan-out: S simulated hosts × 8 GPUs at 1 Hz → W websocket viewers.

    .venv/bin/python bench/telemetry.py [--hosts 10] [--clients 50] [--fleet-clients 0]
                                        [--duration 15] [--warmup 3] [--layer core|pubsub]
                                        [--daphnes 1] [--publishers 1] [--client-procs 1]

Starts its own embedded PostgreSQL and Redis in a temp dir and D real Daphne processes
(``gpurental.asgi``) on 127.0.0.1, creates S hosts with 8 simulated GPUs and one
running instance per GPU (as many as there are clients, each with its own owner),
then, in child processes of this script (so the client is not the bottleneck):

- ``--publishers`` processes share the S hosts: per host the agent's own ``Sampler``
  (simulated source, instance stamps), each ticking once a second at its own phase
  (like independent agents), the message sent with ``group_send`` to
  ``telemetry.host.<name>`` and stored as the host's latest, as the agent does;
- ``--client-procs`` processes share the W websocket clients (a minimal asyncio
  client, session cookies of the owners): client i watches instance i on
  ``/ws/instances/<id>/``; F staff clients watch ``/ws/fleet/``; viewers are spread
  over the Daphne processes, as a load balancer would.

It prints, over the measured window: samples delivered to clients per second,
sample-to-client latency p50/p99 (sample timestamp → frame received; one clock),
dropped messages (ticks of a watched GPU that never reached its viewer within 2 s of
the window's end; channel-layer sends skipped as over capacity are counted apart), and
the CPU of every process: each Daphne, Redis, each publisher and client process.
Loopback only; every loop is bounded. Figures at 1,000 hosts: bench/README.md.

Measured on the 2-core development VM (shared with other work, so noisy), one
Daphne process, 15 s windows, 2026-12-02:

    layer   hosts  viewers (+fleet)  delivered/s  p50     p99      dropped   Daphne CPU
    core    100    200               200          5 ms    24-98 ms  0        0.26
    core    100    200 (+10 fleet)   1188         6 ms    97 ms     0        0.48
    core    100    1000              1000         7 ms    102 ms    0        0.50
    pubsub  100    1000              1000         5 ms    260 ms    0        0.42
    core    200    1600              852          585 ms  1304 ms   47 %     0.66
    pubsub  200    1600              1426         3 ms    333 ms    11 %     0.57
    core    300    2400              863          399 ms  855 ms    64 %     0.57
    core    300    200 (+50 fleet)   2204         2.2 s   2.9 s     83 %     0.55
    pubsub  300    200 (+50 fleet)   2003         23 ms   229 ms    0 *      0.99

After the agent began keeping each host's last 300 samples in Redis (one pipelined
round trip more per host-second, for charts opened later), the same run on the same VM:
core, 100 hosts, 200 viewers: 200 delivered/s, p50 4.5 ms, p99 11.6 ms, 0 dropped,
Daphne 0.28 cores, Redis 0.05.

100 hosts × 200 viewers is comfortable; one Daphne process tops out near 1000
deliveries/s with the core layer (its per-message BZPOPMIN round trip), ~1400/s with
the pubsub layer. The fleet rows above are from when each fleet viewer joined every
host's group (hosts × viewers messages/s into Daphne; * pubsub kept instance viewers
whole but fleet updates fell to 0.12 per host-second, 12 s old). Since then one fleet
feed per web process reads all hosts' latest samples once a second and sends the same
frame to every fleet viewer (gpurental.telemetry.feed); same VM, 2026-12-03:

    layer   hosts  viewers (+fleet)  delivered/s  p50     p99      dropped   Daphne CPU
    core    100    200 (+10 fleet)   1191         3.3 ms  29 ms    0        0.22
    core    300    200 (+50 fleet)   14290        34 ms   436 ms   0        0.28

(fleet viewers: 0.99 and 0.94 updates per host-second, sample age at arrival p50
525 / 693 ms, p99 1.0 / 1.2 s: a frame a second, so up to a second old by design. At
300 × 50 the bench process itself, parsing 14,000 host entries a second, used 0.61
cores of the two, which is where the instance viewers' p99 comes from.) Before settings.py raised the
channel layer's socket timeout, ~1 viewer in 200 was closed (1011) every run by
redis-py 8's 5 s read timeout racing channels-redis's 5 s BZPOPMIN.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    a100_catalog,
    percentile,
    servers_dir,
    session_key,
    setup_django,
)

SECRET = "bench-" + uuid.uuid4().hex * 2
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def make_fleet(hosts: int, clients: int, fleet_clients: int) -> dict:
    """Hosts, GPUs, one running instance per watched GPU, and a session per viewer."""
    from django.conf import settings
    from django.contrib.auth.hashers import make_password
    from django.utils import timezone
    from psycopg.types.range import Range

    from gpurental.accounts.models import User
    from gpurental.fleet.services import host_create, host_simulated_gpus_ensure
    from gpurental.rentals.models import Allocation, Instance, InstanceStatus

    model, plan, image = a100_catalog()
    gpus = []
    for s in range(hosts):
        host, _ = host_create(name=f"bench-{s:03d}")
        gpus += [(host, g) for g in host_simulated_gpus_ensure(host=host, model=model, count=8)]
    # Spread viewers over hosts: instance i on host i % S.
    gpus.sort(key=lambda hg: (hg[1].index, hg[0].name))
    now = timezone.now()
    watched = min(clients, len(gpus))
    nologin = make_password(None)  # viewers log in by session only
    users = User.objects.bulk_create(
        [User(email=f"viewer{i}@bench.invalid", password=nologin) for i in range(watched)]
    )
    staff = User.objects.create(email="staff@bench.invalid", password=nologin, is_staff=True)
    instances = Instance.objects.bulk_create(
        [
            Instance(
                user=users[i],
                plan=plan,
                gpu_model=model,
                gpu_count=1,
                image=image,
                host=gpus[i][0],
                status=InstanceStatus.RUNNING,
                running_since=now,
            )
            for i in range(watched)
        ]
    )
    Allocation.objects.bulk_create(
        [
            Allocation(gpu=gpus[i][1], instance=instances[i], period=Range(now, None, "[)"))
            for i in range(watched)
        ]
    )

    staff_session = session_key(staff)
    viewers = [
        {
            "path": f"/ws/instances/{instances[i % watched].pk}/",
            "cookie": session_key(users[i % watched]),
            "host": gpus[i % watched][0].name,
        }
        for i in range(clients)
    ]
    viewers += [
        {"path": "/ws/fleet/", "cookie": staff_session, "host": "*"} for _ in range(fleet_clients)
    ]
    stamps = {}
    for i in range(watched):
        host, gpu = gpus[i]
        stamps.setdefault(host.name, {})[gpu.index] = str(instances[i].pk)
    return {
        "hosts": sorted({h.name for h, _ in gpus}),
        "viewers": viewers,
        "stamps": stamps,
        "layer_host": settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0],
    }


def start_daphne(
    port: int, urls: dict, log_path: Path, profile: str | None = None
) -> subprocess.Popen:
    env = {
        **os.environ,
        **urls,
        "SECRET_KEY": SECRET,
        "SECURE_COOKIES": "0",
        "LOG_LEVEL": "WARNING",
    }
    log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(
        [
            sys.executable,
            *(["-m", "cProfile", "-o", profile] if profile else []),
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "gpurental.asgi:application",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )


def wait_for_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"Daphne did not listen on {port} within {timeout} s")


# --- a minimal websocket client (RFC 6455, text frames, ping/pong, close) ------------


class Viewer:
    def __init__(self, port: int, path: str, cookie: str, host: str):
        self.port, self.path, self.cookie, self.host = port, path, cookie, host
        self.latencies: list[float] = []
        self.received: dict[str, int] = {}  # host → messages of that host inside the window
        self.close_code: int | None = None
        self.window = (float("inf"), float("-inf"))

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        key = base64.b64encode(os.urandom(16)).decode()
        self.writer.write(
            (
                f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                f"Origin: http://127.0.0.1:{self.port}\r\nCookie: sessionid={self.cookie}\r\n\r\n"
            ).encode()
        )
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 30)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"handshake refused: {head[:80]!r}")

    def _send(self, opcode: int, payload: bytes = b"") -> None:
        mask = os.urandom(4)
        header = bytes([0x80 | opcode])
        n = len(payload)
        header += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n)
        self.writer.write(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    async def _frame(self) -> tuple[int, bytes]:
        b1, b2 = await self.reader.readexactly(2)
        length = b2 & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", await self.reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", await self.reader.readexactly(8))
        return b1 & 0x0F, await self.reader.readexactly(length)

    def _count(self, host: str, ts: float, now: float) -> None:
        if self.window[0] <= ts < self.window[1]:
            self.received[host] = self.received.get(host, 0) + 1
            self.latencies.append(now - ts)

    async def run(self, until: float) -> None:
        while time.time() < until:
            try:
                opcode, payload = await asyncio.wait_for(
                    self._frame(), max(0.1, until - time.time())
                )
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                break
            now = time.time()
            if opcode == 0x8:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 0
                break
            if opcode == 0x9:
                self._send(0xA, payload)
                continue
            if opcode != 0x1:
                continue
            data = json.loads(payload)
            if data["type"] == "telemetry":
                self._count(self.host, data["ts"], now)
            elif data["type"] == "fleet":
                for host, sample in data["hosts"].items():
                    if sample["ts"] is not None:  # None: a host gone quiet, greyed out
                        self._count(host, sample["ts"], now)

    def close(self) -> None:
        try:
            self._send(0x8, struct.pack("!H", 1000))
            self.writer.close()
        except (ConnectionError, AttributeError, RuntimeError):
            pass


# --- the run ----------------------------------------------------------------------


async def publish_host(
    layer, redis, sampler, phase: float, start: float, until: float, sent: list
) -> None:
    from gpurental.agent.sampler import host_group, store_sample

    tick = 0
    while True:
        at = start + phase + tick
        tick += 1
        if at >= until:
            return
        await asyncio.sleep(max(0.0, at - time.time()))
        messages = []
        sampler.publish = messages.append
        sampler.tick()
        await layer.group_send(host_group(sampler.host_name), messages[0])
        sent.append(messages[0]["ts"])
        await store_sample(redis, sampler.host_name, messages[0])  # as the agent does


class OverCapacity(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "over capacity" in record.msg:
            self.count += int(record.args[0]) if record.args else 1


def wait_for_go(work: Path) -> dict:
    """The run's times, once the parent has written them (after every viewer connected)."""
    go = work / "go.json"
    while not go.exists():
        time.sleep(0.05)
    return json.loads(go.read_text())


async def publisher_part(spec: dict, part: int, work: Path) -> dict:
    """One publisher process: its share of the hosts, each ticking at its own phase."""
    import redis.asyncio as aioredis
    from channels_redis.core import RedisChannelLayer
    from channels_redis.pubsub import RedisPubSubChannelLayer

    from gpurental.agent.activity import Holding, Holdings
    from gpurental.agent.gpus import SimulatedSource
    from gpurental.agent.sampler import Sampler

    names = spec["hosts"][part :: spec["publishers"]]
    phases = {name: i / len(spec["hosts"]) for i, name in enumerate(spec["hosts"])}
    # Real agents each have their own connection; here a publisher's hosts share a pool.
    layer_class = RedisPubSubChannelLayer if spec["layer"] == "pubsub" else RedisChannelLayer
    layer = layer_class(hosts=[{**spec["layer_host"], "max_connections": len(names) + 16}])
    redis = aioredis.Redis.from_url(spec["layer_host"]["address"], max_connections=len(names) + 16)
    samplers = []
    for name in names:
        holdings = Holdings()
        for index, instance_id in spec["stamps"].get(name, {}).items():
            holdings.track(Holding(instance_id, (int(index),)))
        samplers.append(
            Sampler(
                host_name=name,
                source=SimulatedSource(host_name=name, model_name="NVIDIA A100-SXM4-80GB"),
                holdings=holdings,
                publish=None,
                send_batch=None,
            )
        )
    # channels-redis drops a message for a full channel silently, but says so in its log:
    # counting those lines tells a drop at the sender (a Daphne process's channel full)
    # from a message lost anywhere else.
    over = OverCapacity()
    logging.getLogger("channels_redis.core").addHandler(over)
    logging.getLogger("channels_redis.core").setLevel(logging.INFO)
    go = await asyncio.to_thread(wait_for_go, work)
    sent: dict[str, list[float]] = {s.host_name: [] for s in samplers}
    await asyncio.gather(
        *(
            publish_host(
                layer,
                redis,
                s,
                phases[s.host_name],
                go["start"],
                go["window"][1],
                sent[s.host_name],
            )
            for s in samplers
        )
    )
    await (layer.close_pools() if spec["layer"] == "core" else layer.flush())
    await redis.aclose()
    return {"sent": sent, "over_capacity": over.count}


async def client_part(spec: dict, part: int, work: Path) -> dict:
    """One client process: its share of the viewers; says when all are connected."""
    mine = spec["viewers"][part :: spec["client_procs"]]
    viewers = [Viewer(v["port"], v["path"], v["cookie"], v["host"]) for v in mine]
    # At most 16 handshakes under way across all client processes: a burst can overflow
    # Daphne's listen backlog (connections reset), more so on a busy machine.
    gate = asyncio.Semaphore(max(2, 16 // spec["client_procs"]))

    async def connect(viewer: Viewer) -> None:
        async with gate:
            for attempt in range(6):
                try:
                    await viewer.connect()
                    return
                except (ConnectionError, asyncio.IncompleteReadError):
                    if attempt == 5:
                        raise
                    await asyncio.sleep(0.5 * (attempt + 1))

    started = time.monotonic()
    await asyncio.gather(*(connect(v) for v in viewers))
    (work / f"connected-{part}").write_text(str(time.monotonic() - started))
    go = await asyncio.to_thread(wait_for_go, work)
    for viewer in viewers:
        viewer.window = tuple(go["window"])
    await asyncio.gather(*(v.run(go["until"]) for v in viewers))
    for viewer in viewers:
        viewer.close()
    fleet = [v for v in viewers if v.host == "*"]
    return {
        "instance": [
            {"host": v.host, "received": v.received.get(v.host, 0), "latencies": v.latencies}
            for v in viewers
            if v.host != "*"
        ],
        "fleet_updates": sum(sum(v.received.values()) for v in fleet),
        # Every 16th of a fleet viewer's latencies: enough for percentiles, not megabytes.
        "fleet_latencies": [lat for v in fleet for lat in v.latencies[::16]],
        "fleet_viewers": len(fleet),
        "closed": [v.close_code for v in viewers if v.close_code is not None],
    }


def child_main(role: str, spec_path: str, part: int) -> int:
    work = Path(spec_path).parent
    spec = json.loads(Path(spec_path).read_text())
    runner = publisher_part if role == "publish" else client_part
    result = asyncio.run(runner(spec, part, work))
    (work / f"{role}-{part}.json").write_text(json.dumps(result))
    return 0


def run(spec: dict, work: Path, pids: dict, duration: float, warmup: float) -> dict:
    """Starts the publisher and client processes, lets them run, gathers their figures."""
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}

    def child(role: str, part: int) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, __file__, "--child", role, str(spec_path), str(part)],
            env=env,
            cwd=ROOT,
        )

    children = [child("client", p) for p in range(spec["client_procs"])]
    children += [child("publish", p) for p in range(spec["publishers"])]
    try:
        started = time.monotonic()
        while len(list(work.glob("connected-*"))) < spec["client_procs"]:
            if any(c.poll() not in (None, 0) for c in children):
                raise RuntimeError("a bench child process failed while connecting")
            if time.monotonic() - started > 600:
                raise RuntimeError("viewers did not connect within 10 minutes")
            time.sleep(0.2)
        connect_s = time.monotonic() - started
        start = time.time() + 1.0
        window = (start + warmup, start + warmup + duration)
        (work / "go.json.tmp").write_text(
            json.dumps({"start": start, "window": window, "until": window[1] + 2.0})
        )
        (work / "go.json.tmp").rename(work / "go.json")
        for p in range(spec["publishers"]):
            pids[f"publisher {p}"] = children[spec["client_procs"] + p].pid
        for p in range(spec["client_procs"]):
            pids[f"clients {p}"] = children[p].pid
        time.sleep(max(0.0, window[0] - time.time()))
        before = {k: cpu_seconds(p) for k, p in pids.items()}
        time.sleep(max(0.0, window[1] - time.time()))
        cpu = {k: (cpu_seconds(p) - before[k]) / duration for k, p in pids.items()}
        for c in children:
            c.wait(120)
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
    parts = {
        role: [
            json.loads((work / f"{role}-{p}.json").read_text())
            for p in range(spec["client_procs" if role == "client" else "publishers"])
        ]
        for role in ("client", "publish")
    }
    sent = {h: ts for part in parts["publish"] for h, ts in part["sent"].items()}
    ticks_in_window = {
        name: sum(1 for ts in stamps if window[0] <= ts < window[1])
        for name, stamps in sent.items()
    }
    instance_viewers = [v for part in parts["client"] for v in part["instance"]]
    expected = sum(ticks_in_window[v["host"]] for v in instance_viewers)
    received = sum(min(ticks_in_window[v["host"]], v["received"]) for v in instance_viewers)
    # A fleet viewer gets the newest sample of each host once a second: ticks that land
    # in the same flush are coalesced by design, so count updates, not drops.
    fleet_viewers = sum(part["fleet_viewers"] for part in parts["client"])
    fleet_updates = sum(part["fleet_updates"] for part in parts["client"])
    fleet_possible = fleet_viewers * len(sent) * duration
    latencies = [lat for v in instance_viewers for lat in v["latencies"]]
    return {
        "connect_s": connect_s,
        "cpu": cpu,
        "expected": expected,
        "received": received,
        "delivered": len(latencies) + fleet_updates,
        "latencies": latencies,
        "fleet_latencies": [lat for part in parts["client"] for lat in part["fleet_latencies"]],
        "fleet_update_ratio": fleet_updates / fleet_possible if fleet_possible else None,
        "closed": [c for part in parts["client"] for c in part["closed"]],
        "host_ticks": sum(ticks_in_window.values()),
        "over_capacity": sum(part["over_capacity"] for part in parts["publish"]),
    }


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        return child_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--fleet-clients", type=int, default=0)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument(
        "--layer", choices=("core", "pubsub"), default="core", help="CHANNEL_LAYER_BACKEND"
    )
    parser.add_argument("--daphnes", type=int, default=1, help="Daphne processes")
    parser.add_argument("--publishers", type=int, default=1, help="publisher processes")
    parser.add_argument("--client-procs", type=int, default=1, help="websocket client processes")
    parser.add_argument(
        "--profile-daphne", metavar="PATH", help="cProfile the first Daphne into PATH"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="a small size for CI: checks it runs and is sane"
    )
    args = parser.parse_args()
    if args.smoke:
        args.hosts, args.clients, args.fleet_clients, args.duration, args.warmup = 2, 4, 1, 4.0, 1.0
        args.daphnes, args.publishers, args.client_procs = 1, 1, 1
    os.environ["CHANNEL_LAYER_BACKEND"] = args.layer  # this process and Daphne
    if not (
        1 <= args.hosts <= 1000
        and 0 <= args.clients <= 5000
        and 1 <= args.duration <= 600
        and 1 <= args.daphnes <= 8
        and 1 <= args.publishers <= 8
        and 1 <= args.client_procs <= 16
    ):
        parser.error(
            "keep it bounded: 1-1000 hosts, 0-5000 clients, 1-600 s, 1-8 Daphnes, "
            "1-8 publishers, 1-16 client processes"
        )
    work = Path(tempfile.mkdtemp(prefix="gpurental-bench-"))
    from gpurental import embedded

    daphnes: list[subprocess.Popen] = []
    try:
        urls = setup_django(work / "var", SECRET_KEY=SECRET)
        fleet = make_fleet(args.hosts, args.clients, args.fleet_clients)
        ports = []
        for d in range(args.daphnes):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                ports.append(sock.getsockname()[1])
            profile = args.profile_daphne if d == 0 else None
            daphnes.append(start_daphne(ports[-1], urls, work / f"daphne-{d}.log", profile))
        for port in ports:
            wait_for_port(port, 60)
        redis_pid = int((servers_dir(work / "var") / "redis" / "redis.pid").read_text())
        pids = {f"daphne {d}": p.pid for d, p in enumerate(daphnes)}
        pids |= {"redis": redis_pid, "bench main": os.getpid()}
        # Viewers spread over the Daphne processes, as a load balancer would.
        for i, viewer in enumerate(fleet["viewers"]):
            viewer["port"] = ports[i % len(ports)]
        spec = {
            "hosts": fleet["hosts"],
            "viewers": fleet["viewers"],
            "stamps": fleet["stamps"],
            "layer_host": fleet["layer_host"],
            "layer": args.layer,
            "publishers": args.publishers,
            "client_procs": args.client_procs,
        }
        print(
            f"telemetry fan-out: {args.hosts} hosts × 8 GPUs at 1 Hz → {args.clients} instance "
            f"viewers + {args.fleet_clients} fleet viewers, {args.duration:g} s measured "
            f"({os.cpu_count()} CPUs, {args.daphnes} Daphne process(es), {args.layer} channel "
            f"layer; bench: {args.publishers} publisher and {args.client_procs} client "
            "process(es))",
            flush=True,
        )
        result = run(spec, work, pids, args.duration, args.warmup)
    finally:
        for daphne in daphnes:
            daphne.terminate()
            try:
                daphne.wait(20)
            except subprocess.TimeoutExpired:
                daphne.kill()
        embedded.stop(work / "var")
        logs = [p.read_text(errors="replace") for p in sorted(work.glob("daphne-*.log"))]
        shutil.rmtree(work, ignore_errors=True)
        for log in logs:
            lines = log.splitlines()
            starts = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
            if starts:
                print(f"daphne log: {len(starts)} tracebacks; the first:")
                print("\n".join("    " + line for line in lines[starts[0] : starts[0] + 60]))
    lat = result["latencies"]
    dropped = result["expected"] - result["received"]
    cpu = result["cpu"]
    print(f"connected {len(fleet['viewers'])} websockets in {result['connect_s']:.1f} s")
    print(f"host messages published: {result['host_ticks'] / args.duration:.1f}/s")
    print(f"delivered to clients:    {result['delivered'] / args.duration:.1f} messages/s")
    print(
        f"latency sample→viewer:  p50 {percentile(lat, 0.5) * 1000:.1f} ms, "
        f"p99 {percentile(lat, 0.99) * 1000:.1f} ms, max {max(lat, default=float('nan')) * 1000:.1f} ms"
        + (f", mean {statistics.mean(lat) * 1000:.1f} ms" if lat else "")
    )
    share = 100 * dropped / result["expected"] if result["expected"] else 0.0
    print(
        f"dropped:                 {dropped} of {result['expected']} ({share:.2f} %); "
        f"channel-layer sends skipped as over capacity (whole run): {result['over_capacity']}"
    )
    if result["fleet_update_ratio"] is not None:
        fleet_lat = result["fleet_latencies"]
        print(
            f"fleet viewers:           {result['fleet_update_ratio']:.2f} updates per host-second, "
            f"age at arrival p50 {percentile(fleet_lat, 0.5) * 1000:.0f} ms, "
            f"p99 {percentile(fleet_lat, 0.99) * 1000:.0f} ms (batched once a second)"
        )
    print(
        "CPU (cores):             "
        + ", ".join(f"{name} {share:.2f}" for name, share in cpu.items())
        + f"; total {sum(cpu.values()):.2f} of {os.cpu_count()}"
    )
    if result["closed"]:
        print(
            f"closed by the server: {len(result['closed'])} (codes {sorted(set(result['closed']))})"
        )
    # Sane, not fast: samples were published, delivered, and no viewer was thrown out.
    sane = result["host_ticks"] > 0 and result["received"] > 0 and not result["closed"]
    if not sane:
        print(
            "the figures are not sane: nothing was published or delivered, or viewers were closed"
        )
    return 0 if sane else 1


if __name__ == "__main__":
    sys.exit(main())
