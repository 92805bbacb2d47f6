"""What happens to instances when their host goes silent, comes back, or was not doing
what the platform thought: the transitions reconciliation calls.

    running ─(host silent HOST_OFFLINE_AFTER)→ unreachable ─(back, container up)→ running
                                                │  └─(back, container gone)→ stopped
                                                └─(silent HOST_LOST_AFTER)→ lost
    lost ─(host back: its container stopped, never removed)→ stopped

Billing stops at the host's last heartbeat and resumes at the observation that found
the container running again; the GPUs stay held until the instance is lost.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from gpurental.billing.services import metering
from gpurental.rentals import hostcalls
from gpurental.rentals.models import Instance
from gpurental.rentals.services.lifecycle.base import (
    LAUNCHING,
    S,
    _lock,
    _move,
    _move_many,
    notify_many_on_commit,
    notify_on_commit,
)
from gpurental.rentals.services.lifecycle.reports import launch_fail, remove_finish, stop_finish
from gpurental.rentals.services.scheduling import gpus_release

log = logging.getLogger(__name__)


def _at(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def _unreachable_reason(instance: Instance, last_beat: datetime) -> str:
    return (
        f"host {instance.host.name} stopped heart-beating at {_at(last_beat)}; "
        "not billed from then on, GPUs and /workspace kept while we wait for it"
    )


def instance_mark_unreachable(*, instance: Instance, last_beat: datetime, now: datetime) -> None:
    """Its host went silent: billing stops at the last heartbeat, the GPUs stay held."""
    with transaction.atomic():
        instance = _lock(instance)
        if instance.status != S.RUNNING:
            return
        _move(
            instance,
            S.UNREACHABLE,
            allowed_from={S.RUNNING},
            reason=_unreachable_reason(instance, last_beat),
            now=now,
            stopped_at=instance.stopped_at or last_beat,
        )
        notify_on_commit(instance, "instance_unreachable")


def instances_mark_unreachable(
    *, last_beats: dict[int, datetime], now: datetime, silent_before: datetime | None = None
) -> int:
    """``instance_mark_unreachable`` for every running instance of many silent hosts (host
    id → its last heartbeat) at once: what a reconcile pass does when a rack or a whole
    fleet goes quiet. The same rule, in a few statements; returns how many moved.
    ``silent_before``: only hosts still silent since then (a beat that came in after the
    hosts were judged keeps its instances running)."""
    still_silent = {"host__last_heartbeat_at__lt": silent_before} if silent_before else {}
    with transaction.atomic():
        instances = list(
            Instance.objects.select_for_update(of=("self",))
            .select_related("host")
            .filter(host_id__in=list(last_beats), status=S.RUNNING, **still_silent)
            .order_by("pk")  # one lock order for every pass: no deadlock between two
        )
        moves = []
        for instance in instances:
            last = last_beats[instance.host_id]
            fields = {"stopped_at": instance.stopped_at or last}
            moves.append((instance, _unreachable_reason(instance, last), fields))
        _move_many(moves, S.UNREACHABLE, allowed_from={S.RUNNING}, now=now)
        notify_many_on_commit(instances, "instance_unreachable")
    return len(instances)


def instance_mark_lost(*, instance: Instance, last_beat: datetime, now: datetime) -> None:
    """Its host has been silent past ``HOST_LOST_AFTER``: the GPUs go back to the pool.
    Nothing is removed: when the host returns, the container is stopped and the instance
    becomes ``stopped`` with its /workspace. An ``auto_recover`` instance is relaunched on
    another host meanwhile (lifecycle.recovery)."""
    with transaction.atomic():
        instance = _lock(instance)
        why = f"host {instance.host.name} silent since {_at(last_beat)}"
        if instance.status in LAUNCHING:
            launch_fail(instance, reason=f"{why}", now=now, ended_at=last_beat)
        elif instance.status in (S.RUNNING, S.UNREACHABLE):
            _move(
                instance,
                S.LOST,
                allowed_from={S.RUNNING, S.UNREACHABLE},
                reason=f"{why}; its GPUs were released. /workspace stays on the host: when it "
                "returns, this instance becomes stopped and can be started again",
                now=now,
                stopped_at=instance.stopped_at or last_beat,
            )
            gpus_release(instance=instance, at=now)
            notify_on_commit(instance, "instance_lost")
            if instance.auto_recover:
                pk = instance.pk
                transaction.on_commit(lambda: _recover(pk, now))


def _recover(instance_id, now: datetime) -> None:
    """Relaunch an auto_recover instance elsewhere (lifecycle.recovery), once its loss is
    committed; a failure there never undoes the loss."""
    from gpurental.rentals.services.lifecycle.recovery import instance_recover

    try:
        instance_recover(instance_id=instance_id, now=now)
    except Exception:
        log.exception("auto-recover of instance %s failed", instance_id)


def instance_host_back(
    *, instance: Instance, state: str | None, observed_at: datetime, now: datetime
) -> None:
    """The host of an unreachable or lost instance answers again, and lists the instance's
    container in ``state`` (None: not at all) as of ``observed_at``."""
    with transaction.atomic():
        instance = _lock(instance)
        if instance.status_changed_at >= observed_at:
            return  # seen before the state it would change
        host = instance.host.name
        if instance.status == S.UNREACHABLE and state == "running":
            silent_from = instance.stopped_at
            # Everything up to the last heartbeat is charged before billing resumes.
            metering.instance_settle(instance_id=instance.pk, now=now)
            _move(
                instance,
                S.RUNNING,
                allowed_from={S.UNREACHABLE},
                reason=f"host {host} is back and the container kept running; "
                f"not billed from {_at(silent_from)} to {_at(observed_at)}",
                now=now,
                running_since=observed_at,
                stopped_at=None,
            )
        elif instance.status == S.UNREACHABLE:
            gone = "is gone" if state is None else f"is {state}"
            _move(
                instance,
                S.STOPPED,
                allowed_from={S.UNREACHABLE},
                reason=f"host {host} is back, but the container {gone}; /workspace kept, "
                "start it again",
                now=now,
            )
            gpus_release(instance=instance, at=now)
            if state not in (None, "stopped"):
                hostcalls.stop(instance)
        elif instance.status == S.LOST and state is not None:
            _move(
                instance,
                S.STOPPED,
                allowed_from={S.LOST},
                reason=f"host {host} is back; its container was stopped and /workspace kept: "
                "start it again",
                now=now,
            )
            if state != "stopped":
                hostcalls.stop(instance)


def instance_mark_vanished(*, instance: Instance, state: str | None, now: datetime) -> None:
    """A running instance's container stopped behind the platform's back (it exited, the
    engine restarted, someone removed it): stopped, /workspace kept, billing ends now."""
    what = "disappeared" if state in (None, "stopped", "removing") else f"is {state}"
    with transaction.atomic():
        instance = _lock(instance)
        if instance.status != S.RUNNING:
            return
        _move(
            instance,
            S.STOPPED,
            allowed_from={S.RUNNING},
            reason=f"the container {what} on host {instance.host.name} (it stopped outside "
            "the platform); /workspace kept, start it again",
            now=now,
            stopped_at=now,
        )
        gpus_release(instance=instance, at=now)
        hostcalls.stop(instance)


def instance_fail_launch_timeout(*, instance_id, timeout_s: int, now: datetime) -> None:
    with transaction.atomic():
        instance = _lock(instance_id)
        if instance.status in LAUNCHING:
            launch_fail(
                instance,
                reason=f"the launch did not finish within {timeout_s} s (the host agent may "
                "have restarted); try again",
                now=now,
            )


def instance_fail_unsent(
    *, instance_id, host_name: str, error: str, now: datetime | None = None
) -> None:
    """A start or restart whose command never left: the message broker did not take it.
    The launch fails now (its GPUs are free again, nothing is charged) instead of waiting
    LAUNCH_TIMEOUT for an agent that will never hear of it."""
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance_id)
        if instance.status in LAUNCHING:
            launch_fail(
                instance,
                reason=f"the start command could not be sent to host {host_name}: the "
                f"message broker is unreachable ({error[:120]}); try again",
                now=now,
            )


def instance_stop_timeout(*, instance_id, now: datetime) -> None:
    """A stop the host never confirmed: stopped anyway (reconciliation stops the container
    if it still runs)."""
    with transaction.atomic():
        instance = _lock(instance_id)
        if instance.status == S.STOPPING:
            stop_finish(instance, reason=instance.status_reason, now=now)


def instance_remove_timeout(*, instance_id, now: datetime) -> None:
    """A terminate the host never confirmed: terminated anyway (reconciliation removes the
    container when the host lists it)."""
    with transaction.atomic():
        instance = _lock(instance_id)
        if instance.status == S.TERMINATING:
            remove_finish(
                instance, reason="terminated; the host did not confirm the removal", now=now
            )
