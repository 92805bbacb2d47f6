"""Money on pages: one filter, the currency's symbol (¥ for CNY) and the locale's number
format, rounded half up once."""

from decimal import Decimal

import pytest
from django.utils import translation

from gpurental.billing.services.credits import credit_add
from gpurental.console.templatetags.money import money_format


@pytest.mark.parametrize(
    ("amount", "currency", "language", "shown"),
    [
        (Decimal("1234.5"), "CNY", "en", "¥1,234.50"),
        (Decimal("1234.5"), "CNY", "zh-hans", "¥1,234.50"),  # grouped by three (formats/zh_Hans)
        (Decimal("0.005"), "USD", "en", "$0.01"),  # half up, once
        (Decimal("-3"), "EUR", "zh-hans", "-€3.00"),
        ("12.3", "CHF", "en", "12.30 CHF"),  # no symbol known: the code
    ],
)
def test_money_format(amount, currency, language, shown):
    with translation.override(language):
        assert money_format(amount, currency) == shown


def test_the_operators_currency_is_the_default(settings):
    settings.BILLING_CURRENCY = "CNY"
    assert money_format(Decimal("5")) == "¥5.00"


def test_a_zh_hans_dashboard_shows_the_balance_in_yuan(client, alice, settings):
    settings.BILLING_CURRENCY = "CNY"
    credit_add(user=alice, amount=Decimal("1500.00"))
    client.force_login(alice)
    page = client.get("/dashboard/", headers={"accept_language": "zh-Hans"}).text
    assert 'id="balance">¥1,500.00<' in page
    assert "余额" in page and "本月消费" in page
    english = client.get("/dashboard/").text
    assert 'id="balance">¥1,500.00<' in english and "Balance" in english
