"""Snapshots for real: a host agent tars a volume through the Docker Engine, uploads it to
an S3 API server (moto's, on 127.0.0.1) over a presigned URL, and restores it into a new
volume, owners and all; a snapshot whose digest does not match restores nothing."""

from __future__ import annotations

import pytest

from gpurental.testing.agent_process import wait_for
from gpurental.volumes.models import Snapshot, SnapshotStatus, Volume, VolumeStatus
from gpurental.volumes.services import volume_create
from gpurental.volumes.snapshots import snapshot_create, volume_restore
from tests.agent.conftest import JUPYTER_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


def in_volume(docker_client, volume: Volume, script: str) -> str:
    """Run ``script`` in a throwaway container with the volume at /v, as the customer's
    root would (the engine's user namespace applies)."""
    out = docker_client.containers.run(
        JUPYTER_IMAGE,
        ["sh", "-c", script],
        entrypoint=[],
        volumes={volume.docker_name: {"bind": "/v", "mode": "rw"}},
        network_disabled=True,
        remove=True,
    )
    return out.decode()


def test_a_volume_snapshotted_to_object_storage_restores_into_a_new_volume(
    agent, alice, docker_client, snapshots_on, settings, object_storage_s3
):
    settings.SNAPSHOT_PART_MB = 5  # S3's least: 12 MB go up in 3 parts
    host = agent.host
    volume = volume_create(account=alice, name="data", size_gb=2, host=host, actor=alice)
    in_volume(
        docker_client,
        volume,
        "mkdir -p /v/ds && head -c 12000000 /dev/urandom > /v/ds/blob && echo kept > /v/note "
        "&& chown 1000:1000 /v/note && sha256sum /v/ds/blob > /v/sum",
    )

    snapshot = snapshot_create(volume=volume, name="first", actor=alice)
    wait_for(
        lambda: Snapshot.objects.get(pk=snapshot.pk).status != SnapshotStatus.SAVING,
        60,
        "the snapshot",
        agent,
    )
    snapshot.refresh_from_db()
    assert snapshot.status == SnapshotStatus.READY, snapshot.status_reason
    assert snapshot.size_bytes > 12_000_000 and len(snapshot.sha256) == 64
    s3 = object_storage_s3
    head = s3.head_object(Bucket="snapshots", Key=snapshot.object_key)
    assert head["ContentLength"] == snapshot.size_bytes
    assert head["ETag"].endswith('-3"')  # a multipart upload's, of 3 parts
    pending = s3.list_multipart_uploads(Bucket="snapshots", Prefix=snapshot.object_key)
    assert not pending.get("Uploads")

    copy = volume_restore(snapshot=snapshot, host=host, name="copy", actor=alice)
    assert copy.status == VolumeStatus.RESTORING
    wait_for(
        lambda: Volume.objects.get(pk=copy.pk).status != VolumeStatus.RESTORING,
        60,
        "the restore",
        agent,
    )
    copy.refresh_from_db()
    assert copy.status == VolumeStatus.AVAILABLE, copy.status_reason
    seen = in_volume(
        docker_client, copy, "cat /v/note && stat -c %u /v/note && cd /v && sha256sum -c sum"
    )
    assert seen.split("\n")[:3] == ["kept", "1000", "/v/ds/blob: OK"]

    # A digest that does not match (the object changed in the storage): nothing restored.
    Snapshot.objects.filter(pk=snapshot.pk).update(sha256="0" * 64)
    snapshot.refresh_from_db()
    bad = volume_restore(snapshot=snapshot, host=host, name="bad", actor=alice)
    wait_for(
        lambda: Volume.objects.get(pk=bad.pk).status != VolumeStatus.RESTORING,
        60,
        "the failed restore",
        agent,
    )
    bad.refresh_from_db()
    assert bad.status == VolumeStatus.FAILED
    assert "SHA-256 does not match" in bad.status_reason
    assert not docker_client.volumes.list(filters={"name": bad.docker_name})


def test_a_stopped_instance_s_workspace_starts_a_new_instance_with_its_files_on_another_host(
    agent, second_agent, catalog, alice, docker_client, snapshots_on
):
    from gpurental.fleet.lifecycle import host_drain
    from gpurental.rentals.models import Instance, InstanceStatus
    from gpurental.rentals.services import lifecycle as lc
    from gpurental.volumes.snapshots import workspace_snapshot_create

    def running(instance):
        wait_for(
            lambda: Instance.objects.get(pk=instance.pk).status == InstanceStatus.RUNNING,
            90,
            "the instance to run",
            agent,
        )
        return docker_client.containers.get(f"gpurental-{instance.pk}")

    model, image = catalog
    first = lc.instance_launch(user=alice, image=image, gpu_model=model, gpu_count=1)
    code, _ = running(first).exec_run(["sh", "-c", "echo trained > /workspace/model.txt"])
    assert code == 0
    lc.instance_stop(instance=first, actor=alice)
    wait_for(
        lambda: Instance.objects.get(pk=first.pk).status == InstanceStatus.STOPPED,
        60,
        "the stop",
        agent,
    )

    snapshot = workspace_snapshot_create(instance=first, name="ws", actor=alice)
    wait_for(
        lambda: Snapshot.objects.get(pk=snapshot.pk).status != SnapshotStatus.SAVING,
        60,
        "the workspace snapshot",
        agent,
    )
    snapshot.refresh_from_db()
    assert snapshot.status == SnapshotStatus.READY, snapshot.status_reason

    # The first host takes no new placements: the clone lands on the other one, whose
    # agent fetches the snapshot and unpacks it before the container starts.
    host_drain(host=first.host)
    clone = lc.instance_launch(
        user=alice, image=image, gpu_model=model, gpu_count=1, workspace_from=snapshot
    )
    hosts = {agent.host.pk, second_agent.host.pk}
    assert clone.host_id in hosts and clone.host_id != first.host_id
    code, out = running(clone).exec_run(["cat", "/workspace/model.txt"])
    assert (code, out) == (0, b"trained\n")
    steps = list(clone.events.filter(kind="progress").values_list("step", "reason"))
    assert any("restoring /workspace from its snapshot" in reason for _, reason in steps), steps
