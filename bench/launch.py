"""Launch latency as a customer lives it: three platform paths, each paired with a direct run.

    .venv/bin/python bench/launch.py [--pairs 10]

Needs a Docker Engine (scripts/docker-engine.sh) and the image (make images). Starts its
own embedded PostgreSQL and Redis in a temp dir, the real web process (Daphne), the real
instance gateway (``python -m gpurental.gateway``), a real control worker (Celery, as the
Procfile runs it) and a real host agent (process). Then, in rounds, for each path it
runs one *pair*: a platform launch and a direct ``docker run`` of the same image,
environment and limits, in alternating order.

A platform launch is timed as a customer lives it since the gateway: from the first
call, through the one-time link the platform hands out and its exchange for the
gateway's cookie (``/_gw/enter``), until the bench's GET of JupyterLab's ``/api/status``
*through the gateway* answers 200. So the platform paths include the gateway hop and
the ticket exchange; the direct run is timed until ``/api/status`` with the token
answers 200 on its published port. The paths:

- ``service``: ``instance_launch`` in-process, then ``wait_for_status`` (the instance's Redis
  state channel, what the long-poll waits on) for ``running``, then ``tickets.connect``
  (what the console's Open JupyterLab does);
- ``rest``: ``POST /api/v1/instances/``, then ``POST …/{id}/connect/?wait_for=running&timeout=60``
  (the link the moment it runs, in one request);
- ``sdk``: the article's snippet as written (``Client(...).create_instance(...)``, then
  ``instance.connect()``, which waits for ``running`` and returns the link).

The direct run waits with the agent's own readiness check (``wait_for_jupyter``: same
probes, same schedule); for the SDK path it also gets the model cache mount and variables
the snippet's ``model_repo="huggingface"`` gives the platform's container. The agent keeps network sandboxes ready (runtimes/sandboxes.py,
``GPURENTAL_NET_POOL``, 2 by default; ``--net-pool 0`` runs without them) and refills
its pool after each launch; the bench
waits for that pool to be full again after each platform launch, so that neither side of
a pair runs beside the pool's work. Prints, per path, p50 of each side and the median of the
per-pair ratios platform/direct, and where the platform's time goes (from the
instance's events), and how long the link took to become a JupyterLab answer.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import a10g_model, session_key, setup_django  # noqa: E402

IMAGE = "gpurental/jupyter-cpu:latest"


PATHS = ("service", "rest", "sdk")


class Platform:
    """The platform under test: Daphne, a control worker and an agent on the bench's servers."""

    def __init__(self, work: Path, net_pool: int = 2):
        from django.conf import settings

        from gpurental.accounts.services import api_key_create
        from gpurental.billing.services import credit_add
        from gpurental.catalog.models import ImageTemplate
        from gpurental.fleet.services import host_create
        from gpurental.testing.agent_process import AgentProcess

        self.work = work
        self.net_pool = net_pool
        self.procs: list[subprocess.Popen] = []
        self.model = a10g_model()
        # The article's framework; on a host without NVIDIA GPUs it runs the CPU image.
        self.image = ImageTemplate.objects.create(
            slug="pytorch-2.1",
            name="PyTorch 2.1 + JupyterLab",
            image="gpurental/pytorch-cuda:2.1",
            cpu_image=IMAGE,
        )
        from gpurental.accounts.models import User

        self.user = User.objects.create_user(email="bench@example.com", password=uuid.uuid4().hex)
        # Launches need credit for their minimum prepaid period, like any customer's.
        credit_add(user=self.user, amount=Decimal("1000.00"), description="bench credit")
        _, self.api_key = api_key_create(user=self.user, name="bench")
        host, token = host_create(name="bench")
        self.hf_cache = work / "hf-cache"
        (self.hf_cache / "hub").mkdir(parents=True)
        host.hf_cache_dir = str(self.hf_cache)
        host.save(update_fields=["hf_cache_dir"])
        self.host = host
        self.agent = AgentProcess(
            broker_url=settings.CELERY_BROKER_URL,
            host_name=host.name,
            token=token,
            log_path=work / "agent.log",
            GPURENTAL_HF_CACHE_DIR=str(self.hf_cache),
            GPURENTAL_NET_POOL=str(net_pool),
            # The agent's own default (the tests' agents beat every second).
            GPURENTAL_HEARTBEAT_INTERVAL="5",
        )
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        # The gateway listens where the platform's links point (settings, from the env
        # that gateway_env() made before Django was set up).
        self.gateway_port = settings.GATEWAY_PORT
        self.gateway_url = f"http://127.0.0.1:{self.gateway_port}"
        self.gateway_proc: subprocess.Popen | None = None
        self.session = session_key(self.user)
        self.console_delays: list[float] = []

    def _spawn(self, name: str, *argv: str) -> subprocess.Popen:
        log = open(self.work / f"{name}.log", "wb")  # noqa: SIM115 - lives with the process
        env = {**os.environ, "SECURE_COOKIES": "0", "LOG_LEVEL": "WARNING"}
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        import requests

        from gpurental.fleet.models import Host
        from gpurental.testing.agent_process import wait_for

        py = sys.executable
        self._spawn("daphne", py, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                    "gpurental.asgi:application")  # fmt: skip
        self.gateway_proc = self._spawn(
            "gateway", py, "-m", "gpurental.gateway", "--port", str(self.gateway_port)
        )
        # As the Procfile runs it: the control queue, two processes.
        self._spawn("worker", py, "-m", "celery", "-A", "gpurental.celery_app", "worker",
                    "-Q", "control", "-c", "2", "-n", "control@bench", "-l", "WARNING")  # fmt: skip
        self.agent.start()

        def web_up() -> bool:
            try:
                return requests.get(f"{self.base_url}/healthz", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        def gateway_up() -> bool:
            check(self.gateway_proc.poll() is None, "the gateway exited: see gateway.log")
            try:
                return requests.get(f"{self.gateway_url}/healthz", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_for(web_up, 60, "Daphne to serve /healthz")
        wait_for(gateway_up, 60, "the gateway to serve /healthz")
        gpus = Host.objects.filter(pk=self.host.pk, gpus__isnull=False)
        wait_for(lambda: gpus.count() == 2, 60, "the agent's first heartbeat", self.agent)

    def stop(self) -> None:
        self.agent.stop()
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()

    # --- the three paths: each returns (seconds, instance id) -------------

    def launch(self, path: str) -> tuple[float, str, float, float]:
        """Seconds until the customer's JupyterLab answered through the gateway, the
        instance, when (epoch seconds) the caller learned that it runs, and the seconds from
        the link in hand to that answer."""
        started = time.perf_counter()
        link, instance_id = getattr(self, f"_{path}")()
        learned_at = time.time()
        linked = time.perf_counter()
        answer_through_gateway(self.gateway_url, link)
        done = time.perf_counter()
        return done - started, instance_id, learned_at, done - linked

    def _service(self) -> tuple[str, str]:
        from gpurental.rentals.events import wait_for_status
        from gpurental.rentals.models import Instance
        from gpurental.rentals.services import lifecycle

        instance = lifecycle.instance_launch(
            user=self.user, image=self.image, gpu_model=self.model, gpu_count=1
        )
        # The console's websocket, open beside: when does it show `running`?
        console = ConsoleWatcher(self.port, str(instance.pk), self.session)
        console.start()
        status = Instance.objects.filter(pk=instance.pk).values_list("status", flat=True)
        seen, _ = wait_for_status(instance.pk, "running", 120, current=lambda: status.get())
        check(seen == "running", f"instance {instance.pk} is {seen}, not running")
        console.join(30)
        check(console.delay is not None, f"the console never showed {instance.pk} running")
        self.console_delays.append(console.delay)
        from gpurental.gateway import tickets

        instance.refresh_from_db()
        # What the console's Open JupyterLab does: a one-time link for the owner.
        return tickets.connect(user=self.user, instance=instance).url, str(instance.pk)

    def _rest(self) -> tuple[str, str]:
        import requests

        headers = {"Authorization": f"Bearer {self.api_key}"}
        answer = requests.post(
            f"{self.base_url}/api/v1/instances/",
            json={"gpu_model": "A10G", "gpu_count": 1, "image": "pytorch-2.1"},
            headers=headers,
            timeout=30,
        )
        check(answer.status_code == 201, f"launch answered {answer.status_code}: {answer.text}")
        instance_id = answer.json()["id"]
        answer = requests.post(
            f"{self.base_url}/api/v1/instances/{instance_id}/connect/",
            params={"wait_for": "running", "timeout": "60"},
            headers=headers,
            timeout=90,
        )
        check(answer.status_code == 201, f"connect answered {answer.status_code}: {answer.text}")
        return answer.json()["url"], instance_id

    def _sdk(self) -> tuple[str, str]:
        # The article's snippet, as written.
        from gpurental.client import Client

        client = Client(api_key=self.api_key, base_url=self.base_url)
        instance = client.create_instance(
            gpu_type="A10G", framework="pytorch-2.1", model_repo="huggingface"
        )
        url = instance.connect()  # waits until running, returns a one-time link into it
        return url, str(instance.id)

    def steps(self, instance_id: str) -> dict[str, float]:
        """Seconds from the instance's creation to each step and state (its events)."""
        from gpurental.rentals.models import Instance

        instance = Instance.objects.get(pk=instance_id)
        steps: dict[str, float] = {}
        for event in instance.events.order_by("created_at", "pk"):
            name = event.step or event.to_status
            if name:
                steps.setdefault(name, (event.created_at - instance.created_at).total_seconds())
            if event.to_status == "running":
                steps["running_at"] = event.created_at.timestamp()
        return steps

    def terminate(self, instance_id: str) -> None:
        from gpurental.rentals.models import Instance
        from gpurental.rentals.services import lifecycle
        from gpurental.testing.agent_process import wait_for

        lifecycle.instance_terminate(instance=Instance.objects.get(pk=instance_id), actor=self.user)
        terminated = Instance.objects.filter(pk=instance_id, status="terminated")
        wait_for(terminated.exists, 60, "terminated", self.agent)
        wait_for(self._pool_full, 60, "the agent's network sandboxes to be ready again", self.agent)

    def _pool_full(self) -> bool:
        """The agent's idle network sandboxes, running, as many as it keeps."""
        import docker

        from gpurental.agent.runtimes.base import LABEL_HOST
        from gpurental.agent.runtimes.sandboxes import LABEL_SANDBOX, POOL_PREFIX

        labels = {"label": [LABEL_SANDBOX, f"{LABEL_HOST}={self.host.name}"], "status": "running"}
        client = docker.from_env()
        try:
            listed = client.containers.list(filters=labels, ignore_removed=True)
        finally:
            client.close()
        return len([c for c in listed if c.name.startswith(POOL_PREFIX)]) >= self.net_pool


class ConsoleWatcher(threading.Thread):
    """The console's instance websocket: seconds from the `running` event's time in the
    database (its ``at``, taken inside the transaction) to its arrival here."""

    def __init__(self, port: int, instance_id: str, session: str):
        super().__init__(daemon=True)
        self.url = f"ws://127.0.0.1:{port}/ws/instances/{instance_id}/"
        self.origin, self.cookie = f"http://127.0.0.1:{port}", f"sessionid={session}"
        self.delay: float | None = None

    def run(self) -> None:
        import websocket  # websocket-client, which JupyterLab's server brings

        ws = websocket.create_connection(
            self.url, cookie=self.cookie, origin=self.origin, timeout=60
        )
        try:
            while True:
                message = json.loads(ws.recv())
                if message.get("type") == "event" and message.get("status") == "running":
                    at = datetime.fromisoformat(message["at"]).timestamp()
                    self.delay = time.time() - at
                    return
        finally:
            ws.close()


def gateway_enter(gateway_url: str, link: str) -> tuple[str, str]:
    """Follow a one-time link as a browser would (to the gateway on loopback, with the
    link's Host): ``(Host header, Cookie header)`` of the session it opens."""
    import requests

    parts = urlsplit(link)
    answer = requests.get(
        f"{gateway_url}{parts.path}?{parts.query}",
        headers={"Host": parts.netloc},
        allow_redirects=False,
        timeout=10,
    )
    check(
        answer.status_code == 302 and "Set-Cookie" in answer.headers,
        f"the link answered {answer.status_code}, not 302 with a cookie: {answer.text[:200]}",
    )
    return parts.netloc, answer.headers["Set-Cookie"].split(";", 1)[0]


def answer_through_gateway(gateway_url: str, link: str) -> None:
    """The customer's first requests: the link, then JupyterLab's /api/status through the
    gateway with the cookie it set, until 200."""
    import requests

    host, cookie = gateway_enter(gateway_url, link)
    headers = {"Host": host, "Cookie": cookie}
    deadline = time.monotonic() + 30
    while (
        answer := requests.get(f"{gateway_url}/api/status", headers=headers, timeout=5)
    ).status_code != 200:
        check(
            time.monotonic() < deadline,
            f"/api/status at {host} answered {answer.status_code} for 30 s through the gateway",
        )
        time.sleep(0.01)


def answer_with_token(url: str) -> None:
    """The customer's first request: JupyterLab's /api/status with the token, until 200."""
    import requests

    probe = url.replace("/lab?", "/api/status?")
    deadline = time.monotonic() + 30
    while requests.get(probe, timeout=5).status_code != 200:
        check(time.monotonic() < deadline, f"{probe} did not answer 200 within 30 s")
        time.sleep(0.01)


DIRECT_STARTS: list[float] = []  # seconds each direct ``docker run`` took to create and start


def direct_run(client, hf_cache: Path | None = None) -> float:
    """``docker run`` of the same image and limits, waited for with the agent's own check.
    With ``hf_cache`` (the SDK's pairs: its snippet asks for ``model_repo="huggingface"``),
    the same environment the platform's container gets for that: the host's cache mounted
    read-only, ``HF_HOME`` and the variable that makes the image's entrypoint seed it."""
    from docker.types import Mount

    from gpurental.agent.runtimes.base import wait_for_jupyter
    from gpurental.agent.runtimes.docker import HF_CACHE_MOUNT, HF_HOME

    token = uuid.uuid4().hex
    started = time.perf_counter()
    container = client.containers.run(
        IMAGE,
        detach=True,
        environment={
            "JUPYTER_TOKEN": token,
            **({"HF_HOME": HF_HOME, "GPURENTAL_HF_SHARED": HF_CACHE_MOUNT} if hf_cache else {}),
        },
        mounts=[Mount(HF_CACHE_MOUNT, str(hf_cache), type="bind", read_only=True)]
        if hf_cache
        else [],
        ports={"8888/tcp": ("127.0.0.1",)},
        nano_cpus=1_000_000_000,
        mem_limit="1024m",
        pids_limit=1024,
        security_opt=["no-new-privileges:true"],
        cap_drop=["ALL"],
        labels={"gpurental.bench": "direct"},
    )
    try:
        container.reload()
        port = int(container.attrs["NetworkSettings"]["Ports"]["8888/tcp"][0]["HostPort"])
        DIRECT_STARTS.append(time.perf_counter() - started)
        wait_for_jupyter("127.0.0.1", port, token, 60)
        answer_with_token(f"http://127.0.0.1:{port}/lab?token={token}")
        return time.perf_counter() - started
    finally:
        container.remove(force=True)


def check(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gateway_env() -> dict[str, str]:
    """The settings that make the platform's links point at the bench's gateway: plain
    http on a free loopback port (``<id>.gw.localhost:<port>``, as in the demo)."""
    return {"GATEWAY_PORT": str(free_port()), "GATEWAY_SCHEME": "http"}


def run_pairs(platform: Platform, pairs: int) -> dict[str, dict]:
    import docker

    client = docker.from_env()
    results = {
        path: {"platform": [], "direct": [], "ratios": [], "steps": [], "heard": [], "entered": []}
        for path in PATHS
    }
    for path in PATHS:  # warm-up: one of each, not counted
        platform.terminate(platform.launch(path)[1])
    direct_run(client)
    platform.console_delays.clear()
    DIRECT_STARTS.clear()
    for round_ in range(pairs):
        for n, path in enumerate(PATHS):
            platform_first = (round_ + n) % 2 == 0  # alternate which side goes first
            # The SDK snippet mounts the model cache: so does its direct run.
            hf_cache = platform.hf_cache if path == "sdk" else None
            if not platform_first:
                direct = direct_run(client, hf_cache)
            elapsed, instance_id, learned_at, entered = platform.launch(path)
            if platform_first:
                direct = direct_run(client, hf_cache)
            result = results[path]
            result["platform"].append(elapsed)
            result["direct"].append(direct)
            result["ratios"].append(elapsed / direct)
            steps = platform.steps(instance_id)
            result["steps"].append(steps)
            result["heard"].append(learned_at - steps["running_at"])
            result["entered"].append(entered)
            platform.terminate(instance_id)
            print(
                f"  pair {round_ + 1:2} {path:8} platform {elapsed:6.3f} s  direct {direct:6.3f} s"
                f"  ratio {elapsed / direct:5.3f}",
                flush=True,
            )
    return results


def report(results: dict[str, dict], pairs: int, console_delays: list[float]) -> bool:
    print()
    print(
        f"{'path':10}{'platform p50':>14}{'direct p50':>12}{'median pair ratio':>19}{'ratios':>16}"
    )
    for path, r in results.items():
        ratios = r["ratios"]
        print(
            f"{path:10}{statistics.median(r['platform']):13.3f}s{statistics.median(r['direct']):11.3f}s"
            f"{statistics.median(ratios):19.3f}{min(ratios):8.2f} – {max(ratios):4.2f}"
        )
    print()
    print("where the platform's time goes (median seconds after the instance row is created):")
    for path, r in results.items():
        names = sorted({n for s in r["steps"] for n in s} - {"running_at"}, key=lambda n: statistics.median(
            [s[n] for s in r["steps"] if n in s]))  # fmt: skip
        line = ", ".join(
            f"{n} {statistics.median([s[n] for s in r['steps'] if n in s]):.3f}" for n in names
        )
        print(f"  {path:8} {line}")
    starts = [
        s["waiting_for_jupyter"] - s["creating"]
        for r in results.values()
        for s in r["steps"]
        if "creating" in s and "waiting_for_jupyter" in s
    ]
    if starts and DIRECT_STARTS:
        print(
            f"  the container's create and start (median): platform {statistics.median(starts):.3f}"
            f" (`creating` → `waiting_for_jupyter`), direct {statistics.median(DIRECT_STARTS):.3f}"
            " (`docker run` and its inspect)"
        )
    print()
    print(
        "`running` in the database → the caller has its link (median, max seconds; "
        "REST: connect's wait_for=running answer; SDK: instance.connect()):"
    )
    for path, r in results.items():
        print(f"  {path:8} {statistics.median(r['heard']):.3f}  {max(r['heard']):.3f}")
    if console_delays:
        print(
            f"  console  {statistics.median(console_delays):.3f}  {max(console_delays):.3f}"
            "  (its websocket, open beside each service launch)"
        )
    print()
    print("the link in hand → JupyterLab's answer through the gateway (median, max seconds):")
    for path, r in results.items():
        print(f"  {path:8} {statistics.median(r['entered']):.3f}  {max(r['entered']):.3f}")
    # Sane, not fast: every pair ran, each launch answered in a time a launch can take.
    everything = [t for r in results.values() for t in r["platform"] + r["direct"]]
    sane = (
        all(len(r["ratios"]) == pairs for r in results.values())
        and all(0 < t < 120 for t in everything)
        and len(console_delays) == pairs
    )
    if not sane:
        print("the figures are not sane: some launch did not finish or took absurdly long")
    return sane


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=10, help="pairs per path (default 10)")
    parser.add_argument(
        "--smoke", action="store_true", help="a small size for CI: checks it runs and is sane"
    )
    parser.add_argument(
        "--net-pool",
        type=int,
        default=2,
        help="the agent's GPURENTAL_NET_POOL (default 2, its default; 0: no network sandboxes)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.pairs = 1
    work = Path(tempfile.mkdtemp(prefix="gpurental-bench-"))
    from gpurental import embedded

    platform = None
    try:
        setup_django(work / "var", **gateway_env())
        print(
            f"launch benchmark: {args.pairs} interleaved pairs per path (+1 warm-up each), "
            f"image {IMAGE}, {os.cpu_count()} CPUs, agent's network sandboxes: {args.net_pool}"
        )
        platform = Platform(work, net_pool=args.net_pool)
        platform.start()
        results = run_pairs(platform, args.pairs)
    finally:
        if platform is not None:
            platform.stop()
        embedded.stop(work / "var")
        shutil.rmtree(work, ignore_errors=True)
    return 0 if report(results, args.pairs, platform.console_delays) else 1


if __name__ == "__main__":
    sys.exit(main())
