"""Instance lifecycle: every state change is one service here.

Each service locks the instance row (``select_for_update``), checks the current
state, changes it, writes an ``InstanceEvent`` and publishes it live. Repeating a
transition that already happened changes nothing. Commands to host agents are sent
on commit (``hostcalls``), and the agents' reports come back through the
``instance_report_*`` services.

    pending → provisioning → running → stopping → stopped → pending (start) …
    … → terminating → terminated;  side exits: failed, lost
"""

from __future__ import annotations

import secrets
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gpurental.accounts.models import User
from gpurental.billing.services import prepaid
from gpurental.catalog.models import GPUModel, ImageTemplate, Plan
from gpurental.rentals import hostcalls, selectors
from gpurental.rentals.events import publish_instance_event
from gpurental.rentals.exceptions import InvalidTransition, QuotaExceeded, RentalError
from gpurental.rentals.models import Instance, InstanceEvent, InstanceStatus, Reservation
from gpurental.rentals.services.scheduling import gpus_allocate, gpus_release

S = InstanceStatus
# → TERMINATED straight from a live state: terminated while its host is silent, before
# reconciliation marked it lost (the container is removed when the host returns).
ALLOWED: dict[str, set[str]] = {
    S.PENDING: {
        S.PROVISIONING,
        S.RUNNING,
        S.FAILED,
        S.STOPPED,
        S.STOPPING,
        S.TERMINATING,
        S.TERMINATED,
        S.LOST,
    },
    S.PROVISIONING: {
        S.RUNNING,
        S.FAILED,
        S.STOPPED,
        S.STOPPING,
        S.TERMINATING,
        S.TERMINATED,
        S.LOST,
    },
    S.RUNNING: {S.PROVISIONING, S.STOPPING, S.TERMINATING, S.TERMINATED, S.FAILED, S.LOST},
    S.STOPPING: {S.STOPPED, S.TERMINATING, S.TERMINATED, S.LOST},
    S.STOPPED: {S.PENDING, S.TERMINATING, S.TERMINATED},
    S.TERMINATING: {S.TERMINATED},
    S.LOST: {S.TERMINATING, S.TERMINATED},
    S.FAILED: {S.TERMINATING, S.TERMINATED},
    S.TERMINATED: set(),
}
FINISHED = {S.STOPPED, S.TERMINATED, S.FAILED, S.LOST}
STOPPABLE = (S.PENDING, S.PROVISIONING, S.RUNNING)


# --- building blocks ----------------------------------------------------------


def _lock(instance: Instance | str) -> Instance:
    pk = instance.pk if isinstance(instance, Instance) else instance
    return (
        Instance.objects.select_for_update(of=("self",))
        .select_related("host", "plan", "image", "gpu_model")
        .get(pk=pk)
    )


def _event(instance: Instance, **fields) -> InstanceEvent:
    event = InstanceEvent.objects.create(instance=instance, **fields)
    publish_instance_event(
        instance.pk,
        {
            "kind": event.kind,
            "status": instance.status,
            "from_status": event.from_status,
            "step": event.step,
            "reason": event.reason,
            "at": event.created_at.isoformat(),
        },
    )
    return event


def _move(
    instance: Instance, to: str, *, reason: str, now: datetime, actor: User | None = None, **fields
) -> None:
    """Change state (already checked) and record it."""
    if to not in ALLOWED[instance.status]:
        raise InvalidTransition(
            f"instance {instance} is {instance.status}; it cannot become {to}", field="status"
        )
    old = instance.status
    instance.status = to
    instance.status_changed_at = now
    if to in (S.FAILED, S.STOPPED, S.LOST) or reason:
        instance.status_reason = reason
    for key, value in fields.items():
        setattr(instance, key, value)
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


def _refuse(instance: Instance, action: str, allowed: set[str]) -> None:
    states = ", ".join(sorted(allowed))
    raise InvalidTransition(
        f"cannot {action} an instance that is {instance.status} (only when {states})",
        field="status",
    )


def _offline_after() -> int:
    return settings.HOST_OFFLINE_AFTER


# --- customer actions ---------------------------------------------------------


def resolve_plan(*, plan: Plan | None, gpu_model: GPUModel | None, gpu_count: int | None) -> Plan:
    if plan is not None:
        if not plan.is_active:
            raise RentalError(f"plan {plan.slug} is no longer offered", field="plan")
        return plan
    if gpu_model is None:
        raise RentalError("choose a plan, or a gpu_model with a gpu_count", field="gpu_model")
    count = gpu_count or 1
    found = Plan.objects.filter(gpu_model=gpu_model, gpu_count=count, is_active=True).first()
    if found is None:
        offered = sorted(
            Plan.objects.filter(gpu_model=gpu_model, is_active=True).values_list(
                "gpu_count", flat=True
            )
        )
        choices = ", ".join(map(str, offered)) or "none"
        raise RentalError(
            f"no plan offers {count}× {gpu_model.short_name}; GPU counts offered: {choices}",
            field="gpu_count",
        )
    return found


def instance_launch(
    *,
    user: User,
    image: ImageTemplate,
    plan: Plan | None = None,
    gpu_model: GPUModel | None = None,
    gpu_count: int | None = None,
    name: str = "",
    mount_model_cache: bool = False,
    idle_stop_minutes: int | None = None,
    now: datetime | None = None,
) -> Instance:
    """Hold GPUs for a new instance and ask the host's agent to start it.

    Raises QuotaExceeded, NoCapacity or RentalError; then nothing is created.
    """
    now = now or timezone.now()
    plan = resolve_plan(plan=plan, gpu_model=gpu_model, gpu_count=gpu_count)
    if idle_stop_minutes is not None:
        check_idle_minutes(idle_stop_minutes)
    prepaid.launch_allowed(user=user, plan=plan, now=now)
    if not image.is_active:
        raise RentalError(f"image {image.slug} is no longer offered", field="image")
    with transaction.atomic():
        # One launch at a time per user, so two launches cannot both pass the quota check.
        locked_user = User.objects.select_for_update().get(pk=user.pk)
        held = selectors.gpus_held_by(user=locked_user)
        if held + plan.gpu_count > locked_user.gpu_quota:
            raise QuotaExceeded(
                f"your quota is {locked_user.gpu_quota} GPUs at once and you hold {held}; "
                f"{plan.gpu_count} more would exceed it. Stop an instance or ask for a higher quota.",
                field="gpu_count",
            )
        instance = Instance.objects.create(
            user=user,
            name=name.strip()[:100],
            plan=plan,
            gpu_model=plan.gpu_model,
            gpu_count=plan.gpu_count,
            image=image,
            status=S.PENDING,
            status_changed_at=now,
            jupyter_token=secrets.token_hex(24),
            mount_model_cache=mount_model_cache,
            idle_stop_minutes=plan.idle_stop_minutes
            if idle_stop_minutes is None
            else idle_stop_minutes,
            created_at=now,
        )
        proposal = gpus_allocate(
            instance=instance, gpu_model=plan.gpu_model, count=plan.gpu_count, now=now
        )
        instance.host_id = proposal.host_id
        instance.save(update_fields=["host"])
        instance = _lock(instance)
        if mount_model_cache and not instance.host.hf_cache_dir:
            raise RentalError(
                f"host {instance.host.name} has no shared Hugging Face model cache configured; "
                "launch without model_repo, or ask the operator to set one",
                field="model_repo",
            )
        gpus = ", ".join(str(g.index) for g in proposal.gpus)
        _event(
            instance,
            kind=InstanceEvent.Kind.TRANSITION,
            to_status=S.PENDING,
            actor=user,
            created_at=now,
            reason=f"launched on {instance.host.name}, GPUs {gpus}",
        )
        _event(
            instance,
            kind=InstanceEvent.Kind.PROGRESS,
            step="queued",
            reason="waiting for the host agent",
            created_at=now,
        )
        hostcalls.start(instance)
    return instance


def instance_stop(
    *, instance: Instance, actor: User | None = None, reason: str = "", now: datetime | None = None
):
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance)
        if instance.status in (S.STOPPING, S.STOPPED):
            return instance
        if instance.status not in STOPPABLE:
            _refuse(instance, "stop", set(STOPPABLE))
        reason = reason or (f"stopped by {actor}" if actor else "stopped")
        # Billing ends now for a run under way (also one stopped mid-restart).
        billing = {"stopped_at": now} if instance.running_since and not instance.stopped_at else {}
        _move(instance, S.STOPPING, reason=reason, now=now, actor=actor, **billing)
        if _host_alive(instance, now):
            hostcalls.stop(instance)
        else:
            # The host is gone: nothing to wait for. Its container is cleaned up if it returns.
            _finish_stop(
                instance, now=now, reason=f"{reason} (host {instance.host.name} unreachable)"
            )
    return instance


def instance_start(
    *, instance: Instance, actor: User | None = None, now: datetime | None = None
) -> Instance:
    """Start a stopped instance again, on the same host (its /workspace lives there)."""
    now = now or timezone.now()
    if instance.reservation_id is None:
        prepaid.start_allowed(instance=instance, now=now)
    with transaction.atomic():
        if instance.reservation_id is not None:
            # The reservation first, as the reservation clock locks them: a start racing
            # the end waits for it, then sees the reservation completed.
            Reservation.objects.select_for_update().filter(pk=instance.reservation_id).first()
        instance = _lock(instance)
        if instance.status in (S.PENDING, S.PROVISIONING, S.RUNNING):
            return instance
        if instance.status != S.STOPPED:
            _refuse(instance, "start", {S.STOPPED})
        if instance.reservation_id is not None:
            gpus = _reserved_gpus(instance, now)
        else:
            gpus = _allocate_again(instance, now)
        _move(
            instance,
            S.PENDING,
            reason=f"started again on {instance.host.name}, GPUs {gpus}",
            now=now,
            actor=actor,
            stopped_at=None,
            running_since=None,
        )
        _event(
            instance,
            kind=InstanceEvent.Kind.PROGRESS,
            step="queued",
            reason="waiting for the host agent",
            created_at=now,
        )
        hostcalls.start(instance)
    return instance


def _reserved_gpus(instance: Instance, now: datetime) -> str:
    """A reserved instance starts again only within its paid period, on its reserved GPUs."""
    reservation = instance.reservation
    if (
        reservation.status != "active"
        or not reservation.period.lower <= now < reservation.period.upper
    ):
        raise InvalidTransition(
            f"its reservation ran {reservation.period.lower:%Y-%m-%d %H:%M}–"
            f"{reservation.period.upper:%Y-%m-%d %H:%M} UTC and is {reservation.status}; "
            "launch a new instance or book again",
            field="status",
        )
    return ", ".join(str(g.index) for g in selectors.instance_gpus(instance))


def _allocate_again(instance: Instance, now: datetime) -> str:
    held = selectors.gpus_held_by(user=User.objects.select_for_update().get(pk=instance.user_id))
    if held + instance.gpu_count > instance.user.gpu_quota:
        raise QuotaExceeded(
            f"your quota is {instance.user.gpu_quota} GPUs at once and you hold {held}",
            field="gpu_count",
        )
    proposal = gpus_allocate(
        instance=instance,
        gpu_model=instance.gpu_model,
        count=instance.gpu_count,
        now=now,
        host=instance.host,
    )
    return ", ".join(str(g.index) for g in proposal.gpus)


IDLE_MINUTES_RANGE = (10, 7 * 24 * 60)


def check_idle_minutes(minutes: int) -> None:
    low, high = IDLE_MINUTES_RANGE
    if minutes != 0 and not low <= minutes <= high:
        raise RentalError(
            f"idle_stop_minutes: {minutes} is not 0 (off) or {low}–{high} minutes",
            field="idle_stop_minutes",
        )


def instance_set_idle_policy(
    *, instance: Instance, minutes: int, actor: User | None = None, now: datetime | None = None
) -> Instance:
    """Stop the instance after ``minutes`` idle (under IDLE_UTILIZATION_PERCENT GPU
    utilisation, no kernel activity); 0 turns the policy off. Recorded as a notice."""
    check_idle_minutes(minutes)
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance)
        if instance.status in (S.TERMINATING, S.TERMINATED):
            raise InvalidTransition(
                f"instance {instance} is {instance.status}: it has no idle policy any more",
                field="status",
            )
        if instance.idle_stop_minutes == minutes:
            return instance
        instance.idle_stop_minutes = minutes
        instance.idle_warned_at = None  # a warning under the old policy no longer holds
        instance.save(update_fields=["idle_stop_minutes", "idle_warned_at"])
        who = f" by {actor}" if actor is not None and actor.pk else ""
        reason = (
            f"idle auto-stop: after {minutes} minutes under "
            f"{settings.IDLE_UTILIZATION_PERCENT} % GPU utilisation (set{who})"
            if minutes
            else f"idle auto-stop turned off{who}"
        )
        instance_notice(instance, reason=reason, step="idle_policy", now=now, minutes=minutes)
    return instance


def instance_restart(
    *, instance: Instance, actor: User | None = None, now: datetime | None = None
) -> Instance:
    """Restart the container in place: same GPUs, same /workspace."""
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance)
        if instance.status != S.RUNNING:
            _refuse(instance, "restart", {S.RUNNING})
        _move(
            instance,
            S.PROVISIONING,
            reason=f"restart requested by {actor}" if actor else "restart",
            now=now,
            actor=actor,
        )
        hostcalls.restart(instance)
    return instance


def instance_terminate(
    *, instance: Instance, actor: User | None = None, now: datetime | None = None
) -> Instance:
    """Remove the instance and its /workspace for good."""
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance)
        if instance.status in (S.TERMINATING, S.TERMINATED):
            return instance
        reason = f"terminated by {actor}" if actor else "terminated"
        # Billing ends now for a run under way (also one stopped mid-restart).
        billing = {"stopped_at": now} if instance.running_since and not instance.stopped_at else {}
        if instance.status != S.LOST and _host_alive(instance, now):
            _move(instance, S.TERMINATING, reason=reason, now=now, actor=actor, **billing)
            hostcalls.remove(instance)
        else:
            _move(
                instance,
                S.TERMINATED,
                reason=f"{reason} (host unreachable; cleaned up when it returns)",
                now=now,
                actor=actor,
                terminated_at=now,
                **billing,
            )
            gpus_release(instance=instance, at=now)
    return instance


def instance_notice(instance: Instance, *, reason: str, step: str, now: datetime, **data) -> None:
    """A message for the customer in the instance's events, shown live (no state change)."""
    event = InstanceEvent.objects.create(
        instance=instance,
        kind=InstanceEvent.Kind.NOTICE,
        step=step,
        reason=reason,
        created_at=now,
        data=data,
    )
    publish_instance_event(
        instance.pk,
        {
            "kind": event.kind,
            "status": instance.status,
            "from_status": "",
            "step": step,
            "reason": reason,
            "at": event.created_at.isoformat(),
            **data,
        },
    )


def _host_alive(instance: Instance, now: datetime) -> bool:
    host = instance.host
    return (
        host is not None
        and host.last_heartbeat_at is not None
        and (now - host.last_heartbeat_at).total_seconds() <= _offline_after()
    )


def _finish_stop(instance: Instance, *, now: datetime, reason: str = "") -> None:
    _move(instance, S.STOPPED, reason=reason or "stopped; /workspace kept", now=now)
    gpus_release(instance=instance, at=now)


# --- reports from the host agent ----------------------------------------------


def instance_report_progress(
    *, instance_id: str, step: str, message: str, now: datetime | None = None
) -> None:
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance_id)
        if instance.status not in (S.PENDING, S.PROVISIONING):
            return  # a late progress line for a launch already decided
        if instance.status == S.PENDING:
            _move(instance, S.PROVISIONING, reason="the host agent took the launch", now=now)
        _event(
            instance,
            kind=InstanceEvent.Kind.PROGRESS,
            step=step[:32],
            reason=message[:500],
            created_at=now,
        )


def instance_report_running(
    *, instance_id: str, port: int, container_id: str, now: datetime | None = None
) -> None:
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance_id)
        if instance.status == S.RUNNING and instance.jupyter_port == port:
            return
        if instance.status not in (S.PENDING, S.PROVISIONING):
            # Stopped, terminated or failed meanwhile: the container must not stay.
            if instance.status in (S.STOPPING, S.STOPPED):
                hostcalls.stop(instance)
            elif instance.status in (S.TERMINATING, S.TERMINATED, S.FAILED, S.LOST):
                hostcalls.remove(instance)
            return
        billing = (
            {} if instance.running_since and instance.stopped_at is None else {"running_since": now}
        )
        _event(
            instance,
            kind=InstanceEvent.Kind.PROGRESS,
            step="running",
            reason="JupyterLab answers",
            created_at=now,
        )
        _move(
            instance,
            S.RUNNING,
            reason="JupyterLab is ready",
            now=now,
            jupyter_port=port,
            container_id=container_id[:80],
            stopped_at=None,
            **billing,
        )


def instance_report_failed(*, instance_id: str, reason: str, now: datetime | None = None) -> None:
    """A start failed on the host. A first launch fails (and is cleaned up); a restart of
    an instance that has run before goes back to stopped, keeping its /workspace."""
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance_id)
        if instance.status not in (S.PENDING, S.PROVISIONING):
            return
        if instance.events.filter(to_status=S.RUNNING).exists():
            _move(
                instance,
                S.STOPPED,
                reason=f"could not start: {reason}; /workspace kept",
                now=now,
                stopped_at=instance.stopped_at or now,
            )
            gpus_release(instance=instance, at=now)
            hostcalls.stop(instance)
        else:
            _move(instance, S.FAILED, reason=f"{reason}. Nothing was charged.", now=now)
            gpus_release(instance=instance, at=now)
            hostcalls.remove(instance)


def instance_report_stopped(*, instance_id: str, now: datetime | None = None) -> None:
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance_id)
        if instance.status == S.STOPPING:
            _finish_stop(instance, now=now, reason=instance.status_reason)


def instance_report_removed(*, instance_id: str, now: datetime | None = None) -> None:
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance_id)
        if instance.status == S.TERMINATING:
            _move(
                instance,
                S.TERMINATED,
                reason="container and /workspace removed",
                now=now,
                terminated_at=now,
            )
            gpus_release(instance=instance, at=now)
