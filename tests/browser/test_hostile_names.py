"""Hostile names never run as script, in a real Chromium under the site's CSP: a customer's
instance and API key, a host and a reservation's image are named with quotes, a closing
</script>, an event handler and a javascript: URL. Every console and staff page that shows
them is visited and every confirm button clicked; the payload would set window.pwned."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from tests.browser.test_console_flow import browser  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.docker, pytest.mark.django_db(transaction=True)]

PAYLOAD = (  # at most 100 characters: it fits every name field
    "x');window.pwned=1;('\"</script><script>pwned=2</script><img src=x onerror=pwned=3>javascript:pwned=4"
)
HOST_PAYLOAD = "h');window.pwned=5;('\"</script><b onclick=pwned=6>"  # fits a host name
PASSWORD = "correct horse battery staple"


def log_in(browser, web_server, user):  # noqa: F811 - the browser fixture, passed on
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(30_000)
    page.goto(f"{web_server}/login/")
    page.fill("input[name=username]", user.email)
    page.fill("input[name=password]", PASSWORD)
    page.click("button:has-text('Log in')")
    page.wait_for_url("**/dashboard/")
    return page


@pytest.fixture
def hostile(catalog, alice, carol, settings, a100, image, make_host):
    from gpurental.accounts.services import api_key_create
    from gpurental.billing.services import credit_add
    from gpurental.rentals.services import lifecycle as lc
    from gpurental.rentals.services import reservations as rs

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    for user in (alice, carol):
        user.set_password(PASSWORD)
        user.save()
    credit_add(user=alice, amount=Decimal("500.00"))
    host = make_host(HOST_PAYLOAD, a100, count=8)
    instance = lc.instance_launch(
        user=alice, image=image, gpu_model=a100, gpu_count=1, name=PAYLOAD
    )
    lc.instance_report_running(instance_id=str(instance.pk), port=40000, container_id="c")
    api_key_create(user=alice, name=PAYLOAD)
    image.name = PAYLOAD
    image.save()
    start = (timezone.now() + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    booking = rs.reservation_book(
        user=alice,
        image=image,
        gpu_model=a100,
        gpu_count=1,
        start=start,
        end=start + timedelta(hours=1),
    )
    return host, instance, booking


def visit(page, url, confirms: int):
    """Load ``url``, click every confirm button on it (dismissing the dialogs), and return
    the dialogs' messages; the payload must never have run."""
    messages = []

    def answer(dialog):
        messages.append(dialog.message)
        dialog.dismiss()  # nothing is submitted

    page.on("dialog", answer)
    page.goto(url)
    page.wait_for_load_state("networkidle")
    forms = page.locator("form[data-confirm]:visible")
    assert forms.count() >= confirms, f"{url}: {forms.count()} confirm buttons"
    for index in range(forms.count()):
        forms.nth(index).locator("button").click()
    assert page.evaluate("window.pwned") is None, f"the payload ran on {url}"
    page.remove_listener("dialog", answer)
    return messages


def test_hostile_names_are_shown_as_text_and_never_run(browser, web_server, hostile, alice, carol):  # noqa: F811
    host, instance, booking = hostile
    owner = log_in(browser, web_server, alice)
    violations = []
    owner.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
    )
    visit(owner, f"{web_server}/instances/{instance.pk}/", confirms=1)
    assert PAYLOAD in owner.inner_text("body")  # shown as text
    visit(owner, f"{web_server}/dashboard/", confirms=0)
    assert PAYLOAD in owner.inner_text("body")
    shown = visit(owner, f"{web_server}/keys/", confirms=1)
    assert any(PAYLOAD in m for m in shown), shown  # the dialog shows the name as text
    visit(owner, f"{web_server}/reservations/", confirms=1)
    visit(owner, f"{web_server}/reservations/{booking.pk}/", confirms=1)
    assert PAYLOAD in owner.inner_text("body")

    staff = log_in(browser, web_server, carol)
    shown = visit(staff, f"{web_server}/staff/fleet/", confirms=3)
    assert any(host.name in m for m in shown) and any(PAYLOAD in m for m in shown)
    assert host.name in staff.inner_text("#hosts")
    visit(staff, f"{web_server}/instances/{instance.pk}/", confirms=1)
    assert staff.evaluate("window.pwned") is None
    # The inline payload would have been blocked by the CSP, and said so; none was attempted.
    assert not [v for v in violations if "inline" in v], violations


def test_swagger_ui_works_under_the_csp(browser, web_server):  # noqa: F811
    """The API docs render (their start-up script is a file, not inline) with no CSP error."""
    page = browser.new_context().new_page()
    violations = []
    page.on(
        "console", lambda m: violations.append(m.text) if "Content Security" in m.text else None
    )
    page.goto(f"{web_server}/api/docs/")
    page.wait_for_selector(".swagger-ui .info", timeout=30_000)
    assert "gpurental API" in page.inner_text(".swagger-ui .info")
    page.wait_for_selector("text=/api/v1/instances/", timeout=30_000)
    assert not violations, violations
