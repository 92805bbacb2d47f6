"""HTTP endpoints of telemetry: Prometheus ``/metrics``, the charts' history JSON, and the
agents' live-sample ingest (so that agents never hold the channel layer's Redis)."""

from __future__ import annotations

import hmac
import json
import time

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from gpurental.observability.collector import render as metrics_render
from gpurental.teams.selectors import instance_watchable_by
from gpurental.telemetry import ingest
from gpurental.telemetry.selectors import WINDOWS, instance_history

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _bearer_ok(request) -> bool:
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if not token or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), token.encode())


@require_GET
def metrics(request):
    """Staff session, or ``Authorization: Bearer $METRICS_TOKEN`` (for Prometheus)."""
    if not (_bearer_ok(request) or (request.user.is_authenticated and request.user.is_staff)):
        status = 403 if request.user.is_authenticated else 401
        response = HttpResponse(
            "metrics need a staff session or Authorization: Bearer <METRICS_TOKEN>\n",
            status=status,
            content_type="text/plain; charset=utf-8",
        )
        if status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(metrics_render(), content_type=PROMETHEUS_CONTENT_TYPE)


@require_GET
def instance_history_view(request, instance_id):
    """Per-GPU utilisation and memory for the last hour or day; owner and staff only."""
    if not request.user.is_authenticated:
        return JsonResponse({"error": "log in first"}, status=401)
    instance = instance_watchable_by(user=request.user, instance_id=instance_id)
    if instance is None:
        return JsonResponse({"error": "no such instance"}, status=404)
    window = request.GET.get("window", "1h")
    if window not in WINDOWS:
        allowed = ", ".join(WINDOWS)
        return JsonResponse({"error": f"window must be one of {allowed}"}, status=400)
    return JsonResponse(instance_history(instance=instance, window=window, now=timezone.now()))


@csrf_exempt
@require_POST
async def telemetry_ingest(request):
    """One live sample from a host's agent, signed with that host's key (protocol.sign),
    passed on to its viewers. Answers 204, or 400/403 with the reason."""
    try:
        message = json.loads(request.body)
        if not isinstance(message, dict):
            raise ValueError("not an object")
    except ValueError:
        return JsonResponse({"detail": "the body must be a signed JSON message"}, status=400)
    try:
        await ingest.sample_ingest(message=message, now=time.time())
    except ingest.SampleRefused as exc:
        return JsonResponse({"detail": str(exc)}, status=403)
    return HttpResponse(status=204)
