"""What the instance gateway counts, and how /metrics reads it: both sides in one file.

Each gateway process keeps, since it started: requests by status class (``2xx`` … ``5xx``),
a histogram of how long the gateway took to answer them (to the end of the response),
and the websockets open now. Every second it writes them as JSON to the Redis key
``gpurental:gateway-stats:<hostname>:<pid>``, which expires STATS_TTL_S after the last
write: a process that dies stops counting within seconds. ``gateway_totals`` sums the
live processes for the collector (gpurental/observability/collector.py).
"""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass, field

KEY_PREFIX = "gpurental:gateway-stats:"
STATS_TTL_S = 30
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class GatewayStats:
    requests: dict[str, int] = field(default_factory=dict)  # "2xx" → count
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))  # last: +Inf
    seconds: float = 0.0
    websockets: int = 0

    def answered(self, status: int, seconds: float) -> None:
        kind = f"{status // 100}xx"
        self.requests[kind] = self.requests.get(kind, 0) + 1
        self.buckets[bisect_left(BUCKETS, seconds)] += 1
        self.seconds += seconds

    def encode(self) -> str:
        return json.dumps(
            {
                "requests": self.requests,
                "buckets": self.buckets,
                "seconds": round(self.seconds, 6),
                "websockets": self.websockets,
            }
        )


def stats_key(process: str) -> str:
    return KEY_PREFIX + process


def gateway_totals(redis) -> tuple[GatewayStats, int]:
    """The live gateway processes' figures summed, and how many processes reported."""
    total, processes = GatewayStats(), 0
    for key in redis.scan_iter(match=KEY_PREFIX + "*", count=100):
        raw = redis.get(key)
        if not raw:
            continue
        try:
            data = json.loads(raw)
        except ValueError:
            continue
        processes += 1
        for kind, n in (data.get("requests") or {}).items():
            total.requests[kind] = total.requests.get(kind, 0) + int(n)
        for i, n in enumerate((data.get("buckets") or [])[: len(total.buckets)]):
            total.buckets[i] += int(n)
        total.seconds += float(data.get("seconds") or 0)
        total.websockets += int(data.get("websockets") or 0)
    return total, processes
