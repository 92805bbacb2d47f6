"""What changes volumes: create, delete, and the host's measurements. Attaching happens at
launch, in the rentals service that places the instance (``instance_launch``): a volume
pins its instance to its host. Every change has a ``VolumeEvent`` row."""

from __future__ import annotations

import posixpath
import re
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental import protocol
from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record
from gpurental.fleet import hostlink
from gpurental.fleet.models import Host, HostStatus
from gpurental.volumes.models import SnapshotStatus, Volume, VolumeEvent, VolumeStatus

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
MAX_SIZE_GB = 16384
DEFAULT_MOUNT_PATH = "/data"
# Where a volume may not go: the platform's own mounts and the system's folders.
RESERVED_PATHS = frozenset(
    {
        "/",
        "/workspace",
        "/models",
        "/proc",
        "/sys",
        "/dev",
        "/etc",
        "/usr",
        "/bin",
        "/sbin",
        "/lib",
        "/lib64",
        "/boot",
        "/run",
        "/var",
        "/tmp",  # noqa: S108 - a path refused, not a file used
        "/root",
        "/opt",
    }
)
LIVE = (VolumeStatus.RESTORING, VolumeStatus.AVAILABLE)  # a name is taken while one is
ENDED = ("terminated", "failed")  # an instance in these no longer holds its volumes
STOPPED = "stopped"  # an instance in this may give a volume up (volume_detach)


class VolumeRefused(ValueError):
    def __init__(self, message: str, *, field: str = ""):
        super().__init__(message)
        self.message, self.field = message, field


def _event(volume: Volume, kind: str, reason: str, *, actor=None, now=None) -> None:
    VolumeEvent.objects.create(
        volume=volume,
        kind=kind,
        reason=reason[:4000],
        actor=actor if actor is not None and getattr(actor, "pk", None) else None,
        created_at=now or timezone.now(),
    )


def in_use(volume: Volume) -> bool:
    return volume.instance_id is not None and volume.instance.status not in ENDED


def mount_path_check(path: str) -> str:
    path = (path or DEFAULT_MOUNT_PATH).strip()
    normal = posixpath.normpath(path)
    if (
        not path.startswith("/")
        or ".." in path.split("/")
        or not re.fullmatch(r"[A-Za-z0-9._/-]+", path)
    ):
        raise VolumeRefused(
            _("%(path)r must be an absolute path of letters, digits, '.', '_', '-' and '/'")
            % {"path": path},
            field="mount_path",
        )
    if normal in RESERVED_PATHS or any(
        normal.startswith(p + "/") for p in ("/proc", "/sys", "/dev", "/workspace")
    ):
        raise VolumeRefused(
            _("%(path)s is the system's or the platform's; mount it elsewhere, e.g. /data")
            % {"path": normal},
            field="mount_path",
        )
    return normal


def volume_create(
    *, account: User, name: str, size_gb: int, host: Host, actor: User, now: datetime | None = None
) -> Volume:
    """A volume of ``size_gb`` on ``host``; it is made there when an instance first mounts it."""
    now = now or timezone.now()
    name = (name or "").strip()
    if not NAME.match(name):
        raise VolumeRefused(
            _("%(name)r must be 1 to 63 lowercase letters, digits, '.', '_' or '-'")
            % {"name": name},
            field="name",
        )
    if not isinstance(size_gb, int) or not 1 <= size_gb <= MAX_SIZE_GB:
        raise VolumeRefused(
            _("must be a whole number of GB from 1 to %(most)s") % {"most": MAX_SIZE_GB},
            field="size_gb",
        )
    if host.status not in (HostStatus.ACTIVE,):
        raise VolumeRefused(
            _("%(host)s takes no new volumes now (it is %(status)s)")
            % {"host": host.name, "status": host.get_status_display()},
            field="host",
        )
    with transaction.atomic():
        if Volume.objects.filter(account=account, name=name, status__in=LIVE).exists():
            raise VolumeRefused(
                _("you already have a volume %(name)s") % {"name": name}, field="name"
            )
        volume = Volume.objects.create(
            account=account, name=name, size_gb=size_gb, host=host, created_at=now
        )
        _event(volume, "created", f"{size_gb} GB on {host.name}", actor=actor, now=now)
        audit_record(
            action="volume.created",
            actor=actor,
            obj=volume,
            changes={"size_gb": size_gb, "host": host.name},
        )
    return volume


def volume_delete(*, volume: Volume, actor: User, now: datetime | None = None) -> Volume:
    """Delete a volume and its data on its host, for good. Refused while an instance that
    has not ended holds it (terminate it first, or launch without it)."""
    now = now or timezone.now()
    with transaction.atomic():
        volume = Volume.objects.select_for_update().get(pk=volume.pk)
        if volume.status == VolumeStatus.DELETED:
            return volume
        if in_use(volume):
            raise VolumeRefused(
                _(
                    "volume %(name)s is mounted in instance %(instance)s (%(status)s): terminate "
                    "that instance first"
                )
                % {
                    "name": volume.name,
                    "instance": volume.instance,
                    "status": volume.instance.status,
                },
                field="volume",
            )
        saving = volume.snapshots.filter(status=SnapshotStatus.SAVING).first()
        if saving is not None:
            raise VolumeRefused(
                _(
                    "volume %(name)s is being saved as snapshot %(snapshot)s; once it is ready "
                    "or failed, delete it"
                )
                % {"name": volume.name, "snapshot": saving.name},
                field="volume",
            )
        volume.status, volume.deleted_at = VolumeStatus.DELETED, now
        volume.save(update_fields=["status", "deleted_at"])
        _event(volume, "deleted", "deleted with its data", actor=actor, now=now)
        audit_record(action="volume.deleted", actor=actor, obj=volume)
        hostlink.send(volume.host, protocol.VOLUME_REMOVE, volume=volume.docker_name)
    return volume


def volume_detach(*, volume: Volume, actor: User, now: datetime | None = None) -> Volume:
    """Take a volume from the stopped instance that holds it, so that the next launch on its
    host may mount it; that instance starts again without it. Refused while the instance
    may be running (stop it first); a volume held by no one is left as it is."""
    now = now or timezone.now()
    with transaction.atomic():
        volume = Volume.objects.select_for_update().get(pk=volume.pk)
        if volume.status == VolumeStatus.DELETED or volume.instance_id is None:
            return volume
        # The instance too, as instance_start locks it: a start and a detach go one by one.
        instance = type(volume.instance).objects.select_for_update().get(pk=volume.instance_id)
        if instance.status not in (STOPPED, *ENDED):
            raise VolumeRefused(
                _(
                    "volume %(name)s is mounted in instance %(instance)s (%(status)s): stop "
                    "that instance first"
                )
                % {"name": volume.name, "instance": instance, "status": instance.status},
                field="volume",
            )
        path = volume.mount_path
        volume.instance, volume.mount_path = None, ""
        volume.save(update_fields=["instance", "mount_path"])
        _event(volume, "detached", f"taken from instance {instance} ({path})", actor=actor, now=now)
        audit_record(action="volume.detached", actor=actor, obj=volume)
    return volume


def volume_resize(
    *, volume: Volume, size_gb: int, actor: User, now: datetime | None = None
) -> Volume:
    """Make a volume larger (never smaller: its files may need the room). What it held is
    charged at the old size up to now, the new size from now on."""
    from gpurental.storage.services import volume_settle  # storage reads volumes

    now = now or timezone.now()
    with transaction.atomic():
        volume = Volume.objects.select_for_update().get(pk=volume.pk)
        if volume.status != VolumeStatus.AVAILABLE:
            raise VolumeRefused(
                _("volume %(name)s is %(status)s") % {"name": volume.name, "status": volume.status},
                field="volume",
            )
        if not isinstance(size_gb, int) or not volume.size_gb < size_gb <= MAX_SIZE_GB:
            raise VolumeRefused(
                _(
                    "must be a whole number of GB larger than its %(size)s GB, at most "
                    "%(most)s (a volume grows, it never shrinks)"
                )
                % {"size": volume.size_gb, "most": MAX_SIZE_GB},
                field="size_gb",
            )
        volume_settle(volume=volume, now=now)
        old, volume.size_gb = volume.size_gb, size_gb
        volume.save(update_fields=["size_gb"])
        _event(volume, "resized", f"{old} GB → {size_gb} GB", actor=actor, now=now)
        audit_record(
            action="volume.resized", actor=actor, obj=volume, changes={"size_gb": [old, size_gb]}
        )
    return volume


def volumes_usage_record(*, host: Host, usage: dict, now: datetime) -> list[Volume]:
    """The host's measurement of its volumes ({volume id: bytes}); returns the volumes now
    over their size, each with an event the first time (their instances are stopped by
    rentals, which owns instance state)."""
    over = []
    for volume in Volume.objects.filter(
        host=host, status=VolumeStatus.AVAILABLE, pk__in=[k for k in usage if is_uuid(k)]
    ):
        used = usage.get(str(volume.pk))
        if not isinstance(used, int) or used < 0:
            continue
        was_over = volume.used_bytes > volume.size_gb * 1024**3
        volume.used_bytes, volume.measured_at = used, now
        volume.save(update_fields=["used_bytes", "measured_at"])
        if used > volume.size_gb * 1024**3:
            if not was_over:
                _event(
                    volume,
                    "over_size",
                    f"holds {used / 1024**3:.2f} GB of its {volume.size_gb} GB",
                    now=now,
                )
            over.append(volume)
    return over


def is_uuid(value) -> bool:
    import uuid

    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def volumes_for_launch(*, account: User, wanted: list[tuple[str, str]]) -> list[tuple[Volume, str]]:
    """The account's volumes a launch names ([(id or name, mount path)]), locked, each free
    (no instance that has not ended holds it), all on one host, at distinct paths;
    VolumeRefused naming the first that is not."""
    chosen, paths = [], set()
    for ref, path in wanted:
        try:
            path = mount_path_check(path)
        except VolumeRefused as exc:
            raise VolumeRefused(exc.message, field="volumes") from exc
        query = Volume.objects.select_for_update(of=("self",)).select_related("host", "instance")
        query = query.filter(account=account, status__in=LIVE)
        volume = query.filter(pk=ref).first() if is_uuid(ref) else query.filter(name=ref).first()
        if volume is None:
            raise VolumeRefused(_("you have no volume %(ref)s") % {"ref": ref}, field="volumes")
        if volume.status == VolumeStatus.RESTORING:
            raise VolumeRefused(
                _("%(name)s is still being restored from its snapshot; launch once it is ready")
                % {"name": volume.name},
                field="volumes",
            )
        if in_use(volume):
            raise VolumeRefused(
                _("%(name)s is mounted in instance %(instance)s, which has not ended")
                % {"name": volume.name, "instance": volume.instance},
                field="volumes",
            )
        if path in paths:
            raise VolumeRefused(_("two volumes at %(path)s") % {"path": path}, field="volumes")
        paths.add(path)
        chosen.append((volume, path))
    hosts = {volume.host.name for volume, _ in chosen}
    if len(hosts) > 1:
        raise VolumeRefused(
            _("they are on different hosts (%(hosts)s); an instance runs on one")
            % {"hosts": ", ".join(sorted(hosts))},
            field="volumes",
        )
    return chosen


def volume_attach(*, volume: Volume, instance, path: str, actor=None, now: datetime) -> None:
    """Record that ``instance`` mounts ``volume`` at ``path`` (under the launch's lock)."""
    volume.instance, volume.mount_path = instance, path
    volume.save(update_fields=["instance", "mount_path"])
    _event(volume, "attached", f"mounted at {path} in instance {instance}", actor=actor, now=now)
