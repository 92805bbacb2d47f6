"""How the agent talks back: tasks sent to the control queue, each carrying the host token."""

from __future__ import annotations

import logging
import time

from celery import Celery

log = logging.getLogger(__name__)

HEARTBEAT_TASK = "gpurental.fleet.tasks.host_heartbeat"
REPORT_TASK = "gpurental.rentals.tasks.instance_report"
TELEMETRY_TASK = "gpurental.telemetry.tasks.telemetry_record"


class ControlReporter:
    def __init__(self, app: Celery, *, host_name: str, token: str):
        self.app = app
        self.host_name = host_name
        self.token = token

    def _send(self, name: str, expires: float | None = None, **kwargs) -> None:
        self.app.send_task(
            name,
            kwargs={"host": self.host_name, "token": self.token, **kwargs},
            queue="control",
            expires=expires,
        )

    def heartbeat(
        self,
        *,
        inventory: list[dict],
        containers: dict[str, str],
        runtime: str,
        gpu_source: str,
        agent_version: str,
    ) -> None:
        # A heartbeat is only worth anything while fresh.
        self._send(
            HEARTBEAT_TASK,
            expires=30,
            inventory=inventory,
            containers=containers,
            runtime=runtime,
            gpu_source=gpu_source,
            agent_version=agent_version,
            sent_at=time.time(),
        )

    def report(self, instance_id: str, kind: str, **data) -> None:
        log.info("instance %s: %s %s", instance_id, kind, data)
        self._send(REPORT_TASK, instance_id=instance_id, kind=kind, data=data, sent_at=time.time())

    def telemetry(self, minutes: list[dict], simulated: bool) -> None:
        """Finished per-minute GPU aggregates (see ``sampler.MinuteAggregator``)."""
        # Still worth writing when late (history, paid vs used), but not after hours.
        self._send(
            TELEMETRY_TASK, expires=3600, minutes=minutes, simulated=simulated, sent_at=time.time()
        )
