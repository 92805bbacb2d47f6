"""Dedicated hosts in the console: the plans and their rates, booking a whole host, one's
own leases, launching into a lease, ending or cancelling it. Thin: the rules are in
gpurental/baremetal/services.py; their errors come back onto the field they name."""

from __future__ import annotations

import datetime as dt

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from gpurental.baremetal import selectors, services
from gpurental.baremetal.models import DedicatedPlan
from gpurental.catalog.models import ImageTemplate
from gpurental.console.forms import UTCDateTimeField
from gpurental.rentals.exceptions import RentalError
from gpurental.teams import roles
from gpurental.teams.acting import account_of, needs_role, require_role


class LeaseForm(forms.Form):
    plan = forms.ModelChoiceField(
        queryset=DedicatedPlan.objects.filter(is_active=True),
        to_field_name="slug",
        empty_label=None,
        label=gettext_lazy("Host"),
    )
    start = UTCDateTimeField(
        label=gettext_lazy("Start (UTC)"),
        required=False,
        help_text=gettext_lazy(
            "Empty: now, at the on-demand rate. Later: booked ahead, at the reserved rate."
        ),
    )
    hours = forms.IntegerField(min_value=1, initial=4, label=gettext_lazy("Hours"))
    host_network = forms.BooleanField(
        required=False, label=gettext_lazy("Host networking (only hosts whose operator allows it)")
    )

    def add_service_error(self, field: str | None, message: str) -> None:
        field = {"end": "hours"}.get(field, field)
        self.add_error(field if field in self.fields else None, message)


class LeaseLaunchForm(forms.Form):
    image = forms.ModelChoiceField(
        queryset=ImageTemplate.objects.filter(is_active=True),
        to_field_name="slug",
        empty_label=None,
        label=gettext_lazy("Image"),
    )


@login_required
def leases(request):
    now = timezone.now()
    form = LeaseForm(request.POST or None)
    if request.method == "POST":
        require_role(request, roles.OPERATE)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        start = data.get("start")
        end = (start or now) + dt.timedelta(hours=data["hours"])
        try:
            lease = services.lease_book(
                user=account_of(request),
                plan=data["plan"],
                start=start,
                end=end,
                host_network=data["host_network"],
                now=now,
            )
        except RentalError as exc:
            form.add_service_error(exc.field, exc.message)
        else:
            messages.success(request, _("Leased %(host)s.") % {"host": lease.host.name})
            return redirect("lease", lease_id=lease.pk)
    plans = [(plan, selectors.hourly_rates(plan)) for plan in selectors.plans_offered()]
    return render(
        request,
        "console/baremetal/leases.html",
        {
            "form": form,
            "plans": plans,
            "leases": selectors.leases_visible_to(user=account_of(request)),
            "currency": settings.BILLING_CURRENCY,
        },
    )


def _lease_or_404(request, lease_id):
    lease = selectors.lease_visible_to(user=account_of(request), lease_id=lease_id)
    if lease is None:
        raise Http404("No such lease.")
    return lease


@login_required
def lease_detail(request, lease_id):
    lease = _lease_or_404(request, lease_id)
    return render(
        request,
        "console/baremetal/lease.html",
        {
            "lease": lease,
            "events": lease.events.select_related("actor"),
            "instances": lease.instances.order_by("-created_at"),
            "charged": selectors.lease_cost_so_far(lease),
            "launch_form": LeaseLaunchForm(),
            "currency": settings.BILLING_CURRENCY,
            "full_refund_hours": settings.RESERVATION_FULL_REFUND_HOURS,
        },
    )


@login_required
@require_POST
@needs_role(roles.OPERATE)
def lease_action(request, lease_id, action):
    lease = _lease_or_404(request, lease_id)
    try:
        if action == "launch":
            form = LeaseLaunchForm(request.POST)
            if not form.is_valid():
                raise RentalError(_("choose an image"), field="image")
            instance = services.lease_launch(
                lease=lease, image=form.cleaned_data["image"], actor=request.user
            )
            messages.success(
                request,
                _("Launching %(instance)s on %(host)s.")
                % {"instance": instance, "host": lease.host.name},
            )
            return redirect("instance", instance_id=instance.pk)
        if action == "end":
            services.lease_end(lease=lease, actor=request.user)
            messages.success(request, _("The lease ended; billing stopped."))
        elif action == "cancel":
            services.lease_cancel(lease=lease, actor=request.user)
            messages.success(request, _("The lease was cancelled; nothing was billed."))
        else:
            raise Http404("No such action.")
    except RentalError as exc:
        messages.error(request, exc.message)
    return redirect("lease", lease_id=lease.pk)
