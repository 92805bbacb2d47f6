"""Elastic groups under a step load: how soon an added replica serves, and what is lost.

    .venv/bin/python bench/elastic.py [--step-rps 8] [--step-s 30] [--tick 5]

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

Reported per run: requests sent, answered 200, lost (anything else: 503, 502, an error;
must be 0); latency p50/p99 of the requests sent during the step; step → the scale-out
decision (the ``scaled`` GroupEvent, stamped with its tick's time); for each added
replica, decision → ``running`` (the agent's readiness report) and decision → its first
answer at the bench (the replica is found by the ``replica`` field of the answers, the
container's hostname ``gpurental-<first 8 of the instance id>``; the answer includes the
request's own 0.5 s); and the replica timeline. The goal (issue 15): with a warm pool an
added replica serves within 5 s of the decision, cold within 15 s. Printed as met or
missed, never asserted. ``--smoke``: the warm run only, small, quick; it fails (non-zero
exit) when a request is lost or no replica was added, never on a time.
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
MODES = ("cold", "warm", "prewarmed")


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

    def one(self, answer: Answer, ms: int | None = None) -> Answer:
        import requests

        session = getattr(self.local, "session", None)
        if session is None:
            session = self.local.session = requests.Session()
        try:
            reply = session.get(
                self.url, params={"ms": self.ms if ms is None else ms}, headers=self.headers,
                timeout=120,
            )  # fmt: skip
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
    parser.add_argument(
        "--smoke", action="store_true", help="the warm run, small: checks it runs and is sane"
    )
    args = parser.parse_args()
    size = Size(steady_s=args.steady_s, step_rps=args.step_rps, step_s=args.step_s,
                max_nodes=args.max_nodes, gpus=args.gpus, tick_s=args.tick)  # fmt: skip
    modes = [m.strip() for m in args.runs.split(",") if m.strip()]
    if args.smoke:
        size = Size(steady_s=3, step_rps=6, step_s=15, max_nodes=3, gpus=4, tick_s=args.tick)
        modes = ["warm"]
    check(all(m in MODES for m in modes), f"--runs takes {', '.join(MODES)}")
    work = Path(tempfile.mkdtemp(prefix="gpurental-bench-"))
    from gpurental import embedded

    stack = ticker = None
    runs: list[Run] = []
    try:
        setup_django(work / "var", GROUP_TICK_S=str(size.tick_s), **gateway_env())
        print(f"elastic benchmark: runs {', '.join(modes)}; image {SERVING_IMAGE}, "
              f"{os.cpu_count()} CPUs")  # fmt: skip
        stack = Stack(work, size.gpus)
        stack.start()
        ticker = Ticker(size.tick_s)
        ticker.start()
        for mode in modes:
            runs.append(run_one(stack, ticker, mode, size))
            print(f"{mode}: done ({len(runs[-1].answers)} requests, {len(runs[-1].lost)} lost)")
    finally:
        if ticker is not None:
            ticker.stop()
        if stack is not None:
            stack.stop()
        embedded.stop(work / "var")
        shutil.rmtree(work, ignore_errors=True)
    sane = report(runs, size)
    if ticker.errors:
        print(f"the autoscaler's tick failed {len(ticker.errors)} times: {ticker.errors[:3]}")
        sane = False
    return 0 if sane else 1


if __name__ == "__main__":
    sys.exit(main())
