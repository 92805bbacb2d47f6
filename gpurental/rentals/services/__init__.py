"""Rental services: scheduling (placement with the DB as referee), lifecycle, reconciliation."""
