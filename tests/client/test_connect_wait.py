"""``Instance.connect``: one request that waits on the server for the link, and the way
back to waiting then connecting against a server whose connect does not wait."""

from __future__ import annotations

import pytest

from gpurental.client import Client, InvalidState, LaunchFailed, Timeout
from tests.client.conftest import API_KEY, Answer, instance

DETAIL = "/api/v1/instances/7/"
CONNECT = "/api/v1/instances/7/connect/"
LINK = "https://7.gw.example/_gw/enter?t=one-time"
LINKED = {
    "url": LINK,
    "expires_at": "2025-03-01T10:01:09Z",
    "origin": "https://7.gw.example",
    "status": "running",
}


def refused(status: str, outcome: str | None) -> Answer:
    """A 409 invalid_state from connect, with the Wait-Outcome a waiting server sends."""
    message = f"instance 7 is {status}: it can be opened once it is running"
    body = {"error": {"code": "invalid_state", "message": message, "fields": {}}}
    headers = {"Wait-Outcome": outcome} if outcome else {}
    return Answer(409, body, headers=headers)


class TickingClock:
    """Each look at the clock: ``step`` seconds later (a long-poll takes time)."""

    def __init__(self, step: float = 0.0) -> None:
        self.now, self.step = 0.0, step
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def client_with(api, clock: TickingClock) -> Client:
    return Client(api_key=API_KEY, base_url=api.url, sleep=clock.sleep, clock=clock)


@pytest.fixture
def pending(api):
    api.reply("GET", DETAIL, (200, instance(status="pending")))
    clock = TickingClock()
    return client_with(api, clock).get_instance(7), clock


def waits_asked(api) -> list[dict]:
    return [r.query for r in api.received("POST", CONNECT)]


def test_a_server_that_waits_gives_the_link_in_one_request(api, pending):
    waiting, clock = pending
    api.reply("POST", CONNECT, Answer(201, LINKED, headers={"wait-outcome": "reached"}))

    url = waiting.connect(timeout=600)

    assert url == LINK and waiting.status == "running"
    assert waits_asked(api) == [{"wait_for": ["running"], "timeout": ["25.000"]}]
    assert len(api.received("GET", DETAIL)) == 1  # get_instance only: no waiting by GET
    assert clock.sleeps == []
    assert waiting.client._long_poll is True


def test_the_request_waits_no_longer_than_the_callers_timeout(api, pending):
    waiting, _ = pending
    api.reply("POST", CONNECT, Answer(201, LINKED, headers={"Wait-Outcome": "reached"}))

    waiting.connect(timeout=3)

    assert waits_asked(api) == [{"wait_for": ["running"], "timeout": ["3.000"]}]


def test_a_wait_that_times_out_is_asked_again_until_the_link_comes(api, pending):
    waiting, clock = pending
    api.reply(
        "POST",
        CONNECT,
        refused("pending", "timeout"),
        refused("provisioning", "timeout"),
        Answer(201, LINKED, headers={"Wait-Outcome": "reached"}),
    )

    assert waiting.connect(timeout=600) == LINK
    assert len(waits_asked(api)) == 3
    assert api.received("GET", DETAIL)[1:] == []
    assert clock.sleeps == []  # the server did the waiting


def test_the_caller_timeout_ends_the_waits_with_timeout(api):
    api.reply("GET", DETAIL, (200, instance(status="provisioning")))
    api.reply("POST", CONNECT, refused("provisioning", "timeout"))
    clock = TickingClock(step=10)  # every request takes 10 s of the caller's time
    waiting = client_with(api, clock).get_instance(7)

    with pytest.raises(Timeout) as raised:
        waiting.connect(timeout=60)

    assert "still provisioning after 60s (waited for running)" in str(raised.value)
    assert raised.value.instance is waiting
    asked = [float(q["timeout"][0]) for q in waits_asked(api)]
    assert 1 < len(asked) < 10 and max(asked) <= 25


def test_a_launch_that_fails_while_connect_waits_raises_launch_failed(api, pending):
    waiting, _ = pending
    reason = "image pytorch-2.1 is not on host gpu-01 and pulling is off"
    api.reply("POST", CONNECT, refused("failed", "ended"))
    failed = instance(status="failed", status_reason=reason)
    api.reply("GET", DETAIL, Answer(200, failed, headers={"Wait-Outcome": "ended"}))

    with pytest.raises(LaunchFailed) as raised:
        waiting.connect()

    assert raised.value.status_reason == reason and waiting.status == "failed"
    assert len(waits_asked(api)) == 1  # no link asked for again after the end


def test_an_instance_terminated_while_connect_waits_raises_invalid_state(api, pending):
    waiting, _ = pending
    api.reply("POST", CONNECT, refused("terminated", "ended"))
    api.reply(
        "GET", DETAIL, (200, instance(status="pending")), (200, instance(status="terminated"))
    )

    with pytest.raises(InvalidState, match="terminated while waiting"):
        waiting.connect()


def test_against_an_older_server_it_waits_by_get_then_connects(api, pending):
    # Its connect ignores wait_for: a 409 at once, without Wait-Outcome; its GET long-polls.
    waiting, clock = pending
    api.reply("POST", CONNECT, refused("pending", None), (201, LINKED))
    reached = Answer(200, instance(status="running"), headers={"Wait-Outcome": "reached"})
    api.reply("GET", DETAIL, reached)

    assert waiting.connect(timeout=600) == LINK

    assert waits_asked(api) == [{"wait_for": ["running"], "timeout": ["25.000"]}, {}]
    gets = [r.query for r in api.received("GET", DETAIL)]
    assert gets[1:] == [{"wait_for": ["running"], "timeout": ["25.000"]}]
    assert clock.sleeps == []


def test_against_a_server_without_long_polls_it_polls_then_connects(api, pending):
    waiting, clock = pending
    api.reply("POST", CONNECT, refused("pending", None), (201, LINKED))
    # Its GET ignores wait_for too: it answers at once, without Wait-Outcome.
    api.reply("GET", DETAIL, (200, instance(status="pending")), (200, instance(status="running")))

    assert waiting.connect(timeout=600) == LINK

    gets = [r.query for r in api.received("GET", DETAIL)]
    assert gets[1:] == [{"wait_for": ["running"], "timeout": ["25.000"]}, {}]  # then polls
    assert clock.sleeps == [1.0]
    waiting.client._long_poll = False
    api.reply("POST", CONNECT, (201, LINKED))
    waiting.connect()  # the client knows now: no waiting connect asked for
    assert waits_asked(api)[-1] == {}


def test_an_older_server_answers_a_running_instance_at_once_and_that_will_do(api):
    api.reply("GET", DETAIL, (200, instance(status="running")))
    old_link = {k: v for k, v in LINKED.items() if k != "status"}
    api.reply("POST", CONNECT, (201, old_link))
    running = client_with(api, TickingClock()).get_instance(7)

    assert running.connect() == LINK
    assert len(api.received("POST", CONNECT)) == 1
    assert running.client._long_poll is None  # it said nothing about long-polls


def test_with_on_progress_it_waits_by_get_to_report_each_step(api, pending):
    waiting, _ = pending
    reached = Answer(200, instance(status="running"), headers={"Wait-Outcome": "reached"})
    api.reply("GET", DETAIL, reached)
    api.reply("POST", CONNECT, (201, LINKED))
    seen = []

    assert waiting.connect(on_progress=lambda i: seen.append(i.status)) == LINK
    assert seen == ["running"]
    assert waits_asked(api) == [{}]  # the link only once it runs
