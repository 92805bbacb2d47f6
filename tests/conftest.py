import uuid

import pytest
from django.utils import timezone, translation

from gpurental.fleet.services import host_create, host_simulated_gpus_ensure
from tests.factories import GPUModelFactory, ImageTemplateFactory, PlanFactory, UserFactory

pytest_plugins = ["tests.stack"]  # fixtures for tests that need the whole running platform


@pytest.fixture
def alice(db):
    return UserFactory(email="alice@example.com", full_name="Alice Owner")


@pytest.fixture
def bob(db):
    return UserFactory(email="bob@example.com", full_name="Bob Other")


@pytest.fixture
def carol(db):
    return UserFactory(
        email="carol@example.com", full_name="Carol Staff", is_staff=True, is_superuser=True
    )


@pytest.fixture
def a100(db):
    model = GPUModelFactory(nvml_names=["NVIDIA A100-SXM4-80GB"])
    for count in (1, 2, 4, 8):
        PlanFactory(gpu_model=model, gpu_count=count, slug=f"a100-x{count}")
    return model


@pytest.fixture
def image(db):
    return ImageTemplateFactory()


@pytest.fixture
def make_host(db):
    """A host with a fresh heartbeat and ``count`` simulated GPUs of ``model``."""

    def make(name, model, count=8, **fields):
        host, token = host_create(name=name)
        host_simulated_gpus_ensure(host=host, model=model, count=count)
        host.last_heartbeat_at = fields.pop("last_heartbeat_at", timezone.now())
        for key, value in fields.items():
            setattr(host, key, value)
        host.save()
        host.token = token
        return host

    return make


@pytest.fixture
def sent(monkeypatch):
    """Every command the control plane sends to a host agent (the broker is not needed here)."""
    from gpurental.rentals import hostcalls

    messages = []

    def record(name, args=None, kwargs=None, queue=None, **options):
        from gpurental import protocol
        from gpurental.fleet import hostlink
        from gpurental.fleet.models import Host

        if name not in protocol.AGENT_TASKS:
            return None  # the control plane's own tasks (notifications…): not a host command
        # Every command is signed for its host: check it, then keep the payload.

        host = Host.objects.get(name=kwargs["host"])
        key = hostlink.keys_of(host.keys_sealed)
        payload = protocol.verify(key.sign, kwargs, host=host.name)
        if "spec" in payload:  # the spec as the agent reads it, its secrets unsealed
            payload["spec"] = protocol.spec_open(key.spec, payload["spec"])
        payload.pop("host")
        messages.append({"task": name.rsplit(".", 1)[-1], "queue": queue, **payload})

    monkeypatch.setattr(hostcalls.app, "send_task", record)
    return messages


@pytest.fixture(autouse=True)
def balance_enforced(settings):
    """Launches need credit only where a test asks for it (tests/billing and some API tests do)."""
    settings.BILLING_ENFORCE_BALANCE = False


@pytest.fixture(autouse=True)
def default_language_after_each_test():
    """A request with Accept-Language (or a user's saved language) leaves that language
    active in the thread the test client runs in: each test starts from the default."""
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # Real hashing costs ~0.35 s per user; tests create hundreds. Production keeps PBKDF2.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def own_cache_keys(settings):
    """Each test writes its own cache keys: the Redis cache outlives the test database, so a
    key from an earlier test or run (a booking nonce, a throttle count) must not be seen."""
    cache = {**settings.CACHES["default"], "KEY_PREFIX": f"test-{uuid.uuid4().hex[:12]}"}
    settings.CACHES = {**settings.CACHES, "default": cache}
    # django-axes memoizes its handler, and the handler its cache: a new one for the new keys.
    from axes.handlers.proxy import AxesProxyHandler

    AxesProxyHandler.implementation = None


# Tests that use these start processes or live servers (tests/stack.py, pytest-django's
# live_server): they are in the slow tier, which `make test-fast` leaves out.
SLOW_FIXTURES = frozenset(
    {"control_worker", "agent", "web_server", "web_alone", "live_server", "docker_client"}
)


# Under `make test` (pytest -n 2 --dist loadgroup) two groups run one test after another,
# each on one worker: "stack", the tests with the platform's processes (a control worker,
# agents, Daphne, gateways) or Chromium, which time out when two of them share 2 cores;
# and "engine", the other Docker tests, which share the engine's tenant network, its
# firewall chain and fixed namespace addresses. The rest spread over both workers.
STACK_FIXTURES = SLOW_FIXTURES - {"docker_client"}


def xdist_group_of(item) -> str | None:
    fixtures = set(getattr(item, "fixturenames", ()))
    if STACK_FIXTURES & fixtures or item.get_closest_marker("browser"):
        return "stack"
    if "docker_client" in fixtures or item.get_closest_marker("docker"):
        return "engine"
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        group = xdist_group_of(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
