"""Celery queue depth and the age of each queue's oldest message, read from the broker.

Redis (kombu's transport): a queue is a list per priority step, newest pushed on the
left, so the oldest waits at the right end; its ``gpurental_sent_at`` header (set on
publish, see ``logs``) gives its age. RabbitMQ: a passive declare gives the depth with
the control plane's own account and no management API; a message's age is not
readable without taking it, so RabbitMQ queues have depth only.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from gpurental.logs import HEADER_SENT_AT

log = logging.getLogger(__name__)

# kombu's Redis transport: priority steps 0, 3, 6, 9; step 0 is the bare queue name.
PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")


@dataclass(frozen=True)
class QueueState:
    queue: str
    messages: int
    oldest_age_s: float | None  # None: the broker cannot say


def is_amqp(broker_url: str) -> bool:
    return broker_url.startswith(("amqp://", "amqps://", "pyamqp://"))


def _sent_at(raw: bytes) -> float | None:
    try:
        sent = json.loads(raw).get("headers", {}).get(HEADER_SENT_AT)
        return float(sent) if sent is not None else None
    except (ValueError, TypeError, AttributeError):
        return None


def redis_queues(broker_url: str, queues: list[str], *, now: float) -> list[QueueState]:
    from kombu import Connection

    # kombu's own client: the database it really uses (it reads redis+socket:// URLs its
    # own way).
    with Connection(broker_url, connect_timeout=2) as conn:
        pipe = conn.default_channel.client.pipeline(transaction=False)
        for queue in queues:
            for suffix in PRIORITY_SUFFIXES:
                pipe.llen(queue + suffix)
                pipe.lindex(queue + suffix, -1)
        replies = pipe.execute()
    states = []
    step = 2 * len(PRIORITY_SUFFIXES)
    for i, queue in enumerate(queues):
        part = replies[i * step : (i + 1) * step]
        depth = sum(part[0::2])
        sent = [s for raw in part[1::2] if raw and (s := _sent_at(raw)) is not None]
        age = max(0.0, now - min(sent)) if sent else (0.0 if depth == 0 else None)
        states.append(QueueState(queue, depth, age))
    return states


def amqp_queues(broker_url: str, queues: list[str]) -> list[QueueState]:
    from kombu import Connection

    states = []
    with Connection(broker_url, connect_timeout=2) as conn:
        channel = conn.channel()
        try:
            for queue in queues:
                try:
                    _, depth, _ = channel.queue_declare(queue=queue, passive=True)
                except conn.channel_errors:  # not declared yet: nothing waits in it
                    channel = conn.channel()
                    depth = 0
                states.append(QueueState(queue, depth, None))
        finally:
            channel.close()
    return states


def queue_states(
    broker_url: str, queues: list[str], *, now: float | None = None
) -> list[QueueState]:
    now = time.time() if now is None else now
    if is_amqp(broker_url):
        return amqp_queues(broker_url, queues)
    return redis_queues(broker_url, queues, now=now)
