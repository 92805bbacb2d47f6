"""Reads of elastic groups: who may see which, how many replicas serve, and a spec's quote."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Q

from gpurental.catalog.models import ImageTemplate, Plan
from gpurental.groups import specs
from gpurental.groups.models import Group
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
