"""History tables refuse UPDATE and DELETE in the database itself."""

from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from gpurental.accounts.models import AuditEvent
from gpurental.accounts.services import audit_record
from gpurental.billing.models import LedgerEntry
from gpurental.billing.services import credit_add
from gpurental.rentals.models import InstanceEvent
from tests.factories import InstanceFactory

pytestmark = pytest.mark.backend  # triggers and check constraints in PostgreSQL


@pytest.mark.django_db
def test_audit_events_cannot_be_changed_or_deleted(alice):
    event = audit_record(action="test.action", actor=alice)
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(action="forged")
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        event.delete()
    assert AuditEvent.objects.get(pk=event.pk).action == "test.action"


@pytest.mark.django_db
def test_ledger_entries_cannot_be_changed_or_deleted(alice):
    entry = credit_add(user=alice, amount=Decimal("10.00"))
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        LedgerEntry.objects.filter(pk=entry.pk).update(amount=Decimal("1000.00"))
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        LedgerEntry.objects.filter(pk=entry.pk).delete()


@pytest.mark.django_db
def test_instance_events_cannot_be_changed():
    event = InstanceEvent.objects.create(
        instance=InstanceFactory(), to_status="pending", reason="launched"
    )
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        InstanceEvent.objects.filter(pk=event.pk).update(reason="rewritten")


@pytest.mark.django_db
def test_credit_must_be_positive(alice):
    with pytest.raises(ValueError, match="amount"):
        credit_add(user=alice, amount=Decimal("0"))
    with pytest.raises(IntegrityError, match="ledger_credit_positive"), transaction.atomic():
        LedgerEntry.objects.create(user=alice, kind=LedgerEntry.Kind.CREDIT, amount=Decimal("-5"))
