"""Reads of elastic groups: who may see which, how many replicas serve, and a spec's quote."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Count, Q
from django.utils import timezone

from gpurental.catalog.models import ImageTemplate, Plan
from gpurental.groups import specs
from gpurental.groups.models import Group, GroupEvent, LoadSample
from gpurental.rentals.models import InstanceStatus


def groups_visible_to(*, user, with_ready: bool = False):
    """The groups ``user`` may see: their own; staff, every group. ``with_ready`` adds
    ``ready``: how many serving replicas are running."""
    queryset = Group.objects.select_related("image", "plan__gpu_model", "user")
    if with_ready:
        queryset = queryset.annotate(
            ready=Count(
                "replicas",
                filter=Q(replicas__status=InstanceStatus.RUNNING, replicas__group_role="serving"),
            )
        )
    return queryset if user.is_staff else queryset.filter(user=user)


@dataclass(frozen=True)
class Quote:
    spec: specs.Spec  # checked, with its port resolved
    image: ImageTemplate
    plan: Plan
    exists: bool  # the user has a live group of this name: applying would change it


def group_quote(*, user, source, fmt: str | None = None) -> Quote:
    """What applying ``source`` would make, checked exactly as group_apply checks it
    (SpecError naming the field otherwise); nothing is written."""
    from gpurental.groups.services import group_catalog  # the apply's own catalog lookup

    spec = specs.check(specs.load(source, fmt))
    image, plan, port = group_catalog(spec)
    spec.port = port
    exists = Group.objects.filter(user=user, name=spec.name, status=Group.Status.ACTIVE).exists()
    return Quote(spec=spec, image=image, plan=plan, exists=exists)


CHART_WINDOW = timedelta(minutes=30)
SAMPLE_FIELDS = (
    "ready",
    "provisioning",
    "warm",
    "rps",
    "inflight",
    "queued",
    "latency_p50_ms",
    "latency_p99_ms",
    "errors",
    "gpu_util",
    "needed",
)


def sample_row(sample: LoadSample) -> dict:
    """A load sample as plain JSON values; ``at`` to the microsecond (``after`` must not
    return the last one again)."""
    at = sample.at.isoformat(timespec="microseconds")
    return {"at": at, **{f: getattr(sample, f) for f in SAMPLE_FIELDS}}


def event_row(event: GroupEvent) -> dict:
    return {
        "at": event.created_at.isoformat(),
        "kind": event.kind,
        "reason": event.reason,
        "from_replicas": event.from_replicas,
        "to_replicas": event.to_replicas,
    }


def group_frame(group: Group, *, samples=None, after=None, events_since=None) -> dict:
    """What a group's page shows live, as plain JSON values: ``samples`` (default: those of
    the last ``CHART_WINDOW``, or those after ``after``), the replicas' states, the status,
    and the events from ``events_since`` on (none without it)."""
    from gpurental.groups.services import Replicas

    if samples is None:
        samples = group.samples.filter(at__gte=timezone.now() - CHART_WINDOW)
        if after is not None:
            samples = samples.filter(at__gt=after)
        samples = samples.order_by("at")[:2000]
    found = Replicas.of(group)
    replicas = [
        {
            "id": str(r.pk),
            "status": r.status,
            "role": r.group_role,
            "host": r.host.name if r.host_id else None,
        }
        for r in found.in_page_order()
    ]
    events = []
    if events_since is not None:
        events = group.events.filter(created_at__gte=events_since).order_by("created_at", "id")
    return {
        "status": group.status,
        "samples": [sample_row(s) for s in samples],
        "replicas": replicas,
        "events": [event_row(e) for e in events],
    }
