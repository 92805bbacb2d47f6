"""Payments: top-ups, vouchers and automatic top-up."""
