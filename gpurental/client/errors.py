"""Typed errors of the gpurental SDK.

Every error carries the API's own message, so what a user reads is what the server
said ("no A100 free on any host; 3 free from 14:00"), not an HTTP status line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gpurental.client.models import Instance


class GpuRentalError(Exception):
    """Base of every SDK error.

    ``status`` is the HTTP status (``None`` when no response came back), ``code`` the
    API's machine-readable error code, ``message`` its human-readable message and
    ``fields`` the per-field messages of a validation error (``{"gpu_model": ["…"]}``)
    and ``headers`` the answer's headers (any case: ``headers.get("wait-outcome")``).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        fields: dict[str, list[str]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.fields = fields or {}
        self.headers = headers if headers is not None else {}

    def __str__(self) -> str:
        if not self.fields:
            return self.message
        # The API's message usually names the fields already; add only what it does not say.
        details = "; ".join(
            f"{name}: {' '.join(messages)}"
            for name, messages in self.fields.items()
            if " ".join(messages) not in self.message
        )
        return f"{self.message} ({details})" if details else self.message


class AuthenticationError(GpuRentalError):
    """401: the API key is missing, wrong or revoked."""


class PermissionDenied(GpuRentalError):
    """403: the key is valid but may not do this."""


class NotFound(GpuRentalError):
    """404: no such object, or it belongs to someone else."""


class Conflict(GpuRentalError):
    """409: the request is valid but cannot be done now."""


class NoCapacity(Conflict):
    """409 ``no_capacity``: no host has enough free GPUs of that model."""


class QuotaExceeded(Conflict):
    """409 ``quota_exceeded``: the account's GPU quota or balance does not allow it."""


class InvalidState(Conflict):
    """409 ``invalid_state``: the instance's status does not allow this action."""


class ValidationError(GpuRentalError):
    """400 / 422: bad input; ``fields`` names what is wrong."""


class RateLimited(GpuRentalError):
    """429: too many requests; ``retry_after`` is the server's advice in seconds."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ServerError(GpuRentalError):
    """5xx: the server failed; retrying later may help."""


class LaunchFailed(GpuRentalError):
    """The instance ended ``failed`` (or ``lost``) while it was awaited.

    ``status_reason`` is the server's explanation, ``instance`` the last state seen.
    """

    def __init__(self, message: str, *, instance: Instance, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.instance = instance
        self.status_reason = instance.status_reason


class Timeout(GpuRentalError):
    """Waiting ran out of time: for a status (``instance`` set) or for an HTTP answer."""

    def __init__(self, message: str, *, instance: Instance | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.instance = instance


class ConnectionError(GpuRentalError):  # shadows the builtin on purpose: the public name
    """The server could not be reached; the message names the base URL tried."""


__all__ = [
    "AuthenticationError",
    "Conflict",
    "ConnectionError",
    "GpuRentalError",
    "InvalidState",
    "LaunchFailed",
    "NoCapacity",
    "NotFound",
    "PermissionDenied",
    "QuotaExceeded",
    "RateLimited",
    "ServerError",
    "Timeout",
    "ValidationError",
]
