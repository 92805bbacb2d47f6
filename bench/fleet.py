"""The control plane at N hosts: heartbeats through the real broker into PostgreSQL.

    .venv/bin/python bench/fleet.py [--hosts 1000] [--duration 60] [--warmup 15]
                                    [--publishers 4] [--concurrency 2] [--silent 0.05]

Needs the RabbitMQ on 127.0.0.1:5672 (guest/guest) with its management API on 15672;
says so and exits 2 when either is missing. Everything else is its own: an embedded
PostgreSQL and Redis in a temp dir, and a RabbitMQ virtual host made for the run (and
deleted after it), so the bench and other users of that RabbitMQ never see each other's
``control`` queue.

- N hosts, each with 8 simulated GPUs and one running instance (as the fleet would
  have them after joining), and their join tokens.
- One real control worker: ``celery -A gpurental.celery_app worker -Q control -c 2``,
  as the Procfile runs it, on ``amqp://`` (that virtual host).
- P publisher processes (this script with ``--publisher``), each with N/P simulated
  agents: per host the agent's own ``HostAgent`` with its ``ControlReporter`` (so the
  messages are built and signed by the agent's code with the host's token), a
  ``SimulatedSource`` and a runtime stand-in that lists the host's instance as running.
  Every ``--interval`` s, at its own phase, each host does what its two agent threads
  do: ``refresh_state()`` (HostStateThread) and ``heartbeat()`` (HeartbeatThread).
  One AMQP connection per publisher process (the agent app's producer pool), on the
  guest account: the signature, not the account, is what the control plane checks
  (per-host accounts are tested in tests/fleet/test_broker_accounts.py).
- This process polls ``fleet_host.last_heartbeat_at`` for every host every
  ``--poll`` s: the column holds the agent's send time, so the lag of a beat is the
  poll that first saw it minus that value (resolution: the poll interval). A thread
  runs ``fleet_reconcile()`` (what the ``reconcile`` task runs) every 10 s, as beat
  does, and times each pass.
- ``--silent`` of the hosts go quiet at the start of the window: reconcile must mark
  exactly those offline (and their instances unreachable), and no other.

It prints the control worker's CPU (its main process and each child, % of one core,
from /proc), the publishers', PostgreSQL's and this process's, the reconcile pass
times, heartbeat lag p50/p99 and how many beats were recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import a100_catalog, percentile, servers_dir, setup_django  # noqa: E402

SECRET = "bench-" + uuid.uuid4().hex * 2
AMQP = "127.0.0.1", 5672
MANAGEMENT = "http://127.0.0.1:15672"
GUEST = ("guest", "guest")
GPU_MODEL = "NVIDIA A100-SXM4-80GB"
RECONCILE_EVERY = 10.0  # RECONCILE_INTERVAL's default (gpurental.celery_app)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((AMQP[0], port)) == 0


# --- publishers: simulated agents, the agent's own code ------------------------------


class BenchRuntime:
    """What an agent's runtime reports, without containers: the host's instances run."""

    name = "bench"

    def __init__(self, instances: list[str]):
        self.instances = instances

    def list_instances(self) -> dict[str, str]:
        return dict.fromkeys(self.instances, "running")

    def workspace_usage(self) -> dict[str, int]:
        return dict.fromkeys(self.instances, 1 << 30)


def publisher_main(spec_path: str) -> int:
    """One publisher process: its share of the hosts, each beating at its own phase."""
    import logging

    from gpurental.agent.config import AgentConfig
    from gpurental.agent.gpus import SimulatedSource
    from gpurental.agent.host import HostAgent
    from gpurental.agent.reporter import ControlReporter
    from gpurental.agent.worker import make_app

    logging.basicConfig(level=logging.WARNING)
    spec = json.loads(Path(spec_path).read_text())
    hosts = spec["hosts"]
    app = make_app(AgentConfig(spec["broker_url"], hosts[0]["name"], hosts[0]["token"]))
    agents = []
    for host in hosts:
        reporter = ControlReporter(app, host_name=host["name"], token=host["token"])
        source = SimulatedSource(host_name=host["name"], model_name=GPU_MODEL)
        agents.append(
            HostAgent(
                runtime=BenchRuntime(host["instances"]),
                source=source,
                reporter=reporter,
                bind_address="127.0.0.1",
            )
        )
    interval, start, stop = spec["interval"], spec["start"], spec["stop"]
    silent, silence_at = set(spec["silent"]), spec["silence_at"]
    window = spec["window"]
    sent = failed = 0
    send_s: list[float] = []
    beat = 0
    # Beat k of host i is due at start + (k + i/len) × interval: phases spread evenly.
    while True:
        for host, agent in zip(hosts, agents, strict=True):
            due = start + (beat + (host["phase"])) * interval
            if due >= stop:
                continue
            if host["name"] in silent and due >= silence_at:
                continue
            delay = due - time.time()
            if delay > 0:
                time.sleep(delay)
            began = time.time()
            try:
                agent.refresh_state()  # HostStateThread
                agent.heartbeat()  # HeartbeatThread
            except Exception as exc:  # noqa: BLE001 - counted; a real agent retries next turn
                failed += 1
                if failed <= 3:
                    print(f"publisher: heartbeat of {host['name']} failed: {exc}", flush=True)
                continue
            if window[0] <= began < window[1]:
                sent += 1
                send_s.append(time.time() - began)
        beat += 1
        if start + beat * interval >= stop:
            break
    app.pool.force_close_all()
    Path(spec["result"]).write_text(
        json.dumps({"sent": sent, "failed": failed, "send_s": send_s, "hosts": len(hosts)})
    )
    return 0


# --- the control plane side --------------------------------------------------------


def management(method: str, path: str, **kwargs):
    import requests

    return requests.request(method, f"{MANAGEMENT}/api/{path}", auth=GUEST, timeout=10, **kwargs)


def rabbitmq_check() -> str | None:
    """None when RabbitMQ and its management API answer; else what is wrong."""
    import requests

    if not listening(AMQP[1]):
        return (
            "RabbitMQ is not reachable on 127.0.0.1:5672: this bench needs the real broker "
            "(start rabbitmq-server; guest/guest on localhost)"
        )
    if not listening(15672) and shutil.which("rabbitmq-plugins"):
        # Off by default; enabling it takes effect at once (as the broker tests do).
        subprocess.run(
            ["rabbitmq-plugins", "enable", "rabbitmq_management"], check=False, capture_output=True
        )
        for _ in range(30):
            if listening(15672):
                break
            time.sleep(1)
    try:
        response = management("GET", "overview")
    except requests.RequestException as exc:
        return (
            f"RabbitMQ's management API on 127.0.0.1:15672 is not reachable ({exc}): "
            "run `rabbitmq-plugins enable rabbitmq_management` (as root)"
        )
    if not response.ok:
        return f"RabbitMQ's management API answered {response.status_code} to guest/guest"
    return None


def vhost_create(name: str) -> None:
    path = quote(name, safe="")
    management("PUT", f"vhosts/{path}", json={}).raise_for_status()
    management(
        "PUT",
        f"permissions/{path}/guest",
        json={"configure": ".*", "write": ".*", "read": ".*"},
    ).raise_for_status()


def control_queue(vhost: str) -> dict:
    response = management("GET", f"queues/{quote(vhost, safe='')}/control")
    return response.json() if response.ok else {}


def make_fleet(hosts: int) -> list[dict]:
    """N hosts with 8 GPUs each (rows as the first heartbeat would leave them) and one
    running instance holding GPU 0; returns name, token and instance ids per host."""
    from django.contrib.auth.hashers import make_password
    from django.utils import timezone
    from psycopg.types.range import Range

    from gpurental.accounts.models import User
    from gpurental.agent.gpus import SimulatedSource
    from gpurental.fleet.models import GPU
    from gpurental.fleet.services import host_create
    from gpurental.rentals.models import Allocation, Instance, InstanceStatus

    model, plan, image = a100_catalog(GPU_MODEL)
    user = User.objects.create(email="renter@bench.invalid", password=make_password(None))
    now = timezone.now()
    fleet = []
    for s in range(hosts):
        host, token = host_create(name=f"bench-{s:04d}")  # the fleet's own service
        gpus = GPU.objects.bulk_create(
            [
                GPU(
                    host=host,
                    index=g.index,
                    uuid=g.uuid,
                    model=model,
                    memory_mb=g.memory_mb,
                    nvlink_peers=list(g.nvlink_peers),
                )
                for g in SimulatedSource(host_name=host.name, model_name=GPU_MODEL).inventory()
            ]
        )
        instance = Instance.objects.create(
            user=user,
            plan=plan,
            gpu_model=model,
            gpu_count=1,
            image=image,
            host=host,
            status=InstanceStatus.RUNNING,
            running_since=now,
        )
        Allocation.objects.create(gpu=gpus[0], instance=instance, period=Range(now, None, "[)"))
        fleet.append({"name": host.name, "token": token, "instances": [str(instance.pk)]})
    return fleet


def start_worker(urls: dict, broker_url: str, concurrency: int, log_path: Path):
    env = {
        **os.environ,
        **urls,
        "SECRET_KEY": SECRET,
        "DJANGO_SETTINGS_MODULE": "gpurental.settings",
        "CELERY_BROKER_URL": broker_url,
        "RABBITMQ_MANAGEMENT_URL": "",
        "LOG_LEVEL": "WARNING",
    }
    log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "gpurental.celery_app",
            "worker",
            "-Q",
            "control",
            "-c",
            str(concurrency),
            "-n",
            f"control-bench-{uuid.uuid4().hex[:6]}@%h",
            "-l",
            "warning",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )


def process_tree(pid: int) -> list:
    import psutil

    parent = psutil.Process(pid)
    return [parent, *parent.children(recursive=True)]


def cpu_of(processes: list) -> dict[int, float]:
    out = {}
    for p in processes:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except Exception:  # noqa: BLE001 - a process that ended counts as nothing more
            out[p.pid] = out.get(p.pid, 0.0)
    return out


class Poller:
    """Reads every host's last heartbeat every ``interval`` s; a changed value is a beat
    recorded, and (poll time − its value) is its lag."""

    def __init__(self, interval: float, window: tuple[float, float]):
        self.interval = interval
        self.window = window
        self.last: dict[str, float] = {}
        self.lags: list[float] = []
        self.recorded = 0
        self.polls: list[float] = []

    def run(self, until: float) -> None:
        from django.db import connection

        while time.time() < until:
            began = time.time()
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT name, extract(epoch from last_heartbeat_at) FROM fleet_host "
                    "WHERE last_heartbeat_at IS NOT NULL"
                )
                rows = cursor.fetchall()
            seen = time.time()
            self.polls.append(seen - began)
            for name, value in rows:
                value = float(value)
                if self.last.get(name) != value:
                    self.last[name] = value
                    # Every beat recorded during the window, whenever it was sent: a worker
                    # that falls behind shows as a growing lag, not as missing samples.
                    if self.window[0] <= seen < self.window[1]:
                        self.recorded += 1
                        self.lags.append(seen - value)
            time.sleep(max(0.0, began + self.interval - time.time()))
        connection.close()


def reconcile_loop(until: float, passes: list[dict], stop: threading.Event) -> None:
    from django.db import connection

    from gpurental.fleet.models import Host, HostStatus
    from gpurental.rentals.services.reconcile import fleet_reconcile

    while not stop.is_set() and time.time() < until:
        began = time.perf_counter()
        before = Host.objects.filter(status=HostStatus.OFFLINE).count()
        t0 = time.perf_counter()
        fleet_reconcile()
        took = time.perf_counter() - t0
        after = Host.objects.filter(status=HostStatus.OFFLINE).count()
        passes.append({"at": time.time(), "s": took, "marked": after - before})
        stop.wait(max(0.0, RECONCILE_EVERY - (time.perf_counter() - began)))
    connection.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--interval", type=float, default=5.0, help="heartbeat interval (s)")
    parser.add_argument("--publishers", type=int, default=4, help="publisher processes")
    parser.add_argument("--concurrency", type=int, default=2, help="control worker -c")
    parser.add_argument("--silent", type=float, default=0.05, help="share of hosts that go quiet")
    parser.add_argument("--offline-after", type=int, default=30, help="HOST_OFFLINE_AFTER (s)")
    parser.add_argument("--poll", type=float, default=0.05, help="DB poll interval (s)")
    parser.add_argument("--smoke", action="store_true", help="a small size for CI")
    parser.add_argument("--publisher", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publisher:
        return publisher_main(args.publisher)
    if args.smoke:
        args.hosts, args.duration, args.warmup, args.publishers = 40, 16.0, 6.0, 1
        args.offline_after = 8
    if not (1 <= args.hosts <= 5000 and 1 <= args.publishers <= 32 and 1 <= args.duration <= 900):
        parser.error("keep it bounded: 1-5000 hosts, 1-32 publishers, 1-900 s")
    problem = rabbitmq_check()
    if problem:
        print(f"fleet bench: {problem}", file=sys.stderr)
        return 2

    import psutil

    work = Path(tempfile.mkdtemp(prefix="gpurental-fleet-"))
    vhost = f"gpurental-bench-{uuid.uuid4().hex[:8]}"
    broker_url = f"amqp://guest:guest@{AMQP[0]}:{AMQP[1]}/{quote(vhost, safe='')}"
    from gpurental import embedded

    worker = None
    publishers: list[subprocess.Popen] = []
    try:
        vhost_create(vhost)
        urls = setup_django(
            work / "var",
            SECRET_KEY=SECRET,
            CELERY_BROKER_URL=broker_url,
            RABBITMQ_MANAGEMENT_URL="",  # no per-host accounts: publishers sign, guest sends
            HOST_OFFLINE_AFTER=str(args.offline_after),
            LOG_LEVEL="WARNING",
        )
        made = time.monotonic()
        fleet = make_fleet(args.hosts)
        print(
            f"fleet: {args.hosts} hosts × 8 GPUs, one instance each, made in "
            f"{time.monotonic() - made:.1f} s; heartbeats every {args.interval:g} s through "
            f"RabbitMQ (vhost {vhost}); {args.publishers} publisher processes, one AMQP "
            f"connection each; one control worker -c {args.concurrency}; {os.cpu_count()} CPUs "
            "shared with other work",
            flush=True,
        )
        worker = start_worker(urls, broker_url, args.concurrency, work / "worker.log")
        deadline = time.monotonic() + 90
        while control_queue(vhost).get("consumers", 0) < 1:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the control worker did not start consuming")
            time.sleep(0.5)
        start = time.time() + 2.0
        window = (start + args.warmup, start + args.warmup + args.duration)
        stop = window[1]
        silent = [h["name"] for h in fleet[: round(args.silent * args.hosts)]]
        silence_at = window[0]
        for i, host in enumerate(fleet):
            host["phase"] = i / len(fleet)
        for p in range(args.publishers):
            spec = {
                "broker_url": broker_url,
                "hosts": fleet[p :: args.publishers],
                "interval": args.interval,
                "start": start,
                "stop": stop,
                "window": window,
                "silent": silent,
                "silence_at": silence_at,
                "result": str(work / f"publisher-{p}.json"),
            }
            (work / f"publisher-{p}.spec").write_text(json.dumps(spec))
            env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
            publishers.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--publisher", str(work / f"publisher-{p}.spec")],
                    env=env,
                    cwd=ROOT,
                )
            )
        poller = Poller(args.poll, window)
        passes: list[dict] = []
        stopping = threading.Event()
        reconciler = threading.Thread(
            target=reconcile_loop, args=(stop + 3.0, passes, stopping), daemon=True
        )
        watched = {
            "worker": process_tree(worker.pid),
            "publishers": [psutil.Process(p.pid) for p in publishers],
            "postgres": process_tree(
                int((servers_dir(work / "var") / "postgres/postmaster.pid").read_text().split()[0])
            ),
            "bench": [psutil.Process()],
        }

        def measure(result: dict) -> None:
            time.sleep(max(0.0, window[0] - time.time()))
            before = {k: cpu_of(v) for k, v in watched.items()}
            depth_before = control_queue(vhost).get("messages", 0)
            time.sleep(max(0.0, window[1] - time.time()))
            after = {k: cpu_of(v) for k, v in watched.items()}
            result["cpu"] = {
                k: {
                    pid: (after[k][pid] - before[k].get(pid, 0.0)) / args.duration
                    for pid in after[k]
                }
                for k in watched
            }
            result["depth"] = (depth_before, control_queue(vhost).get("messages", 0))

        measured: dict = {}
        meter = threading.Thread(target=measure, args=(measured,), daemon=True)
        meter.start()
        reconciler.start()
        poller.run(stop + 3.0)  # beats sent at the end still arrive
        stopping.set()
        reconciler.join(60)
        meter.join(10)
        for p in publishers:
            p.wait(60)
        # The worker stops before the last pass, so that a backlog it still works through
        # cannot bring hosts back online while they are being counted.
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
        # One more pass: every silent host has been quiet past HOST_OFFLINE_AFTER by now.
        from gpurental.fleet.models import Host, HostStatus
        from gpurental.rentals.models import Instance, InstanceStatus
        from gpurental.rentals.services.reconcile import fleet_reconcile

        # Judged as at the window's end: the publishers have stopped since, so a later
        # "now" would find every host quiet.
        t0 = time.perf_counter()
        fleet_reconcile(now=datetime.fromtimestamp(window[1], tz=UTC))
        final_pass = time.perf_counter() - t0
        offline = set(Host.objects.filter(status=HostStatus.OFFLINE).values_list("name", flat=True))
        unreachable = Instance.objects.filter(status=InstanceStatus.UNREACHABLE)
        unreachable_silent = unreachable.filter(host__name__in=silent).count()
        unreachable = unreachable.count()
        results = [
            json.loads((work / f"publisher-{p}.json").read_text())
            for p in range(args.publishers)
            if (work / f"publisher-{p}.json").exists()
        ]
    finally:
        for p in publishers:
            if p.poll() is None:
                p.kill()
        if worker is not None and worker.poll() is None:
            worker.terminate()
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                worker.kill()
        embedded.stop(work / "var")
        try:
            management("DELETE", f"vhosts/{quote(vhost, safe='')}")
        except Exception:  # noqa: BLE001 - best effort; the name is unique to this run
            print(f"could not delete RabbitMQ vhost {vhost}", file=sys.stderr)
        log = (
            (work / "worker.log").read_text(errors="replace")
            if (work / "worker.log").exists()
            else ""
        )
        shutil.rmtree(work, ignore_errors=True)
        tracebacks = log.count("Traceback")
        if tracebacks:
            first = log[log.index("Traceback") :].splitlines()[:40]
            print(f"control worker log: {tracebacks} tracebacks; the first:")
            print("\n".join("    " + line for line in first))

    sent = sum(r["sent"] for r in results)
    failed = sum(r["failed"] for r in results)
    send_s = [s for r in results for s in r["send_s"]]
    cpu = measured.get("cpu", {})
    lags = poller.lags
    in_window = [p for p in passes if window[0] <= p["at"] < window[1] + 3]
    quiet = [p["s"] for p in in_window if p["marked"] == 0]
    marking = [p for p in in_window if p["marked"] > 0]
    wrongly_offline = offline - set(silent)

    def pct(values: dict) -> str:
        return " + ".join(f"{100 * v:.0f}" for v in values.values())

    print(f"heartbeats sent in window: {sent} ({sent / args.duration:.0f}/s), failed {failed}")
    print(
        f"publish (refresh_state + heartbeat, signed, sent): p50 "
        f"{percentile(send_s, 0.5) * 1000:.2f} ms, p99 {percentile(send_s, 0.99) * 1000:.2f} ms"
    )
    print(
        f"recorded in PostgreSQL: {poller.recorded} ({poller.recorded / args.duration:.0f}/s); "
        f"control queue depth {measured.get('depth', ('?', '?'))[0]} → "
        f"{measured.get('depth', ('?', '?'))[1]} over the window"
        + (
            f" (growing {(measured['depth'][1] - measured['depth'][0]) / args.duration:.0f}/s: "
            "the control worker is behind)"
            if "depth" in measured and measured["depth"][1] - measured["depth"][0] > 10
            else ""
        )
    )
    print(
        f"heartbeat lag (agent send → row updated, polled every {args.poll * 1000:.0f} ms, "
        f"poll p50 {percentile(poller.polls, 0.5) * 1000:.1f} ms): p50 "
        f"{percentile(lags, 0.5) * 1000:.0f} ms, p99 {percentile(lags, 0.99) * 1000:.0f} ms, "
        f"max {max(lags, default=float('nan')) * 1000:.0f} ms"
    )
    print(
        f"reconcile pass at {args.hosts} hosts: {len(quiet)} with nothing to do p50 "
        f"{percentile(quiet, 0.5) * 1000:.0f} ms max {max(quiet, default=float('nan')) * 1000:.0f} ms; "
        + (
            ", ".join(
                f"{p['marked']} hosts marked offline in {p['s'] * 1000:.0f} ms" for p in marking
            )
            or "none marked hosts offline"
        )
        + f"; final pass {final_pass * 1000:.0f} ms"
    )
    print(
        f"silent hosts: {len(silent)}, offline at the end: {len(offline & set(silent))}, "
        f"instances unreachable: {unreachable} ({unreachable_silent} on silent hosts); "
        f"live hosts wrongly offline: {len(wrongly_offline)}"
    )
    if cpu:
        worker_cpu = cpu["worker"]
        print(
            f"CPU (% of one core): control worker {100 * sum(worker_cpu.values()):.0f} "
            f"(main + children: {pct(worker_cpu)}), publishers "
            f"{100 * sum(cpu['publishers'].values()):.0f} ({pct(cpu['publishers'])}), "
            f"PostgreSQL {100 * sum(cpu['postgres'].values()):.0f}, "
            f"bench (poll + reconcile) {100 * sum(cpu['bench'].values()):.0f}"
        )
    # Sane, not fast: beats went through the broker into the database, and the hosts that
    # went quiet were found (a time is never checked here).
    sane = (
        sent > 0
        and poller.recorded > 0
        and failed == 0
        and offline >= set(silent)
        and unreachable_silent >= len(silent)
    )
    if not sane:
        print("the figures are not sane: beats not recorded, failed, or silent hosts not found")
    return 0 if sane else 1


if __name__ == "__main__":
    sys.exit(main())
