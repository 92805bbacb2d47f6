"""A host agent driven through its real command path (signed task → worker → agent →
signed reports → control-plane task), with the broker replaced by lists on both sides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from celery import Celery

from gpurental import protocol
from gpurental.agent import worker
from gpurental.agent.activity import Holdings
from gpurental.agent.gpus.simulated import SimulatedSource
from gpurental.agent.host import HostAgent
from gpurental.agent.reporter import ControlReporter


class Outbox:
    """Stands in for a Celery app's publishing side: keeps what would be sent."""

    def __init__(self):
        self.sent: list[dict] = []
        self.conf = Celery("outbox", broker="redis://").conf

    def send_task(self, name, kwargs=None, queue=None, **options):
        self.sent.append({"name": name, "queue": queue, "kwargs": kwargs or {}})


def tiny_model(path: Path, *, weights: bytes = b"\x00" * 4096) -> Path:
    """A plain model folder as save_pretrained writes one (small stand-in files)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    (path / "model.safetensors").write_bytes(weights)
    (path / "tokenizer.json").write_text("{}")
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    return path


@pytest.fixture
def cache_host(make_host, a100, tmp_path, monkeypatch):
    """Host node1 (control plane row with hf_cache_dir) and its agent (cache and import
    directories on the real filesystem). ``run()`` delivers what the control plane sent to
    the agent and the agent's reports back to the control plane, until both are quiet."""
    from gpurental.celery_app import app
    from gpurental.modelcache.tasks import modelcache_report

    cache, imports = tmp_path / "hf-cache", tmp_path / "imports"
    cache.mkdir()
    imports.mkdir()
    host = make_host("node1", a100, hf_cache_dir=str(cache))
    outbox = Outbox()
    agent = HostAgent(
        runtime=None,
        source=SimulatedSource(host_name="node1", model_name="NVIDIA A100-SXM4-80GB", count=8),
        reporter=ControlReporter(outbox, host_name="node1", token=host.token),
        bind_address="127.0.0.1",
        holdings=Holdings(),
        hf_cache_dir=str(cache),
        model_import_dir=str(imports),
    )
    commands: list[dict] = []
    monkeypatch.setattr(
        app,
        "send_task",
        lambda name, kwargs=None, queue=None, **kw: commands.append(
            {"name": name, "kwargs": kwargs, "queue": queue}
        ),
    )
    agent_app = Celery("agent-under-test", broker="memory://")
    worker._register(agent_app)
    worker.set_agent(agent)

    def run(django_capture_on_commit_callbacks):
        delivered = []
        while commands or outbox.sent:
            while commands:
                command = commands.pop(0)
                if command["name"] not in protocol.AGENT_TASKS:
                    continue
                assert command["queue"] == protocol.host_queue("node1")
                agent_app.tasks[command["name"]].run(**command["kwargs"])
            while outbox.sent:
                report = outbox.sent.pop(0)
                assert report["name"] == protocol.MODELCACHE_REPORT
                kind, data = report["kwargs"]["kind"], report["kwargs"]["data"]
                assert set(data) <= set(protocol.MODELCACHE_KINDS[kind]), kind
                delivered.append(report["kwargs"])
                with django_capture_on_commit_callbacks(execute=True):
                    modelcache_report(**report["kwargs"])
        return delivered

    host.cache, host.imports, host.agent, host.run = cache, imports, agent, run
    yield host
    worker.set_agent(None)
