"""Python SDK and CLI for gpurental. Imports nothing from Django (filled by the console/API issue)."""
