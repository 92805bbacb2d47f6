"""Volumes over the API: created on a host, mounted at launch (which pins the instance to
that host), held by one instance at a time until it ends, deleted only when free."""

from __future__ import annotations

import pytest

from gpurental.rentals.hostcalls import container_spec
from gpurental.rentals.models import Instance
from gpurental.rentals.services import lifecycle as lc
from gpurental.volumes.models import Volume, VolumeEvent
from tests.api.conftest import assert_error

pytestmark = pytest.mark.django_db
URL = "/api/v1/volumes/"


@pytest.fixture
def two_hosts(make_host, a100):
    return make_host("node1", a100, count=8), make_host("node2", a100, count=2)


@pytest.fixture
def launch(as_alice, django_capture_on_commit_callbacks):
    def post(body):
        with django_capture_on_commit_callbacks(execute=True):
            return as_alice.post("/api/v1/instances/", body, format="json")

    return post


def test_a_volume_mounted_at_launch_pins_the_instance_to_its_host(
    as_alice, launch, two_hosts, image, sent
):
    created = as_alice.post(URL, {"name": "data", "size_gb": 20, "host": "node1"}, format="json")
    assert created.status_code == 201, created.content
    body = {
        "gpu_model": "a100",
        "image": image.slug,
        "volumes": [{"volume": "data", "mount_path": "/data"}],
    }
    response = launch(body)
    assert response.status_code == 201, response.content
    # Best fit alone would pick node2 (fewer GPUs left over); the volume is on node1.
    assert response.json()["host"] == "node1"
    volume = Volume.objects.get()
    assert sent[-1]["spec"]["volumes"] == [
        {"name": f"gpurental-vol-{volume.pk}", "path": "/data", "volume": str(volume.pk)}
    ]
    listed = as_alice.get(URL).json()["results"][0]
    assert listed["in_use"] is True and listed["mount_path"] == "/data"

    # Held until that instance ends: a second launch with it is refused, nothing held.
    error = assert_error(launch(body), 400, "invalid", field="volumes")
    assert "is mounted in instance" in error["message"]
    assert Instance.objects.count() == 1
    assert_error(as_alice.delete(f"{URL}{volume.pk}/"), 400, "invalid", field="volume")

    first = lc.instance_terminate(instance=Instance.objects.get(), actor=None)
    lc.instance_report_removed(instance_id=str(first.pk))  # the host confirms: it has ended
    again = launch({**body, "volumes": [{"volume": str(volume.pk), "mount_path": "/mnt/ds"}]})
    assert again.status_code == 201, again.content
    assert sent[-1]["spec"]["volumes"][0]["path"] == "/mnt/ds"
    assert [e.kind for e in VolumeEvent.objects.order_by("id")] == [
        "created",
        "attached",
        "attached",
    ]


@pytest.mark.parametrize(
    ("mount", "says"),
    [
        ({"volume": "nope"}, "you have no volume nope"),
        ({"volume": "data", "mount_path": "relative"}, "must be an absolute path"),
        ({"volume": "data", "mount_path": "/workspace"}, "is the system's or the platform's"),
        ({"volume": "data", "mount_path": "/etc"}, "is the system's or the platform's"),
        ({"volume": "data", "mount_path": "/data/../etc"}, "must be an absolute path"),
    ],
)
def test_a_bad_mount_is_a_400_naming_volumes_before_anything_is_held(
    as_alice, launch, two_hosts, image, sent, mount, says
):
    as_alice.post(URL, {"name": "data", "size_gb": 1, "host": "node1"}, format="json")
    response = launch({"gpu_model": "a100", "image": image.slug, "volumes": [mount]})
    assert response.status_code == 400, response.content
    assert says in response.json()["error"]["message"]
    assert not Instance.objects.exists() and not sent


def test_volumes_on_two_hosts_cannot_go_to_one_instance(as_alice, launch, two_hosts, image):
    as_alice.post(URL, {"name": "a", "size_gb": 1, "host": "node1"}, format="json")
    as_alice.post(URL, {"name": "b", "size_gb": 1, "host": "node2"}, format="json")
    response = launch(
        {
            "gpu_model": "a100",
            "image": image.slug,
            "volumes": [{"volume": "a", "mount_path": "/a"}, {"volume": "b", "mount_path": "/b"}],
        }
    )
    assert "on different hosts (node1, node2)" in response.json()["error"]["message"]


def test_another_customer_cannot_mount_or_see_a_volume(as_alice, as_bob, two_hosts, image):
    volume = as_alice.post(
        URL, {"name": "data", "size_gb": 1, "host": "node1"}, format="json"
    ).json()
    response = as_bob.post(
        "/api/v1/instances/",
        {"gpu_model": "a100", "image": image.slug, "volumes": [{"volume": volume["id"]}]},
        format="json",
    )
    assert response.status_code == 400 and "you have no volume" in response.content.decode()
    assert as_bob.get(f"{URL}{volume['id']}/").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Bad", "size_gb": 1, "host": "node1"}, "name"),
        ({"name": "ok", "size_gb": 0, "host": "node1"}, "size_gb"),
        ({"name": "ok", "size_gb": 1, "host": "nowhere"}, "host"),
    ],
)
def test_a_bad_volume_is_a_400_naming_the_field(as_alice, two_hosts, body, field):
    assert_error(as_alice.post(URL, body, format="json"), 400, "invalid", field=field)
    assert not Volume.objects.exists()


def test_deleting_a_free_volume_removes_its_data_on_its_host(
    as_alice, two_hosts, sent, django_capture_on_commit_callbacks
):
    volume = as_alice.post(
        URL, {"name": "data", "size_gb": 1, "host": "node2"}, format="json"
    ).json()
    with django_capture_on_commit_callbacks(execute=True):
        assert as_alice.delete(f"{URL}{volume['id']}/").status_code == 204
    assert sent[-1] == {
        "task": "volume_remove",
        "queue": "host.node2",
        "volume": f"gpurental-vol-{volume['id']}",
        **{k: sent[-1][k] for k in sent[-1] if k in ("sent_at", "nonce")},
    }
    assert as_alice.get(URL).json()["results"] == []


def test_a_volume_over_its_size_stops_the_instance_that_mounts_it(
    alice, two_hosts, image, a100, sent
):
    from django.utils import timezone

    from gpurental.rentals.services.disk import volumes_size_check
    from gpurental.volumes.services import volume_create

    volume = volume_create(account=alice, name="d", size_gb=1, host=two_hosts[0], actor=alice)
    instance = lc.instance_launch(
        user=alice, image=image, gpu_model=a100, gpu_count=1, volumes=[("d", "/data")]
    )
    lc.instance_report_running(instance_id=str(instance.pk), port=40123, container_id="c")
    assert (
        volumes_size_check(host=two_hosts[0], usage={str(volume.pk): 1024**3}, now=timezone.now())
        == []
    )
    stopped = volumes_size_check(
        host=two_hosts[0], usage={str(volume.pk): 1024**3 + 1, "junk": 5}, now=timezone.now()
    )
    assert stopped == [str(instance.pk)]
    instance.refresh_from_db()
    assert instance.status in ("stopping", "stopped")
    assert "volume d holds 1.00 GB, over its 1 GB" in instance.status_reason
    assert VolumeEvent.objects.filter(kind="over_size").count() == 1


def test_a_volume_says_what_it_costs_a_month(as_alice, two_hosts):
    from decimal import Decimal

    from gpurental.storage.models import StoragePrice

    StoragePrice.objects.update_or_create(kind="volume", defaults={"gb_month": Decimal("0.07")})
    created = as_alice.post(URL, {"name": "data", "size_gb": 200, "host": "node1"}, format="json")
    assert created.status_code == 201, created.content
    listed = as_alice.get(URL).json()["results"]
    assert [(v["name"], v["monthly_cost"], v["currency"]) for v in listed] == [
        ("data", "14.00", "USD")
    ]


def test_a_volume_is_detached_from_a_stopped_instance_for_the_next_launch(
    as_alice, as_bob, launch, two_hosts, image, sent
):
    as_alice.post(URL, {"name": "data", "size_gb": 20, "host": "node1"}, format="json")
    body = {
        "gpu_model": "a100",
        "image": image.slug,
        "volumes": [{"volume": "data", "mount_path": "/data"}],
    }
    first = Instance.objects.get(pk=launch(body).json()["id"])
    volume = Volume.objects.get()
    # Running (pending here): refused, nothing changed.
    error = assert_error(as_alice.post(f"{URL}{volume.pk}/detach/"), 400, "invalid", field="volume")
    assert error["fields"]["volume"] == [
        f"volume data is mounted in instance {first} (pending): stop that instance first"
    ]
    assert_error(as_bob.post(f"{URL}{volume.pk}/detach/"), 404, "not_found")

    lc.instance_stop(instance=first)
    lc.instance_report_stopped(instance_id=str(first.pk))
    detached = as_alice.post(f"{URL}{volume.pk}/detach/")
    assert detached.status_code == 200, detached.content
    assert detached.json()["in_use"] is False and detached.json()["mount_path"] == ""
    assert VolumeEvent.objects.filter(volume=volume, kind="detached").exists()
    assert as_alice.post(f"{URL}{volume.pk}/detach/").status_code == 200  # again: as it is

    # The next launch mounts it; the stopped instance starts again without it.
    second = launch(body)
    assert second.status_code == 201, second.content
    lc.instance_terminate(instance=Instance.objects.get(pk=second.json()["id"]))
    lc.instance_start(instance=first)
    assert "volumes" not in container_spec(Instance.objects.get(pk=first.pk))


def test_a_volume_grows_and_is_charged_at_its_old_size_up_to_then(as_alice, two_hosts, alice):
    from datetime import timedelta

    from django.utils import timezone

    from gpurental.storage.models import StorageCharge

    created = as_alice.post(URL, {"name": "data", "size_gb": 20, "host": "node1"}, format="json")
    volume = Volume.objects.get(pk=created.json()["id"])
    Volume.objects.filter(pk=volume.pk).update(created_at=timezone.now() - timedelta(hours=3))
    grown = as_alice.post(f"{URL}{volume.pk}/resize/", {"size_gb": 50}, format="json")
    assert grown.status_code == 200, grown.content
    assert grown.json()["size_gb"] == 50
    # The three hours before were charged at 20 GB, up to the resize.
    charges = StorageCharge.objects.filter(object_id=volume.pk)
    assert charges and {c.gb for c in charges} == {20}
    assert VolumeEvent.objects.filter(
        volume=volume, kind="resized", reason="20 GB → 50 GB"
    ).exists()
    shrink = assert_error(
        as_alice.post(f"{URL}{volume.pk}/resize/", {"size_gb": 10}, format="json"),
        400,
        "invalid",
        field="size_gb",
    )
    assert "larger than its 50 GB" in shrink["fields"]["size_gb"][0]
