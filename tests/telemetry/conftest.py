"""Running instances and the agent's own publisher, for the telemetry tests."""

from __future__ import annotations

import os

import pytest

from gpurental.rentals.selectors import instance_gpus
from gpurental.rentals.services import lifecycle as lc


@pytest.fixture(autouse=True)
def _telemetry_test_settings(settings):
    # Billing's prepaid check is not what these tests are about.
    settings.BILLING_ENFORCE_BALANCE = False
    # alice, bob and carol get passwords; PBKDF2 costs a second a test on a busy 2-core box.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def node1(a100, make_host):
    return make_host("node1", a100, count=4)


@pytest.fixture
def run_instance(image, a100, node1, sent):
    """Launch an instance for ``user`` and report it running; returns it with ``.gpu_indices``."""

    def run(user, *, now=None, gpu_count=1, **kwargs):
        instance = lc.instance_launch(
            user=user, image=image, gpu_model=a100, gpu_count=gpu_count, now=now, **kwargs
        )
        lc.instance_report_running(
            instance_id=str(instance.pk), port=40000, container_id="c0ffee", now=now
        )
        instance.refresh_from_db()
        instance.gpu_indices = [g.index for g in instance_gpus(instance)]
        return instance

    return run


@pytest.fixture
def publisher():
    """The agent's ChannelPublisher for host node1, on the test Redis."""
    import redis
    from django.conf import settings

    from gpurental.agent.sampler import ChannelPublisher, latest_key, recent_key

    # Samples outlive the test database: start without another test's (or run's).
    redis.Redis.from_url(os.environ["REDIS_URL"]).delete(
        *(key(name) for name in ("node1", "node2") for key in (latest_key, recent_key))
    )
    layer = settings.CHANNEL_LAYER_BACKEND  # the agent must speak the web's layer
    pub = ChannelPublisher(os.environ["REDIS_URL"], "node1", timeout_s=2, layer=layer)
    yield pub
    pub.close()


def host_message(*gpus: tuple[int, str | None, float], host="node1", ts=1000.0) -> dict:
    """A sampler message: (index, stamped instance id, utilisation) per GPU."""
    return {
        "type": "telemetry.sample",
        "host": host,
        "ts": ts,
        "simulated": True,
        "gpus": [
            {
                "index": index,
                "util": util,
                "mem_used": int(util * 1e8),
                "mem_total": 85_899_345_920,
                "temp": 40.0,
                "power": 100.0,
                "sm_clock": 1410,
                "stale": False,
                "instance": instance,
            }
            for index, instance, util in gpus
        ],
    }
