"""Elastic groups in the console: the list with a spec form (quote first, then apply),
a group's page (replicas, events, live charts, its endpoint key's rotation) and the
samples its charts poll."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from gpurental.api.groups.serializers import (
    EXAMPLE_HCL,
    group_price,
    replica_rows,
)
from gpurental.gateway import routes
from gpurental.groups import specs
from gpurental.groups.keys import ENDPOINT_KEY_OVERLAP, group_endpoint_key_rotate
from gpurental.groups.models import Group
from gpurental.groups.selectors import group_frame, group_quote, groups_visible_to
from gpurental.groups.services import group_apply, group_delete
from gpurental.rentals.exceptions import RentalError
from gpurental.teams import roles
from gpurental.teams.acting import account_of, needs_role, require_role

FORMATS = (("hcl", "HCL"), ("yaml", "YAML"), ("json", "JSON"))
# How long the replaced endpoint key keeps working after a rotation (seconds, label).
OVERLAPS = (
    (0, gettext_lazy("none: it stops now")),
    (3600, gettext_lazy("1 hour")),
    (int(ENDPOINT_KEY_OVERLAP.total_seconds()), gettext_lazy("24 hours")),
    (7 * 86400, gettext_lazy("7 days")),
)


def _quote(*, user, source: str, fmt: str) -> dict:
    quote = group_quote(user=user, source=source, fmt=fmt)
    spec = quote.spec
    price = group_price(
        quote.plan,
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        warm_pool_size=spec.warm_pool_size,
    )
    return {
        "name": spec.name,
        "spec": spec,
        "image": quote.image,
        "plan": quote.plan,
        "port": spec.port,
        "exists": quote.exists,
        "price": price,
    }


@login_required
def group_list(request):
    source = request.POST.get("source", EXAMPLE_HCL)
    fmt = request.POST.get("format", "hcl")
    if fmt not in dict(FORMATS):
        fmt = "hcl"
    quote = error = created = None
    if request.method == "POST" and "apply" in request.POST:
        require_role(request, roles.OPERATE)
    if request.method == "POST":
        try:
            if "apply" in request.POST:
                # The service locks the user's row by its model: the user itself, not the lazy proxy.
                user = get_user_model().objects.get(pk=account_of(request).pk)
                applied = group_apply(user=user, source=source, fmt=fmt)
                if not applied.created:
                    what = "; ".join(applied.changes) if applied.changes else _("unchanged")
                    messages.success(
                        request,
                        _("Group %(name)s: %(what)s.") % {"name": applied.group.name, "what": what},
                    )
                    return redirect("group", group_id=applied.group.pk)
                created = {
                    "group": applied.group,
                    "key": applied.endpoint_key,
                    "url": routes.group_origin(applied.group.pk),
                }
            else:
                quote = _quote(user=account_of(request), source=source, fmt=fmt)
        except specs.SpecError as exc:
            error = {"field": exc.field, "message": exc.message}
    groups = (
        groups_visible_to(user=account_of(request), with_ready=True)
        .exclude(status=Group.Status.DELETED)
        .order_by("name", "created_at")
    )
    return render(
        request,
        "console/groups.html",
        {
            "groups": groups,
            "source": source,
            "format": fmt,
            "formats": FORMATS,
            "quote": quote,
            "error": error,
            "created": created,
            "currency": settings.BILLING_CURRENCY,
        },
    )


def _group_or_404(request, group_id) -> Group:
    group = groups_visible_to(user=account_of(request)).filter(pk=group_id).first()
    if group is None:
        raise Http404(_("No such group."))
    return group


@login_required
def group_detail(request, group_id):
    return _detail(request, _group_or_404(request, group_id))


def _detail(request, group: Group, rotated=None):
    return render(
        request,
        "console/group.html",
        {
            "group": group,
            "replicas": replica_rows(group),
            "events": group.events.order_by("-created_at", "-id")[:100],
            "load": group.samples.order_by("-at").first(),
            "rules": group.rules.all(),
            "endpoint_url": routes.group_origin(group.pk),
            "price": group_price(
                group.plan,
                min_replicas=group.min_replicas,
                max_replicas=group.max_replicas,
                warm_pool_size=group.warm_pool_size,
            ),
            "currency": settings.BILLING_CURRENCY,
            "overlaps": OVERLAPS,
            "default_overlap": int(ENDPOINT_KEY_OVERLAP.total_seconds()),
            "rotated": rotated,
        },
    )


@login_required
@require_POST
@needs_role(roles.OPERATE)
def group_rotate_key_view(request, group_id):
    """A new endpoint key, shown on the page this once; the old one works for the overlap
    chosen."""
    group = _group_or_404(request, group_id)
    try:
        overlap_s = int(request.POST.get("overlap_s", ""))
    except ValueError:
        overlap_s = -1  # the service names the field and the range
    try:
        rotated = group_endpoint_key_rotate(
            group=group, actor=request.user, overlap=timedelta(seconds=overlap_s)
        )
    except RentalError as exc:
        messages.error(request, exc.message)
        return redirect("group", group_id=group.pk)
    return _detail(request, rotated.group, rotated=rotated)


@login_required
def group_samples(request, group_id):
    """The load samples of the last 30 minutes (or those after ``?after=<ISO time>``), with
    the replicas' current states: what the page's websocket sends, for a page whose
    websocket cannot connect (it polls this instead)."""
    group = _group_or_404(request, group_id)
    after = request.GET.get("after")
    moment = None
    if after:
        moment = parse_datetime(after)
        if moment is None:
            return JsonResponse({"error": f"after: {after!r} is not an ISO 8601 time"}, status=400)
    return JsonResponse(
        group_frame(group, after=moment), json_dumps_params={"separators": (",", ":")}
    )


@login_required
@require_POST
@needs_role(roles.OPERATE)
def group_delete_view(request, group_id):
    group = _group_or_404(request, group_id)
    group = group_delete(group=group, actor=request.user)
    if group.status == Group.Status.DELETED:
        messages.success(request, _("Group %(name)s deleted.") % {"name": group.name})
    else:
        messages.success(
            request,
            _("Group %(name)s is being deleted: its replicas terminate.") % {"name": group.name},
        )
    return redirect("groups")
