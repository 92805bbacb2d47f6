"""The console's notification pages: preferences and recent notifications, webhook
endpoints (the secret shown once, on the page that created it; an open circuit and its
re-enable button), an endpoint's delivery log with re-send."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from gpurental.notifications import services
from gpurental.notifications.events import EVENTS
from gpurental.notifications.models import Notification, WebhookDelivery, WebhookEndpoint
from gpurental.notifications.webhooks import WebhookRefused
from gpurental.teams import roles
from gpurental.teams.acting import account_of, needs_role, require_role

EVENT_CHOICES = [(name, event.label) for name, event in EVENTS.items()]


class WebhookEndpointForm(forms.Form):
    url = forms.CharField(
        max_length=2000,
        label=gettext_lazy("URL"),
        widget=forms.URLInput(attrs={"placeholder": "https://example.com/hooks/gpurental"}),
        help_text=gettext_lazy(
            "A public https:// address; private and loopback addresses are refused"
        ),
    )
    description = forms.CharField(max_length=200, required=False, label=gettext_lazy("Description"))
    events = forms.MultipleChoiceField(
        choices=EVENT_CHOICES,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label=gettext_lazy("Events"),
        help_text=gettext_lazy("None ticked: every event"),
    )


@login_required
def notification_preferences(request):
    if request.method == "POST":
        for name in EVENTS:
            services.preference_set(
                user=request.user,
                event=name,
                email=f"{name}:email" in request.POST,
                webhook=f"{name}:webhook" in request.POST,
            )
        messages.success(request, _("Notification preferences saved."))
        return redirect("notification_preferences")
    prefs = services.preferences_of(user=request.user)
    rows = [{"event": name, "label": event.label, **prefs[name]} for name, event in EVENTS.items()]
    recent = Notification.objects.filter(user=request.user)[:50]
    return render(request, "console/notifications.html", {"rows": rows, "recent": recent})


@login_required
def webhooks(request):
    form = WebhookEndpointForm(request.POST or None)
    created = None
    if request.method == "POST":
        require_role(request, roles.BILLING)
    if request.method == "POST" and form.is_valid():
        try:
            created = services.endpoint_create(
                user=account_of(request),
                url=form.cleaned_data["url"],
                description=form.cleaned_data["description"],
                events=form.cleaned_data["events"],
            )
        except WebhookRefused as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            form = WebhookEndpointForm()
    return render(
        request,
        "console/notifications_webhooks.html",
        {
            "form": form,
            "created": created,
            "endpoints": WebhookEndpoint.objects.filter(user=account_of(request)),
        },
    )


@login_required
def webhook_detail(request, endpoint_id):
    endpoint = get_object_or_404(WebhookEndpoint, pk=endpoint_id, user=account_of(request))
    deliveries = endpoint.deliveries.prefetch_related("attempt_log")[:50]
    return render(
        request,
        "console/notifications_webhook.html",
        {"endpoint": endpoint, "deliveries": deliveries},
    )


@login_required
@require_POST
@needs_role(roles.BILLING)
def webhook_delete_view(request, endpoint_id):
    endpoint = get_object_or_404(WebhookEndpoint, pk=endpoint_id, user=account_of(request))
    services.endpoint_delete(endpoint=endpoint)
    messages.success(request, _("Webhook endpoint %(url)s deleted.") % {"url": endpoint.url})
    return redirect("webhooks")


@login_required
@require_POST
@needs_role(roles.BILLING)
def webhook_reenable_view(request, endpoint_id):
    endpoint = get_object_or_404(WebhookEndpoint, pk=endpoint_id, user=account_of(request))
    services.endpoint_reenable(endpoint=endpoint, by=request.user)
    messages.success(
        request,
        _("Webhook endpoint %(url)s re-enabled: new events are sent to it again.")
        % {"url": endpoint.url},
    )
    return redirect("webhook", endpoint_id=endpoint.pk)


@login_required
@require_POST
@needs_role(roles.BILLING)
def webhook_resend_view(request, delivery_id):
    delivery = get_object_or_404(
        WebhookDelivery, pk=delivery_id, endpoint__user=account_of(request)
    )
    try:
        delivery = services.delivery_resend(delivery=delivery)
    except WebhookRefused as exc:
        messages.error(request, exc.message)
        return redirect("webhook", endpoint_id=delivery.endpoint_id)
    delivery.refresh_from_db()
    messages.success(
        request,
        _("Sent again: %(event)s is %(status)s.")
        % {"event": delivery.event, "status": delivery.status},
    )
    return redirect("webhook", endpoint_id=delivery.endpoint_id)
