"""What the fault tests share: a record of the tasks the in-process control worker ran."""

from __future__ import annotations

import threading
import time

import pytest
from celery.signals import task_prerun

from gpurental import protocol
from tests.billing.conftest import funded, h100, plan, run_instance  # noqa: F401 - fixtures


class TasksSeen:
    """What the control worker took off its queues: instance reports (instance id, kind)
    and when it took heartbeats (monotonic seconds)."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, str]] = []
        self.heartbeats: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, sender=None, kwargs=None, **_ignored) -> None:
        name = getattr(sender, "name", "")
        with self._lock:
            if name == protocol.INSTANCE_REPORT and kwargs:
                self.reports.append((str(kwargs.get("instance_id")), str(kwargs.get("kind"))))
            elif name == protocol.HEARTBEAT:
                self.heartbeats.append(time.monotonic())

    def tried(self, kind: str) -> set[str]:
        with self._lock:
            return {instance_id for instance_id, seen in self.reports if seen == kind}

    def heartbeats_since(self, since: float) -> list[float]:
        with self._lock:
            return [at for at in self.heartbeats if at >= since]


@pytest.fixture
def control_tasks():
    seen = TasksSeen()
    task_prerun.connect(seen, weak=False)
    try:
        yield seen
    finally:
        task_prerun.disconnect(seen)
