"""A customer's own image through the whole platform: the API, the control worker, a real
agent process, the Docker Engine and Debian's docker-registry with a login."""

from __future__ import annotations

import contextlib

import docker.errors
import pytest
import requests
from django.utils import timezone
from rest_framework.test import APIClient

from gpurental import imagerefs
from gpurental.accounts.services import api_key_create
from gpurental.agent.runtimes import sandboxes
from gpurental.billing.models import Charge
from gpurental.images.models import HostImage
from gpurental.images.selectors import platform_registry_auth
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
    agent, catalog, alice, registry, jupyter_in_registry, settings, docker_client
):
    # Not on this engine yet (another test may have pulled it; one of the engine group
    # using it now keeps it, hence APIError): the launch pulls it.
    with contextlib.suppress(docker.errors.ImageNotFound, docker.errors.APIError):
        docker_client.images.remove(jupyter_in_registry)
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


def test_a_customer_saves_their_instance_as_an_image_and_launches_it_again(
    agent,
    catalog,
    alice,
    bob,
    registry,
    platform_registry,
    jupyter_in_registry,
    settings,
    docker_client,
    tmp_path,
):
    from gpurental.images import registryapi
    from gpurental.images.models import SavedImage
    from tests.agent.test_root_in_container import a_deb, put, run

    _, template = catalog
    settings.CUSTOM_IMAGE_TEMPLATE = template.slug
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key_create(user=alice, name='t')[1]}")
    login = {"registry": registry.address, "username": "alice", "password": REGISTRY_USERS["alice"]}
    assert api.post("/api/v1/registry-logins/", login, format="json").status_code == 201
    launched = api.post(
        "/api/v1/instances/", {"gpu_model": "A10G", "image": jupyter_in_registry}, format="json"
    )
    assert launched.status_code == 201, launched.content
    instance = settled(launched.json()["id"], agent)
    assert instance.status == S.RUNNING, instance.status_reason

    # As root in it, the customer installs a package...
    container = docker_client.containers.get(f"gpurental-{instance.pk}")
    put(container, a_deb(tmp_path))
    assert run(container, "apt-get install -y /tmp/hello-gpr.deb")[0] == 0

    # ...stops it to free its GPUs: the stopped container stays on its host, its network
    # sandbox goes...
    assert api.post(f"/api/v1/instances/{instance.pk}/stop/").status_code == 200
    wait_for(
        lambda: Instance.objects.get(pk=instance.pk).status == S.STOPPED, 60, "the stop", agent
    )
    container.reload()
    assert container.status == "exited"
    sandbox = sandboxes.sandbox_name(str(instance.pk))
    assert not docker_client.containers.list(all=True, filters={"name": sandbox})

    # ...and saves the stopped instance as an image.
    saving = api.post(
        f"/api/v1/instances/{instance.pk}/save-image/", {"name": "with-hello"}, format="json"
    )
    assert saving.status_code == 202, saving.content
    assert saving.json()["status"] == "saving"
    saved_id = saving.json()["id"]
    wait_for(
        lambda: SavedImage.objects.get(pk=saved_id).status in ("ready", "failed"),
        120,
        "the host to save and push the image",
        agent,
    )
    saved = SavedImage.objects.get(pk=saved_id)
    assert saved.status == "ready", saved.status_reason
    assert saved.reference.startswith(f"{platform_registry.address}/a{alice.pk}/with-hello:")
    assert saved.size_bytes > 100_000_000 and saved.digest.startswith("sha256:")
    detail = api.get(f"/api/v1/saved-images/{saved_id}/").json()
    assert [e["to_status"] for e in detail["events"] if e["to_status"]] == ["saving", "ready"]
    # The run's secrets are blanked in the image; the pushed manifest is in the registry.
    env = docker_client.images.get(saved.reference).attrs["Config"]["Env"]
    assert "JUPYTER_TOKEN=" in env and not any(instance.jupyter_token in e for e in env)
    repository = imagerefs.parse(saved.reference).repository
    auth = platform_registry_auth(repository, ("pull",), subject="the test")
    assert registryapi.manifest_exists(saved.reference, auth)
    # A token is good for its own repository only: another account's is out of its reach.
    other = platform_registry_auth(f"a{bob.pk}/with-hello", ("pull", "push"), subject="a host")
    refused = requests.head(
        f"http://{platform_registry.address}/v2/{repository}/manifests/{saved.digest}",
        headers={"Authorization": f"Bearer {other['registrytoken']}"},
        timeout=10,
    )
    assert refused.status_code == 401

    # Nobody else may launch it; its owner launches it, pulled afresh, and the package is there.
    as_bob = APIClient()
    as_bob.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key_create(user=bob, name='t')[1]}")
    refused = as_bob.post(
        "/api/v1/instances/", {"gpu_model": "A10G", "image": saved.reference}, format="json"
    )
    assert refused.status_code == 400 and "none of your saved images" in refused.content.decode()
    instance_terminate(instance=instance, actor=alice, now=timezone.now())
    wait_for(
        lambda: not Allocation.objects.filter(instance=instance, period__upper_inf=True).exists(),
        30,
        "GPUs free",
        agent,
    )
    docker_client.images.remove(saved.reference)
    again = api.post(
        "/api/v1/instances/", {"gpu_model": "A10G", "image": saved.reference}, format="json"
    )
    assert again.status_code == 201, again.content
    relaunched = settled(again.json()["id"], agent)
    assert relaunched.status == S.RUNNING, relaunched.status_reason
    container = docker_client.containers.get(f"gpurental-{relaunched.pk}")
    assert run(container, "hello-gpr") == (0, "hello from a package")
    instance_terminate(instance=relaunched, actor=alice, now=timezone.now())

    # Deleted: gone from the list and from the registry.
    assert api.delete(f"/api/v1/saved-images/{saved_id}/").status_code == 204
    assert api.get("/api/v1/saved-images/").json()["results"] == []
    assert not registryapi.manifest_exists(saved.reference, auth)
