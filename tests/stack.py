"""The running platform for tests that need all of it: a Docker Engine, a control worker
(a thread of the test process, on the test database) and a real host agent process.
Docker is required under CI; elsewhere these tests skip and say why."""

from __future__ import annotations

import contextlib
import uuid

import docker.errors
import pytest
from celery.contrib.testing.worker import start_worker
from django.conf import settings as django_settings

from gpurental.celery_app import app as control_app
from gpurental.fleet.models import Host
from gpurental.fleet.services import host_create
from gpurental.testing.agent_process import AgentProcess, wait_for
from tests.agent.conftest import JUPYTER_IMAGE, skip_unless_ci
from tests.factories import GPUModelFactory, ImageTemplateFactory, PlanFactory

READY_TIMEOUT = 10  # JupyterLab answers in about 1 s here (3 s under the suite's load); the "never answers" case waits this long


@pytest.fixture(scope="module")
def docker_client():
    from gpurental.agent.runtimes import docker_problem

    problem = docker_problem()
    if problem:
        skip_unless_ci(f"{problem}; start one with: sudo scripts/docker-engine.sh")
    import docker

    client = docker.from_env()
    try:
        client.images.get(JUPYTER_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{JUPYTER_IMAGE} is not built; run `make images`")
    return client


@pytest.fixture
def control_worker(docker_client):
    with control_app.connection_for_write() as conn:
        for queue in ("control", "notify"):  # nothing left over from an earlier run
            conn.default_channel.queue_purge(queue)
    from celery.signals import task_postrun
    from django.db import connection

    def close_connection(**kwargs):
        # Runs in the worker thread: its connection must not outlive the thread, or
        # the test database cannot be dropped at the end of the run.
        connection.close()

    task_postrun.connect(close_connection, weak=False)
    try:
        with start_worker(
            control_app,
            pool="solo",
            perform_ping_check=False,
            # The notify worker's queue too (webhooks, e-mails): one worker stands for both.
            queues=["control", "notify"],
            shutdown_timeout=30,
        ):
            yield
    finally:
        task_postrun.disconnect(close_connection)


@pytest.fixture
def catalog(db):
    model = GPUModelFactory(
        slug="a10g",
        name="A10G 24GB",
        short_name="A10G",
        nvml_names=["NVIDIA A10G"],
        memory_gb=24,
        interconnect="pcie",
        nvlink_bandwidth_gbs=0,
    )
    PlanFactory(gpu_model=model, gpu_count=1, vcpus=1, memory_gb=1, slug="a10g-x1")
    return model, ImageTemplateFactory(image=JUPYTER_IMAGE, ssh_port=2222)


def remove_leftovers(docker_client, host_name: str) -> None:
    """Whatever the test's instances left on the engine (a test may end with one running)."""
    from gpurental.agent.runtimes.base import LABEL_HOST

    mine = {"label": f"{LABEL_HOST}={host_name}"}
    for container in docker_client.containers.list(all=True, filters=mine, ignore_removed=True):
        container.remove(force=True)
    for volume in docker_client.volumes.list(filters=mine):
        volume.remove(force=True)
    # Private networks their last container left (the agent prunes them on a stop; a
    # killed agent does not).
    for network in docker_client.networks.list(filters={"label": "gpurental.private"}):
        with contextlib.suppress(docker.errors.APIError):  # an agent may prune it meanwhile
            network.reload()
            if not network.attrs.get("Containers"):
                network.remove()


def agent_on_a_new_host(
    tmp_path, log_name: str = "agent.log", gpus: int = 2, **env
) -> AgentProcess:
    """An agent process on a host of its own name, joined to the test's control plane,
    once its first heartbeat has listed its (fake) GPUs."""
    host, token = host_create(name=f"e2e-{uuid.uuid4().hex[:8]}")
    agent = AgentProcess(
        broker_url=django_settings.CELERY_BROKER_URL,
        host_name=host.name,
        token=token,
        log_path=tmp_path / log_name,
        GPURENTAL_READY_TIMEOUT=str(READY_TIMEOUT),
        GPURENTAL_SIMULATED_GPUS=str(gpus),
        **env,
    )
    agent.start()
    wait_for(
        lambda: Host.objects.get(pk=host.pk).gpus.count() == gpus,
        60,
        "the agent's first heartbeat",
        agent,
    )
    agent.host = host
    return agent


@pytest.fixture
def agent(control_worker, docker_client, catalog, tmp_path):
    hf_cache = tmp_path / "hf-cache"
    (hf_cache / "hub").mkdir(parents=True)
    agent = agent_on_a_new_host(
        tmp_path,
        GPURENTAL_HF_CACHE_DIR=str(hf_cache),
        GPURENTAL_DISK_CHECK_INTERVAL="2",
    )
    agent.hf_cache = hf_cache
    yield agent
    # Killed, not stopped: a graceful stop costs a second or more of every test, and what
    # the agent would tidy (its containers, volumes, idle sandboxes) goes here anyway.
    agent.kill()
    remove_leftovers(docker_client, agent.host.name)


@pytest.fixture
def second_agent(agent, docker_client, tmp_path):
    """Another host's agent on the same engine: where a clone or a move lands."""
    other = agent_on_a_new_host(tmp_path, "agent2.log")
    yield other
    other.kill()
    remove_leftovers(docker_client, other.host.name)


def database_url(settings_dict: dict) -> str:
    """A DATABASE_URL for the database the tests run on (pytest-django's test database)."""
    from urllib.parse import quote

    user = quote(settings_dict["USER"] or "")
    password = quote(settings_dict["PASSWORD"] or "")
    host, port, name = (
        settings_dict["HOST"] or "",
        settings_dict["PORT"] or "",
        settings_dict["NAME"],
    )
    if host.startswith("/"):
        return f"postgresql://{user}:{password}@/{name}?host={host}"
    return f"postgresql://{user}:{password}@{host}{':' + port if port else ''}/{name}"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def gateway_port(settings):
    """The gateway's port, for the links the platform makes (in this process and in the
    web process)."""
    port = _free_port()
    settings.GATEWAY_PORT = port
    settings.GATEWAY_SCHEME = "http"  # plain http on loopback, as in the demo
    return port


def _serve(argv: list[str], env: dict, log_path, health_url: str, what: str):
    """Start a platform process and wait until ``health_url`` answers 200."""
    import subprocess

    import requests

    log = open(log_path, "wb")  # noqa: SIM115 - closed by the caller's stop()
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603

    def up():
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}: see {log_path}")
        try:
            return requests.get(health_url, timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def stop():
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()

    try:
        wait_for(up, 60, f"{what} to serve {health_url}")
    except BaseException:
        stop()
        raise
    return proc, stop


@pytest.fixture
def gateway(agent, gateway_port, tmp_path):
    """The real instance gateway process on the test database: instances answer at
    ``http://<id>.gw.localhost:<gateway_port>/``. Yields its base URL on 127.0.0.1."""
    import os
    import sys

    from django.db import connection

    env = {
        **os.environ,
        "DATABASE_URL": database_url(connection.settings_dict),
        "REDIS_URL": django_settings.REDIS_URL,
        "GATEWAY_PORT": str(gateway_port),
        "GATEWAY_SCHEME": "http",
    }
    base = f"http://127.0.0.1:{gateway_port}"
    proc, stop = _serve(
        [sys.executable, "-m", "gpurental.gateway", "--port", str(gateway_port)],
        env,
        tmp_path / "gateway.log",
        f"{base}/healthz",
        "the gateway",
    )
    proc.log_path = tmp_path / "gateway.log"
    try:
        yield base
    finally:
        stop()


def open_link(gateway_base: str, link: str, path: str = "/api/status") -> int:
    """Spend a one-time link at the gateway as a browser would (to 127.0.0.1 with the link's
    Host: glibc does not resolve *.localhost), then GET ``path`` at that origin with the
    cookie it set. The answer's status."""
    import requests

    host, _, rest = link.split("://", 1)[1].partition("/")
    entered = requests.get(
        f"{gateway_base}/{rest}", headers={"Host": host}, allow_redirects=False, timeout=10
    )
    assert entered.status_code == 302, (entered.status_code, entered.text[:200])
    cookie = entered.headers["Set-Cookie"].split(";", 1)[0]
    answer = requests.get(
        f"{gateway_base}{path}", headers={"Host": host, "Cookie": cookie}, timeout=10
    )
    return answer.status_code


def _daphne(tmp_path, **env_extra):
    """Daphne (HTTP and websockets) on the test database; yields its base URL."""
    import os
    import subprocess
    import sys

    import requests
    from django.db import connection

    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url(connection.settings_dict),
        "REDIS_URL": django_settings.REDIS_URL,
        "SECURE_COOKIES": "0",  # plain http on 127.0.0.1
        # Mail to files the tests can read (sign-up confirmations, notices).
        "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
        "EMAIL_FILE_PATH": str(tmp_path / "mail"),
        **env_extra,
    }
    log = open(tmp_path / "daphne.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(  # noqa: S603
        [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "gpurental.asgi:application",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"

    def up():
        try:
            return requests.get(f"{base}/healthz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_for(up, 60, "Daphne to serve /healthz")
        yield base
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


@pytest.fixture
def web_server(agent, gateway_port, tmp_path):
    """The real web process (Daphne: HTTP and websockets) on the test database, beside a
    control worker and an agent."""
    yield from _daphne(tmp_path, GATEWAY_PORT=str(gateway_port), GATEWAY_SCHEME="http")


@pytest.fixture
def web_alone(transactional_db, tmp_path):
    """The web process alone, for pages whose tests make their rows with the services."""
    yield from _daphne(tmp_path)


# --- the image registry: customers' own images (gpurental/images/) -----------------------

# alice: a customer's own login to her registry.
REGISTRY_USERS = {"alice": "alice-registry-pw"}


@pytest.fixture
def platform_registry(token_registry, settings):
    """The platform's own registry (saved images), taking only tokens signed with the
    control plane's key, each for one repository (gpurental/registrytokens.py)."""
    settings.PLATFORM_REGISTRY = token_registry.address
    settings.PLATFORM_REGISTRY_TOKEN_KEY = str(token_registry.token_key)
    return token_registry


def _registry_process(tmp_path_factory, name: str, **options):
    from gpurental import registry as registry_mod

    if not registry_mod.available():
        skip_unless_ci("docker-registry is not installed: apt-get install docker-registry")
    root = tmp_path_factory.mktemp(name) / "root"
    return registry_mod.Registry(root, _free_port(), **options).start()


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    """Debian's docker-registry on 127.0.0.1, with a login (htpasswd) for alice: a
    customer's own registry; one per test process, on a free port."""
    server = _registry_process(tmp_path_factory, "registry", users=REGISTRY_USERS)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory):
    """Another, taking only tokens signed with a key of its own (the platform's)."""
    from gpurental import registrytokens

    key = tmp_path_factory.mktemp("registry-token") / "key.pem"
    registrytokens.key_create(key)
    server = _registry_process(tmp_path_factory, "platform-registry", token_key=key)
    yield server
    server.stop()


def registry_login(registry, user: str = "alice") -> dict:
    return {
        "username": user,
        "password": REGISTRY_USERS[user],
        "serveraddress": registry.address,
    }


def push_to(docker_client, registry, source: str, repository: str, tag: str) -> str:
    """``source`` pushed to the test registry as ``repository:tag``, then untagged here, as
    if another machine had pushed it; its reference."""
    name = f"{registry.address}/{repository}"
    docker_client.images.get(source).tag(name, tag)
    for line in docker_client.api.push(
        name, tag, auth_config=registry_login(registry), stream=True, decode=True
    ):
        assert "error" not in line, line
    docker_client.images.remove(f"{name}:{tag}")
    return f"{name}:{tag}"


@pytest.fixture(scope="session")
def jupyter_in_registry(registry):
    """The platform's JupyterLab image as a customer would push their own: alice/jupyter:1
    in the test registry (about 15 s, once per test process). Ask for docker_client too."""
    import docker

    client = docker.from_env()
    try:
        return push_to(client, registry, JUPYTER_IMAGE, "alice/jupyter", "1")
    finally:
        client.close()


# --- object storage: volume snapshots (gpurental/volumes/snapshots.py) -------------------


@pytest.fixture(scope="session")
def object_storage():
    """A real S3 API server on 127.0.0.1 (moto's, in a thread of this process), with the
    bucket ``snapshots``; one per test process."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    keys = {"aws_access_key_id": "operator", "aws_secret_access_key": "operator-secret"}
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **keys).create_bucket(
        Bucket="snapshots"
    )
    yield {"endpoint": endpoint, "bucket": "snapshots", **keys}
    server.stop()


@pytest.fixture
def object_storage_s3(object_storage):
    """A boto3 client of the test object storage, with the operator's keys."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=object_storage["endpoint"],
        region_name="us-east-1",
        aws_access_key_id=object_storage["aws_access_key_id"],
        aws_secret_access_key=object_storage["aws_secret_access_key"],
    )


@pytest.fixture
def snapshots_on(object_storage, settings):
    """The platform's snapshots in the test object storage."""
    settings.SNAPSHOT_S3_BUCKET = object_storage["bucket"]
    settings.SNAPSHOT_S3_ENDPOINT_URL = object_storage["endpoint"]
    settings.SNAPSHOT_S3_ACCESS_KEY_ID = object_storage["aws_access_key_id"]
    settings.SNAPSHOT_S3_SECRET_ACCESS_KEY = object_storage["aws_secret_access_key"]
    return object_storage
