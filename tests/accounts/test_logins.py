"""Logins are throttled per account and per address, the lockout looks the same whether or
not the account exists, and every login, failure and lockout is in the audit log."""

from __future__ import annotations

import re

import pytest
from django.core import mail

from gpurental.accounts.models import AuditEvent

LOGIN = "/login/"


@pytest.fixture(autouse=True)
def limits(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.PASSWORD_RESETS_PER_HOUR = 2
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def without_csrf(html: str) -> str:
    return re.sub(r'(CSRFToken": "|csrfmiddlewaretoken" value=")[^"]+', r"\1…", html)


def attempt(client, email, password, ip="198.51.100.7"):
    return client.post(LOGIN, {"username": email, "password": password}, REMOTE_ADDR=ip)


@pytest.mark.backend
def test_an_account_is_locked_after_the_limit_even_with_the_right_password(client, alice):
    alice.set_password("the-right-one")
    alice.save()
    for number in range(2):
        assert attempt(client, alice.email, "wrong", ip=f"198.51.100.{number}").status_code == 200
    assert attempt(client, alice.email, "wrong", ip="198.51.100.3").status_code == 429
    locked = attempt(client, alice.email, "the-right-one", ip="198.51.100.99")
    assert locked.status_code == 429 and "Too many attempts" in locked.text
    assert "_auth_user_id" not in client.session
    assert AuditEvent.objects.filter(action="auth.login_failed").count() >= 3
    lockouts = AuditEvent.objects.filter(action="auth.locked_out")
    assert lockouts.exists()
    assert {e.changes["username"] for e in lockouts} == {alice.email}
    failed = AuditEvent.objects.filter(action="auth.login_failed")
    assert {e.changes["username"] for e in failed} == {alice.email}


@pytest.mark.backend
def test_the_lockout_is_the_same_for_an_account_that_does_not_exist(client, alice):
    answers = {}
    for email in (alice.email, "nobody@example.com"):
        for _ in range(3):
            attempt(client, email, "wrong", ip=f"203.0.113.{len(answers)}")
        answers[email] = attempt(client, email, "wrong", ip=f"203.0.113.{len(answers)}")
    mine, nobodys = answers.values()
    assert mine.status_code == nobodys.status_code == 429
    assert without_csrf(mine.text) == without_csrf(nobodys.text)


@pytest.mark.backend
def test_one_address_trying_many_accounts_is_locked(client, alice, bob):
    for email in ("a@example.com", "b@example.com", "c@example.com"):
        attempt(client, email, "wrong", ip="192.0.2.50")
    assert attempt(client, bob.email, "anything", ip="192.0.2.50").status_code == 429


def test_a_login_is_recorded_with_its_address(client, alice):
    alice.set_password("the-right-one")
    alice.save()
    response = attempt(client, alice.email, "the-right-one", ip="198.51.100.23")
    assert response.status_code == 302
    event = AuditEvent.objects.get(action="auth.login")
    assert event.actor == alice and event.ip_address == "198.51.100.23"


@pytest.mark.backend
def test_password_resets_are_throttled_without_saying_so(client, alice):
    for _ in range(5):
        response = client.post("/password/reset/", {"email": alice.email}, REMOTE_ADDR="192.0.2.9")
        assert response.status_code == 302 and response["Location"].endswith(
            "/password/reset/done/"
        )
    assert len(mail.outbox) == 2  # the limit per e-mail; the page said the same each time
    # Three throttled, in one row (or two, should the minute turn): anyone may ask for a
    # reset, so the audit log coalesces per address and minute (test_anonymous_audit.py).
    throttled = AuditEvent.objects.filter(action="auth.reset_throttled")
    assert 1 <= throttled.count() <= 2
