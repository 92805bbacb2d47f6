"""The customer's billing details: who invoices are made out to (name, company, postal
address in any script). Issued invoices keep the details of their day (Invoice.bill_to)."""

from __future__ import annotations

from django.db import transaction

from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record

FIELDS = ("full_name", "company", "billing_address")


def billing_details_update(
    *,
    user: User,
    full_name: str,
    company: str,
    billing_address: str,
    actor: User | None = None,
    ip: str | None = None,
) -> User:
    """Change what the next invoices print under "Bill to"; an audit row names the change."""
    # Line ends as typed in a browser (\r\n) would print as empty lines on the PDF.
    address = "\n".join(line.strip() for line in billing_address.splitlines() if line.strip())
    new = {"full_name": full_name.strip(), "company": company.strip(), "billing_address": address}
    with transaction.atomic():
        user = User.objects.select_for_update().get(pk=user.pk)
        changes = {f: new[f] for f in FIELDS if getattr(user, f) != new[f]}
        if not changes:
            return user
        for field, value in changes.items():
            setattr(user, field, value)
        user.save(update_fields=list(changes))
        audit_record(
            action="user.billing_details",
            actor=actor or user,
            obj=user,
            changes=changes,
            ip_address=ip,
        )
    return user
