"""Instance lifecycle: the only code that creates an instance or changes its status.

Every transition is one named function that locks the instance row, checks the states
it may start from, changes it, writes an ``InstanceEvent`` and publishes it live.
Repeating a transition that already happened changes nothing. Commands to host agents
are sent on commit (``hostcalls``).

    pending → provisioning → running → stopping → stopped → pending (start) …
    … → terminating → terminated;  side exits: failed, unreachable, lost

- ``customer``: what customers and staff ask (launch, stop, start, restart, terminate).
- ``reports``: what host agents report (progress, running, failed, stopped, removed).
- ``hosts``: what reconciliation finds (a silent host, a host back, a vanished container,
  operations that timed out).

``tests/rentals/test_state_owner.py`` checks that nothing outside this package writes
``Instance.status``.
"""

from gpurental.rentals.services.lifecycle.base import (
    LAUNCHING,
    STOPPABLE,
    host_alive,
    instance_notice,
    instances_notify,
)
from gpurental.rentals.services.lifecycle.customer import (
    IDLE_MINUTES_RANGE,
    TERMINABLE,
    check_idle_minutes,
    instance_launch,
    instance_launch_leased,
    instance_launch_reserved,
    instance_restart,
    instance_set_idle_policy,
    instance_start,
    instance_stop,
    instance_terminate,
    resolve_plan,
)
from gpurental.rentals.services.lifecycle.hosts import (
    instance_fail_launch_timeout,
    instance_fail_unsent,
    instance_host_back,
    instance_mark_lost,
    instance_mark_unreachable,
    instance_mark_vanished,
    instance_remove_timeout,
    instance_stop_timeout,
    instances_mark_unreachable,
)
from gpurental.rentals.services.lifecycle.recovery import (
    instance_recover,
    instance_set_auto_recover,
)
from gpurental.rentals.services.lifecycle.reports import (
    instance_report_failed,
    instance_report_progress,
    instance_report_removed,
    instance_report_running,
    instance_report_stopped,
)

__all__ = [
    "IDLE_MINUTES_RANGE",
    "LAUNCHING",
    "STOPPABLE",
    "TERMINABLE",
    "check_idle_minutes",
    "host_alive",
    "instance_fail_launch_timeout",
    "instance_fail_unsent",
    "instance_host_back",
    "instance_launch",
    "instance_launch_leased",
    "instance_launch_reserved",
    "instance_mark_lost",
    "instance_mark_unreachable",
    "instances_mark_unreachable",
    "instances_notify",
    "instance_mark_vanished",
    "instance_notice",
    "instance_recover",
    "instance_remove_timeout",
    "instance_report_failed",
    "instance_report_progress",
    "instance_report_removed",
    "instance_report_running",
    "instance_report_stopped",
    "instance_set_auto_recover",
    "instance_restart",
    "instance_set_idle_policy",
    "instance_start",
    "instance_stop_timeout",
    "instance_stop",
    "instance_terminate",
    "resolve_plan",
]
