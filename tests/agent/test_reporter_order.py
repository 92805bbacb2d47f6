"""The agent's reports (agent/reporter.py): a launch's progress lines go out from a thread
of their own, so a slow broker does not hold up the launch; every other report is sent by
its caller, after the lines queued before it, so the control plane reads them in order."""

from __future__ import annotations

import threading

from celery import Celery

from gpurental import protocol
from gpurental.agent.reporter import ControlReporter


class SlowBroker:
    """Stands in for the agent's Celery app: each publish waits until ``open`` is set,
    and one named kind may fail once."""

    def __init__(self, fail_first: str | None = None):
        self.conf = Celery("slow", broker="redis://").conf
        self.open = threading.Event()
        self.sent: list[tuple[str, str]] = []  # (kind, message)
        self.fail_first = fail_first

    def send_task(self, name, kwargs=None, **options):
        assert name == protocol.INSTANCE_REPORT
        self.open.wait(10)
        kind, data = kwargs["kind"], kwargs["data"]
        if kind == self.fail_first:
            self.fail_first = None
            raise ConnectionError("the broker went away")
        self.sent.append((kind, data.get("message", "")))


def reporter_on(app) -> ControlReporter:
    return ControlReporter(app, host_name="node1", token="t" * 32)


def test_a_progress_line_does_not_wait_for_the_broker():
    app = SlowBroker()
    reporter = reporter_on(app)
    reporter.report("i-1", "progress", step="creating", message="creating container")
    assert app.sent == []  # returned while the publish still waits
    app.open.set()
    reporter._progress.join()
    assert app.sent == [("progress", "creating container")]


def test_a_final_report_goes_after_the_lines_queued_before_it():
    app = SlowBroker()
    reporter = reporter_on(app)
    for message in ("creating container", "waiting for JupyterLab"):
        reporter.report("i-1", "progress", step="", message=message)
    running = threading.Thread(target=reporter.report, args=("i-1", "running"), kwargs={"port": 1})
    running.start()
    running.join(0.3)
    assert running.is_alive(), "running was sent (or given up) before the broker took anything"
    app.open.set()
    running.join(10)
    assert app.sent == [
        ("progress", "creating container"),
        ("progress", "waiting for JupyterLab"),
        ("running", ""),
    ]


def test_a_progress_line_the_broker_refused_does_not_stop_the_next_ones():
    app = SlowBroker(fail_first="progress")
    app.open.set()
    reporter = reporter_on(app)
    reporter.report("i-1", "progress", step="", message="lost")
    reporter.report("i-1", "progress", step="", message="creating container")
    reporter.report("i-1", "failed", reason="the image would not start")
    assert app.sent == [("progress", "creating container"), ("failed", "")]
