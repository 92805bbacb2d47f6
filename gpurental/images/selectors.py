"""Reads for customers' images."""

from __future__ import annotations

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
