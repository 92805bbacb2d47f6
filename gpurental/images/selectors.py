"""Reads for customers' images."""

from __future__ import annotations

import re
from functools import lru_cache

from gpurental import registrytokens
from gpurental.images import secrets
from gpurental.images.models import RegistryCredential


def registry_auth(*, account_id: int, registry: str) -> dict | None:
    """The login the account saved for ``registry``, in the engine's form
    ({"username", "password", "serveraddress"}), or None; for the host that pulls only."""
    credential = RegistryCredential.objects.filter(
        account_id=account_id, registry__iexact=registry
    ).first()
    if credential is None:
        return None
    return {
        "username": credential.username,
        "password": secrets.decrypt(credential.password_encrypted),
        "serveraddress": credential.registry,
    }


def hosts_with_image(*, reference: str):
    """Ids of the hosts whose cache holds ``reference`` (a subquery for placement)."""
    from gpurental.images.models import HostImage

    return HostImage.objects.filter(reference=reference).values("host_id")


def registry_logins_of(*, account):
    """The account's registry logins (never their passwords' plain text)."""
    return RegistryCredential.objects.filter(account=account).order_by("registry")


def platform_registry_auth(
    repository: str, actions: tuple[str, ...], *, subject: str, ttl_s: int = 3600
) -> dict | None:
    """What ``subject`` (a host, or the control plane) sends the platform's registry to do
    ``actions`` on ``repository``: a token for that alone with PLATFORM_REGISTRY_TOKEN_KEY
    ({"registrytoken", "serveraddress"}), else the hosts' shared login, else None (a
    registry without logins)."""
    from django.conf import settings

    if settings.PLATFORM_REGISTRY_TOKEN_KEY:
        return {
            "registrytoken": registrytokens.token(
                _token_key(settings.PLATFORM_REGISTRY_TOKEN_KEY),
                subject=subject,
                repository=repository,
                actions=actions,
                ttl_s=ttl_s,
            ),
            "serveraddress": settings.PLATFORM_REGISTRY,
        }
    if not settings.PLATFORM_REGISTRY_USERNAME:
        return None
    return {
        "username": settings.PLATFORM_REGISTRY_USERNAME,
        "password": settings.PLATFORM_REGISTRY_PASSWORD,
        "serveraddress": settings.PLATFORM_REGISTRY,
    }


@lru_cache(maxsize=2)
def _token_key(path: str):
    return registrytokens.key_load(path)


def is_platform_registry(registry: str) -> bool:
    from django.conf import settings

    return (
        bool(settings.PLATFORM_REGISTRY) and registry.lower() == settings.PLATFORM_REGISTRY.lower()
    )


def saved_images_of(*, account):
    """The account's saved images, newest first, the deleted ones left out."""
    from gpurental.images.models import SavedImage, SavedImageStatus

    return SavedImage.objects.filter(account=account).exclude(status=SavedImageStatus.DELETED)


def saved_image_by_reference(*, account, reference: str):
    """The account's ready saved image with this reference, or None (another account's is
    None too: nothing says it exists)."""
    from gpurental.images.models import SavedImage, SavedImageStatus

    return (
        SavedImage.objects.filter(
            account=account, reference=reference, status=SavedImageStatus.READY
        )
        .select_related("template")
        .first()
    )


def is_saved_image(reference) -> bool:
    """Whether an image reference (``imagerefs.Reference``) names a saved image: on the
    platform's registry, under an account's folder ``a<account id>/``. Other paths there
    are pulled like any registry's, with the account's own login."""
    return is_platform_registry(reference.registry) and bool(
        re.match(r"a[0-9]+/", reference.repository)
    )
