"""What customers and staff ask of an instance: launch, stop, start, restart, terminate,
the idle policy. Each locks the instance, checks its state, moves it and tells the host."""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, OperationalError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.accounts.models import User
from gpurental.billing.services import metering, prepaid
from gpurental.catalog.models import GPUModel, ImageTemplate, Plan
from gpurental.fleet.models import GPU, Host, Zone
from gpurental.gateway import sshkeys
from gpurental.images.selectors import hosts_with_image
from gpurental.modelcache.selectors import host_has_model, hosts_with_model, models_offered
from gpurental.networks.services import PoolExhausted, private_network_of
from gpurental.rentals import holdings, hostcalls, selectors
from gpurental.rentals.exceptions import InvalidTransition, NoCapacity, RentalError
from gpurental.rentals.models import Allocation, Instance, InstanceEvent, Reservation
from gpurental.rentals.services.lifecycle.base import (  # noqa: F401 - re-exported
    STOPPABLE,
    S,
    _event,
    _lock,
    _move,
    _progress,
    _refuse,
    host_alive,
    instance_notice,
)
from gpurental.rentals.services.scheduling import gpus_allocate, gpus_release
from gpurental.storage import services as storage
from gpurental.volumes.services import VolumeRefused, volume_attach, volumes_for_launch
from gpurental.volumes.snapshots import snapshot_saving, workspace_source_check

# --- customer actions ---------------------------------------------------------


def resolve_plan(*, plan: Plan | None, gpu_model: GPUModel | None, gpu_count: int | None) -> Plan:
    if plan is not None:
        if not plan.is_active:
            raise RentalError(
                _("plan %(plan)s is no longer offered") % {"plan": plan.slug}, field="plan"
            )
        return plan
    if gpu_model is None:
        raise RentalError(_("choose a plan, or a gpu_model with a gpu_count"), field="gpu_model")
    count = gpu_count or 1
    found = Plan.objects.filter(gpu_model=gpu_model, gpu_count=count, is_active=True).first()
    if found is None:
        offered = sorted(
            Plan.objects.filter(gpu_model=gpu_model, is_active=True).values_list(
                "gpu_count", flat=True
            )
        )
        choices = ", ".join(map(str, offered)) or _("none")
        raise RentalError(
            _("no plan offers %(count)s× %(model)s; GPU counts offered: %(choices)s")
            % {"count": count, "model": gpu_model.short_name, "choices": choices},
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
    image_alias: str = "",
    image_ref: str = "",
    volumes: list[tuple[str, str]] | None = None,
    workspace_from=None,
    hf_model: str = "",
    idle_stop_minutes: int | None = None,
    group=None,
    group_role: str = "",
    auto_recover: bool = False,
    zone: Zone | None = None,
    host: Host | None = None,
    cluster: tuple[uuid.UUID, int, int] | None = None,
    now: datetime | None = None,
) -> Instance:
    """Hold GPUs for a new instance and ask the host's agent to start it. A replica of an
    elastic group names its group and role (gpurental/groups/services.py launches them).
    ``workspace_from``: a snapshot of another instance's /workspace (volumes.snapshots),
    unpacked into this one's before its first start, on whatever host it lands on.
    ``zone``: placed only on a host in that zone (fleet.zones); its volumes must be there.
    ``host``: placed on that host or not at all (a cluster's ranks after the first).
    ``cluster``: (cluster id, rank, size) of a rank of a cluster (rentals.services.clusters).

    Raises QuotaExceeded, NoCapacity or RentalError; then nothing is created.
    """
    now = now or timezone.now()
    plan = resolve_plan(plan=plan, gpu_model=gpu_model, gpu_count=gpu_count)
    if idle_stop_minutes is not None:
        check_idle_minutes(idle_stop_minutes)
    if not image.is_active:
        raise RentalError(
            _("image %(image)s is no longer offered") % {"image": image.slug}, field="image"
        )
    if hf_model:
        hf_model = modelcache_launch_check(hf_model)
    with transaction.atomic():
        # One booking at a time per account, so two cannot both pass the quota or the
        # balance check.
        locked_user = holdings.account_lock(user.pk)
        holdings.quota_check(
            account=locked_user,
            count=plan.gpu_count,
            start=now,
            hint=_("Stop an instance or ask for a higher quota."),
        )
        prepaid.launch_allowed(user=locked_user, plan=plan, now=now)
        try:  # the account's private network (gpurental/networks), made at its first launch
            private_network_of(locked_user)
        except PoolExhausted as exc:
            raise RentalError(exc.message, field="private_network") from exc
        # Its volumes pin the instance to their host (volumes_for_launch: free, one host).
        try:
            mounts = volumes_for_launch(account=user, wanted=volumes) if volumes else []
            if workspace_from is not None:
                workspace_source_check(snapshot=workspace_from, account=user, disk_gb=plan.disk_gb)
        except VolumeRefused as exc:
            raise RentalError(exc.message, field=exc.field) from exc
        if zone is not None and mounts and mounts[0][0].host.zone_id != zone.pk:
            volume = mounts[0][0]
            raise RentalError(
                _("volume %(name)s is in zone %(its)s, and the launch asks for zone %(zone)s")
                % {"name": volume.name, "its": volume.host.zone or _("none"), "zone": zone.name},
                field="zone",
            )
        instance = Instance.objects.create(
            user=user,
            zone=zone,
            name=name.strip()[:100],
            plan=plan,
            gpu_model=plan.gpu_model,
            gpu_count=plan.gpu_count,
            image=image,
            status=S.PENDING,
            status_changed_at=now,
            **run_secrets(image),
            group=group,
            group_role=group_role,
            mount_model_cache=mount_model_cache,
            image_alias=image_alias,
            image_ref=image_ref,
            hf_model=hf_model,
            workspace_from=workspace_from,
            auto_recover=auto_recover,
            idle_stop_minutes=plan.idle_stop_minutes
            if idle_stop_minutes is None
            else idle_stop_minutes,
            created_at=now,
            **_cluster_fields(cluster),
        )
        proposal = gpus_allocate(
            instance=instance,
            gpu_model=plan.gpu_model,
            count=plan.gpu_count,
            now=now,
            host=mounts[0][0].host if mounts else host,
            zone=zone,
            prefer=_preferred_hosts(hf_model=hf_model, image_ref=image_ref),
            **_cuda_of(image),
        )
        for volume, path in mounts:
            volume_attach(volume=volume, instance=instance, path=path, actor=user, now=now)
        instance.host_id = proposal.host_id
        instance.save(update_fields=["host"])
        instance = _lock(instance)
        model_note = ""
        if hf_model:
            # The shared cache is mounted wherever the host has one; a host without the
            # model still works: it downloads into the instance's own, writable cache.
            if instance.host.hf_cache_dir and not instance.mount_model_cache:
                instance.mount_model_cache = mount_model_cache = True
                instance.save(update_fields=["mount_model_cache"])
            cached = host_has_model(host=instance.host, repo_id=hf_model)
            model_note = f"; model {hf_model} " + (
                "is in this host's cache"
                if cached
                else "is not in this host's cache: it downloads into the instance's own cache "
                "on first use"
            )
        if mount_model_cache and not instance.host.hf_cache_dir:
            raise RentalError(
                _(
                    "host %(host)s has no shared Hugging Face model cache configured; "
                    "launch without model_repo, or ask the operator to set one"
                )
                % {"host": instance.host.name},
                field="model_repo",
            )
        gpus = ", ".join(str(g.index) for g in proposal.gpus)
        alias = f" ({image_alias} is an alias of {image.slug})" if image_alias else ""
        if image_ref:
            cached = instance.host.images.filter(reference=image_ref).exists()
            alias = f"; image {image_ref} " + (
                "is in this host's cache" if cached else "is pulled from its registry"
            )
        if workspace_from is not None:
            model_note += f"; /workspace from snapshot {workspace_from.name}"
        _created(
            instance,
            reason=f"launched on {instance.host.name}{_in_zone(instance.host)}, GPUs {gpus}"
            f"{alias}{model_note}",
            actor=user,
        )
    return instance


def _in_zone(host: Host) -> str:
    return f" in zone {host.zone.name}" if host.zone_id else ""


def _preferred_hosts(*, hf_model: str, image_ref: str):
    """Hosts placement tries first: those with the launch's model, else its image, cached."""
    if hf_model:
        return hosts_with_model(repo_id=hf_model)
    if image_ref:
        return hosts_with_image(reference=image_ref)
    return None


def run_secrets(image) -> dict:
    """What a run keeps between the platform's gateways and its container, made anew at each
    launch and start: the JupyterLab token (never shown to anyone) and the sshd host key."""
    return {
        "jupyter_token": secrets.token_hex(24),
        "ssh_host_key": sshkeys.new_private_key() if image.ssh_port else "",
    }


def instance_launch_reserved(
    *, reservation: Reservation, host: Host, reason: str, now: datetime
) -> Instance:
    """A new instance on a reservation's GPUs (the reservation locked by the caller)."""
    instance = Instance.objects.create(
        user_id=reservation.user_id,
        name=f"reservation {str(reservation.pk)[:8]}",
        plan=reservation.plan,
        gpu_model=reservation.gpu_model,
        gpu_count=reservation.gpu_count,
        image=reservation.image,
        host_id=host.pk,
        reservation=reservation,
        status=S.PENDING,
        status_changed_at=now,
        **run_secrets(reservation.image),
        idle_stop_minutes=0,  # paid for already: stopping it early saves nothing
        created_at=now,
    )
    allocations = Allocation.objects.filter(reservation=reservation)
    allocations.update(instance=instance)
    gpus = ", ".join(str(i) for i in sorted(allocations.values_list("gpu__index", flat=True)))
    instance = _lock(instance)
    _created(
        instance,
        reason=f"{reason} for reservation {str(reservation.pk)[:8]} on GPUs {gpus}; "
        f"runs until {reservation.end:%Y-%m-%d %H:%M} UTC",
    )
    return instance


def instance_launch_leased(*, lease, image: ImageTemplate, actor: User | None, now: datetime):
    """A new instance on every GPU of a dedicated host's lease (the lease locked by the
    caller, active, with no instance holding it: gpurental/baremetal/services.py checks).
    The lease is billed as it runs: its tenant's money must still cover what is committed."""
    prepaid.leased_run_allowed(account=holdings.account_lock(lease.user_id), now=now)
    plan = lease.plan.instance_plan
    instance = Instance.objects.create(
        user_id=lease.user_id,
        name=f"dedicated {lease.host.name}",
        plan=plan,
        gpu_model=lease.plan.gpu_model,
        gpu_count=lease.plan.gpu_count,
        image=image,
        host_id=lease.host_id,
        lease=lease,
        status=S.PENDING,
        status_changed_at=now,
        **run_secrets(image),
        idle_stop_minutes=0,  # the lease is billed whether it runs or not
        created_at=now,
    )
    allocations = Allocation.objects.filter(lease=lease)
    allocations.update(instance=instance)
    gpus = ", ".join(str(i) for i in sorted(allocations.values_list("gpu__index", flat=True)))
    instance = _lock(instance)
    _created(
        instance,
        reason=f"launched on dedicated host {lease.host.name}, GPUs {gpus}; the lease runs "
        f"until {lease.end:%Y-%m-%d %H:%M} UTC",
        actor=actor,
    )
    return instance


def _created(instance: Instance, *, reason: str, actor: User | None = None) -> None:
    now = instance.status_changed_at
    # First: on-commit hooks run in the order they were registered, and the agent's command
    # should not wait behind the live publishes of these two events (nobody watches yet).
    hostcalls.start(instance)
    _event(
        instance,
        kind=InstanceEvent.Kind.TRANSITION,
        to_status=S.PENDING,
        actor=actor,
        created_at=now,
        reason=reason,
    )
    _progress(instance, step="queued", reason="waiting for the host agent", now=now)


def instance_stop(
    *,
    instance: Instance,
    actor: User | None = None,
    reason: str = "",
    now: datetime | None = None,
    park: bool = False,
):
    """Stop: billing ends, the GPUs go back, /workspace stays, and the stopped container
    stays on its host until the next start, so that it can be saved as an image.
    ``park`` (a group's warm replica): its network stays up too, for ``instance_start``
    with ``same_run``."""
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
        if host_alive(instance, now):
            _move(
                instance,
                S.STOPPING,
                allowed_from=STOPPABLE,
                reason=reason,
                now=now,
                actor=actor,
                **billing,
            )
            hostcalls.stop(instance, park=park)
        else:
            # The host is silent: nothing to wait for. When it returns, its container is
            # stopped (never removed) by reconciliation.
            _move(
                instance,
                S.STOPPED,
                allowed_from=STOPPABLE,
                reason=f"{reason} (host {instance.host.name} unreachable; /workspace kept)",
                now=now,
                actor=actor,
                **billing,
            )
            gpus_release(instance=instance, at=now)
    return instance


def instance_start(
    *,
    instance: Instance,
    actor: User | None = None,
    now: datetime | None = None,
    same_run: bool = False,
    without_gpus: bool = False,
) -> Instance:
    """Start a stopped instance again, on the same host (its /workspace lives there).

    ``without_gpus`` (no-GPU mode): start it on its host with no GPU, NO_GPU_VCPUS and
    NO_GPU_MEMORY_GB, billed at the plan's ``no_gpu_hourly_rate``, to reach or copy out its
    data while its GPUs are taken; the next start without it takes GPUs again.

    ``same_run`` (a group's warm replica, stopped with ``park``): keep the run's
    secrets and take the same GPUs when they are free, so that the start spec is the one
    the kept container was made for and the agent only starts it. Links and cookies of
    the last run stay valid then; a group's replicas are reached through its endpoint,
    by its owner's keys, so nothing opens to anyone else."""
    now = now or timezone.now()
    if instance.reservation_id is None:
        # The last run is charged in full before its stop time is forgotten.
        metering.instance_settle(instance_id=instance.pk, now=now)
    with transaction.atomic():
        if instance.reservation_id is not None:
            # The reservation first, as the reservation clock locks them: a start racing
            # the end waits for it, then sees the reservation completed.
            Reservation.objects.select_for_update().filter(pk=instance.reservation_id).first()
        if instance.lease_id is not None:  # likewise the lease, as the lease clock locks it
            _lease_model().objects.select_for_update().filter(pk=instance.lease_id).first()
        instance = _lock(instance)
        if instance.status in (S.PENDING, S.PROVISIONING, S.RUNNING):
            return instance
        if instance.status != S.STOPPED:
            _refuse(instance, "start", {S.STOPPED})
        _refuse_while_snapshotting(instance, _("start"))
        # Its workspace was charged as storage while stopped: up to now, before it goes.
        storage.workspace_settle(instance=instance, now=now)
        if without_gpus:
            _no_gpu_mode_allowed(instance, now)
            started = f"started again on {instance.host.name} without GPUs (no-GPU mode)"
        else:
            if instance.reservation_id is not None:
                gpus = _reserved_gpus(instance, now)
            elif instance.lease_id is not None:
                gpus = _leased_gpus(instance, now)
            else:
                gpus = _allocate_again(instance, now, same_gpus=same_run)
            started = f"started again on {instance.host.name}, GPUs {gpus}"
        _move(
            instance,
            S.PENDING,
            allowed_from={S.STOPPED},
            reason=started + (" (the kept container)" if same_run else ""),
            now=now,
            actor=actor,
            stopped_at=None,
            running_since=None,
            without_gpus=without_gpus,
            # New secrets for each run: links and cookies of the last run die with it.
            **({} if same_run else run_secrets(instance.image)),
        )
        _progress(instance, step="queued", reason="waiting for the host agent", now=now)
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
            _(
                "its reservation ran %(start)s–%(end)s UTC and is %(status)s; "
                "launch a new instance or book again"
            )
            % {
                "start": f"{reservation.period.lower:%Y-%m-%d %H:%M}",
                "end": f"{reservation.period.upper:%Y-%m-%d %H:%M}",
                "status": reservation.status,
            },
            field="status",
        )
    return ", ".join(str(g.index) for g in selectors.instance_gpus(instance))


def _lease_model():
    return Instance._meta.get_field("lease").related_model  # baremetal imports rentals


def _leased_gpus(instance: Instance, now: datetime) -> str:
    """An instance on a dedicated host starts again only while its lease is active and
    still holds the host for it (never as an unbilled on-demand run after the lease), and
    while its tenant's money covers what the lease has committed."""
    lease = instance.lease
    mine = Allocation.objects.filter(lease=lease, instance=instance).exists()
    if lease.status != "active" or not lease.period.lower <= now < lease.period.upper or not mine:
        period = {
            "start": f"{lease.period.lower:%Y-%m-%d %H:%M}",
            "end": f"{lease.period.upper:%Y-%m-%d %H:%M}",
            "status": lease.status,
        }
        if mine:
            message = _(
                "its dedicated-host lease ran %(start)s–%(end)s UTC and is %(status)s; "
                "launch into an active lease instead"
            )
        else:
            message = _(
                "its dedicated-host lease ran %(start)s–%(end)s UTC and is %(status)s, and "
                "another instance was launched into it; launch into an active lease instead"
            )
        raise InvalidTransition(message % period, field="status")
    prepaid.leased_run_allowed(account=holdings.account_lock(instance.user_id), now=now)
    return ", ".join(str(g.index) for g in selectors.instance_gpus(instance))


def _cluster_fields(cluster) -> dict:
    if cluster is None:
        return {}
    cluster_id, rank, size = cluster
    return {"cluster_id": cluster_id, "cluster_rank": rank, "cluster_size": size}


def _cuda_of(image) -> dict:
    """What placement must know of an image template's CUDA (scheduling.gpus_allocate)."""
    if image is None or not image.cuda_version:
        return {}
    return {"cuda": image.cuda_version, "image": image.slug}


def _allocate_again(instance: Instance, now: datetime, *, same_gpus: bool = False) -> str:
    user = holdings.account_lock(instance.user_id)
    holdings.quota_check(account=user, count=instance.gpu_count, start=now)
    prepaid.launch_allowed(user=user, plan=instance.plan, now=now)
    if same_gpus and (indices := _hold_last_gpus(instance, now)):
        return indices
    try:
        proposal = gpus_allocate(
            instance=instance,
            gpu_model=instance.gpu_model,
            count=instance.gpu_count,
            now=now,
            host=instance.host,
            **_cuda_of(instance.image),
        )
    except NoCapacity as exc:
        if instance.group_id is not None:
            raise
        raise NoCapacity(
            _(
                "%(why)s; its /workspace is on that host: start it without GPUs (no-GPU mode, "
                "%(rate)s %(cur)s/h) to reach your data, and with GPUs again when they are free"
            )
            % {
                "why": exc.message,
                "rate": f"{instance.plan.no_gpu_hourly_rate:.2f}",
                "cur": settings.BILLING_CURRENCY,
            },
            field=exc.field,
        ) from exc
    return ", ".join(str(g.index) for g in proposal.gpus)


def _no_gpu_mode_allowed(instance: Instance, now: datetime) -> None:
    """No-GPU mode is for an on-demand instance whose host answers, paid like a launch."""
    if not instance.is_on_demand:
        what = (
            _("a reserved instance")
            if instance.reservation_id
            else _("an instance on a dedicated host")
            if instance.lease_id
            else _("a replica of an elastic group")
        )
        raise InvalidTransition(
            _("no-GPU mode is for on-demand instances, and this is %(what)s; start it as usual")
            % {"what": what},
            field="without_gpus",
        )
    if not host_alive(instance, now):
        raise InvalidTransition(
            _("its host %(host)s is not answering, and its /workspace is there; try again later")
            % {"host": instance.host.name},
            field="without_gpus",
        )
    user = holdings.account_lock(instance.user_id)
    prepaid.launch_allowed(
        user=user, plan=instance.plan, now=now, hourly_rate=instance.plan.no_gpu_hourly_rate
    )


def _hold_last_gpus(instance: Instance, now: datetime) -> str | None:
    """Hold the GPUs of the instance's last run again, if every one is enabled and free;
    None (nothing held) otherwise, and placement chooses as usual."""
    runs = Allocation.objects.filter(
        instance=instance, reservation__isnull=True, period__upper_inf=False
    )
    ended = max((a.period.upper for a in runs.only("period")), default=None)
    if ended is None:
        return None
    gpus = list(
        GPU.objects.filter(
            allocations__in=runs.filter(period__endswith=ended),
            host_id=instance.host_id,
            model_id=instance.gpu_model_id,
            is_enabled=True,
        ).order_by("index")
    )
    if len(gpus) != instance.gpu_count:
        return None
    period = selectors.from_now(now)
    try:
        with transaction.atomic():  # a savepoint: one taken GPU leaves nothing held
            Allocation.objects.bulk_create(
                Allocation(gpu=gpu, instance=instance, period=period) for gpu in gpus
            )
    except (IntegrityError, OperationalError):  # taken meanwhile (or a deadlock's loser)
        return None
    return ", ".join(str(g.index) for g in gpus)


IDLE_MINUTES_RANGE = (10, 7 * 24 * 60)
# Anything not already on its way out; the workspace goes only this way.
TERMINABLE = set(S.values) - {S.TERMINATING, S.TERMINATED}


def check_idle_minutes(minutes: int) -> None:
    low, high = IDLE_MINUTES_RANGE
    if minutes != 0 and not low <= minutes <= high:
        raise RentalError(
            _("idle_stop_minutes: %(minutes)s is not 0 (off) or %(low)s–%(high)s minutes")
            % {"minutes": minutes, "low": low, "high": high},
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
                _("instance %(instance)s is %(status)s: it has no idle policy any more")
                % {"instance": instance, "status": instance.status},
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
            allowed_from={S.RUNNING},
            reason=f"restart requested by {actor}" if actor else "restart",
            now=now,
            actor=actor,
        )
        hostcalls.restart(instance)
    return instance


def _refuse_while_snapshotting(instance: Instance, action: str) -> None:
    if (snapshot := snapshot_saving(instance=instance)) is not None:
        raise InvalidTransition(
            _(
                "cannot %(action)s instance %(instance)s while its /workspace is being saved as "
                "snapshot %(name)s; once it is ready or failed, try again"
            )
            % {"action": action, "instance": instance, "name": snapshot.name},
            field="status",
        )


def instance_terminate(
    *,
    instance: Instance,
    actor: User | None = None,
    now: datetime | None = None,
    reason: str = "",
) -> Instance:
    """Remove the instance and its /workspace for good; ``reason`` says why where no one
    asked (the storage retention policy)."""
    now = now or timezone.now()
    with transaction.atomic():
        instance = _lock(instance)
        if instance.status in (S.TERMINATING, S.TERMINATED):
            return instance
        _refuse_while_snapshotting(instance, _("terminate"))
        reason = reason or (f"terminated by {actor}" if actor else "terminated")
        storage.workspace_settle(instance=instance, now=now)  # if stopped: charged up to now
        # Billing ends now for a run under way (also one stopped mid-restart).
        billing = {"stopped_at": now} if instance.running_since and not instance.stopped_at else {}
        if instance.status != S.LOST and host_alive(instance, now):
            _move(
                instance,
                S.TERMINATING,
                allowed_from=TERMINABLE,
                reason=reason,
                now=now,
                actor=actor,
                **billing,
            )
            hostcalls.remove(instance)
        else:
            _move(
                instance,
                S.TERMINATED,
                allowed_from=TERMINABLE,
                reason=f"{reason} (host unreachable; cleaned up when it returns)",
                now=now,
                actor=actor,
                terminated_at=now,
                **billing,
            )
            gpus_release(instance=instance, at=now)
    return instance


def modelcache_launch_check(repo_id: str) -> str:
    """A launch's model must be a repository id that some host's shared cache has: an
    unknown one is refused, naming the models on offer (a typo must not cost a download)."""
    from gpurental.modelcache.services import CacheRefused, repo_id_check

    try:
        repo_id = repo_id_check(repo_id, field="model")
    except CacheRefused as exc:
        raise RentalError(str(exc), field="model") from exc
    offered = models_offered()
    if repo_id not in offered:
        raise RentalError(
            _(
                "model %(model)r is in no host's cache; cached models: %(offered)s. Launch "
                "without model= and download it inside the instance, or ask the operator to "
                "fill the cache"
            )
            % {"model": repo_id, "offered": ", ".join(offered) or _("none")},
            field="model",
        )
    return repo_id
