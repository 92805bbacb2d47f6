"""Backups for real: pg_dump of the test database with its summary, restored by
pg_restore into a scratch database and compared; a restore that differs says what differs;
beat's task keeps the newest BACKUP_KEEP."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from gpurental.backups import services
from gpurental.backups.services import backup_create, backups, restore_check
from gpurental.billing.services.credits import credit_add
from gpurental.billing.services.invoicing import invoice_generate, invoice_issue

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.backend]


@pytest.fixture
def money(alice, bob):
    """Credit on the ledger and an issued (numbered) invoice: what a restore must give back."""
    credit_add(user=alice, amount=Decimal("25.50"))
    credit_add(user=bob, amount=Decimal("7.25"))
    invoice = invoice_generate(user=alice, year=2026, month=11)
    return invoice_issue(invoice=invoice)


def test_a_backup_restores_with_the_same_ledger_invoices_and_counts(money, tmp_path, settings):
    settings.BACKUP_DIR = tmp_path
    dump = backup_create()
    meta = json.loads(dump.with_suffix(".json").read_text())
    held = meta["summary"]
    assert held["ledger_total"] == "32.750000" and held["invoices_numbered"] == 1
    assert held["invoice_numbers_last"] == money.number
    assert held["counts"]["billing_ledgerentry"] == 2 and held["counts"]["accounts_user"] >= 2

    credit_add(user=money.user, amount=Decimal("1"))  # after the backup: not in it
    out = StringIO()
    call_command("restore_check", stdout=out)
    assert "same as backed up" in out.getvalue() and dump.name in out.getvalue()

    result = restore_check(dump)
    assert result.ok and result.restore_s > 0 and result.summary == held


def test_a_restore_that_differs_says_what_differs(money, tmp_path, settings):
    settings.BACKUP_DIR = tmp_path
    dump = backup_create()
    meta_path = dump.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["summary"]["ledger_total"] = "99.000000"  # as if the dump had lost a payment
    meta["summary"]["counts"]["billing_invoice"] += 1
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CommandError) as failed:
        call_command("restore_check", str(dump), stdout=StringIO())
    assert "ledger_total: '99.000000' backed up, '32.750000' restored" in str(failed.value)
    assert "billing_invoice: 2 rows backed up, 1 restored" in str(failed.value)


def test_beat_keeps_the_newest_and_an_empty_folder_says_so(alice, tmp_path, settings):
    from gpurental.backups.tasks import backup

    settings.BACKUP_DIR = tmp_path
    with pytest.raises(CommandError, match="no backup in"):
        call_command("restore_check", stdout=StringIO())
    settings.BACKUP_KEEP = 2
    first = backup_create(now=timezone.make_aware(datetime(2026, 1, 1)))
    for _ in range(2):
        backup()
    kept = backups()
    assert len(kept) == 2 and first not in kept and not first.with_suffix(".json").exists()
    assert not list(tmp_path.glob("*.partial"))
    assert services.backups_prune(keep=2) == 0
