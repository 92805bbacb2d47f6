"""The acceptance benchmark end to end on CPU, with real parts: the control plane asks, the
agent runs the probe in a real container of the framework image (torch on CPU) and iperf3
against a peer's ``iperf3 -s``, its signed reports go through the control-plane task, the
figures are stored, and the host becomes active, or is held back below threshold."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.utils import timezone

from gpurental.acceptance import tasks
from gpurental.acceptance.models import RunReason, RunStatus
from gpurental.acceptance.services import acceptance_run_request
from gpurental.agent.acceptance import acceptance_run
from gpurental.agent.gpus import SimulatedSource
from gpurental.agent.host import HostAgent
from gpurental.agent.reporter import ControlReporter
from gpurental.agent.runtimes import docker_problem
from gpurental.fleet.models import HostStatus
from gpurental.rentals.selectors import schedulable_hosts
from tests.agent.conftest import skip_unless_ci

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def docker_runtime_for_acceptance():
    problem = docker_problem()
    if problem is not None:
        skip_unless_ci(f"{problem}; start one with: sudo scripts/docker-engine.sh")

    from gpurental.agent.runtimes.docker import DockerRuntime

    return DockerRuntime(host_name="accept-e2e")


@pytest.fixture
def torch_image(docker_runtime_for_acceptance):
    """The framework image (torch on CPU) that `make images` builds."""
    import docker.errors

    try:
        docker_runtime_for_acceptance.client.images.get(settings.ACCEPTANCE_IMAGE_CPU)
    except docker.errors.ImageNotFound:
        skip_unless_ci(f"{settings.ACCEPTANCE_IMAGE_CPU} is not built; run `make images`")


class CapturingApp:
    def __init__(self):
        from celery import Celery

        self.sent: list[dict] = []
        self.conf = Celery("capturing", broker="redis://").conf

    def send_task(self, name, kwargs=None, queue=None, **options):
        self.sent.append({"name": name, "queue": queue, "kwargs": kwargs or {}})


def run_on_agent(host, runtime, message: dict) -> list[dict]:
    """What the agent's worker task does with the message, and its reports, as sent."""
    app = CapturingApp()
    agent = HostAgent(
        runtime=runtime,
        source=SimulatedSource(host_name=host.name, count=2),
        reporter=ControlReporter(app, host_name=host.name, token=host.token),
        bind_address="127.0.0.1",
    )
    payload = {k: v for k, v in message.items() if k not in {"task", "queue"}}
    acceptance_run(agent, payload)
    return app.sent


def deliver(reports: list[dict]) -> None:
    for report in reports:
        assert report["queue"] == "reports" or report.get("queue") is None
        tasks.acceptance_report(**report["kwargs"])  # the control-plane task's body


@pytest.fixture
def benchmarked(make_host, a100, sent, settings, django_capture_on_commit_callbacks, iperf3_server):
    """Ask for a smoke run on a joining host with one peer, run it on the agent for real."""
    settings.ACCEPTANCE_IPERF3_PORT = iperf3_server
    settings.ACCEPTANCE_IPERF3_SECONDS = 1
    settings.ACCEPTANCE_MEMORY_MB = 2048
    make_host("peer-1", a100, count=1, address="127.0.0.1")  # active, heart-beating

    def benchmark(runtime):
        host = make_host("accept-e2e", a100, count=2, status=HostStatus.ACCEPTANCE)
        with django_capture_on_commit_callbacks(execute=True):
            run = acceptance_run_request(
                host=host, reason=RunReason.JOIN, now=timezone.now(), smoke=True
            )
        (message,) = sent
        reports = run_on_agent(host, runtime, message)
        deliver(reports)
        run.refresh_from_db()
        host.refresh_from_db()
        return host, run, reports

    return benchmark


def test_a_cpu_host_reaching_nominal_becomes_active(
    benchmarked, docker_runtime_for_acceptance, torch_image, cpu_nominal
):
    # A nominal any CPU reaches: the pipeline, not this machine's speed, is under test.
    cpu_nominal.fp32_tflops, cpu_nominal.memory_bandwidth_gbs = 1e-6, 1e-3
    cpu_nominal.save()
    host, run, reports = benchmarked(docker_runtime_for_acceptance)
    assert [r["kwargs"]["kind"] for r in reports] == ["started", "finished"]
    assert run.status == RunStatus.PASSED, run.failing or run.error
    assert run.device == "cpu" and run.raw["result"]["torch"].startswith("2.13.0")
    rows = {f["key"]: f for f in run.figures}
    assert rows["gemm_fp32_tflops"]["measured"] > 0
    assert rows["gemm_fp32_tflops"]["passed"] is True
    assert rows["memory_bandwidth_gbs"]["measured"] > 0
    assert "not applicable on CPU" in rows["allreduce_busbw_gbs"]["note"]
    assert rows["allreduce_busbw_gbs"]["measured"] is None
    assert rows["network_gbps:peer-1"]["measured"] > 0  # iperf3 to the peer
    assert rows["network_latency_ms:peer-1"]["measured"] is not None
    assert host.status == HostStatus.ACTIVE
    assert host in schedulable_hosts(now=timezone.now())
    # Nothing of this host's left behind on the engine (other tests may run batch jobs now).
    client = docker_runtime_for_acceptance.client
    mine = {"label": ["gpurental.batch", "gpurental.host=accept-e2e"]}
    assert client.containers.list(all=True, filters=mine, ignore_removed=True) == []


def test_a_cpu_host_below_nominal_is_held_back_naming_the_figure(
    benchmarked, docker_runtime_for_acceptance, torch_image, cpu_nominal
):
    # 1000 TFLOPS per core: no CPU reaches 85 % of that.
    cpu_nominal.fp32_tflops, cpu_nominal.memory_bandwidth_gbs = 1000.0, 1e-3
    cpu_nominal.save()
    host, run, _ = benchmarked(docker_runtime_for_acceptance)
    assert run.status == RunStatus.HELD
    assert run.failing == ["FP32 GEMM"]
    fp32 = next(f for f in run.figures if f["key"] == "gemm_fp32_tflops")
    assert fp32["passed"] is False and fp32["percent"] < 1
    assert host.status == HostStatus.HELD
    assert host not in schedulable_hosts(now=timezone.now())


def test_a_missing_image_fails_the_run_and_holds_the_host(
    benchmarked, docker_runtime_for_acceptance, settings
):
    settings.ACCEPTANCE_IMAGE_CPU = "gpurental/no-such-image:0"
    host, run, _ = benchmarked(docker_runtime_for_acceptance)
    assert run.status == RunStatus.FAILED
    assert "gpurental/no-such-image:0 is not on this host" in run.error
    assert host.status == HostStatus.HELD
