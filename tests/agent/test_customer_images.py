"""Customers' own images on the real Docker Engine, pulled from Debian's docker-registry
(the CNCF distribution) with a login: progress in layers and bytes, the registry's
refusals in words, the operator's size and time limits, and the host's cache of them."""

from __future__ import annotations

import os
import socket
import threading
import uuid

import docker.errors
import pytest
import requests

from gpurental import imagerefs
from gpurental.agent.runtimes import RuntimeFailure
from gpurental.agent.runtimes.base import PullPolicy
from gpurental.agent.runtimes.docker import DockerRuntime, container_name
from gpurental.agent.runtimes.imagecache import ImageCache
from gpurental.agent.runtimes.pulls import pull
from tests.stack import push_to, registry_login

pytestmark = pytest.mark.docker
GB = 1024**3
BASE_IMAGE = "gpurental/base:bookworm"  # what make images builds the others from


class Lines:
    """A runtime's progress callback that keeps each line and its pull figures."""

    def __init__(self):
        self.lines: list[tuple[str, dict | None]] = []

    def __call__(self, message: str, pull: dict | None = None) -> None:
        self.lines.append((message, pull))

    @property
    def figures(self) -> list[dict]:
        return [f for _, f in self.lines if f is not None]


def gone(client, reference: str) -> bool:
    try:
        client.images.get(reference)
    except docker.errors.ImageNotFound:
        return True
    return False


@pytest.fixture
def small_image(docker_runtime, registry, tmp_path):
    """A new image in the registry only (not on this engine): the base image plus one layer
    of 8 MB of random bytes, which no compression shrinks."""
    client = docker_runtime.client
    tag = uuid.uuid4().hex[:10]
    (tmp_path / "blob").write_bytes(os.urandom(8 * 1024 * 1024))
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nCOPY blob /blob\n")
    built, _ = client.images.build(path=str(tmp_path), tag=f"gpurental-test/small:{tag}", rm=True)
    reference = push_to(client, registry, f"gpurental-test/small:{tag}", "alice/small", tag)
    client.images.remove(built.id, force=True)
    yield reference
    if not gone(client, reference):
        client.images.remove(reference, force=True)


def test_a_pull_reports_layers_bytes_and_percent_and_ends_at_100(
    docker_runtime, registry, small_image
):
    lines = Lines()
    policy = PullPolicy(max_bytes=10 * GB, timeout_s=120, auth=registry_login(registry))
    pull(docker_runtime.client.api, imagerefs.parse(small_image), policy, lines)
    first, last = lines.figures[0], lines.figures[-1]
    assert first == {"layers": 0, "layers_done": 0, "bytes": 0, "total": 0, "percent": 0.0}
    assert last["layers"] >= 2 and last["layers_done"] == last["layers"]  # base + the blob
    assert last["percent"] == 100.0
    assert last["bytes"] == last["total"] >= 8 * 1024 * 1024  # the blob's layer downloaded
    assert lines.lines[-1][0].startswith(f"pulling {small_image}: ")
    assert f"{last['layers']}/{last['layers']} layers" in lines.lines[-1][0]
    assert not gone(docker_runtime.client, small_image)


@pytest.mark.parametrize(
    ("login", "tag", "says"),
    [
        ({"username": "alice", "password": "wrong"}, "1", "refused the login saved for it"),
        (None, "1", "asks for a login, and none is saved for it"),
        ("alice", "no-such-tag", "has no image alice/jupyter:no-such-tag"),
    ],
)
def test_the_registry_s_refusal_is_said_in_words_and_nothing_is_left(
    docker_runtime, registry, jupyter_in_registry, make_spec, login, tag, says
):
    auth = registry_login(registry) if login == "alice" else login
    if isinstance(auth, dict):
        auth = {**auth, "serveraddress": registry.address}
    reference = jupyter_in_registry.rsplit(":", 1)[0] + f":{tag}"
    spec = make_spec(image=reference, pull=PullPolicy(10 * GB, 120, auth))
    with pytest.raises(RuntimeFailure) as failed:
        docker_runtime.start(spec, Lines())
    assert says in str(failed.value) and "registry said:" in str(failed.value)
    if tag != "1":  # (tag 1 may be on this engine from another test's launch)
        assert gone(docker_runtime.client, reference)
    with pytest.raises(docker.errors.NotFound):
        docker_runtime.client.containers.get(container_name(spec.instance_id))


def test_a_registry_that_does_not_answer(docker_runtime, make_spec):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spec = make_spec(image=f"127.0.0.1:{port}/a/b:1", pull=PullPolicy(10 * GB, 60, None))
    with pytest.raises(RuntimeFailure, match=rf"the registry 127.0.0.1:{port} does not answer"):
        docker_runtime.start(spec, Lines())


def test_a_registry_that_stalls_is_given_up_at_the_pull_timeout(docker_runtime):
    stalled = socket.socket()  # accepts, then never says a word
    stalled.bind(("127.0.0.1", 0))
    stalled.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        stalled.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(stalled.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    reference = imagerefs.parse(f"127.0.0.1:{stalled.getsockname()[1]}/a/b:1")
    try:
        with pytest.raises(RuntimeFailure, match=r"took longer than this platform allows \(2 s"):
            pull(docker_runtime.client.api, reference, PullPolicy(10 * GB, 2, None), Lines())
    finally:
        stop.set()
        for conn in held:
            conn.close()
        stalled.close()


def test_an_image_over_the_limit_is_refused_while_pulling_or_after(
    docker_runtime, registry, small_image, make_spec
):
    login = registry_login(registry)
    # The blob's layer alone (8 MB, as the registry sends it) is over 1 MB: the pull stops.
    spec = make_spec(image=small_image, pull=PullPolicy(1024 * 1024, 120, login))
    with pytest.raises(
        RuntimeFailure, match=r"larger than this platform allows .* limit is 0.00 GB"
    ):
        docker_runtime.start(spec, Lines())
    assert gone(docker_runtime.client, small_image)
    # Under 100 MB to download, but with the base image 190 MB unpacked: pulled, then removed.
    spec = make_spec(image=small_image, pull=PullPolicy(100 * 1024 * 1024, 120, login))
    with pytest.raises(RuntimeFailure, match=r"larger than this platform allows"):
        docker_runtime.start(spec, Lines())
    assert gone(docker_runtime.client, small_image)


def test_a_customer_image_runs_and_every_launch_asks_the_registry_again(
    docker_runtime, registry, jupyter_in_registry, make_spec, cleanup, tmp_path
):
    cache = ImageCache(str(tmp_path / "images.json"), limit_bytes=10 * GB)
    runtime = DockerRuntime(client=docker_runtime.client, ready_timeout_s=60, image_cache=cache)
    if not gone(runtime.client, jupyter_in_registry):  # (another test may have pulled it)
        runtime.client.images.remove(jupyter_in_registry)
    spec = make_spec(
        image=jupyter_in_registry, pull=PullPolicy(10 * GB, 120, registry_login(registry))
    )
    lines = Lines()
    started = runtime.start(spec, lines)
    cleanup(runtime, spec.instance_id)
    assert (
        requests.get(
            f"http://{started.host}:{started.port}/api/status",
            headers={"Authorization": f"token {spec.token}"},
            timeout=5,
        ).status_code
        == 200
    )
    assert lines.lines[0][0] == f"pulling {jupyter_in_registry} from {registry.address}"
    [entry] = cache.listing()
    assert entry["ref"] == jupyter_in_registry and entry["bytes"] > 100_000_000
    runtime.remove(spec.instance_id)

    # Cached here now; still, a launch without the login is refused by the registry, so a
    # private image one account pulled never runs for another that may not pull it. (The
    # registry is asked while the container starts; it goes when the answer is no.)
    other = make_spec(image=jupyter_in_registry, pull=PullPolicy(10 * GB, 120, None))
    lines = Lines()
    with pytest.raises(RuntimeFailure, match="asks for a login"):
        runtime.start(other, lines)
    assert lines.lines[0][0].startswith(f"checking {jupyter_in_registry} with its registry")
    with pytest.raises(docker.errors.NotFound):
        runtime.client.containers.get(container_name(other.instance_id))


def test_the_least_recently_used_images_go_when_the_cache_is_over_its_limit(
    docker_runtime, registry, small_image, tmp_path
):
    client = docker_runtime.client
    cache = ImageCache(str(tmp_path / "images.json"), limit_bytes=1)  # keeps only the newest
    runtime = DockerRuntime(client=client, image_cache=cache)
    policy = PullPolicy(10 * GB, 120, registry_login(registry))
    second = small_image.rsplit(":", 1)[0] + ":copy"
    client.api.pull(
        small_image.rsplit(":", 1)[0], small_image.rsplit(":", 1)[1], auth_config=policy.auth
    )
    client.images.get(small_image).tag(second.rsplit(":", 1)[0], "copy")
    try:
        runtime.ensure_image(small_image, Lines(), pull=policy)
        assert [e["ref"] for e in cache.listing()] == [small_image]
        # The copy is not in the registry; as far as the cache knows it was pulled earlier.
        cache.used(second, 1)
        cache._entries[second]["last_used"] = 0  # noqa: SLF001 - the oldest
        runtime._evict_images(keep=small_image)  # noqa: SLF001
        assert gone(client, second) and not gone(client, small_image)
        assert [e["ref"] for e in cache.listing()] == [small_image]
    finally:
        if not gone(client, second):
            client.images.remove(second)


def test_a_cached_image_whose_tag_moved_on_is_replaced_by_the_new_one(
    docker_runtime, registry, small_image, make_spec, cleanup, tmp_path, monkeypatch
):
    """The registry is asked while the cached image's container starts; when the tag now
    names another image, that one is pulled and the container made again from it."""
    client = docker_runtime.client
    # A registry slower than the engine (the usual case, over a network): its answer comes
    # once the container from the cached image exists. Here it would often win the race,
    # and the container would be made from the new image at once.
    created = threading.Event()
    create, check = docker_runtime._create_and_start, docker_runtime._ensure_customer_image

    def create_then_let_the_registry_answer(*args, **kwargs):
        try:
            return create(*args, **kwargs)
        finally:
            created.set()

    def answer_once_the_container_exists(*args, **kwargs):
        assert created.wait(60)
        return check(*args, **kwargs)

    monkeypatch.setattr(docker_runtime, "_create_and_start", create_then_let_the_registry_answer)
    monkeypatch.setattr(docker_runtime, "_ensure_customer_image", answer_once_the_container_exists)
    policy = PullPolicy(10 * GB, 120, registry_login(registry))
    repository, tag = small_image.rsplit(":", 1)
    # The tag, cached here, names the platform's JupyterLab image first...
    client.images.get("gpurental/jupyter-cpu:latest").tag(repository, tag)
    first = push_to(client, registry, f"{repository}:{tag}", repository.split("/", 1)[1], tag)
    client.api.pull(repository, tag, auth_config=policy.auth)
    old = client.images.get(first).id
    # ...then another machine pushes a new image under it.
    (tmp_path / "Dockerfile").write_text("FROM gpurental/jupyter-cpu:latest\nRUN echo v2 > /v2\n")
    client.images.build(path=str(tmp_path), tag="gpurental-test/v2:1", rm=True)
    push_to(client, registry, "gpurental-test/v2:1", repository.split("/", 1)[1], tag)
    client.images.get(old).tag(repository, tag)  # this host still has the old one
    spec = make_spec(image=first, pull=policy)
    lines = Lines()
    docker_runtime.start(spec, lines)
    cleanup(docker_runtime, spec.instance_id)
    container = client.containers.get(container_name(spec.instance_id))
    assert container.image.id != old
    assert container.exec_run(["cat", "/v2"]).output.decode().strip() == "v2"
    assert any("newer image under this tag" in line for line, _ in lines.lines)
    client.images.remove("gpurental-test/v2:1")
