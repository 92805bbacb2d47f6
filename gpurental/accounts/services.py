"""Users, API keys and the audit trail."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets

from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from gpurental.accounts.languages import chosen_language
from gpurental.accounts.models import (
    CUSTOMER_SCOPES,
    AccountKind,
    ApiKey,
    ApiKeyScope,
    AuditEvent,
    SSHKey,
    User,
)
from gpurental.accounts.sshkeys import SSHKeyRefused, ssh_public_key_parse

API_KEY_PREFIX = "gpr_"


def _hash_key(raw: str) -> str:
    # API keys carry 256 bits of entropy, so a fast hash is enough (no password stretching).
    return hashlib.sha256(raw.encode()).hexdigest()


def audit_record(
    *,
    action: str,
    actor: User | None = None,
    obj: models.Model | None = None,
    changes: dict | None = None,
    ip_address: str | None = None,
) -> AuditEvent:
    event = audit_event(action=action, actor=actor, obj=obj, changes=changes, ip_address=ip_address)
    event.save()
    return event


def audit_event(
    *,
    action: str,
    actor: User | None = None,
    obj: models.Model | None = None,
    changes: dict | None = None,
    ip_address: str | None = None,
) -> AuditEvent:
    """The row ``audit_record`` writes, unsaved: for a service that writes many in one
    insert (``AuditEvent.objects.bulk_create``)."""
    return AuditEvent(
        actor=actor if actor is not None and actor.pk else None,
        actor_repr=str(actor) if actor is not None and actor.pk else "",
        action=action,
        object_type=obj._meta.label_lower if obj is not None else "",
        object_id=str(obj.pk) if obj is not None else "",
        object_repr=str(obj)[:200] if obj is not None else "",
        changes=changes or {},
        ip_address=ip_address,
    )


# Anyone can cause some events without an account (a failed login, a throttled sign-up, a
# forged payment webhook). The audit table is append-only, so such a flood must not become
# a row per request: at most one row per action and address per minute, and this many per
# action per minute from all addresses together.
ANONYMOUS_AUDIT_ROWS_PER_MINUTE = 60


def audit_record_anonymous(
    *, action: str, ip_address: str | None, changes: dict | None = None, now=None
) -> AuditEvent | None:
    """Record an event that needs no account, coalesced (see above): the events that get no
    row are counted, and the next row of that action and address says how many there were
    (``repeats``). Returns the row, or None when the event was only counted."""
    now = now or timezone.now()
    minute = f"{now:%Y%m%d%H%M}"
    source = f"audit:anon:{action}:{ip_address or '-'}"
    if not (
        _attempt_count(key=f"{source}:{minute}", window_s=120) == 1
        and attempt_allowed(
            key=f"audit:anon:{action}:{minute}", limit=ANONYMOUS_AUDIT_ROWS_PER_MINUTE, window_s=120
        )
    ):
        _attempt_count(key=f"{source}:repeats", window_s=86400)
        return None
    from django.core.cache import cache

    repeats_key = f"attempts:{source}:repeats"
    repeats = cache.get(repeats_key) or 0
    if repeats:
        cache.decr(repeats_key, repeats)  # not delete: a count arriving meanwhile is kept
    return audit_record(
        action=action,
        changes={**(changes or {}), **({"repeats": repeats} if repeats else {})},
        ip_address=ip_address,
    )


class ApiKeyRefused(ValueError):
    """A key that cannot be made as asked; ``field`` names the input at fault."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.message, self.field = message, field


@transaction.atomic
def api_key_create(
    *,
    user: User,
    name: str,
    actor: User | None = None,
    scopes: list[str] | None = None,
    expires_at=None,
    team=None,
    now=None,
) -> tuple[ApiKey, str]:
    """Create a key; returns the row and the raw key, which is never stored. Without
    ``scopes`` it gets every customer scope; ``staff`` only for staff, given by staff."""
    now = now or timezone.now()
    actor = actor or user
    wanted = sorted(set(CUSTOMER_SCOPES if scopes is None else scopes))
    unknown = sorted(set(wanted) - set(ApiKeyScope.values))
    if unknown or not wanted:
        raise ApiKeyRefused(
            _("scopes: %(unknown)s is not a scope; choose from %(scopes)s")
            % {
                "unknown": ", ".join(unknown) or _("none given"),
                "scopes": ", ".join(ApiKeyScope.values),
            },
            field="scopes",
        )
    if ApiKeyScope.STAFF in wanted and not (user.is_staff and actor.is_staff):
        raise ApiKeyRefused(
            _("scopes: the staff scope is for staff users only, given by staff"), field="scopes"
        )
    if expires_at is not None and expires_at <= now:
        raise ApiKeyRefused(_("expires_at: must be in the future"), field="expires_at")
    if user.kind == AccountKind.TEAM:
        raise ApiKeyRefused(
            _("a team account has no keys of its own; a member makes a key for the team"),
            field="team",
        )
    if team is not None and not team.memberships.filter(user=user).exists():
        raise ApiKeyRefused(
            _("team: you are not a member of %(team)s") % {"team": team.slug}, field="team"
        )
    prefix = secrets.token_hex(4)
    raw = f"{API_KEY_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        user=user,
        name=name.strip() or "default",
        prefix=prefix,
        key_hash=_hash_key(raw),
        scopes=wanted,
        expires_at=expires_at,
        team=team,
    )
    audit_record(
        action="api_key.create",
        actor=actor,
        obj=key,
        changes={"scopes": wanted, "expires_at": expires_at.isoformat() if expires_at else None},
    )
    return key, raw


def api_key_authenticate(*, raw: str, now=None) -> ApiKey | None:
    """The active key matching ``raw`` (and its user), or None."""
    if not raw.startswith(API_KEY_PREFIX):
        return None
    now = now or timezone.now()
    key = (
        ApiKey.objects.select_related("user")
        .filter(key_hash=_hash_key(raw), revoked_at__isnull=True, user__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
    # Touch at most once a minute: a busy key must not write on every request.
    stale = key is not None and (
        key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60
    )
    if stale:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
    return key


def api_key_revoke(*, key: ApiKey, actor: User) -> ApiKey:
    updated = ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    if updated:
        audit_record(action="api_key.revoke", actor=actor, obj=key)
    key.refresh_from_db()
    return key


# --- SSH keys -----------------------------------------------------------------------------

SSH_KEYS_PER_USER = 50


@transaction.atomic
def ssh_key_add(
    *, user: User, public_key: str, name: str = "", actor: User | None = None, now=None
) -> SSHKey:
    """Store one of ``user``'s SSH public keys (an OpenSSH ``authorized_keys`` line)."""
    now = now or timezone.now()
    actor = actor or user
    parsed = ssh_public_key_parse(public_key)
    name = (name.strip() or parsed.comment or parsed.algorithm)[:100]
    # Lock the user's row: two adds at once must not both pass the count or the duplicate check.
    User.objects.select_for_update().filter(pk=user.pk).first()
    if SSHKey.objects.filter(user=user, fingerprint=parsed.fingerprint).exists():
        raise SSHKeyRefused(
            _("public_key: this key is already stored (%(fingerprint)s)")
            % {"fingerprint": parsed.fingerprint},
            field="public_key",
        )
    if SSHKey.objects.filter(user=user).count() >= SSH_KEYS_PER_USER:
        raise SSHKeyRefused(
            _("public_key: at most %(most)s SSH keys per account; delete one first")
            % {"most": SSH_KEYS_PER_USER},
            field="public_key",
        )
    key = SSHKey.objects.create(
        user=user,
        name=name,
        public_key=parsed.line,
        algorithm=parsed.algorithm,
        fingerprint=parsed.fingerprint,
        created_at=now,
    )
    audit_record(
        action="ssh_key.create",
        actor=actor,
        obj=key,
        changes={"fingerprint": key.fingerprint, "algorithm": key.algorithm},
    )
    return key


def ssh_key_delete(*, key: SSHKey, actor: User) -> None:
    """Forget a key; sessions it opened go on, new logins with it are refused."""
    fingerprint, key_id = key.fingerprint, key.pk
    deleted, _ = SSHKey.objects.filter(pk=key_id).delete()
    if deleted:
        key.pk = key_id  # delete() cleared it; the audit row names the key it was
        audit_record(
            action="ssh_key.delete", actor=actor, obj=key, changes={"fingerprint": fingerprint}
        )


def ssh_key_touch(*, key_id, now=None) -> None:
    """Record a login with the key, at most once a minute (like API keys)."""
    now = now or timezone.now()
    SSHKey.objects.filter(pk=key_id).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - dt.timedelta(seconds=60))
    ).update(last_used_at=now)


def attempt_allowed(*, key: str, limit: int, window_s: int = 3600) -> bool:
    """Count one attempt under ``key`` (in the cache, per window); False past ``limit``."""
    return _attempt_count(key=key, window_s=window_s) <= limit


def _attempt_count(*, key: str, window_s: int) -> int:
    """Count one attempt under ``key`` (the window starts with the first); the count so far."""
    from django.core.cache import cache

    bucket = f"attempts:{key}"
    cache.add(bucket, 0, timeout=window_s)
    try:
        return cache.incr(bucket)
    except ValueError:  # expired between add and incr
        cache.set(bucket, 1, timeout=window_s)
        return 1


# --- sign-up ----------------------------------------------------------------------------
# A sign-up never tells whether an address is registered: a new one gets a confirmation
# link (the account is made when it is followed), a registered one a notice to its owner.
# Both answer "check your inbox".

SIGNUP_KEY = "signup:pending:{token}"


def signup_start(
    *, email: str, password: str, full_name: str = "", company: str = "", ip: str | None = None
) -> None:
    from django.conf import settings
    from django.contrib.auth.hashers import make_password
    from django.core.cache import cache
    from django.core.mail import send_mail

    email = email.strip().lower()
    if not (
        attempt_allowed(key=f"signup:ip:{ip}", limit=settings.SIGNUPS_PER_HOUR)
        and attempt_allowed(key=f"signup:email:{email}", limit=3)
    ):
        audit_record_anonymous(
            action="auth.signup_throttled", changes={"email": email}, ip_address=ip
        )
        return
    site = settings.PUBLIC_URL.rstrip("/")
    owner = User.objects.filter(email__iexact=email).first()
    if owner is not None:
        # In the owner's saved language, else the one the sign-up page was in.
        with translation.override(chosen_language(owner) or translation.get_language()):
            send_mail(
                _("Someone tried to sign up with your address"),
                _(
                    "Someone asked to create a gpurental account for %(email)s, which has one "
                    "already.\nIf it was you: log in at %(site)s/login/ or reset your password "
                    "at %(site)s/password/reset/. If it was not, there is nothing to do."
                )
                % {"email": email, "site": site},
                None,
                [owner.email],
            )
        audit_record(action="auth.signup_existing", actor=owner, obj=owner, ip_address=ip)
        return
    token = secrets.token_urlsafe(32)
    cache.set(
        SIGNUP_KEY.format(token=token),
        {
            "email": email,
            "full_name": full_name[:150],
            "company": company[:150],
            "password": make_password(password),
        },
        timeout=settings.SIGNUP_CONFIRM_HOURS * 3600,
    )
    send_mail(
        _("Confirm your gpurental account"),
        _(
            "Follow this link to create your account (%(email)s):\n%(link)s\n"
            "It works once, for %(hours)s hours. If you did not ask, ignore it."
        )
        % {
            "email": email,
            "link": f"{site}/signup/confirm/{token}/",
            "hours": settings.SIGNUP_CONFIRM_HOURS,
        },
        None,
        [email],
    )


def signup_pending(*, token: str) -> dict | None:
    from django.core.cache import cache

    return cache.get(SIGNUP_KEY.format(token=token)) if token else None


def signup_confirm(*, token: str, ip: str | None = None) -> User | None:
    """The new account of a pending sign-up (once); None when the link is unknown, used or
    expired, or the address was registered meanwhile."""
    from django.core.cache import cache

    pending = signup_pending(token=token)
    cache.delete(SIGNUP_KEY.format(token=token))
    if pending is None:
        return None
    with transaction.atomic():
        if User.objects.filter(email__iexact=pending["email"]).exists():
            return None
        user = User(
            email=pending["email"], full_name=pending["full_name"], company=pending["company"]
        )
        user.password = pending["password"]
        user.save()
        audit_record(action="user.signup", actor=user, obj=user, ip_address=ip)
    return user


def user_language_set(*, user: User, language: str) -> User:
    """The console's language for ``user``: a code from settings.LANGUAGES, or "" to
    follow the browser again."""
    from django.conf import settings

    if language and language not in dict(settings.LANGUAGES):
        raise ValueError(f"language {language!r} is not one of {sorted(dict(settings.LANGUAGES))}")
    User.objects.filter(pk=user.pk).update(language=language)
    user.language = language
    return user
