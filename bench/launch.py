"""Launch overhead: platform launch → JupyterLab answering, beside a direct docker SDK run.

    .venv/bin/python bench/launch.py [--runs 10]

Needs a Docker Engine (scripts/docker-engine.sh) and the image (make images). Starts its
own embedded PostgreSQL and Redis in a temp dir, a control worker (thread) and a real
host agent (process), then times, for each run:

- platform: ``instance_launch`` called → the instance is ``running`` (the agent saw
  JupyterLab answer 200 with the token, 403 without) → the benchmark's own GET with
  the token answers 200;
- direct: ``docker.containers.run`` of the same image with the same limits → the
  same GET answers 200, polled at the agent's interval (0.2 s).

Prints p50/p95 of both and the ratio of the p50s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
IMAGE = "gpurental/jupyter-cpu:latest"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def setup_django(var_dir: Path) -> None:
    from gpurental import embedded

    os.environ.update(embedded.ensure(var_dir))  # always its own servers: never touch real data
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex * 2)
    os.environ["DJANGO_SETTINGS_MODULE"] = "gpurental.settings"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def platform_runs(runs: int, work: Path) -> list[float]:
    from celery.contrib.testing.worker import start_worker
    from django.conf import settings

    from gpurental.accounts.models import User
    from gpurental.billing.services import credit_add
    from gpurental.catalog.models import GPUModel, ImageTemplate, Interconnect, Plan
    from gpurental.celery_app import app
    from gpurental.fleet.models import Host
    from gpurental.fleet.services import host_create
    from gpurental.testing.agent_process import AgentProcess, wait_for

    model = GPUModel.objects.create(
        slug="a10g",
        name="A10G 24GB",
        short_name="A10G",
        nvml_names=["NVIDIA A10G"],
        memory_gb=24,
        fp16_tflops=125,
        bf16_tflops=125,
        fp32_tflops=31.2,
        memory_bandwidth_gbs=600,
        interconnect=Interconnect.PCIE,
    )
    Plan.objects.create(
        slug="a10g-x1",
        name="1× A10G",
        gpu_model=model,
        gpu_count=1,
        vcpus=1,
        memory_gb=1,
        disk_gb=10,
        hourly_rate=1,
    )
    image = ImageTemplate.objects.create(slug="jupyter-cpu", name="JupyterLab", image=IMAGE)
    user = User.objects.create_user(email="bench@example.com", password=uuid.uuid4().hex)
    # Launches need credit for their minimum prepaid period, like any customer's.
    credit_add(user=user, amount=Decimal("1000.00"), description="bench credit")
    host, token = host_create(name="bench")
    agent = AgentProcess(
        broker_url=settings.CELERY_BROKER_URL,
        host_name=host.name,
        token=token,
        log_path=work / "agent.log",
    )
    timings: list[float] = []
    step_times: dict[str, list[float]] = {}
    with start_worker(
        app, pool="solo", perform_ping_check=False, queues=["control"], loglevel="WARNING"
    ):
        agent.start()
        try:
            wait_for(lambda: Host.objects.get(pk=host.pk).gpus.count() == 2, 60, "the agent", agent)
            for run in range(runs + 1):  # the first run warms caches and is not counted
                elapsed, steps = one_launch(user, image, model, agent)
                if run:
                    timings.append(elapsed)
                    for step, at in steps.items():
                        step_times.setdefault(step, []).append(at)
                print(
                    f"  platform run {run}: {elapsed:.3f} s{' (warm-up)' if not run else ''}",
                    flush=True,
                )
        finally:
            agent.stop()
    print("  where the time goes (mean seconds after the launch call, from the instance's events):")
    for step, values in sorted(step_times.items(), key=lambda item: statistics.mean(item[1])):
        print(f"    {step:22}{statistics.mean(values):7.3f}")
    return timings


def one_launch(user, image, model, agent) -> tuple[float, dict[str, float]]:
    from gpurental.agent.runtimes.base import http_status
    from gpurental.rentals.models import Instance
    from gpurental.rentals.services import lifecycle
    from gpurental.testing.agent_process import wait_for

    started_wall = time.time()
    started = time.perf_counter()
    instance = lifecycle.instance_launch(user=user, image=image, gpu_model=model, gpu_count=1)
    running = Instance.objects.filter(pk=instance.pk, status="running")
    wait_for(running.exists, 120, "running", agent, interval=0.01)
    instance.refresh_from_db()
    port, token = instance.jupyter_port, instance.jupyter_token
    wait_for(
        lambda: http_status("127.0.0.1", port, "/api/status", token) == 200,
        30,
        "JupyterLab",
        interval=0.01,
    )
    elapsed = time.perf_counter() - started
    steps = {}
    for event in instance.events.all():
        name = event.step or event.to_status
        steps.setdefault(name, event.created_at.timestamp() - started_wall)
    lifecycle.instance_terminate(instance=instance, actor=user)
    terminated = Instance.objects.filter(pk=instance.pk, status="terminated")
    wait_for(terminated.exists, 60, "terminated", agent)
    return elapsed, steps


def direct_runs(runs: int) -> list[float]:
    import docker

    from gpurental.agent.runtimes.base import http_status

    client = docker.from_env()
    timings = []
    for run in range(runs + 1):
        token = uuid.uuid4().hex
        started = time.perf_counter()
        container = client.containers.run(
            IMAGE,
            detach=True,
            environment={"JUPYTER_TOKEN": token},
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
            while http_status("127.0.0.1", port, "/api/status", token) != 200:
                time.sleep(0.2)  # the agent's polling interval
            elapsed = time.perf_counter() - started
        finally:
            container.remove(force=True)
        if run:
            timings.append(elapsed)
        print(f"  direct   run {run}: {elapsed:.3f} s{' (warm-up)' if not run else ''}", flush=True)
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--smoke", action="store_true", help="a small size for CI: checks it runs and is sane"
    )
    args = parser.parse_args()
    if args.smoke:
        args.runs = 1
    work = Path(tempfile.mkdtemp(prefix="gpurental-bench-"))
    from gpurental import embedded

    try:
        setup_django(work / "var")
        print(
            f"launch benchmark: {args.runs} runs each (+1 warm-up), image {IMAGE}, {os.cpu_count()} CPUs"
        )
        direct = direct_runs(args.runs)
        platform = platform_runs(args.runs, work)
    finally:
        embedded.stop(work / "var")
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"{'':10}{'p50':>9}{'p95':>9}{'mean':>9}")
    for name, values in (("direct", direct), ("platform", platform)):
        print(
            f"{name:10}{percentile(values, 0.5):8.3f}s{percentile(values, 0.95):8.3f}s{statistics.mean(values):8.3f}s"
        )
    ratio = percentile(platform, 0.5) / percentile(direct, 0.5)
    ratio95 = percentile(platform, 0.95) / percentile(direct, 0.95)
    print(f"ratio platform/direct: p50 {ratio:.3f}, p95 {ratio95:.3f} (goal: under 1.15)")
    # Sane, not fast: every launch answered, in a time a launch can take.
    sane = len(direct) == len(platform) == args.runs and all(0 < t < 120 for t in direct + platform)
    if not sane:
        print("the figures are not sane: some launch did not finish or took absurdly long")
    return 0 if sane else 1


if __name__ == "__main__":
    sys.exit(main())
