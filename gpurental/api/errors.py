"""One error shape for every API error.

    {"error": {"code": "<machine code>", "message": "<sentence>", "fields": {"<field>": ["…"]}}}

DRF's exceptions (validation, authentication, permission, 404, 405, 415, 429, parse
errors), the rentals services' ``RentalError`` family and anything unexpected all
leave through ``exception_handler``; URLs under ``/api/`` that match no endpoint get
the same shape from ``not_found``.
"""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, JsonResponse
from django.urls import Resolver404, resolve
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from gpurental.rentals.exceptions import (
    InvalidTransition,
    NoCapacity,
    QuotaExceeded,
    RentalError,
)

log = logging.getLogger(__name__)

NON_FIELD = "non_field_errors"

# Refusals because of the state of the world (capacity, quota, the instance's status),
# not because of the request itself.
CONFLICTS = (NoCapacity, QuotaExceeded, InvalidTransition)


def error_body(code: str, message: str, fields: dict[str, list[str]] | None = None) -> dict:
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def _flatten(detail, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested validation detail → {"field" | "parent.child" | "items[0].x": [messages]}."""
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = str(key) if not prefix else f"{prefix}.{key}"
            if key == NON_FIELD and prefix:
                name = prefix
            out.update(_flatten(value, name))
        return out
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return {prefix or NON_FIELD: [str(item) for item in detail]}
        out = {}
        for index, item in enumerate(detail):
            out.update(_flatten(item, f"{prefix}[{index}]"))
        return out
    return {prefix or NON_FIELD: [str(detail)]}


def _validation_message(fields: dict[str, list[str]]) -> str:
    parts = []
    for field, messages in fields.items():
        text = " ".join(messages)
        parts.append(text if field == NON_FIELD else f"{field}: {text}")
    return "; ".join(parts) or _("the request is not valid")


def _message(exc: exceptions.APIException, request, view) -> str:
    if isinstance(exc, exceptions.NotAuthenticated):
        return _(
            "authentication required: send 'Authorization: Bearer <API key>' "
            "(create a key in the console or with POST /api/v1/api-keys/) or log in"
        )
    if isinstance(exc, exceptions.MethodNotAllowed):
        allowed = ", ".join(m for m in getattr(view, "allowed_methods", []) if m != "OPTIONS")
        return _("method %(method)s is not allowed on %(path)s; allowed: %(allowed)s") % {
            "method": request.method,
            "path": request.path,
            "allowed": allowed,
        }
    if isinstance(exc, exceptions.Throttled):
        wait = int(exc.wait) if exc.wait is not None else None
        reason = getattr(exc, "reason", None) or _("the API rate limit was reached")
        if wait is None:
            return _("too many requests: %(reason)s; retry later") % {"reason": reason}
        return _("too many requests: %(reason)s; retry in %(wait)s seconds") % {
            "reason": reason,
            "wait": wait,
        }
    return str(exc.detail)


class TooMany(exceptions.Throttled):
    """A 429 for a limit other than the request rate, with its own sentence."""

    def __init__(self, reason: str, wait: float | None = None):
        super().__init__(wait=wait)
        self.reason = reason


def exception_handler(exc, context):
    request = context.get("request")
    if isinstance(exc, RentalError):
        set_rollback()  # as DRF does for its own errors (matters with ATOMIC_REQUESTS)
        fields = {exc.field: [exc.message]} if exc.field else {}
        if isinstance(exc, CONFLICTS):
            # About the state of things, not the input: the message stands as written.
            return Response(error_body(exc.code, exc.message, fields), status=409)
        message = f"{exc.field}: {exc.message}" if exc.field else exc.message
        return Response(error_body(exc.code, message, fields), status=400)

    if isinstance(exc, Http404):
        exc = exceptions.NotFound(*exc.args)
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    view = context.get("view")
    response = drf_exception_handler(exc, context)
    if response is None:
        # A bug. The client still gets the one shape; the traceback goes to the log.
        set_rollback()
        log.error(
            "unhandled error in %s %s (%s)",
            getattr(request, "method", "?"),
            getattr(request, "path", "?"),
            type(view).__name__,
            exc_info=exc,
        )
        return Response(
            error_body(
                "server_error",
                _(
                    "the server failed to handle this request; the error was logged, "
                    "please retry later"
                ),
            ),
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )

    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten(exc.detail)
        response.data = error_body("invalid", _validation_message(fields), fields)
    else:
        code = exc.get_codes()
        code = code if isinstance(code, str) else exc.default_code
        response.data = error_body(code, _message(exc, request, view), getattr(exc, "fields", None))
    return response


@csrf_exempt
def not_found(request, *args, **kwargs):
    """Any URL under /api/ that matches no endpoint: JSON 404, not Django's HTML page."""
    message = _("there is no API endpoint at %(path)s") % {"path": request.path}
    if not request.path.endswith("/"):
        try:
            match = resolve(request.path + "/")
        except (Resolver404, Http404):
            match = None
        if match is not None and match.func is not not_found:
            message += _("; did you mean %(path)s/ (with the trailing slash)?") % {
                "path": request.path
            }
    else:
        message += _("; the API lives under /api/v1/ and is described at /api/docs/")
    return JsonResponse(error_body("not_found", message), status=status.HTTP_404_NOT_FOUND)
