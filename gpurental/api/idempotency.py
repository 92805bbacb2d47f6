"""``Idempotency-Key`` on POSTs: a retried request runs once, and gets the first answer.

Same user + same key + same method, path and body → the first successful response is
replayed (status and body, with ``Idempotent-Replayed: true``). The same key with a
different request → 422 ``idempotency_key_reused``. Keys are per user.

Concurrency: the unique constraint on (user, key) is the lock. Before the action runs,
a *pending* row is inserted and committed in its own short transaction. A duplicate
that arrives while the first request is still running fails that insert at once (the
row is committed, so it does not even wait), finds the pending row and gets 409
``idempotency_key_in_progress`` with ``Retry-After``; it never runs the action. We do
not make duplicates queue on a row lock (``select_for_update``) instead: that would
hold a web worker per duplicate for the length of a launch.

The action then runs in one transaction with the update that stores its answer, so
the two commit together (the agent commands the services queue on commit go out only
then). Only successes (2xx) are remembered: a refusal (4xx) or an exception rolls
back and releases the key; the services change nothing when they refuse, so running
a retry again is safe and lets it succeed once capacity or state allow. A pending
row whose request died with its process (and so had no effect) is taken over after
``PENDING_TIMEOUT``; rows older than ``KEY_TTL`` are forgotten, and
``idempotency_keys_purge`` deletes them (run it daily from a periodic job).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from gpurental.api.models import IdempotencyKey
from gpurental.teams.acting import account_of, acting_for_team

HEADER = "Idempotency-Key"
KEY_TTL = timedelta(hours=24)
PENDING_TIMEOUT = timedelta(minutes=5)  # far longer than any request may take
KEY_PATTERN = re.compile(r"^[!-~]{1,255}$")  # visible ASCII, no spaces

IDEMPOTENCY_KEY = OpenApiParameter(
    HEADER,
    type={"type": "string", "minLength": 1, "maxLength": 255, "pattern": KEY_PATTERN.pattern},
    location=OpenApiParameter.HEADER,
    required=False,
    description=(
        "A unique string per request, e.g. a UUID (1 to 255 visible ASCII characters): a "
        "retry with the same key and body gets the first answer instead of running again. "
        "The same key with another body is refused (422)."
    ),
)


class IdempotencyKeyInvalid(exceptions.APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "invalid"

    def __init__(self, message: str):
        super().__init__(
            _("%(header)s header: %(message)s") % {"header": HEADER, "message": message}
        )
        self.fields = {HEADER: [message]}


class IdempotencyKeyReused(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_key_reused"


class IdempotencyKeyInProgress(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "idempotency_key_in_progress"
    wait = 1  # → Retry-After: 1


def _request_hash(data) -> str:
    if hasattr(data, "lists"):  # a form's QueryDict
        data = dict(sorted(data.lists()))
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), cls=JSONEncoder)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _jsonable(data):
    return json.loads(json.dumps(data, cls=JSONEncoder))


def _claim(*, user, key: str, method: str, path: str, request_hash: str, now: datetime):
    """The pending row this request now owns, or the stored Response to replay."""
    for _attempt in range(3):
        try:
            # Its own transaction, committed at once: concurrent duplicates must see it.
            with transaction.atomic():
                return IdempotencyKey.objects.create(
                    user=user,
                    key=key,
                    method=method,
                    path=path,
                    request_hash=request_hash,
                    created_at=now,
                )
        except IntegrityError:
            pass
        existing = IdempotencyKey.objects.filter(user=user, key=key).first()
        if existing is None:
            continue  # released meanwhile: try again
        if existing.created_at < now - KEY_TTL:
            IdempotencyKey.objects.filter(pk=existing.pk, created_at=existing.created_at).delete()
            continue
        if (existing.method, existing.path) != (method, path):
            raise IdempotencyKeyReused(
                _(
                    "%(header)s %(key)r was already used for %(method)s %(path)s; "
                    "send a new key with each new request"
                )
                % {"header": HEADER, "key": key, "method": existing.method, "path": existing.path}
            )
        if existing.request_hash != request_hash:
            raise IdempotencyKeyReused(
                _(
                    "%(header)s %(key)r was already used for %(method)s %(path)s with a "
                    "different body; send a new key with each new request"
                )
                % {"header": HEADER, "key": key, "method": method, "path": path}
            )
        if existing.is_pending:
            taken_over = IdempotencyKey.objects.filter(
                pk=existing.pk,
                response_status__isnull=True,
                created_at__lt=now - PENDING_TIMEOUT,
            ).update(created_at=now)
            if taken_over:
                existing.created_at = now
                return existing
            raise IdempotencyKeyInProgress(
                _(
                    "a request with %(header)s %(key)r is still being processed; "
                    "retry in a moment to get its answer"
                )
                % {"header": HEADER, "key": key}
            )
        return Response(
            existing.response_body,
            status=existing.response_status,
            headers={"Idempotent-Replayed": "true"},
        )
    raise IdempotencyKeyInProgress(
        _("a request with %(header)s %(key)r is changing right now; retry in a moment")
        % {"header": HEADER, "key": key}
    )


def _as_acted(request):
    """The body, bound to the team account the request acts for: the same key sent once
    for oneself and once for a team is two requests, and must not replay across them."""
    if not acting_for_team(request):
        return request.data  # as before teams: stored hashes stay valid
    return {"acting_for": account_of(request).pk, "body": request.data}


def run(request, handler: Callable[[], Response], *, redact=None) -> Response:
    """Run ``handler`` once per (user, Idempotency-Key); without the header, just run it."""
    key = request.headers.get(HEADER)
    if key is None:
        return handler()
    if not KEY_PATTERN.fullmatch(key):
        raise IdempotencyKeyInvalid(_("must be 1 to 255 visible ASCII characters, e.g. a UUID"))
    claimed = _claim(
        user=request.user,
        key=key,
        method=request.method,
        path=request.path[:500],
        request_hash=_request_hash(_as_acted(request)),
        now=timezone.now(),
    )
    if isinstance(claimed, Response):
        return claimed
    try:
        # The action and the record of its answer commit together: a crash in between
        # leaves a pending row and no effect, never an effect without its answer.
        with transaction.atomic():
            response = handler()
            if status.is_success(response.status_code):
                body = _jsonable(response.data)
                IdempotencyKey.objects.filter(pk=claimed.pk).update(
                    response_status=response.status_code,
                    response_body=redact(body) if redact else body,
                )
    except BaseException:
        IdempotencyKey.objects.filter(pk=claimed.pk).delete()
        raise
    if not status.is_success(response.status_code):
        IdempotencyKey.objects.filter(pk=claimed.pk).delete()
    return response


def idempotent(view_method=None, *, redact: Callable[[dict], dict] | None = None):
    """Decorate a DRF view method (``create``, an ``@action``) to honour ``Idempotency-Key``.

    ``redact`` edits the body before it is stored (and so what a replay returns): a
    secret shown once, like a new API key, must never be written to the database.
    """

    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, request, *args, **kwargs):
            return run(request, lambda: method(self, request, *args, **kwargs), redact=redact)

        return wrapper

    return decorate(view_method) if view_method is not None else decorate


def idempotency_keys_purge(*, now: datetime | None = None) -> int:
    """Delete keys older than ``KEY_TTL``; meant for a periodic job."""
    now = now or timezone.now()
    deleted, _kinds = IdempotencyKey.objects.filter(created_at__lt=now - KEY_TTL).delete()
    return deleted
