"""Placement prefers hosts whose shared cache has the model a launch asks for; the rest of
the order (NVLink sets, best fit, names) applies within each group, and the database still
has the last word."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from gpurental.accounts.services import api_key_create
from gpurental.modelcache.models import CachedModel, CacheStatus
from gpurental.rentals import placement
from gpurental.rentals.exceptions import RentalError
from gpurental.rentals.models import Instance, InstanceEvent
from gpurental.rentals.placement import FreeGpu, HostFree
from gpurental.rentals.services import lifecycle as lc
from tests.api.conftest import assert_error

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def _host(host_id, name, free):
    return HostFree(host_id, name, tuple(FreeGpu(host_id * 100 + i, i, frozenset()) for i in free))


def test_preferred_hosts_come_first_each_group_in_best_fit_order():
    snug, roomy, cached_roomy, cached_snug = (
        _host(1, "a-snug", [0]),
        _host(2, "b-roomy", [0, 1, 2, 3]),
        _host(3, "c-cached-roomy", [0, 1, 2, 3, 4, 5]),
        _host(4, "d-cached-snug", [0, 1]),
    )
    hosts = [snug, roomy, cached_roomy, cached_snug]
    order = [p.host_name for p in placement.propose(hosts, 1, preferred=frozenset({3, 4}))]
    first_of_each = list(dict.fromkeys(order))
    assert first_of_each == ["d-cached-snug", "c-cached-roomy", "a-snug", "b-roomy"]
    # Without a preference, the plain best-fit order.
    assert list(dict.fromkeys(p.host_name for p in placement.propose(hosts, 1))) == [
        "a-snug",
        "d-cached-snug",
        "b-roomy",
        "c-cached-roomy",
    ]


def test_a_preferred_host_that_cannot_fit_the_launch_is_passed_over():
    hosts = [_host(1, "a", [0, 1, 2, 3]), _host(2, "cached", [0])]
    assert {p.host_name for p in placement.propose(hosts, 2, preferred=frozenset({2}))} == {"a"}


@pytest.fixture
def fleet(make_host, a100):
    """node1 is the best fit (2 free GPUs); node2 (8 free) has the model in its cache."""
    node1 = make_host("node1", a100, count=2, hf_cache_dir="/srv/hf")
    node2 = make_host("node2", a100, count=8, hf_cache_dir="/srv/hf")
    CachedModel.objects.create(host=node2, repo_id=MODEL, status=CacheStatus.READY)
    return node1, node2


def test_a_launch_asking_for_a_cached_model_lands_on_a_host_that_has_it(
    fleet, alice, image, a100, sent, django_capture_on_commit_callbacks
):
    node1, node2 = fleet
    plain = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    assert plain.host == node1  # best fit

    with django_capture_on_commit_callbacks(execute=True):
        with_model = lc.instance_launch(
            user=alice, image=image, gpu_model=a100, gpu_count=1, hf_model=MODEL
        )
    assert with_model.host == node2
    assert with_model.hf_model == MODEL and with_model.mount_model_cache
    reason = InstanceEvent.objects.filter(instance=with_model).first().reason
    assert f"model {MODEL} is in this host's cache" in reason
    assert sent[-1]["spec"]["mount_model_cache"] is True


def test_when_the_hosts_with_the_model_are_full_it_goes_elsewhere_and_says_so(
    fleet, alice, image, a100, sent
):
    node1, node2 = fleet
    alice.gpu_quota = 16
    alice.save(update_fields=["gpu_quota"])
    lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=8)  # fills node2
    instance = lc.instance_launch(
        user=alice, image=image, gpu_model=a100, gpu_count=1, hf_model=MODEL
    )
    assert instance.host == node1
    reason = InstanceEvent.objects.filter(instance=instance).first().reason
    assert "is not in this host's cache: it downloads into the instance's own cache" in reason


def test_a_model_being_filled_or_evicted_does_not_attract_launches(fleet, alice, image, a100):
    node1, node2 = fleet
    CachedModel.objects.filter(host=node2).update(status=CacheStatus.FILLING)
    CachedModel.objects.create(host=node1, repo_id=MODEL + "-x", status=CacheStatus.READY)
    with pytest.raises(RentalError, match="is in no host's cache") as refused:
        lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1, hf_model=MODEL)
    assert refused.value.field == "model"
    assert not Instance.objects.exists()


@pytest.fixture
def as_alice(alice):
    _, raw = api_key_create(user=alice, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_the_api_launches_with_a_cached_model_and_shows_it(
    fleet, as_alice, image, sent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = as_alice.post(
            "/api/v1/instances/", {"gpu_model": "A100", "image": image.slug, "model": MODEL}
        )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["host"] == "node2"
    assert body["hf_model"] == MODEL and body["hf_model_cached"] is True


@pytest.mark.parametrize(
    ("model", "why"),
    [
        ("acme/not-cached", "is in no host's cache; cached models: " + MODEL),
        ("../../etc/passwd", "is not a Hugging Face repository id"),
    ],
)
def test_the_api_refuses_an_unknown_model_naming_the_field(
    fleet, as_alice, image, model, why, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = as_alice.post(
            "/api/v1/instances/", {"gpu_model": "A100", "image": image.slug, "model": model}
        )
    error = assert_error(response, 400, "invalid", field="model")
    assert why in error["message"]
    assert not Instance.objects.exists()
