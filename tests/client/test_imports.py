"""The SDK installs and runs on a laptop without the server's dependencies."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import gpurental.client
import gpurental.client.cli
django = sorted(m for m in sys.modules if m == "django" or m.startswith("django."))
ours = sorted(
    m for m in sys.modules
    if m.startswith("gpurental.") and not m.startswith("gpurental.client")
)
print(repr((django, ours)))
"""


def test_importing_the_sdk_and_cli_loads_no_django_and_no_server_package():
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )

    assert result.stdout.strip() == "([], [])"
