"""Who the SSH gateway lets in, and where it takes them (the Django side of ``sshd``).

- ``ssh_access``: the command a customer types for an instance, or None when there is no
  SSH to it now (``ssh_endpoint``: the same whatever the state, for pages that update live). The console's instance page, the API and the CLI all show this one.
- ``ssh_login``: the decision at login: the instance (its id is the SSH user name) must be
  running, its image must have sshd, and the key must be one of its owner's. Anything
  else is one and the same refusal, so that no answer tells which instances exist.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q

from gpurental.accounts.models import SSHKey
from gpurental.accounts.services import ssh_key_touch
from gpurental.gateway import sshkeys
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.teams import roles

# The user inside instance images (images/README.md): root, which the engine remaps; on a
# leased host's own network (no remapping there), jovyan. Their sshd logs in no one else.
CONTAINER_USER, UNMAPPED_CONTAINER_USER = "root", "jovyan"


def container_user(instance: Instance) -> str:
    """Whom the gateway logs in as in this instance's container."""
    if instance.lease_id is not None and instance.lease.host_network:
        return UNMAPPED_CONTAINER_USER
    return CONTAINER_USER


def ssh_access(instance: Instance) -> dict | None:
    """``{"host", "port", "user", "command"}`` while the instance runs with sshd, else None."""
    if instance.status != InstanceStatus.RUNNING:
        return None
    return ssh_endpoint(instance)


def ssh_endpoint(instance: Instance) -> dict | None:
    """The same, whatever the instance's state: None only when its image has no sshd."""
    if not instance.image.ssh_port:
        return None
    host, port, user = settings.SSH_GATEWAY_HOST, settings.SSH_GATEWAY_PORT, str(instance.pk)
    return {
        "host": host,
        "port": port,
        "user": user,
        "command": f"ssh -p {port} {user}@{host}",
    }


@dataclass(frozen=True)
class Upstream:
    """Where an accepted login goes: the container's sshd, published on its host."""

    instance_id: str
    user_email: str
    key_id: uuid.UUID
    key_fingerprint: str
    address: str
    port: int
    host_public_key: str  # this run's sshd host key, the only one to trust
    # The key's holder and their credentials generation at this login: a connection whose
    # holder's generation has moved on since (a password reset, "log out everywhere") ends.
    holder_id: int = 0
    generation: int = 0
    container_user: str = CONTAINER_USER  # whom to log in as inside (container_user)


def ssh_login(*, instance_id: str, public_key_line: str) -> Upstream | None:
    """The upstream for this user name and key, or None (refused, whatever the reason)."""
    try:
        pk = uuid.UUID(instance_id)
    except ValueError:
        return None
    instance = (
        Instance.objects.select_related("image", "host", "user", "lease")
        .filter(pk=pk, status=InstanceStatus.RUNNING, user__is_active=True)
        .first()
    )
    if instance is None or instance.host is None or not instance.image.ssh_port:
        return None
    port = (instance.ports or {}).get(str(instance.image.ssh_port))
    if not port or not instance.ssh_host_key:
        return None
    # The owner's keys; for a team's instance, those of its members who may operate it.
    holders = Q(user_id=instance.user_id) | Q(
        user__memberships__team__account_id=instance.user_id,
        user__memberships__role__in=roles.OPERATORS,
    )
    key = (
        SSHKey.objects.filter(holders, public_key=public_key_line, user__is_active=True)
        .select_related("user")
        .first()
    )
    if key is None:
        return None
    ssh_key_touch(key_id=key.pk)
    return Upstream(
        instance_id=str(instance.pk),
        user_email=instance.user.email,
        key_id=key.pk,
        key_fingerprint=key.fingerprint,
        address=instance.host.address,
        port=int(port),
        host_public_key=sshkeys.public_key_of(instance.ssh_host_key),
        holder_id=key.user_id,
        generation=key.user.credentials_generation,
        container_user=container_user(instance),
    )
