"""The staff fleet page's heatmap: host × GPU, first painted from the latest samples."""

from __future__ import annotations

import time

import pytest

from tests.telemetry.conftest import host_message

pytestmark = pytest.mark.django_db


def test_fleet_page_paints_the_heatmap_from_the_latest_samples(client, carol, node1, publisher):
    publisher.publish(host_message((0, None, 12.0), (2, None, 88.0), ts=time.time()))
    client.force_login(carol)
    page = client.get("/staff/fleet/").content.decode()
    assert 'id="heatmap"' in page and 'data-host="node1"' in page
    assert 'data-gpu="2" data-util="88.0"' in page
    assert 'data-gpu="1" data-util=""' in page  # no sample for GPU 1: shown as unknown
    assert "js/fleet.js" in page and "simulated" in page


def test_fleet_page_stays_staff_only(client, alice, node1):
    client.force_login(alice)
    assert client.get("/staff/fleet/").status_code == 302
