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
from django.views.decorators.http import require_POST

from gpurental.baremetal import selectors, services
from gpurental.baremetal.models import DedicatedPlan
from gpurental.catalog.models import ImageTemplate
from gpurental.console.forms import UTCDateTimeField
from gpurental.rentals.exceptions import RentalError


class LeaseForm(forms.Form):
    plan = forms.ModelChoiceField(
        queryset=DedicatedPlan.objects.filter(is_active=True),
        to_field_name="slug",
        empty_label=None,
        label="Host",
    )
    start = UTCDateTimeField(
        label="Start (UTC)",
        required=False,
        help_text="Empty: now, at the on-demand rate. Later: booked ahead, at the reserved rate.",
    )
    hours = forms.IntegerField(min_value=1, initial=4, label="Hours")
    host_network = forms.BooleanField(
        required=False, label="Host networking (only hosts whose operator allows it)"
    )

    def add_service_error(self, field: str | None, message: str) -> None:
        field = {"end": "hours"}.get(field, field)
        self.add_error(field if field in self.fields else None, message)


class LeaseLaunchForm(forms.Form):
    image = forms.ModelChoiceField(
        queryset=ImageTemplate.objects.filter(is_active=True),
        to_field_name="slug",
        empty_label=None,
    )


@login_required
def leases(request):
    now = timezone.now()
    form = LeaseForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        start = data.get("start")
        end = (start or now) + dt.timedelta(hours=data["hours"])
        try:
            lease = services.lease_book(
                user=request.user,
                plan=data["plan"],
                start=start,
                end=end,
                host_network=data["host_network"],
                now=now,
            )
        except RentalError as exc:
            form.add_service_error(exc.field, exc.message)
        else:
            messages.success(request, f"Leased {lease.host.name}.")
            return redirect("lease", lease_id=lease.pk)
    plans = [(plan, selectors.hourly_rates(plan)) for plan in selectors.plans_offered()]
    return render(
        request,
        "console/baremetal/leases.html",
        {
            "form": form,
            "plans": plans,
            "leases": selectors.leases_visible_to(user=request.user),
            "currency": settings.BILLING_CURRENCY,
        },
    )


def _lease_or_404(request, lease_id):
    lease = selectors.lease_visible_to(user=request.user, lease_id=lease_id)
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
def lease_action(request, lease_id, action):
    lease = _lease_or_404(request, lease_id)
    try:
        if action == "launch":
            form = LeaseLaunchForm(request.POST)
            if not form.is_valid():
                raise RentalError("choose an image", field="image")
            instance = services.lease_launch(
                lease=lease, image=form.cleaned_data["image"], actor=request.user
            )
            messages.success(request, f"Launching {instance} on {lease.host.name}.")
            return redirect("instance", instance_id=instance.pk)
        if action == "end":
            services.lease_end(lease=lease, actor=request.user)
            messages.success(request, "The lease ended; billing stopped.")
        elif action == "cancel":
            services.lease_cancel(lease=lease, actor=request.user)
            messages.success(request, "The lease was cancelled; nothing was billed.")
        else:
            raise Http404("No such action.")
    except RentalError as exc:
        messages.error(request, exc.message)
    return redirect("lease", lease_id=lease.pk)
