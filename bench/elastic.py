"""Elastic groups under a step load: how soon an added replica serves, and what is lost.

    .venv/bin/python bench/elastic.py [--runs cold,warm,prewarmed,failover,gpu-step]
        [--step-rps 8] [--step-s 30] [--tick 5] [--clients 6] [--smoke]

Needs a Docker Engine (scripts/docker-engine.sh) and the serving image (make images).
Starts the platform as bench/launch.py does, without the web process: embedded
PostgreSQL and Redis, the real gateway process (``python -m gpurental.gateway``), a real
control worker (``-Q control -c 2``, as in the Procfile: it runs the gateway's wake-ups)
and a real host agent with the docker runtime and ``--gpus`` simulated GPUs. The
autoscaler's periodic job (celery beat's ``groups_tick``, every GROUP_TICK_S) runs in a
thread of the bench, every ``--tick`` seconds (default 5, the production default).

Each run makes a fresh group of ``gpurental/serving-echo`` replicas (1 GPU each; min 1,
max ``--max-nodes``; rule ``queue`` threshold 2 requests per replica; max_concurrency 2),
waits until it is ready, sends ``GET /infer?ms=500`` through the group's endpoint
(``grp-<id>.gw.localhost``, the owner's API key) open-loop: ``--steady-s`` seconds at 1
rps, then a step to ``--step-rps`` for ``--step-s`` seconds; then deletes the group and
waits for its replicas to terminate. Three runs:

- ``cold``: no warm pool; every added replica is a new container from the image;
- ``warm``: a warm pool of 1, parked (stopped, role warm) before the step: the first
  added replica is a promotion;
- ``prewarmed``: LoadSample history on the past 7 days says the slot starting
  ``prewarm_lead_minutes`` (15) from now needed ``--prewarm`` replicas, so the group is at
  that size before the step: nothing has to be added.

Two more runs (issue 35), with ``--clients`` (6) closed-loop clients sending
``GET /infer?ms=400`` (each sends its next request when the last one answered):

- ``failover``: two serving replicas and a warm one; after a few seconds one serving
  replica's container is killed (``docker kill``). Reported: requests lost (goal 0), the
  time from the kill to two serving replicas running again and to the replacement's first
  answer, and p50/p99 from the kill until 2 s after capacity was back;
- ``gpu-step``: the article's rule (``gpu_utilization`` threshold 70, a warm pool of 2),
  light requests, then (once the group is past its scale-out cooldown) the same requests
  with ``busy=1``, which burn CPU that the simulated GPUs read as utilisation. Reported:
  step → the scale-out decision, → a second serving replica running (goal < 10 s), → its
  first answer.

Reported per step run: requests sent, answered 200, lost (anything else: 503, 502, an error;
must be 0); latency p50/p99 of the requests sent during the step; step → the scale-out
decision (the ``scaled`` GroupEvent, stamped with its tick's time); for each added
replica, decision → ``running`` (the agent's readiness report) and decision → its first
answer at the bench (the replica is found by the ``replica`` field of the answers, the
container's hostname ``gpurental-<first 8 of the instance id>``; the answer includes the
request's own 0.5 s); and the replica timeline. The goal (issue 15): with a warm pool an
added replica serves within 5 s of the decision, cold within 15 s. Printed as met or
missed, never asserted. ``--smoke``: the warm and failover runs, small, quick; it fails
(non-zero exit) when a request is lost or no replica was added, never on a time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import a10g_model, percentile, setup_django  # noqa: E402
from bench.launch import check, gateway_env  # noqa: E402

SERVING_IMAGE = "gpurental/serving-echo:latest"
GOALS_S = {"cold": 15.0, "warm": 5.0}  # decision → an added replica serves
MODES = ("cold", "warm", "prewarmed", "failover", "gpu-step")
STEP_MODES = ("cold", "warm", "prewarmed")


@dataclass
class Size:
    steady_rps: float = 1.0
    steady_s: float = 10.0
    step_rps: float = 8.0
    step_s: float = 30.0
    ms: int = 500
    max_nodes: int = 4
    gpus: int = 6
    tick_s: float = 5.0
    prewarm: int = 3


class Stack:
    """The gateway, a control worker and an agent on the bench's servers, and a customer."""

    def __init__(self, work: Path, gpus: int):
        from django.conf import settings

        from gpurental.accounts.models import User
        from gpurental.accounts.services import api_key_create
        from gpurental.billing.services import credit_add
        from gpurental.catalog.models import ImageTemplate
        from gpurental.fleet.services import host_create
        from gpurental.testing.agent_process import AgentProcess

        self.work, self.gpus = work, gpus
        self.procs: list[subprocess.Popen] = []
        a10g_model()
        ImageTemplate.objects.create(  # as seed_demo offers it
            slug="serving-echo",
            name="Serving echo (elastic groups)",
            image=SERVING_IMAGE,
            port=8000,
            http_ports=[8000],
        )
        self.user = User.objects.create_user(email="bench@example.com", password=uuid.uuid4().hex)
        credit_add(user=self.user, amount=Decimal("1000.00"), description="bench credit")
        _, self.api_key = api_key_create(user=self.user, name="bench")
        # Its own name: the containers are found (and removed at the end) by this label.
        self.host, token = host_create(name=f"elastic-{uuid.uuid4().hex[:8]}")
        hf_cache = work / "hf-cache"
        (hf_cache / "hub").mkdir(parents=True)
        self.host.hf_cache_dir = str(hf_cache)
        self.host.save(update_fields=["hf_cache_dir"])
        self.agent = AgentProcess(
            broker_url=settings.CELERY_BROKER_URL,
            host_name=self.host.name,
            token=token,
            log_path=work / "agent.log",
            GPURENTAL_HF_CACHE_DIR=str(hf_cache),
            GPURENTAL_SIMULATED_GPUS=str(gpus),
        )
        self.gateway_port = settings.GATEWAY_PORT
        self.gateway_url = f"http://127.0.0.1:{self.gateway_port}"

    def _spawn(self, name: str, *argv: str) -> subprocess.Popen:
        log = open(self.work / f"{name}.log", "wb")  # noqa: SIM115 - lives with the process
        proc = subprocess.Popen(argv, env={**os.environ}, stdout=log, stderr=subprocess.STDOUT,
                                cwd=ROOT)  # fmt: skip
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        import requests

        from gpurental.fleet.models import Host
        from gpurental.testing.agent_process import wait_for

        py = sys.executable
        gateway = self._spawn(
            "gateway", py, "-m", "gpurental.gateway", "--port", str(self.gateway_port)
        )
        self._spawn("worker", py, "-m", "celery", "-A", "gpurental.celery_app", "worker",
                    "-Q", "control", "-c", "2", "-n", "control@bench", "-l", "WARNING")  # fmt: skip
        self.agent.start()

        def gateway_up() -> bool:
            check(gateway.poll() is None, "the gateway exited: see gateway.log")
            try:
                return requests.get(f"{self.gateway_url}/healthz", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_for(gateway_up, 60, "the gateway to serve /healthz")
        gpus = Host.objects.filter(pk=self.host.pk, gpus__isnull=False)
        wait_for(lambda: gpus.count() == self.gpus, 60, "the agent's first heartbeat", self.agent)

    def stop(self) -> None:
        self.agent.stop()
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.remove_leftovers()

    def remove_leftovers(self) -> None:
        """Whatever a failed run left on the engine: this host's containers and volumes."""
        import docker

        from gpurental.agent.runtimes.base import LABEL_HOST

        client = docker.from_env()
        mine = {"label": f"{LABEL_HOST}={self.host.name}"}
        for container in client.containers.list(all=True, filters=mine, ignore_removed=True):
            container.remove(force=True)
        for volume in client.volumes.list(filters=mine):
            volume.remove(force=True)


class Ticker(threading.Thread):
    """Celery beat's ``groups_tick`` for the bench's groups, every ``interval`` seconds."""

    def __init__(self, interval: float):
        super().__init__(daemon=True)
        self.interval = interval
        self.watched: set = set()  # group ids: a group is ticked from when the bench says
        self.halt = threading.Event()
        self.errors: list[BaseException] = []

    def run(self) -> None:
        from django.db import connection

        from gpurental.groups.models import Group
        from gpurental.groups.services import group_tick

        try:
            while not self.halt.wait(self.interval):
                for group_id in list(self.watched):
                    try:
                        group_tick(group_id=group_id)
                        if Group.objects.filter(pk=group_id, status="deleted").exists():
                            self.watched.discard(group_id)
                    except Exception as exc:  # noqa: BLE001 - reported at the end
                        self.errors.append(exc)
        finally:
            connection.close()

    def stop(self) -> None:
        self.halt.set()
        self.join(30)


# --- the load ------------------------------------------------------------------------


@dataclass
class Answer:
    phase: str  # steady | step
    sent: float  # epoch seconds
    ended: float = 0.0
    status: int = 0  # 0: no HTTP answer
    replica: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200


class Load:
    """Open-loop requests at a given rate through the group's endpoint, each in a thread."""

    def __init__(self, stack: Stack, group_id, ms: int):
        self.url = f"{stack.gateway_url}/infer"
        self.headers = {
            "Host": f"grp-{group_id}.gw.localhost:{stack.gateway_port}",
            "Authorization": f"Bearer {stack.api_key}",
        }
        self.ms = ms
        self.local = threading.local()

    def one(self, answer: Answer, ms: int | None = None, busy: bool = False) -> Answer:
        import requests

        session = getattr(self.local, "session", None)
        if session is None:
            session = self.local.session = requests.Session()
        params = {"ms": self.ms if ms is None else ms, **({"busy": 1} if busy else {})}
        try:
            reply = session.get(self.url, params=params, headers=self.headers, timeout=120)
            answer.status = reply.status_code
            if reply.status_code == 200:
                answer.replica = reply.json().get("replica", "")
            else:
                answer.error = reply.text[:200]
        except Exception as exc:  # noqa: BLE001 - a lost request, counted
            answer.error = f"{type(exc).__name__}: {exc}"[:200]
        answer.ended = time.time()
        return answer

    def run(self, phases: list[tuple[str, float, float]]) -> tuple[list[Answer], dict[str, float]]:
        """``phases``: (name, rps, seconds). Returns every answer and when each phase began."""
        answers: list[Answer] = []
        began: dict[str, float] = {}
        with ThreadPoolExecutor(max_workers=400) as pool:
            start = time.perf_counter()
            offset = 0.0
            for name, rps, seconds in phases:
                began[name] = time.time() + max(0.0, start + offset - time.perf_counter())
                for n in range(int(rps * seconds)):
                    delay = start + offset + n / rps - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    answer = Answer(name, time.time())
                    answers.append(answer)
                    pool.submit(self.one, answer)
                offset += seconds
        return answers, began

    def closed_loop(self, clients: int, phase: Callable[[], str], halt: threading.Event,
                    busy: Callable[[], bool] = lambda: False) -> list[Answer]:  # fmt: skip
        """``clients`` threads, each sending its next request when the last one answered,
        until ``halt``; each answer is labelled with ``phase()`` when it was sent."""
        answers: list[Answer] = []

        def client() -> None:
            while not halt.is_set():
                answer = Answer(phase(), time.time())
                answers.append(answer)
                self.one(answer, busy=busy())

        threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
        for thread in threads:
            thread.start()
        self._threads = threads
        return answers

    def join(self) -> None:
        for thread in getattr(self, "_threads", []):
            thread.join(150)


# --- one run -------------------------------------------------------------------------


@dataclass
class Replica:
    id: str
    how: str  # the replica events that made it
    created: float
    running: list[float] = field(default_factory=list)  # each `running` transition
    answers: list[float] = field(default_factory=list)  # when each of its answers came


@dataclass
class Run:
    mode: str
    answers: list[Answer]
    step_at: float
    decisions: list[tuple[float, str]]  # (when, reason) of the scale-outs
    replicas: dict[str, Replica]
    before: set[str]  # replicas serving when the load began
    timeline: list[tuple[float, str]]
    prewarm_ready_at: float | None = None

    def step(self) -> list[Answer]:
        return [a for a in self.answers if a.phase == "step"]

    @property
    def lost(self) -> list[Answer]:
        return [a for a in self.answers if not a.ok]

    @property
    def decision_at(self) -> float | None:
        after = [at for at, _ in self.decisions if at >= self.step_at]
        return after[0] if after else None

    def added(self) -> list[Replica]:
        """Replicas that answered the load and were not serving when it began, first
        answer first."""
        added = [r for r in self.replicas.values() if r.id not in self.before and r.answers]
        return sorted(added, key=lambda r: min(r.answers))


def spec(mode: str, size: Size, name: str) -> dict:
    return {
        "name": name,
        "instance_type": "A10G",
        "image": "serving-echo",
        "min_nodes": 1,
        "max_nodes": size.max_nodes,
        "max_concurrency": 2,
        "scaling_metrics": [{"metric": "queue", "threshold": 2}],
        "warm_pool": {"size": 1 if mode == "warm" else 0},
        "prewarm_lead_minutes": 15,
    }


def seed_history(group, needed: int) -> None:
    """The same slot on each of the past 7 days needed ``needed`` replicas: the slot that
    starts prewarm_lead_minutes from now (each sample 10 min into it, so that it stays in
    the slot for the next 10 minutes of the run)."""
    from django.utils import timezone

    from gpurental.groups.models import LoadSample

    now = timezone.now()
    slot = now + timedelta(minutes=group.prewarm_lead_minutes + 10)
    LoadSample.objects.bulk_create(
        LoadSample(
            group=group,
            at=slot - timedelta(days=days),
            ready=needed,
            provisioning=0,
            warm=0,
            rps=4,
            inflight=needed * 2,
            queued=0,
            needed=needed,
        )  # fmt: skip
        for days in range(1, 8)
    )


def run_one(stack: Stack, ticker: Ticker, mode: str, size: Size) -> Run:
    from gpurental.groups.models import Group, GroupEvent
    from gpurental.groups.services import group_apply, group_delete
    from gpurental.rentals.models import Instance
    from gpurental.testing.agent_process import wait_for

    group = group_apply(user=stack.user, source=spec(mode, size, f"bench-{mode}")).group
    if mode == "prewarmed":
        seed_history(group, size.prewarm)
    ticker.watched.add(group.pk)
    replicas = Instance.objects.filter(group=group)
    serving = size.prewarm if mode == "prewarmed" else 1

    def ready() -> bool:
        up = replicas.filter(group_role="serving", status="running").count() >= serving
        parked = replicas.filter(group_role="warm", status="stopped").count()
        return up and (mode != "warm" or parked == 1)

    wait_for(ready, 180, f"the {mode} group to be ready", stack.agent)
    load = Load(stack, group.pk, size.ms)
    # The endpoint answers once the gateway's first health probe passes.
    wait_for(lambda: load.one(Answer("probe", time.time()), ms=1).ok, 60, "the endpoint")
    before = {str(pk) for pk in replicas.filter(group_role="serving").values_list("pk", flat=True)}
    answers, began = load.run(
        [("steady", size.steady_rps, size.steady_s), ("step", size.step_rps, size.step_s)]
    )
    step_at = began["step"]

    # What happened, from the group's and its replicas' events.
    group.refresh_from_db()
    events = list(GroupEvent.objects.filter(group=group, kind__in=["scaled", "replica"]))
    decisions = [
        (e.created_at.timestamp(), e.reason)
        for e in events
        if e.kind == "scaled" and (e.to_replicas or 0) > (e.from_replicas or 0)
    ]
    found: dict[str, Replica] = {}
    for instance in replicas.order_by("created_at"):
        rid = str(instance.pk)
        hows = [e.reason.split(" ", 1)[1] for e in events
                if e.kind == "replica" and e.reason.startswith(rid[:8])]  # fmt: skip
        found[rid] = Replica(
            rid,
            ", ".join(dict.fromkeys(hows)),
            instance.created_at.timestamp(),
            [
                ev.created_at.timestamp()
                for ev in instance.events.filter(to_status="running").order_by("created_at")
            ],
        )
    by_host = {f"gpurental-{rid[:8]}": r for rid, r in found.items()}
    for answer in answers:
        if answer.ok and answer.replica in by_host:
            by_host[answer.replica].answers.append(answer.ended)
    timeline = [(e.created_at.timestamp(), f"{e.kind}: {e.reason}") for e in events]
    for r in found.values():
        timeline += [(at, f"{r.id[:8]} running") for at in r.running]
        if r.answers:
            timeline.append((min(r.answers), f"{r.id[:8]} first answer at the bench"))
    timeline.sort()
    prewarm_ready_at = None
    if mode == "prewarmed":
        ups = [max(at for at in found[rid].running if at < step_at) for rid in before]
        prewarm_ready_at = max(ups) if ups else None

    group_delete(group=group)
    gone = Group.objects.filter(pk=group.pk, status="deleted")
    wait_for(gone.exists, 120, f"the {mode} group's replicas to terminate", stack.agent)
    return Run(mode, answers, step_at, decisions, found, before, timeline, prewarm_ready_at)


# --- failover and the GPU step (issue 35) -----------------------------------------------


@dataclass
class Failover:
    answers: list[Answer]
    killed_at: float
    killed: str  # the replica killed
    restored_at: float | None  # two serving replicas running again
    restored_answer_at: float | None  # the replacement's first answer at the bench
    replacement_how: str
    clients: int

    @property
    def lost(self) -> list[Answer]:
        return [a for a in self.answers if not a.ok]

    def window(self) -> list[Answer]:
        """Requests sent from the kill until 2 s after capacity was back."""
        end = (self.restored_at or self.killed_at) + 2.0
        return [a for a in self.answers if self.killed_at <= a.sent <= end]


def _serving_running(group) -> list:
    from gpurental.rentals.models import Instance

    return list(
        Instance.objects.filter(group=group, group_role="serving", status="running")
        .order_by("created_at")
        .values_list("pk", flat=True)
    )


def _group_ready(stack: Stack, group, serving: int, warm: int, what: str) -> Load:
    from gpurental.rentals.models import Instance
    from gpurental.testing.agent_process import wait_for

    replicas = Instance.objects.filter(group=group)

    def ready() -> bool:
        parked = replicas.filter(group_role="warm", status="stopped").count()
        return len(_serving_running(group)) >= serving and parked >= warm

    wait_for(ready, 240, what, stack.agent)
    load = Load(stack, group.pk, 400)
    wait_for(lambda: load.one(Answer("probe", time.time()), ms=1).ok, 60, "the endpoint")
    return load


def _end_group(stack: Stack, group) -> None:
    from gpurental.groups.models import Group
    from gpurental.groups.services import group_delete
    from gpurental.testing.agent_process import wait_for

    group_delete(group=group)
    gone = Group.objects.filter(pk=group.pk, status="deleted")
    wait_for(gone.exists, 120, "the group's replicas to terminate", stack.agent)


def run_failover(stack: Stack, ticker: Ticker, clients: int, settle_s: float) -> Failover:
    """Two serving replicas and a warm one under closed-loop load; one serving replica's
    container is killed (docker kill): what was lost, how soon two serve again."""
    import docker

    from gpurental.agent.runtimes.docker import container_name
    from gpurental.groups.models import GroupEvent
    from gpurental.groups.services import group_apply
    from gpurental.testing.agent_process import wait_for

    body = {
        "name": "bench-failover", "instance_type": "A10G", "image": "serving-echo",
        "min_nodes": 2, "max_nodes": 3, "max_concurrency": 4,
        "scaling_metrics": [{"metric": "queue", "threshold": 4}], "warm_pool": {"size": 1},
    }  # fmt: skip
    group = group_apply(user=stack.user, source=body).group
    ticker.watched.add(group.pk)
    load = _group_ready(stack, group, 2, 1, "two serving replicas and a parked one")
    phase = {"now": "before"}
    halt = threading.Event()
    answers = load.closed_loop(clients, lambda: phase["now"], halt)
    time.sleep(settle_s)
    victim = str(_serving_running(group)[0])
    phase["now"] = "kill"
    killed_at = time.time()
    docker.from_env().containers.get(container_name(victim)).kill()
    restored_at = None
    try:

        def restored() -> bool:
            running = [str(pk) for pk in _serving_running(group)]
            return victim not in running and len(running) >= 2

        wait_for(restored, 120, "two serving replicas again", stack.agent)
        restored_at = time.time()
        phase["now"] = "after"
        time.sleep(settle_s)
    finally:
        halt.set()
        load.join()
    replacement = [str(pk) for pk in _serving_running(group) if str(pk) != victim]
    events = GroupEvent.objects.filter(group=group, kind="replica", created_at__gte=_at(killed_at))
    how = "; ".join(
        e.reason for e in events if any(e.reason.startswith(r[:8]) for r in replacement)
    )
    firsts = [a.ended for a in answers
              if a.ok and a.sent >= killed_at and any(a.replica == f"gpurental-{r[:8]}" for r in replacement)
              and not any(b.replica == a.replica and b.sent < killed_at for b in answers)]  # fmt: skip
    _end_group(stack, group)
    return Failover(
        answers, killed_at, victim, restored_at, min(firsts, default=None), how, clients
    )


@dataclass
class GpuStep:
    answers: list[Answer]
    step_at: float
    decision_at: float | None
    decision: str
    second_running_at: float | None  # a second serving replica running
    second_answer_at: float | None  # its first answer at the bench
    clients: int


def _at(epoch: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, tz=UTC)


def run_gpu_step(stack: Stack, ticker: Ticker, clients: int, settle_s: float) -> GpuStep:
    """The article's group (gpu_utilization 70, a warm pool of 2) under light load, then a
    step of CPU-burning requests, which the simulated GPUs read as utilisation: how soon a
    second replica serves."""
    from gpurental.groups.models import GroupEvent
    from gpurental.groups.services import group_apply
    from gpurental.rentals.models import InstanceEvent
    from gpurental.testing.agent_process import wait_for

    body = {
        "name": "bench-gpu-step", "instance_type": "A10G", "image": "serving-echo",
        "min_nodes": 1, "max_nodes": 3, "max_concurrency": 8,
        "scaling_metrics": [{"metric": "gpu_utilization", "threshold": 70}],
        "warm_pool": {"size": 2},
    }  # fmt: skip
    group = group_apply(user=stack.user, source=body).group
    ticker.watched.add(group.pk)
    load = _group_ready(stack, group, 1, 2, "one serving replica and two parked")
    first = str(_serving_running(group)[0])
    phase = {"now": "steady"}
    halt = threading.Event()
    answers = load.closed_loop(clients, lambda: phase["now"], halt,
                               busy=lambda: phase["now"] == "step")  # fmt: skip
    # A group that has served a while: its first replica's launch (a scale-out from 0)
    # is past the scale-out cooldown (30 s by default) when the step comes.
    group.refresh_from_db()
    since = time.time() - group.last_scale_up_at.timestamp() if group.last_scale_up_at else 1e9
    time.sleep(max(settle_s, group.scale_up_cooldown_s - since + 1))
    phase["now"] = "step"
    step_at = time.time()
    try:
        wait_for(lambda: len(_serving_running(group)) >= 2, 120, "a second serving replica",
                 stack.agent)  # fmt: skip
        time.sleep(settle_s)
    finally:
        halt.set()
        load.join()
    scaled = GroupEvent.objects.filter(group=group, kind="scaled", created_at__gte=_at(step_at))
    decision = next(
        (e for e in scaled.order_by("created_at") if "GPU utilisation" in e.reason), None
    )
    second = next((str(pk) for pk in _serving_running(group) if str(pk) != first), None)
    running = (
        InstanceEvent.objects.filter(instance_id=second, to_status="running",
                                     created_at__gte=_at(step_at)).order_by("created_at").first()
        if second else None
    )  # fmt: skip
    firsts = [
        a.ended for a in answers if a.ok and second and a.replica == f"gpurental-{second[:8]}"
    ]
    _end_group(stack, group)
    return GpuStep(
        answers, step_at,
        decision.created_at.timestamp() if decision else None, decision.reason if decision else "",
        running.created_at.timestamp() if running else None, min(firsts, default=None), clients,
    )  # fmt: skip


def report_failover(run: Failover) -> bool:
    window = [a.ended - a.sent for a in run.window() if a.ok]
    restored = run.restored_at - run.killed_at if run.restored_at else None
    answered = run.restored_answer_at - run.killed_at if run.restored_answer_at else None
    print()
    print(f"failover: {run.clients} closed-loop clients, GET /infer?ms=400; two serving replicas "
          f"and a warm one; {run.killed[:8]}'s container killed (docker kill)")  # fmt: skip
    print(f"  replacement: {run.replacement_how or '—'}")
    for answer in run.lost[:5]:
        print(f"  lost: {answer.phase} +{answer.sent - run.killed_at:.1f} s: {answer.status} "
              f"{answer.error}")  # fmt: skip
    print("| run | sent | 200 | lost | kill → 2 serving | kill → replacement answers | "
          "p50 / p99 from the kill to 2 s after | goal |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    met = not run.lost and restored is not None
    print(f"| failover | {len(run.answers)} | {len(run.answers) - len(run.lost)} | "
          f"{len(run.lost)} | {fmt_s(restored)} | {fmt_s(answered)} | "
          f"{percentile(window, 0.5):.2f} s / {percentile(window, 0.99):.2f} s | "
          f"0 lost: {'met' if not run.lost else 'missed'} |")  # fmt: skip
    return met


def report_gpu_step(run: GpuStep) -> bool:
    decided = run.decision_at - run.step_at if run.decision_at else None
    running = run.second_running_at - run.step_at if run.second_running_at else None
    answered = run.second_answer_at - run.step_at if run.second_answer_at else None
    step = [a.ended - a.sent for a in run.answers if a.ok and a.phase == "step"]
    lost = [a for a in run.answers if not a.ok]
    print()
    print(f"gpu step: the article's rule (gpu_utilization 70, warm pool 2); {run.clients} "
          "closed-loop clients, GET /infer?ms=400, then the same with busy=1 (CPU-burning: "
          "the simulated GPUs read it as utilisation)")  # fmt: skip
    print(f"  decision: {run.decision or '—'}")
    print("| run | sent | lost | step → decision | step → 2nd replica running | "
          "step → its first answer | step p99 | goal |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    met = running is not None and running < 10.0
    print(f"| gpu-step | {len(run.answers)} | {len(lost)} | {fmt_s(decided)} | {fmt_s(running)} | "
          f"{fmt_s(answered)} | {percentile(step, 0.99):.2f} s | < 10 s to a second serving "
          f"replica: {'met' if met else 'missed'} |")  # fmt: skip
    return not lost and run.second_running_at is not None


# --- the report ----------------------------------------------------------------------


def fmt_s(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} s"


def report(runs: list[Run], size: Size) -> bool:
    print()
    print(
        f"step load: {size.steady_rps:g} rps for {size.steady_s:g} s, then {size.step_rps:g} rps "
        f"for {size.step_s:g} s of GET /infer?ms={size.ms}; autoscaler tick {size.tick_s:g} s; "
        f"{size.gpus} simulated GPUs, max_nodes {size.max_nodes}, queue threshold 2, "
        "max_concurrency 2"
    )
    sane = True
    for run in runs:
        print(f"\n{run.mode}: replica timeline (seconds from the step)")
        for at, what in run.timeline:
            print(f"  {at - run.step_at:+7.1f}  {what}")
        for r in run.replicas.values():
            if r.answers:
                print(f"  {r.id[:8]}: {len(r.answers)} answers ({r.how or 'no replica event'})")
        for answer in run.lost[:5]:
            print(f"  lost: {answer.phase} +{answer.sent - run.step_at:.1f} s: {answer.status} "
                  f"{answer.error}")  # fmt: skip

    print()
    print("| run | sent | 200 | lost | step p50 | step p99 | step → decision | decision → "
          "running | decision → first answer | step → first answer | goal |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for run in runs:
        latencies = [a.ended - a.sent for a in run.step() if a.ok]
        decision = run.decision_at
        added = run.added()
        first = added[0] if added else None
        first_answer = min(first.answers) if first else None
        running = None
        if first and decision:
            after = [at for at in first.running if at >= decision]
            running = after[0] - decision if after else None
        goal = ""
        if run.mode in GOALS_S:
            took = first_answer - decision if first and decision else None
            met = took is not None and took <= GOALS_S[run.mode]
            goal = f"≤ {GOALS_S[run.mode]:g} s: {'met' if met else 'missed'}"
        if run.mode == "prewarmed":
            ahead = run.step_at - run.prewarm_ready_at if run.prewarm_ready_at else None
            step_first = f"0 (ready {fmt_s(ahead)} before the step)"
            extra = [r for r in run.replicas.values() if r.answers and r.id in run.before]
            spread = sorted(min(a for a in r.answers if a >= run.step_at) - run.step_at
                            for r in extra if any(a >= run.step_at for a in r.answers))  # fmt: skip
            goal = f"{len(run.before)} serving at the step; all answering within {fmt_s(max(spread) if spread else None)}"  # noqa: E501
            decision_cells = ["none needed" if decision is None else fmt_s(decision - run.step_at),
                              "—", "—", step_first]  # fmt: skip
        else:
            decision_cells = [
                fmt_s(decision - run.step_at if decision else None),
                fmt_s(running),
                fmt_s(first_answer - decision if first and decision else None),
                fmt_s(first_answer - run.step_at if first else None),
            ]
            if first is None:
                sane = False
                print(f"{run.mode}: no replica was added under the step")
        if run.lost:
            sane = False
        print(
            f"| {run.mode} | {len(run.answers)} | {len(run.answers) - len(run.lost)} | "
            f"{len(run.lost)} | {percentile(latencies, 0.5):.2f} s | "
            f"{percentile(latencies, 0.99):.2f} s | " + " | ".join(decision_cells) + f" | {goal} |"
        )
    print()
    print("decision → first answer includes the request's own", f"{size.ms} ms;",
          "the first added replica is the first, after the step, to answer that was not "
          "serving when the load began.")  # fmt: skip
    print("sane (0 lost, a replica added in each scaling run):", "yes" if sane else "NO")
    return sane


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    size = Size()
    parser.add_argument("--runs", default=",".join(MODES), help="which runs (default all)")
    parser.add_argument("--steady-s", type=float, default=size.steady_s)
    parser.add_argument("--step-rps", type=float, default=size.step_rps)
    parser.add_argument("--step-s", type=float, default=size.step_s)
    parser.add_argument("--max-nodes", type=int, default=size.max_nodes)
    parser.add_argument("--gpus", type=int, default=size.gpus, help="simulated GPUs on the host")
    parser.add_argument("--tick", type=float, default=size.tick_s, help="autoscaler tick, s")
    parser.add_argument("--clients", type=int, default=6,
                        help="closed-loop clients of the failover and gpu-step runs")  # fmt: skip
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the warm and failover runs, small: checks they run and are sane",
    )
    args = parser.parse_args()
    size = Size(steady_s=args.steady_s, step_rps=args.step_rps, step_s=args.step_s,
                max_nodes=args.max_nodes, gpus=args.gpus, tick_s=args.tick)  # fmt: skip
    modes = [m.strip() for m in args.runs.split(",") if m.strip()]
    if args.smoke:
        size = Size(steady_s=3, step_rps=6, step_s=15, max_nodes=3, gpus=4, tick_s=args.tick)
        modes = ["warm", "failover"]
    check(all(m in MODES for m in modes), f"--runs takes {', '.join(MODES)}")
    work = Path(tempfile.mkdtemp(prefix="gpurental-bench-"))
    from gpurental import embedded

    stack = ticker = None
    runs: list[Run] = []
    extra: list[tuple[Callable, object]] = []
    settle_s = 3.0 if args.smoke else 5.0
    try:
        setup_django(work / "var", GROUP_TICK_S=str(size.tick_s), **gateway_env())
        print(f"elastic benchmark: runs {', '.join(modes)}; image {SERVING_IMAGE}, "
              f"{os.cpu_count()} CPUs")  # fmt: skip
        stack = Stack(work, size.gpus)
        stack.start()
        ticker = Ticker(size.tick_s)
        ticker.start()
        for mode in modes:
            if mode == "failover":
                extra.append((report_failover, run_failover(stack, ticker, args.clients, settle_s)))
            elif mode == "gpu-step":
                extra.append((report_gpu_step, run_gpu_step(stack, ticker, args.clients, settle_s)))
            else:
                runs.append(run_one(stack, ticker, mode, size))
            print(f"{mode}: done")
    finally:
        if ticker is not None:
            ticker.stop()
        if stack is not None:
            stack.stop()
        embedded.stop(work / "var")
        shutil.rmtree(work, ignore_errors=True)
    sane = report(runs, size) if runs else True
    for reporter, run in extra:
        sane = reporter(run) and sane
    if ticker.errors:
        print(f"the autoscaler's tick failed {len(ticker.errors)} times: {ticker.errors[:3]}")
        sane = False
    return 0 if sane else 1


if __name__ == "__main__":
    sys.exit(main())
