import uuid
from decimal import Decimal

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser, BaseUserManager
from django.contrib.auth.models import PermissionsMixin
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.crypto import salted_hmac
from django.utils.translation import gettext_lazy as _


class UserManager(BaseUserManager):
    use_in_migrations = True

    def _create(self, email: str, password: str | None, **fields):
        if not email:
            raise ValueError("email is required")
        user = self.model(email=self.normalize_email(email).lower(), **fields)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_user(self, email: str, password: str | None = None, **fields):
        fields.setdefault("is_staff", False)
        fields.setdefault("is_superuser", False)
        return self._create(email, password, **fields)

    def create_superuser(self, email: str, password: str | None = None, **fields):
        fields["is_staff"] = True
        fields["is_superuser"] = True
        return self._create(email, password, **fields)


def default_gpu_quota() -> int:
    return settings.DEFAULT_GPU_QUOTA


class AccountKind(models.TextChoices):
    PERSON = "person", "person"
    TEAM = "team", "team"


class User(AbstractBaseUser, PermissionsMixin):
    """A customer or a member of the operator's staff; logs in with an e-mail address."""

    email = models.EmailField(unique=True)
    full_name = models.CharField(max_length=150, blank=True)
    company = models.CharField(max_length=150, blank=True)
    billing_address = models.TextField(
        max_length=500, blank=True, help_text="Postal address printed on invoices (any script)."
    )
    kind = models.CharField(
        max_length=8,
        choices=AccountKind.choices,
        default=AccountKind.PERSON,
        help_text="A person logs in; a team account only holds a team's balance and objects.",
    )
    language = models.CharField(
        max_length=10,
        blank=True,
        choices=[("en", "English"), ("zh-hans", "简体中文")],
        help_text="The console's language; empty follows the browser.",
    )
    is_staff = models.BooleanField(default=False, help_text="Can use the back-office.")
    is_active = models.BooleanField(default=True)
    date_joined = models.DateTimeField(default=timezone.now)
    gpu_quota = models.PositiveSmallIntegerField(
        default=default_gpu_quota, help_text="Most GPUs this customer may hold at once."
    )
    credit_limit = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        default=Decimal("0.00"),
        help_text="How far below zero the balance may go before instances are stopped.",
    )
    credentials_generation = models.PositiveIntegerField(
        default=0,
        editable=False,
        help_text="Raised when every session is ended (password reset or change, log out "
        "everywhere): console sessions and gateway cookies of an earlier generation are void.",
    )

    objects = UserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    REQUIRED_FIELDS: list[str] = []

    class Meta:
        ordering = ["email"]
        constraints = [
            models.CheckConstraint(
                condition=Q(credit_limit__gte=0), name="user_credit_limit_not_negative"
            ),
            models.UniqueConstraint(models.functions.Lower("email"), name="user_email_ci_unique"),
        ]

    def __str__(self) -> str:
        return self.email

    def _get_session_auth_hash(self, secret=None):
        # Django ends a session whose stored hash no longer matches (a password change);
        # the generation makes "log out everywhere" do the same. Generation 0 keeps Django's
        # own hash, so that sessions made before the generation existed stay valid.
        if not self.credentials_generation:
            return super()._get_session_auth_hash(secret=secret)
        return salted_hmac(
            "gpurental.accounts.User.session_auth_hash",
            f"{self.password}:{self.credentials_generation}",
            secret=secret,
            algorithm="sha256",
        ).hexdigest()


class ApiKeyScope(models.TextChoices):
    """What a key may do. Reading needs ``read`` or the area's own scope; changing needs
    the area's scope; billing data needs ``billing``; changing the account itself (keys,
    SSH keys, webhooks, preferences, logging out everywhere) needs ``account``. Staff
    powers come through a key only with ``staff``, which only staff can give
    (``gpurental.api.permissions``)."""

    READ = "read", _("Read instances, reservations and the catalog")
    INSTANCES = "instances", _("Launch and manage instances")
    RESERVATIONS = "reservations", _("Book and cancel reservations")
    BILLING = "billing", _("Usage, invoices and balance")
    ACCOUNT = "account", _("Change your account: API keys, SSH keys, webhooks, log-outs")
    STAFF = "staff", _("Staff powers (staff only)")


CUSTOMER_SCOPES = [s.value for s in ApiKeyScope if s != ApiKeyScope.STAFF]


def default_scopes() -> list[str]:
    return list(CUSTOMER_SCOPES)


class ApiKey(models.Model):
    """An API key. Only its SHA-256 is stored; the key itself is shown once."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(
        max_length=12, unique=True, help_text="Public part, to recognise a key."
    )
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    scopes = ArrayField(
        models.CharField(max_length=16, choices=ApiKeyScope.choices),
        default=default_scopes,
        help_text="What the key may do (ApiKeyScope)",
    )
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Refused from then on")
    team = models.ForeignKey(
        "teams.Team",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="api_keys",
        help_text="A key made for a team acts as the team's account, with its member's "
        "current role there; empty: the member's own account.",
    )

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"
        constraints = [
            models.CheckConstraint(
                condition=Q(scopes__contained_by=ApiKeyScope.values) & ~Q(scopes=[]),
                name="api_key_scopes_known_and_not_empty",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and (
            self.expires_at is None or self.expires_at > timezone.now()
        )


class AuditEvent(models.Model):
    """Append-only record of who did what to which object, from where.

    The database refuses UPDATE and DELETE on this table (see migration 0002).
    """

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_repr = models.CharField(
        max_length=254, blank=True, help_text="Kept when the user is gone."
    )
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=64, blank=True)
    object_id = models.CharField(max_length=64, blank=True, db_index=True)
    object_repr = models.CharField(max_length=200, blank=True)
    changes = models.JSONField(default=dict, blank=True)
    ip_address = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_repr or 'system'} {self.action} {self.object_repr}"


class SSHKey(models.Model):
    """A customer's SSH public key: the SSH gateway lets its holder into the customer's
    running instances. Only the public half is ever given to the platform."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ssh_keys"
    )
    name = models.CharField(max_length=100)
    public_key = models.TextField(help_text="One OpenSSH line: algorithm and key, no comment")
    algorithm = models.CharField(max_length=64)
    fingerprint = models.CharField(max_length=80, help_text="SHA256:… as ssh-keygen -l shows it")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "SSH key"
        constraints = [
            models.UniqueConstraint(
                fields=["user", "fingerprint"], name="ssh_key_fingerprint_unique_per_user"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.fingerprint})"
