"""HostAgent with the real process runtime (JupyterLab subprocesses): what it reports to
the control plane, and that two instances never run on one GPU of this host."""

from __future__ import annotations

import uuid

import pytest

from gpurental import protocol
from gpurental.agent.activity import Holdings
from gpurental.agent.gpus.simulated import SimulatedSource
from gpurental.agent.host import HostAgent
from gpurental.agent.runtimes import make_runtime

pytestmark = pytest.mark.slow  # JupyterLab subprocesses


class RecordingReporter:
    """The agent's reports, kept here instead of sent to the control queue."""

    keys = protocol.host_keys(protocol.host_root("node1's join token"))

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
            **{k: getattr(spec, k) for k in ("instance_id", "image", "gpu_source")},
            "sealed": protocol.spec_seal(RecordingReporter.keys.spec, {"token": spec.token}),
            "gpu_indices": list(spec.gpu_indices),
            "gpu_uuids": [],
            "cpu_count": spec.cpu_count,
            "memory_mb": spec.memory_mb,
            "pids_limit": spec.pids_limit,
            "container_port": spec.container_port,
            "http_ports": list(spec.http_ports),
            "ssh": None,
            "env": dict(spec.env),
            "mount_model_cache": False,
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


def test_the_model_cache_mounted_is_the_agents_own_never_a_path_from_a_message(tmp_path):
    agent = HostAgent(
        runtime=make_runtime("process", base_dir=tmp_path / "i", ready_timeout_s=5),
        source=SimulatedSource(host_name="node1", count=1),
        reporter=RecordingReporter(),
        bind_address="127.0.0.1",
        hf_cache_dir="/srv/models",
    )
    spec = {"instance_id": str(uuid.uuid4()), "gpu_indices": [0], "mount_model_cache": True}
    assert agent._spec({**spec, **_minimal()}).hf_cache_dir == "/srv/models"
    assert agent._spec({**spec, **_minimal(), "mount_model_cache": False}).hf_cache_dir is None
    with pytest.raises(protocol.SpecRefused, match="unknown"):
        protocol.spec_check({**_full(), "hf_cache_dir": "/var/run"})  # the old, dangerous field
    agent.hf_cache_dir = ""
    with pytest.raises(ValueError, match="GPURENTAL_HF_CACHE_DIR"):
        agent._spec({**spec, **_minimal()})


def _minimal() -> dict:
    return {
        "image": "i",
        "token": "t",
        "gpu_uuids": [],
        "gpu_source": "simulated",
        "cpu_count": 1.0,
        "memory_mb": 512,
    }


def _full() -> dict:
    return dict.fromkeys(protocol.SPEC_FIELDS, "x") | {"spec_version": protocol.SPEC_VERSION}
