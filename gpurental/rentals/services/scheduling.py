"""Placement with the database as referee.

The placement rules (pure) propose GPU sets; each proposal is inserted inside a
savepoint, and the exclusion constraint refuses one that a concurrent launch took
first; then the next proposal is tried, and after a full round the free GPUs are
read again. The constraint is the lock: it alone decides who holds a GPU.

Concurrent launches all see the same best proposal, and an insert that overlaps one
not yet committed waits for that transaction before it is refused; the losers then
queued behind each other proposal after proposal (seconds per launch with 16 at once,
bench/placement.py). So before inserting, a proposal's GPU rows are try-locked
(``FOR NO KEY UPDATE SKIP LOCKED``): a set that another placement is busy with is
passed over at once, and so is one taken since the free GPUs were read (see ``_hold``).

The database picks the candidates: it groups the free GPUs by host and hands over the
best-fit hosts a page at a time (``selectors.best_hosts``), so that a placement reads
the GPU rows of a few hosts rather than of the whole fleet (``_candidates``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime

from django.db import IntegrityError, OperationalError, transaction
from django.utils.translation import gettext as _
from psycopg.types.range import Range

from gpurental.catalog.models import GPUModel
from gpurental.fleet.drivers import cuda_int, cuda_text
from gpurental.fleet.models import GPU, GPUSource, Host, Zone
from gpurental.rentals import selectors
from gpurental.rentals.exceptions import NoCapacity
from gpurental.rentals.models import Allocation, Instance, Reservation
from gpurental.rentals.placement import HostFree, Proposal, ordered_proposals, preferred_first

ROUNDS = 5
FIRST_PAGE = 8  # hosts; each further page is PAGE_GROWTH times larger
PAGE_GROWTH = 4
DEADLOCK_DETECTED = "40P01"


def _no_capacity_message(
    *, gpu_model: GPUModel, count: int, now: datetime, host: Host | None, zone: Zone | None = None
) -> str:
    hosts = [host] if host else None
    if zone is not None and host is None:
        hosts = selectors.schedulable_hosts(now=now).filter(zone=zone)
    free = selectors.free_gpus(gpu_model=gpu_model, now=now, hosts=hosts)
    total_free = sum(len(h.free) for h in free)
    largest = max(free, key=lambda h: len(h.free), default=None)
    model = gpu_model.short_name
    if host:
        parts = [
            _("no %(count)s× %(model)s free on host %(host)s")
            % {"count": count, "model": model, "host": host.name}
        ]
    elif zone is not None:
        parts = [
            _("no %(count)s× %(model)s free in zone %(zone)s")
            % {"count": count, "model": model, "zone": zone.name}
        ]
        elsewhere = selectors.free_gpus(
            gpu_model=gpu_model,
            now=now,
            hosts=selectors.schedulable_hosts(now=now).exclude(zone=zone),
        )
        most = max((len(h.free) for h in elsewhere), default=0)
        if most >= count:
            parts.append(
                _("other zones have %(most)s together; launch without a zone to take them")
                % {"most": most}
            )
    else:
        parts = [_("no %(count)s× %(model)s free on any host") % {"count": count, "model": model}]
    if total_free:
        parts.append(
            _(
                "%(free)s %(model)s free in all, at most %(most)s together (on %(host)s); "
                "a launch needs all its GPUs on one host"
            )
            % {
                "free": total_free,
                "model": model,
                "most": len(largest.free),
                "host": largest.host_name,
            }
        )
    else:
        parts.append(_("every %(model)s is in use") % {"model": model})
    release = selectors.next_release(gpu_model=gpu_model, now=now)
    if release is not None:
        parts.append(_("the next one frees up at %(at)s UTC") % {"at": f"{release:%Y-%m-%d %H:%M}"})
    return _("; ").join(parts)


def _drivers_too_old(hosts, cuda: str):
    """The NVIDIA hosts among ``hosts`` whose driver supports a CUDA older than ``cuda``
    (those that have not said stay: the container toolkit's NVIDIA_REQUIRE_CUDA has the
    last word there)."""
    return hosts.filter(gpu_source=GPUSource.NVML, driver_cuda__lt=cuda_int(cuda))


def _driver_refusal(*, gpu_model, count, now, hosts, cuda: str, image: str) -> str | None:
    """Why the launch found no room when drivers too old for its image hid free GPUs."""
    free = [
        h
        for h in selectors.free_gpus(gpu_model=gpu_model, now=now, hosts=hosts)
        if len(h.free) >= count
    ]
    if not free:
        return None
    newest = max(
        Host.objects.filter(pk__in=[h.host_id for h in free]).values_list("driver_cuda", flat=True)
    )
    return _(
        "%(image)s needs CUDA %(cuda)s, and the %(n)s host(s) with %(count)s× %(model)s free "
        "have NVIDIA drivers for CUDA %(newest)s at most; choose an image for an older CUDA, "
        "or ask the operator to update their drivers"
    ) % {
        "image": image,
        "cuda": cuda,
        "n": len(free),
        "count": count,
        "model": gpu_model.short_name,
        "newest": cuda_text(newest),
    }


class _Busy(Exception):
    """GPUs of the proposal are taken or being placed on: try another set."""

    def __init__(self, gpu_ids: set[int]):
        self.gpu_ids = gpu_ids


def _lock_gpus(gpu_ids: list[int], period: Range, *, wait: bool) -> None:
    """Lock the proposal's GPU rows until commit (or the savepoint's rollback), checking
    that nothing holds them over ``period`` now; raises _Busy naming those that are taken
    or (``wait`` off) locked by a concurrent placement."""
    locked = set(
        GPU.objects.select_for_update(no_key=True, skip_locked=not wait)
        .filter(pk__in=gpu_ids)
        .exclude(pk__in=Allocation.objects.filter(period__overlap=period).values("gpu_id"))
        .order_by("pk")  # one order for everyone: waiting lockers cannot deadlock
        .values_list("pk", flat=True)
    )
    if len(locked) != len(gpu_ids):
        raise _Busy(set(gpu_ids) - locked)


def _pages(read: Callable[..., list[HostFree]], seen: list[HostFree]) -> Iterator[HostFree]:
    """Hosts in best-fit order, read a page at a time, growing: a placement usually takes
    a set on the first page. Each page read is added to ``seen``."""
    after, limit = None, FIRST_PAGE
    while True:
        page = read(after=after, limit=limit)
        seen.extend(page)
        yield from page
        if len(page) < limit:
            return
        after, limit = (len(page[-1].free), page[-1].host_name), limit * PAGE_GROWTH


def _candidates(
    *, gpu_model: GPUModel, count: int, period: Range, hosts, paged: bool, seen: list[HostFree]
) -> Iterator[Proposal]:
    """Proposals in the placement order, from hosts the database streams best fit first.

    Paged, a host whose free count drops between two pages can be passed over (it moves
    behind the page already read): that costs only this round. So the last round reads
    every fitting host in one statement, and a refusal rests on one snapshot.
    """

    def stream(linked: bool) -> Iterator[HostFree]:
        def read(after=None, limit=None):
            return selectors.best_hosts(
                gpu_model=gpu_model,
                count=count,
                period=period,
                hosts=hosts,
                linked=linked,
                after=after,
                limit=limit,
            )

        if paged:
            return _pages(read, seen)
        page = read()
        seen.extend(page)
        return iter(page)

    return ordered_proposals(stream(linked=True), stream(linked=False), count)


def _busy_among(gpu_ids: set[int], period: Range) -> set[int]:
    """Which of ``gpu_ids`` are taken over ``period`` or locked by a concurrent placement,
    in one statement: they are try-locked all at once in a savepoint rolled back at once,
    which releases the locks (nothing is held for longer than the query)."""
    with transaction.atomic():
        free = set(
            GPU.objects.select_for_update(no_key=True, skip_locked=True)
            .filter(pk__in=gpu_ids)
            .exclude(pk__in=Allocation.objects.filter(period__overlap=period).values("gpu_id"))
            .values_list("pk", flat=True)
        )
        transaction.set_rollback(True)
    return gpu_ids - free


def _hold(
    candidates: Callable[..., Iterator[Proposal]], holder: dict, period: Range
) -> Proposal | None:
    """Insert allocations for the first proposal the database accepts; None if none does.

    Every placement walks the same best-first order, so what the others took since the
    read lies ahead in it: a GPU found taken or busy is passed over for the rest of the
    round, without a failed insert for each set that contains it. The last round waits
    for locks, so a refusal is never for a moment's contention.
    """
    for round_ in range(ROUNDS):
        last = round_ == ROUNDS - 1
        skip: set[int] = set()
        seen: list[HostFree] = []  # the hosts read so far this round
        probed: set[int] = set()
        found = False
        for proposal in candidates(paged=not last, seen=seen):  # made as they are tried
            found = True
            if skip.intersection(proposal.gpu_ids):
                continue
            try:
                with transaction.atomic():  # a savepoint: a refused proposal leaves nothing behind
                    _lock_gpus(proposal.gpu_ids, period, wait=last)
                    Allocation.objects.bulk_create(
                        Allocation(gpu_id=gpu_id, period=period, **holder)
                        for gpu_id in proposal.gpu_ids
                    )
                return proposal
            except _Busy as exc:
                skip |= exc.gpu_ids
                # Concurrent placements crowd the same best-fit hosts: rather than one
                # try-lock per set (~100 round trips for a loser with 16 at once), find
                # every busy GPU of the hosts read so far in one statement.
                unprobed = {g.gpu_id for host in seen for g in host.free} - probed
                if unprobed and not last:
                    probed |= unprobed
                    skip |= _busy_among(unprobed, period)
            except IntegrityError:
                continue  # taken by a launch that committed just after the check: next set
            except OperationalError as exc:
                # Two launches inserting the same GPU at the same moment wait on each
                # other; PostgreSQL breaks the tie by failing one. For it, that GPU is taken.
                if getattr(exc.__cause__, "sqlstate", None) != DEADLOCK_DETECTED:
                    raise
        if not found:
            return None
    return None


def gpus_allocate(
    *,
    instance: Instance,
    gpu_model: GPUModel,
    count: int,
    now: datetime,
    host: Host | None = None,
    zone: Zone | None = None,
    prefer=None,
    cuda: str = "",
    image: str = "",
) -> Proposal:
    """Hold ``count`` GPUs for ``instance`` from ``now`` on (open-ended). Raises NoCapacity.

    ``zone``: only hosts in it (unless ``host`` is given).
    ``cuda``: the CUDA release ``image`` needs: NVIDIA hosts whose driver supports less are
    not chosen (fleet.drivers).
    ``prefer``: ids of hosts to try first (a subquery: those with the launch's model in
    their cache), each group in the usual order (``placement.preferred_first``)."""
    if host is not None:
        hosts = [host]
    else:
        hosts = selectors.schedulable_hosts(now=now)
        if zone is not None:
            hosts = hosts.filter(zone=zone)
    too_old, blocked = None, False
    if cuda:
        pool = Host.objects.filter(pk=host.pk) if host is not None else hosts
        too_old = _drivers_too_old(pool, cuda)
        if host is not None:
            blocked = too_old.exists()
        else:
            hosts = hosts.exclude(pk__in=too_old.values("pk"))
    period = selectors.from_now(now)

    def candidates(paged, seen):
        def among(group):
            return _candidates(
                gpu_model=gpu_model, count=count, period=period, hosts=group, paged=paged, seen=seen
            )

        if prefer is None or host is not None:
            return among(hosts)
        return preferred_first(
            among(hosts.filter(pk__in=prefer)), among(hosts.exclude(pk__in=prefer))
        )

    proposal = None if blocked else _hold(candidates, {"instance": instance}, period)
    if proposal is None and too_old is not None:
        why = _driver_refusal(
            gpu_model=gpu_model, count=count, now=now, hosts=too_old, cuda=cuda, image=image
        )
        if why:
            raise NoCapacity(why, field="image")
    if proposal is None:
        raise NoCapacity(
            _no_capacity_message(gpu_model=gpu_model, count=count, now=now, host=host, zone=zone),
            field="gpu_count",
        )
    return proposal


def gpus_reserve(
    *, reservation: Reservation, gpu_model: GPUModel, count: int, start: datetime, end: datetime
) -> Proposal:
    """Hold ``count`` GPUs on one host for ``reservation`` over [start, end). Raises NoCapacity."""
    period = selectors.between(start, end)
    proposal = _hold(
        lambda paged, seen: _candidates(
            gpu_model=gpu_model,
            count=count,
            period=period,
            hosts=selectors.bookable_hosts(),
            paged=paged,
            seen=seen,
        ),
        {"reservation": reservation},
        period,
    )
    if proposal is None:
        free = selectors.free_gpus(
            gpu_model=gpu_model, now=start, hosts=selectors.bookable_hosts(), period=period
        )
        most = max((len(h.free) for h in free), default=0)
        raise NoCapacity(
            _(
                "no %(count)s× %(model)s free on one host from %(start)s to %(end)s UTC; at "
                "most %(most)s together then. See the availability table for free hours"
            )
            % {
                "count": count,
                "model": gpu_model.short_name,
                "start": f"{start:%Y-%m-%d %H:%M}",
                "end": f"{end:%Y-%m-%d %H:%M}",
                "most": most,
            },
            field="gpu_count",
        )
    return proposal


def gpus_release(*, instance: Instance, at: datetime) -> int:
    """Close the instance's open allocations at ``at`` (never before they started)."""
    released = 0
    for allocation in instance.allocations.filter(period__upper_inf=True):
        end = max(at, allocation.period.lower)
        if end == allocation.period.lower:
            allocation.delete()  # an empty hold leaves no trace worth keeping
        else:
            Allocation.objects.filter(pk=allocation.pk).update(
                period=type(allocation.period)(allocation.period.lower, end, "[)")
            )
        released += 1
    return released
