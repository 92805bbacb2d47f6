"""Reconcile at fleet size: N silent hosts with one running instance each, and the pass
that marks them offline and their instances unreachable (``hosts_mark_offline``, what the
``reconcile`` task runs every 10 s), with everything each transition writes: the
instance's event, the host's audit row, the websocket message, the customer's
notification.

    .venv/bin/python bench/reconcile.py [--hosts 1000] [--smoke]

Prints the pass's wall time and its SQL statements, then checks the result (every
instance unreachable with one event, every host offline with its audit row). A report,
never a test: nothing here fails because this machine is slow.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import setup_django  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--smoke", action="store_true", help="50 hosts: it still runs")
    args = parser.parse_args()
    hosts = 50 if args.smoke else args.hosts
    var = Path(tempfile.mkdtemp(prefix="gpurental-bench-reconcile-"))
    try:
        return run(var, hosts)
    finally:
        from gpurental import embedded

        embedded.stop(var)  # its own servers (none under make bench-smoke: shared ones)
        shutil.rmtree(var, ignore_errors=True)


def run(var: Path, hosts: int) -> int:
    setup_django(var, CELERY_TASK_ALWAYS_EAGER="0")
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from bench.fleet import make_fleet
    from gpurental.accounts.models import AuditEvent
    from gpurental.fleet.models import Host, HostStatus
    from gpurental.notifications.models import Notification
    from gpurental.rentals.models import Instance, InstanceEvent, InstanceStatus
    from gpurental.rentals.services.reconcile import hosts_mark_offline

    started = time.monotonic()
    make_fleet(hosts)
    print(f"{hosts} hosts with a running instance each, made in {time.monotonic() - started:.1f} s")
    now = timezone.now()
    silent_since = now - timedelta(seconds=settings.HOST_OFFLINE_AFTER + 5)
    Host.objects.update(last_heartbeat_at=silent_since, status=HostStatus.ACTIVE)
    events_before = InstanceEvent.objects.count()
    with CaptureQueriesContext(connection) as queries:
        started = time.monotonic()
        names = hosts_mark_offline(now=now)
        seconds = time.monotonic() - started
    unreachable = Instance.objects.filter(status=InstanceStatus.UNREACHABLE).count()
    offline = Host.objects.filter(status=HostStatus.OFFLINE).count()
    events = InstanceEvent.objects.count() - events_before
    audits = AuditEvent.objects.filter(action="host.offline").count()
    notified = Notification.objects.filter(event="instance_unreachable").count()
    print(
        f"hosts_mark_offline: {len(names)} hosts offline, {unreachable} instances unreachable "
        f"in {seconds:.2f} s ({1000 * seconds / max(1, unreachable):.1f} ms an instance), "
        f"{len(queries.captured_queries)} SQL statements"
    )
    print(
        f"written: {events} instance events, {audits} host audit rows, {notified} "
        f"notifications (made in the pass, or queued for the worker when 0)"
    )
    ok = unreachable == hosts and offline == hosts and events == hosts
    print("result: " + ("as expected" if ok else "NOT as expected"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
