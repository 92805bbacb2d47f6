"""What the instance gateway costs: the same JupyterLab through the gateway and direct.

    .venv/bin/python bench/gateway.py [--samples 500] [--download-mb 10] [--sockets 500]

Needs a Docker Engine (scripts/docker-engine.sh) and the image (make images). Starts the
platform as bench/launch.py does (embedded PostgreSQL and Redis, Daphne, a control worker,
a real host agent with the docker runtime) and the real gateway process
(``python -m gpurental.gateway``), launches one instance and logs in at its origin with a
one-time link (``tickets.connect``, then ``/_gw/enter``), as the console's Open
JupyterLab does. Requests go to 127.0.0.1 with the origin's Host header.

Measured, each through the gateway (cookie, ``Host: <id>.gw.localhost:<port>``) and direct
on the instance's published port (``Authorization: token …``), interleaved sample by
sample, over one kept-alive connection each way:

- time to first byte of ``GET /api/status`` (the response's status line and headers
  read): p50 / p99 each way, and the overhead, gateway − direct;
- a download of a random file in the instance's /workspace (``GET /files/<name>``):
  seconds and MB/s;
- a kernel execute round trip (``1+1``: execute_request sent → execute_result read) over
  one kernel websocket each way (a kernel each, so neither sees the other's messages);
- ``--sockets`` idle websockets (JupyterLab's ``/api/events/subscribe``) held by the one
  gateway process for ``--hold`` seconds: how many are still open, how many carry an event
  end to end afterwards (one file saved through the gateway: every subscriber gets its
  event), a kernel execute through the gateway while they are held, and the gateway
  process's RSS and CPU time (``/proc/<pid>``) before, after opening and after holding.

With Caddy installed (``/usr/bin/caddy``; ``--no-caddy`` skips it), the first three are
also measured through Caddy as a plain reverse proxy on the same port (no login, the
token sent by the client): what an existing proxy costs for the same hop.

The goal (issue 14): overhead p50 under 5 ms on loopback, and the idle websockets held
by one gateway process on this machine. Printed as met or missed, never asserted;
``--smoke`` fails (non-zero exit) only when something does not work.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import percentile, setup_django  # noqa: E402
from bench.launch import Platform, check, free_port, gateway_enter, gateway_env  # noqa: E402

CADDY = "/usr/bin/caddy"
OVERHEAD_GOAL_S = 0.005


@dataclass
class Target:
    """One way to the instance's JupyterLab: where to connect and what to send."""

    name: str
    port: int
    headers: dict[str, str]  # sent with every request
    origin: str | None = None  # the Origin header changing requests and websockets need
    conn: http.client.HTTPConnection = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def url(self, path: str, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def changing_headers(self) -> dict[str, str]:
        return {**self.headers, **({"Origin": self.origin} if self.origin else {})}

    def get(self, path: str) -> tuple[float, float, bytes]:
        """(seconds to the first byte, seconds to the last, body) of a GET on the kept
        connection; anything but 200 is a failure."""
        started = time.perf_counter()
        self.conn.request("GET", path, headers=self.headers)
        answer = self.conn.getresponse()
        first = time.perf_counter()
        body = answer.read()
        last = time.perf_counter()
        check(
            answer.status == 200,
            f"GET {path} via {self.name} answered {answer.status}: {body[:200]!r}",
        )
        return first - started, last - started, body


# --- the processes ---------------------------------------------------------------


def raise_open_files() -> int:
    """Lift the soft open-files limit to the hard one; the platform's processes, started
    after, inherit it (the gateway holds two sockets for each websocket)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def proc_stats(pid: int) -> tuple[float, float]:
    """(RSS in MiB, CPU seconds: user + system) of a process."""
    rss_kib = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kib = int(line.split()[1])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return rss_kib / 1024, ticks / os.sysconf("SC_CLK_TCK")


def launch_running(platform: Platform):
    from gpurental.rentals.events import wait_for_status
    from gpurental.rentals.models import Instance
    from gpurental.rentals.services import lifecycle

    instance = lifecycle.instance_launch(
        user=platform.user, image=platform.image, gpu_model=platform.model, gpu_count=1
    )
    status = Instance.objects.filter(pk=instance.pk).values_list("status", flat=True)
    seen, _ = wait_for_status(instance.pk, "running", 120, current=lambda: status.get())
    check(seen == "running", f"instance {instance.pk} is {seen}, not running")
    instance.refresh_from_db()
    return instance


class Caddy:
    """Caddy as a plain reverse proxy on loopback in front of ``upstream``."""

    def __init__(self, work: Path, upstream: tuple[str, int]):
        self.port = free_port()
        self.config = work / "Caddyfile"
        self.config.write_text(
            "{\n\tadmin off\n\tauto_https off\n}\n"
            f"http://127.0.0.1:{self.port} {{\n"
            f"\treverse_proxy {upstream[0]}:{upstream[1]}\n}}\n"
        )
        log = open(work / "caddy.log", "wb")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(
            [CADDY, "run", "--config", str(self.config), "--adapter", "caddyfile"],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=work,
            env={**os.environ, "HOME": str(work), "XDG_DATA_HOME": str(work / "caddy")},
        )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def wait_answering(target: Target, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            target.get("/api/status")
            return
        except (OSError, http.client.HTTPException, RuntimeError):
            target.conn.close()
            check(time.monotonic() < deadline, f"{target.name} never answered /api/status")
            time.sleep(0.1)


# --- the measurements --------------------------------------------------------------


def first_bytes(targets: list[Target], samples: int) -> dict[str, list[float]]:
    for _ in range(20):  # warm-up: connections, caches, the gateway's route
        for target in targets:
            target.get("/api/status")
    times: dict[str, list[float]] = {t.name: [] for t in targets}
    for n in range(samples):
        for target in targets[n % 2 :] + targets[: n % 2]:  # alternate who goes first
            times[target.name].append(target.get("/api/status")[0])
    return times


def put_file(target: Target, name: str, data: bytes) -> None:
    body = json.dumps(
        {"type": "file", "format": "base64", "content": base64.b64encode(data).decode()}
    )
    target.conn.request(
        "PUT",
        f"/api/contents/{name}",
        body=body,
        headers={**target.changing_headers(), "Content-Type": "application/json"},
    )
    answer = target.conn.getresponse()
    text = answer.read()
    check(
        answer.status in (200, 201), f"PUT {name} via {target.name}: {answer.status} {text[:200]!r}"
    )


def downloads(targets: list[Target], size: int, samples: int) -> dict[str, list[float]]:
    name = f"bench-{size}.bin"
    data = os.urandom(size)
    put_file(targets[1], name, data)  # direct: the file is there before anything is timed
    for target in targets:
        _, _, body = target.get(f"/files/{name}")
        check(body == data, f"{target.name} sent {len(body)} bytes, not the {size} stored")
    times: dict[str, list[float]] = {t.name: [] for t in targets}
    for n in range(samples):
        for target in targets[n % 2 :] + targets[: n % 2]:
            _, elapsed, body = target.get(f"/files/{name}")
            check(len(body) == size, f"{target.name} sent {len(body)} bytes of {size}")
            times[target.name].append(elapsed)
    return times


def execute_request(code: str) -> tuple[str, str]:
    msg_id = uuid.uuid4().hex
    message = {
        "header": {
            "msg_id": msg_id,
            "username": "bench",
            "session": uuid.uuid4().hex,
            "msg_type": "execute_request",
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "content": {"code": code, "silent": False, "store_history": False},
        "channel": "shell",
    }
    return msg_id, json.dumps(message)


async def execute(ws, code: str = "1+1", timeout: float = 30) -> float:
    """Seconds from sending ``code`` to its execute_result, over a kernel websocket."""
    import aiohttp

    msg_id, message = execute_request(code)
    started = time.perf_counter()
    await ws.send_str(message)
    async with asyncio.timeout(timeout):
        async for frame in ws:
            check(frame.type == aiohttp.WSMsgType.TEXT, f"the kernel socket sent {frame.type}")
            data = json.loads(frame.data)
            if (
                data.get("parent_header", {}).get("msg_id") == msg_id
                and data.get("msg_type") == "execute_result"
            ):
                elapsed = time.perf_counter() - started
                check(data["content"]["data"]["text/plain"] == "2", f"1+1 gave {data['content']}")
                return elapsed
    raise RuntimeError("the kernel socket closed before the result")


async def kernel_socket(session, target: Target):
    """A new kernel and a websocket to its channels, through ``target``."""
    async with session.post(
        target.url("/api/kernels"), json={}, headers=target.changing_headers()
    ) as answer:
        text = await answer.text()
        check(answer.status == 201, f"POST /api/kernels via {target.name}: {answer.status} {text}")
        kernel_id = json.loads(text)["id"]
    return await session.ws_connect(
        target.url(f"/api/kernels/{kernel_id}/channels", "ws"),
        headers=target.changing_headers(),
        max_msg_size=0,
    )


async def idle_sockets(
    session, gateway: Target, gateway_pid: int, count: int, hold: float, kernel_ws
) -> dict:
    """Open ``count`` event websockets through the gateway, hold them, check them."""
    import aiohttp

    stats = {"before": proc_stats(gateway_pid)}
    gate = asyncio.Semaphore(50)  # JupyterLab has one core: open them 50 at a time

    async def open_one():
        async with gate:
            return await session.ws_connect(
                gateway.url("/api/events/subscribe", "ws"),
                headers=gateway.changing_headers(),
                autoping=True,
            )

    started = time.perf_counter()
    sockets = await asyncio.gather(*(open_one() for _ in range(count)))
    stats["open_s"] = time.perf_counter() - started
    stats["opened"] = proc_stats(gateway_pid)
    events = [0] * count
    ended = [False] * count

    async def read(i: int, ws) -> None:
        async for frame in ws:
            if frame.type == aiohttp.WSMsgType.TEXT:
                events[i] += 1
        ended[i] = True

    readers = [asyncio.create_task(read(i, ws)) for i, ws in enumerate(sockets)]
    await asyncio.sleep(hold)
    stats["held"] = proc_stats(gateway_pid)
    stats["open_after_hold"] = sum(
        1 for i, ws in enumerate(sockets) if not ws.closed and not ended[i]
    )
    # End to end over every socket: one file saved through the gateway emits a contents
    # event that JupyterLab sends to every subscriber.
    before = list(events)
    async with session.put(
        gateway.url("/api/contents/bench-event.txt"),
        json={"type": "file", "format": "text", "content": "hello"},
        headers=gateway.changing_headers(),
    ) as answer:
        check(answer.status in (200, 201), f"PUT through the gateway: {answer.status}")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if all(e > b for e, b in zip(events, before, strict=True)):
            break
        await asyncio.sleep(0.05)
    stats["event_delivered"] = sum(1 for e, b in zip(events, before, strict=True) if e > b)
    stats["execute_while_held"] = await execute(kernel_ws)
    stats["after_check"] = proc_stats(gateway_pid)
    for ws in sockets:
        await ws.close()
    for reader in readers:
        reader.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    return stats


async def async_part(
    targets: list[Target], gateway_pid: int, samples: int, count: int, hold: float
) -> tuple[dict[str, list[float]], dict]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, cookie_jar=aiohttp.DummyCookieJar()
    ) as session:
        sockets = {t.name: await kernel_socket(session, t) for t in targets}
        for ws in sockets.values():
            for _ in range(5):  # warm-up, and the kernel's start
                await execute(ws, timeout=60)
        times: dict[str, list[float]] = {t.name: [] for t in targets}
        for n in range(samples):
            for target in targets[n % 2 :] + targets[: n % 2]:
                times[target.name].append(await execute(sockets[target.name]))
        idle = await idle_sockets(
            session, targets[0], gateway_pid, count, hold, sockets[targets[0].name]
        )
        for ws in sockets.values():
            await ws.close()
    return times, idle


# --- the report ----------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def report(
    ttfb: dict[str, list[float]],
    download: dict[str, list[float]],
    size: int,
    rtt: dict[str, list[float]],
    idle: dict,
    count: int,
    hold: float,
) -> bool:
    names = list(ttfb)
    mb = size / 1e6
    rate = {n: [mb / t for t in download[n]] for n in names}
    rows = [
        ("GET /api/status, first byte, p50", ttfb, 0.5, ms),
        ("GET /api/status, first byte, p99", ttfb, 0.99, ms),
        (f"{mb:g} MB download, p50", download, 0.5, lambda s: f"{s:.3f} s"),
        (f"{mb:g} MB download, MB/s p50", rate, 0.5, lambda r: f"{r:.0f} MB/s"),
        ("kernel execute round trip, p50", rtt, 0.5, ms),
        ("kernel execute round trip, p99", rtt, 0.99, ms),
    ]
    width = 36
    print()
    header = f"{'':{width}}" + "".join(f"{n:>14}" for n in names) + f"{'gateway − direct':>18}"
    print(header)
    for label, data, q, fmt in rows:
        values = {n: percentile(data[n], q) for n in names}
        line = f"{label:{width}}" + "".join(f"{fmt(values[n]):>14}" for n in names)
        line += f"{fmt(values['gateway'] - values['direct']):>18}"
        print(line)
    print(
        f"(samples: {len(ttfb['gateway'])} first bytes, {len(download['gateway'])} downloads, "
        f"{len(rtt['gateway'])} round trips each way, interleaved)"
    )

    before, opened, held, after = (idle[k] for k in ("before", "opened", "held", "after_check"))
    print()
    print(f"{count} idle websockets (/api/events/subscribe) through one gateway process:")
    print(f"  opened in {idle['open_s']:.2f} s (50 at a time)")
    print(f"  still open after {hold:g} s: {idle['open_after_hold']} / {count}")
    print(
        f"  a file saved through the gateway, its event received: "
        f"{idle['event_delivered']} / {count}"
    )
    print(f"  kernel execute through the gateway while held: {ms(idle['execute_while_held'])}")
    print(f"  {'gateway process':24}{'RSS':>10}{'CPU time':>12}")
    for label, (rss, cpu) in (
        ("before", before),
        (f"{count} opened", opened),
        (f"held {hold:g} s", held),
        ("after the checks", after),
    ):
        print(f"  {label:24}{rss:8.1f} MiB{cpu:10.2f} s")
    per_socket = (held[0] - before[0]) * 1024 / count
    print(
        f"  ≈ {per_socket:.0f} KiB RSS per websocket; CPU while idle: "
        f"{held[1] - opened[1]:.2f} s over {hold:g} s "
        f"({(held[1] - opened[1]) / hold * 100:.1f} % of a core)"
    )

    overhead = percentile(ttfb["gateway"], 0.5) - percentile(ttfb["direct"], 0.5)
    all_held = idle["open_after_hold"] == count and idle["event_delivered"] == count
    print()
    print(
        f"goal: overhead p50 under {ms(OVERHEAD_GOAL_S)} on loopback: {ms(overhead)}, "
        f"{'met' if overhead < OVERHEAD_GOAL_S else 'missed'}"
    )
    print(
        f"goal: {count} concurrent idle websockets held by one gateway process on "
        f"{os.cpu_count()} cores: {'met' if all_held else 'missed'}"
    )
    # Works, not fast: every sample taken, every socket held and carrying its event.
    sane = all_held and all(
        len(values) > 0 and all(0 < v < 60 for v in values)
        for data in (ttfb, download, rtt)
        for values in data.values()
    )
    if not sane:
        print("something did not work: see above")
    return sane


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=500, help="first-byte samples each way")
    parser.add_argument("--download-mb", type=float, default=10, help="download size (MB)")
    parser.add_argument("--downloads", type=int, default=20, help="downloads each way")
    parser.add_argument("--round-trips", type=int, default=200, help="kernel round trips")
    parser.add_argument("--sockets", type=int, default=500, help="idle websockets to hold")
    parser.add_argument("--hold", type=float, default=20, help="seconds to hold them")
    parser.add_argument("--no-caddy", action="store_true", help="skip the Caddy comparison")
    parser.add_argument(
        "--smoke", action="store_true", help="a small size for CI: checks every path works"
    )
    args = parser.parse_args()
    if args.smoke:
        args.samples, args.download_mb, args.downloads = 5, 1, 3
        args.round_trips, args.sockets, args.hold = 5, 20, 2
    size = int(args.download_mb * 1_000_000)
    open_files = raise_open_files()
    work = Path(tempfile.mkdtemp(prefix="gpurental-bench-"))
    from gpurental import embedded

    platform = caddy = instance_id = None
    try:
        setup_django(work / "var", **gateway_env())
        from gpurental.gateway import routes, tickets

        print(
            f"gateway benchmark: {args.samples} first bytes, {args.downloads} × "
            f"{args.download_mb:g} MB, {args.round_trips} kernel round trips each way; "
            f"{args.sockets} idle websockets for {args.hold:g} s; {os.cpu_count()} CPUs, "
            f"open files {open_files}"
        )
        platform = Platform(work)
        platform.start()
        instance = launch_running(platform)
        instance_id = str(instance.pk)
        route = routes.route_for(instance_id)
        check(route is not None, f"no route to {instance_id}")
        upstream = route.upstream(None)
        host, cookie = gateway_enter(
            platform.gateway_url, tickets.connect(user=platform.user, instance=instance).url
        )
        token = {"Authorization": f"token {instance.jupyter_token}"}
        targets = [
            Target(
                "gateway",
                platform.gateway_port,
                {"Host": host, "Cookie": cookie},
                origin=routes.origin(instance.pk),
            ),
            Target("direct", upstream[1], token),
        ]
        if not args.no_caddy and Path(CADDY).exists():
            caddy = Caddy(work, upstream)
            targets.append(Target("caddy", caddy.port, token))
        for target in targets:
            wait_answering(target)
        print(f"instance {instance_id} answering; JupyterLab on {upstream[0]}:{upstream[1]}")
        ttfb = first_bytes(targets, args.samples)
        download = downloads(targets, size, args.downloads)
        rtt, idle = asyncio.run(
            async_part(
                targets, platform.gateway_proc.pid, args.round_trips, args.sockets, args.hold
            )
        )
        check(platform.gateway_proc.poll() is None, "the gateway exited: see its log")
    finally:
        if caddy is not None:
            caddy.stop()
        if platform is not None:
            if instance_id is not None:
                platform.terminate(instance_id)
            platform.stop()
        embedded.stop(work / "var")
        shutil.rmtree(work, ignore_errors=True)
    return 0 if report(ttfb, download, size, rtt, idle, args.sockets, args.hold) else 1


if __name__ == "__main__":
    sys.exit(main())
