"""Rate limits: per API key, or per user for the console's session, or per client address
(behind TRUSTED_PROXIES: the real client's, never the proxy's or a forged header's)."""

from __future__ import annotations

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from gpurental.accounts.models import ApiKey
from gpurental.addresses import client_ip


class ApiRateThrottle(SimpleRateThrottle):
    """``settings.API_THROTTLE_RATE`` requests per key (or user, or anonymous address).

    The counters live in the Django cache (Redis), so every web process shares them.
    Each API key has its own budget: a busy CI key does not starve the owner's console.
    """

    scope = "api"

    def get_rate(self) -> str:
        # Read at request time (not at import, as DRF does), so the setting can change
        # without a restart of the class, e.g. in tests with override_settings.
        return settings.API_THROTTLE_RATE

    def get_ident(self, request) -> str:
        # DRF's own reads X-Forwarded-For from anyone (NUM_PROXIES unset): a client could
        # name a new address on every request and never be throttled.
        return client_ip(request) or ""

    def get_cache_key(self, request, view) -> str:
        if isinstance(request.auth, ApiKey):
            ident = f"key:{request.auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user:{request.user.pk}"
        else:
            ident = f"addr:{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}
