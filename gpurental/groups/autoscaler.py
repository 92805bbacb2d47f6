"""How many serving replicas a group should have: a pure function of its rules, its
replicas and its load, so that every rule can be tested without a clock or a cluster.

Each tick (GROUP_TICK_S), with R ready and P provisioning serving replicas:

    queue     ceil((queued + in flight) / threshold)       the mean over the last 60 s
    panic     the same over the last 6 s, when it is at least twice R: scale out now
    gpu       ceil(R × utilisation / target), only when utilisation is 10 % off target:
              out on the mean of the last GPU_FAST_WINDOW_S (a step shows within
              seconds), in on the mean of the last 60 s
    schedule  the largest min_nodes of the schedules whose cron matches this minute
    pre-warm  the median, over the past 7 days, of what the load needed in the slot
              starting prewarm_lead_minutes from now (only with history; only raises)
    desired = clamp(max(rules, schedule, pre-warm, min_nodes), min_nodes, max_nodes)

- Up: compared with R + P (a replica on its way counts), at most doubling (or +4) per
  decision, and not within scale_up_cooldown_s of the last scale-out, except from zero
  and in a panic.
- Down: only to the highest need seen over the last scale_down_cooldown_s (a burst's
  tail does not shed replicas it will need again), not within that cooldown of the last
  change, at most halving per decision; to zero only after scale_down_cooldown_s without
  any request.
- A request waiting at zero replicas always asks for one.
- A serving replica that is gone (its container died, its host is silent) is replaced at
  once, cooldown or not.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timedelta

PANIC_FACTOR = 2.0
TOLERANCE = 0.1
GPU_FAST_WINDOW_S = 5  # s of 1 Hz samples a GPU scale-out decides on


@dataclass(frozen=True)
class Rules:
    min_replicas: int
    max_replicas: int
    queue_target: float | None = None  # requests per replica
    gpu_target: float | None = None  # %
    scale_up_cooldown_s: int = 30
    scale_down_cooldown_s: int = 300


@dataclass(frozen=True)
class Observed:
    ready: int
    provisioning: int
    inflight: float = 0.0  # means over 60 s
    queued: float = 0.0
    burst: float = 0.0  # mean (in flight + queued) over 6 s
    waiting_now: int = 0  # requests held right now
    gpu_util: float | None = None  # mean % over ready replicas, 60 s
    gpu_util_fast: float | None = None  # the same over GPU_FAST_WINDOW_S
    last_request_at: datetime | None = None
    lost: int = 0  # serving replicas gone since the last look (stopped, failed, lost)


@dataclass(frozen=True)
class History:
    last_scale_up_at: datetime | None = None
    last_scale_down_at: datetime | None = None
    # (when, what the load needed) over at least the scale-down window
    recent_needs: tuple[tuple[datetime, int], ...] = ()
    schedule_floor: int = 0
    prewarm_floor: int = 0


@dataclass(frozen=True)
class Decision:
    desired: int
    needed: int  # what the load rules alone asked for (kept for pre-warm's history)
    reason: str
    reasons: list[str] = field(default_factory=list)

    @property
    def changes(self) -> bool:
        return bool(self.reasons)


def decide(rules: Rules, seen: Observed, history: History, now: datetime) -> Decision:
    current = seen.ready + seen.provisioning
    asks: list[tuple[int, str]] = []
    panic = False
    if rules.queue_target:
        load = seen.queued + seen.inflight
        need = math.ceil(load / rules.queue_target - 1e-9)
        per = load / max(seen.ready, 1)
        asks.append((need, f"queue {per:.1f} per replica vs target {rules.queue_target:g} (60 s)"))
        burst_need = math.ceil(seen.burst / rules.queue_target - 1e-9)
        if burst_need >= PANIC_FACTOR * max(seen.ready, 1) and burst_need > current:
            panic = True
            asks.append((burst_need, f"burst: {seen.burst:.1f} requests at once over 6 s"))
    if rules.gpu_target and seen.ready:
        fast = seen.gpu_util_fast
        if fast is not None and fast > rules.gpu_target * (1 + TOLERANCE):
            util, window = fast, f"{GPU_FAST_WINDOW_S} s"  # a step in load: out at once
        else:
            util, window = seen.gpu_util, "60 s"
        if util is not None:
            ratio = util / rules.gpu_target
            need = (
                math.ceil(seen.ready * ratio - 1e-9) if abs(ratio - 1) > TOLERANCE else seen.ready
            )
            word = ">" if util > rules.gpu_target else "<"
            asks.append(
                (
                    need,
                    f"GPU utilisation {util:.0f} % {word} {rules.gpu_target:g} % (mean of "
                    f"{seen.ready} replica(s) over {window})",
                )
            )
    if seen.waiting_now and current == 0:
        asks.append((1, f"{seen.waiting_now} request(s) waiting at zero replicas"))
    if seen.lost:
        # What was serving comes back at once (a warm replica first), cooldown or not.
        asks.append((current + seen.lost, f"replacing {seen.lost} serving replica(s) gone"))
    needed = max((n for n, _ in asks), default=seen.ready)
    if not asks and current:
        needed = current  # no load rule: the floors decide
    floors = [(rules.min_replicas, f"min_nodes {rules.min_replicas}")]
    if history.schedule_floor:
        floors.append((history.schedule_floor, f"schedule asks for {history.schedule_floor}"))
    if history.prewarm_floor:
        floors.append(
            (history.prewarm_floor, f"pre-warm: {history.prewarm_floor} needed soon on past days")
        )
    want, why = max([*asks, *floors], key=lambda ask: ask[0])
    desired = min(max(want, rules.min_replicas), rules.max_replicas)
    if desired < want:
        why += f" (capped at max_nodes {rules.max_replicas})"

    if desired > current:
        cooling = _within(history.last_scale_up_at, rules.scale_up_cooldown_s, now)
        if cooling and current > 0 and not panic and not seen.lost:
            return Decision(current, needed, f"holding at {current}: scale-out cooldown ({why})")
        step = max(2 * current, current + 4)
        if desired > step:
            desired, why = step, why + f" (at most {step} in one step)"
        return Decision(desired, needed, f"{current} → {desired}: {why}", [why])

    if desired < current:
        window = now - timedelta(seconds=rules.scale_down_cooldown_s)
        recent = [n for at, n in history.recent_needs if at >= window]
        hold = max([desired, *recent])
        if hold >= current:
            return Decision(current, needed, f"holding at {current}: load seen in the last "
                            f"{rules.scale_down_cooldown_s} s needs it")  # fmt: skip
        last_change = max(
            (t for t in (history.last_scale_up_at, history.last_scale_down_at) if t), default=None
        )
        if _within(last_change, rules.scale_down_cooldown_s, now):
            return Decision(current, needed, f"holding at {current}: scale-in cooldown")
        target = max(hold, current // 2)
        if target == 0:
            idle_since = seen.last_request_at
            if idle_since is not None and _within(idle_since, rules.scale_down_cooldown_s, now):
                target = 1
                if target >= current:
                    return Decision(current, needed, f"holding at {current}: a request came "
                                    f"within {rules.scale_down_cooldown_s} s")  # fmt: skip
        if hold > desired:
            why = f"the load of the last {rules.scale_down_cooldown_s} s needs {hold}"
        elif target > hold:
            why += f" (at most halving: {target})"
        return Decision(target, needed, f"{current} → {target}: {why}", [why])
    return Decision(current, needed, f"steady at {current}: {why}")


def _within(at: datetime | None, seconds: float, now: datetime) -> bool:
    return at is not None and (now - at).total_seconds() < seconds


def schedule_floor(schedules: list[tuple[str, int]], local_now: datetime) -> int:
    """The largest minimum among the schedules whose cron matches this minute."""
    from croniter import croniter

    minute = local_now.replace(second=0, microsecond=0, tzinfo=None)
    return max((floor for cron, floor in schedules if croniter.match(cron, minute)), default=0)


def prewarm_floor(
    needs: list[tuple[datetime, int]], now: datetime, lead_minutes: int, days: int = 7
) -> int:
    """What the load needed, on past days, in the 15 minutes starting ``lead_minutes`` from
    now: the median over the days that have samples there (0 without any)."""
    if not lead_minutes:
        return 0
    start = now + timedelta(minutes=lead_minutes)
    per_day = []
    for back in range(1, days + 1):
        lo = start - timedelta(days=back)
        hi = lo + timedelta(minutes=15)
        seen = [n for at, n in needs if lo <= at < hi]
        if seen:
            per_day.append(max(seen))
    return math.ceil(statistics.median(per_day)) if per_day else 0
