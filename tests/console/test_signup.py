"""Sign-up without enumeration: a new address gets a confirmation link, a registered one a
notice to its owner, and both see the same "check your inbox"."""

from __future__ import annotations

import re

import pytest
from django.core import mail
from django.urls import reverse

from gpurental.accounts.models import AuditEvent, User

FORM = {
    "full_name": "N",
    "company": "",
    "password1": "a-long-pass-phrase-7",
    "password2": "a-long-pass-phrase-7",
}


def without_csrf(html: str) -> str:
    return re.sub(r'(CSRFToken": "|csrfmiddlewaretoken" value=")[^"]+', r"\1…", html)


def sign_up(client, email, ip="198.51.100.1"):
    return client.post(reverse("signup"), {**FORM, "email": email}, REMOTE_ADDR=ip)


def link_in(message) -> str:
    return re.search(r"https?://[^/]+(/signup/confirm/[^/\s]+/)", message.body).group(1)


def test_a_new_address_is_confirmed_by_mail_then_lands_on_an_empty_dashboard(client, db):
    answer = sign_up(client, "New@Example.com")
    assert "Check your inbox" in answer.text and "new@example.com" in answer.text
    assert not User.objects.filter(email="new@example.com").exists()  # not before the link
    (message,) = mail.outbox
    assert message.to == ["new@example.com"]
    link = link_in(message)
    assert "Create my account" in client.get(link).text  # a GET creates nothing
    assert not User.objects.exists()
    response = client.post(link, follow=True)
    assert response.redirect_chain[-1][0] == reverse("dashboard")
    assert "No instances yet" in response.text
    assert "0.00" in response.text and "Your balance is empty" in response.text
    assert User.objects.get(email="new@example.com").check_password("a-long-pass-phrase-7")
    assert AuditEvent.objects.filter(action="user.signup").exists()
    client.logout()
    assert "no longer works" in client.post(link).text  # once only


def test_a_registered_address_gets_the_same_answer_and_its_owner_a_notice(client, alice):
    new = sign_up(client, "someone-new@example.com")
    taken = sign_up(client, "ALICE@example.com")
    assert taken.status_code == new.status_code == 200
    assert without_csrf(taken.text).replace("alice@example.com", "X") == without_csrf(
        new.text
    ).replace("someone-new@example.com", "X")
    notice = mail.outbox[-1]
    assert notice.to == ["alice@example.com"] and "has one already" in notice.body
    assert "/signup/confirm/" not in notice.body
    assert User.objects.filter(email__iexact="alice@example.com").count() == 1


@pytest.mark.backend
def test_sign_ups_from_one_address_are_throttled_without_saying_so(client, db, settings):
    settings.SIGNUPS_PER_HOUR = 2
    answers = [sign_up(client, f"n{i}@example.com", ip="192.0.2.77") for i in range(4)]
    assert all("Check your inbox" in a.text for a in answers)
    assert len(mail.outbox) == 2
    # Two throttled, in one row (two should the minute turn): anyone may sign up, so the
    # audit log coalesces per address and minute (tests/accounts/test_anonymous_audit.py).
    assert 1 <= AuditEvent.objects.filter(action="auth.signup_throttled").count() <= 2


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"password2": "another-pass-phrase-8"}, "differ"),
        ({"password1": "123", "password2": "123"}, "too short"),
    ],
)
def test_bad_passwords_are_named(client, db, fields, error):
    response = client.post(reverse("signup"), {**FORM, "email": "x@example.com", **fields})
    assert error in response.text and not mail.outbox
