"""Zones (gpurental/fleet/zones.py): hosts carry a zone and region; a launch that names a
zone is placed only there, a volume lives in one zone and pins its instances to it, an
elastic group spreads its replicas over its zones, the catalog shows capacity per zone,
and a lost instance is recovered in its zone, else in another zone of its region."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from gpurental.accounts.models import AuditEvent
from gpurental.fleet.models import Host
from gpurental.fleet.zones import host_set_zone, zone_create
from gpurental.groups import services as groups
from gpurental.rentals.exceptions import NoCapacity, RentalError
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.rentals.services.reconcile import fleet_reconcile
from tests.api.conftest import assert_error
from tests.factories import ImageTemplateFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def zones(db):
    return {
        "a": zone_create(name="east-1a", region="east-1", label="East 1A"),
        "b": zone_create(name="east-1b", region="east-1"),
        "w": zone_create(name="west-1a", region="west-1"),
    }


@pytest.fixture
def fleet(zones, make_host, a100):
    """node-a (2 GPUs, east-1a), node-b (4 GPUs, east-1b), node-w (8, west-1a)."""
    hosts = {}
    for key, name, count in (("a", "node-a", 2), ("b", "node-b", 4), ("w", "node-w", 8)):
        hosts[key] = host_set_zone(host=make_host(name, a100, count=count), zone=zones[key])
    return hosts


def test_a_launch_in_a_zone_lands_only_there_and_says_so(fleet, zones, alice, image, a100, sent):
    instance = lc.instance_launch(
        user=alice, image=image, gpu_model=a100, gpu_count=2, zone=zones["b"]
    )
    assert (instance.host, instance.zone) == (fleet["b"], zones["b"])
    assert (
        "launched on node-b in zone east-1b"
        in instance.events.get(kind="transition", to_status="pending").reason
    )
    # Best fit alone would have taken node-a (2 free, the tightest): the zone decides.
    anywhere = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=2)
    assert anywhere.host == fleet["a"] and anywhere.zone is None


def test_no_capacity_in_the_zone_names_it_and_what_other_zones_have(
    fleet, zones, alice, image, a100, sent
):
    with pytest.raises(NoCapacity) as refused:
        lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=4, zone=zones["a"])
    assert refused.value.field == "gpu_count"
    assert "no 4× A100 free in zone east-1a" in refused.value.message
    assert "other zones have 8 together" in refused.value.message
    assert not Instance.objects.exists()


def test_a_volume_lives_in_one_zone_and_a_launch_elsewhere_is_refused(
    fleet, zones, as_alice, image, sent
):
    created = as_alice.post("/api/v1/volumes/", {"name": "data", "size_gb": 10, "zone": "east-1b"})
    assert created.status_code == 201, created.json()
    assert (created.json()["host"], created.json()["zone"]) == ("node-b", "east-1b")

    body = {
        "gpu_model": "a100",
        "gpu_count": 1,
        "image": "jupyter-cpu",
        "zone": "east-1a",
        "volumes": [{"volume": "data", "mount_path": "/data"}],
    }
    refused = as_alice.post("/api/v1/instances/", body, format="json")
    assert_error(refused, 400, "invalid", field="zone")
    assert "volume data is in zone east-1b, and the launch asks for zone east-1a" in str(
        refused.json()
    )
    assert not Instance.objects.exists()

    body["zone"] = "east-1b"
    launched = as_alice.post("/api/v1/instances/", body, format="json")
    assert launched.status_code == 201, launched.json()
    assert (launched.json()["host"], launched.json()["zone"]) == ("node-b", "east-1b")


def test_bad_zones_are_refused_naming_the_field(fleet, as_alice, image, sent):
    refused = as_alice.post(
        "/api/v1/instances/", {"gpu_model": "a100", "image": "jupyter-cpu", "zone": "mars-1"}
    )
    assert_error(refused, 400, "invalid", field="zone")
    assert "there is no zone 'mars-1'; zones: east-1a, east-1b, west-1a" in str(refused.json())
    both = as_alice.post(
        "/api/v1/volumes/", {"name": "d", "size_gb": 1, "zone": "east-1a", "host": "node-a"}
    )
    assert_error(both, 400, "invalid", field="host")
    unknown = as_alice.post("/api/v1/volumes/", {"name": "d", "size_gb": 1, "zone": "mars-1"})
    assert_error(unknown, 400, "invalid", field="zone")


def test_a_zone_with_no_active_host_takes_no_volume(zones, as_alice):
    refused = as_alice.post("/api/v1/volumes/", {"name": "d", "size_gb": 1, "zone": "west-1a"})
    assert_error(refused, 400, "invalid", field="zone")
    assert "zone west-1a has no active host now" in str(refused.json())


def test_the_catalog_shows_capacity_per_zone(fleet, zones, alice, image, a100, as_alice, sent):
    lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=2, zone=zones["b"])
    Host.objects.filter(pk=fleet["w"].pk).update(
        last_heartbeat_at=timezone.now() - timedelta(hours=1)
    )
    found = as_alice.get(f"/api/v1/gpu-models/{a100.slug}/").json()
    assert found["zones"] == [
        {
            "zone": "east-1a",
            "region": "east-1",
            "label": "East 1A",
            "gpus_free": 2,
            "gpus_total": 2,
        },
        {"zone": "east-1b", "region": "east-1", "label": "", "gpus_free": 2, "gpus_total": 4},
        # Silent: its GPUs count, none is free (it takes no launches now).
        {"zone": "west-1a", "region": "west-1", "label": "", "gpus_free": 0, "gpus_total": 8},
    ]
    home = as_alice.get("/").content.decode()
    assert "East 1A: 2 / 2" in home and "east-1b: 2 / 4" in home


def group_ticked(user, **spec):
    """An A100 group over east-1a and east-1b (unless ``spec`` says), after one tick."""
    ImageTemplateFactory(slug="serving-echo", port=8000, http_ports=[8000])
    body = {"name": "inference", "instance_type": "A100", "image": "serving-echo"}
    group = groups.group_apply(user=user, source={**body, **spec}).group
    groups.group_tick(group_id=group.pk)
    return group


def test_a_group_spreads_its_replicas_over_its_zones(fleet, zones, alice, a100, sent):
    group = group_ticked(
        alice, min_nodes=2, max_nodes=4, zones=["east-1a", "east-1b"], warm_pool={"size": 2}
    )
    placed = sorted(
        (r.group_role, r.zone.name, r.host.name) for r in Instance.objects.filter(group=group)
    )
    assert placed == [
        ("serving", "east-1a", "node-a"),
        ("serving", "east-1b", "node-b"),
        ("warm", "east-1a", "node-a"),
        ("warm", "east-1b", "node-b"),
    ]
    assert group.spec["zones"] == ["east-1a", "east-1b"]


def test_a_group_zone_with_no_room_spills_into_its_other_zones(fleet, zones, alice, a100, sent):
    group = group_ticked(alice, gpu_count=2, min_nodes=3, max_nodes=3, zones=["east-1a", "east-1b"])
    hosts = sorted(r.host.name for r in Instance.objects.filter(group=group))
    assert hosts == ["node-a", "node-b", "node-b"]  # node-a holds one 2-GPU replica


def test_a_group_spec_naming_an_unknown_zone_is_refused(zones, alice, a100):
    ImageTemplateFactory(slug="serving-echo", port=8000, http_ports=[8000])
    body = {
        "name": "inference",
        "instance_type": "A100",
        "image": "serving-echo",
        "zones": ["east-1a", "nowhere"],
    }
    with pytest.raises(RentalError) as refused:
        groups.group_apply(user=alice, source=body)
    assert refused.value.field == "zones[1]"
    with pytest.raises(RentalError) as twice:
        groups.group_apply(user=alice, source={**body, "zones": ["east-1a", "east-1a"]})
    assert twice.value.field == "zones[1]"


def test_a_lost_instance_is_recovered_in_its_zone_else_its_region(
    zones, make_host, alice, image, a100, sent, settings, django_capture_on_commit_callbacks
):
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    lost = host_set_zone(host=make_host("a1", a100, count=2, last_heartbeat_at=t0), zone=zones["a"])
    host_set_zone(host=make_host("w1", a100, count=8), zone=zones["w"])  # another region
    east_b = host_set_zone(host=make_host("b1", a100, count=2), zone=zones["b"])
    old = lc.instance_launch(
        user=alice,
        image=image,
        gpu_model=a100,
        gpu_count=2,
        zone=zones["a"],
        auto_recover=True,
        now=t0,
    )
    lc.instance_report_running(instance_id=str(old.pk), port=4000, container_id="c", now=t0)
    assert old.host == lost

    with django_capture_on_commit_callbacks(execute=True):
        fleet_reconcile(now=t0 + timedelta(seconds=settings.HOST_LOST_AFTER + 1))
    old.refresh_from_db()
    assert old.status == InstanceStatus.LOST
    new = Instance.objects.get(recovered_from=old)
    # east-1a has no other host: the next zone of its region, never west-1.
    assert (new.host, new.zone) == (east_b, zones["b"])
    assert "in zone east-1b" in old.events.get(step="auto_recovered").reason


def test_operators_add_zones_and_hosts_in_them_and_it_is_audited(db, capsys):
    call_command("zone_add", "east-1a", "--region", "east-1", "--label", "East 1A")
    call_command("host_add", "gpu-1", "--address", "10.0.0.5", "--zone", "east-1a")
    assert Host.objects.get(name="gpu-1").zone.name == "east-1a"
    assert AuditEvent.objects.filter(action="host.zone").exists()
    assert AuditEvent.objects.filter(action="zone.create").exists()
    with pytest.raises(CommandError, match="zone: there is no zone 'nowhere'"):
        call_command("host_add", "gpu-2", "--address", "10.0.0.6", "--zone", "nowhere")
    assert not Host.objects.filter(name="gpu-2").exists()
    with pytest.raises(CommandError, match="name"):
        call_command("zone_add", "east-1a", "--region", "east-1")
