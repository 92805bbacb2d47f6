"""Billing: your usage per day and your invoices (PDF, CSV)."""
