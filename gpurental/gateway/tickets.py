"""One-time tickets: how the owner gets logged in at an instance's origin.

The console's Open JupyterLab (and the API's connect) mints a ticket: 32 random bytes,
bound to the user, the instance and the port, valid for GATEWAY_TICKET_TTL_S seconds and
for one use. Only its hash is stored (Redis, with that expiry). The browser takes it to
``<origin>/_gw/enter?t=…``; the gateway spends it (GETDEL: a second use finds nothing)
and answers with a cookie scoped to that origin alone, then sends the browser on without
the ticket in the address bar.

The cookie is signed with the platform's SECRET_KEY: {user, host label, run, credentials
generation}. The run changes with every start, so a cookie never outlives the run it was
issued for; the generation changes when the user's credentials are revoked (a password
reset or change, "log out everywhere": ``accounts.services.account_credentials_revoke``),
so a cookie (or a ticket) from before that opens nothing, and the gateway, woken on the
instances' state channels, closes the websockets it carried.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import secrets
from dataclasses import dataclass
from urllib.parse import quote

from django.conf import settings
from django.core import signing
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.gateway import routes
from gpurental.rentals.events import state_redis
from gpurental.rentals.exceptions import InvalidTransition, RentalError
from gpurental.rentals.models import InstanceStatus

ENTER_PATH = "/_gw/enter"
COOKIE_SALT = "gpurental.gateway.session"


def ticket_key(ticket: str) -> str:
    return "gpurental:gw:ticket:" + hashlib.sha256(ticket.encode()).hexdigest()


@dataclass(frozen=True)
class Ticket:
    url: str
    expires_at: dt.datetime


def ticket_mint(*, user, instance, port: int | None = None, next_path: str = "/") -> Ticket:
    """A link that logs ``user`` in once at the instance's origin (the caller checked that
    the user owns the running instance)."""
    if not next_path.startswith("/") or next_path.startswith("//"):
        next_path = "/"
    ticket = secrets.token_urlsafe(32)
    label = routes.Address(str(instance.pk), port).label
    ttl = settings.GATEWAY_TICKET_TTL_S
    state_redis().set(
        ticket_key(ticket),
        json.dumps(
            {
                "user": user.pk,
                "g": user.credentials_generation,
                "label": label,
                "next": next_path,
            }
        ),
        ex=ttl,
    )
    return Ticket(
        url=f"{routes.origin(instance.pk, port)}{ENTER_PATH}?t={quote(ticket)}",
        expires_at=timezone.now() + dt.timedelta(seconds=ttl),
    )


def connect(*, user, instance, port: int | None = None) -> Ticket:
    """The owner's one-time link into a running instance: JupyterLab, or another HTTP port
    its image declares. The caller has checked that ``user`` owns ``instance``."""
    if instance.status != InstanceStatus.RUNNING or not instance.jupyter_port:
        raise InvalidTransition(
            _("instance %(id)s is %(status)s: it can be opened once it is running")
            % {"id": instance.pk, "status": instance.status},
            field="status",
        )
    connect_port_check(instance=instance, port=port)
    return ticket_mint(
        user=user, instance=instance, port=port, next_path="/" if port is not None else "/lab"
    )


def connect_port_check(*, instance, port: int | None) -> None:
    """Refuse (RentalError on port) a port that the instance's image does not declare;
    None, JupyterLab, is always there."""
    declared = list(instance.image.http_ports or [])
    if port is not None and port not in declared:
        raise RentalError(
            _(
                "%(port)s is not an HTTP port this image declares (%(declared)s); "
                "leave it out for JupyterLab"
            )
            % {"port": port, "declared": ", ".join(map(str, declared)) or _("it declares none")},
            field="port",
        )


def cookie_name(secure: bool) -> str:
    # __Host-: only over HTTPS, no Domain, path /; so no sibling can set or read it.
    return "__Host-gpurental-gw" if secure else "gpurental-gw"


def cookie_value(*, user_id: int, label: str, run: str, generation: int = 0) -> str:
    return signing.dumps(
        {"u": user_id, "l": label, "r": run, "g": generation}, salt=COOKIE_SALT, compress=False
    )


def cookie_read(value: str) -> dict | None:
    try:
        data = signing.loads(value, salt=COOKIE_SALT, max_age=settings.GATEWAY_SESSION_TTL_S)
    except signing.BadSignature:
        return None
    return data if isinstance(data, dict) else None
