"""``{% monthly_storage kind gb as cost %}``: what keeping ``gb`` GB of a stored kind
(volume, saved_image, workspace) costs a month at today's price (gpurental/storage/). The
prices are read once per request."""

from decimal import Decimal

from django import template

from gpurental.storage.selectors import monthly_cost
from gpurental.storage.services import gb_of, prices

register = template.Library()


@register.simple_tag(takes_context=True)
def monthly_storage(context, kind: str, gb=None, size_bytes=None) -> Decimal:
    request = context.get("request")
    rates = getattr(request, "storage_prices", None)
    if rates is None:
        rates = prices()
        if request is not None:
            request.storage_prices = rates
    size = gb_of(size_bytes) if size_bytes is not None else Decimal(gb or 0)
    return monthly_cost(kind, size, rates)


@register.simple_tag
def storage_price(kind: str) -> Decimal:
    """The price of one GB-month of ``kind``."""
    return prices()[kind]
