"""A cluster: N instances in one request, on one host, each told its rank and where rank 0
is; all launch or none does (rentals.services.clusters)."""

from __future__ import annotations

import uuid

import pytest
from django.db import IntegrityError

from gpurental.rentals.exceptions import NoCapacity, RentalError
from gpurental.rentals.models import Allocation, Instance
from gpurental.rentals.services.clusters import cluster_launch
from tests.api.conftest import assert_error
from tests.factories import InstanceFactory


@pytest.fixture
def launch(django_capture_on_commit_callbacks, image):
    def run(user, **kwargs):
        kwargs.setdefault("image", image)
        with django_capture_on_commit_callbacks(execute=True):
            return cluster_launch(user=user, **kwargs)

    return run


def test_a_cluster_lands_on_one_host_and_each_rank_knows_its_place(
    alice, a100, make_host, sent, launch
):
    make_host("big", a100, count=8)
    ranks = launch(alice, gpu_model=a100, gpu_count=2, size=3, name="train")
    assert [i.name for i in ranks] == ["train-0", "train-1", "train-2"]
    assert len({i.host_id for i in ranks}) == 1
    assert {i.cluster_id for i in ranks} == {ranks[0].cluster_id}
    specs = {m["spec"]["instance_id"]: m["spec"] for m in sent if m["task"] == "instance_start"}
    second = specs[str(ranks[1].pk)]
    assert {k: second["env"][k] for k in ("MASTER_ADDR", "WORLD_SIZE", "RANK")} == {
        "MASTER_ADDR": f"{ranks[0].pk}.internal",
        "WORLD_SIZE": "3",
        "RANK": "1",
    }
    assert second["env"]["NCCL_SOCKET_IFNAME"] == second["env"]["GLOO_SOCKET_IFNAME"] == "eth1"
    # Rank 0 answers to that name on the account's private network.
    first = specs[str(ranks[0].pk)]["private_network"]
    assert f"{ranks[0].pk}.internal" in first["names"] and "train-0.internal" in first["names"]
    assert first["subnet"] == second["private_network"]["subnet"]


def test_a_rank_that_does_not_fit_launches_none(alice, a100, make_host, sent, launch):
    make_host("small", a100, count=3)
    make_host("other", a100, count=2)  # room for a rank, but not on rank 0's host
    with pytest.raises(NoCapacity, match="no host has 4× A100 free for a cluster of 2 × 2") as err:
        launch(alice, gpu_model=a100, gpu_count=2, size=2)
    assert err.value.field == "size"
    assert not Instance.objects.exists() and not Allocation.objects.exists()
    assert sent == []


def test_the_cluster_goes_to_the_host_that_holds_it_all(alice, a100, make_host, sent, launch):
    make_host("two", a100, count=2)  # best fit for one 2-GPU rank, too small for two
    make_host("eight", a100, count=8)
    ranks = launch(alice, gpu_model=a100, gpu_count=2, size=2)
    assert {i.host.name for i in ranks} == {"eight"}


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"size": 1}, "size", "a cluster has 2 to 16 instances, not 1"),
        ({"size": 2, "placement": "spread"}, "placement", "needs the private network to reach"),
    ],
)
def test_refusals_name_the_field(alice, a100, make_host, launch, kwargs, field, message):
    make_host("big", a100)
    with pytest.raises(RentalError, match=message) as err:
        launch(alice, gpu_model=a100, gpu_count=1, **kwargs)
    assert err.value.field == field


def test_the_database_refuses_a_rank_outside_its_cluster(alice, a100):
    with pytest.raises(IntegrityError):
        InstanceFactory(user=alice, cluster_id=uuid.uuid4(), cluster_rank=2, cluster_size=2)


def test_the_api_launches_a_cluster_and_shows_each_instances_place(
    as_alice, as_bob, a100, make_host, sent, image, django_capture_on_commit_callbacks
):
    make_host("big", a100)
    with django_capture_on_commit_callbacks(execute=True):
        response = as_alice.post(
            "/api/v1/instances/cluster/",
            {"gpu_model": "A100", "gpu_count": 1, "image": image.slug, "size": 2, "name": "ddp"},
            format="json",
        )
    assert response.status_code == 201, response.content
    body = response.json()
    assert [i["name"] for i in body["instances"]] == ["ddp-0", "ddp-1"]
    assert body["instances"][1]["cluster"] == {"id": body["id"], "rank": 1, "size": 2}
    assert body["instances"][0]["private_names"][0] == "ddp-0.internal"
    assert as_bob.get(f"/api/v1/instances/{body['instances'][0]['id']}/").status_code == 404
    refused = as_alice.post(
        "/api/v1/instances/cluster/",
        {"gpu_model": "A100", "gpu_count": 1, "image": image.slug, "size": 40},
        format="json",
    )
    assert_error(refused, 400, "invalid", field="size")
