"""HostAgent with the real process runtime (JupyterLab subprocesses): what it reports to
the control plane, and that two instances never run on one GPU of this host."""

from __future__ import annotations

import pytest

from gpurental import protocol
from gpurental.agent.activity import Holdings
from gpurental.agent.gpus.simulated import SimulatedSource
from gpurental.agent.host import HostAgent
from gpurental.agent.runtimes import make_runtime


class RecordingReporter:
    """The agent's reports, kept here instead of sent to the control queue."""

    def __init__(self):
        self.reports: list[tuple[str, str, dict]] = []

    def report(self, instance_id: str, kind: str, **data) -> None:
        self.reports.append((instance_id, kind, data))

    def kinds(self, instance_id: str) -> list[str]:
        return [kind for iid, kind, _ in self.reports if iid == instance_id]

    def messages(self, instance_id: str) -> list[str]:
        return [d.get("message", "") for iid, _, d in self.reports if iid == instance_id]


@pytest.fixture
def agent(tmp_path, jupyter_installed):
    runtime = make_runtime("process", base_dir=tmp_path / "instances", ready_timeout_s=60)
    agent = HostAgent(
        runtime=runtime,
        source=SimulatedSource(host_name="node1", count=4),
        reporter=RecordingReporter(),
        bind_address="127.0.0.1",
        holdings=Holdings(),
    )
    started: list[str] = []
    yield agent, started
    for instance_id in started:
        runtime.remove(instance_id)


def start(agent, started, spec) -> None:
    started.append(spec.instance_id)
    agent.start(
        {
            "spec_version": protocol.SPEC_VERSION,
            **{k: getattr(spec, k) for k in ("instance_id", "image", "token", "gpu_source")},
            "gpu_indices": list(spec.gpu_indices),
            "gpu_uuids": [],
            "cpu_count": spec.cpu_count,
            "memory_mb": spec.memory_mb,
            "pids_limit": spec.pids_limit,
            "container_port": spec.container_port,
            "env": dict(spec.env),
            "hf_cache_dir": None,
            "command": list(spec.command),
        }
    )


def test_a_start_on_a_gpu_still_held_stops_the_previous_container_first(agent, make_spec):
    """A reservation's end and the next one's start: the stop may still be queued."""
    agent, started = agent
    before, after = make_spec(gpu_indices=(0, 1)), make_spec(gpu_indices=(1, 2))
    start(agent, started, before)
    assert agent.reporter.kinds(before.instance_id)[-1] == "running"

    start(agent, started, after)

    assert agent.reporter.kinds(before.instance_id)[-1] == "stopped"
    assert agent.reporter.kinds(after.instance_id)[-1] == "running"
    assert "waiting for the previous container on GPU 1 to stop" in agent.reporter.messages(
        after.instance_id
    )
    assert agent.runtime.list_instances().get(before.instance_id) == "stopped"
    assert {h.instance_id for h in agent.holdings.snapshot()} == {after.instance_id}


def test_starts_on_other_gpus_leave_each_other_alone(agent, make_spec):
    agent, started = agent
    first, second = make_spec(gpu_indices=(0,)), make_spec(gpu_indices=(3,))
    start(agent, started, first)
    start(agent, started, second)
    assert agent.reporter.kinds(first.instance_id)[-1] == "running"
    assert agent.reporter.kinds(second.instance_id)[-1] == "running"
    assert agent.runtime.list_instances().get(first.instance_id) == "running"
