"""E-mails are written in the recipient's saved language (no browser to ask), English
otherwise, with money in the locale's format and the currency's symbol."""

from decimal import Decimal

from gpurental.notifications.models import Notification
from gpurental.notifications.services import notify


def _email(user, event, **context):
    notify(user, event, **context)
    return Notification.objects.get(user=user, event=event, channel="email")


def test_a_zh_hans_user_gets_the_low_balance_email_in_chinese(alice, settings):
    settings.BILLING_CURRENCY = "CNY"
    alice.language = "zh-hans"
    alice.save(update_fields=["language"])

    email = _email(alice, "low_balance", balance=Decimal("1234.5"), hourly_burn=Decimal("2"))

    assert "您的余额为 ¥1,234.50" in email.text_body
    assert "请充值以保持实例运行" in email.text_body
    assert "Your balance" not in email.text_body
    assert '<html lang="zh-hans">' in email.html_body
    assert "Alice Owner，您好" in email.html_body and "充值" in email.html_body


def test_without_a_choice_the_email_is_english_with_the_symbol(alice, settings):
    settings.BILLING_CURRENCY = "CNY"
    email = _email(alice, "payment_received", amount=Decimal("1500"), balance=Decimal("80"))
    assert "We received your payment of ¥1,500.00" in email.text_body
    assert "Your balance is now ¥80.00." in email.text_body
    assert '<html lang="en">' in email.html_body
