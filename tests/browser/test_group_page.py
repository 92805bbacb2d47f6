"""A group's page in a real Chromium against the real web process: its live charts come
over the group's websocket, a snapshot first, then each sample as the autoscaler records
it (no polling). Screenshot in artifacts/screenshots/."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.browser.test_console_flow import browser, shot  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.docker, pytest.mark.django_db(transaction=True)]

POINTS = "() => Chart.getChart(document.getElementById('chart-rps')).data.datasets[0].data.length"


def _tick_in_thread(group_tick, group_id, now):
    from django.db import connection

    try:
        group_tick(group_id=group_id, now=now)
    finally:
        connection.close()


def test_the_group_page_charts_arrive_over_the_websocket(
    browser,  # noqa: F811
    web_server,
    catalog,
    alice,
    settings,
):
    from gpurental.groups.services import group_apply, group_tick
    from tests.factories import ImageTemplateFactory

    ImageTemplateFactory(slug="serving-echo", image="gpurental/serving-echo:latest", port=8000)
    spec = {"name": "inference", "instance_type": "A10G", "image": "serving-echo", "min_nodes": 0}
    group = group_apply(user=alice, source=spec).group
    first = timezone.now()
    group_tick(group_id=group.pk, now=first)

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    alice.set_password("correct horse battery staple")
    alice.save()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    requested = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(f"{web_server}/login/")
    page.fill("input[name=username]", alice.email)
    page.fill("input[name=password]", "correct horse battery staple")
    page.click("button:has-text('Log in')")
    page.wait_for_url("**/dashboard/")

    page.goto(f"{web_server}/groups/{group.pk}/")
    page.wait_for_function(
        "() => document.getElementById('charts-note').textContent.includes('live')"
    )
    assert page.evaluate(POINTS) == 1  # the snapshot: the sample recorded before the page opened

    later = first + timedelta(seconds=5)
    # As celery beat would: in another thread (Playwright's loop runs in this one).
    with ThreadPoolExecutor(1) as pool:
        pool.submit(_tick_in_thread, group_tick, group.pk, later).result()
    page.wait_for_function(f"{POINTS} === 2")
    note = page.inner_text("#charts-note")
    assert f"latest sample {timezone.localtime(later):%H:%M:%S}" in note and "live" in note
    # Pushed, not fetched: the page never asked the samples URL.
    assert not [url for url in requested if "/samples/" in url]
    shot(page, "11-group-live-charts")
    context.close()
