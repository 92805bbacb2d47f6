# ruff: noqa: F811 - pytest fixtures imported from tests.groups.surfaces
"""Elastic groups over the REST API: apply in each format, declarative re-apply, bad specs
(each a 400 naming the field that changes nothing), the price before creation, visibility."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from gpurental.groups.models import Group, GroupEvent, LoadSample, ScalingRule
from gpurental.groups.services import group_apply
from tests.api.conftest import assert_error
from tests.groups.surfaces import (  # noqa: F401 - fixtures
    ARTICLE_HCL,
    SPEC,
    SPEC_JSON,
    SPEC_YAML,
    a10,
    api_for,
    group_catalog,
    serving_echo,
)

APPLY = "/api/v1/groups/apply/"
QUOTE = "/api/v1/groups/quote/"


@pytest.fixture
def as_alice(api_for, alice, group_catalog):
    return api_for(alice)


@pytest.fixture
def as_bob(api_for, bob, group_catalog):
    return api_for(bob)


@pytest.fixture
def as_carol(api_for, carol, group_catalog):
    return api_for(carol)


def _snapshot():
    return (
        list(Group.objects.values_list("name", "min_replicas", "max_replicas", "warm_pool_size")),
        ScalingRule.objects.count(),
        GroupEvent.objects.count(),
    )


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(SPEC, id="json-object"),
        pytest.param({"format": "json", "source": SPEC_JSON}, id="json-text"),
        pytest.param({"format": "yaml", "source": SPEC_YAML}, id="yaml"),
        pytest.param({"format": "hcl", "source": ARTICLE_HCL}, id="article-hcl"),
        pytest.param({"source": ARTICLE_HCL}, id="hcl-guessed"),
    ],
)
def test_apply_creates_the_group_in_every_format(as_alice, alice, a10, body):
    response = as_alice.post(APPLY, body, format="json")

    assert response.status_code == 201, response.content
    data = response.json()
    assert data["created"] is True and data["changes"] == ["created"]
    assert data["name"] == "inference" and data["status"] == "active"
    assert (data["min_nodes"], data["max_nodes"], data["warm_pool_size"]) == (1, 10, 2)
    assert data["instance_type"] == "A10" and data["gpu_count"] == 1
    assert data["image"] == "serving-echo" and data["port"] == 8000
    assert data["spec"]["scaling_metrics"] == [{"metric": "gpu_utilization", "threshold": 70.0}]
    assert data["endpoint_url"] == f"https://grp-{data['id']}.gw.localhost"
    assert data["replicas"] == [] and data["load"] is None
    assert data["events"][0]["reason"].startswith("created: 1–10 × 1 A10")
    group = Group.objects.get(pk=data["id"])
    assert group.user == alice and group.plan.gpu_model == a10


def test_the_endpoint_key_is_shown_once_and_stored_hashed(as_alice):
    created = as_alice.post(APPLY, SPEC, format="json").json()
    key = created["endpoint_key"]

    assert key.startswith("gpg_") and len(key) > 30
    group = Group.objects.get(pk=created["id"])
    assert group.endpoint_key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert key not in str(Group.objects.filter(pk=group.pk).values().get())
    again = as_alice.post(APPLY, SPEC, format="json").json()
    shown = as_alice.get(f"/api/v1/groups/{group.pk}/").content.decode()
    assert again["endpoint_key"] is None and key not in shown
    assert key not in as_alice.get("/api/v1/groups/").content.decode()


def test_an_idempotent_replay_does_not_show_the_key_again(as_alice):
    first = as_alice.post(APPLY, SPEC, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    replay = as_alice.post(APPLY, SPEC, format="json", HTTP_IDEMPOTENCY_KEY="k-1")

    assert first.status_code == replay.status_code == 201
    assert first.json()["endpoint_key"] and replay.json()["endpoint_key"] is None
    assert replay["Idempotent-Replayed"] == "true"
    assert Group.objects.count() == 1


def test_applying_again_is_unchanged(as_alice):
    as_alice.post(APPLY, {"format": "hcl", "source": ARTICLE_HCL}, format="json")
    events = GroupEvent.objects.count()

    response = as_alice.post(APPLY, {"format": "yaml", "source": SPEC_YAML}, format="json")

    assert response.status_code == 200
    assert response.json()["created"] is False and response.json()["changes"] == []
    assert GroupEvent.objects.count() == events and Group.objects.count() == 1


def test_a_changed_max_nodes_is_exactly_that_change(as_alice):
    as_alice.post(APPLY, SPEC, format="json")

    response = as_alice.post(APPLY, {**SPEC, "max_nodes": 6}, format="json")

    assert response.status_code == 200
    assert response.json()["changes"] == ["max_nodes: 10 → 6"]
    assert Group.objects.get().max_replicas == 6
    assert GroupEvent.objects.order_by("-id").first().reason == "changed: max_nodes: 10 → 6"


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({**SPEC, "min_nodes": 5, "max_nodes": 2}, "min_nodes", "more than max_nodes"),
        (
            {**SPEC, "scaling_metrics": [{"metric": "cpu", "threshold": 50}]},
            "scaling_metrics[0].metric",
            "unknown metric 'cpu'",
        ),
        ({**SPEC, "min_nodes": -1}, "min_nodes", "outside 0–50"),
        ({**SPEC, "warm_pool": {"size": -2, "instance_type": "A10"}}, "warm_pool.size", "-2"),
        (
            {"format": "hcl", "source": ARTICLE_HCL.replace("max_nodes     = 10", "max_nodes = ")},
            "spec",
            "HCL syntax error",
        ),
        (
            {**SPEC, "warm_pool": {"size": 2, "instance_type": "H900"}},
            "instance_type",
            "instance_type is one of: A10",
        ),
        ({**SPEC, "colour": "blue"}, "colour", "unknown setting 'colour'"),
        ({"format": "toml", "source": "x = 1"}, "format", "not a valid choice"),
        ({**SPEC, "image": "nope"}, "image", "images: serving-echo"),
    ],
    ids=[
        "min-over-max",
        "unknown-metric",
        "negative-min",
        "negative-warm-pool",
        "hcl-syntax",
        "unknown-instance-type",
        "unknown-key",
        "unknown-format",
        "unknown-image",
    ],
)
def test_a_bad_spec_is_a_400_naming_the_field_and_changes_nothing(as_alice, body, field, words):
    as_alice.post(APPLY, SPEC, format="json")  # an existing group, to see it is untouched
    before = _snapshot()
    if "source" not in body and body.get("name") == "inference":
        body = {**body, "name": "other"}  # a new group would not be made either

    for url in (APPLY, QUOTE):
        error = assert_error(as_alice.post(url, body, format="json"), 400, "invalid_spec"
                             if field != "format" else "invalid", field=field)  # fmt: skip
        assert words in error["message"], error

    assert _snapshot() == before


def test_a_bad_change_to_an_existing_group_changes_nothing(as_alice):
    as_alice.post(APPLY, SPEC, format="json")
    before = _snapshot()

    response = as_alice.post(APPLY, {**SPEC, "max_nodes": 8, "min_nodes": 9}, format="json")

    assert_error(response, 400, "invalid_spec", field="min_nodes")
    assert _snapshot() == before


def test_the_price_is_in_the_apply_answer_and_the_detail(as_alice):
    created = as_alice.post(APPLY, SPEC, format="json").json()
    detail = as_alice.get(f"/api/v1/groups/{created['id']}/").json()

    for price in (created["price"], detail["price"]):
        assert price["replica_hourly_rate"] == "1.1000"
        assert price["replica_off_peak_rate"] == "0.7700"
        assert price["warm_replica_hourly_rate"] == "0.00"
        assert "not billed" in price["warm_replica_note"]
        assert (price["min_hourly"], price["max_hourly"]) == ("1.1000", "11.0000")


def test_quote_prices_the_spec_and_creates_nothing(as_alice):
    response = as_alice.post(QUOTE, {"format": "hcl", "source": ARTICLE_HCL}, format="json")

    assert response.status_code == 200, response.content
    data = response.json()
    assert data["name"] == "inference" and data["exists"] is False
    assert data["instance_type"] == "A10" and data["port"] == 8000
    price = data["price"]
    assert price["min_hourly"] == "1.1000" and price["max_hourly"] == "11.0000"
    assert price["warm_pool_size"] == 2 and price["warm_pool_hourly"] == "0.00"
    assert Group.objects.count() == 0 and GroupEvent.objects.count() == 0


def test_list_detail_and_events(as_alice, alice):
    applied = group_apply(user=alice, source=SPEC)
    group = applied.group
    group_apply(user=alice, source={**SPEC, "max_nodes": 4})
    LoadSample.objects.create(
        group=group, at=group.created_at, ready=1, provisioning=0, warm=2, rps=12.5,
        inflight=1.0, queued=0.0, latency_p50_ms=20.0, latency_p99_ms=80.0, gpu_util=64.0,
        needed=1,
    )  # fmt: skip

    listed = as_alice.get("/api/v1/groups/").json()
    detail = as_alice.get(f"/api/v1/groups/{group.pk}/").json()
    events = as_alice.get(f"/api/v1/groups/{group.pk}/events/?limit=1").json()

    assert [g["name"] for g in listed["results"]] == ["inference"]
    assert as_alice.get("/api/v1/groups/?name=other").json()["results"] == []
    assert detail["load"]["rps"] == 12.5 and detail["load"]["latency_p99_ms"] == 80.0
    assert [e["reason"] for e in detail["events"]][0] == "changed: max_nodes: 10 → 4"
    assert events["count"] == 2 and events["results"][0]["reason"].startswith("changed")
    assert events["next"]


def test_another_users_group_is_a_404_everywhere(as_alice, as_bob, alice):
    group = group_apply(user=alice, source=SPEC).group
    nobody = uuid.uuid4()

    for method, path in (
        ("get", "/api/v1/groups/{}/"),
        ("get", "/api/v1/groups/{}/events/"),
        ("delete", "/api/v1/groups/{}/"),
    ):
        mine = assert_error(getattr(as_bob, method)(path.format(group.pk)), 404, "not_found")
        fake = assert_error(getattr(as_bob, method)(path.format(nobody)), 404, "not_found")
        assert mine["message"].replace(str(group.pk), "ID") == fake["message"].replace(
            str(nobody), "ID"
        )
    assert as_bob.get("/api/v1/groups/").json()["results"] == []
    # Bob applying the same name makes his own group; alice's is untouched.
    assert as_bob.post(APPLY, {**SPEC, "max_nodes": 3}, format="json").status_code == 201
    assert Group.objects.get(pk=group.pk).max_replicas == 10
    assert Group.objects.get(pk=group.pk).status == Group.Status.ACTIVE


def test_staff_see_every_group(as_carol, alice):
    group = group_apply(user=alice, source=SPEC).group

    assert [g["id"] for g in as_carol.get("/api/v1/groups/").json()["results"]] == [str(group.pk)]
    assert as_carol.get(f"/api/v1/groups/{group.pk}/").status_code == 200


def test_delete_without_replicas_is_done_at_once(as_alice, alice):
    group = group_apply(user=alice, source=SPEC).group

    response = as_alice.delete(f"/api/v1/groups/{group.pk}/")

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "deleted"
    assert as_alice.get("/api/v1/groups/").json()["results"] == []
    assert len(as_alice.get("/api/v1/groups/?deleted=true").json()["results"]) == 1
    # The name is free again.
    assert as_alice.post(APPLY, SPEC, format="json").status_code == 201


def test_a_read_only_key_may_look_but_not_apply(client_for_scopes):
    reader = client_for_scopes(["read"])
    assert reader.get("/api/v1/groups/").status_code == 200
    assert_error(reader.post(APPLY, SPEC, format="json"), 403, "permission_denied")
    assert Group.objects.count() == 0


@pytest.fixture
def client_for_scopes(alice, group_catalog):
    from rest_framework.test import APIClient

    from gpurental.accounts.services import api_key_create

    def make(scopes):
        _, raw = api_key_create(user=alice, name="scoped", scopes=scopes)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client

    return make


def test_a_name_filter_postgresql_cannot_hold_is_a_400_naming_it(as_alice):
    # Found by the schema fuzz: a NUL byte reached the query and PostgreSQL refused it (500).
    response = as_alice.get("/api/v1/groups/", {"name": "a\x00b"})
    body = assert_error(response, 400, "invalid")
    assert "name" in body["fields"]
    assert as_alice.get("/api/v1/groups/", {"name": "nope"}).json()["results"] == []
