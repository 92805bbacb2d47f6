"""Logins, failures and lockouts go to the audit log, with the address they came from.
Failures and lockouts need no account, so they are coalesced (audit_record_anonymous)."""

from __future__ import annotations

from axes.signals import user_locked_out
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver

from gpurental.accounts.services import audit_record, audit_record_anonymous
from gpurental.addresses import client_ip


def _ip(request) -> str | None:
    return client_ip(request) if request is not None else None


def _who(credentials: dict | None) -> str:
    # The name tried, never the password; cut, since anything can be typed there.
    return str((credentials or {}).get("username") or (credentials or {}).get("email") or "")[:254]


@receiver(user_logged_in)
def login_recorded(sender, request, user, **kwargs):
    audit_record(action="auth.login", actor=user, obj=user, ip_address=_ip(request))


@receiver(user_login_failed)
def login_failure_recorded(sender, credentials, request=None, **kwargs):
    audit_record_anonymous(
        action="auth.login_failed", changes={"username": _who(credentials)}, ip_address=_ip(request)
    )


@receiver(user_locked_out)
def lockout_recorded(sender, request, username=None, ip_address=None, **kwargs):
    audit_record_anonymous(
        action="auth.locked_out",
        changes={"username": str(username or "")[:254]},
        ip_address=ip_address or _ip(request),
    )
