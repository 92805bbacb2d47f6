"""Paying in from the SDK: ``client.redeem_voucher(code)``, ``client.top_up(amount)``
(answers the checkout URL to pay at), ``client.payments()``, ``client.get_payment(id)``."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from gpurental.client.client import Client


class PaymentsMixin:
    """The Client's paying-in methods (``gpurental.client.client.Client`` mixes this in)."""

    def redeem_voucher(self: Client, code: str) -> dict[str, Any]:
        """Redeem a voucher code. The answer's ``created`` is False when this account had
        redeemed it before (nothing added); ``credit_expires_at`` says when its credit lapses.
        A wrong, expired or used-up code raises ``ValidationError`` naming ``code``."""
        return self._request("POST", "vouchers/redeem/", json_body={"code": code})

    def top_up(self: Client, amount: Decimal | str | int) -> dict[str, Any]:
        """Start a top-up of ``amount`` (the server's currency); pay at ``checkout_url``.
        The credit is added when the payment provider confirms the payment."""
        return self._request("POST", "payments/", json_body={"amount": str(amount)})

    def payments(self: Client) -> list[dict[str, Any]]:
        return self._list("payments/")

    def get_payment(self: Client, payment_id: Any) -> dict[str, Any]:
        return self._get_json(f"payments/{quote(str(payment_id), safe='')}/")
