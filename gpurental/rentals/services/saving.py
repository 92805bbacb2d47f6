"""Saving an instance's container as a private image of its account (``images.SavedImage``).

The instance's host commits the container (without the platform's secrets in its
environment, and without /workspace, a volume: that is the instance's data) and pushes it
to the platform's registry (``PLATFORM_REGISTRY``), reporting progress; from there the
image launches on any host. Each change of a saved image has a ``SavedImageEvent`` row.
Deleting one deletes its manifest from the registry (``images.registryapi``).
"""

from __future__ import annotations

import logging
import re
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental import imagerefs, protocol
from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record
from gpurental.fleet import hostlink
from gpurental.fleet.hostlink import refuse_message
from gpurental.images import registryapi
from gpurental.images.models import SavedImage, SavedImageEvent, SavedImageStatus
from gpurental.images.selectors import platform_registry_auth
from gpurental.images.services import ImageRefused
from gpurental.rentals.exceptions import InvalidTransition
from gpurental.rentals.models import Instance, InstanceStatus

log = logging.getLogger(__name__)
S = SavedImageStatus
SAVABLE = (InstanceStatus.RUNNING, InstanceStatus.STOPPED)
# A save not done by then has stalled (a commit and push of tens of GB take well under it).
SAVE_TIMEOUT = timedelta(hours=6)
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


def _event(image: SavedImage, *, to: str = "", reason: str = "", actor=None, data=None, now):
    SavedImageEvent.objects.create(
        image=image,
        from_status=image.status if to else "",
        to_status=to,
        reason=reason[:4000],
        actor=actor if actor is not None and getattr(actor, "pk", None) else None,
        data=data or {},
        created_at=now,
    )


def _move(image: SavedImage, to: str, *, reason: str, now: datetime, actor=None, **fields) -> None:
    _event(image, to=to, reason=reason, actor=actor, now=now)
    image.status = to
    for key, value in fields.items():
        setattr(image, key, value)
    image.save(update_fields=["status", *fields])


def saved_image_name_check(name: str) -> str:
    name = (name or "").strip()
    if not NAME.match(name):
        raise ImageRefused(
            _(
                "%(name)r must be 1 to 63 lowercase letters, digits, '.', '_' or '-', "
                "starting with a letter or digit"
            )
            % {"name": name},
            field="name",
        )
    return name


def image_save_request(
    *, instance: Instance, name: str, actor: User, now: datetime | None = None
) -> SavedImage:
    """Ask the instance's host to save its container as the image ``name`` of the
    instance's account. The instance is running, or stopped: its stopped container stays
    on its host until the next start (``instance_stop``), its filesystem as it was."""
    now = now or timezone.now()
    if not settings.PLATFORM_REGISTRY:
        raise ImageRefused(
            _("saving images is off here: the operator has set no PLATFORM_REGISTRY"),
            field="name",
        )
    name = saved_image_name_check(name)
    with transaction.atomic():
        instance = (
            Instance.objects.select_for_update(of=("self",))
            .select_related("host")
            .get(pk=instance.pk)
        )
        if instance.status not in SAVABLE or instance.host is None:
            raise InvalidTransition(
                _(
                    "instance %(instance)s is %(status)s: only a running or stopped instance "
                    "can be saved"
                )
                % {"instance": instance, "status": instance.get_status_display()}
            )
        taken = SavedImage.objects.filter(account_id=instance.user_id, name=name).exclude(
            status__in=[S.DELETED, S.FAILED]
        )
        if taken.exists():
            raise ImageRefused(
                _("you already have a saved image %(name)s; delete it or choose another name")
                % {"name": name},
                field="name",
            )
        image_id = uuid.uuid4()
        # The tag names the day and the image: never the same twice, even for a name reused.
        tag = f"{now:%Y%m%d}-{image_id.hex[:8]}"
        reference = f"{settings.PLATFORM_REGISTRY}/a{instance.user_id}/{name}:{tag}"
        image = SavedImage.objects.create(
            id=image_id,
            account_id=instance.user_id,
            name=name,
            reference=reference,
            template=instance.image,
            source_instance=instance,
            created_at=now,
        )
        _event(
            image,
            to=S.SAVING,
            reason=f"saving instance {instance} on {instance.host.name} as {reference}",
            actor=actor,
            now=now,
        )
        audit_record(
            action="saved_image.requested",
            actor=actor,
            obj=image,
            changes={"instance": str(instance.pk), "reference": reference},
        )
        hostlink.send(
            instance.host,
            protocol.IMAGE_SAVE,
            saved_image_id=str(image.pk),
            instance_id=str(instance.pk),
            reference=reference,
            sealed=hostlink.seal_secrets(
                instance.host,
                {
                    # Good for this image's repository only, while a save may take.
                    "registry_auth": platform_registry_auth(
                        imagerefs.parse(reference).repository,
                        ("pull", "push"),
                        subject=f"host {instance.host.name}",
                        ttl_s=int(SAVE_TIMEOUT.total_seconds()),
                    )
                    or {}
                },
            ),
        )
    return image


def image_report_receive(*, message: dict, now: datetime) -> None:
    """A report about saving an image, as it comes off the control queue: verified, then
    recorded. Only the host the request went to may report on it."""
    host, payload = hostlink.receive(message=message, what="image report", now=now)
    kind, data = payload.get("kind"), payload.get("data") or {}
    if kind not in protocol.IMAGE_KINDS or not isinstance(data, dict):
        refuse_message(name=host.name, what="image report", why=f"kind {kind!r}", now=now)
    try:
        image_id = uuid.UUID(str(data.get("saved_image_id", "")))
    except ValueError:
        refuse_message(name=host.name, what="image report", why="no saved image id", now=now)
    with transaction.atomic():
        image = (
            SavedImage.objects.select_for_update()
            .filter(pk=image_id, source_instance__host=host)
            .first()
        )
        if image is None or image.status != S.SAVING:
            return  # another host's, or a late report for an image already decided
        if kind == "progress":
            percent = data.get("percent")
            _event(
                image,
                reason=str(data.get("message", ""))[:500],
                data={"percent": percent} if isinstance(percent, int | float) else {},
                now=now,
            )
        elif kind == "saved":
            size = data.get("size_bytes")
            _move(
                image,
                S.READY,
                reason=f"pushed to {settings.PLATFORM_REGISTRY or 'the platform registry'}",
                now=now,
                size_bytes=size if isinstance(size, int) and size >= 0 else 0,
                digest=str(data.get("digest", ""))[:80],
                ready_at=now,
            )
        else:
            _move(image, S.FAILED, reason=str(data.get("reason", ""))[:4000], now=now)
            image.status_reason = str(data.get("reason", ""))[:4000]
            image.save(update_fields=["status_reason"])


def saved_image_delete(*, image: SavedImage, actor: User, now: datetime | None = None) -> None:
    """Delete a saved image: its manifest goes from the registry (the registry's garbage
    collection frees the layers no image uses), its row stays, marked deleted."""
    now = now or timezone.now()
    with transaction.atomic():
        image = SavedImage.objects.select_for_update().get(pk=image.pk)
        if image.status == S.DELETED:
            return
        if image.status == S.SAVING:
            raise ImageRefused(
                _("image %(name)s is still being saved; delete it once it is ready or failed")
                % {"name": image.name},
                field="image",
            )
        note = ""
        if image.digest:
            try:
                registryapi.manifest_delete(
                    image.reference,
                    image.digest,
                    platform_registry_auth(
                        imagerefs.parse(image.reference).repository,
                        ("delete", "pull"),
                        subject="control plane",
                        ttl_s=60,
                    ),
                )
            except registryapi.RegistryError as exc:
                note = f" (the registry refused to delete it: {exc}; an operator must)"
                log.warning("saved image %s: %s", image.pk, exc)
        _move(image, S.DELETED, reason=f"deleted{note}", now=now, actor=actor, deleted_at=now)
        audit_record(action="saved_image.deleted", actor=actor, obj=image)


def saved_images_expire(*, now: datetime) -> int:
    """Saves that can no longer finish fail with the reason: not done within
    ``SAVE_TIMEOUT``, or their host silent for ``HOST_LOST_AFTER``; a failed one can be
    deleted, and its name taken again. How many."""
    lost_before = now - timedelta(seconds=settings.HOST_LOST_AFTER)
    failed = 0
    saving = SavedImage.objects.filter(status=S.SAVING).select_related("source_instance__host")
    for image in saving:
        host = image.source_instance.host if image.source_instance else None
        if now - image.created_at > SAVE_TIMEOUT:
            why = f"not saved and pushed within {SAVE_TIMEOUT.total_seconds() / 3600:.0f} h"
        elif host is None or (host.last_heartbeat_at and host.last_heartbeat_at < lost_before):
            why = f"host {host.name if host else '?'} went silent while saving it"
        else:
            continue
        with transaction.atomic():
            image = SavedImage.objects.select_for_update().get(pk=image.pk)
            if image.status != S.SAVING:
                continue  # its report came meanwhile
            _move(image, S.FAILED, reason=why, now=now, status_reason=why)
            failed += 1
    return failed
