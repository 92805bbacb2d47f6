"""Dedicated hosts: the plans, and your leases of whole hosts."""
