"""Elastic groups: a spec applied, quoted, read and deleted."""
