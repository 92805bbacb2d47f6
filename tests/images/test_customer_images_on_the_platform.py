"""A customer's own image through the whole platform: the API, the control worker, a real
agent process, the Docker Engine and Debian's docker-registry with a login."""

from __future__ import annotations

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from gpurental.accounts.services import api_key_create
from gpurental.billing.models import Charge
from gpurental.images.models import HostImage
from gpurental.rentals.models import Allocation, Instance, InstanceStatus
from gpurental.rentals.services.lifecycle import instance_terminate
from gpurental.testing.agent_process import wait_for
from tests.stack import REGISTRY_USERS

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
S = InstanceStatus


def settled(instance_id, agent, timeout=90) -> Instance:
    wait_for(
        lambda: Instance.objects.get(pk=instance_id).status in (S.RUNNING, S.FAILED),
        timeout,
        "the launch to run or fail",
        agent,
    )
    return Instance.objects.get(pk=instance_id)


def test_a_customer_launches_their_image_from_a_private_registry(
    agent, catalog, alice, registry, jupyter_in_registry, settings
):
    _, template = catalog
    settings.CUSTOM_IMAGE_TEMPLATE = template.slug
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key_create(user=alice, name='t')[1]}")
    login = {"registry": registry.address, "username": "alice", "password": "wrong"}
    assert api.post("/api/v1/registry-logins/", login, format="json").status_code == 201

    # A wrong password: failed, in the registry's words, the GPUs free again, nothing billed.
    response = api.post(
        "/api/v1/instances/", {"gpu_model": "A10G", "image": jupyter_in_registry}, format="json"
    )
    assert response.status_code == 201, response.content
    failed = settled(response.json()["id"], agent)
    assert failed.status == S.FAILED
    assert "refused the login saved for it" in failed.status_reason
    assert "unauthorized" in failed.status_reason
    assert not Allocation.objects.filter(instance=failed, period__upper_inf=True).exists()
    assert not Charge.objects.filter(instance=failed).exists()

    # The right one: it runs, and its events carry the pull's figures.
    login["password"] = REGISTRY_USERS["alice"]
    assert api.post("/api/v1/registry-logins/", login, format="json").status_code == 201
    response = api.post(
        "/api/v1/instances/", {"gpu_model": "A10G", "image": jupyter_in_registry}, format="json"
    )
    instance = settled(response.json()["id"], agent)
    assert instance.status == S.RUNNING, instance.status_reason
    pulls = [e for e in instance.events.filter(step="pulling_image") if e.data.get("pull")]
    assert pulls and pulls[-1].data["pull"].keys() == {
        "layers",
        "layers_done",
        "bytes",
        "total",
        "percent",
    }
    body = api.get(f"/api/v1/instances/{instance.pk}/").json()
    assert body["image_ref"] == jupyter_in_registry
    figures = [e["pull"] for e in body["events"] if e["pull"]]
    assert figures[-1] == pulls[-1].data["pull"]  # the API's events carry them
    wait_for(
        lambda: HostImage.objects.filter(host=agent.host, reference=jupyter_in_registry).exists(),
        30,
        "the host's heartbeat to list the image",
        agent,
    )
    instance_terminate(instance=instance, actor=alice, now=timezone.now())
