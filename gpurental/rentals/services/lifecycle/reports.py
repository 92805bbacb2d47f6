"""What a host agent reports about one of its instances: progress, running, failed,
stopped, removed. A report that comes too late for the state it would change changes
nothing, or undoes what the host did (a container started for an instance stopped
meanwhile is stopped again)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from gpurental.rentals import hostcalls
from gpurental.rentals.models import Instance
from gpurental.rentals.services.lifecycle.base import (
    LAUNCHING,
    S,
    _has_run,
    _lock,
    _move,
    _progress,
    notify_on_commit,
)
from gpurental.rentals.services.scheduling import gpus_release


def instance_report_progress(
    *,
    instance_id: str,
    step: str,
    message: str,
    data: dict | None = None,
    now: datetime | None = None,
) -> None:
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance_id)
        if instance.status not in LAUNCHING:
            return  # a late progress line for a launch already decided
        if instance.status == S.PENDING:
            _move(
                instance,
                S.PROVISIONING,
                allowed_from={S.PENDING},
                reason="the host agent took the launch",
                now=now,
            )
        _progress(instance, step=step[:32], reason=message[:500], now=now, data=data)


def instance_report_running(
    *,
    instance_id: str,
    port: int,
    container_id: str,
    ready_s: float | None = None,
    ports: dict[str, int] | None = None,
    now: datetime | None = None,
) -> None:
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance_id)
        # An agent older than the gateway reports JupyterLab's port only.
        ports = ports or {str(instance.image.port): port}
        if instance.status == S.RUNNING and instance.jupyter_port == port:
            return
        if instance.status not in LAUNCHING:
            # Stopped, terminated or failed meanwhile: the container must not stay. Only a
            # terminate (or a launch that never ran) removes a /workspace.
            if instance.status in (S.TERMINATING, S.TERMINATED) or (
                instance.status == S.FAILED and not _has_run(instance)
            ):
                hostcalls.remove(instance)
            elif instance.status != S.RUNNING:
                hostcalls.stop(instance)
            return
        billing = (
            {} if instance.running_since and instance.stopped_at is None else {"running_since": now}
        )
        _progress(instance, step="running", reason="JupyterLab answers", now=now)
        _move(
            instance,
            S.RUNNING,
            allowed_from=LAUNCHING,
            reason="JupyterLab is ready"
            + ("" if ready_s is None else f", {ready_s:.1f} s after its container started"),
            now=now,
            jupyter_port=port,
            ports=ports,
            container_id=container_id[:80],
            stopped_at=None,
            **billing,
        )


def instance_report_failed(*, instance_id: str, reason: str, now: datetime | None = None) -> None:
    """A start failed on the host."""
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance_id)
        if instance.status in LAUNCHING:
            launch_fail(instance, reason=reason, now=now)


def launch_fail(
    instance: Instance, *, reason: str, now: datetime, ended_at: datetime | None = None
) -> None:
    """A launch that will not finish (locked by the caller). A first launch fails and is
    cleaned up; an instance that has run before goes back to stopped, keeping /workspace."""
    if _has_run(instance):
        _move(
            instance,
            S.STOPPED,
            allowed_from=LAUNCHING,
            reason=f"could not start: {reason}; /workspace kept",
            now=now,
            stopped_at=instance.stopped_at or ended_at or now,
        )
        gpus_release(instance=instance, at=now)
        hostcalls.stop(instance)
    else:
        _move(
            instance,
            S.FAILED,
            allowed_from=LAUNCHING,
            reason=f"{reason}. Nothing was charged.",
            now=now,
        )
        gpus_release(instance=instance, at=now)
        hostcalls.remove(instance)
        notify_on_commit(instance, "instance_failed")


def instance_report_stopped(*, instance_id: str, now: datetime | None = None) -> None:
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance_id)
        if instance.status == S.STOPPING:
            stop_finish(instance, reason=instance.status_reason, now=now)


def stop_finish(instance: Instance, *, reason: str, now: datetime) -> None:
    _move(
        instance,
        S.STOPPED,
        allowed_from={S.STOPPING},
        reason=reason or "stopped; /workspace kept",
        now=now,
    )
    gpus_release(instance=instance, at=now)


def instance_report_removed(*, instance_id: str, now: datetime | None = None) -> None:
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance_id)
        if instance.status == S.TERMINATING:
            remove_finish(instance, reason="container and /workspace removed", now=now)


def remove_finish(instance: Instance, *, reason: str, now: datetime) -> None:
    _move(
        instance,
        S.TERMINATED,
        allowed_from={S.TERMINATING},
        reason=reason,
        now=now,
        terminated_at=now,
    )
    gpus_release(instance=instance, at=now)
