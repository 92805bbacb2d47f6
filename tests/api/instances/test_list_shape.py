"""The instance list writes its items by hand (InstanceSerializer.to_representation, for
speed): held here to what DRF's own field-by-field walk writes, item for item, in every
state the list can hold (running with SSH, volumes, a model and a cluster place; pending;
recovered; another account's seen by staff)."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework import serializers

from gpurental.api.instances import serializers as s
from gpurental.catalog.models import ImageTemplate
from gpurental.fleet.models import Zone
from gpurental.rentals.models import Instance
from gpurental.volumes.models import Volume
from tests.factories import InstanceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def many_states(running, alice, bob, node):
    zone = Zone.objects.create(name="eu-1")
    node.zone = zone
    node.save(update_fields=["zone"])
    ImageTemplate.objects.filter(pk=running.image_id).update(ssh_port=22)
    Instance.objects.filter(pk=running.pk).update(
        hf_model="org/model", cluster_id=uuid.uuid4(), cluster_rank=1, cluster_size=2
    )
    Volume.objects.create(
        account=alice, name="data", host=node, size_gb=10, instance=running, mount_path="/data"
    )
    InstanceFactory(user=alice, recovered_from=running, name="Not a DNS label!")
    InstanceFactory(user=bob, name="bobs")


def both_ways(client, monkeypatch, url: str) -> tuple[dict, dict]:
    with CaptureQueriesContext(connection) as queries:
        fast = client.get(url).json()
    # Key, count, page, held GPUs, volumes, the model cache: none per item (a column the
    # list's .only() leaves out would read each item again).
    assert len(queries) <= 7, [q["sql"][:120] for q in queries]
    with monkeypatch.context() as m:
        m.setattr(
            s.InstanceSerializer, "to_representation", serializers.ModelSerializer.to_representation
        )
        slow = client.get(url).json()
    return fast, slow


@pytest.mark.parametrize("who", ["alice", "carol"])
def test_the_hand_written_items_are_what_drf_writes(
    many_states, as_alice, as_carol, monkeypatch, who
):
    client = {"alice": as_alice, "carol": as_carol}[who]
    fast, slow = both_ways(client, monkeypatch, "/api/v1/instances/")
    assert fast == slow
    assert len(fast["results"]) == (2 if who == "alice" else 3)
    assert all(list(item) == s.InstanceSerializer.Meta.fields for item in fast["results"])
    mine = next(i for i in fast["results"] if i["ssh"])
    assert mine["volumes"] and mine["zone"] == "eu-1" and mine["cluster"]["rank"] == 1
    assert (mine["jupyter_url"] is not None) == (who == "alice")  # its owner's link only
    assert any(i["recovered_from"] for i in fast["results"])
