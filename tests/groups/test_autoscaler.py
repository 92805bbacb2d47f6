"""The autoscaler's decision, rule by rule (a pure function: no clock, no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpurental.groups.autoscaler import (
    History,
    Observed,
    Rules,
    decide,
    prewarm_floor,
    schedule_floor,
)

NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
QUEUE = Rules(min_replicas=1, max_replicas=10, queue_target=4)
GPU = Rules(min_replicas=1, max_replicas=10, gpu_target=70)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def test_queue_over_target_scales_out_and_says_why():
    decision = decide(
        QUEUE, Observed(ready=2, provisioning=0, inflight=8, queued=8), History(), NOW
    )
    assert decision.desired == 4 and decision.needed == 4
    assert decision.reason.startswith("2 → 4: queue 8.0 per replica vs target 4")


def test_replicas_on_their_way_count_as_capacity():
    seen = Observed(ready=2, provisioning=2, inflight=8, queued=8)
    assert decide(QUEUE, seen, History(), NOW).desired == 4
    assert not decide(QUEUE, seen, History(), NOW).changes


def test_gpu_utilisation_over_target_scales_out_within_tolerance_it_holds():
    hot = decide(GPU, Observed(ready=2, provisioning=0, gpu_util=95), History(), NOW)
    assert hot.desired == 3 and "GPU utilisation 95 % > 70 %" in hot.reason
    near = decide(GPU, Observed(ready=2, provisioning=0, gpu_util=75), History(), NOW)
    assert near.desired == 2 and not near.changes


def test_scale_out_waits_for_its_cooldown_but_not_in_a_panic():
    cooling = History(last_scale_up_at=ago(10))
    calm = Observed(ready=2, provisioning=0, inflight=8, queued=4, burst=12)
    held = decide(QUEUE, calm, cooling, NOW)
    assert held.desired == 2 and "cooldown" in held.reason
    panic = Observed(ready=2, provisioning=0, inflight=8, queued=4, burst=40)
    assert decide(QUEUE, panic, cooling, NOW).desired == 6  # 10 asked; +4 at most in a step


def test_one_step_at_most_doubles_or_adds_four():
    seen = Observed(ready=1, provisioning=0, inflight=4, queued=200)
    decision = decide(Rules(1, 50, queue_target=4), seen, History(), NOW)
    assert decision.desired == 5 and "at most 5 in one step" in decision.reason


def test_max_nodes_caps_and_says_so():
    seen = Observed(ready=4, provisioning=0, inflight=16, queued=100)
    decision = decide(Rules(1, 6, queue_target=4), seen, History(), NOW)
    assert decision.desired == 6 and "capped at max_nodes 6" in decision.reason


def test_scale_in_only_to_what_the_recent_load_needed_and_at_most_halving():
    seen = Observed(ready=8, provisioning=0, inflight=4, queued=0, last_request_at=ago(1))
    recent = History(recent_needs=((ago(100), 6), (ago(400), 8)))
    decision = decide(QUEUE, seen, recent, NOW)
    assert decision.desired == 6 and "needs 6" in decision.reason
    quiet = decide(QUEUE, seen, History(), NOW)
    assert quiet.desired == 4 and "at most halving" in quiet.reason


def test_scale_in_waits_out_its_cooldown():
    seen = Observed(ready=4, provisioning=0, inflight=0, last_request_at=ago(1))
    held = decide(QUEUE, seen, History(last_scale_up_at=ago(60)), NOW)
    assert held.desired == 4 and "scale-in cooldown" in held.reason


def test_to_zero_only_after_a_quiet_cooldown():
    zero_ok = Rules(min_replicas=0, max_replicas=4, queue_target=4)
    busy_lately = Observed(ready=1, provisioning=0, last_request_at=ago(30))
    assert decide(zero_ok, busy_lately, History(), NOW).desired == 1
    quiet = Observed(ready=1, provisioning=0, last_request_at=ago(400))
    decision = decide(zero_ok, quiet, History(), NOW)
    assert decision.desired == 0 and decision.reason.startswith("1 → 0")


def test_a_request_waiting_at_zero_asks_for_a_replica_at_once():
    zero_ok = Rules(min_replicas=0, max_replicas=4, queue_target=4)
    seen = Observed(ready=0, provisioning=0, waiting_now=1)
    decision = decide(zero_ok, seen, History(last_scale_up_at=ago(1)), NOW)
    assert decision.desired == 1 and "waiting at zero replicas" in decision.reason


def test_floors_from_min_schedule_and_prewarm():
    seen = Observed(ready=1, provisioning=0)
    scheduled = decide(QUEUE, seen, History(schedule_floor=3), NOW)
    assert scheduled.desired == 3 and "schedule asks for 3" in scheduled.reason
    warmed = decide(QUEUE, seen, History(prewarm_floor=5), NOW)
    assert warmed.desired == 5 and "pre-warm" in warmed.reason


def test_schedule_floor_matches_cron_minutes():
    schedules = [("* 9-17 * * 1-5", 3), ("0-29 12 * * *", 5)]
    thursday_10 = datetime(2026, 12, 3, 10, 15)
    assert schedule_floor(schedules, thursday_10) == 3
    assert schedule_floor(schedules, datetime(2026, 12, 3, 12, 10)) == 5
    assert schedule_floor(schedules, datetime(2026, 12, 5, 10, 15)) == 0  # a Saturday


def test_prewarm_takes_the_median_of_the_same_slot_on_past_days():
    lead = 15
    slot = NOW + timedelta(minutes=lead)
    needs = [
        (slot - timedelta(days=d) + timedelta(minutes=5), n) for d, n in [(1, 6), (2, 2), (3, 4)]
    ]
    needs.append((slot - timedelta(days=1) + timedelta(minutes=40), 50))  # another slot
    assert prewarm_floor(needs, NOW, lead) == 4
    assert prewarm_floor([], NOW, lead) == 0
    assert prewarm_floor(needs, NOW, 0) == 0


def test_a_serving_replica_gone_is_replaced_at_once_even_within_the_cooldown():
    cooling = History(last_scale_up_at=ago(5))
    decision = decide(QUEUE, Observed(ready=1, provisioning=0, lost=1), cooling, NOW)
    assert decision.desired == 2
    assert decision.reason == "1 → 2: replacing 1 serving replica(s) gone"
    # Without a loss the same cooldown holds a scale-out back.
    held = decide(QUEUE, Observed(ready=1, provisioning=0, inflight=8), cooling, NOW)
    assert held.desired == 1 and held.reason.startswith("holding at 1: scale-out cooldown")


def test_a_step_in_gpu_utilisation_scales_out_on_the_short_window_and_in_on_the_minute():
    # Five seconds at 95 % after a quiet minute: the minute's mean is still low.
    step = Observed(ready=1, provisioning=0, gpu_util=35, gpu_util_fast=95)
    decision = decide(GPU, step, History(), NOW)
    assert decision.desired == 2
    assert decision.reason == ("1 → 2: GPU utilisation 95 % > 70 % (mean of 1 replica(s) over 5 s)")
    # A short dip does not scale in: that reads the minute (and the scale-in hold).
    dip = Observed(ready=2, provisioning=0, gpu_util=72, gpu_util_fast=10)
    assert decide(GPU, dip, History(), NOW).desired == 2
    quiet = decide(GPU, Observed(ready=4, provisioning=0, gpu_util=20, gpu_util_fast=20),
                   History(), NOW)  # fmt: skip
    assert quiet.desired == 2 and "(mean of 4 replica(s) over 60 s)" in quiet.reason
