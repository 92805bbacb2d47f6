# ruff: noqa: F401, F811 - pytest fixtures imported from tests.groups.surfaces
"""The console's Groups pages: the list with the spec form (quote, then apply), a group's
page (replicas, price, events, charts) and the samples its charts poll."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from gpurental.groups.models import Group, GroupEvent, LoadSample
from gpurental.groups.services import group_apply
from gpurental.rentals.services import lifecycle
from tests.groups.surfaces import ARTICLE_HCL, SPEC, SPEC_YAML, a10, group_catalog, serving_echo


@pytest.fixture
def as_alice(client, alice, group_catalog):
    client.force_login(alice)
    return client


@pytest.fixture
def full_group(alice, a10, serving_echo, make_host, sent):
    """Alice's group with a serving replica on a host, two load samples and events."""
    group = group_apply(user=alice, source=SPEC).group
    make_host("node1", a10, count=4)
    replica = lifecycle.instance_launch(
        user=alice, image=serving_echo, plan=group.plan, name="inference-replica",
        idle_stop_minutes=0, group=group, group_role="serving",
    )  # fmt: skip
    now = timezone.now()
    for seconds, rps in ((10, 4.0), (5, 9.5)):
        LoadSample.objects.create(
            group=group, at=now - timedelta(seconds=seconds), ready=1, provisioning=0, warm=0,
            rps=rps, inflight=1.0, queued=0.5, latency_p50_ms=21.0, latency_p99_ms=95.0,
            gpu_util=71.0, needed=1,
        )  # fmt: skip
    GroupEvent.objects.create(
        group=group, kind="scaled", from_replicas=1, to_replicas=2,
        reason="1 → 2: GPU utilisation 83 % > 70 %",
    )  # fmt: skip
    return group, replica


def test_the_groups_page_renders_empty_with_the_example_spec(as_alice):
    response = as_alice.get("/groups/")

    assert response.status_code == 200
    body = response.content.decode()
    assert "No groups yet" in body
    assert "resource &quot;elastic_gpu&quot; &quot;inference&quot;" in body  # the textarea
    assert 'href="/groups/"' in body  # the nav link


def test_quote_shows_the_price_and_creates_nothing(as_alice):
    response = as_alice.post("/groups/", {"format": "hcl", "source": ARTICLE_HCL, "quote": "1"})

    body = response.content.decode()
    assert response.status_code == 200 and 'id="group-quote"' in body
    assert "1.1000" in body and "11.0000" in body  # per replica and at max (10)
    assert "not billed while they wait" in body and "Warm pool (2)" in body
    assert Group.objects.count() == 0


def test_apply_creates_the_group_and_shows_the_key_once(as_alice, alice):
    response = as_alice.post("/groups/", {"format": "yaml", "source": SPEC_YAML, "apply": "1"})

    body = response.content.decode()
    group = Group.objects.get(user=alice)
    assert response.status_code == 200 and 'id="endpoint-key"' in body
    key = body.split('id="endpoint-key" class="secret">')[1].split("<")[0]
    assert key.startswith("gpg_") and f"grp-{group.pk}.gw.localhost" in body
    assert key not in as_alice.get("/groups/").content.decode()
    assert key not in as_alice.get(f"/groups/{group.pk}/").content.decode()

    again = as_alice.post("/groups/", {"format": "hcl", "source": ARTICLE_HCL, "apply": "1"})
    assert again.status_code == 302 and again["Location"] == f"/groups/{group.pk}/"
    assert "unchanged" in as_alice.get(again["Location"]).content.decode()


def test_a_bad_spec_names_the_field_escapes_the_input_and_changes_nothing(as_alice):
    hostile = SPEC_YAML + '"<script>alert(1)</script>": 1\n'

    response = as_alice.post("/groups/", {"format": "yaml", "source": hostile, "apply": "1"})

    body = response.content.decode()
    assert response.status_code == 200 and 'id="spec-error"' in body
    assert "unknown setting" in body and "<script>alert(1)" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert Group.objects.count() == 0


def test_the_group_page_shows_replicas_price_events_and_charts(as_alice, full_group):
    group, replica = full_group

    response = as_alice.get(f"/groups/{group.pk}/")

    body = response.content.decode()
    assert response.status_code == 200
    assert str(replica.pk)[:8] in body and "serving" in body
    assert f"grp-{group.pk}.gw.localhost" in body
    assert "1 → 2: GPU utilisation 83 % &gt; 70 %" in body
    assert 'id="chart-latency"' in body and "js/groups.js" in body
    assert "gpu_utilization 70.00" in body
    assert "<script>" not in body.split("</main>")[0]  # no inline script (CSP)


def test_the_samples_feed_the_charts(as_alice, full_group):
    group, replica = full_group

    data = as_alice.get(f"/groups/{group.pk}/samples/").json()
    newer = as_alice.get(f"/groups/{group.pk}/samples/", {"after": data["samples"][0]["at"]}).json()

    assert [s["rps"] for s in data["samples"]] == [4.0, 9.5]
    assert data["samples"][0]["latency_p99_ms"] == 95.0 and data["samples"][0]["gpu_util"] == 71.0
    assert data["replicas"] == [
        {"id": str(replica.pk), "status": replica.status, "role": "serving", "host": "node1"}
    ]
    assert [s["rps"] for s in newer["samples"]] == [9.5]
    bad = as_alice.get(f"/groups/{group.pk}/samples/", {"after": "yesterday"})
    assert bad.status_code == 400


def test_another_customers_group_is_a_404(client, bob, full_group):
    group, _ = full_group
    client.force_login(bob)

    for url in (f"/groups/{group.pk}/", f"/groups/{group.pk}/samples/"):
        assert client.get(url).status_code == 404
    assert client.post(f"/groups/{group.pk}/delete/").status_code == 404
    assert group.name not in client.get("/groups/").content.decode().split("Apply a spec")[0]
    assert Group.objects.get(pk=group.pk).status == Group.Status.ACTIVE


def test_staff_see_every_group(client, carol, full_group):
    group, _ = full_group
    client.force_login(carol)

    assert group.name in client.get("/groups/").content.decode()
    assert client.get(f"/groups/{group.pk}/").status_code == 200


def test_delete_from_the_page(as_alice, alice):
    group = group_apply(user=alice, source=SPEC).group

    response = as_alice.post(f"/groups/{group.pk}/delete/")

    assert response.status_code == 302 and response["Location"] == "/groups/"
    assert Group.objects.get(pk=group.pk).status == Group.Status.DELETED


def test_the_pages_need_a_login(client, full_group):
    group, _ = full_group
    for url in ("/groups/", f"/groups/{group.pk}/", f"/groups/{group.pk}/samples/"):
        assert client.get(url).status_code == 302
