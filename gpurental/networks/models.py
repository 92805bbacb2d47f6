"""A customer's (or team's) private network: the subnet their instances share.

One per account, made at its first launch. Its ``index`` picks its subnet in the operator's
pool (``PRIVATE_NETWORK_POOL``, /24s by default). New indexes come from a database sequence
(``networks_private_index``) and the unique constraint has the last word, so two accounts
never share a subnet however many launches race.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class PrivateNetwork(models.Model):
    account = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="private_network"
    )
    index = models.PositiveIntegerField(unique=True, help_text="Its subnet's place in the pool")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(index__lt=1_000_000), name="private_network_index")
        ]

    def __str__(self) -> str:
        return f"{self.subnet} ({self.account})"

    @property
    def subnet(self) -> str:
        from gpurental.networks.addressing import subnet_of

        return subnet_of(self.index)
