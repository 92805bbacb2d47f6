"""How the agent talks back: tasks sent to the reports queue, each signed with the host's
signing key (``protocol.sign``) and carrying the time it was sent and a nonce, which the
control plane checks against replays; the join token itself never leaves the host.

A launch's progress lines go out from a thread of their own: publishing one costs the
broker a round trip (~10 ms on a small host), which a launch need not wait for. Every
other report is sent by its caller, once the progress lines queued before it are out, so
the control plane still reads an instance's reports in the order they were made."""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time

from celery import Celery
from kombu.exceptions import OperationalError

from gpurental import protocol

log = logging.getLogger(__name__)

# The agent sends each report once, so a broker that restarts must not lose one (a lost
# "running" leaves its launch unfinished): publishing waits for the broker up to about two
# minutes. A heartbeat keeps Celery's short default: the next one follows.
REPORT_RETRY = {"max_retries": 60, "interval_start": 0.5, "interval_step": 0.5, "interval_max": 2}
# Kombu's retry covers a publish that fails; but a producer whose channel is opened while
# the broker is down gives up after broker_connection_timeout (4 s) with OperationalError,
# outside that retry (a RabbitMQ restart takes longer: tests/faults/test_rabbitmq_restart.py
# lost the "running" of a launch that way). The reporter waits that out too, this long.
REPORT_DEADLINE_S = 180.0
REPORT_PAUSE_S = 1.0


class ControlReporter:
    def __init__(self, app: Celery, *, host_name: str, token: str):
        self.app = app
        self.host_name = host_name
        # Commands are signed with the same key; start specs' secrets open with keys.spec.
        self.keys = protocol.host_keys(protocol.host_root(token))
        self.route = protocol.report_route(str(app.conf.broker_url or ""), host_name)
        self._progress: queue.Queue[dict] = queue.Queue()
        self._progress_sender: threading.Thread | None = None
        self._sender_lock = threading.Lock()

    @property
    def key(self) -> str:
        return self.keys.sign

    def _send(self, name: str, expires: float | None = None, **payload) -> None:
        """Publish one report; anything but a heartbeat waits for a broker that is down
        (restarting) for up to ``REPORT_DEADLINE_S``, each try signed afresh."""
        if name == protocol.HEARTBEAT:
            self._publish(name, expires, payload)
            return
        deadline = time.monotonic() + REPORT_DEADLINE_S
        while True:
            try:
                self._publish(name, expires, payload)
                return
            except OperationalError as exc:
                if time.monotonic() >= deadline:
                    raise
                log.warning("broker unreachable, %s tried again: %s", name, exc)
                time.sleep(REPORT_PAUSE_S)

    def _publish(self, name: str, expires: float | None, payload: dict) -> None:
        payload = {"host": self.host_name, "sent_at": time.time(), **payload}
        self.app.send_task(
            name,
            kwargs=protocol.sign(self.keys.sign, {**payload, "nonce": secrets.token_hex(12)}),
            expires=expires,
            retry_policy=None if name == protocol.HEARTBEAT else REPORT_RETRY,
            # Publish only: declaring the reports queue would need a broker permission an
            # agent's account does not have (and must not: it could delete the queue).
            declare=[],
            **self.route,
        )

    def heartbeat(
        self,
        *,
        inventory: list[dict] | None,
        containers: dict[str, str] | None,
        containers_listed_at: float | None,
        runtime: str,
        workspaces: dict[str, int] | None = None,
        gpu_source: str,
        agent_version: str,
        topology: dict | None = None,
        images: list[dict] | None = None,
        volumes: dict[str, int] | None = None,
    ) -> None:
        """Liveness. ``inventory`` and ``containers`` are the newest the agent has (None
        while it has none): a slow engine or GPU driver makes them late, never the beat."""
        self._send(
            protocol.HEARTBEAT,
            expires=protocol.HEARTBEAT_EXPIRES_S,
            inventory=inventory,
            topology=topology,
            containers=containers,
            containers_listed_at=containers_listed_at,
            workspaces=workspaces,
            images=images,
            volumes=volumes,
            runtime=runtime,
            gpu_source=gpu_source,
            agent_version=agent_version,
            sent_at=time.time(),
        )

    def report(self, instance_id: str, kind: str, **data) -> None:
        """A report about an instance. A ``progress`` line is queued and this returns at
        once; any other report is sent before this returns, after the queued lines."""
        log.info("instance %s: %s %s", instance_id, kind, data)
        payload = {"instance_id": instance_id, "kind": kind, "data": data, "sent_at": time.time()}
        if kind == "progress":
            self._ensure_progress_sender()
            self._progress.put(payload)
            return
        self._progress.join()  # the lines before it first
        self._send(protocol.INSTANCE_REPORT, **payload)

    def _ensure_progress_sender(self) -> None:
        with self._sender_lock:
            if self._progress_sender is None or not self._progress_sender.is_alive():
                self._progress_sender = threading.Thread(
                    target=self._send_progress, name="progress-sender", daemon=True
                )
                self._progress_sender.start()

    def _send_progress(self) -> None:
        while True:
            payload = self._progress.get()
            try:
                self._send(protocol.INSTANCE_REPORT, **payload)
            except Exception:  # noqa: BLE001 - a lost progress line must not stop the rest
                instance_id = payload["instance_id"]
                log.warning("instance %s: progress line not sent", instance_id, exc_info=True)
            finally:
                self._progress.task_done()

    def acceptance(self, run_id: str, kind: str, **data) -> None:
        """How an acceptance run went (``protocol.ACCEPTANCE_KINDS``)."""
        log.info("acceptance run %s: %s", run_id, kind)
        self._send(
            protocol.ACCEPTANCE_REPORT, run_id=run_id, kind=kind, data=data, sent_at=time.time()
        )

    def modelcache(self, kind: str, **data) -> None:
        """What became of a model cache request (``protocol.MODELCACHE_KINDS``)."""
        log.info("model cache: %s %s", kind, {k: v for k, v in data.items() if k != "repos"})
        self._send(protocol.MODELCACHE_REPORT, kind=kind, data=data, sent_at=time.time())

    def image(self, kind: str, **data) -> None:
        """What became of a request to save an instance as an image (``IMAGE_KINDS``)."""
        log.info("image save: %s %s", kind, data)
        self._send(protocol.IMAGE_REPORT, kind=kind, data=data, sent_at=time.time())

    def volume(self, kind: str, **data) -> None:
        """What became of a snapshot or a restore (``VOLUME_KINDS``)."""
        log.info("volume: %s %s", kind, data)
        self._send(protocol.VOLUME_REPORT, kind=kind, data=data, sent_at=time.time())

    def telemetry(self, minutes: list[dict], simulated: bool) -> None:
        """Finished per-minute GPU aggregates (see ``sampler.MinuteAggregator``)."""
        # Still worth writing when late (history, paid vs used), but not after hours.
        self._send(
            protocol.TELEMETRY,
            expires=3600,
            minutes=minutes,
            simulated=simulated,
            sent_at=time.time(),
        )
