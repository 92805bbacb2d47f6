"""Vouchers and top-ups from the SDK (``client.redeem_voucher``, ``client.top_up``) and the
CLI (``gpurental redeem CODE``), against the real API on pytest-django's live server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from gpurental.accounts.services import api_key_create
from gpurental.billing.models import Voucher
from gpurental.billing.selectors import balance_of
from gpurental.client import Client, ValidationError, cli
from tests.billing.stripe_server import StripeLikeServer


@pytest.fixture
def server(live_server, alice, settings, monkeypatch, tmp_path):
    settings.BILLING_CURRENCY = "USD"
    monkeypatch.setenv("HOME", str(tmp_path))  # no saved login of the machine's user
    _, key = api_key_create(user=alice, name="cli")
    monkeypatch.setenv("GPURENTAL_API_KEY", key)
    monkeypatch.setenv("GPURENTAL_URL", live_server.url)
    Voucher.objects.create(
        code="POC-WEEK", amount=Decimal("12.50"), expires_at=datetime.now(UTC) + timedelta(days=2)
    )
    return live_server.url, key


def test_sdk_redeems_a_voucher_once_and_names_the_field_of_a_wrong_code(server, alice):
    url, key = server
    client = Client(api_key=key, base_url=url)
    first = client.redeem_voucher("poc-week")
    assert first["created"] is True and first["amount"] == "12.50"
    assert client.redeem_voucher("POC-WEEK")["created"] is False
    assert balance_of(user=alice) == Decimal("12.50")
    with pytest.raises(ValidationError) as refused:
        client.redeem_voucher("NOPE")
    assert "code: no voucher has the code NOPE" in str(refused.value)


def test_cli_redeem_prints_the_credit(server, capsys):
    assert cli.main(["redeem", "poc-week"]) == 0
    out = capsys.readouterr().out
    assert "voucher POC-WEEK redeemed" in out and "12.50" in out
    assert cli.main(["--json", "redeem", "POC-WEEK"]) == 0
    assert json.loads(capsys.readouterr().out)["created"] is False
    assert cli.main(["redeem", "NOPE"]) != 0
    assert "no voucher has the code NOPE" in capsys.readouterr().err


def test_sdk_and_cli_top_up_answer_the_checkout_url(server, settings, capsys):
    url, key = server
    with StripeLikeServer() as stripe_api:
        settings.STRIPE_SECRET_KEY, settings.STRIPE_WEBHOOK_SECRET = "sk_test_x", "whsec_x"
        settings.STRIPE_API_BASE = stripe_api.url
        started = Client(api_key=key, base_url=url).top_up("20")
        assert started["checkout_url"].startswith("https://checkout.stripe.test/")
        assert cli.main(["topup", "15.00"]) == 0
        assert "https://checkout.stripe.test/c/pay/cs_test_" in capsys.readouterr().out
    assert cli.main(["--json", "payments"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted(p["amount"] for p in listed) == ["15.00", "20.00"]
