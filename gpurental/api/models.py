from django.conf import settings
from django.db import models
from django.utils import timezone


class IdempotencyKey(models.Model):
    """An ``Idempotency-Key`` a user sent with a POST, and the answer it got.

    The row is inserted before the request runs (``response_status`` null: pending);
    the unique constraint on (user, key) is what keeps a concurrent duplicate from
    running the action a second time (see ``gpurental.api.idempotency``).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=500)
    request_hash = models.CharField(
        max_length=64, help_text="SHA-256 of the request body (canonical JSON)"
    )
    response_status = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Empty while the first request is still running"
    )
    response_body = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "idempotency key"
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_unique_per_user"),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.method} {self.path})"

    @property
    def is_pending(self) -> bool:
        return self.response_status is None
