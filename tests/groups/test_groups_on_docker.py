"""Elastic groups for real: the gateway process, the control worker, the host agent, the
Docker Engine and the serving-echo image. Requests go through the group's endpoint
(``grp-<id>.gw.localhost``) with the owner's API key; the autoscaler ticks every half
second in a thread of the test (what celery beat does every GROUP_TICK_S), and the
gateway's wake-ups run it at once in the control worker.

Each test prints how long the step it measures took; the timing goals live in
bench/elastic.py, not here.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from gpurental.accounts.services import api_key_create
from gpurental.agent.runtimes.docker import container_name
from gpurental.groups import services
from gpurental.groups.models import Group
from gpurental.rentals.models import Instance
from gpurental.testing.agent_process import wait_for
from tests.factories import ImageTemplateFactory

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
SERVING_IMAGE = "gpurental/serving-echo:latest"


@pytest.fixture
def serving(catalog, docker_client):
    try:
        docker_client.images.get(SERVING_IMAGE)
    except Exception:  # noqa: BLE001
        pytest.fail(f"{SERVING_IMAGE} is not built; run `make images`")
    return ImageTemplateFactory(
        slug="serving-echo", image=SERVING_IMAGE, port=8000, http_ports=[8000]
    )


class Ticker(threading.Thread):
    """The autoscaler's beat, every half second, for one group."""

    def __init__(self, group_id):
        super().__init__(daemon=True)
        self.group_id, self.halt, self.errors = group_id, threading.Event(), []

    def run(self):
        from django.db import connection

        try:
            while not self.halt.wait(0.5):
                try:
                    services.group_tick(group_id=self.group_id)
                except Exception as exc:  # noqa: BLE001 - reported by stop()
                    self.errors.append(exc)
        finally:
            connection.close()

    def stop(self):
        self.halt.set()
        self.join(10)
        assert not self.errors, self.errors


class Endpoint:
    def __init__(self, gateway: str, group: Group, key: str, port: int):
        self.url, self.key = gateway, key
        self.host = f"grp-{group.pk}.gw.localhost:{port}"

    def infer(self, ms: int = 200, busy: bool = False, timeout: float = 120) -> requests.Response:
        return requests.get(
            f"{self.url}/infer",
            params={"ms": ms, **({"busy": 1} if busy else {})},
            headers={"Host": self.host, "Authorization": f"Bearer {self.key}"},
            timeout=timeout,
        )


@pytest.fixture
def make_group(alice, serving, gateway, gateway_port, agent, control_worker):
    made = []
    key = api_key_create(user=alice, name="endpoint")[1]

    def make(**spec):
        body = {"name": "inference", "instance_type": "A10G", "image": "serving-echo", **spec}
        group = services.group_apply(user=alice, source=body).group
        ticker = Ticker(group.pk)
        ticker.start()
        made.append((group, ticker))
        return group, Endpoint(gateway, group, key, gateway_port), ticker

    yield make
    for group, ticker in made:
        ticker.stop()
        services.group_delete(group=group)


def replicas(group, **filters):
    return list(Instance.objects.filter(group=group, **filters).order_by("created_at", "pk"))


def reasons(group, kind):
    return list(group.events.filter(kind=kind).values_list("reason", flat=True))


@pytest.mark.backend
def test_from_zero_requests_wait_then_a_queue_scales_out_then_a_drain_loses_nothing(make_group):
    group, endpoint, _ = make_group(
        min_nodes=0,
        max_nodes=2,
        max_concurrency=1,
        scaling_metrics={"metric": "queue", "threshold": 1},
        cooldown={"scale_up": 0, "scale_down": 0},
    )
    # At zero replicas: the request is held while one starts, then served.
    started = time.monotonic()
    first = endpoint.infer(ms=50)
    print(f"\nscale from zero: the first request answered after {time.monotonic() - started:.1f} s")
    assert first.status_code == 200, first.text
    assert reasons(group, "scaled")[0].startswith("0 → 1: "), reasons(group, "scaled")

    # Six slow requests at once, one at a time per replica: the queue asks for a second.
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: endpoint.infer(ms=2500), range(6)))
    assert [a.status_code for a in answers] == [200] * 6
    served_by = {a.json()["replica"] for a in answers}
    assert len(served_by) == 2, served_by
    assert any("1 → 2: queue" in r or "burst" in r for r in reasons(group, "scaled")), reasons(
        group, "scaled"
    )

    # Scale in to one while both replicas have a request in flight: nothing is lost.
    wait_for(
        lambda: len(replicas(group, group_role="serving", status="running")) == 2, 30, "2 ready"
    )
    with ThreadPoolExecutor(2) as pool:
        inflight = [pool.submit(endpoint.infer, 4000) for _ in range(2)]
        time.sleep(1.0)
        services.group_apply(
            user=group.user,
            source={**group.spec, "max_nodes": 1, "min_nodes": 0},
        )
        results = [f.result() for f in inflight]
    assert [r.status_code for r in results] == [200, 200]
    wait_for(
        lambda: any("drained: terminated" in r for r in reasons(group, "replica")), 30, "drained"
    )
    assert len(replicas(group, group_role="serving", status="running")) == 1
    assert endpoint.infer(ms=10).status_code == 200


def test_a_warm_replica_is_promoted_and_the_pool_refills(make_group, docker_client):
    group, endpoint, _ = make_group(
        min_nodes=0,
        max_nodes=1,
        warm_pool={"size": 1},
        scaling_metrics={"metric": "queue", "threshold": 1},
        cooldown={"scale_up": 0, "scale_down": 600},
    )
    wait_for(
        lambda: len(replicas(group, group_role="warm", status="stopped")) == 1,
        60,
        "a parked warm replica",
    )
    (warm,) = replicas(group, group_role="warm")
    # Parked: its container is kept, created and stopped (no GPU, no process).
    wait_for(
        lambda: docker_client.containers.get(container_name(str(warm.pk))).status == "exited",
        30,
        "the parked container stopped",
    )
    parked = docker_client.containers.get(container_name(str(warm.pk)))
    started = time.monotonic()
    answer = endpoint.infer(ms=50)
    print(f"\nwarm promotion: the request answered after {time.monotonic() - started:.1f} s")
    assert answer.status_code == 200, answer.text
    serving = replicas(group, group_role="serving")
    assert [r.pk for r in serving] == [warm.pk]
    assert any("promoted from the warm pool" in r for r in reasons(group, "replica"))
    # Promotion started that same container: no image step, no creation step.
    running = docker_client.containers.get(container_name(str(warm.pk)))
    assert (running.id, running.status) == (parked.id, "running")
    steps = [f"{step} {reason}" for step, reason in warm.events.values_list("step", "reason")]
    kept = [i for i, s in enumerate(steps) if "starting the kept container" in s]
    assert kept, steps
    assert not any("creating container" in s for s in steps[kept[-1] :]), steps
    # The pool refills in the background: a new replica is started once, then parked.
    wait_for(
        lambda: len(replicas(group, group_role="warm", status="stopped")) == 1,
        60,
        "the pool refilled",
    )
    assert replicas(group, group_role="warm")[0].pk != warm.pk

    # The serving replica's container dies under load (docker kill): no request is lost.
    # Those in flight are sent again, the rest wait, and the new warm replica is promoted
    # at once (the scale-up cooldown notwithstanding: a replacement is not a scale-out).
    Group.objects.filter(pk=group.pk).update(scale_up_cooldown_s=600)
    (spare,) = replicas(group, group_role="warm")
    halt, statuses = threading.Event(), []

    def load():
        while not halt.is_set():
            statuses.append(endpoint.infer(ms=200).status_code)

    with ThreadPoolExecutor(3) as pool:
        for _ in range(3):
            pool.submit(load)
        wait_for(lambda: len(statuses) >= 6, 30, "load flowing")
        killed = time.monotonic()
        docker_client.containers.get(container_name(str(warm.pk))).kill()
        try:
            wait_for(
                lambda: (
                    [r.pk for r in replicas(group, group_role="serving", status="running")]
                    == [spare.pk]
                ),
                60,
                "the spare promoted in its place",
            )
            restored = time.monotonic() - killed
            served = len(statuses)
            wait_for(lambda: len(statuses) >= served + 6, 30, "load served by the spare")
        finally:
            halt.set()
    print(f"\nreplica killed under load: serving again after {restored:.1f} s, "
          f"{len(statuses)} requests, {sum(s != 200 for s in statuses)} failed")  # fmt: skip
    assert statuses and set(statuses) == {200}, statuses
    assert reasons(group, "scaled")[-1].startswith("0 → 1: "), reasons(group, "scaled")


def test_simulated_gpu_utilisation_scales_out(make_group):
    group, endpoint, _ = make_group(
        min_nodes=1,
        max_nodes=2,
        max_concurrency=4,
        scaling_metrics={"metric": "gpu_utilization", "threshold": 40},
        cooldown={"scale_up": 0, "scale_down": 600},
    )
    wait_for(lambda: len(replicas(group, status="running")) == 1, 60, "the first replica")
    halt = threading.Event()

    def busy():
        while not halt.is_set():
            endpoint.infer(ms=1000, busy=True)

    with ThreadPoolExecutor(2) as pool:
        for _ in range(2):
            pool.submit(busy)
        try:
            wait_for(
                lambda: any("GPU utilisation" in r for r in reasons(group, "scaled")),
                90,
                "a scale-out on GPU utilisation",
            )
        finally:
            halt.set()
    (reason,) = [r for r in reasons(group, "scaled") if "GPU utilisation" in r]
    assert reason.startswith("1 → 2: GPU utilisation") and "> 40 %" in reason
    assert len(replicas(group, group_role="serving")) == 2


def test_schedule_and_prewarm_start_serving_replicas_before_any_request(make_group, settings):
    from datetime import timedelta
    from zoneinfo import ZoneInfo

    from django.utils import timezone

    from gpurental.groups.models import LoadSample

    # A schedule whose window is now, in the operator's zone: its floor starts a replica.
    hour = timezone.now().astimezone(ZoneInfo(settings.TIME_ZONE)).hour
    window = f"{(hour - 1) % 24},{hour},{(hour + 1) % 24}"
    scheduled, at_schedule, _ = make_group(
        name="office-hours", min_nodes=0, max_nodes=2,
        schedule={"cron": f"* {window} * * *", "min_nodes": 1},
    )  # fmt: skip
    # Pre-warm: on each of the past 4 days, one replica was needed in the quarter hour
    # that starts a lead (15 minutes) from now.
    prewarmed, at_prewarm, _ = make_group(name="nightly", min_nodes=0, max_nodes=2,
                                          prewarm_lead_minutes=15)  # fmt: skip
    soon = timezone.now() + timedelta(minutes=20)
    for days in range(1, 5):
        LoadSample.objects.create(
            group=prewarmed, at=soon - timedelta(days=days), ready=1, provisioning=0, warm=0,
            rps=3.0, inflight=1.0, queued=0.0, needed=1,
        )  # fmt: skip

    for group, why in ((scheduled, "schedule"), (prewarmed, "pre-warm")):
        wait_for(
            lambda group=group: len(replicas(group, status="running")) == 1,
            60,
            f"a replica started by {why}",
        )
        assert any(why in r for r in reasons(group, "scaled")), reasons(group, "scaled")
    # Both serve at once: no request waited for a replica to start.
    for endpoint in (at_schedule, at_prewarm):
        started = time.monotonic()
        assert endpoint.infer(ms=10).status_code == 200
        assert time.monotonic() - started < 1.5


def test_the_quota_blocks_a_scale_out_and_the_replicas_it_allows_serve(make_group, alice):
    alice.gpu_quota = 1  # one replica of 1 GPU
    alice.save(update_fields=["gpu_quota"])
    group, endpoint, _ = make_group(min_nodes=2, max_nodes=2)
    wait_for(lambda: len(replicas(group, status="running")) == 1, 60, "the replica allowed")
    blocked = reasons(group, "blocked")
    assert blocked and "quota" in blocked[0], blocked
    assert len(replicas(group, group_role="serving")) == 1
    assert endpoint.infer(ms=10).status_code == 200


def test_a_group_serves_the_real_model_through_its_endpoint(make_group, docker_client):
    try:
        docker_client.images.get("gpurental/serving-embed:latest")
    except Exception:  # noqa: BLE001
        pytest.fail("gpurental/serving-embed:latest is not built; run `make images`")
    ImageTemplateFactory(
        slug="serving-embed", image="gpurental/serving-embed:latest", port=8000, http_ports=[8000]
    )
    group, endpoint, _ = make_group(name="embeddings", image="serving-embed", min_nodes=1)
    # Running means the model has loaded (the image answers the readiness check only then).
    wait_for(lambda: len(replicas(group, status="running")) == 1, 120, "a replica with the model")
    answer = requests.post(
        f"{endpoint.url}/embed",
        json={"texts": ["GPU rental by the second", "renting GPUs per second"]},
        headers={"Host": endpoint.host, "Authorization": f"Bearer {endpoint.key}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["model"], body["dims"]) == ("all-MiniLM-L6-v2", 384)
    first, second = body["vectors"]
    assert sum(a * b for a, b in zip(first, second, strict=True)) > 0.6
