"""Instance objects: parsing the API's dict, actions in place, waiting for a status."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpurental.client import Client, GpuRentalError, Instance, InvalidState, LaunchFailed, Timeout
from tests.client.conftest import API_KEY, Answer, error, instance

URL = "https://7.gw.example/lab"
DETAIL = "/api/v1/instances/7/"
CONNECT = "/api/v1/instances/7/connect/"
LINK = "https://7.gw.example/_gw/enter?t=one-time"
LINKED = {"url": LINK, "expires_at": "2025-03-01T10:01:09Z", "origin": "https://7.gw.example"}


@pytest.fixture(autouse=True)
def _connect_answers(api):
    """The server's answer to connect: a one-time link (tests may replace it)."""
    api.reply("POST", CONNECT, *[(201, LINKED)] * 5)


def older_server_connects(api) -> None:
    """Connect as a server from before connect could wait: it ignores wait_for and refuses
    at once while the instance is not running (no Wait-Outcome), then makes the link."""
    not_yet = error(
        409, "invalid_state", "instance 7 is pending: it can be opened once it is running"
    )
    api.reply("POST", CONNECT, not_yet, (201, LINKED))


def event(to_status: str, step: str = "", reason: str = "") -> dict:
    return {
        "at": "2025-03-01T10:00:01Z",
        "kind": "transition",
        "from_status": None,
        "to_status": to_status,
        "step": step,
        "reason": reason,
    }


class FakeClock:
    """Time that passes only when the SDK sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def timed_client(api, clock) -> Client:
    return Client(api_key=API_KEY, base_url=api.url, sleep=clock.sleep, clock=clock)


def test_connect_returns_the_jupyter_url_once_running(api, timed_client, clock):
    api.reply("POST", "/api/v1/instances/", (201, instance(status="pending")))
    api.reply(
        "GET",
        DETAIL,
        (200, instance(status="pending")),
        (200, instance(status="provisioning", events=[event("provisioning", "pulling image")])),
        (200, instance(status="running", jupyter_url=URL, running_since="2025-03-01T10:00:09Z")),
    )
    seen = []

    launched = timed_client.create_instance(
        gpu_type="A10G", framework="pytorch-2.1", model_repo="huggingface"
    )
    url = launched.connect(on_progress=lambda i: seen.append((i.status, i.latest_step)))

    assert url == LINK
    assert launched.status == "running"
    assert launched.running_since == datetime(2025, 3, 1, 10, 0, 9, tzinfo=UTC)
    assert seen == [("pending", ""), ("provisioning", "pulling image"), ("running", "")]
    assert clock.sleeps == [1.0, 1.0]


def test_failed_launch_raises_launch_failed_with_the_servers_reason(api, timed_client):
    older_server_connects(api)
    reason = "image pytorch-2.1 is not on host gpu-01 and pulling is off"
    api.reply(
        "GET",
        DETAIL,
        (200, instance(status="provisioning")),
        (200, instance(status="failed", status_reason=reason)),
    )
    waiting = timed_client.get_instance(7)

    with pytest.raises(LaunchFailed) as raised:
        waiting.connect()

    assert raised.value.status_reason == reason
    assert reason in str(raised.value)
    assert raised.value.instance.status == "failed"


def test_instance_lost_while_waiting_raises_launch_failed(api, timed_client):
    api.reply(
        "GET", DETAIL, (200, instance(status="lost", status_reason="host stopped heart-beating"))
    )

    with pytest.raises(LaunchFailed, match="heart-beating"):
        timed_client.get_instance(7).wait_until("running")


def test_instance_terminated_while_waiting_raises_invalid_state(api, timed_client):
    api.reply("GET", DETAIL, (200, instance(status="terminated")))

    with pytest.raises(InvalidState, match="terminated"):
        timed_client.get_instance(7).wait_until("running")


def test_waiting_gives_up_after_the_timeout(api, timed_client, clock):
    api.reply("GET", DETAIL, (200, instance(status="provisioning")))
    waiting = timed_client.get_instance(7)

    with pytest.raises(Timeout) as raised:
        waiting.wait_until("running", timeout=5, poll=2)

    assert raised.value.instance is waiting
    assert "still provisioning after 5s" in str(raised.value)
    assert clock.sleeps == [2, 2, 1]


def test_waiting_for_a_status_that_does_not_exist_is_refused(api, timed_client):
    api.reply("GET", DETAIL, (200, instance()))

    with pytest.raises(ValueError, match="unknown status"):
        timed_client.get_instance(7).wait_until("up")


def test_a_link_the_server_refuses_is_an_error_not_none(api, timed_client):
    api.reply("GET", DETAIL, (200, instance(status="running", jupyter_url=None)))
    refused = {"error": {"code": "not_found", "message": "No such instance.", "fields": {}}}
    api.reply("POST", CONNECT, (404, refused))

    with pytest.raises(GpuRentalError, match="No such instance"):
        timed_client.get_instance(7).connect()


def test_actions_update_the_instance_in_place(api, client):
    api.reply("GET", DETAIL, (200, instance(status="running", jupyter_url=URL)))
    api.reply("POST", "/api/v1/instances/7/stop/", (200, instance(status="stopping")))
    running = client.get_instance(7)

    returned = running.stop()

    assert returned is running
    assert running.status == "stopping"
    assert running.jupyter_url is None


def test_instance_reads_nested_objects_times_and_events():
    data = instance(
        gpu_model={"slug": "nvidia-a100-80gb", "short_name": "A100"},
        host={"name": "gpu-02"},
        created_at="2025-03-01T10:00:00.250000+00:00",
        events=[event("pending", reason="launched"), event("provisioning", "creating container")],
        extra_field="kept",
    )

    parsed = Instance.from_api(data)

    assert parsed.gpu_model == "A100"
    assert parsed.host == "gpu-02"
    assert parsed.created_at == datetime(2025, 3, 1, 10, 0, 0, 250000, tzinfo=UTC)
    assert [e.to_status for e in parsed.events] == ["pending", "provisioning"]
    assert parsed.latest_step == "creating container"
    assert parsed.raw["extra_field"] == "kept"
    with pytest.raises(GpuRentalError, match="not bound"):
        parsed.refresh()


LONG_POLLED = {"wait-outcome": "reached"}  # as a proxy may lowercase it


def test_connect_long_polls_a_server_that_can_and_never_sleeps(api, timed_client, clock):
    older_server_connects(api)
    api.reply(
        "GET",
        DETAIL,
        (200, instance(status="pending")),
        Answer(200, instance(status="provisioning"), headers={"Wait-Outcome": "timeout"}),
        Answer(200, instance(status="running", jupyter_url=URL), headers=LONG_POLLED),
    )

    url = timed_client.get_instance(7).connect(timeout=600)

    assert url == LINK
    assert clock.sleeps == []  # the server did the waiting
    waits = [r.query for r in api.received("GET", DETAIL) if r.query]
    assert waits == [{"wait_for": ["running"], "timeout": ["25.000"]}] * 2


def test_a_long_poll_never_outlasts_the_callers_timeout(api, timed_client):
    api.reply(
        "GET", DETAIL, Answer(200, instance(status="pending"), headers={"Wait-Outcome": "timeout"})
    )
    instance_ = timed_client.get_instance(7)
    ticks = iter(range(0, 100, 2))  # each look at the clock: 2 s later
    timed_client._clock = lambda: next(ticks)

    with pytest.raises(Timeout):
        instance_.wait_until("running", timeout=5)
    asked = [float(r.query["timeout"][0]) for r in api.received("GET", DETAIL) if r.query]
    assert asked and max(asked) <= 5


def test_with_on_progress_each_long_poll_comes_back_within_poll_seconds(api, timed_client):
    api.reply(
        "GET",
        DETAIL,
        (200, instance(status="pending")),
        Answer(200, instance(status="pending"), headers={"Wait-Outcome": "timeout"}),
        Answer(200, instance(status="running", jupyter_url=URL), headers=LONG_POLLED),
    )
    seen = []

    timed_client.get_instance(7).connect(poll=2.0, on_progress=lambda i: seen.append(i.status))

    assert seen == ["pending", "running"]
    asked = [r.query["timeout"] for r in api.received("GET", DETAIL) if r.query]
    assert asked == [["2.000"], ["2.000"]]


def test_against_an_older_server_the_sdk_falls_back_to_polling(api, timed_client, clock):
    older_server_connects(api)
    # An older server ignores wait_for: it answers at once, without Wait-Outcome.
    api.reply(
        "GET",
        DETAIL,
        (200, instance(status="pending")),
        (200, instance(status="pending")),
        (200, instance(status="running", jupyter_url=URL)),
    )

    url = timed_client.get_instance(7).connect()

    assert url == LINK
    assert clock.sleeps == [1.0]
    queries = [r.query for r in api.received("GET", DETAIL)]
    # get_instance, then one long-poll attempt, then plain polls only.
    assert queries[1] == {"wait_for": ["running"], "timeout": ["25.000"]}
    assert queries[2:] == [{}]
