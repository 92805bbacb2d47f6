"""The console reconnects by itself: an instance page open in a real Chromium, against the
real web process (Daphne), keeps its live timeline through a Redis restart without a
reload, and shows what happens after it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from gpurental.rentals.services import lifecycle as lc
from gpurental.testing import pytest_plugin
from tests.browser.test_console_flow import browser  # noqa: F401 - a fixture
from tests.browser.test_hostile_names import PASSWORD, log_in
from tests.stack import web_alone  # noqa: F401 - a fixture
from tests.telemetry.conftest import node1, run_instance  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def off_the_loop(function, *args, **kwargs):
    """Call ``function`` on a thread of its own: Playwright's event loop runs in this one,
    and the services publish their events with async_to_sync."""
    from django.db import connection

    def call():
        try:
            return function(*args, **kwargs)
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


@pytest.mark.exclusive  # restarts the Redis every test shares
def test_an_open_instance_page_reconnects_after_redis_restarts(
    browser,  # noqa: F811
    web_alone,  # noqa: F811
    run_instance,  # noqa: F811
    alice,
    settings,
):
    # The web process checks with the production hasher, not the tests' fast one.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    alice.set_password(PASSWORD)
    alice.save()
    instance = off_the_loop(run_instance, alice)
    page = log_in(browser, web_alone, alice)
    page.goto(f"{web_alone}/instances/{instance.pk}/")
    page.wait_for_function("() => document.getElementById('live').textContent === 'live'")
    # Every state the socket's label goes through from now on, and a mark a reload would lose.
    page.evaluate(
        """() => {
            window.__sameDocument = true;
            window.__labels = [];
            const live = document.getElementById('live');
            new MutationObserver(() => window.__labels.push(live.textContent))
                .observe(live, {childList: true, characterData: true, subtree: true});
        }"""
    )

    assert pytest_plugin.embedded_redis_restart() or pytest.skip("REDIS_URL is external")

    page.wait_for_function(
        "() => window.__labels.includes('reconnecting…')"
        " && window.__labels[window.__labels.length - 1] === 'live'"
    )
    off_the_loop(
        lc.instance_stop, instance=instance
    )  # its event reaches the page on the new socket
    page.wait_for_function("() => document.getElementById('status').textContent === 'Stopping'")
    assert page.evaluate("window.__sameDocument") is True
