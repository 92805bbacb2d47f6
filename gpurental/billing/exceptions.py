"""Errors of billing services. ``field`` names the input at fault, when there is one."""

from gpurental.rentals.exceptions import RentalError


class BillingError(Exception):
    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


class InsufficientBalance(RentalError):
    """A launch or start the balance cannot pay for (a RentalError: the API and the
    console already answer those with the message and the field)."""

    code = "insufficient_balance"
