"""Billing writes, by topic: ``credits`` (the ledger), ``metering`` (charges),
``prepaid`` (may this launch start?), ``limits`` (stop what the balance no longer
covers), ``invoicing`` (monthly invoices, numbers, credit notes)."""

from gpurental.billing.services.credits import credit_add

__all__ = ["credit_add"]
