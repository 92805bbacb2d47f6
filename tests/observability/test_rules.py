"""The shipped alert rules: valid, and each one fires in its promtool unit test when it
should and not before."""

from __future__ import annotations

import subprocess

import yaml

from tests.observability.conftest import DEPLOY

RULES = DEPLOY / "rules" / "gpurental.rules.yml"
RULE_TESTS = DEPLOY / "rules" / "gpurental.rules.test.yml"
REQUIRED = {
    "GpurentalHostUnreachable",
    "GpurentalHeartbeatLate",
    "GpurentalLaunchFailureRate",
    "GpurentalQueueBackingUp",
    "GpurentalMeterLag",
    "GpurentalGpuTemperatureHigh",
}


def alerts() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


def test_the_rules_file_is_valid(promtool):
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_passes_its_promtool_unit_test(promtool):
    done = subprocess.run(
        [promtool, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_each_alert_has_a_case_that_fires_and_one_that_does_not():
    assert alerts() >= REQUIRED
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired, quiet = set(), set()
    for case in cases:
        for check in case.get("alert_rule_test", []):
            (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert fired == alerts()
    assert quiet == alerts()
