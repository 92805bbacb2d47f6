"""The source article's snippet, as written, against the live platform: the real web
process, control worker, host agent and Docker Engine."""

from __future__ import annotations

import threading
import time
from decimal import Decimal

import pytest

from gpurental.accounts.services import api_key_create
from gpurental.billing.services import credit_add
from gpurental.catalog.models import ImageAlias
from gpurental.fleet.models import Host
from tests.factories import ImageTemplateFactory
from tests.stack import open_link

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def pytorch_image(db):
    # As seed_demo has it: the article's "pytorch-2.1" is an alias of the PyTorch template,
    # whose CPU variant (built by `make images`) runs on simulated hosts.
    template = ImageTemplateFactory(
        slug="pytorch-2.13",
        name="PyTorch 2.13 + CUDA 13.0 + JupyterLab",
        image="gpurental/pytorch:2.13.0-cuda",
        cpu_image="gpurental/pytorch:2.13.0-cpu",
    )
    ImageAlias.objects.create(name="pytorch-2.1", template=template)
    return template


def test_the_articles_snippet_runs_as_written(
    web_server, gateway, agent, catalog, pytorch_image, alice, tmp_path, docker_client
):
    cache = agent.hf_cache  # the agent's own GPURENTAL_HF_CACHE_DIR
    Host.objects.filter(name=agent.host.name).update(hf_cache_dir=str(cache))
    _, api_key = api_key_create(user=alice, name="sdk test")
    credit_add(user=alice, amount=Decimal("10.00"), description="test credit")
    base_url = web_server

    from gpurental.client import Client

    client = Client(api_key=api_key, base_url=base_url)
    instance = client.create_instance(
        gpu_type="A10G", framework="pytorch-2.1", model_repo="huggingface"
    )
    url = instance.connect()  # waits until running, returns a one-time link into JupyterLab

    assert client._long_poll is True  # Daphne held the request until `running`, no polling
    assert url.startswith(f"http://{instance.id}.gw.localhost:") and "/_gw/enter?t=" in url
    assert open_link(gateway, url) == 200  # JupyterLab answers through the gateway
    import requests

    container = docker_client.containers.get(f"gpurental-{instance.id}")
    # The article's "pytorch-2.1" ran the PyTorch image `make images` builds, and says so.
    assert instance.raw["image"] == "pytorch-2.13" and instance.raw["image_alias"] == "pytorch-2.1"
    assert "gpurental/pytorch:2.13.0-cpu" in container.image.tags
    assert "HF_HOME=/workspace/.cache/huggingface" in container.attrs["Config"]["Env"]
    assert "GPURENTAL_HF_SHARED=/models/huggingface" in container.attrs["Config"]["Env"]
    mount = next(m for m in container.attrs["Mounts"] if m["Destination"] == "/models/huggingface")
    assert mount["Source"] == str(cache) and mount["RW"] is False

    # A long-poll waiting in the web process holds up nobody else's requests.
    waiting = threading.Thread(
        target=requests.get,
        args=(f"{base_url}/api/v1/instances/{instance.id}/",),
        kwargs={
            "params": {"wait_for": "stopped", "timeout": "3"},
            "headers": {"Authorization": f"Bearer {api_key}"},
            "timeout": 30,
        },
    )
    waiting.start()
    time.sleep(0.3)
    asked = time.monotonic()
    assert [i.id for i in client.list_instances(status="running")] == [instance.id]
    assert waiting.is_alive() and time.monotonic() - asked < 2.5
    waiting.join()
    instance.terminate()
    instance.wait_until("terminated", timeout=60)


def test_model_repo_without_a_host_cache_is_a_clear_error(
    web_server, agent, catalog, pytorch_image, alice
):
    from gpurental.client import Client, ValidationError

    _, api_key = api_key_create(user=alice, name="sdk test")
    credit_add(user=alice, amount=Decimal("10.00"), description="test credit")
    client = Client(api_key=api_key, base_url=web_server)
    with pytest.raises(ValidationError, match="no shared Hugging Face model cache"):
        client.create_instance(gpu_type="A10G", framework="pytorch-2.1", model_repo="huggingface")
