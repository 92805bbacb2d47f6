"""The acceptance pipeline on the control plane: request → agent message → reports →
figures against nominal → host active or held back (the probe itself runs in
test_acceptance_docker.py, in a real container)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.conf import settings
from django.utils import timezone

from gpurental import protocol
from gpurental.acceptance.models import AcceptanceRun, RunReason, RunStatus
from gpurental.acceptance.services import (
    AcceptanceRefused,
    acceptance_report_receive,
    acceptance_run_request,
    acceptance_runs_expire,
)
from gpurental.accounts.models import AuditEvent
from gpurental.fleet.hostlink import MessageRefused
from gpurental.fleet.lifecycle import host_activate, host_maintenance_start
from gpurental.fleet.models import HostStatus
from gpurental.rentals.selectors import schedulable_hosts
from tests.factories import InstanceFactory
from tests.messages import signed


def cpu_result(fp32=0.1, mem=12.0, threads=2) -> dict:
    """What the probe prints on a 2-thread CPU (the shape of acceptance_probe.probe())."""
    na = {"not_applicable": "not applicable on CPU: needs CUDA"}
    return {
        "probe_version": 1,
        "device": "cpu",
        "gpu_count": 0,
        "cpu_threads": threads,
        "figures": {
            "gemm_fp32_tflops": {"value": fp32, "unit": "TFLOPS"},
            "gemm_tf32_tflops": na,
            "gemm_fp16_tflops": {"value": 0.003, "unit": "TFLOPS"},
            "gemm_bf16_tflops": {"value": 0.004, "unit": "TFLOPS"},
            "memory_bandwidth_gbs": {"value": mem, "unit": "GB/s"},
            "h2d_gbs": na,
            "d2h_gbs": na,
            "p2p_gbs": na,
            "allreduce_busbw_gbs": na,
        },
    }


def report(host, run, kind, **data) -> dict:
    """A report signed with the host's key, as its agent's ControlReporter sends it."""
    return signed(host, run_id=str(run.id), kind=kind, data=data)


@pytest.fixture
def requested(joining_host, sent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        run = acceptance_run_request(
            host=joining_host, reason=RunReason.JOIN, now=timezone.now(), smoke=True
        )
    return joining_host, run


def test_request_sends_the_agent_a_signed_run_with_the_hosts_gpus(requested, sent):
    host, run = requested
    (message,) = sent
    assert message["task"] == "acceptance_run" and message["queue"] == f"host.{host.name}"
    assert message["run_id"] == str(run.id)
    assert message["gpu_indices"] == list(range(8))
    assert message["image"] == settings.ACCEPTANCE_IMAGE_CPU  # simulated GPUs: the CPU image
    assert message["smoke"] is True
    host.refresh_from_db()
    assert host.status == HostStatus.ACCEPTANCE
    assert AuditEvent.objects.filter(action="acceptance.requested").count() == 1


def test_a_second_request_while_one_runs_returns_the_same_run(requested):
    host, run = requested
    again = acceptance_run_request(host=host, reason=RunReason.ON_DEMAND, now=timezone.now())
    assert again.pk == run.pk
    assert AcceptanceRun.objects.filter(host=host).count() == 1


def test_host_in_acceptance_takes_no_placements_until_it_passes(requested, cpu_nominal):
    host, run = requested
    assert host not in schedulable_hosts(now=timezone.now())
    cpu_nominal.fp32_tflops, cpu_nominal.memory_bandwidth_gbs = 0.05, 10.0
    cpu_nominal.save()
    acceptance_report_receive(message=report(host, run, "started"), now=timezone.now())
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    acceptance_report_receive(
        message=report(host, run, "finished", result=cpu_result(fp32=0.1), network=[]),
        now=timezone.now(),
    )
    run.refresh_from_db()
    host.refresh_from_db()
    assert run.status == RunStatus.PASSED and run.failing == []
    fp32 = next(f for f in run.figures if f["key"] == "gemm_fp32_tflops")
    # Per core: 0.05 × 2 threads = 0.1 nominal; 0.1 measured = 100 %.
    assert fp32["nominal"] == 0.1 and fp32["percent"] == 100.0 and fp32["passed"] is True
    tf32 = next(f for f in run.figures if f["key"] == "gemm_tf32_tflops")
    assert tf32["measured"] is None and "not applicable on CPU" in tf32["note"]
    fp16 = next(f for f in run.figures if f["key"] == "gemm_fp16_tflops")
    assert fp16["passed"] is None and "not compared" in fp16["note"]  # no CPU nominal
    assert host.status == HostStatus.ACTIVE
    assert host in schedulable_hosts(now=timezone.now())


def test_below_threshold_holds_the_host_back_naming_the_figure(requested, cpu_nominal):
    host, run = requested
    cpu_nominal.fp32_tflops, cpu_nominal.memory_bandwidth_gbs = 0.05, 10.0
    cpu_nominal.save()
    acceptance_report_receive(
        message=report(host, run, "finished", result=cpu_result(fp32=0.05), network=[]),
        now=timezone.now(),
    )
    run.refresh_from_db()
    host.refresh_from_db()
    assert run.status == RunStatus.HELD
    assert run.failing == ["FP32 GEMM"]  # 50 % < 60 %; memory 120 % passes
    assert host.status == HostStatus.HELD
    assert host not in schedulable_hosts(now=timezone.now())
    event = AuditEvent.objects.filter(action="host.status").latest("created_at")
    assert "FP32 GEMM 50 %" in event.changes["reason"]


def test_gemms_and_the_rest_are_held_to_their_own_thresholds(requested, cpu_nominal):
    """GEMMs against the data sheet's boost-clock peaks need 60 %, memory and links 80 %:
    a GEMM at 70 % passes where memory at 75 % does not."""
    host, run = requested
    assert (run.gemm_threshold, run.threshold) == (Decimal("0.600"), Decimal("0.800"))
    cpu_nominal.fp32_tflops, cpu_nominal.memory_bandwidth_gbs = 0.05, 16.0
    cpu_nominal.save()
    acceptance_report_receive(
        message=report(host, run, "finished", result=cpu_result(fp32=0.07, mem=12.0), network=[]),
        now=timezone.now(),
    )
    run.refresh_from_db()
    rows = {row["key"]: row for row in run.figures}
    assert (rows["gemm_fp32_tflops"]["percent"], rows["gemm_fp32_tflops"]["passed"]) == (70.0, True)
    assert rows["gemm_fp32_tflops"]["threshold"] == 0.6
    assert (rows["memory_bandwidth_gbs"]["percent"], rows["memory_bandwidth_gbs"]["passed"]) == (
        75.0,
        False,
    )
    assert run.failing == ["Memory bandwidth"]


def test_the_same_result_recorded_twice_changes_nothing(requested, cpu_nominal):
    host, run = requested
    # Twice in two messages (the same message twice is a replay, refused: test_hostlink).
    message = report(host, run, "finished", result=cpu_result(), network=[])
    acceptance_report_receive(message=message, now=timezone.now())
    first = AcceptanceRun.objects.get(pk=run.pk)
    message = report(host, run, "finished", result=cpu_result(), network=[])
    acceptance_report_receive(message=message, now=timezone.now())
    again = AcceptanceRun.objects.get(pk=run.pk)
    assert (again.status, again.finished_at) == (first.status, first.finished_at)
    assert AuditEvent.objects.filter(action__startswith="acceptance.p").count() <= 1


def test_a_run_that_could_not_run_holds_the_host_with_the_reason(requested):
    host, run = requested
    acceptance_report_receive(
        message=report(
            host, run, "failed", reason="image gpurental/pytorch:2.13.0-cpu is not on this host"
        ),
        now=timezone.now(),
    )
    run.refresh_from_db()
    host.refresh_from_db()
    assert run.status == RunStatus.FAILED and "not on this host" in run.error
    assert host.status == HostStatus.HELD


def test_a_report_for_another_hosts_run_is_refused(requested, make_host, a100):
    host, run = requested
    other = make_host("node-b", a100, count=1)
    forged = protocol.sign(
        protocol.host_key(other.token),
        {"host": other.name, "run_id": str(run.id), "kind": "finished", "data": {}, "sent_at": 0},
    )
    with pytest.raises(MessageRefused):
        acceptance_report_receive(message=forged, now=timezone.now())
    bad_signature = {**report(host, run, "finished", result=cpu_result(), network=[]), "sig": "0"}
    with pytest.raises(MessageRefused):
        acceptance_report_receive(message=bad_signature, now=timezone.now())
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


def test_gpu_host_whose_benchmark_saw_no_gpu_is_held(make_host, a100, sent):
    host = make_host("gpu-1", a100, count=2, status=HostStatus.ACCEPTANCE, gpu_source="nvml")
    run = acceptance_run_request(host=host, reason=RunReason.JOIN, now=timezone.now())
    assert run.image == settings.ACCEPTANCE_IMAGE_GPU
    acceptance_report_receive(
        message=report(host, run, "finished", result=cpu_result(), network=[]),
        now=timezone.now(),
    )
    run.refresh_from_db()
    assert run.status == RunStatus.HELD and "Device" in run.failing
    assert "NVIDIA Container Toolkit" in run.figures[0]["note"]


def test_gpu_figures_compare_with_the_models_spec_sheet(make_host, a100, sent):
    """A100 SXM4 80GB's spec sheet: 312 TFLOPS FP16 dense, 2039 GB/s."""
    a100.nvml_names = ["NVIDIA A100-SXM4-80GB"]
    a100.save()
    host = make_host("gpu-2", a100, count=2, status=HostStatus.ACCEPTANCE, gpu_source="nvml")
    run = acceptance_run_request(host=host, reason=RunReason.JOIN, now=timezone.now())
    value = lambda v: {"value": v, "unit": "x"}  # noqa: E731
    result = {
        "device": "cuda",
        "gpu_count": 2,
        "figures": {
            "gemm_fp32_tflops": value(18.0),
            "gemm_tf32_tflops": value(140.0),
            "gemm_fp16_tflops": value(290.0),
            "gemm_bf16_tflops": value(288.0),
            "memory_bandwidth_gbs": value(1800.0),
            "h2d_gbs": value(25.0),  # 79 % of PCIe Gen4's 31.5: below
            "d2h_gbs": value(27.0),
            "p2p_gbs": value(270.0),
            "allreduce_busbw_gbs": value(265.0),
        },
    }
    acceptance_report_receive(
        message=report(host, run, "finished", result=result, network=[]), now=timezone.now()
    )
    run.refresh_from_db()
    fp16 = next(f for f in run.figures if f["key"] == "gemm_fp16_tflops")
    assert fp16["nominal"] == 312.0 and fp16["percent"] == 92.9
    assert run.failing == ["Host → device copy"]


def test_regressions_against_the_previous_run_are_flagged(requested, cpu_nominal, sent):
    host, run = requested
    cpu_nominal.fp32_tflops, cpu_nominal.memory_bandwidth_gbs = 0.01, 1.0
    cpu_nominal.save()
    acceptance_report_receive(
        message=report(host, run, "finished", result=cpu_result(fp32=0.1), network=[]),
        now=timezone.now(),
    )
    second = acceptance_run_request(host=host, reason=RunReason.ON_DEMAND, now=timezone.now())
    acceptance_report_receive(
        message=report(host, second, "finished", result=cpu_result(fp32=0.07), network=[]),
        now=timezone.now(),
    )
    second.refresh_from_db()
    assert second.status == RunStatus.PASSED  # still far above the (low) nominal...
    (regressed,) = second.regressions  # ...but 30 % slower than last time: flagged
    assert regressed["key"] == "gemm_fp32_tflops" and regressed["previous"] == 0.1


def test_network_figures_compare_with_the_nic_speed(requested, cpu_nominal):
    host, run = requested
    host.topology = {"nics": [{"name": "eno1", "speed_mbps": 10000, "kind": "ethernet"}]}
    host.save(update_fields=["topology"])
    network = [
        {"peer": "node-x", "throughput_gbps": 9.4, "latency_ms": 0.21},
        {"peer": "node-y", "error": "iperf3: unable to connect to server"},
    ]
    acceptance_report_receive(
        message=report(host, run, "finished", result=cpu_result(), network=network),
        now=timezone.now(),
    )
    run.refresh_from_db()
    rows = {f["key"]: f for f in run.figures}
    assert rows["network_gbps:node-x"]["percent"] == 94.0
    assert rows["network_gbps:node-x"]["passed"] is True
    assert rows["network_latency_ms:node-x"]["measured"] == 0.21
    assert "unable to connect" in rows["network_gbps:node-y"]["note"]


def test_staff_cannot_benchmark_a_host_with_instances_on_it(make_host, a100, sent):
    host = make_host("busy", a100, count=8)
    InstanceFactory(host=host, status="running")
    with pytest.raises(AcceptanceRefused, match="drain it"):
        acceptance_run_request(host=host, reason=RunReason.ON_DEMAND, now=timezone.now())
    host.refresh_from_db()
    assert host.status == HostStatus.ACTIVE


def test_back_from_maintenance_means_benchmarked_first(make_host, a100, sent):
    host = make_host("maint", a100, count=1, status=HostStatus.MAINTENANCE)
    host_activate(host=host, reason="repaired")
    host.refresh_from_db()
    assert host.status == HostStatus.ACCEPTANCE
    assert host.acceptance_runs.get().reason == RunReason.MAINTENANCE


def test_joining_hosts_first_inventory_starts_its_benchmark(
    make_host, a100, sent, django_capture_on_commit_callbacks
):
    from gpurental.fleet.services import host_heartbeat_record

    a100.nvml_names = ["NVIDIA A100-SXM4-80GB"]
    a100.save()
    host = make_host("fresh", a100, count=0, status=HostStatus.ACCEPTANCE)
    inventory = [{"index": 0, "uuid": "GPU-x", "name": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920}]
    for _ in range(2):  # the second beat starts nothing more
        with django_capture_on_commit_callbacks(execute=True):
            host_heartbeat_record(
                host=host,
                inventory=inventory,
                containers=None,
                runtime="docker",
                gpu_source="simulated",
                agent_version="t",
                sent_at=None,
                now=timezone.now(),
                topology={"fabric": "pcie", "matrix": [["X"]], "nics": []},
            )
    assert [m["task"] for m in sent] == ["acceptance_run"]
    host.refresh_from_db()
    assert host.topology["fabric"] == "pcie"
    assert host.acceptance_runs.get().reason == RunReason.JOIN


def test_a_run_with_no_answer_expires_and_holds_the_host(requested):
    host, run = requested
    later = timezone.now() + timezone.timedelta(hours=2)
    (expired,) = acceptance_runs_expire(now=later)
    assert expired.status == RunStatus.FAILED and "no result within" in expired.error
    host.refresh_from_db()
    assert host.status == HostStatus.HELD


def test_a_result_arriving_after_staff_took_the_host_out_leaves_it_out(requested, cpu_nominal):
    host, run = requested
    host_maintenance_start(host=host, reason="fan replaced")
    acceptance_report_receive(
        message=report(host, run, "finished", result=cpu_result(), network=[]),
        now=timezone.now(),
    )
    run.refresh_from_db()
    host.refresh_from_db()
    assert run.status in (RunStatus.PASSED, RunStatus.HELD)  # the figures are kept...
    assert host.status == HostStatus.MAINTENANCE  # ...and staff's decision stands
