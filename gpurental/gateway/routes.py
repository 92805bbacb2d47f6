"""Which instance a gateway host name means, and where it listens.

An instance answers at ``<id>.<GATEWAY_DOMAIN>`` (JupyterLab) and at
``<id>-<port>.<GATEWAY_DOMAIN>`` for each other HTTP port its image declares. The gateway
proxies only to a running instance, only for its owner (for a team's, the members who may
operate it), and only to the ports the agent reported for this run.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.conf import settings

from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.teams import roles
from gpurental.teams.models import Membership


@dataclass(frozen=True)
class Address:
    """A parsed gateway host name: the instance, and the port inside it (None: JupyterLab)."""

    instance_id: str
    port: int | None = None

    @property
    def label(self) -> str:
        return self.instance_id if self.port is None else f"{self.instance_id}-{self.port}"


@dataclass(frozen=True)
class Route:
    """Where a running instance listens, and who may reach it."""

    instance_id: str
    owner_id: int
    address: str  # the GPU host's address, where the agent published the ports
    ports: dict[int, int]  # HTTP ports inside the container → published host ports
    jupyter_port: int  # inside the container
    token: str  # JupyterLab's, injected by the gateway; never leaves the platform
    run: str  # changes with every start: a cookie from an earlier run is void
    # For a team's instance, the members who may get in (roles.OPERATORS), as of this lookup.
    operators: frozenset[int] = frozenset()
    # Each admitted person's credentials generation (User.credentials_generation): a session
    # opened in an earlier one was ended by a password reset or "log out everywhere".
    generations: Mapping[int, int] = field(default_factory=dict)

    def admits(self, user_id, generation: int | None = None) -> bool:
        """Whether the person ``user_id``, with a session of credentials ``generation``
        (None: one made before generations, so 0; a revoked person's is higher, so
        leaving it out fails closed), may use this route: the owner, or an
        operator, whose credentials have not been revoked since."""
        if user_id is None or not (user_id == self.owner_id or user_id in self.operators):
            return False
        return (generation or 0) == self.generations.get(user_id, 0)

    def upstream(self, port: int | None) -> tuple[str, int] | None:
        host_port = self.ports.get(self.jupyter_port if port is None else port)
        return None if host_port is None else (self.address, host_port)


def parse_host(host: str, domain: str | None = None) -> Address | None:
    """``<uuid>[-<port>].<domain>[:port]`` → Address; anything else → None."""
    domain = (domain or settings.GATEWAY_DOMAIN).lower()
    name = host.lower().rsplit(":", 1)[0] if host.count(":") == 1 else host.lower()
    suffix = "." + domain
    if not name.endswith(suffix):
        return None
    label = name[: -len(suffix)]
    if "." in label:
        return None
    instance_part, port = label[:36], None
    if len(label) > 36:
        rest = label[36:]
        if not (rest.startswith("-") and rest[1:].isdigit() and len(rest) <= 6):
            return None
        port = int(rest[1:])
        if not 1 <= port <= 65535:
            return None
    try:
        canonical = str(uuid.UUID(instance_part))
    except ValueError:
        return None
    return Address(canonical, port) if canonical == instance_part else None


def origin(instance_id, port: int | None = None) -> str:
    """The instance's origin, as a browser writes it in the Origin header."""
    label = str(instance_id) if port is None else f"{instance_id}-{port}"
    return _origin(label)


def group_origin(group_id) -> str:
    """An elastic group's endpoint: ``grp-<group id>.<GATEWAY_DOMAIN>`` (gateway/groups.py)."""
    return _origin(f"grp-{group_id}")


def _origin(label: str) -> str:
    scheme, gw_port = settings.GATEWAY_SCHEME, settings.GATEWAY_PORT
    default = {"http": 80, "https": 443}.get(scheme)
    suffix = "" if gw_port == default else f":{gw_port}"
    return f"{scheme}://{label}.{settings.GATEWAY_DOMAIN}{suffix}"


def run_of(token: str) -> str:
    """A public stand-in for the run's secret: it names the run without revealing the token."""
    return hashlib.sha256(b"gpurental-run:" + token.encode()).hexdigest()[:16]


def route_for(instance_id: str) -> Route | None:
    """The route to a running instance, or None (not running, no such instance, no ports,
    its owner's account switched off)."""
    instance = (
        # A switched-off account loses the gateway as it loses SSH and the API, whatever
        # session cookie its browser still holds.
        Instance.objects.filter(pk=instance_id, status=InstanceStatus.RUNNING, user__is_active=True)
        .select_related("host", "image", "user")
        .only(
            "id",
            "user_id",
            "user__credentials_generation",
            "jupyter_port",
            "jupyter_token",
            "ports",
            "host__address",
            "image__port",
            "image__http_ports",
        )
        .first()
    )
    if instance is None or instance.host is None or not instance.jupyter_token:
        return None
    operators = dict(
        Membership.objects.filter(
            team__account_id=instance.user_id,
            role__in=roles.OPERATORS,
            user__is_active=True,
        ).values_list("user_id", "user__credentials_generation")
    )
    declared = {instance.image.port, *(instance.image.http_ports or [])}
    reported = {int(k): int(v) for k, v in (instance.ports or {}).items()}
    if not reported and instance.jupyter_port:  # reported by an agent older than the gateway
        reported = {instance.image.port: instance.jupyter_port}
    return Route(
        instance_id=str(instance.pk),
        owner_id=instance.user_id,
        address=instance.host.address,
        # Only HTTP ports the image declares: never sshd's, whatever the agent published.
        ports={p: hp for p, hp in reported.items() if p in declared},
        jupyter_port=instance.image.port,
        token=instance.jupyter_token,
        run=run_of(instance.jupyter_token),
        operators=frozenset(operators),
        generations={instance.user_id: instance.user.credentials_generation, **operators},
    )
