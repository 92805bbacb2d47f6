"""The console's Volumes page: empty, full and broken; another customer's is a 404."""

import pytest
from django.urls import reverse

from gpurental.volumes.models import Volume
from gpurental.volumes.services import volume_create

pytestmark = pytest.mark.django_db


def test_create_list_and_delete_a_volume(client, alice, a100, make_host, sent):
    make_host("node1", a100)
    client.force_login(alice)
    assert "No volumes yet." in client.get(reverse("volumes")).text
    page = client.post(
        reverse("volumes"), {"name": "ds", "size_gb": 20, "host": "node1"}, follow=True
    ).text
    assert "Volume ds created." in page and 'id="volumes"' in page and "20 GB" in page
    volume = Volume.objects.get()
    page = client.post(reverse("volume_delete", args=[volume.pk]), follow=True).text
    assert "Volume ds deleted with its data." in page and "No volumes yet." in page


def test_a_bad_volume_says_why_on_its_field(client, alice, a100, make_host):
    make_host("node1", a100)
    client.force_login(alice)
    page = client.post(reverse("volumes"), {"name": "Bad Name", "size_gb": 1, "host": "node1"}).text
    assert "must be 1 to 63 lowercase letters" in page
    assert not Volume.objects.exists()


def test_another_customer_cannot_delete_it(client, alice, bob, a100, make_host):
    from gpurental.volumes.services import volume_create

    host = make_host("node1", a100)
    volume = volume_create(account=alice, name="ds", size_gb=1, host=host, actor=alice)
    client.force_login(bob)
    assert client.post(reverse("volume_delete", args=[volume.pk])).status_code == 404
    assert 'id="volumes"' not in client.get(reverse("volumes")).text


def test_the_page_says_what_each_volume_and_a_stopped_workspace_cost_a_month(
    client, alice, a100, make_host, sent, settings
):
    """At the migration's prices: 0.07 per GB-month for a volume, 0.20 for a workspace."""
    settings.BILLING_CURRENCY = "USD"
    make_host("node1", a100)
    client.force_login(alice)
    page = client.post(
        reverse("volumes"), {"name": "ds", "size_gb": 300, "host": "node1"}, follow=True
    ).text
    assert "A volume costs $0.0700 per GB a month" in page
    assert '<td class="cost">$21.00</td>' in page  # 300 GB × 0.07


def test_an_instance_page_says_what_its_workspace_costs_while_stopped(
    client, alice, a100, image, make_host, sent, settings
):
    from gpurental.rentals.services import lifecycle as lc

    settings.BILLING_CURRENCY = "USD"
    make_host("node1", a100)
    instance = lc.instance_launch(user=alice, gpu_model=a100, gpu_count=1, image=image)
    client.force_login(alice)
    page = client.get(reverse("instance", args=[instance.pk])).text
    cost = "$%.2f" % (0.20 * instance.plan.disk_gb)
    assert f"its workspace ({instance.plan.disk_gb} GB) is kept, at {cost} a month" in page


def test_detach_from_a_stopped_instance(client, alice, a100, make_host, sent):
    from gpurental.rentals.services import lifecycle as lc
    from tests.factories import ImageTemplateFactory

    host = make_host("node1", a100)
    volume = volume_create(account=alice, name="data", size_gb=10, host=host, actor=alice)
    instance = lc.instance_launch(
        user=alice,
        image=ImageTemplateFactory(),
        gpu_model=a100,
        gpu_count=1,
        volumes=[("data", "/data")],
    )
    client.force_login(alice)
    assert 'class="detach"' not in client.get(reverse("volumes")).text  # pending: not yet
    lc.instance_stop(instance=instance)
    lc.instance_report_stopped(instance_id=str(instance.pk))
    assert 'class="detach"' in client.get(reverse("volumes")).text
    page = client.post(reverse("volume_detach", args=[volume.pk]), follow=True).text
    assert "Volume data detached" in page
    volume.refresh_from_db()
    assert volume.instance_id is None


def test_snapshot_restore_and_delete_from_the_page(
    client, alice, a100, make_host, image, sent, snapshots_on, django_capture_on_commit_callbacks
):
    from django.utils import timezone

    from gpurental.volumes.models import Snapshot
    from gpurental.volumes.snapshots import volume_report_receive
    from tests.messages import signed

    host = make_host("node1", a100)
    make_host("node2", a100)
    volume = volume_create(account=alice, name="data", size_gb=10, host=host, actor=alice)
    client.force_login(alice)
    assert "No snapshots yet" in client.get(reverse("volumes")).text
    with django_capture_on_commit_callbacks(execute=True):
        page = client.post(
            reverse("snapshot_create", args=[volume.pk]), {"name": "first"}, follow=True
        ).text
    assert "Snapshot first of data requested" in page and "Saving" in page
    assert 'http-equiv="refresh"' in page  # the progress shows as it goes
    assert sent[-1]["task"] == "volume_snapshot"
    snapshot = Snapshot.objects.get()
    volume_report_receive(
        message=signed(
            host,
            kind="snapshotted",
            data={"snapshot_id": str(snapshot.pk), "size_bytes": 2048, "sha256": "cd" * 32},
        ),
        now=timezone.now(),
    )
    page = client.get(reverse("volumes")).text
    assert 'class="inline restore"' in page and "<option>node2</option>" in page
    with django_capture_on_commit_callbacks(execute=True):
        page = client.post(
            reverse("snapshot_restore", args=[snapshot.pk]),
            {"host": "node2", "name": "copy"},
            follow=True,
        ).text
    assert "Volume copy is being restored on node2" in page
    assert Volume.objects.get(name="copy").status == "restoring"
    assert sent[-1]["task"] == "volume_restore" and sent[-1]["queue"] == "host.node2"
    bad = client.post(
        reverse("snapshot_restore", args=[snapshot.pk]),
        {"host": "node2", "name": "copy"},
        follow=True,
    ).text
    assert "you already have a volume copy" in bad
    gone = client.post(reverse("snapshot_delete", args=[snapshot.pk]), follow=True).text
    assert "Snapshot first deleted" in gone


def test_the_launch_form_mounts_a_free_volume_on_its_host(
    client, alice, a100, make_host, image, sent
):
    from gpurental.rentals.models import Instance

    make_host("node1", a100)
    node2 = make_host("node2", a100)
    volume_create(account=alice, name="datasets", size_gb=10, host=node2, actor=alice)
    client.force_login(alice)
    page = client.get(reverse("launch")).text
    assert '<option value="datasets">datasets (10 GB, node2)</option>' in page
    base = {"gpu_model": a100.slug, "gpu_count": 1, "image": image.slug, "volume": "datasets"}
    refused = client.post(reverse("launch"), {**base, "mount_path": "/etc"})
    assert refused.status_code == 200 and "/etc" in refused.text
    assert not Instance.objects.exists()
    response = client.post(reverse("launch"), {**base, "mount_path": "/mnt/ds"})
    assert response.status_code == 302, response.content[:500]
    instance = Instance.objects.get()
    volume = Volume.objects.get(name="datasets")
    assert instance.host == node2 and (volume.instance, volume.mount_path) == (instance, "/mnt/ds")
    assert "datasets" not in client.get(reverse("launch")).text  # held now


def test_a_stopped_instance_s_workspace_snapshot_then_a_launch_from_it(
    client, alice, a100, make_host, image, sent, snapshots_on, django_capture_on_commit_callbacks
):
    from django.utils import timezone

    from gpurental.rentals.models import Instance
    from gpurental.rentals.services import lifecycle as lc
    from gpurental.volumes.models import Snapshot
    from gpurental.volumes.snapshots import volume_report_receive
    from tests.messages import signed

    host = make_host("node1", a100)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    client.force_login(alice)
    assert 'id="snapshot-workspace"' not in client.get(reverse("instance", args=[instance.pk])).text
    lc.instance_stop(instance=instance)
    lc.instance_report_stopped(instance_id=str(instance.pk))
    assert 'id="snapshot-workspace"' in client.get(reverse("instance", args=[instance.pk])).text
    with django_capture_on_commit_callbacks(execute=True):
        page = client.post(
            reverse("workspace_snapshot", args=[instance.pk]), {"name": "ws"}, follow=True
        ).text
    assert "Snapshot ws of its /workspace requested" in page
    snapshot = Snapshot.objects.get()
    volume_report_receive(
        message=signed(
            host,
            kind="snapshotted",
            data={"snapshot_id": str(snapshot.pk), "size_bytes": 10, "sha256": "ef" * 32},
        ),
        now=timezone.now(),
    )
    volumes_page = client.get(reverse("volumes")).text
    assert f"/workspace of {instance}" in volumes_page and "workspace_from=ws" in volumes_page
    form = client.get(reverse("launch"), {"workspace_from": "ws"}).text
    assert '<option value="ws" selected>ws</option>' in form
    response = client.post(
        reverse("launch"),
        {"gpu_model": a100.slug, "gpu_count": 1, "image": image.slug, "workspace_from": "ws"},
    )
    assert response.status_code == 302, response.content[:300]
    clone = Instance.objects.exclude(pk=instance.pk).get()
    assert clone.workspace_from == snapshot
