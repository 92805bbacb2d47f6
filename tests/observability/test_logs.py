"""Structured logs: a request id on each request and line, ids carried by Celery
messages, and one launch followed by its ids through web, worker and agent logs."""

from __future__ import annotations

import json
import logging
import time
import uuid
from decimal import Decimal

import pytest
import requests

from gpurental import logs
from gpurental.accounts.services import api_key_create
from gpurental.billing.services import credit_add
from gpurental.celery_app import app as control_app
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.testing.agent_process import wait_for


def json_record(message: str, **extra) -> dict:
    record = logging.LogRecord("gpurental.test", logging.INFO, __file__, 1, message, (), None)
    for key, value in extra.items():
        setattr(record, key, value)
    logs.ContextFilter().filter(record)
    return json.loads(logs.JsonFormatter().format(record))


def test_a_json_line_carries_the_ids_bound_where_it_was_written():
    with logs.bound(request_id="r-1", instance_id="i-1"):
        line = json_record("launch %s")
    assert line["msg"] == "launch %s" and line["level"] == "INFO"
    assert (line["request_id"], line["instance_id"]) == ("r-1", "i-1")
    assert "host" not in line
    assert "request_id" not in json_record("outside")


def test_the_process_host_is_on_every_line_unless_the_context_says_otherwise():
    logs.bind_process(host="node7")
    try:
        assert json_record("beat")["host"] == "node7"
        with logs.bound(host="other"):
            assert json_record("beat")["host"] == "other"
    finally:
        logs._process_ids.clear()


def test_an_unknown_log_format_is_refused():
    with pytest.raises(ValueError, match="LOG_FORMAT"):
        logs.formatter_for("xml")


@pytest.mark.django_db
def test_each_response_has_a_request_id_and_a_proxys_is_kept(client):
    made = client.get("/healthz")["X-Request-Id"]
    assert len(made) == 32 and made != client.get("/healthz")["X-Request-Id"]
    assert client.get("/healthz", HTTP_X_REQUEST_ID="lb-42")["X-Request-Id"] == "lb-42"
    hostile = client.get("/healthz", HTTP_X_REQUEST_ID='x"\n<script>')["X-Request-Id"]
    assert hostile != 'x"\n<script>' and len(hostile) == 32


def test_a_task_message_carries_the_ids_to_the_worker():
    seen = {}
    name = f"tests.observability.ids_{uuid.uuid4().hex[:8]}"

    @control_app.task(name=name)
    def probe(**kwargs):
        seen.update(request_id=logs.current("request_id"), instance_id=logs.current("instance_id"))

    headers: dict = {}
    with logs.bound(request_id="req-9"):
        logs._on_publish(
            sender=name, body=((), {"spec": {"instance_id": "inst-9"}}, {}), headers=headers
        )
    assert headers[logs.HEADER_REQUEST_ID] == "req-9"
    assert headers[logs.HEADER_INSTANCE_ID] == "inst-9"
    assert headers[logs.HEADER_SENT_AT] > 0
    probe.apply(kwargs={}, headers=headers)
    assert seen == {"request_id": "req-9", "instance_id": "inst-9"}
    assert logs.current("request_id") is None  # the next task starts clean


def _lines(text: str) -> list[dict]:
    found = []
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict):
            found.append(line)
    return found


@pytest.fixture
def json_logs(monkeypatch, tmp_path):
    """LOG_FORMAT=json for the processes the stack starts, and the control worker (a
    thread of this process) writing JSON lines to worker.log."""
    monkeypatch.setenv("LOG_FORMAT", "json")
    handler = logging.FileHandler(tmp_path / "worker.log")
    handler.setFormatter(logs.JsonFormatter())
    handler.addFilter(logs.ContextFilter())
    # On our loggers, not the root: the test worker sets the root logger up its own way.
    ours = logging.getLogger("gpurental")
    ours.addHandler(handler)
    old_level, ours.disabled = ours.level, False
    ours.setLevel(logging.INFO)
    yield tmp_path / "worker.log"
    ours.removeHandler(handler)
    ours.setLevel(old_level)
    handler.close()


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_one_launch_is_followed_by_its_ids_through_web_worker_and_agent_logs(
    json_logs, web_server, agent, catalog, alice, tmp_path
):
    _, key = api_key_create(user=alice, name="trace")
    credit_add(user=alice, amount=Decimal("100.00"), description="test credit")
    rid = f"trace-{uuid.uuid4().hex[:12]}"
    answer = requests.post(
        f"{web_server}/api/v1/instances/",
        json={"image": "jupyter-cpu", "gpu_model": "A10G", "gpu_count": 1},
        headers={"Authorization": f"Bearer {key}", "X-Request-Id": rid},
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    assert answer.headers["X-Request-Id"] == rid
    iid = answer.json()["id"]
    wait_for(
        lambda: Instance.objects.get(pk=iid).status == InstanceStatus.RUNNING,
        90,
        "the instance to run",
        agent,
    )

    def about(lines):
        return [x for x in lines if x.get("instance_id") == iid and x.get("request_id") == rid]

    def traced():
        return (
            about(_lines((tmp_path / "daphne.log").read_text(errors="replace"))),
            about(_lines(json_logs.read_text(errors="replace"))),
            about(_lines(agent.log_path.read_text(errors="replace"))),
        )

    deadline = time.monotonic() + 20
    while not all(traced()) and time.monotonic() < deadline:
        time.sleep(0.5)
    web, worker, on_host = traced()
    assert web and worker and on_host, (
        f"lines with both ids: web {len(web)}, worker {len(worker)}, agent {len(on_host)}; "
        f"worker: {json_logs.read_text()[-1500:]}"
    )
    assert any("instance_start" in x["msg"] for x in web)  # the start command it sent
    assert any("instance_report" in x["msg"] for x in worker)  # the agent's report, handled
    assert any(": running" in x["msg"] for x in on_host)
    assert {x["host"] for x in on_host} == {agent.host.name}
