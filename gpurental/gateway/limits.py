"""How many connections one person, and one instance, may hold open through a gateway
process at once: HTTP requests being proxied and websockets, counted together. Past a
cap the request is refused with 429 and a message naming the cap; nothing reaches the
instance. Each gateway process counts its own (GATEWAY_MAX_CONNECTIONS_PER_USER and
GATEWAY_MAX_CONNECTIONS_PER_INSTANCE)."""

from __future__ import annotations

from collections import Counter

from aiohttp import web

HELD = web.RequestKey("gpurental.gateway.connection", tuple)  # what it holds, to give back


class ConnectionCaps:
    def __init__(self, *, per_user: int, per_instance: int):
        self.per_user, self.per_instance = per_user, per_instance
        self.by_user: Counter = Counter()
        self.by_instance: Counter = Counter()

    def admit(self, request: web.Request, *, user, instance: str) -> web.Response | None:
        """Count the request against ``user`` and ``instance``; the refusal when either is
        at its cap (then nothing is counted). ``release`` gives it back."""
        if self.by_user[user] >= self.per_user:
            return _refused(
                "Too many open connections to your instances through the gateway: at most "
                f"{self.per_user} at once per person (GATEWAY_MAX_CONNECTIONS_PER_USER). "
                "Close some tabs, terminals or kernels and try again."
            )
        if self.by_instance[instance] >= self.per_instance:
            return _refused(
                "Too many open connections to this instance through the gateway: at most "
                f"{self.per_instance} at once (GATEWAY_MAX_CONNECTIONS_PER_INSTANCE). Close "
                "some tabs, terminals or kernels and try again."
            )
        self.by_user[user] += 1
        self.by_instance[instance] += 1
        request[HELD] = (user, instance)
        return None

    def release(self, request: web.Request) -> None:
        held = request.pop(HELD, None)
        if held is None:
            return
        user, instance = held
        for counter, key in ((self.by_user, user), (self.by_instance, instance)):
            counter[key] -= 1
            if counter[key] <= 0:
                del counter[key]


def _refused(message: str) -> web.Response:
    return web.Response(
        status=429,
        text=message + "\n",
        headers={"Retry-After": "10", "Cache-Control": "no-store"},
    )
