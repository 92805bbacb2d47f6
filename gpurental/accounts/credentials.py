"""Ending every session of a person at once: ``account_credentials_revoke``.

A password reset, a password change and "log out everywhere" (console and API) all call
it. Whoever knew the old password may have opened sessions and made credentials of their
own; after this, none of them opens anything:

- API keys: all of the person's keys are revoked, except those the person chose to keep
  (``keep_key_ids``: the password change and reset forms and "log out everywhere" list
  them, none kept by default).
- SSH public keys: the same, with ``keep_ssh_key_ids`` (whoever knew the password may
  have added a key of their own, and would otherwise keep SSH access to every instance).
- The credentials generation (``User.credentials_generation``) goes up by one. Django's
  console sessions carry a hash of it (``User._get_session_auth_hash``), the gateway's
  cookies and one-time tickets carry it too (``gateway.tickets``): every session from an
  earlier generation is void at its next request.
- The apps above accounts end what they hold, in the same transaction, by answering
  ``credentials_revoked``: the instances the person can reach are woken on their state
  channels, so that the gateway closes the person's websockets and the SSH gateway their
  SSH connections (``rentals.receivers``); their webhook endpoints are turned off until
  they turn them on again (``notifications.receivers``: someone else may have added or
  redirected one).
- An audit row (``auth.credentials_revoked``), and after commit an e-mail to the owner:
  what was ended, when, from which address, and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import models, transaction
from django.db.models import F
from django.dispatch import Signal
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from gpurental.accounts.languages import chosen_language
from gpurental.accounts.models import ApiKey, SSHKey, User
from gpurental.accounts.services import ApiKeyRefused, audit_record

# Sent inside the revocation's transaction with ``user``, ``reason`` and ``now``. A
# receiver ends what its app holds for that person and returns the lines the owner's
# e-mail should carry about it (a list of strings), or nothing.
credentials_revoked = Signal()


class Reason(models.TextChoices):
    """Why every session ended; the label completes the e-mail's "because …"."""

    PASSWORD_RESET = "password_reset", gettext_lazy("your password was reset")
    PASSWORD_CHANGE = "password_change", gettext_lazy("your password was changed")
    LOGOUT_EVERYWHERE = "logout_everywhere", gettext_lazy('you chose "Log out everywhere"')


@dataclass
class Revoked:
    """What one revocation ended, for the answer and the e-mail."""

    at: datetime
    reason: str
    ip_address: str | None
    generation: int
    revoked_keys: list[ApiKey] = field(default_factory=list)
    kept_keys: list[ApiKey] = field(default_factory=list)
    removed_ssh_keys: list[SSHKey] = field(default_factory=list)
    kept_ssh_keys: list[SSHKey] = field(default_factory=list)
    also: list[str] = field(default_factory=list)  # what the other apps did (receivers)


def account_credentials_revoke(
    *,
    user: User,
    reason: Reason | str,
    keep_key_ids=(),
    keep_ssh_key_ids=(),
    ip_address: str | None = None,
    now: datetime | None = None,
) -> Revoked:
    """End every session of ``user`` but the API keys in ``keep_key_ids`` and the SSH keys
    in ``keep_ssh_key_ids`` (see the module docstring). ``user`` is updated in place with its new generation, so that the caller
    can keep its own console session (``update_session_auth_hash``) when it should."""
    reason = Reason(reason)  # ValueError for anything else
    now = now or timezone.now()
    keep = {str(pk) for pk in keep_key_ids or ()}
    with transaction.atomic():
        # The user's row first, as every service that changes a person's credentials does.
        User.objects.select_for_update().filter(pk=user.pk).first()
        active = list(ApiKey.objects.filter(user=user, revoked_at__isnull=True).order_by("name"))
        _only_own(
            keep,
            active,
            "keep_api_keys",
            _("keep_api_keys: %(ids)s is not one of your active API keys"),
        )
        ssh_keys = list(SSHKey.objects.filter(user=user).order_by("name", "created_at"))
        keep_ssh = {str(pk) for pk in keep_ssh_key_ids or ()}
        _only_own(
            keep_ssh,
            ssh_keys,
            "keep_ssh_keys",
            _("keep_ssh_keys: %(ids)s is not one of your SSH keys"),
        )
        removed_ssh = [key for key in ssh_keys if str(key.pk) not in keep_ssh]
        SSHKey.objects.filter(pk__in=[key.pk for key in removed_ssh]).delete()
        revoked = [key for key in active if str(key.pk) not in keep]
        ApiKey.objects.filter(pk__in=[key.pk for key in revoked]).update(revoked_at=now)
        for key in revoked:
            key.revoked_at = now
        User.objects.filter(pk=user.pk).update(
            credentials_generation=F("credentials_generation") + 1
        )
        user.credentials_generation = User.objects.values_list(
            "credentials_generation", flat=True
        ).get(pk=user.pk)
        done = Revoked(
            at=now,
            reason=reason,
            ip_address=ip_address,
            generation=user.credentials_generation,
            revoked_keys=revoked,
            kept_keys=[key for key in active if str(key.pk) in keep],
            removed_ssh_keys=removed_ssh,
            kept_ssh_keys=[key for key in ssh_keys if str(key.pk) in keep_ssh],
        )
        for _receiver, lines in credentials_revoked.send(
            sender=User, user=user, reason=reason, now=now
        ):
            done.also.extend(lines or [])
        audit_record(
            action="auth.credentials_revoked",
            actor=user,
            obj=user,
            changes={
                "reason": reason,
                "generation": done.generation,
                "api_keys_revoked": [key.prefix for key in revoked],
                "api_keys_kept": [key.prefix for key in done.kept_keys],
                "ssh_keys_removed": [key.fingerprint for key in removed_ssh],
                "ssh_keys_kept": [key.fingerprint for key in done.kept_ssh_keys],
                "also": done.also,
            },
            ip_address=ip_address,
        )
        transaction.on_commit(lambda: _tell_owner(user, done))
    return done


def _only_own(keep: set[str], own, field: str, message: str) -> None:
    """Refuse, naming ``field``, ids to keep that are not among ``own``."""
    unknown = sorted(keep - {str(key.pk) for key in own})
    if unknown:
        raise ApiKeyRefused(message % {"ids": ", ".join(unknown)}, field=field)


def _key_line(key: ApiKey) -> str:
    return f"  - {key.name} ({key.prefix}…)"


def _ssh_key_line(key: SSHKey) -> str:
    return f"  - {key.name} ({key.fingerprint})"


def _tell_owner(user: User, done: Revoked) -> None:
    from django.core.mail import send_mail

    with translation.override(chosen_language(user) or settings.LANGUAGE_CODE):
        parts = [
            _(
                "Every session of your gpurental account %(email)s was ended at %(at)s UTC, "
                "because %(reason)s, from the address %(ip)s."
            )
            % {
                "email": user.email,
                "at": f"{done.at:%Y-%m-%d %H:%M:%S}",
                "reason": Reason(done.reason).label,
                "ip": done.ip_address or _("unknown"),
            },
            _(
                "Console logins, JupyterLab and SSH sessions were closed everywhere; log in "
                "again where you need to."
            ),
        ]
        if done.revoked_keys:
            parts.append(
                "\n".join([_("API keys revoked:"), *(_key_line(k) for k in done.revoked_keys)])
            )
        if done.kept_keys:
            parts.append(
                "\n".join([_("API keys kept, as you chose:"), *map(_key_line, done.kept_keys)])
            )
        if done.removed_ssh_keys:
            parts.append(
                "\n".join(
                    [_("SSH keys removed:"), *(_ssh_key_line(k) for k in done.removed_ssh_keys)]
                )
            )
        if done.kept_ssh_keys:
            parts.append(
                "\n".join(
                    [_("SSH keys kept, as you chose:"), *map(_ssh_key_line, done.kept_ssh_keys)]
                )
            )
        parts.extend(done.also)
        parts.append(
            _(
                "If this was not you, reset your password now at %(site)s/password/reset/ "
                "and check your API keys, SSH keys and webhooks."
            )
            % {"site": settings.PUBLIC_URL.rstrip("/")}
        )
        send_mail(
            _("All sessions of your gpurental account were ended"),
            "\n\n".join(str(p) for p in parts),
            None,
            [user.email],
        )
