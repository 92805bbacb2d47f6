"""The agent's Celery app: a worker on the queue host.<name>, no Django, no database."""

from __future__ import annotations

from celery import Celery

from gpurental import protocol
from gpurental.agent.config import AgentConfig
from gpurental.agent.host import HostAgent

_agent: HostAgent | None = None


def make_app(config: AgentConfig) -> Celery:
    app = Celery(f"gpurental-agent-{config.host_name}", broker=config.broker_url)
    app.conf.update(
        task_default_queue=config.queue,
        task_ignore_result=True,
        worker_prefetch_multiplier=1,
        task_time_limit=int(config.ready_timeout) + 300,
        task_soft_time_limit=int(config.ready_timeout) + 240,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    _register(app)
    return app


def set_agent(agent: HostAgent) -> None:
    global _agent
    _agent = agent


def _current() -> HostAgent:
    if _agent is None:
        raise RuntimeError("the host agent is not set up")
    return _agent


def _register(app: Celery) -> None:
    @app.task(name=protocol.START)
    def instance_start(spec: dict) -> None:
        _current().start(spec)

    @app.task(name=protocol.RESTART)
    def instance_restart(spec: dict) -> None:
        _current().restart(spec)

    # Stop and remove are retried a few times: the engine may be briefly busy.
    @app.task(
        name=protocol.STOP,
        autoretry_for=(Exception,),
        max_retries=3,
        default_retry_delay=5,
    )
    def instance_stop(instance_id: str) -> None:
        _current().stop(instance_id)

    @app.task(
        name=protocol.REMOVE,
        autoretry_for=(Exception,),
        max_retries=3,
        default_retry_delay=5,
    )
    def instance_remove(instance_id: str) -> None:
        _current().remove(instance_id)
