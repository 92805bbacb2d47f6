"""What changes customers' images: the registry logins an account saves, and the check a
launch of an image reference passes before anything is held."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental import imagerefs as references
from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record
from gpurental.catalog.models import ImageTemplate
from gpurental.catalog.selectors import ResolvedImage
from gpurental.images import secrets
from gpurental.images.models import RegistryCredential
from gpurental.images.selectors import is_saved_image, saved_image_by_reference


class ImageRefused(ValueError):
    """A reference or login the platform does not take; ``field`` names the input."""

    def __init__(self, message: str, *, field: str = "image"):
        super().__init__(message)
        self.message, self.field = message, field


def custom_image_check(text: str) -> references.Reference:
    """The reference a launch names, if it is one and the operator's policy admits its
    registry (``CUSTOM_IMAGE_REGISTRIES``; saved images on the platform's own always);
    ImageRefused
    otherwise."""
    try:
        reference = references.parse(text)
    except references.BadReference as exc:
        raise ImageRefused(str(exc)) from exc
    allowed = settings.CUSTOM_IMAGE_REGISTRIES
    if is_saved_image(reference):
        return reference
    if not references.registry_allowed(reference.registry, allowed):
        raise ImageRefused(
            _(
                "%(image)s: images from %(registry)s are not allowed here; this platform "
                "pulls only from %(allowed)s"
            )
            % {
                "image": text.strip(),
                "registry": reference.registry,
                "allowed": ", ".join(allowed) or _("no registry"),
            }
        )
    return reference


def custom_image_resolved(text: str, *, account=None) -> ResolvedImage:
    """A launch of a customer's own image: its reference, run with the settings of the
    catalog template ``CUSTOM_IMAGE_TEMPLATE``; or one of the account's saved images (on
    the platform's registry), run with its instance's template. ImageRefused otherwise."""
    reference = custom_image_check(text)
    if is_saved_image(reference):
        saved = saved_image_by_reference(account=account, reference=str(reference))
        if saved is None:
            raise ImageRefused(
                _("%(image)s is none of your saved images that are ready")
                % {"image": str(reference)}
            )
        return ResolvedImage(saved.template, "", saved.reference)
    template = ImageTemplate.objects.filter(slug=settings.CUSTOM_IMAGE_TEMPLATE).first()
    if template is None:
        raise ImageRefused(
            _(
                "this platform runs no customer images: the operator has set no template for "
                "them (CUSTOM_IMAGE_TEMPLATE=%(slug)s does not exist)"
            )
            % {"slug": settings.CUSTOM_IMAGE_TEMPLATE}
        )
    return ResolvedImage(template, "", str(reference))


LIMITS = {"registry": 255, "username": 255, "password": 4096}


def registry_credential_save(
    *, account: User, registry: str, username: str, password: str, actor: User
) -> RegistryCredential:
    """Save (or replace) the account's login to ``registry``; audited, password encrypted."""
    try:
        registry = references.check_registry(registry)
    except references.BadReference as exc:
        raise ImageRefused(str(exc), field="registry") from exc
    for field, value in (("username", username), ("password", password)):
        if not value:
            raise ImageRefused(_("required"), field=field)
        if len(value) > LIMITS[field]:
            raise ImageRefused(
                _("at most %(most)s characters") % {"most": LIMITS[field]},
                field=field,
            )
    now = timezone.now()
    with transaction.atomic():
        credential, created = RegistryCredential.objects.select_for_update().update_or_create(
            account=account,
            registry=registry,
            defaults={
                "username": username,
                "password_encrypted": secrets.encrypt(password),
                "updated_at": now,
            },
            create_defaults={
                "username": username,
                "password_encrypted": secrets.encrypt(password),
                "created_at": now,
                "updated_at": now,
            },
        )
        audit_record(
            action="registry_credential.saved" if created else "registry_credential.replaced",
            actor=actor,
            obj=credential,
            changes={"registry": registry, "username": username, "account": account.pk},
        )
    return credential


def registry_credential_delete(*, credential: RegistryCredential, actor: User) -> None:
    with transaction.atomic():
        audit_record(
            action="registry_credential.deleted",
            actor=actor,
            obj=credential,
            changes={"registry": credential.registry, "username": credential.username},
        )
        credential.delete()
