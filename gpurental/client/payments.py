"""Paying in from the SDK: ``client.redeem_voucher(code)``, ``client.top_up(amount)``
(answers the checkout URL to pay at), ``client.payments()``, ``client.get_payment(id)``,
and automatic top-up: ``client.auto_topup()``, ``client.set_auto_topup(...)``,
``client.save_card()`` (answers the provider's page to save a card at), ``client.remove_card()``."""

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

    def auto_topup(self: Client) -> dict[str, Any]:
        """The automatic top-up settings: ``enabled``, ``threshold``, ``amount``,
        ``monthly_cap``, ``currency``, ``card`` (the saved card's label or None) and
        ``month_charged`` (taken this calendar month, pending charges included)."""
        return self._get_json("auto-topup/")

    def set_auto_topup(
        self: Client,
        *,
        enabled: bool,
        threshold: Decimal | str | int,
        amount: Decimal | str | int,
        monthly_cap: Decimal | str | int,
    ) -> dict[str, Any]:
        """Below ``threshold``, ``amount`` is charged to the saved card, at most
        ``monthly_cap`` in a calendar month. Turning it on without a saved card raises
        ``ValidationError`` naming ``enabled``; save one with ``save_card()`` first."""
        body = {
            "enabled": enabled,
            "threshold": str(threshold),
            "amount": str(amount),
            "monthly_cap": str(monthly_cap),
        }
        return self._request("PUT", "auto-topup/", json_body=body)

    def save_card(self: Client) -> str:
        """Start saving a card for automatic top-ups; returns the provider's page to save it
        at. The card is known once the provider confirms it (``auto_topup()["card"]``)."""
        return self._request("POST", "auto-topup/card/")["setup_url"]

    def remove_card(self: Client) -> None:
        """Forget the saved card; automatic top-up turns off."""
        self._request("DELETE", "auto-topup/card/")
