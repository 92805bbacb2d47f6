"""Telling the gateways that a group changed (its replicas' roles, its spec): they drop
their cached view of it at once. Sent after commit; losing one is harmless, as the
gateways also expire what they cache."""

from __future__ import annotations

import logging

from django.db import transaction

from gpurental.rentals.events import state_redis

log = logging.getLogger(__name__)


def group_channel(group_id) -> str:
    return f"gpurental:group-state:{group_id}"


def publish_group_changed(group_id) -> None:
    def send() -> None:
        try:
            state_redis().publish(group_channel(group_id), "changed")
        except Exception:  # noqa: BLE001 - see the module docstring
            log.warning("could not publish the change of group %s", group_id, exc_info=True)

    transaction.on_commit(send)
