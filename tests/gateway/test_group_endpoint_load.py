"""The load a group's endpoint reports (gpurental/groups/load.py): the one-second window,
with numbers alone, and the Redis hash the autoscaler reads, on the real Redis."""

from __future__ import annotations

import json
import uuid

import pytest

from gpurental.groups import load
from gpurental.groups.load import LoadWindow, load_of, load_write, merge_reports, replica_inflight

T0 = 1_800_000_000.0  # a whole second, so the buckets are easy to follow


def test_an_empty_window_reports_zeros_and_no_latency():
    report = LoadWindow(T0).report(T0 + 5)
    assert report["rps"] == 0 and report["requests"] == 0 and report["errors"] == 0
    assert report["inflight"] == 0 and report["queued"] == 0 and report["burst"] == 0
    assert report["p50_ms"] is None and report["p99_ms"] is None
    assert report["last_request_at"] is None
    json.dumps(report)  # JSON-ready as it is


def test_in_flight_and_queued_means_are_time_weighted_over_sixty_seconds():
    window = LoadWindow(T0)
    # Two requests in flight for 30 s, one queued for 15 s, over a window open 60 s.
    window.started(T0)
    window.started(T0)
    window.queued(T0 + 10)
    window.dequeued(T0 + 25)
    window.finished(T0 + 30, 30_000)
    window.finished(T0 + 30, 30_000)
    report = window.report(T0 + 60)
    assert report["inflight"] == pytest.approx(1.0)  # 60 request-seconds / 60 s
    assert report["queued"] == pytest.approx(0.25)  # 15 / 60
    assert report["requests"] == 2 and report["rps"] == pytest.approx(2 / 60)
    assert report["inflight_now"] == 0 and report["queued_now"] == 0
    assert report["burst"] == 0  # nothing waited or ran in the last 6 s


def test_burst_is_the_mean_over_the_last_six_seconds_only():
    window = LoadWindow(T0)
    window.started(T0 + 100)
    for _ in range(3):
        window.queued(T0 + 100)
    report = window.report(T0 + 106)
    assert report["burst"] == pytest.approx(4.0)
    assert report["inflight_now"] == 1 and report["queued_now"] == 3
    # Over 60 s the same 6 s weigh a tenth.
    assert report["inflight"] == pytest.approx(0.1)
    assert report["queued"] == pytest.approx(0.3)


def test_a_window_open_a_short_while_is_averaged_over_that_while():
    window = LoadWindow(T0)
    window.started(T0)
    report = window.report(T0 + 2)
    assert report["inflight"] == pytest.approx(1.0)
    assert report["burst"] == pytest.approx(1.0)


def test_old_seconds_leave_the_window():
    window = LoadWindow(T0)
    window.arrived(T0 + 1)
    window.started(T0 + 1)
    window.finished(T0 + 2, 1000, error=True)
    assert window.report(T0 + 30)["errors"] == 1
    later = window.report(T0 + 200)
    assert later["requests"] == 0 and later["errors"] == 0 and later["p50_ms"] is None
    assert later["inflight"] == 0
    assert later["last_request_at"] == T0 + 1  # the last request is remembered, however old
    assert window.idle_since(T0 + 200) == pytest.approx(199)


def test_latency_percentiles_rank_the_window_s_requests():
    window = LoadWindow(T0)
    for i in range(1, 101):  # 1..100 ms
        window.started(T0 + i * 0.1)
        window.finished(T0 + i * 0.1, float(i))
    report = window.report(T0 + 20)
    assert report["p50_ms"] == 50.0
    assert report["p99_ms"] == 99.0
    assert report["requests"] == 100


def test_a_request_refused_by_the_queue_counts_as_an_error_without_latency():
    window = LoadWindow(T0)
    window.completed(T0 + 1, None, error=True)
    report = window.report(T0 + 2)
    assert report["requests"] == 1 and report["errors"] == 1 and report["p50_ms"] is None


def _report(at, **fields):
    base = {
        "at": at,
        "rps": 0.0,
        "inflight": 0.0,
        "queued": 0.0,
        "burst": 0.0,
        "inflight_now": 0,
        "queued_now": 0,
        "p50_ms": None,
        "p99_ms": None,
        "errors": 0,
        "requests": 0,
        "last_request_at": None,
        "replicas": {},
    }
    return {**base, **fields}


def test_merging_sums_fresh_processes_and_ignores_stale_ones():
    now = T0 + 1000
    merged = merge_reports(
        [
            _report(
                now - 1,
                rps=2.0,
                inflight=1.5,
                queued=0.5,
                burst=3.0,
                inflight_now=2,
                queued_now=1,
                p50_ms=100.0,
                p99_ms=400.0,
                errors=1,
                requests=120,
                last_request_at=now - 2,
                replicas={
                    "a": {"inflight": 2, "healthy": True},
                    "b": {"inflight": 0, "healthy": False},
                },
            ),
            _report(
                now - 3,
                rps=1.0,
                inflight=0.5,
                burst=1.0,
                inflight_now=1,
                p50_ms=200.0,
                p99_ms=1000.0,
                requests=60,
                last_request_at=now - 1,
                replicas={"b": {"inflight": 1, "healthy": True}},
            ),
            _report(now - load.FRESH_S - 1, rps=100.0, requests=9999, inflight_now=50),  # dead
        ],
        now,
    )
    assert merged.gateways == 2 and merged.reported
    assert merged.rps == pytest.approx(3.0)
    assert merged.inflight == pytest.approx(2.0) and merged.queued == pytest.approx(0.5)
    assert merged.burst == pytest.approx(4.0)
    assert (merged.inflight_now, merged.queued_now) == (3, 1)
    assert (merged.errors, merged.requests) == (1, 180)
    assert merged.last_request_at == now - 1
    # Request-weighted: (100×120 + 200×60) / 180.
    assert merged.p50_ms == pytest.approx(400 / 3)
    assert merged.p99_ms == pytest.approx((400 * 120 + 1000 * 60) / 180)
    assert merged.replicas == {
        "a": {"inflight": 2, "healthy": True},
        "b": {"inflight": 1, "healthy": True},
    }


def test_no_report_is_unknown_rather_than_zero():
    merged = merge_reports([_report(T0 - 60, rps=5.0)], T0)
    assert not merged.reported and merged.rps == 0 and merged.p50_ms is None


@pytest.fixture
def redis_client(settings):
    import redis

    from gpurental.telemetry.selectors import layer_redis_url

    client = redis.Redis.from_url(layer_redis_url())
    yield client
    client.close()


def test_gateways_write_and_the_autoscaler_reads_the_same_hash(redis_client):
    import time

    group_id = uuid.uuid4()
    now = time.time()
    try:
        load_write(
            redis_client,
            group_id,
            _report(
                now, rps=1.0, inflight_now=2, replicas={"r1": {"inflight": 2, "healthy": True}}
            ),
            process="gw-a:1",
        )
        load_write(
            redis_client,
            group_id,
            _report(
                now, rps=0.5, inflight_now=1, replicas={"r1": {"inflight": 1, "healthy": False}}
            ),
            process="gw-b:2",
        )
        redis_client.hset(load.load_key(group_id), "garbage:3", "not json")  # ignored
        ttl = redis_client.ttl(load.load_key(group_id))
        assert 0 < ttl <= load.LOAD_TTL_S

        seen = load_of(group_id, redis=redis_client)
        assert seen.gateways == 2
        assert seen.rps == pytest.approx(1.5) and seen.inflight_now == 3
        assert replica_inflight(group_id, "r1", redis=redis_client) == 3
        assert replica_inflight(group_id, "unknown", redis=redis_client) == 0
        # Ten seconds on, both gateways have gone quiet: nothing counts.
        assert not load_of(group_id, redis=redis_client, now=now + load.FRESH_S).reported
    finally:
        redis_client.delete(load.load_key(group_id))


def test_load_of_uses_the_platform_redis_by_default(redis_client):
    group_id = uuid.uuid4()
    assert load_of(group_id) == load.GroupLoad()
