"""A newcomer pays for a first launch with a trial voucher, in a real Chromium against the
real web process, control worker, host agent and Docker Engine:
sign up → redeem a voucher on the Credit page → launch → the instance runs.
Screenshots go to artifacts/screenshots/.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from tests.browser.test_console_flow import browser, confirmation_link, shot  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.docker, pytest.mark.django_db(transaction=True)]


def test_sign_up_redeem_a_voucher_then_launch(browser, web_server, catalog, tmp_path):  # noqa: F811
    from gpurental.billing.models import Voucher
    from gpurental.rentals.models import Instance

    Voucher.objects.create(
        code="POC-WEEK",
        amount=Decimal("25.00"),
        expires_at=timezone.now() + timedelta(days=3),
        first_topup_only=True,
        max_uses=10,
    )
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)

    page.goto(f"{web_server}/signup/")
    page.fill("input[name=email]", "trial@example.com")
    page.fill("input[name=password1]", "a-long-pass-phrase-7")
    page.fill("input[name=password2]", "a-long-pass-phrase-7")
    page.click("button:has-text('Sign up')")
    page.wait_for_selector("text=Check your inbox")
    page.goto(f"{web_server}{confirmation_link(tmp_path / 'mail')}")
    page.click("button:has-text('Create my account')")
    page.wait_for_url("**/dashboard/")

    page.click("nav a:has-text('Credit')")
    page.wait_for_url("**/credit/")
    # No payment provider is configured for this stack: the page says so, and still works.
    assert "Top-up is not available" in page.inner_text("#topup-unavailable")
    page.fill("#redeem-form input[name=code]", "NOPE")
    page.click("#redeem-form button")
    assert "code: no voucher has the code NOPE" in page.inner_text("#redeem-form")
    page.fill("#redeem-form input[name=code]", "poc-week")
    page.click("#redeem-form button")
    page.wait_for_selector("text=Voucher POC-WEEK redeemed")
    assert "25.00" in page.inner_text("#balance")
    assert "of which voucher credit $25.00" in page.inner_text("#voucher-left")
    shot(page, "10-credit-voucher-redeemed")

    page.click("a.button:has-text('Launch')")
    page.wait_for_url("**/launch/")
    page.click("button:has-text('Launch')")
    page.wait_for_url("**/instances/*/")
    page.wait_for_function(
        "() => document.getElementById('status').textContent === 'Running'", timeout=90_000
    )
    shot(page, "11-launched-on-voucher-credit")
    instance = Instance.objects.get(user__email="trial@example.com")
    assert instance.status == "running"
