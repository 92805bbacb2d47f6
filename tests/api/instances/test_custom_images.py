"""Launching a customer's own image over the API: the reference is checked before anything
is held; the start spec carries it, the operator's pull policy, and the account's registry
login sealed for that host alone; placement prefers hosts that have the image cached."""

from __future__ import annotations

import pytest

from gpurental.fleet.services import host_heartbeat_record
from gpurental.images.models import HostImage
from gpurental.images.services import registry_credential_save
from gpurental.rentals.models import Allocation, Instance
from tests.api.conftest import assert_error

URL = "/api/v1/instances/"
REF = "registry.example.com/alice/train:1"


@pytest.fixture
def launch(as_alice, django_capture_on_commit_callbacks):
    def post(body, client=as_alice):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(URL, body, format="json")

    return post


def test_a_reference_launches_with_the_template_s_settings_and_the_pull_policy(
    launch, node, image, sent, alice, bob, settings
):
    settings.CUSTOM_IMAGE_MAX_GB, settings.CUSTOM_IMAGE_PULL_TIMEOUT = 7, 300
    registry_credential_save(
        account=alice, registry="registry.example.com", username="al", password="pw-a", actor=alice
    )
    registry_credential_save(
        account=bob, registry="registry.example.com", username="bo", password="pw-b", actor=bob
    )
    response = launch({"gpu_model": "a100", "image": REF})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["image_ref"] == REF and body["image"] == image.slug
    assert "pw-a" not in response.content.decode()
    spec = sent[0]["spec"]
    assert spec["image"] == REF
    assert spec["container_port"] == image.port
    assert spec["pull"] == {
        "max_bytes": 7 * 1024**3,
        "timeout_s": 300,
        "auth": {"username": "al", "password": "pw-a", "serveraddress": "registry.example.com"},
    }
    assert "launched on node1" in Instance.objects.get(pk=body["id"]).events.first().reason


def test_without_a_saved_login_the_pull_is_anonymous(launch, node, image, sent):
    assert launch({"gpu_model": "a100", "image": "python:3.11"}).status_code == 201
    assert sent[0]["spec"]["image"] == "python:3.11"
    assert sent[0]["spec"]["pull"]["auth"] is None


def test_a_catalog_image_has_no_pull_policy(launch, node, image, sent):
    assert launch({"gpu_model": "a100", "image": image.slug}).status_code == 201
    assert "pull" not in sent[0]["spec"]


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("Alice/Train:1", "must be lowercase"),
        ("reg.io/a/b@sha256:123", "64 lowercase hex digits"),
        ("reg.io/a:-1", "the tag '-1'"),
        ("no-such-template", "unknown image 'no-such-template'"),
    ],
)
def test_a_malformed_reference_is_a_400_before_anything_is_held(
    launch, node, image, sent, name, says
):
    error = assert_error(
        launch({"gpu_model": "a100", "image": name}), 400, "invalid", field="image"
    )
    assert says in error["message"]
    assert not Instance.objects.exists() and not Allocation.objects.exists() and not sent


def test_a_registry_the_operator_does_not_allow_is_a_400(launch, node, image, sent, settings):
    settings.CUSTOM_IMAGE_REGISTRIES = ["registry.example.com", "*.corp.example"]
    assert launch({"gpu_model": "a100", "image": "eu.corp.example/x:1"}).status_code == 201
    error = assert_error(
        launch({"gpu_model": "a100", "image": "ghcr.io/x/y:1"}), 400, "invalid", field="image"
    )
    assert "images from ghcr.io are not allowed here" in error["message"]
    assert "registry.example.com, *.corp.example" in error["message"]
    assert Instance.objects.count() == 1


def test_without_the_operator_s_template_customer_images_are_off(launch, node, image, settings):
    settings.CUSTOM_IMAGE_TEMPLATE = "gone"
    error = assert_error(launch({"gpu_model": "a100", "image": REF}), 400, "invalid", field="image")
    assert "CUSTOM_IMAGE_TEMPLATE=gone" in error["message"]


def beat_with_images(host, images, now=None):
    from django.utils import timezone

    host_heartbeat_record(
        host=host,
        inventory=None,
        containers=None,
        runtime="docker",
        gpu_source="simulated",
        agent_version="t",
        sent_at=None,
        now=now or timezone.now(),
        images=images,
    )


def test_placement_prefers_a_host_with_the_image_in_its_cache(launch, make_host, a100, image, sent):
    # node1 has more GPUs free, so best fit alone would pick node2 (fewer left over) first.
    make_host("node1", a100, count=8)
    cached = make_host("node2", a100, count=8)
    make_host("node3", a100, count=4)
    beat_with_images(cached, [{"ref": REF, "bytes": 5_000_000, "last_used": 1.7e9}])
    assert HostImage.objects.get().host == cached

    response = launch({"gpu_model": "a100", "image": REF})
    assert response.json()["host"] == "node2"
    assert "is in this host's cache" in Instance.objects.get().events.first().reason
    response = launch({"gpu_model": "a100", "image": "registry.example.com/other:1"})
    assert response.json()["host"] == "node3"  # best fit: nothing cached anywhere


def test_a_heartbeat_s_listing_replaces_the_host_s_images_and_is_bounded(make_host, a100):
    host = make_host("node1", a100)
    beat_with_images(host, [{"ref": "a/b:1", "bytes": 10}, {"ref": "a/c:1", "bytes": 20}])
    beat_with_images(
        host, [{"ref": "a/c:1", "bytes": 25}, "junk", {"ref": 3}, {"ref": "a/d:1", "bytes": -5}]
    )
    rows = dict(HostImage.objects.values_list("reference", "size_bytes"))
    assert rows == {"a/c:1": 25, "a/d:1": 0}
    beat_with_images(host, None)  # no listing in this beat: nothing changes
    assert HostImage.objects.count() == 2
    beat_with_images(host, [{"ref": f"r/{i}:1"} for i in range(600)])
    assert HostImage.objects.count() == 500
