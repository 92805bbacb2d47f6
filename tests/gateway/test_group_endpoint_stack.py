"""A group's endpoint end to end: a real serving-echo container, launched by the host
agent on Docker, registered as the group's serving replica, answering through the real
gateway process at ``grp-<id>.gw.localhost``."""

from __future__ import annotations

import hashlib

import pytest
import requests

from gpurental.catalog.models import Plan
from gpurental.groups.events import group_channel
from gpurental.groups.load import load_of
from gpurental.rentals.events import state_redis
from gpurental.rentals.models import Instance
from gpurental.testing.agent_process import wait_for
from tests.factories import GroupFactory, ImageTemplateFactory
from tests.gateway.test_http_gateway_stack import launch_running

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

SERVING_IMAGE = "gpurental/serving-echo:latest"
ENDPOINT_KEY = "gek_" + "e" * 40


@pytest.fixture
def serving_image(docker_client, db):
    import docker

    try:
        docker_client.images.get(SERVING_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{SERVING_IMAGE} is not built; run `make images`")
    return ImageTemplateFactory(
        slug="serving-echo",
        name="Serving echo",
        image=SERVING_IMAGE,
        port=8000,
        http_ports=[8000],
    )


def test_a_serving_echo_replica_answers_through_the_group_endpoint(
    gateway, gateway_port, agent, catalog, serving_image, alice, bob
):
    gpu_model, _ = catalog
    group = GroupFactory(
        user=alice,
        image=serving_image,
        plan=Plan.objects.get(slug="a10g-x1"),
        port=8000,
        endpoint_key_hash=hashlib.sha256(ENDPOINT_KEY.encode()).hexdigest(),
    )
    # The agent's readiness check passes only if the image honours the token contract.
    instance = launch_running(alice, serving_image, gpu_model)
    Instance.objects.filter(pk=instance.pk).update(group=group, group_role="serving")
    state_redis().publish(group_channel(group.pk), "changed")

    host = f"grp-{group.pk}.gw.localhost:{gateway_port}"

    def call(key: str | None, path: str = "/infer?ms=50"):
        headers = {"Host": host}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return requests.post(f"{gateway}{path}", headers=headers, data=b"x" * 10, timeout=30)

    assert call(None).status_code == 401
    # The first request waits in the queue until the replica's first health check passes.
    answer = call(ENDPOINT_KEY)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["replica"] == f"gpurental-{str(instance.pk)[:8]}"
    assert body["ms"] == 50 and body["bytes"] == 10
    status = requests.get(
        f"{gateway}/status",
        headers={"Host": host, "Authorization": f"Bearer {ENDPOINT_KEY}"},
        timeout=30,
    )
    assert status.status_code == 200 and status.json() == {"inflight": 0, "busy": False}

    wait_for(lambda: load_of(group.pk).requests >= 2, 15, "the gateway's load report")
    seen = load_of(group.pk)
    assert seen.replicas[str(instance.pk)]["healthy"] is True
