"""Snapshots over the API, without a host: what the control plane asks (a presigned
multipart upload sealed for the volume's host), what it makes of the host's reports, restores into a new
volume on another host, refusals that name the field, and nobody else's snapshots.
tests/volumes/test_snapshots_on_docker.py runs the host's side for real."""

from __future__ import annotations

import pytest
from django.utils import timezone

from gpurental import protocol
from gpurental.fleet import hostlink
from gpurental.rentals.services import lifecycle as lc
from gpurental.storage.services import stored_things
from gpurental.volumes.models import Snapshot, Volume
from gpurental.volumes.snapshots import volume_report_receive
from tests.api.conftest import assert_error
from tests.messages import signed

pytestmark = pytest.mark.django_db
URL = "/api/v1/snapshots/"
DIGEST = "ab" * 32


@pytest.fixture
def hosts(make_host, a100, image):
    return make_host("node1", a100), make_host("node2", a100)


@pytest.fixture
def volume(as_alice, hosts):
    as_alice.post("/api/v1/volumes/", {"name": "data", "size_gb": 20, "host": "node1"})
    return Volume.objects.get(name="data")


@pytest.fixture
def post(as_alice, django_capture_on_commit_callbacks):
    def call(url, body):
        with django_capture_on_commit_callbacks(execute=True):
            return as_alice.post(url, body, format="json")

    return call


def report(host, kind, **data):
    volume_report_receive(message=signed(host, kind=kind, data=data), now=timezone.now())


def sealed(host, message) -> dict:
    return protocol.secrets_open(hostlink.keys_of(host.keys_sealed).spec, message["sealed"])


def object_url(host, message) -> str:
    return sealed(host, message)["object_url"]


def test_a_snapshot_is_uploaded_by_its_host_then_restored_on_another(
    snapshots_on, volume, hosts, post, sent
):
    node1, node2 = hosts
    created = post(URL, {"volume": "data", "name": "before-training"})
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["status"] == "saving" and body["source_name"] == "data"
    [message] = sent
    assert message["task"] == "volume_snapshot" and message["queue"] == "host.node1"
    assert message["volume"] == volume.docker_name
    upload = sealed(node1, message)["upload"]
    # A 20 GB volume: parts of 64 MiB (SNAPSHOT_PART_MB) for up to 26 GB of tar.
    assert upload["part_size"] == 64 * 1024**2 and len(upload["parts"]) == 416
    for url in (*upload["parts"][:2], upload["complete"], upload["abort"]):
        assert url.startswith(f"{snapshots_on['endpoint']}/snapshots/snapshots/")
        assert "Signature=" in url and "operator-secret" not in url  # presigned, no key
    assert "partNumber=2" in upload["parts"][1] and "uploadId=" in upload["complete"]

    snapshot = Snapshot.objects.get()
    report(node2, "snapshotted", snapshot_id=str(snapshot.pk), size_bytes=5, sha256=DIGEST)
    snapshot.refresh_from_db()
    assert snapshot.status == "saving"  # another host's word counts for nothing
    report(
        node1, "snapshotted", snapshot_id=str(snapshot.pk), size_bytes=3 * 1024**3, sha256=DIGEST
    )
    snapshot.refresh_from_db()
    assert (snapshot.status, snapshot.size_bytes, snapshot.sha256) == ("ready", 3 * 1024**3, DIGEST)
    assert any(
        s.kind == "snapshot" and s.object_id == snapshot.pk for s in stored_things(timezone.now())
    )

    # Too small for what it holds: a 400 naming size_gb, nothing made.
    small = post(f"{URL}{snapshot.pk}/restore/", {"host": "node2", "name": "copy", "size_gb": 2})
    error = assert_error(small, 400, "invalid", field="size_gb")
    assert "from 3 (the snapshot's size)" in error["fields"]["size_gb"][0]
    sent.clear()
    restored = post(f"{URL}{snapshot.pk}/restore/", {"host": "node2", "name": "copy"})
    assert restored.status_code == 201, restored.content
    copy = Volume.objects.get(name="copy")
    assert restored.json()["status"] == "restoring" and restored.json()["size_gb"] == 20
    assert (copy.host, copy.restored_from) == (node2, snapshot)
    [message] = sent
    assert message["task"] == "volume_restore" and message["queue"] == "host.node2"
    assert message["sha256"] == DIGEST and message["volume_id"] == str(copy.pk)
    assert object_url(node2, message).startswith(f"{snapshots_on['endpoint']}/snapshots/")

    # Not mountable until its host has unpacked it.
    launch = post(
        "/api/v1/instances/",
        {"gpu_model": "a100", "image": "jupyter-cpu", "volumes": [{"volume": "copy"}]},
    )
    assert (
        "still being restored" in assert_error(launch, 400, "invalid", field="volumes")["message"]
    )
    report(node2, "restored", volume_id=str(copy.pk))
    copy.refresh_from_db()
    assert copy.status == "available" and copy.events.filter(kind="restored").exists()


def test_a_failed_upload_or_restore_says_why(snapshots_on, volume, hosts, post):
    node1, node2 = hosts
    post(URL, {"volume": "data", "name": "s"})
    snapshot = Snapshot.objects.get()
    report(node1, "snapshot_failed", snapshot_id=str(snapshot.pk), reason="HTTP 403 from storage")
    snapshot.refresh_from_db()
    assert (snapshot.status, snapshot.status_reason) == ("failed", "HTTP 403 from storage")
    error = assert_error(
        post(f"{URL}{snapshot.pk}/restore/", {"host": "node2", "name": "c"}),
        400,
        "invalid",
        field="snapshot",
    )
    assert "only a ready one restores" in error["fields"]["snapshot"][0]


def test_refusals_name_the_field(snapshots_on, volume, hosts, post, alice, a100, image, settings):
    assert_error(post(URL, {"volume": "nope", "name": "s"}), 400, "invalid", field="volume")
    assert_error(post(URL, {"volume": "data", "name": "Bad Name"}), 400, "invalid", field="name")
    instance = lc.instance_launch(
        user=alice, image=image, gpu_model=a100, gpu_count=1, volumes=[("data", "/data")]
    )
    error = assert_error(post(URL, {"volume": "data", "name": "s"}), 400, "invalid", field="volume")
    assert f"mounted in instance {instance} (pending): stop that instance first" in error["message"]
    settings.SNAPSHOT_S3_BUCKET = ""
    error = assert_error(post(URL, {"volume": "data", "name": "s"}), 400, "invalid", field="volume")
    assert "SNAPSHOT_S3_BUCKET" in error["message"]
    assert not Snapshot.objects.exists()


def test_another_customer_sees_none_and_a_delete_removes_the_object(
    snapshots_on, volume, hosts, post, as_alice, as_bob, object_storage_s3
):
    node1, _ = hosts
    post(URL, {"volume": "data", "name": "s"})
    snapshot = Snapshot.objects.get()
    s3 = object_storage_s3
    s3.put_object(Bucket="snapshots", Key=snapshot.object_key, Body=b"tar")
    report(node1, "snapshotted", snapshot_id=str(snapshot.pk), size_bytes=3, sha256=DIGEST)
    assert as_bob.get(URL).json()["results"] == []
    assert_error(as_bob.get(f"{URL}{snapshot.pk}/"), 404, "not_found")
    assert_error(as_bob.delete(f"{URL}{snapshot.pk}/"), 404, "not_found")
    assert as_alice.get(URL).json()["results"][0]["monthly_cost"] == "0.00"
    assert as_alice.delete(f"{URL}{snapshot.pk}/").status_code == 204
    snapshot.refresh_from_db()
    assert snapshot.status == "deleted"
    assert s3.list_objects_v2(Bucket="snapshots", Prefix=snapshot.object_key)["KeyCount"] == 0


def test_a_stopped_instance_s_workspace_snapshot_starts_a_new_instance_anywhere(
    snapshots_on, hosts, post, as_alice, alice, a100, image, sent
):
    node1, _ = hosts
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    refused = post(URL, {"instance": str(instance.pk), "name": "ws"})
    assert "stop it first" in assert_error(refused, 400, "invalid", field="instance")["message"]
    lc.instance_stop(instance=instance)
    lc.instance_report_stopped(instance_id=str(instance.pk))
    both = post(URL, {"instance": str(instance.pk), "volume": "x", "name": "ws"})
    assert_error(both, 400, "invalid", field="volume")
    sent.clear()
    created = post(URL, {"instance": str(instance.pk), "name": "ws"})
    assert created.status_code == 201, created.content
    assert created.json()["instance"] == str(instance.pk) and created.json()["volume"] is None
    [message] = sent
    assert (
        message["task"] == "volume_snapshot" and message["volume"] == f"gpurental-ws-{instance.pk}"
    )
    snapshot = Snapshot.objects.get()
    # While its host reads the files, they stay as they are: no start, no terminate.
    for action in ("start", "terminate"):
        busy = as_alice.post(f"/api/v1/instances/{instance.pk}/{action}/")
        error = assert_error(busy, 409, "invalid_state", field="status")
        assert "while its /workspace is being saved as snapshot ws" in error["message"]
    host = instance.host
    host.token = node1.token if host == node1 else hosts[1].token
    report(host, "snapshotted", snapshot_id=str(snapshot.pk), size_bytes=1024, sha256=DIGEST)
    snapshot.refresh_from_db()
    assert snapshot.status == "ready"
    # A workspace snapshot is not a volume's: no restore into a volume.
    error = assert_error(
        post(f"{URL}{snapshot.pk}/restore/", {"host": "node2", "name": "v"}),
        400,
        "invalid",
        field="snapshot",
    )
    assert "workspace_from" in error["message"]

    sent.clear()
    launched = post(
        "/api/v1/instances/",
        {"gpu_model": "a100", "image": image.slug, "workspace_from": "ws"},
    )
    assert launched.status_code == 201, launched.content
    [start] = sent
    assert start["spec"]["workspace_from"]["sha256"] == DIGEST
    assert start["spec"]["workspace_from"]["url"].startswith(f"{snapshots_on['endpoint']}/")
    unknown = post(
        "/api/v1/instances/", {"gpu_model": "a100", "image": image.slug, "workspace_from": "nope"}
    )
    assert_error(unknown, 400, "invalid", field="workspace_from")


def test_progress_shows_on_the_snapshot_and_the_restored_volume(
    snapshots_on, volume, hosts, post, as_alice
):
    node1, node2 = hosts
    post(URL, {"volume": "data", "name": "s"})
    snapshot = Snapshot.objects.get()
    busy = as_alice.delete(f"/api/v1/volumes/{volume.pk}/")
    assert (
        "being saved as snapshot s" in assert_error(busy, 400, "invalid", field="volume")["message"]
    )
    report(node1, "progress", snapshot_id=str(snapshot.pk), message="uploading", percent=42.4)
    snapshot.refresh_from_db()
    assert snapshot.status_reason == "uploading, 42 %"
    report(node1, "snapshotted", snapshot_id=str(snapshot.pk), size_bytes=3, sha256=DIGEST)
    post(f"{URL}{snapshot.pk}/restore/", {"host": "node2", "name": "copy"})
    copy = Volume.objects.get(name="copy")
    report(node2, "progress", volume_id=str(copy.pk), message="downloading", percent=7)
    copy.refresh_from_db()
    assert (copy.status, copy.status_reason) == ("restoring", "downloading, 7 %")


def test_an_upload_is_planned_in_parts_that_grow_rather_than_multiply():
    from gpurental.volumes.objectstore import MiB, TooLarge, upload_plan

    assert upload_plan(10 * MiB, 64 * MiB) == (64 * MiB, 1)
    assert upload_plan(26 * 1024**3 + 1, 64 * MiB) == (64 * MiB, 417)
    part, count = upload_plan(4 * 1024**4, 64 * MiB)  # 4 TiB: 1,000 parts of ~4.1 GiB
    assert count == 1000 and part % MiB == 0 and part * count >= 4 * 1024**4
    with pytest.raises(TooLarge):
        upload_plan(6 * 1024**4, 64 * MiB)  # parts over 5 GiB


def test_a_volume_too_large_for_one_object_is_refused_naming_the_field(
    snapshots_on, hosts, post, as_alice
):
    assert as_alice.post("/api/v1/volumes/", {"name": "huge", "size_gb": 8000, "host": "node1"})
    refused = post(URL, {"volume": "huge", "name": "all"})
    error = assert_error(refused, 400, "invalid", field="volume")
    assert "more than the object storage takes in one upload" in error["fields"]["volume"][0]
    assert not Snapshot.objects.exists()


def test_a_group_replica_s_workspace_is_left_to_its_group(
    snapshots_on, hosts, post, alice, a100, image
):
    from tests.factories import GroupFactory

    replica = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    lc.instance_stop(instance=replica)
    lc.instance_report_stopped(instance_id=str(replica.pk))
    replica.group, replica.group_role = GroupFactory(user=alice), "warm"
    replica.save(update_fields=["group", "group_role"])
    refused = post(URL, {"instance": str(replica.pk), "name": "ws"})
    error = assert_error(refused, 400, "invalid", field="instance")
    assert "managed by its group" in error["message"] and not Snapshot.objects.exists()


def test_a_snapshot_or_restore_that_can_no_longer_finish_fails_and_frees_what_it_held(
    snapshots_on,
    volume,
    hosts,
    post,
    as_alice,
    sent,
    django_capture_on_commit_callbacks,
    object_storage_s3,
):
    from datetime import timedelta

    from gpurental.volumes.snapshots import transfers_expire

    node1, node2 = hosts
    now = timezone.now()
    post(URL, {"volume": "data", "name": "s"})
    snapshot = Snapshot.objects.get()

    def beating(at):
        node1.last_heartbeat_at = at
        node1.save(update_fields=["last_heartbeat_at"])
        return at

    assert transfers_expire(now=beating(now + timedelta(hours=5))) == {
        "snapshots": 0,
        "restores": 0,
    }
    # A 20 GB volume's URLs live 6 h: past them, the upload cannot finish.
    assert transfers_expire(now=beating(now + timedelta(hours=7))) == {
        "snapshots": 1,
        "restores": 0,
    }
    snapshot.refresh_from_db()
    assert snapshot.status == "failed" and "did not finish within 6 h" in snapshot.status_reason
    s3 = object_storage_s3
    pending = s3.list_multipart_uploads(Bucket="snapshots", Prefix=snapshot.object_key)
    assert not pending.get("Uploads")  # its parts aborted
    assert as_alice.delete(f"/api/v1/volumes/{volume.pk}/").status_code == 204  # free again

    # A restore whose host went silent for HOST_LOST_AFTER fails, and its host is asked to
    # remove what it unpacked.
    ready = Snapshot.objects.create(
        account=snapshot.account,
        name="r",
        volume=volume,
        object_key="snapshots/x.tar",
        status="ready",
        size_bytes=3,
        sha256=DIGEST,
        ready_at=now,
    )
    restored = post(f"{URL}{ready.pk}/restore/", {"host": "node2", "name": "copy"})
    assert restored.status_code == 201, restored.content
    node2.last_heartbeat_at = now - timedelta(hours=1)
    node2.save(update_fields=["last_heartbeat_at"])
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert transfers_expire(now=now) == {"snapshots": 0, "restores": 1}
    copy = Volume.objects.get(name="copy")
    assert copy.status == "failed" and "went silent" in copy.status_reason
    assert [(m["task"], m["volume"]) for m in sent] == [("volume_remove", copy.docker_name)]
