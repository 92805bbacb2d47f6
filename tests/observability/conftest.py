"""Prometheus's own tools for the observability tests (Debian's ``prometheus`` package:
``apt-get install prometheus``). Missing, they skip here and fail under CI."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.agent.conftest import skip_unless_ci
from tests.telemetry.conftest import (  # noqa: F401 - the telemetry tests' fixtures, shared
    _telemetry_test_settings,
    node1,
    publisher,
    run_instance,
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "observability"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        skip_unless_ci(f"{name} is not installed: apt-get install prometheus")
    return path


@pytest.fixture(scope="session")
def promtool() -> str:
    return _tool("promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    return _tool("prometheus")


def exposed_names(text: str) -> set[str]:
    """Every series name an exposition can hold, from its TYPE lines (a counter's
    ``_total``, a histogram's ``_bucket``, ``_sum`` and ``_count``)."""
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        if kind == "counter":
            names.add(name if name.endswith("_total") else f"{name}_total")
        elif kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            names.add(name)
    return names
