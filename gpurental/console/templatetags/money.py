"""``{{ amount|money:currency }}``: an amount as the reader's locale writes it, with the
currency's symbol (¥1,234.50 for CNY, $ for USD, € for EUR; other codes stay codes).

The one way templates (pages and e-mails) show money. It rounds once, half up, through
billing.pricing.quantize_money; the grouping and the decimal mark come from the active
language's formats (django.utils.formats).
"""

from decimal import Decimal, InvalidOperation

from django import template
from django.conf import settings
from django.utils.formats import number_format

from gpurental.billing.pricing import quantize_money

register = template.Library()

SYMBOLS = {"CNY": "¥", "USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}


def money_format(amount, currency: str = "", places: int = 2) -> str:
    """``amount`` (a Decimal, or its text) with the symbol of ``currency`` (default: the
    operator's BILLING_CURRENCY)."""
    if amount is None or amount == "":
        return ""
    try:
        value = quantize_money(Decimal(str(amount)), places)
    except InvalidOperation:
        return str(amount)
    code = (currency or settings.BILLING_CURRENCY).upper()
    number = number_format(abs(value), decimal_pos=places, use_l10n=True, force_grouping=True)
    sign = "-" if value < 0 else ""
    symbol = SYMBOLS.get(code)
    return f"{sign}{symbol}{number}" if symbol else f"{sign}{number} {code}"


@register.filter
def money(amount, currency: str = "") -> str:
    return money_format(amount, currency)


@register.filter
def money4(amount, currency: str = "") -> str:
    """Rates and metered amounts, shown to four places."""
    return money_format(amount, currency, places=4)
