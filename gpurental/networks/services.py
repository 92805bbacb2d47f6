"""Private networks: an account's instances reach each other, and no one else's.

On a host, the account's network is a Docker bridge of its own (``gpr-p-<index>``), with
traffic between its containers on and no way out: the agent joins each instance to it
(gpurental/agent/runtimes/network.py), under the names ``<instance id>.internal`` and,
when the instance's name is a DNS label, ``<name>.internal``. Instances of one account on
different hosts do not share it: a cross-host overlay is not built yet, so a cluster is
placed on one host (rentals.services.lifecycle.clusters).
"""

from __future__ import annotations

import re

from django.db import IntegrityError, connection, transaction
from django.utils.translation import gettext as _

from gpurental.accounts.services import audit_record
from gpurental.networks.addressing import capacity, subnet_of
from gpurental.networks.models import PrivateNetwork

DOMAIN = "internal"
LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class PoolExhausted(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def private_network_of(account) -> PrivateNetwork:
    """The account's network, made on first use (a subnet the database saw no one take)."""
    existing = PrivateNetwork.objects.filter(account=account).first()
    if existing is not None:
        return existing
    for _attempt in range(5):
        index = _next_index()
        if index >= capacity():  # the sequence ran past the pool: reuse a freed subnet
            index = _first_gap()
        if index is None:
            raise PoolExhausted(
                _("no private network is left in the operator's pool; ask the operator")
            )
        try:
            with transaction.atomic():
                network = PrivateNetwork.objects.create(account=account, index=index)
        except IntegrityError:  # another launch took this index, or made this account's
            existing = PrivateNetwork.objects.filter(account=account).first()
            if existing is not None:
                return existing
            continue
        audit_record(action="network.create", obj=network, changes={"subnet": subnet_of(index)})
        return network
    raise PoolExhausted(_("the private network could not be made; try again"))


def _next_index() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval('networks_private_index')")
        return int(cursor.fetchone()[0])


def _first_gap() -> int | None:
    taken = set(PrivateNetwork.objects.values_list("index", flat=True))
    return next((i for i in range(capacity()) if i not in taken), None)


def names_of(instance) -> list[str]:
    """The names the instance answers to on its private network."""
    names = [f"{instance.id}.{DOMAIN}"]
    name = (instance.name or "").strip().lower()
    if LABEL.match(name):
        names.insert(0, f"{name}.{DOMAIN}")
    return names


def private_spec(instance) -> dict | None:
    """The ``private_network`` part of the instance's start spec; None on host networking
    (a leased whole host has the host's own network)."""
    if instance.lease_id is not None:
        return None
    network = private_network_of(instance.user)
    return {"index": network.index, "subnet": network.subnet, "names": names_of(instance)}
