"""Reconciliation: make the database agree with what hosts actually run. It decides;
named transitions make the changes (the lifecycle's for instances, ``fleet.lifecycle``'s
for hosts).

- From each container list a host sends (with the time it was taken): a running
  instance whose container is gone or exited is stopped (its /workspace kept); an
  unreachable or lost instance whose host answers again is settled; a container the
  platform no longer wants is stopped, and removed only for a terminated instance; a
  group's warm replica keeps its stopped container (parked, to be started as it is).
- Periodically: hosts without a heartbeat go offline; their running instances become
  unreachable (billing stops at the last heartbeat, GPUs held), and after
  ``HOST_LOST_AFTER`` lost (GPUs released). Launches, stops and removals that never
  finished are settled.
Decisions take only instances whose state is older than the observation, so a list
taken just before a transition cannot undo it.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import Q

from gpurental.fleet.lifecycle import hosts_mark_offline_many
from gpurental.fleet.models import Host, HostStatus
from gpurental.rentals import hostcalls
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.rentals.selectors import HOLDING
from gpurental.rentals.services import lifecycle

log = logging.getLogger(__name__)
S = InstanceStatus
GRACE = timedelta(seconds=2)
# The states of a stopped instance's container, kept created until its next start.
PARKED_STATES = ("exited", "created")


def host_containers_reconcile(
    *, host: Host, containers: dict[str, str], observed_at: datetime, now: datetime
) -> None:
    settled_before = observed_at - GRACE
    # One read for the whole list (a heartbeat brings one every few seconds from every
    # host): the host's running, unreachable and lost instances, and those it lists.
    rows = Instance.objects.filter(
        Q(host=host, status__in=(S.RUNNING, S.UNREACHABLE, S.LOST)) | Q(pk__in=_uuids(containers))
    ).values_list("pk", "host_id", "status", "status_changed_at")
    known = {}
    for pk, host_id, status, changed in rows:
        instance_id = str(pk)
        known[instance_id] = (status, changed)
        if host_id != host.pk:
            continue
        state = containers.get(instance_id)
        if status == S.RUNNING and changed < settled_before and state != "running":
            lifecycle.instance_mark_vanished(instance=instance_id, state=state, now=now)
        elif status in (S.UNREACHABLE, S.LOST) and changed < observed_at:
            lifecycle.instance_host_back(
                instance=instance_id, state=state, observed_at=observed_at, now=now
            )

    for instance_id, state in containers.items():
        status, changed = known.get(instance_id, (None, None))
        if changed is not None and changed >= settled_before:
            continue  # a transition is under way; the next list decides
        if status == S.TERMINATED:
            log.info("host %s: removing what terminated instance %s left", host.name, instance_id)
            hostcalls.remove_id(host, instance_id)
        elif status in (None, S.STOPPED, S.FAILED) and state not in ("stopped", *PARKED_STATES):
            # A container still running for a stopped instance (or an unknown one: a
            # database restored from an older backup, say) is stopped, and kept like any
            # stopped container: only a terminate removes a /workspace.
            log.info(
                "host %s: stopping leftover container of %s instance %s",
                host.name,
                status or "unknown",
                instance_id,
            )
            hostcalls.stop_id(host, instance_id)


def _uuids(containers: dict[str, str]) -> list[str]:
    valid = []
    for key in containers:
        try:
            valid.append(str(uuid.UUID(key)))
        except ValueError:
            continue
    return valid


def hosts_mark_offline(*, now: datetime, heard_since: datetime | None = None) -> list[str]:
    """Hosts whose heartbeat is stale: offline; their instances unreachable, then lost.

    ``heard_since``: since when the control plane could hear heartbeats without a gap (see
    ``reconcile_pass``). A host's silence counts only from then: beats it sent while the
    database or the control worker was down were never recorded, which says nothing of
    the host."""
    cutoff = now - timedelta(seconds=settings.HOST_OFFLINE_AFTER)
    lost_cutoff = now - timedelta(seconds=settings.HOST_LOST_AFTER)
    if heard_since is not None and heard_since > cutoff:
        return []  # not listening for long enough to call any host silent
    # Active hosts go offline; any stale host (draining, maintenance too) has its instances
    # settled. In bulk (a rack or a whole fleet can go quiet at once): the hosts in one
    # transaction, then their running instances in another (bench/reconcile.py).
    stale = (
        Host.objects.filter(last_heartbeat_at__lt=cutoff)
        .filter(Q(status=HostStatus.ACTIVE) | Q(instances__status__in=HOLDING))
        .values_list("pk", flat=True)
        .distinct()
    )
    with transaction.atomic():
        hosts = list(Host.objects.select_for_update().filter(pk__in=list(stale)).order_by("pk"))
        # A heartbeat may have come in since the read above: judged again under the lock.
        silent = {
            host.pk: host.last_heartbeat_at or host.created_at
            for host in hosts
            if (host.last_heartbeat_at or host.created_at) < cutoff
        }
        # An active host goes offline (fleet's transition; other states stay as they are).
        hosts_mark_offline_many(last_beats=silent)
    lost = {pk: last for pk, last in silent.items() if max(last, heard_since or last) < lost_cutoff}
    for instance in Instance.objects.filter(host_id__in=list(lost), status__in=HOLDING):
        lifecycle.instance_mark_lost(instance=instance, last_beat=lost[instance.host_id], now=now)
    lifecycle.instances_mark_unreachable(
        last_beats={pk: last for pk, last in silent.items() if pk not in lost},
        now=now,
        silent_before=cutoff,
    )
    return [host.name for host in hosts if host.pk in silent]


def stuck_operations_settle(*, now: datetime) -> None:
    launch_cutoff = now - timedelta(seconds=settings.LAUNCH_TIMEOUT)
    for pk in Instance.objects.filter(
        status__in=(S.PENDING, S.PROVISIONING), status_changed_at__lt=launch_cutoff
    ).values_list("pk", flat=True):
        lifecycle.instance_fail_launch_timeout(
            instance_id=pk, timeout_s=settings.LAUNCH_TIMEOUT, now=now
        )
    stop_cutoff = now - timedelta(seconds=settings.STOP_TIMEOUT)
    for pk in Instance.objects.filter(
        status=S.STOPPING, status_changed_at__lt=stop_cutoff
    ).values_list("pk", flat=True):
        lifecycle.instance_stop_timeout(instance_id=pk, now=now)
    for pk in Instance.objects.filter(
        status=S.TERMINATING, status_changed_at__lt=stop_cutoff
    ).values_list("pk", flat=True):
        lifecycle.instance_remove_timeout(instance_id=pk, now=now)


def fleet_reconcile(*, now: datetime | None = None, heard_since: datetime | None = None) -> None:
    now = now or datetime.now(UTC)
    hosts_mark_offline(now=now, heard_since=heard_since)
    stuck_operations_settle(now=now)


# The periodic pass keeps, in the cache, when it last finished and since when it has run
# without a gap.
LAST_RUN_KEY = "reconcile:last-pass"
HEARD_SINCE_KEY = "reconcile:heard-since"
GAP_PASSES = 3  # more than this many periods since the last finished pass is a gap


def reconcile_pass(*, now: datetime | None = None) -> datetime:
    """The periodic reconcile. After a gap (the database or the control worker was down,
    or the cache was emptied), host silence is counted only from the first pass after it,
    so an outage of the control plane never marks live hosts offline nor stops billing
    for their instances. Returns since when the control plane has been listening."""
    now = now or datetime.now(UTC)
    state = cache.get_many([LAST_RUN_KEY, HEARD_SINCE_KEY])
    last, since = state.get(LAST_RUN_KEY), state.get(HEARD_SINCE_KEY)
    gap = timedelta(seconds=settings.RECONCILE_INTERVAL * GAP_PASSES)
    if last is None or since is None or not timedelta(0) <= now - last <= gap:
        if last is not None:
            log.warning("reconcile: no pass since %s; hosts' silence counts from now", last)
        since = now
    fleet_reconcile(now=now, heard_since=since)
    # Only a pass that finished counts: one that failed on a database outage does not.
    cache.set_many({LAST_RUN_KEY: now, HEARD_SINCE_KEY: since}, timeout=None)
    return since
