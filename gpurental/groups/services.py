"""Everything that changes an elastic group, each step recorded as a GroupEvent.

- ``group_apply``: create a group from a spec, or change what differs in it.
- ``group_delete``: its replicas terminate, then it is gone.
- ``group_tick``: the autoscaler's periodic look: measure, decide (autoscaler.decide),
  then act: promote warm replicas or launch new ones, drain and retire surplus ones,
  park new warm replicas, refill the warm pool, clear away failed replicas.

Replicas are ordinary instances: they go through the lifecycle services, so they are
placed, metered, quota- and balance-checked exactly like any other. A warm replica is a
stopped instance: it was started once, then parked with its container kept (created,
stopped: its image, ports and mounts in place), holds no GPU and costs no GPU time while
it waits; promoting it starts that same container again (``same_run``), on its GPUs when
they are free, skipping the image and creation steps.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpurental.catalog.models import GPUModel, ImageTemplate
from gpurental.fleet.models import Zone
from gpurental.fleet.zones import UnknownZone, zone_named
from gpurental.groups import autoscaler, specs
from gpurental.groups.events import publish_group_changed, publish_group_frame
from gpurental.groups.keys import endpoint_key_new
from gpurental.groups.models import Group, GroupEvent, LoadSample, ScalingRule
from gpurental.groups.selectors import group_frame
from gpurental.rentals.events import state_redis
from gpurental.rentals.exceptions import NoCapacity, RentalError
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.rentals.services import lifecycle

log = logging.getLogger(__name__)
S = InstanceStatus
LIVE = (S.PENDING, S.PROVISIONING, S.RUNNING, S.STOPPING, S.STOPPED, S.UNREACHABLE)
STARTING = (S.PENDING, S.PROVISIONING)
BROKEN = (S.FAILED, S.LOST)
# Settings that replicas are made with: changing them replaces the replicas (a rollout).
REPLACES = ("image", "instance_type", "gpu_count")


@dataclass
class Applied:
    group: Group
    created: bool
    changes: list[str] = field(default_factory=list)
    endpoint_key: str | None = None  # shown once, when the group is made


def _event(group: Group, kind: str, reason: str, now=None, **counts) -> GroupEvent:
    return GroupEvent.objects.create(
        group=group, kind=kind, reason=reason[:2000], created_at=now or timezone.now(), **counts
    )


# --- apply ---------------------------------------------------------------------


def group_catalog(spec: specs.Spec):
    """The image, plan and port a checked spec names, or SpecError saying which is wrong."""
    image = ImageTemplate.objects.filter(slug=spec.image, is_active=True).first()
    if image is None:
        offered = ", ".join(
            ImageTemplate.objects.filter(is_active=True).values_list("slug", flat=True)
        )
        raise specs.SpecError(
            _("%(image)r is not an image on offer; images: %(offered)s")
            % {"image": spec.image, "offered": offered or _("none")},
            field="image",
        )
    wanted = spec.instance_type.lower()
    model = next(
        (
            m
            for m in GPUModel.objects.filter(plans__is_active=True).distinct()
            if wanted in (m.slug.lower(), m.short_name.lower())
        ),
        None,
    )
    if model is None:
        names = sorted(
            set(GPUModel.objects.filter(plans__is_active=True).values_list("short_name", flat=True))
        )
        raise specs.SpecError(
            _("%(type)r is not a GPU on offer; instance_type is one of: %(names)s")
            % {"type": spec.instance_type, "names": ", ".join(names) or _("none")},
            field="instance_type",
        )
    try:
        plan = lifecycle.resolve_plan(plan=None, gpu_model=model, gpu_count=spec.gpu_count)
    except RentalError as exc:
        raise specs.SpecError(exc.message, field="gpu_count") from exc
    declared = [*(image.http_ports or []), image.port]
    port = spec.port or declared[0]
    if port not in declared:
        raise specs.SpecError(
            _("%(port)s is not a port image %(image)s declares (%(declared)s)")
            % {"port": port, "image": image.slug, "declared": ", ".join(map(str, declared))},
            field="port",
        )
    for i, name in enumerate(spec.zones):
        try:
            zone_named(name)
        except UnknownZone as exc:
            raise specs.SpecError(exc.message, field=f"zones[{i}]") from exc
    return image, plan, port


def group_apply(*, user, source, fmt: str | None = None, now: datetime | None = None) -> Applied:
    """Create the user's group named in the spec, or change what differs in it. A spec
    with any problem raises SpecError and changes nothing."""
    now = now or timezone.now()
    spec = specs.check(specs.load(source, fmt))
    image, plan, port = group_catalog(spec)
    spec.port = port
    normal = spec.as_dict()
    values = {
        "image": image,
        "plan": plan,
        "port": port,
        "min_replicas": spec.min_replicas,
        "max_replicas": spec.max_replicas,
        "warm_pool_size": spec.warm_pool_size,
        "max_concurrency": spec.max_concurrency,
        "queue_size": spec.queue_size,
        "scale_up_cooldown_s": spec.scale_up_cooldown_s,
        "scale_down_cooldown_s": spec.scale_down_cooldown_s,
        "prewarm_lead_minutes": spec.prewarm_lead_minutes,
        "spec": normal,
    }
    with transaction.atomic():
        # One apply at a time per owner: two cannot both create the same name.
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        group = (
            Group.objects.select_for_update()
            .filter(user=user, name=spec.name, status=Group.Status.ACTIVE)
            .first()
        )
        if group is None:
            raw_key, key_hash = endpoint_key_new()
            group = Group.objects.create(
                user=user,
                name=spec.name,
                endpoint_key_hash=key_hash,
                created_at=now,
                **values,
            )
            _replace_rules(group, spec)
            _event(group, GroupEvent.Kind.APPLIED, f"created: {_summary(spec)}", now)
            publish_group_changed(group.pk)
            return Applied(group, created=True, changes=["created"], endpoint_key=raw_key)
        before = group.spec or {}
        changes = [
            f"{key}: {before.get(key)!r} → {normal[key]!r}"
            for key in normal
            if before.get(key) != normal[key]
        ]
        if not changes:
            return Applied(group, created=False, changes=[])
        rollout = [key for key in REPLACES if before.get(key) != normal[key]]
        for key, value in values.items():
            setattr(group, key, value)
        group.save(update_fields=list(values))
        _replace_rules(group, spec)
        reason = "changed: " + "; ".join(changes)
        if rollout:
            reason += (
                f" — rollout: the replicas made with the old {', '.join(rollout)} are replaced; "
                "each keeps serving until enough new ones do"
            )
        _event(group, GroupEvent.Kind.APPLIED, reason, now)
        publish_group_changed(group.pk)
    return Applied(group, created=False, changes=changes)


def _replace_rules(group: Group, spec: specs.Spec) -> None:
    group.rules.all().delete()
    ScalingRule.objects.bulk_create(
        ScalingRule(
            group=group,
            metric=rule.metric,
            threshold=rule.threshold,
            cron=rule.cron,
            min_replicas=rule.min_replicas,
        )
        for rule in spec.rules
    )


def _summary(spec: specs.Spec) -> str:
    rules = ", ".join(
        f"{r.metric} {r.threshold:g}"
        if r.metric != "schedule"
        else f"schedule {r.cron!r} ≥ {r.min_replicas}"
        for r in spec.rules
    )
    return (
        f"{spec.min_replicas}–{spec.max_replicas} × {spec.gpu_count} {spec.instance_type} "
        f"running {spec.image}, warm pool {spec.warm_pool_size}; rules: {rules or 'none'}"
    )


def group_delete(*, group: Group, actor=None, now: datetime | None = None) -> Group:
    """Its replicas terminate (the next ticks finish the job), then the group is deleted."""
    now = now or timezone.now()
    with transaction.atomic():
        group = Group.objects.select_for_update().get(pk=group.pk)
        if group.status != Group.Status.ACTIVE:
            return group
        group.status = Group.Status.DELETING
        group.save(update_fields=["status"])
        _event(group, GroupEvent.Kind.APPLIED, f"deleted by {actor or 'its owner'}", now)
        publish_group_changed(group.pk)
    group_tick(group_id=group.pk, now=now)
    return Group.objects.get(pk=group.pk)


# --- the periodic look ------------------------------------------------------------


@dataclass
class Replicas:
    ready: list[Instance] = field(default_factory=list)  # serving and running
    starting: list[Instance] = field(default_factory=list)  # serving, on its way
    draining: list[Instance] = field(default_factory=list)
    warm: list[Instance] = field(default_factory=list)  # stopped, ready to promote
    filling: list[Instance] = field(default_factory=list)  # warm, not yet parked
    broken: list[Instance] = field(default_factory=list)
    # Made with an earlier spec's image or plan (a rollout): serving ones keep serving until
    # enough new ones do; warm ones are of no use any more.
    outdated: list[Instance] = field(default_factory=list)  # serving: running or on its way
    stale_warm: list[Instance] = field(default_factory=list)
    blocked: bool = False  # this tick's scale-out was refused (quota, balance, capacity)

    @classmethod
    def of(cls, group: Group) -> Replicas:
        found = cls()
        replicas = (
            group.replicas.exclude(status=S.TERMINATED)
            .select_related("host")
            .order_by("created_at", "pk")  # replicas of one tick share a time
        )
        for r in replicas:
            old = r.image_id != group.image_id or r.plan_id != group.plan_id
            if r.status in BROKEN:
                found.broken.append(r)
            elif old and r.group_role == "warm":
                found.stale_warm.append(r)
            elif old and r.group_role == "serving" and r.status in (S.RUNNING, *STARTING):
                found.outdated.append(r)
            elif r.group_role == "draining":
                found.draining.append(r)
            elif r.group_role == "warm":
                (found.warm if r.status == S.STOPPED else found.filling).append(r)
            elif r.status == S.RUNNING:
                found.ready.append(r)
            elif r.status in STARTING:
                found.starting.append(r)
            elif r.status == S.STOPPED:
                found.broken.append(r)  # a serving replica someone stopped: replaced
        return found

    def in_page_order(self) -> list[Instance]:
        """Serving first, then draining, warm, and broken ones."""
        return [
            *self.ready,
            *self.starting,
            *self.outdated,
            *self.draining,
            *self.warm,
            *self.filling,
            *self.stale_warm,
            *self.broken,
        ]


def _drain_key(instance_id) -> str:
    return f"gpurental:group-drain:{instance_id}"


def _set_role(group: Group, instance: Instance, role: str, reason: str, now) -> None:
    Instance.objects.filter(pk=instance.pk).update(group_role=role)
    instance.group_role = role
    if role == "draining":
        try:
            state_redis().set(_drain_key(instance.pk), str(time.time()), ex=3600)
        except Exception:  # noqa: BLE001 - draining then waits for the timeout
            log.warning("could not mark %s draining in Redis", instance.pk, exc_info=True)
    _event(group, GroupEvent.Kind.REPLICA, f"{str(instance.pk)[:8]} {reason}", now)


def _gpu_util(replicas: list[Instance], now: float) -> tuple[float | None, float | None]:
    """Mean GPU utilisation of the ready replicas over the last minute and over the last
    GPU_FAST_WINDOW_S (the samplers' recent samples, 1 Hz)."""
    from gpurental.rentals.selectors import instance_gpus
    from gpurental.telemetry.selectors import recent_samples

    minute, fast = [], []
    for replica in replicas:
        if replica.host is None:
            continue
        indices = {g.index for g in instance_gpus(replica)}
        for sample in recent_samples(
            host=replica.host.name, instance_id=str(replica.pk), gpu_indices=indices
        ):
            age = now - (sample.get("ts") or 0)
            utils = [g["util"] for g in sample["gpus"] if g.get("util") is not None]
            if age <= 60:
                minute.extend(utils)
            if age <= autoscaler.GPU_FAST_WINDOW_S:
                fast.extend(utils)

    def mean(values):
        return sum(values) / len(values) if values else None

    return mean(minute), mean(fast)


def _history(group: Group, now: datetime) -> tuple[tuple[tuple[datetime, int], ...], int, int]:
    window = now - timedelta(seconds=max(group.scale_down_cooldown_s, 60))
    recent = tuple(group.samples.filter(at__gte=window).values_list("at", "needed").order_by("at"))
    local = now.astimezone(ZoneInfo(settings.TIME_ZONE))
    schedules = [(r.cron, r.min_replicas or 0) for r in group.rules.all() if r.metric == "schedule"]
    floor = autoscaler.schedule_floor(schedules, local) if schedules else 0
    prewarm = 0
    if group.prewarm_lead_minutes:
        lead = timedelta(minutes=group.prewarm_lead_minutes)
        past = list(
            group.samples.filter(
                at__gte=now + lead - timedelta(days=8), at__lt=now - timedelta(hours=12)
            ).values_list("at", "needed")
        )
        prewarm = autoscaler.prewarm_floor(past, now, group.prewarm_lead_minutes)
    return recent, floor, prewarm


def _rules(group: Group) -> autoscaler.Rules:
    queue = gpu = None
    for rule in group.rules.all():
        if rule.metric == "queue":
            queue = float(rule.threshold)
        elif rule.metric == "gpu_utilization":
            gpu = float(rule.threshold)
    return autoscaler.Rules(
        min_replicas=group.min_replicas,
        max_replicas=group.max_replicas,
        queue_target=queue,
        gpu_target=gpu,
        scale_up_cooldown_s=group.scale_up_cooldown_s,
        scale_down_cooldown_s=group.scale_down_cooldown_s,
    )


def group_tick(*, group_id, now: datetime | None = None) -> autoscaler.Decision | None:
    """Measure, decide and act for one group. Two ticks never act on a group at once."""
    from gpurental.groups.load import load_of

    now = now or timezone.now()
    with transaction.atomic():
        group = Group.objects.select_for_update(skip_locked=True).filter(pk=group_id).first()
        if group is None or group.status == Group.Status.DELETED:
            return None
        replicas = Replicas.of(group)
        if group.status == Group.Status.DELETING:
            _wind_down(group, replicas, now)
            return None
        load = load_of(group.pk)
        last = load.last_request_at
        gpu_minute, gpu_fast = _gpu_util(
            [*replicas.ready, *_serving(replicas.outdated)], now=time.time()
        )
        seen = autoscaler.Observed(
            ready=len(replicas.ready),
            provisioning=len(replicas.starting),
            inflight=load.inflight,
            queued=load.queued,
            burst=load.burst,
            waiting_now=load.queued_now,
            gpu_util=gpu_minute,
            gpu_util_fast=gpu_fast,
            last_request_at=datetime.fromtimestamp(last, tz=UTC) if last else None,
            # Replicas that served and are gone; not a launch that failed (no retry storm).
            lost=sum(
                1
                for r in replicas.broken
                if r.group_role == "serving" and r.status in (S.STOPPED, S.LOST)
            ),
        )
        recent, floor, prewarm = _history(group, now)
        history = autoscaler.History(
            last_scale_up_at=group.last_scale_up_at,
            last_scale_down_at=group.last_scale_down_at,
            recent_needs=recent,
            schedule_floor=floor,
            prewarm_floor=prewarm,
        )
        decision = autoscaler.decide(_rules(group), seen, history, now)
        sample = LoadSample.objects.create(
            group=group,
            at=now,
            ready=seen.ready,
            provisioning=seen.provisioning,
            warm=len(replicas.warm),
            rps=load.rps,
            inflight=load.inflight,
            queued=load.queued,
            latency_p50_ms=load.p50_ms,
            latency_p99_ms=load.p99_ms,
            errors=load.errors,
            gpu_util=seen.gpu_util,
            needed=decision.needed,
        )
        current = seen.ready + seen.provisioning
        if decision.changes:
            _event(
                group,
                GroupEvent.Kind.SCALED,
                decision.reason,
                now,
                from_replicas=current,
                to_replicas=decision.desired,
            )
            if decision.desired > current:
                group.last_scale_up_at = now
            else:
                group.last_scale_down_at = now
        group.desired_replicas = decision.desired
        group.save(update_fields=["desired_replicas", "last_scale_up_at", "last_scale_down_at"])
        changed = _act(group, replicas, decision.desired, current, load, now)
        if changed:
            publish_group_changed(group.pk)
        # The page's live charts: this sample, the replicas as they are now, this tick's events.
        publish_group_frame(group.pk, group_frame(group, samples=[sample], events_since=now))
    return decision


def _serving(replicas: list[Instance]) -> list[Instance]:
    return [r for r in replicas if r.status == S.RUNNING]


def _outdated(group: Group, replica: Instance) -> bool:
    return replica.image_id != group.image_id or replica.plan_id != group.plan_id


def _act(group: Group, replicas: Replicas, desired: int, current: int, load, now) -> bool:
    delta = desired - current
    changed = False
    for replica in replicas.broken:
        lifecycle.instance_terminate(instance=replica, actor=None, now=now)
        _event(
            group,
            GroupEvent.Kind.REPLICA,
            f"{str(replica.pk)[:8]} was {replica.status}: terminated",
            now,
        )
        changed = True
    if delta > 0:
        changed |= _scale_out(group, replicas, delta, now)
    elif delta < 0:
        # Not yet serving first, then the newest.
        victims = [*reversed(replicas.starting), *reversed(replicas.ready)][:-delta]
        for replica in victims:
            _set_role(group, replica, "draining", "draining: no new requests", now)
            replicas.draining.append(replica)
        changed |= bool(victims)
    changed |= _roll_out(group, replicas, desired, now)
    changed |= _retire_drained(group, replicas, load, now)
    changed |= _keep_warm_pool(group, replicas, now)
    return changed


def _roll_out(group: Group, replicas: Replicas, desired: int, now) -> bool:
    """Replace the replicas of an earlier spec (another image or plan). The autoscaler
    counts only replicas of the current spec, so it launches new ones as it would from
    zero; meanwhile the old ones serve, and each drains once the new ones alone plus the
    old ones still serving exceed what is wanted. Where the quota or the balance holds new
    ones back, one old replica at a time makes room. Old warm replicas simply go."""
    changed = False
    for replica in [*replicas.stale_warm, *(r for r in replicas.outdated if r.status != S.RUNNING)]:
        lifecycle.instance_terminate(instance=replica, actor=None, now=now)
        _event(
            group,
            GroupEvent.Kind.REPLICA,
            f"{str(replica.pk)[:8]} terminated: made with the earlier spec (rollout)",
            now,
        )
        changed = True
    old = _serving(replicas.outdated)
    drain = old[: max(0, len(replicas.ready) + len(old) - desired)]
    if not drain and old and replicas.blocked and not replicas.starting:
        drain = old[:1]
    for replica in drain:
        _set_role(group, replica, "draining", "rollout: replaced by the new spec", now)
        replicas.draining.append(replica)
    return changed or bool(drain)


def _zone_order(group: Group) -> list[Zone | None]:
    """The spec's zones, the one with the fewest live replicas first (then in the spec's
    order): a group spreads over its zones. [None] when it names none (anywhere)."""
    names = group.spec.get("zones") or []
    if not names:
        return [None]
    zones = {zone.name: zone for zone in Zone.objects.filter(name__in=names)}
    live = group.replicas.filter(status__in=LIVE, zone__isnull=False)
    used = Counter(live.values_list("zone__name", flat=True))
    ordered = [zones[name] for name in names if name in zones]
    return sorted(ordered, key=lambda zone: used[zone.name]) or [None]


def _launch_replica(group: Group, *, role: str, suffix: str, now) -> Instance:
    """A new replica in the least-used of the group's zones; the next zone when that one
    has no capacity (NoCapacity from the last one tried)."""
    zones = _zone_order(group)
    for tried, zone in enumerate(zones, start=1):
        try:
            return lifecycle.instance_launch(
                user=group.user,
                image=group.image,
                plan=group.plan,
                name=f"{group.name}-{suffix}",
                idle_stop_minutes=0,
                group=group,
                group_role=role,
                zone=zone,
                now=now,
            )
        except NoCapacity:
            if tried == len(zones):
                raise
    raise AssertionError("unreachable: _zone_order is never empty")


def _promote_first(replicas: Replicas) -> Instance:
    """The warm replica to promote: one in the zone with the fewest serving replicas."""
    serving = Counter(r.zone_id for r in [*replicas.ready, *replicas.starting])
    best = min(replicas.warm, key=lambda r: serving[r.zone_id] if r.zone_id else 0)
    replicas.warm.remove(best)
    return best


def _scale_out(group: Group, replicas: Replicas, count: int, now) -> bool:
    changed = False
    for _attempt in range(count):
        try:
            if replicas.warm:
                replica = _promote_first(replicas)
                # Its kept container, on its GPUs when they are free: no image or creation step.
                lifecycle.instance_start(instance=replica, now=now, same_run=True)
                _set_role(group, replica, "serving", "promoted from the warm pool", now)
            else:
                replica = _launch_replica(group, role="serving", suffix="replica", now=now)
                _event(
                    group, GroupEvent.Kind.REPLICA, f"{str(replica.pk)[:8]} launched (cold)", now
                )
            changed = True
        except RentalError as exc:
            _event(group, GroupEvent.Kind.BLOCKED, f"scale-out blocked: {exc.message}", now)
            replicas.blocked = True
            break
    return changed


def _retire_drained(group: Group, replicas: Replicas, load, now) -> bool:
    """A draining replica with nothing in flight (or past the drain timeout) goes back to
    the warm pool when it has room, else it is terminated."""
    changed = False
    warm_count = len(replicas.warm) + len(replicas.filling)
    for replica in replicas.draining:
        inflight = load.replicas.get(str(replica.pk), {}).get("inflight", 0)
        since = _drain_started(replica)
        waited = time.time() - since if since else settings.GROUP_DRAIN_TIMEOUT_S
        # Gateways see the role change within a second or two: wait that long at least.
        if (inflight and waited < settings.GROUP_DRAIN_TIMEOUT_S) or waited < 2:
            continue
        if (
            replica.status == S.RUNNING
            and warm_count < group.warm_pool_size
            and not _outdated(group, replica)
        ):
            lifecycle.instance_stop(
                instance=replica,
                reason="drained: back to the warm pool",
                now=now,
                park=True,
            )
            _set_role(group, replica, "warm", "drained: back to the warm pool", now)
            warm_count += 1
        else:
            lifecycle.instance_terminate(instance=replica, actor=None, now=now)
            _event(
                group, GroupEvent.Kind.REPLICA, f"{str(replica.pk)[:8]} drained: terminated", now
            )
        changed = True
    return changed


def _drain_started(replica: Instance) -> float | None:
    try:
        value = state_redis().get(_drain_key(replica.pk))
    except Exception:  # noqa: BLE001
        return None
    return float(value) if value else None


def _keep_warm_pool(group: Group, replicas: Replicas, now) -> bool:
    changed = False
    for replica in replicas.filling:
        if replica.status == S.RUNNING:  # started once: park it
            lifecycle.instance_stop(
                instance=replica, reason="parked in the warm pool", now=now, park=True
            )
            _event(
                group,
                GroupEvent.Kind.REPLICA,
                f"{str(replica.pk)[:8]} parked in the warm pool",
                now,
            )
            changed = True
    have = len(replicas.warm) + len(replicas.filling)
    for _attempt in range(group.warm_pool_size - have):
        try:
            replica = _launch_replica(group, role="warm", suffix="warm", now=now)
        except RentalError as exc:
            _event(group, GroupEvent.Kind.BLOCKED, f"warm pool refill blocked: {exc.message}", now)
            break
        _event(
            group,
            GroupEvent.Kind.REPLICA,
            f"{str(replica.pk)[:8]} launched to refill the warm pool",
            now,
        )
        changed = True
    for replica in replicas.warm[group.warm_pool_size :]:
        lifecycle.instance_terminate(instance=replica, actor=None, now=now)
        _event(
            group,
            GroupEvent.Kind.REPLICA,
            f"{str(replica.pk)[:8]} terminated: the pool is smaller now",
            now,
        )
        changed = True
    return changed


def _wind_down(group: Group, replicas: Replicas, now) -> None:
    for replica in replicas.in_page_order():
        if replica.status not in (S.TERMINATING, S.TERMINATED):
            lifecycle.instance_terminate(instance=replica, actor=None, now=now)
    if not group.replicas.exclude(status=S.TERMINATED).exists():
        group.status = Group.Status.DELETED
        group.save(update_fields=["status"])
        _event(group, GroupEvent.Kind.APPLIED, "every replica terminated: deleted", now)
    publish_group_changed(group.pk)
