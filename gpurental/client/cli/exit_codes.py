"""What the ``gpurental`` command exits with (scripts rely on it), per error."""

from __future__ import annotations

from gpurental.client import config
from gpurental.client.errors import (
    AuthenticationError,
    ConnectionError,
    GpuRentalError,
    InvalidState,
    LaunchFailed,
    NoCapacity,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    Timeout,
    ValidationError,
)

OK = 0
UNEXPECTED = 1
USAGE = 2
AUTH = 3
NOT_FOUND = 4
NO_CAPACITY = 5
INVALID_STATE = 6
LAUNCH_FAILED = 7
TIMEOUT = 8
UNREACHABLE = 9
INTERRUPTED = 130

# First match wins, so subclasses come before their bases.
EXIT_CODES: list[tuple[type[GpuRentalError] | tuple[type[GpuRentalError], ...], int]] = [
    (ConnectionError, UNREACHABLE),
    (Timeout, TIMEOUT),
    (LaunchFailed, LAUNCH_FAILED),
    (InvalidState, INVALID_STATE),
    ((NoCapacity, QuotaExceeded), NO_CAPACITY),
    (NotFound, NOT_FOUND),
    ((AuthenticationError, PermissionDenied, config.ConfigError), AUTH),
    (ValidationError, USAGE),
]


def exit_code_for(error: GpuRentalError) -> int:
    for kinds, code in EXIT_CODES:
        if isinstance(error, kinds):
            return code
    return UNEXPECTED


class UsageError(Exception):
    """Arguments argparse accepts but that do not go together (exit 2)."""
