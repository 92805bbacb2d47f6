"""What staff and customers see: the topology matrix and the acceptance history on the host's
back-office page, the host class and "measured % of nominal" in the catalog and on the
instance page."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from gpurental.acceptance.models import AcceptanceRun, RunReason, RunStatus
from gpurental.agent.gpus import NvmlSource
from gpurental.agent.topology import host_topology
from gpurental.fleet.models import HostStatus
from tests.factories import InstanceFactory
from tests.fakes import fake_pynvml

IB_NICS = [
    {"name": f"ib{i}", "speed_mbps": 400000, "kind": "infiniband", "rdma": f"mlx5_{i}"}
    for i in range(4)
] + [{"name": "eno1", "speed_mbps": 25000, "kind": "ethernet", "rdma": None}]


def hgx_topology() -> dict:
    """What an agent on an HGX board reports: read through the fake NVML, NICs as given."""
    fake_pynvml.install(fake_pynvml.nvswitch_layout(8))
    return {**NvmlSource(module=fake_pynvml).topology(), "nics": IB_NICS}


def passed_run(host, fp16_percent: float) -> AcceptanceRun:
    fp16 = {
        "key": "gemm_fp16_tflops",
        "label": "FP16 GEMM",
        "unit": "TFLOPS",
        "measured": 312 * fp16_percent / 100,
        "nominal": 312.0,
        "percent": fp16_percent,
        "passed": True,
        "note": "",
        "previous": None,
        "regressed": False,
    }
    return AcceptanceRun.objects.create(
        host=host,
        reason=RunReason.JOIN,
        status=RunStatus.PASSED,
        image="gpurental/pytorch:2.13.0-cuda",
        threshold="0.850",
        device="cuda",
        figures=[fp16],
        finished_at=timezone.now(),
    )


@pytest.fixture
def hgx(make_host, a100):
    host = make_host("hgx-1", a100, count=8)
    host.topology = hgx_topology()
    host.save(update_fields=["topology"])
    return host


def test_staff_host_page_shows_the_matrix_like_nvidia_smi(client, carol, hgx):
    client.force_login(carol)
    page = client.get(reverse("admin:fleet_host_change", args=[hgx.pk])).content.decode()
    assert 'id="topology-matrix"' in page
    assert page.count('"topo-nv">NVS<') == 8 * 7  # every pair over NVSwitch
    assert page.count('"topo-x">X<') == 8
    assert "NVLink through NVSwitch" in page  # the legend names only the labels used
    assert "across CPU sockets" not in page
    assert "8× A100, NVSwitch, 4× 400 Gb/s InfiniBand, 1× 25 Gb/s" in page


def test_staff_matrix_of_a_pcie_host(client, carol, make_host, a100, tmp_path):
    fake_pynvml.install(fake_pynvml.pcie_layout(8))
    host = make_host("pcie-1", a100, count=8)
    host.topology = host_topology(NvmlSource(module=fake_pynvml), sys_root=str(tmp_path))
    host.save(update_fields=["topology"])
    client.force_login(carol)
    page = client.get(reverse("admin:fleet_host_change", args=[host.pk])).content.decode()
    for label in (">PIX<", ">PXB<", ">SYS<"):
        assert label in page
    assert "No physical NIC reported" in page


def test_a_nic_name_from_the_host_is_escaped(client, carol, hgx):
    hgx.topology["nics"] = [{"name": "<script>x</script>", "speed_mbps": 1000, "kind": "ethernet"}]
    hgx.save(update_fields=["topology"])
    client.force_login(carol)
    page = client.get(reverse("admin:fleet_host_change", args=[hgx.pk])).content.decode()
    assert "<script>x</script>" not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page


def test_staff_history_flags_failing_figures_and_regressions(client, carol, hgx):
    run = passed_run(hgx, 93.0)
    held = passed_run(hgx, 70.0)
    held.status, held.failing = RunStatus.HELD, ["FP16 GEMM"]
    held.figures = [{**held.figures[0], "passed": False, "previous": 290.16, "regressed": True}]
    held.save()
    client.force_login(carol)
    page = client.get(reverse("admin:fleet_host_change", args=[hgx.pk])).content.decode()
    assert 'id="acceptance-history"' in page
    assert "Below threshold" in page and "Passed" in page
    assert "▼ FP16 GEMM" in page  # the regression, named
    detail = client.get(reverse("admin:acceptance_acceptancerun_change", args=[run.pk]))
    assert detail.status_code == 200 and "93.0 %" in detail.content.decode()


def test_staff_action_queues_a_run_and_refuses_a_busy_host(
    client, carol, hgx, sent, make_host, a100, django_capture_on_commit_callbacks
):
    busy = make_host("busy-1", a100, count=8)
    InstanceFactory(host=busy, status="running")
    client.force_login(carol)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("admin:fleet_host_changelist"),
            {"action": "run_acceptance", "_selected_action": [hgx.pk, busy.pk]},
            follow=True,
        )
    page = response.content.decode()
    assert "Acceptance benchmark queued on hgx-1" in page
    assert "Busy-1 has 1 instance(s) on it: drain it" in page  # (the admin capitalises)
    hgx.refresh_from_db()
    busy.refresh_from_db()
    assert hgx.status == HostStatus.ACCEPTANCE and busy.status == HostStatus.ACTIVE
    assert [m["task"] for m in sent] == ["acceptance_run"]


def test_a_new_host_in_the_back_office_starts_in_acceptance(client, carol):
    client.force_login(carol)
    page = client.get(reverse("admin:fleet_host_add")).content.decode()
    assert '<option value="acceptance" selected>' in page


def test_catalog_summarises_host_classes_and_measured_figure(client, hgx, make_host, a100):
    passed_run(hgx, 93.0)
    other = make_host("hgx-2", a100, count=8)
    other.topology = hgx_topology()
    other.save(update_fields=["topology"])
    passed_run(other, 95.0)
    held = make_host("hgx-3", a100, count=8, status=HostStatus.HELD)
    passed_run(held, 50.0)  # held back: in neither the classes nor the figure
    page = client.get(reverse("home")).content.decode()
    assert "8× A100, NVSwitch, 4× 400 Gb/s InfiniBand, 1× 25 Gb/s" in page
    assert "(2 hosts)" in page
    assert "measured 94 % of nominal FP16" in page  # the median of 93 and 95


def test_instance_page_shows_its_hosts_measured_figure_to_the_owner_only(client, alice, bob, hgx):
    passed_run(hgx, 94.0)
    instance = InstanceFactory(user=alice, host=hgx, status="running")
    client.force_login(alice)
    page = client.get(reverse("instance", args=[instance.pk])).content.decode()
    assert "measured 94 % of nominal FP16" in page
    client.force_login(bob)
    assert client.get(reverse("instance", args=[instance.pk])).status_code == 404
