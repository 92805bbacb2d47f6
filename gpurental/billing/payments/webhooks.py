"""The providers' webhook endpoints. The only way credit comes from a payment: the body
is verified by the provider's own library before anything in it is believed."""

from __future__ import annotations

import logging

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from gpurental.addresses import client_ip
from gpurental.billing.payments import (
    PaymentUnavailable,
    WebhookRefused,
    provider_named,
    unavailable_reason,
)
from gpurental.billing.services.payments import payment_event_apply, webhook_refuse

log = logging.getLogger(__name__)


@csrf_exempt  # signed by the provider instead: no browser session posts here
@require_POST
def stripe_webhook(request):
    return _webhook(request, "stripe")


def _webhook(request, name: str):
    if unavailable_reason():
        return JsonResponse({"error": "payments are not configured"}, status=503)
    try:
        gateway = provider_named(name)
    except PaymentUnavailable:
        return JsonResponse({"error": "payments are not configured"}, status=503)
    ip = client_ip(request)
    try:
        event = gateway.parse_webhook(request.body, dict(request.headers))
    except WebhookRefused as refused:
        log.warning("%s webhook refused from %s: %s", name, ip, refused.reason)
        webhook_refuse(provider_name=name, refused=refused, ip_address=ip)
        return JsonResponse({"error": refused.reason}, status=400)
    try:
        outcome, detail = payment_event_apply(event=event, ip_address=ip)
    except WebhookRefused as refused:
        log.warning("%s event %s refused: %s", name, event.id, refused.reason)
        return JsonResponse({"error": refused.reason, "event": event.id}, status=400)
    return JsonResponse({"outcome": outcome, "detail": detail, "event": event.id})
