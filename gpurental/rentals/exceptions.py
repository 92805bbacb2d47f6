"""Errors a customer can act on. ``field`` names the input at fault, when there is one."""


class RentalError(Exception):
    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


class NoCapacity(RentalError):
    code = "no_capacity"


class QuotaExceeded(RentalError):
    code = "quota_exceeded"


class InvalidTransition(RentalError):
    code = "invalid_state"
