"""What anyone can cause without an account (failed logins, lockouts, throttled sign-ups
and resets, forged payment webhooks) writes a bounded number of rows into the append-only
audit table: one per action and address per minute, the rest counted."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine

from gpurental.accounts import services
from gpurental.accounts.models import AuditEvent
from gpurental.accounts.services import signup_start
from gpurental.billing.payments.base import WebhookRefused
from gpurental.billing.services.payments import webhook_refuse

T0 = dt.datetime(2026, 3, 2, 12, 0, 5, tzinfo=dt.UTC)


def flood(cause, times: int) -> None:
    """``cause(number)`` ``times`` times within one minute."""
    with time_machine.travel(T0, tick=False):
        for number in range(times):
            cause(number)


def rows(action: str) -> int:
    return AuditEvent.objects.filter(action=action).count()


@pytest.mark.backend
def test_a_flood_of_failed_logins_from_one_address_writes_one_row_a_minute(client, db, settings):
    settings.AXES_FAILURE_LIMIT = 1000  # no lockout: every attempt is a failure
    flood(
        lambda n: client.post(
            "/login/", {"username": f"{n}@example.com", "password": "x"}, REMOTE_ADDR="192.0.2.5"
        ),
        30,
    )
    assert rows("auth.login_failed") == 1


@pytest.mark.backend
def test_lockouts_repeated_from_one_address_write_one_row_a_minute(client, db, settings):
    settings.AXES_FAILURE_LIMIT = 2
    flood(
        lambda n: client.post(
            "/login/", {"username": "x@example.com", "password": "x"}, REMOTE_ADDR="192.0.2.4"
        ),
        20,
    )
    assert (rows("auth.locked_out"), rows("auth.login_failed")) == (1, 1)


@pytest.mark.backend
def test_the_next_minutes_row_counts_what_was_not_written(db):
    from gpurental.accounts.services import audit_record_anonymous

    for second in range(5):
        audit_record_anonymous(
            action="auth.login_failed",
            ip_address="198.51.100.9",
            now=T0 + dt.timedelta(seconds=second),
        )
    later = audit_record_anonymous(
        action="auth.login_failed", ip_address="198.51.100.9", now=T0 + dt.timedelta(minutes=1)
    )
    written = list(AuditEvent.objects.filter(action="auth.login_failed").order_by("id"))
    assert [row.changes.get("repeats") for row in written] == [None, 4]
    assert written[-1] == later


@pytest.mark.backend
def test_many_addresses_at_once_are_capped_per_action_and_minute(db, monkeypatch):
    from gpurental.accounts.services import audit_record_anonymous

    monkeypatch.setattr(services, "ANONYMOUS_AUDIT_ROWS_PER_MINUTE", 3)
    for number in range(10):
        audit_record_anonymous(action="auth.login_failed", ip_address=f"203.0.113.{number}", now=T0)
    assert rows("auth.login_failed") == 3


@pytest.mark.backend
def test_throttled_sign_ups_write_one_row_a_minute(db, settings, mailoutbox):
    settings.SIGNUPS_PER_HOUR = 1
    flood(lambda n: signup_start(email=f"n{n}@example.com", password="pw-1234", ip="192.0.2.7"), 10)
    assert rows("auth.signup_throttled") == 1


@pytest.mark.backend
def test_forged_payment_webhooks_write_one_row_a_minute(db):
    refused = WebhookRefused("bad signature")
    flood(lambda n: webhook_refuse(provider_name="stripe", refused=refused, ip_address="::1"), 10)
    assert rows("payment.webhook_refused") == 1
