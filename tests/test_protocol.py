"""The contract between control plane and agent (``gpurental/protocol.py``), both sides at
once and without Docker: what the control plane sends, the agent understands; what the
agent sends, the control plane's tasks accept and act on."""

from __future__ import annotations

import pytest
from celery import Celery

from gpurental import protocol
from gpurental.agent.activity import Holdings
from gpurental.agent.gpus.simulated import SimulatedSource
from gpurental.agent.host import HostAgent
from gpurental.agent.reporter import ControlReporter
from gpurental.agent.runtimes.base import ContainerSpec, Started
from gpurental.rentals import hostcalls
from gpurental.rentals.models import InstanceStatus
from gpurental.rentals.services import lifecycle as lc

S = InstanceStatus


class CapturingApp:
    """Stands in for the agent's Celery app: keeps what it would publish."""

    def __init__(self):
        self.sent: list[dict] = []
        self.conf = Celery("capturing", broker="redis://").conf

    def send_task(self, name, kwargs=None, queue=None, **options):
        self.sent.append({"name": name, "queue": queue, "kwargs": kwargs or {}})


class InMemoryRuntime:
    """A container runtime that keeps its instances in a dict (the contract is about
    messages; the real runtimes have their own tests)."""

    name = "memory"

    def __init__(self):
        self.running: dict[str, ContainerSpec] = {}

    def ensure_image(self, image, progress):
        progress(f"pulling {image} if needed")

    def start(self, spec, progress):
        progress("starting container")
        self.running[spec.instance_id] = spec
        return Started(container_id=f"mem-{spec.instance_id[:8]}", host="127.0.0.1", port=40001)

    def stop(self, instance_id):
        self.running.pop(instance_id, None)

    remove = stop

    def list_instances(self):
        return dict.fromkeys(self.running, "running")

    def workspace_usage(self):
        return dict.fromkeys(self.running, 0)


@pytest.fixture
def host_agent():
    app = CapturingApp()
    runtime = InMemoryRuntime()
    agent = HostAgent(
        runtime=runtime,
        source=SimulatedSource(host_name="node1", model_name="NVIDIA A100-SXM4-80GB", count=8),
        reporter=ControlReporter(app, host_name="node1", token="will be set"),
        bind_address="127.0.0.1",
        holdings=Holdings(),
    )
    agent.app, agent.memory = app, runtime
    return agent


@pytest.fixture
def launched(alice, a100, image, make_host, sent):
    host = make_host("node1", a100)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=2)
    return host, instance


def test_the_start_spec_is_versioned_and_carries_exactly_the_protocols_fields(launched):
    _, instance = launched
    spec = hostcalls.container_spec(instance)
    assert spec["spec_version"] == protocol.SPEC_VERSION
    # An on-demand instance also gets its account's private network (an optional field).
    assert set(spec) == protocol.SPEC_FIELDS | {"private_network"}
    assert "private_network" in protocol.OPTIONAL_SPEC_FIELDS


def test_the_agent_understands_every_field_the_control_plane_sends(launched, host_agent):
    _, instance = launched
    keys = protocol.host_keys(protocol.host_root(launched[0].token))
    opened = protocol.spec_open(keys.spec, protocol.spec_check(hostcalls.container_spec(instance)))
    spec = host_agent._spec(opened)
    assert spec.instance_id == str(instance.pk)
    assert spec.gpu_indices == tuple(
        sorted(a.gpu.index for a in instance.allocations.select_related("gpu"))
    )
    assert spec.token == instance.jupyter_token


def test_what_the_agent_reports_the_control_plane_accepts_and_acts_on(
    launched, host_agent, django_capture_on_commit_callbacks
):
    from gpurental.fleet.tasks import host_heartbeat
    from gpurental.rentals.tasks import instance_report

    host, instance = launched
    host_agent.reporter.keys = protocol.host_keys(protocol.host_root(host.token))
    host_agent.start(hostcalls.container_spec(instance))
    host_agent.refresh_state()
    host_agent.heartbeat()
    sent = host_agent.app.sent
    assert {m["queue"] for m in sent} == {protocol.REPORTS_QUEUE}
    assert {m["name"] for m in sent} <= set(protocol.CONTROL_TASKS)
    tasks = {protocol.HEARTBEAT: host_heartbeat, protocol.INSTANCE_REPORT: instance_report}
    with django_capture_on_commit_callbacks(execute=True):
        for message in sent:
            if message["name"] == protocol.INSTANCE_REPORT:
                kind, data = message["kwargs"]["kind"], message["kwargs"]["data"]
                assert set(data) <= set(protocol.REPORT_KINDS[kind]), kind
            tasks[message["name"]](**message["kwargs"])  # runs the task body here
    instance.refresh_from_db()
    assert instance.status == S.RUNNING and instance.jupyter_port == 40001
    host.refresh_from_db()
    assert host.runtime == "memory" and host.gpus.count() == 8


def test_an_agent_given_a_spec_version_it_does_not_know_refuses_it_clearly(
    launched, host_agent, django_capture_on_commit_callbacks
):
    from gpurental.rentals.tasks import instance_report

    host, instance = launched
    host_agent.reporter.keys = protocol.host_keys(protocol.host_root(host.token))
    spec = {**hostcalls.container_spec(instance), "spec_version": protocol.SPEC_VERSION + 1}
    host_agent.start(spec)
    assert host_agent.memory.running == {}  # nothing started
    (report,) = host_agent.app.sent
    assert report["kwargs"]["kind"] == "failed"
    assert "start spec version" in report["kwargs"]["data"]["reason"]
    with django_capture_on_commit_callbacks(execute=True):
        instance_report(**report["kwargs"])
    instance.refresh_from_db()
    assert instance.status == S.FAILED and "upgrade the agent" in instance.status_reason


def test_a_spec_with_missing_or_unknown_fields_is_refused():
    good = dict.fromkeys(protocol.SPEC_FIELDS, "x") | {"spec_version": protocol.SPEC_VERSION}
    protocol.spec_check(good)
    with pytest.raises(protocol.SpecRefused, match="missing"):
        protocol.spec_check({k: v for k, v in good.items() if k != "image"})
    with pytest.raises(protocol.SpecRefused, match="unknown"):
        protocol.spec_check({**good, "host_path": "/var/run"})


def test_the_agent_registers_exactly_the_commands_the_control_plane_sends(tmp_path):
    from gpurental.agent.config import AgentConfig
    from gpurental.agent.worker import make_app

    config = AgentConfig.from_env(
        {
            "GPURENTAL_BROKER_URL": "memory://",
            "GPURENTAL_HOST_NAME": "node1",
            "GPURENTAL_HOST_TOKEN": "t",
            "GPURENTAL_WORK_DIR": str(tmp_path),
        }
    )
    app = make_app(config)
    # (In this process the control plane's shared tasks are in every app too.)
    registered = {n for n, t in app.tasks.items() if t.__module__ == "gpurental.agent.worker"}
    assert registered == set(protocol.AGENT_TASKS)
    assert config.queue == protocol.host_queue("node1")


def test_the_control_plane_registers_every_report_task_and_handles_every_report_kind():
    from gpurental.celery_app import app
    from gpurental.rentals.tasks import REPORTS

    app.loader.import_default_modules()
    assert set(protocol.CONTROL_TASKS) <= set(app.tasks)
    assert set(REPORTS) == set(protocol.REPORT_KINDS) - {"error"}  # errors are logged only


def test_both_sides_use_the_same_redis_keys():
    from gpurental.agent import sampler
    from gpurental.telemetry import selectors

    assert sampler.latest_key is protocol.latest_key is selectors.latest_key
    assert sampler.recent_key is protocol.recent_key is selectors.recent_key


def test_commands_go_to_the_hosts_own_queue_only_once_committed(
    launched, monkeypatch, django_capture_on_commit_callbacks
):
    host, instance = launched
    captured = []
    monkeypatch.setattr(
        hostcalls.app, "send_task", lambda name, **kw: captured.append((name, kw["queue"]))
    )
    with django_capture_on_commit_callbacks(execute=True):
        hostcalls.stop_id(host, str(instance.pk))
        hostcalls.remove_id(host, str(instance.pk))
        assert captured == []  # not before the transaction commits
    queue = protocol.host_queue("node1")
    assert captured == [(protocol.STOP, queue), (protocol.REMOVE, queue)]


def test_a_forged_command_to_another_host_does_nothing(launched, host_agent, make_host, a100):
    """Host B (or anyone who can publish to host A's queue) forges a remove for A's
    instance: without A's key the agent refuses it."""
    from gpurental.agent import worker

    host, instance = launched
    other = make_host("node2", a100)
    host_agent.reporter.keys = protocol.host_keys(protocol.host_root(host.token))
    host_agent.memory.running[str(instance.pk)] = "kept"
    worker.set_agent(host_agent)
    app = Celery("forgery-test", broker="memory://")
    worker._register(app)
    remove = app.tasks[protocol.REMOVE]
    own_key = protocol.host_key(host.token)
    forged = [
        protocol.sign(
            protocol.host_key(other.token), {"host": "node1", "instance_id": str(instance.pk)}
        ),
        {"host": "node1", "instance_id": str(instance.pk)},  # unsigned
        protocol.sign(own_key, {"host": "node2", "instance_id": str(instance.pk)}),
        # The stored hash of the token is no key (the key before issue 29).
        protocol.sign(host.token_hash, {"host": "node1", "instance_id": str(instance.pk)}),
        protocol.sign(protocol.host_root(host.token), {"host": "node1", "instance_id": "x"}),
    ]
    try:
        for message in forged:
            remove.run(**message)
        assert host_agent.memory.running == {str(instance.pk): "kept"}
        genuine = {"host": "node1", "instance_id": str(instance.pk)}
        remove.run(**protocol.sign(own_key, genuine))
        assert host_agent.memory.running == {}
    finally:
        worker.set_agent(None)


def test_a_report_about_another_hosts_instance_is_refused_and_audited(
    launched, make_host, a100, django_capture_on_commit_callbacks
):
    from gpurental.accounts.models import AuditEvent
    from gpurental.rentals.tasks import instance_report
    from tests.messages import signed

    _, instance = launched
    other = make_host("node2", a100)
    with django_capture_on_commit_callbacks(execute=True):
        instance_report(**signed(other, instance_id=str(instance.pk), kind="removed", data={}))
        instance_report(**signed(other, instance_id="not-a-uuid", kind="running", data={"port": 1}))
    instance.refresh_from_db()
    assert instance.status == S.PENDING
    refused = AuditEvent.objects.get(action="host.report_refused", object_repr="node2")
    assert "is not on this host" in refused.changes["why"]


def test_the_agents_celery_app_never_loads_the_control_planes_settings(monkeypatch, tmp_path):
    """With DJANGO_SETTINGS_MODULE in its environment (a shell shared with the web), the
    agent must still not load Django: the settings would reach for a database."""
    from gpurental.agent.config import AgentConfig
    from gpurental.agent.worker import make_app

    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "gpurental.settings")
    config = AgentConfig.from_env(
        {
            "GPURENTAL_BROKER_URL": "memory://",
            "GPURENTAL_HOST_NAME": "node1",
            "GPURENTAL_HOST_TOKEN": "t",
            "GPURENTAL_WORK_DIR": str(tmp_path),
        }
    )
    app = make_app(config)
    assert not app.fixups and not app._fixups
