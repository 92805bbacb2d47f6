"""Snapshots: a volume's files as a tar in the operator's S3-compatible object storage,
restorable to a new volume on any host (which is how a customer's data moves to another
host).

The control plane holds the storage's keys (``SNAPSHOT_S3_*``); a host never does. For
each upload or download it presigns URLs for one object and sends them, sealed for that
host, with the command (``protocol.VOLUME_SNAPSHOT``, ``VOLUME_RESTORE``). An upload is a
multipart upload (S3 takes at most 5 GiB in one PUT): the control plane starts it and
presigns enough parts for the most the volume can hold, plus its completion and its
abort. The agent tars the volume through the Docker Engine (a helper container that never
runs), PUTs the parts it needs, completes the upload, and reports its size and SHA-256
(a failure aborts it); a restore GETs it, checks the digest and unpacks it into the new
volume (``protocol.VOLUME_KINDS``). A snapshot is taken of a volume no running
instance holds (free, or its instance stopped), so that its files are at rest."""

from __future__ import annotations

import contextlib
import uuid
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental import protocol
from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record
from gpurental.fleet import hostlink
from gpurental.fleet.hostlink import refuse_message
from gpurental.fleet.models import Host, HostStatus
from gpurental.volumes import objectstore
from gpurental.volumes.models import Snapshot, SnapshotStatus, Volume, VolumeStatus
from gpurental.volumes.services import (
    ENDED,
    LIVE,
    MAX_SIZE_GB,
    NAME,
    STOPPED,
    VolumeRefused,
    _event,
)

GB = 1024**3
URL_EXPIRES_S = objectstore.URL_EXPIRES_S


def configured() -> bool:
    return bool(settings.SNAPSHOT_S3_BUCKET)


def s3_client():
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=settings.SNAPSHOT_S3_ENDPOINT_URL or None,
        aws_access_key_id=settings.SNAPSHOT_S3_ACCESS_KEY_ID or None,
        aws_secret_access_key=settings.SNAPSHOT_S3_SECRET_ACCESS_KEY or None,
        region_name=settings.SNAPSHOT_S3_REGION,
    )


def _url(method: str, key: str) -> str:
    return s3_client().generate_presigned_url(
        method,
        Params={"Bucket": settings.SNAPSHOT_S3_BUCKET, "Key": key},
        ExpiresIn=URL_EXPIRES_S,
    )


def _most_bytes(size_gb: int) -> int:
    """The largest tar of a full ``size_gb`` (its headers, and a volume over its size by
    the time it is stopped, counted in)."""
    return int(size_gb * GB * 1.25) + GB


def _upload_urls(key: str, size_gb: int) -> dict:
    """A multipart upload of ``key`` started, and its URLs presigned: enough parts for the
    largest tar of ``size_gb``, its completion and its abort."""
    most = _most_bytes(size_gb)
    try:
        return objectstore.presign_upload(
            s3_client(),
            settings.SNAPSHOT_S3_BUCKET,
            key,
            most_bytes=most,
            part_min_bytes=settings.SNAPSHOT_PART_MB * objectstore.MiB,
        )
    except objectstore.TooLarge as exc:
        raise VolumeRefused(
            _(
                "a snapshot of up to %(gb).0f GB is more than the object storage takes in one "
                "upload (%(parts)s parts of 5 GiB)"
            )
            % {"gb": most / GB, "parts": objectstore.PARTS_PLANNED},
            field="volume",
        ) from exc
    except Exception as exc:  # noqa: BLE001 - botocore's errors, and a storage that is down
        raise VolumeRefused(
            _("the object storage refused to start the upload: %(why)s") % {"why": exc},
            field="volume",
        ) from exc


def _helper_image(host: Host) -> str:
    """An image every host has (the one customers' own images run like): the helper
    container that reads or fills a volume is made from it and never runs."""
    from gpurental.catalog.models import ImageTemplate

    template = ImageTemplate.objects.filter(slug=settings.CUSTOM_IMAGE_TEMPLATE).first()
    if template is None:
        template = ImageTemplate.objects.filter(is_active=True).order_by("pk").first()
    if template is None:
        raise VolumeRefused(_("the catalog has no image to read volumes with"), field="volume")
    return template.image_for(host.gpu_source)


def _refuse_unless_configured() -> None:
    if not configured():
        raise VolumeRefused(
            _(
                "snapshots are not set up on this platform: the operator sets "
                "SNAPSHOT_S3_BUCKET (and its endpoint and keys)"
            ),
            field="volume",
        )


def _check_name(name: str, *, field: str = "name") -> str:
    name = (name or "").strip()
    if not NAME.match(name):
        raise VolumeRefused(
            _("%(name)r must be 1 to 63 lowercase letters, digits, '.', '_' or '-'")
            % {"name": name},
            field=field,
        )
    return name


def snapshot_create(
    *, volume: Volume, name: str, actor: User, now: datetime | None = None
) -> Snapshot:
    """Save ``volume``'s files as the snapshot ``name``; its host uploads them."""
    _refuse_unless_configured()
    now = now or timezone.now()
    name = _check_name(name)
    with transaction.atomic():
        volume = Volume.objects.select_for_update().select_related("host").get(pk=volume.pk)
        if volume.status != VolumeStatus.AVAILABLE:
            raise VolumeRefused(
                _("volume %(name)s is %(status)s") % {"name": volume.name, "status": volume.status},
                field="volume",
            )
        holder = volume.instance
        if holder is not None and holder.status not in (STOPPED, *ENDED):
            raise VolumeRefused(
                _(
                    "volume %(name)s is mounted in instance %(instance)s (%(status)s): stop "
                    "that instance first, so that its files are at rest"
                )
                % {"name": volume.name, "instance": holder, "status": holder.status},
                field="volume",
            )
        snapshot = _snapshot(
            volume.account,
            name,
            volume.host,
            volume.docker_name,
            volume.size_gb,
            now,
            volume=volume,
        )
        _event(volume, "snapshot", f"snapshot {name} requested", actor=actor, now=now)
        audit_record(action="snapshot.created", actor=actor, obj=snapshot)
    return snapshot


def workspace_snapshot_create(
    *, instance, name: str, actor: User, now: datetime | None = None
) -> Snapshot:
    """Save a stopped instance's /workspace as the snapshot ``name``: launched with
    ``workspace_from``, a new instance on any host starts with these files (a clone; with
    the old one terminated, a move)."""
    _refuse_unless_configured()
    now = now or timezone.now()
    name = _check_name(name)
    instances = Snapshot._meta.get_field("instance").related_model  # rentals reads volumes
    with transaction.atomic():
        instance = (
            instances.objects.select_for_update(of=("self",))
            .select_related("host")
            .get(pk=instance.pk)
        )
        if instance.status != STOPPED or instance.host_id is None:
            raise VolumeRefused(
                _(
                    "instance %(instance)s is %(status)s: stop it first, so that its "
                    "/workspace is at rest"
                )
                % {"instance": instance, "status": instance.status},
                field="instance",
            )
        if instance.lease_id is not None:
            raise VolumeRefused(
                _("an instance on a dedicated host keeps its /workspace there"), field="instance"
            )
        if instance.group_id is not None:
            raise VolumeRefused(
                _("a group's replica is managed by its group: snapshot a volume instead"),
                field="instance",
            )
        snapshot = _snapshot(
            instance.user,
            name,
            instance.host,
            f"gpurental-ws-{instance.pk}",
            instance.plan.disk_gb,
            now,
            instance=instance,
        )
        audit_record(action="snapshot.created", actor=actor, obj=snapshot)
    return snapshot


def _snapshot(
    account, name: str, host: Host, docker_name: str, size_gb: int, now: datetime, **source
) -> Snapshot:
    """The snapshot row (under the caller's lock), and the host asked to upload it."""
    if Snapshot.objects.filter(
        account=account, name=name, status__in=[SnapshotStatus.SAVING, SnapshotStatus.READY]
    ).exists():
        raise VolumeRefused(
            _("you already have a snapshot %(name)s") % {"name": name}, field="name"
        )
    snapshot_id = uuid.uuid4()
    snapshot = Snapshot.objects.create(
        id=snapshot_id,
        account=account,
        name=name,
        object_key=f"snapshots/{account.pk}/{snapshot_id}.tar",
        created_at=now,
        **source,
    )
    helper = _helper_image(host)
    transaction.on_commit(
        partial(
            hostlink.send,
            host,
            protocol.VOLUME_SNAPSHOT,
            snapshot_id=str(snapshot.pk),
            volume=docker_name,
            helper_image=helper,
            sealed=hostlink.seal_secrets(
                host, {"upload": _upload_urls(snapshot.object_key, size_gb)}
            ),
        )
    )
    return snapshot


def snapshot_saving(*, instance=None, volume: Volume | None = None) -> Snapshot | None:
    """The snapshot of the instance's /workspace or of the volume that its host is taking
    now, if any: until it is ready or failed, those files must stay as they are."""
    source = {"instance": instance} if instance is not None else {"volume": volume}
    return Snapshot.objects.filter(status=SnapshotStatus.SAVING, **source).first()


def workspace_source_url(snapshot: Snapshot) -> str:
    """A download URL for a workspace snapshot, for the start spec of the instance whose
    /workspace is restored from it (sealed there for its host)."""
    return _url("get_object", snapshot.object_key)


def workspace_source_check(*, snapshot: Snapshot, account, disk_gb: int) -> Snapshot:
    """A workspace snapshot a launch of ``account``'s may start from, or VolumeRefused."""
    if snapshot.account_id != account.pk or snapshot.instance_id is None:
        raise VolumeRefused(
            _("you have no workspace snapshot %(name)s") % {"name": snapshot.name},
            field="workspace_from",
        )
    if snapshot.status != SnapshotStatus.READY:
        raise VolumeRefused(
            _("snapshot %(name)s is %(status)s; only a ready one restores")
            % {"name": snapshot.name, "status": snapshot.status},
            field="workspace_from",
        )
    if snapshot.size_bytes > disk_gb * GB:
        raise VolumeRefused(
            _("snapshot %(name)s holds %(gb).1f GB, more than the plan's %(disk)s GB of disk")
            % {"name": snapshot.name, "gb": snapshot.size_bytes / GB, "disk": disk_gb},
            field="workspace_from",
        )
    _refuse_unless_configured()
    return snapshot


def volume_restore(
    *,
    snapshot: Snapshot,
    host: Host,
    name: str,
    size_gb: int | None = None,
    actor: User,
    now: datetime | None = None,
) -> Volume:
    """A new volume ``name`` on ``host`` holding the snapshot's files; usable once its host
    has unpacked them (status ``restoring``, then ``available`` or ``failed``)."""
    _refuse_unless_configured()
    now = now or timezone.now()
    name = _check_name(name)
    with transaction.atomic():
        snapshot = (
            Snapshot.objects.select_for_update(of=("self",))
            .select_related("volume")
            .get(pk=snapshot.pk)
        )
        if snapshot.status != SnapshotStatus.READY:
            raise VolumeRefused(
                _("snapshot %(name)s is %(status)s; only a ready one restores")
                % {"name": snapshot.name, "status": snapshot.status},
                field="snapshot",
            )
        if snapshot.volume is None:
            raise VolumeRefused(
                _(
                    "snapshot %(name)s holds a /workspace: launch an instance with it "
                    "(workspace_from) instead"
                )
                % {"name": snapshot.name},
                field="snapshot",
            )
        size_gb = snapshot.volume.size_gb if size_gb is None else size_gb
        least = max(1, -(-snapshot.size_bytes // GB))
        if not isinstance(size_gb, int) or not least <= size_gb <= MAX_SIZE_GB:
            raise VolumeRefused(
                _("must be a whole number of GB from %(least)s (the snapshot's size) to %(most)s")
                % {"least": least, "most": MAX_SIZE_GB},
                field="size_gb",
            )
        if host.status != HostStatus.ACTIVE:
            raise VolumeRefused(
                _("%(host)s takes no new volumes now (it is %(status)s)")
                % {"host": host.name, "status": host.get_status_display()},
                field="host",
            )
        if Volume.objects.filter(account=snapshot.account, name=name, status__in=LIVE).exists():
            raise VolumeRefused(
                _("you already have a volume %(name)s") % {"name": name}, field="name"
            )
        volume = Volume.objects.create(
            account=snapshot.account,
            name=name,
            size_gb=size_gb,
            host=host,
            status=VolumeStatus.RESTORING,
            restored_from=snapshot,
            created_at=now,
        )
        _event(
            volume,
            "restoring",
            f"{size_gb} GB on {host.name}, from snapshot {snapshot.name}",
            actor=actor,
            now=now,
        )
        audit_record(
            action="volume.restored",
            actor=actor,
            obj=volume,
            changes={"snapshot": str(snapshot.pk), "host": host.name},
        )
        helper = _helper_image(host)
        transaction.on_commit(
            partial(
                hostlink.send,
                host,
                protocol.VOLUME_RESTORE,
                volume_id=str(volume.pk),
                volume=volume.docker_name,
                sha256=snapshot.sha256,
                helper_image=helper,
                sealed=hostlink.seal_secrets(
                    host, {"object_url": _url("get_object", snapshot.object_key)}
                ),
            )
        )
    return volume


def snapshot_delete(*, snapshot: Snapshot, actor: User, now: datetime | None = None) -> Snapshot:
    """Delete a snapshot's object from the storage, for good; volumes restored from it
    keep their files."""
    _refuse_unless_configured()
    now = now or timezone.now()
    with transaction.atomic():
        snapshot = Snapshot.objects.select_for_update().get(pk=snapshot.pk)
        if snapshot.status == SnapshotStatus.DELETED:
            return snapshot
        if snapshot.status == SnapshotStatus.SAVING:
            raise VolumeRefused(
                _("snapshot %(name)s is still being saved; delete it once it is ready or failed")
                % {"name": snapshot.name},
                field="snapshot",
            )
        s3_client().delete_object(Bucket=settings.SNAPSHOT_S3_BUCKET, Key=snapshot.object_key)
        snapshot.status, snapshot.deleted_at = SnapshotStatus.DELETED, now
        snapshot.save(update_fields=["status", "deleted_at"])
        if snapshot.volume is not None:
            _event(
                snapshot.volume,
                "snapshot",
                f"snapshot {snapshot.name} deleted",
                actor=actor,
                now=now,
            )
        audit_record(action="snapshot.deleted", actor=actor, obj=snapshot)
    return snapshot


def volume_report_receive(*, message: dict, now: datetime) -> None:
    """A host's report on a snapshot or a restore, verified; only the host the request
    went to may report on it."""
    host, payload = hostlink.receive(message=message, what="volume report", now=now)
    kind, data = payload.get("kind"), payload.get("data") or {}
    if kind not in protocol.VOLUME_KINDS or not isinstance(data, dict):
        refuse_message(name=host.name, what="volume report", why=f"kind {kind!r}", now=now)
    if data.get("snapshot_id"):
        _snapshot_report(host, kind, data, now)
    else:
        _restore_report(host, kind, data, now)


def _id(value) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def _progress_text(data: dict) -> str:
    """What a progress report says, for the console and the API ("uploading, 42 %")."""
    percent = data.get("percent")
    text = str(data.get("message", ""))[:400]
    if isinstance(percent, int | float) and 0 <= percent <= 100:
        text += f", {percent:.0f} %"
    return text


def _snapshot_report(host: Host, kind: str, data: dict, now: datetime) -> None:
    with transaction.atomic():
        snapshot = (
            Snapshot.objects.select_for_update(of=("self",))
            .select_related("volume")
            .filter(Q(volume__host=host) | Q(instance__host=host), pk=_id(data.get("snapshot_id")))
            .first()
        )
        if snapshot is None or snapshot.status != SnapshotStatus.SAVING:
            return  # another host's, or late
        volume = snapshot.volume  # None for a workspace's: its own status says it all
        if kind == "progress":
            snapshot.status_reason = _progress_text(data)
            snapshot.save(update_fields=["status_reason"])
        elif kind == "snapshotted":
            size, digest = data.get("size_bytes"), str(data.get("sha256", ""))
            if not (isinstance(size, int) and size >= 0 and len(digest) == 64):
                refuse_message(
                    name=host.name, what="volume report", why="no size or digest", now=now
                )
            snapshot.status, snapshot.ready_at = SnapshotStatus.READY, now
            snapshot.size_bytes, snapshot.sha256, snapshot.status_reason = size, digest, ""
            snapshot.save(
                update_fields=["status", "ready_at", "size_bytes", "sha256", "status_reason"]
            )
            if volume is not None:
                _event(
                    volume,
                    "snapshot",
                    f"snapshot {snapshot.name} ready: {size / GB:.2f} GB",
                    now=now,
                )
        elif kind == "snapshot_failed":
            reason = str(data.get("reason", ""))[:4000]
            snapshot.status, snapshot.status_reason = SnapshotStatus.FAILED, reason
            snapshot.save(update_fields=["status", "status_reason"])
            if volume is not None:
                _event(volume, "snapshot_failed", f"snapshot {snapshot.name}: {reason}", now=now)


def _restore_report(host: Host, kind: str, data: dict, now: datetime) -> None:
    with transaction.atomic():
        volume = (
            Volume.objects.select_for_update()
            .filter(pk=_id(data.get("volume_id")), host=host)
            .first()
        )
        if volume is None or volume.status != VolumeStatus.RESTORING:
            return
        if kind == "progress":
            volume.status_reason = _progress_text(data)
            volume.save(update_fields=["status_reason"])
        elif kind == "restored":
            volume.status, volume.status_reason = VolumeStatus.AVAILABLE, ""
            volume.save(update_fields=["status", "status_reason"])
            _event(volume, "restored", "the snapshot's files are in it", now=now)
        elif kind == "restore_failed":
            reason = str(data.get("reason", ""))[:4000]
            volume.status, volume.status_reason = VolumeStatus.FAILED, reason
            volume.save(update_fields=["status", "status_reason"])
            _event(volume, "restore_failed", reason, now=now)


def transfers_expire(*, now: datetime) -> dict[str, int]:
    """Snapshots still saving and volumes still restoring that can no longer finish: their
    presigned URLs have expired, or their host has been silent for ``HOST_LOST_AFTER``.
    They fail with that reason, so that an instance or a volume a snapshot held is free
    again (a snapshot's unfinished upload is aborted; a restoring volume's host removes
    what it unpacked, when it answers)."""
    lost_before = now - timedelta(seconds=settings.HOST_LOST_AFTER)
    failed = {"snapshots": 0, "restores": 0}
    saving = Snapshot.objects.filter(status=SnapshotStatus.SAVING).select_related(
        "volume__host", "instance__host", "instance__plan"
    )
    for snapshot in saving:
        source = snapshot.volume or snapshot.instance
        size_gb = snapshot.volume.size_gb if snapshot.volume else snapshot.instance.plan.disk_gb
        why = _why_stuck(
            source.host,
            snapshot.created_at,
            objectstore.url_lifetime(_most_bytes(size_gb)),
            lost_before,
            now,
        )
        if why and _snapshot_fail(snapshot.pk, why, now):
            failed["snapshots"] += 1
            with contextlib.suppress(Exception):  # the storage's own lifecycle rule is the backstop
                objectstore.abort_uploads(
                    s3_client(), settings.SNAPSHOT_S3_BUCKET, snapshot.object_key
                )
    restoring = Volume.objects.filter(status=VolumeStatus.RESTORING).select_related("host")
    for volume in restoring:
        why = _why_stuck(volume.host, volume.created_at, URL_EXPIRES_S, lost_before, now)
        if why and _restore_fail(volume.pk, why, now):
            failed["restores"] += 1
    return failed


def _why_stuck(host: Host, since: datetime, lifetime_s: int, lost_before, now) -> str:
    if now - since > timedelta(seconds=lifetime_s):
        return (
            f"host {host.name} did not finish within {lifetime_s // 3600} h, while its "
            "presigned URLs were valid"
        )
    if host.last_heartbeat_at is not None and host.last_heartbeat_at < lost_before:
        return f"host {host.name} went silent at {host.last_heartbeat_at:%Y-%m-%d %H:%M} UTC"
    return ""


def _snapshot_fail(snapshot_id, why: str, now: datetime) -> bool:
    with transaction.atomic():
        snapshot = (
            Snapshot.objects.select_for_update(of=("self",))
            .select_related("volume")
            .filter(pk=snapshot_id, status=SnapshotStatus.SAVING)
            .first()
        )
        if snapshot is None:
            return False  # its report came meanwhile
        snapshot.status, snapshot.status_reason = SnapshotStatus.FAILED, why
        snapshot.save(update_fields=["status", "status_reason"])
        if snapshot.volume is not None:
            _event(snapshot.volume, "snapshot_failed", f"snapshot {snapshot.name}: {why}", now=now)
    return True


def _restore_fail(volume_id, why: str, now: datetime) -> bool:
    with transaction.atomic():
        volume = (
            Volume.objects.select_for_update()
            .select_related("host")
            .filter(pk=volume_id, status=VolumeStatus.RESTORING)
            .first()
        )
        if volume is None:
            return False
        volume.status, volume.status_reason = VolumeStatus.FAILED, why
        volume.save(update_fields=["status", "status_reason"])
        _event(volume, "restore_failed", why, now=now)
        transaction.on_commit(
            partial(hostlink.send, volume.host, protocol.VOLUME_REMOVE, volume=volume.docker_name)
        )
    return True
