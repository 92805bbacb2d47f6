"""Invoices keep the rules every resource keeps (tests/api/resources.py)."""

from gpurental.billing.services.invoicing import invoice_generate, invoice_issue
from tests.api.resources import OwnedResourceRules


class TestInvoiceRules(OwnedResourceRules):
    list_url = "/api/v1/invoices/"
    unknown_id = "987654321"  # invoice ids are integers

    def make(self, request, owner):
        draft = invoice_generate(user=owner, year=2026, month=10)
        return invoice_issue(invoice=draft)  # drafts are not shown
