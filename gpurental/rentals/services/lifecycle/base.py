"""Building blocks of the lifecycle: lock, move, record. Private to this package.

``_move`` takes the states the transition may start from; each named transition passes
its own, so there is no table of everything allowed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from gpurental.accounts.models import User
from gpurental.notifications.services import notify
from gpurental.rentals.events import (
    group_state_publish,
    publish_instance_event,
    publish_instance_events,
)
from gpurental.rentals.exceptions import InvalidTransition
from gpurental.rentals.models import Instance, InstanceEvent, InstanceStatus

log = logging.getLogger(__name__)
S = InstanceStatus
GROUP_TICK = "gpurental.groups.tasks.group_tick"  # by name: groups builds on rentals
STOPPABLE = (S.PENDING, S.PROVISIONING, S.RUNNING, S.UNREACHABLE)
LAUNCHING = (S.PENDING, S.PROVISIONING)


def _lock(instance: Instance | str) -> Instance:
    pk = instance.pk if isinstance(instance, Instance) else instance
    return (
        Instance.objects.select_for_update(of=("self",))
        .select_related("host", "plan", "image", "gpu_model", "user")
        .get(pk=pk)
    )


def _event(instance: Instance, **fields) -> InstanceEvent:
    event = InstanceEvent.objects.create(instance=instance, **fields)
    publish_instance_event(instance.pk, _event_payload(instance, event))
    return event


def _event_payload(instance: Instance, event: InstanceEvent) -> dict:
    """What live pages and long-polls are told of an event."""
    return {
        "kind": event.kind,
        "status": instance.status,
        "from_status": event.from_status,
        "step": event.step,
        "reason": event.reason,
        "at": event.created_at.isoformat(),
        **(event.data or {}),
    }


def _check_move(instance: Instance, to: str, allowed: set[str]) -> None:
    if instance.status not in allowed:
        raise InvalidTransition(
            _(
                "instance %(instance)s is %(status)s; only an instance that is %(allowed)s "
                "can become %(to)s"
            )
            % {
                "instance": instance,
                "status": instance.status,
                "allowed": ", ".join(sorted(allowed)),
                "to": to,
            },
            field="status",
        )


def _set(instance: Instance, to: str, *, reason: str, now: datetime, **fields) -> str:
    """The move's changes on the (locked) row in memory; returns the old status."""
    old = instance.status
    instance.status = to
    instance.status_changed_at = now
    if to in (S.FAILED, S.STOPPED, S.LOST, S.UNREACHABLE) or reason:
        instance.status_reason = reason
    for key, value in fields.items():
        setattr(instance, key, value)
    return old


def _after_move(instance: Instance, old: str, to: str) -> None:
    """What a move tells the instance's elastic group, on commit."""
    if to == S.RUNNING and instance.group_id is not None:
        # A replica is up: the gateways take it into the balance now, not at their route TTL.
        group_id = str(instance.group_id)
        transaction.on_commit(lambda: group_state_publish(group_id))
    if old == S.RUNNING and instance.group_id is not None and instance.group_role == "serving":
        # A serving replica is gone (its container died, its host went silent): its group
        # replaces it now (a warm replica is promoted), not at the autoscaler's next round.
        group_id = str(instance.group_id)
        transaction.on_commit(lambda: _wake_group(group_id))


def _move(
    instance: Instance,
    to: str,
    *,
    allowed_from: Iterable[str],
    reason: str,
    now: datetime,
    actor: User | None = None,
    **fields,
) -> None:
    """Change the state of a locked instance, checking where it may come from, and record it."""
    _check_move(instance, to, set(allowed_from))
    old = _set(instance, to, reason=reason, now=now, **fields)
    instance.save(update_fields=["status", "status_changed_at", "status_reason", *fields])
    _event(
        instance,
        kind=InstanceEvent.Kind.TRANSITION,
        from_status=old,
        to_status=to,
        reason=reason,
        actor=actor if actor is not None and actor.pk else None,
        created_at=now,
    )
    _after_move(instance, old, to)


def _move_many(
    moves: list[tuple[Instance, str, dict]], to: str, *, allowed_from: Iterable[str], now: datetime
) -> None:
    """``_move`` for many locked instances at once, each (instance, reason, fields): the same
    checks and changes, written in a few statements (one update, one insert of events, one
    pipeline of live messages) rather than several per instance."""
    allowed = set(allowed_from)
    events, changed = [], {"status", "status_changed_at", "status_reason"}
    for instance, reason, fields in moves:
        _check_move(instance, to, allowed)
        old = _set(instance, to, reason=reason, now=now, **fields)
        changed |= set(fields)
        events.append(
            InstanceEvent(
                instance=instance,
                kind=InstanceEvent.Kind.TRANSITION,
                from_status=old,
                to_status=to,
                reason=reason,
                created_at=now,
            )
        )
        _after_move(instance, old, to)
    instances = [instance for instance, _reason, _fields in moves]
    Instance.objects.bulk_update(instances, sorted(changed), batch_size=500)
    InstanceEvent.objects.bulk_create(events, batch_size=500)
    publish_instance_events(
        [(event.instance_id, _event_payload(event.instance, event)) for event in events]
    )


def _wake_group(group_id: str) -> None:
    from gpurental.rentals.hostcalls import app  # the app tests record sends on

    try:
        app.send_task(GROUP_TICK, kwargs={"group_id": group_id}, queue="control")
    except Exception:  # noqa: BLE001 - the periodic round replaces it anyway
        log.warning("could not wake the autoscaler of group %s", group_id, exc_info=True)


ACTIONS = {
    "stop": gettext_lazy("stop"),
    "start": gettext_lazy("start"),
    "restart": gettext_lazy("restart"),
}


def _refuse(instance: Instance, action: str, allowed: Iterable[str]) -> None:
    states = ", ".join(sorted(allowed))
    raise InvalidTransition(
        _("cannot %(action)s an instance that is %(status)s (only when %(states)s)")
        % {"action": ACTIONS.get(action, action), "status": instance.status, "states": states},
        field="status",
    )


def _progress(
    instance: Instance, *, step: str, reason: str, now: datetime, data: dict | None = None
) -> None:
    _event(
        instance,
        kind=InstanceEvent.Kind.PROGRESS,
        step=step,
        reason=reason,
        created_at=now,
        data=data or {},
    )


def instance_notice(instance: Instance, *, reason: str, step: str, now: datetime, **data) -> None:
    """A message for the customer in the instance's events, shown live (no state change)."""
    _event(
        instance,
        kind=InstanceEvent.Kind.NOTICE,
        step=step,
        reason=reason,
        created_at=now,
        data=data,
    )


def notify_on_commit(instance: Instance, event: str, **context) -> None:
    """Tell the customer about a transition once it is committed (never a rolled-back one)."""
    transaction.on_commit(lambda: notify(instance.user, event, instance=instance, **context))


NOTIFY_MANY_TASK = "gpurental.rentals.tasks.instances_notify"
NOTIFY_CHUNK = 200


def notify_many_on_commit(instances: list[Instance], event: str) -> None:
    """``notify_on_commit`` for many instances: the notifications (rendered, recorded,
    mailed) are made by the control worker, in chunks, so that a pass over a whole fleet
    does not wait on them; made here when the broker does not take the task."""
    ids = [str(instance.pk) for instance in instances]

    def send() -> None:
        from gpurental.rentals.hostcalls import app  # the app tests record sends on

        for start in range(0, len(ids), NOTIFY_CHUNK):
            chunk = ids[start : start + NOTIFY_CHUNK]
            try:
                app.send_task(
                    NOTIFY_MANY_TASK,
                    kwargs={"event": event, "instance_ids": chunk},
                    queue="control",
                )
            except Exception:  # noqa: BLE001 - then here and now: nothing is lost
                log.warning("could not queue %s notifications; making them here", event)
                instances_notify(event=event, instance_ids=chunk)

    transaction.on_commit(send)


def instances_notify(*, event: str, instance_ids: list[str]) -> int:
    """Notify each instance's owner of ``event`` (the task of ``notify_many_on_commit``)."""
    count = 0
    for instance in Instance.objects.select_related("user", "host").filter(pk__in=instance_ids):
        notify(instance.user, event, instance=instance)
        count += 1
    return count


def host_alive(instance: Instance, now: datetime) -> bool:
    """Is the instance's host heart-beating (within ``HOST_OFFLINE_AFTER``)?"""
    return instance.host is not None and instance.host.heartbeat_fresh(now)


def _has_run(instance: Instance) -> bool:
    """Has it ever run? Then it has a /workspace worth keeping."""
    return instance.events.filter(to_status=S.RUNNING).exists()
