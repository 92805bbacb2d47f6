"""Host status: the transition table and the only code that changes ``Host.status``.

Every change is one named transition: it locks the host row, checks ``TRANSITIONS`` for
the states it may start from, changes the status and writes an audit row (``host.status``
with the old and new status and the reason; the heartbeat's own pair writes
``host.offline`` / ``host.online``). A host that is already where the transition leads, or
not in one of its source states, is left as it is: running a transition twice changes
nothing, and a benchmark result that comes in after staff put the host in maintenance does
not undo their decision.

Other apps call these functions (reconciliation, acceptance, the back-office, the staff
dashboard); ``scripts/check_status_writers.py`` (``make lint``) fails on any other writer.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gpurental.accounts.models import AuditEvent, User
from gpurental.accounts.services import audit_event, audit_record
from gpurental.fleet import signals
from gpurental.fleet.models import Host, HostStatus

H = HostStatus
ANY = frozenset(H.values)

# transition → (states it may start from, state it leads to)
TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
    # Staff (back-office, fleet dashboard): their word goes, from any state.
    "drain": (ANY, H.DRAINING),  # no new placements; running instances stay
    "maintenance": (ANY, H.MAINTENANCE),
    "activate": (ANY, H.ACTIVE),  # from maintenance: benchmarked first (host_activate)
    # Acceptance (gpurental.acceptance): a benchmark run asked for, then its verdict.
    "acceptance_start": (ANY, H.ACCEPTANCE),
    "acceptance_pass": (frozenset({H.ACCEPTANCE}), H.ACTIVE),
    "acceptance_hold": (frozenset({H.ACCEPTANCE}), H.HELD),
    # Heartbeats: stale past HOST_OFFLINE_AFTER (reconciliation), and back again.
    "mark_offline": (frozenset({H.ACTIVE}), H.OFFLINE),
    "mark_online": (frozenset({H.OFFLINE}), H.ACTIVE),
}


def _lock(host: Host) -> Host:
    return Host.objects.select_for_update().get(pk=host.pk)


def _move(
    host: Host,
    transition: str,
    *,
    actor: User | None = None,
    reason: str = "",
    action: str = "host.status",
    changes: dict | None = None,
) -> bool:
    """Apply ``transition`` to a locked host when the table allows it; True when it moved."""
    sources, to = TRANSITIONS[transition]
    if host.status == to or host.status not in sources:
        return False
    old = host.status
    host.status = to
    host.save(update_fields=["status"])
    audit_record(
        action=action,
        actor=actor,
        obj=host,
        changes={"status": [old, to], "reason": reason} if changes is None else changes,
    )
    return True


def _transition(
    host: Host, transition: str, *, actor: User | None = None, reason: str = ""
) -> Host:
    with transaction.atomic():
        host = _lock(host)
        _move(host, transition, actor=actor, reason=reason)
    return host


def host_drain(*, host: Host, actor: User | None = None, reason: str = "") -> Host:
    return _transition(host, "drain", actor=actor, reason=reason)


def host_maintenance_start(*, host: Host, actor: User | None = None, reason: str = "") -> Host:
    return _transition(host, "maintenance", actor=actor, reason=reason)


def host_activate(
    *, host: Host, actor: User | None = None, reason: str = "", now: datetime | None = None
) -> Host:
    """Staff put the host back into placements. Back from maintenance with
    ACCEPTANCE_AFTER_MAINTENANCE on, it is benchmarked first: acceptance answers
    ``host_back_from_maintenance`` and the host becomes active when the run passes."""
    with transaction.atomic():
        host = _lock(host)
        if (
            host.status == H.MAINTENANCE
            and settings.ACCEPTANCE_AFTER_MAINTENANCE
            and signals.host_back_from_maintenance.has_listeners()
        ):
            signals.host_back_from_maintenance.send(
                sender=Host, host=host, actor=actor, now=now or timezone.now()
            )
            host.refresh_from_db()
            return host
        _move(host, "activate", actor=actor, reason=reason)
    return host


def host_acceptance_start(*, host: Host, actor: User | None = None, reason: str = "") -> Host:
    """A benchmark run was asked for: no placements until its verdict."""
    return _transition(host, "acceptance_start", actor=actor, reason=reason)


def host_acceptance_pass(*, host: Host, reason: str = "") -> Host:
    return _transition(host, "acceptance_pass", reason=reason)


def host_acceptance_hold(*, host: Host, reason: str = "") -> Host:
    """Held back from placements; ``reason`` names the failing figures, for staff."""
    return _transition(host, "acceptance_hold", reason=reason)


def hosts_mark_offline_many(*, last_beats: dict[int, datetime]) -> list[Host]:
    """Active hosts whose heartbeat is older than HOST_OFFLINE_AFTER (host id → its last
    heartbeat) go offline, many at once (reconciliation finds a rack or a whole fleet
    silent together): locked in one order, moved in one update, audited (``host.offline``)
    in one insert. Returns those that moved."""
    sources, to = TRANSITIONS["mark_offline"]
    with transaction.atomic():
        hosts = list(
            Host.objects.select_for_update().filter(pk__in=list(last_beats)).order_by("pk")
        )
        moved = [host for host in hosts if host.status != to and host.status in sources]
        audits = []
        for host in moved:
            audits.append(
                audit_event(
                    action="host.offline",
                    obj=host,
                    changes={"last_heartbeat_at": last_beats[host.pk].isoformat()},
                )
            )
            host.status = to
        Host.objects.filter(pk__in=[host.pk for host in moved]).update(status=to)
        AuditEvent.objects.bulk_create(audits, batch_size=500)
    return moved


def host_mark_online(*, host: Host) -> Host:
    """An offline host beats again (called by the heartbeat, inside its transaction)."""
    with transaction.atomic():
        host = _lock(host)
        _move(host, "mark_online", action="host.online", changes={})
    return host


# What staff may ask from the back-office and the fleet dashboard, by action name.
STAFF_ACTIONS = {
    "drain": host_drain,
    "maintenance": host_maintenance_start,
    "activate": host_activate,
}
