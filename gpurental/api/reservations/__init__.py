"""Reservations: GPUs booked ahead for a period, and the availability to book."""
