"""Automatic top-up from the SDK (``client.auto_topup``/``set_auto_topup``/``save_card``/
``remove_card``) and the CLI (``gpurental autotopup``), against the real API on
pytest-django's live server. The card is saved at a local server that answers like Stripe
and becomes known only from Stripe's signed ``setup_intent.succeeded`` event."""

from __future__ import annotations

import json

import pytest

from gpurental.accounts.services import api_key_create
from gpurental.billing.models import AutoTopUp
from gpurental.client import Client, ValidationError, cli
from tests.billing import test_autotopup
from tests.billing.test_autotopup import setup_succeeded
from tests.billing.test_payments import post_signed

stripe_api = test_autotopup.stripe_api  # the local Stripe-like server, as a fixture here too


@pytest.fixture
def sdk(live_server, alice, monkeypatch, tmp_path, stripe_api):
    monkeypatch.setenv("HOME", str(tmp_path))  # no saved login of the machine's user
    _, key = api_key_create(user=alice, name="cli")
    monkeypatch.setenv("GPURENTAL_API_KEY", key)
    monkeypatch.setenv("GPURENTAL_URL", live_server.url)
    return Client(api_key=key, base_url=live_server.url)


def test_sdk_saves_a_card_turns_it_on_and_off_and_removes_the_card(
    sdk,
    client,
    alice,
    stripe_api,
):
    assert sdk.auto_topup()["enabled"] is False and sdk.auto_topup()["card"] is None
    with pytest.raises(ValidationError) as refused:
        sdk.set_auto_topup(enabled=True, threshold="10", amount="50", monthly_cap="200")
    assert "enabled" in refused.value.fields

    url = sdk.save_card()
    assert url.startswith("https://checkout.stripe.test/c/pay/cs_test_")
    session = stripe_api.sessions[-1]["form"]
    assert session["mode"] == "setup"
    answer = post_signed(client, setup_succeeded(alice, session["customer"]))
    assert answer.json()["outcome"] == "card_saved"

    on = sdk.set_auto_topup(enabled=True, threshold="10", amount="50", monthly_cap="200")
    assert on["enabled"] is True and on["card"] and on["monthly_cap"] == "200.00"
    with pytest.raises(ValidationError) as over:
        sdk.set_auto_topup(enabled=True, threshold="10", amount="50", monthly_cap="20")
    assert "monthly_cap" in over.value.fields
    assert AutoTopUp.objects.get(user=alice).monthly_cap == 200  # the refusal changed nothing

    sdk.remove_card()
    after = sdk.auto_topup()
    assert after["enabled"] is False and after["card"] is None


def test_cli_shows_sets_turns_off_and_prints_the_card_page(
    sdk,
    client,
    alice,
    stripe_api,
    capsys,
):
    assert cli.main(["autotopup"]) == 0
    assert "automatic top-up: off" in capsys.readouterr().out
    assert cli.main(["autotopup", "set", "--threshold", "5", "--amount", "25", "--cap", "100"]) != 0
    assert "enabled" in capsys.readouterr().err  # no card yet: the refusal names the field

    assert cli.main(["autotopup", "card"]) == 0
    assert "https://checkout.stripe.test/c/pay/cs_test_" in capsys.readouterr().out
    post_signed(client, setup_succeeded(alice, stripe_api.sessions[-1]["form"]["customer"]))

    assert cli.main(["autotopup", "set", "--threshold", "5", "--amount", "25", "--cap", "100"]) == 0
    out = capsys.readouterr().out
    assert "on: below" in out and "25.00" in out and "100.00" in out
    assert cli.main(["autotopup", "set", "--amount", "30"]) == 0  # the rest stays as it was
    assert "30.00" in capsys.readouterr().out
    row = AutoTopUp.objects.get(user=alice)
    assert (row.enabled, row.threshold, row.amount, row.monthly_cap) == (True, 5, 30, 100)
    assert cli.main(["--json", "autotopup", "off"]) == 0
    assert json.loads(capsys.readouterr().out)["enabled"] is False
    assert cli.main(["autotopup", "card", "--remove"]) == 0
    assert "card removed" in capsys.readouterr().out
    assert AutoTopUp.objects.get(user=alice).payment_method_ref == ""
