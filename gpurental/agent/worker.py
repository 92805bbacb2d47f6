"""The agent's Celery app: a worker on the queue host.<name>, no Django, no database."""

from __future__ import annotations

import logging

from celery import Celery

from gpurental import logs, protocol
from gpurental.agent.config import AgentConfig
from gpurental.agent.host import HostAgent

log = logging.getLogger(__name__)
_agent: HostAgent | None = None


def make_app(config: AgentConfig) -> Celery:
    # No fixups: Celery's Django fixup would load the control plane's settings whenever
    # DJANGO_SETTINGS_MODULE is in the environment, and with them reach for a database.
    app = Celery(f"gpurental-agent-{config.host_name}", broker=config.broker_url, fixups=[])
    app.conf.update(
        task_default_queue=config.queue,
        task_ignore_result=True,
        worker_prefetch_multiplier=1,
        task_time_limit=int(config.ready_timeout) + 300,
        task_soft_time_limit=int(config.ready_timeout) + 240,
        broker_connection_retry_on_startup=True,
        # No remote control: its pidbox exchange is one more thing a host's broker account
        # would need the right to declare.
        worker_enable_remote_control=False,
        worker_hijack_root_logger=False,
        broker_use_ssl=config.broker_ssl,
        # After a broker restart with a command running, Celery lowers the prefetch count
        # and raises it again from the pool thread that acknowledges the next command: on
        # the consumer's own AMQP connection, while the main thread reads it. With our
        # thread pool the two threads then share one socket: the agent hung (both waiting
        # on it) or lost the connection on a corrupt frame, and the command was never run
        # (tests/faults/test_rabbitmq_restart.py caught it; py-spy showed both threads in
        # basic_qos). Prefetch is 1 here anyway: nothing to lower.
        worker_enable_prefetch_count_reduction=False,
    )
    _register(app)
    # The request and instance ids of a command ride on its message headers; the agent's
    # log lines and reports carry them on.
    logs.connect_celery()
    return app


def set_agent(agent: HostAgent) -> None:
    global _agent
    _agent = agent


def _current() -> HostAgent:
    if _agent is None:
        raise RuntimeError("the host agent is not set up")
    return _agent


def _accepted(message: dict) -> dict | None:
    """The payload of a command signed by the control plane for this host; None (logged)
    for anything else: a forged or misdirected command does nothing here."""
    agent = _current()
    try:
        return protocol.verify(agent.reporter.keys.sign, message, host=agent.reporter.host_name)
    except protocol.Forged as exc:
        log.warning(
            "command refused (%s): %s", exc, {k: message.get(k) for k in ("host", "instance_id")}
        )
        return None


def _register(app: Celery) -> None:
    @app.task(name=protocol.START)
    def instance_start(**message) -> None:
        if (payload := _accepted(message)) is not None:
            _current().start(payload["spec"])

    @app.task(name=protocol.RESTART)
    def instance_restart(**message) -> None:
        if (payload := _accepted(message)) is not None:
            _current().restart(payload["spec"])

    # Stop and remove are retried a few times: the engine may be briefly busy.
    @app.task(
        name=protocol.STOP,
        autoretry_for=(Exception,),
        max_retries=3,
        default_retry_delay=5,
    )
    def instance_stop(**message) -> None:
        if (payload := _accepted(message)) is not None:
            # keep_container: the stopped container stays created (it can be saved as an
            # image); park: its network too (a group's warm replica starts it again).
            _current().stop(
                payload["instance_id"],
                keep_container=bool(payload.get("keep_container")),
                park=bool(payload.get("park")),
            )

    @app.task(
        name=protocol.REMOVE,
        autoretry_for=(Exception,),
        max_retries=3,
        default_retry_delay=5,
    )
    def instance_remove(**message) -> None:
        if (payload := _accepted(message)) is not None:
            _current().remove(payload["instance_id"])

    # The acceptance benchmark: minutes on a big host; never retried (a new run is asked for).
    @app.task(name=protocol.ACCEPTANCE_RUN, time_limit=3 * 3600, soft_time_limit=3 * 3600 - 60)
    def acceptance_run(**message) -> None:
        if (payload := _accepted(message)) is not None:
            from gpurental.agent.acceptance import acceptance_run as run

            run(_current(), payload)

    # Save an instance's container as an image and push it (agent/imagesave.py). Not
    # retried: the outcome is reported either way, and the customer asks again.
    @app.task(name=protocol.IMAGE_SAVE, time_limit=2 * 3600, soft_time_limit=2 * 3600 - 60)
    def image_save(**message) -> None:
        if (payload := _accepted(message)) is not None:
            from gpurental.agent.imagesave import image_save_command

            image_save_command(_current(), payload)

    # A deleted volume's data (gpurental/volumes/); retried: the engine may be busy.
    @app.task(
        name=protocol.VOLUME_REMOVE,
        autoretry_for=(Exception,),
        max_retries=3,
        default_retry_delay=5,
    )
    def volume_remove(**message) -> None:
        if (payload := _accepted(message)) is not None:
            remove = getattr(_current().runtime, "volume_remove", None)
            if remove is not None:
                remove(str(payload.get("volume", "")))

    # A volume's files to or from the object storage (agent/volumesnap.py). Not retried:
    # the outcome is reported either way, and the customer asks again.
    @app.task(name=protocol.VOLUME_SNAPSHOT, time_limit=6 * 3600, soft_time_limit=6 * 3600 - 60)
    def volume_snapshot(**message) -> None:
        if (payload := _accepted(message)) is not None:
            from gpurental.agent.volumesnap import volume_snapshot_command

            volume_snapshot_command(_current(), payload)

    @app.task(name=protocol.VOLUME_RESTORE, time_limit=6 * 3600, soft_time_limit=6 * 3600 - 60)
    def volume_restore(**message) -> None:
        if (payload := _accepted(message)) is not None:
            from gpurental.agent.volumesnap import volume_restore_command

            volume_restore_command(_current(), payload)

    # The shared Hugging Face cache: fill, evict, list (agent/modelcache.py). Not retried:
    # the outcome is reported either way, and the operator asks again.
    @app.task(name=protocol.MODELCACHE, time_limit=3 * 3600, soft_time_limit=3 * 3600 - 60)
    def modelcache(**message) -> None:
        if (payload := _accepted(message)) is not None:
            from gpurental.agent.modelcache import modelcache_command

            modelcache_command(_current(), payload)
