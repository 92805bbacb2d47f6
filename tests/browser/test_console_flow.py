"""A person's first session, in a real Chromium (Debian's, launched by path) against the
real web process, control worker, host agent and Docker Engine:
sign up → launch → live status reaches running without a reload → live GPU charts draw
→ Open JupyterLab
shows JupyterLab. Screenshots of the main pages go to artifacts/screenshots/.
"""

from __future__ import annotations

import os
import shutil
import uuid
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from tests.agent.conftest import skip_unless_ci

pytestmark = [pytest.mark.browser, pytest.mark.docker, pytest.mark.django_db(transaction=True)]

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(os.environ.get("ARTIFACTS_DIR", "artifacts")) / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def browser(monkeypatch):
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        skip_unless_ci(f"no Chromium at {CHROMIUM}: apt-get install chromium")
    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are safe.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from django.db import connection
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
            # ORM calls made while Playwright runs use a connection of their own context;
            # close it, or the test database cannot be dropped at the end.
            connection.close()


def shot(page, name):
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def confirmation_link(mail_dir: Path) -> str:
    """The sign-up link from the web process's mail (file backend)."""
    import re
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for message in sorted(mail_dir.glob("*.log")) if mail_dir.exists() else []:
            found = re.search(r"(/signup/confirm/[^/\s]+/)", message.read_text())
            if found:
                return found.group(1)
        time.sleep(0.2)
    raise AssertionError(f"no confirmation mail in {mail_dir}")


def test_sign_up_launch_watch_it_run_and_open_jupyterlab(
    browser, web_server, gateway, gateway_port, catalog, bob, settings, tmp_path
):
    from gpurental.rentals.models import Instance

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)

    page.goto(f"{web_server}/")
    page.wait_for_selector("#catalog")
    shot(page, "01-catalog")

    page.click("text=Sign up")
    page.fill("input[name=email]", "newcomer@example.com")
    page.fill("input[name=password1]", "a-long-pass-phrase-7")
    page.fill("input[name=password2]", "a-long-pass-phrase-7")
    page.click("button:has-text('Sign up')")
    page.wait_for_selector("text=Check your inbox")
    link = confirmation_link(tmp_path / "mail")
    page.goto(f"{web_server}{link}")
    page.click("button:has-text('Create my account')")
    page.wait_for_url("**/dashboard/")
    assert "No instances yet" in page.content()
    shot(page, "02-dashboard-empty")

    page.click("a.button:has-text('Launch')")
    page.wait_for_url("**/launch/")
    assert "/hour" in page.inner_text("#estimate")
    shot(page, "03-launch")
    page.click("button:has-text('Launch')")
    # A new account has no credit: the launch is refused, saying why and how much is missing.
    page.wait_for_selector(".error[role=alert]")
    assert "Add at least" in page.inner_text("form#launch-form")
    shot(page, "03b-launch-refused-no-credit")

    from gpurental.accounts.models import User
    from gpurental.billing.services import credit_add

    credit_add(
        user=User.objects.get(email="newcomer@example.com"),
        amount=Decimal("20.00"),
        description="test credit",
    )  # what staff do in the back-office
    page.click("button:has-text('Launch')")
    page.wait_for_url("**/instances/*/")

    # Mark this document: if the page reloads, the mark is gone.
    page.evaluate("window.__sameDocument = true")
    page.wait_for_function("() => document.getElementById('live').textContent === 'live'")
    page.wait_for_function(
        "() => document.getElementById('status').textContent === 'Running'", timeout=90_000
    )
    assert page.evaluate("window.__sameDocument") is True
    steps = page.inner_text("#timeline")
    assert "waiting_for_jupyter" in steps and "creating" in steps
    assert page.is_visible("#open-jupyter")
    assert page.is_visible("button:has-text('Stop')") and not page.is_visible(
        "button:has-text('Start')"
    )
    # Live GPU charts: the agent's 1 Hz samples arrive on the same socket, marked simulated
    # (the stack's agent has simulated GPUs), and the chart draws a line per GPU.
    page.wait_for_function(
        "() => document.getElementById('telemetry-live').textContent === 'live, 1 s'",
        timeout=30_000,
    )
    assert page.is_visible("#telemetry-simulated")
    page.wait_for_function(
        "() => Chart.getChart('live-util').data.datasets.length >= 1"
        " && Chart.getChart('live-util').data.datasets[0].data.length >= 2",
        timeout=30_000,
    )
    shot(page, "04-instance-running")

    with context.expect_page() as new_tab:
        page.click("#open-jupyter")
    lab = new_tab.value
    lab.wait_for_load_state()
    lab.wait_for_selector("#jp-main-dock-panel, .jp-LabShell", timeout=60_000)
    assert "JupyterLab" in lab.title()
    # At the instance's own origin, through the gateway; no token anywhere in sight.
    instance = Instance.objects.get(user__email="newcomer@example.com")
    origin = f"http://{instance.pk}.gw.localhost:{gateway_port}"
    assert lab.url == f"{origin}/lab"
    assert instance.jupyter_token not in lab.content()
    shot(lab, "05-jupyterlab")

    # A cell runs: the kernel's websocket goes through the gateway too.
    lab.click(".jp-LauncherCard[data-category='Notebook']")
    # The kernel starts behind the gateway's websocket: wait until the status bar says so.
    lab.wait_for_function("() => document.body.innerText.includes('| Idle')", timeout=90_000)
    editor = lab.locator(".jp-Notebook .jp-Cell .cm-content").first
    editor.click()
    lab.keyboard.type("1+1")
    assert editor.inner_text() == "1+1"
    lab.keyboard.press("Shift+Enter")
    try:
        lab.wait_for_selector(".jp-OutputArea-output:has-text('2')", timeout=60_000)
    finally:
        shot(lab, "05b-jupyterlab-cell")

    # A cookie set at this origin goes to this origin only, never to a sibling instance.
    lab.evaluate("document.cookie = 'probe=from-this-instance; path=/'")
    assert {"probe", "gpurental-gw"} <= {c["name"] for c in context.cookies(origin)}
    sibling = context.new_page()
    answer = sibling.goto(f"http://{uuid.uuid4()}.gw.localhost:{gateway_port}/lab")
    assert answer.status == 404 and "cookie" not in answer.request.all_headers()
    sibling.close()

    # Nobody else gets in: not an anonymous visitor, not bob logged in to the console.
    anonymous = browser.new_context()
    answer = anonymous.new_page().goto(f"{origin}/lab")
    assert answer.status == 404 and "JupyterLab" not in answer.text()
    anonymous.close()
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    bob.set_password("correct horse battery staple")
    bob.save()
    bobs = browser.new_context()
    bobs_page = bobs.new_page()
    bobs_page.goto(f"{web_server}/login/")
    bobs_page.fill("input[name=username]", bob.email)
    bobs_page.fill("input[name=password]", "correct horse battery staple")
    bobs_page.click("button:has-text('Log in')")
    bobs_page.wait_for_url("**/dashboard/")
    assert bobs_page.goto(f"{web_server}/instances/{instance.pk}/open/").status == 404
    assert bobs_page.goto(f"{origin}/lab").status == 404
    bobs.close()

    page.goto(f"{web_server}/dashboard/")
    assert "Running" in page.inner_text("#instances")
    shot(page, "06-dashboard")

    instance.refresh_from_db()
    assert instance.status == "running"
    context.close()


def test_staff_fleet_dashboard(browser, web_server, catalog, carol, settings):
    # The web process verifies with the production hasher, not the tests' fast one.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    carol.set_password("correct horse battery staple")
    carol.save()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{web_server}/login/")
    page.fill("input[name=username]", carol.email)
    page.fill("input[name=password]", "correct horse battery staple")
    page.click("button:has-text('Log in')")
    page.wait_for_url("**/dashboard/")
    page.goto(f"{web_server}/staff/fleet/")
    page.wait_for_selector("#hosts")
    assert "e2e-" in page.inner_text("#hosts")
    # The heatmap is live: frames from the fleet feed arrive and paint the cells.
    page.wait_for_function(
        "() => document.getElementById('heatmap-live').textContent.includes('updated')",
        timeout=15000,
    )
    cells = page.locator("#heatmap td.cell")
    assert cells.count() > 0
    assert all(text.strip().isdigit() for text in cells.all_inner_texts())
    shot(page, "07-fleet")
    context.close()


def test_book_and_cancel_a_reservation(browser, web_server, catalog, alice, settings):
    """Availability → quote → book and pay → the list → cancel with the refund shown."""
    from gpurental.billing.selectors import balance_of
    from gpurental.billing.services import credit_add
    from gpurental.rentals.models import Reservation

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    alice.set_password("correct horse battery staple")
    alice.save()
    credit_add(user=alice, amount=Decimal("50.00"))
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(f"{web_server}/login/")
    page.fill("input[name=username]", alice.email)
    page.fill("input[name=password]", "correct horse battery staple")
    page.click("button:has-text('Log in')")
    page.wait_for_url("**/dashboard/")

    page.click("nav >> text=Reservations")
    page.wait_for_url("**/reservations/")
    assert "count as taken until they stop" in page.content()
    page.select_option("select[name=gpu_count]", "1")
    page.fill("input[name=hours]", "3")
    page.click("button[name=quote]")
    page.wait_for_selector("#quote-price")
    price = page.inner_text("#quote-price").split()[0].lstrip("$").replace(",", "")
    shot(page, "08-reservation-quote")

    page.click("button[name=book]")
    page.wait_for_selector("#my-reservations tbody tr")
    assert "Booked" in page.content()
    reservation = Reservation.objects.get(user=alice)
    assert str(reservation.price) == price and reservation.status == "booked"
    assert balance_of(user=alice) == Decimal("50.00") - reservation.price
    shot(page, "09-reservation-booked")

    # Starting in 2 hours (the form's default): the late-cancellation share comes back.
    shown = page.inner_text(f"#reservation-{reservation.pk}").split("refund $")[1].split()[0]
    page.on("dialog", lambda dialog: dialog.accept())
    page.click(f"#reservation-{reservation.pk} button:has-text('Cancel')")
    page.wait_for_selector(f"#reservation-{reservation.pk} .status.cancelled")
    reservation.refresh_from_db()
    assert reservation.status == "cancelled" and str(reservation.refunded) == shown
    assert reservation.refunded == (reservation.price / 2).quantize(Decimal("0.01"), ROUND_HALF_UP)
    assert balance_of(user=alice) == Decimal("50.00") - reservation.price + reservation.refunded
    shot(page, "10-reservation-cancelled")
    context.close()
