"""scripts/check_status_writers.py (make lint): one writer per status, for Instance and Host."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(
    "check_status_writers", ROOT / "scripts" / "check_status_writers.py"
)
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)


def test_only_the_owners_write_instance_and_host_status():
    assert check.offenders(sorted((ROOT / "gpurental").rglob("*.py"))) == []


def test_each_kind_of_write_is_caught_with_its_model():
    writes = {
        "host.status = 'offline'": "Host",
        "run.host.status = 'held'": "Host",
        "instance.status = 'running'": "Instance",
        "self.instance.status = 'lost'": "Instance",
        "replica.status, x = 'stopped', 1": "Instance",
        "setattr(host, 'status', 'active')": "Host",
        "Host.objects.filter(pk=1).update(status='offline')": "Host",
        "Instance.objects.select_for_update().filter(pk=1).update(status='lost')": "Instance",
        "host.instances.filter(status='running').update(status='lost')": "Instance",
        "instance.save(update_fields=['status', 'status_reason'])": "Instance",
        "Host.objects.bulk_update(rows, ['status'])": "Host",
        "def f(obj: Instance):\n    obj.status = 'failed'": "Instance",
        "def f(pk):\n    h = Host.objects.get(pk=pk)\n    h.status = 'active'": "Host",
        "def f():\n    for h in Host.objects.all():\n        h.save(update_fields=['status'])": "Host",
    }
    for code, model in writes.items():
        found = check.status_writes(code)
        assert [m for _, m, _ in found] == [model], code


def test_other_statuses_and_reads_are_not_writes():
    code = "\n".join(
        [
            "reservation.status = 'cancelled'",
            "row.status = to",
            "invoice.save(update_fields=['status'])",
            "fields.update(status='delivered')",
            "Payment.objects.filter(pk=1).update(status='failed')",
            "if host.status == 'active': pass",
            "Instance.objects.filter(status='running').count()",
        ]
    )
    assert check.status_writes(code) == []


def test_a_second_writer_is_named_by_file_and_line_and_the_owner_is_not(tmp_path, monkeypatch):
    monkeypatch.setattr(check, "ROOT", tmp_path)
    source = "def f(host):\n    host.status = 'active'\n    host.save(update_fields=['status'])\n"
    writer = tmp_path / "gpurental" / "console" / "views.py"
    owner = tmp_path / "gpurental" / "fleet" / "lifecycle.py"
    for path in (writer, owner):
        path.parent.mkdir(parents=True)
        path.write_text(source)
    found = check.offenders([writer, owner])
    assert [line.split(": ")[0] for line in found] == [
        "gpurental/console/views.py:2",
        "gpurental/console/views.py:3",
    ]
    assert "only gpurental/fleet/lifecycle.py may" in found[0]
