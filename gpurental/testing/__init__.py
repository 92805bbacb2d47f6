"""Test support shipped with the package (the pytest plugin that starts embedded servers)."""
