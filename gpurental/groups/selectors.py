"""Reads of elastic groups: who may see which."""

from __future__ import annotations

from gpurental.groups.models import Group


def groups_visible_to(*, user):
    """The groups ``user`` may see: their own; staff, every group."""
    queryset = Group.objects.select_related("image", "plan__gpu_model", "user")
    return queryset if user.is_staff else queryset.filter(user=user)
