"""Placement scoring: which free GPUs of which host a launch should take.

Pure functions over plain data, so the rules are testable with numbers alone.
The rules, in order:
0. hosts that have what the launch prefers (a model in their shared cache) before the
   others, each group in the order of the rules below;
1. all N GPUs on one host;
2. NVLink-connected sets first (every pair of the set are NVLink peers);
3. best fit: the host with the fewest free GPUs left over, to keep whole hosts
   free for large jobs;
4. then lower GPU indices, for stable, predictable choices.
The database has the last word (the exclusion constraint): the caller tries the
proposals in order and moves on when one is taken meanwhile.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

MAX_COMBINATIONS = 5000  # C(16, 8) is 12,870: beyond this we stop searching for cliques
MAX_SETS_PER_HOST = 32


@dataclass(frozen=True)
class FreeGpu:
    gpu_id: int
    index: int
    nvlink_peers: frozenset[int]


@dataclass(frozen=True)
class HostFree:
    host_id: int
    host_name: str
    free: tuple[FreeGpu, ...]


@dataclass(frozen=True)
class Proposal:
    host_id: int
    host_name: str
    gpus: tuple[FreeGpu, ...]
    nvlink_connected: bool
    leftover: int

    @property
    def gpu_ids(self) -> list[int]:
        return [g.gpu_id for g in self.gpus]


def _connected(gpus: Sequence[FreeGpu]) -> bool:
    return all(b.index in a.nvlink_peers for a, b in itertools.combinations(gpus, 2))


def _candidate_sets(free: Sequence[FreeGpu], count: int) -> list[tuple[tuple[FreeGpu, ...], bool]]:
    """GPU sets of ``count`` on one host: NVLink-connected sets first, lower indices first.

    More than one set per host, so that when a concurrent launch takes a set first
    the caller can move on to another set on the same host.
    """
    ordered = sorted(free, key=lambda g: g.index)
    connected, others = [], []
    for tried, combo in enumerate(itertools.combinations(ordered, count)):
        if tried >= MAX_COMBINATIONS or len(connected) + len(others) >= MAX_SETS_PER_HOST:
            break
        (connected if count == 1 or _connected(combo) else others).append(combo)
    return [(c, True) for c in connected] + [(c, False) for c in others]


def ordered_proposals(
    linked: Iterable[HostFree], fitting: Iterable[HostFree], count: int
) -> Iterator[Proposal]:
    """GPU sets, best first, from hosts that already come in best-fit order (fewest free
    GPUs, then name): the NVLink-connected sets of ``linked`` host by host, then the other
    sets of ``fitting`` in the same order. Each is made as it is asked for, and each
    iterable is read only as far as needed, so hosts can stream in from a query.

    ``linked`` must hold every host that has a connected set (a host without one is
    harmless there: it yields nothing); ``fitting`` every host with ``count`` free.
    """
    if count < 1:
        raise ValueError("count must be at least 1")
    for host in linked:
        for gpus, connected in _candidate_sets(host.free, count):
            if connected:
                yield Proposal(host.host_id, host.host_name, gpus, True, len(host.free) - count)
    for host in fitting:
        for gpus, connected in _candidate_sets(host.free, count):
            if not connected:
                yield Proposal(host.host_id, host.host_name, gpus, False, len(host.free) - count)


def best_fit_order(host: HostFree) -> tuple[int, str]:
    """Fewest free GPUs first (the leftover, for hosts that fit), then the name."""
    return (len(host.free), host.host_name)


def proposals(hosts: Iterable[HostFree], count: int) -> Iterator[Proposal]:
    """Every GPU set, on every host that can take ``count`` GPUs, best first, made as they
    are asked for (see ``ordered_proposals``)."""
    if count < 1:
        raise ValueError("count must be at least 1")
    fitting = sorted((host for host in hosts if len(host.free) >= count), key=best_fit_order)
    return ordered_proposals(fitting, fitting, count)


def preferred_first(
    preferred: Iterable[Proposal], others: Iterable[Proposal]
) -> Iterator[Proposal]:
    """Rule 0: every proposal on a preferred host before any other, each group in its own
    order. Both may be lazy streams; ``others`` is read only once ``preferred`` runs out."""
    yield from preferred
    yield from others


def proposals_preferring(
    hosts: Iterable[HostFree], count: int, preferred: frozenset[int]
) -> Iterator[Proposal]:
    """``proposals``, with the hosts whose id is in ``preferred`` first (rule 0)."""
    hosts = list(hosts)
    return preferred_first(
        proposals([h for h in hosts if h.host_id in preferred], count),
        proposals([h for h in hosts if h.host_id not in preferred], count),
    )


def propose(
    hosts: Iterable[HostFree], count: int, preferred: frozenset[int] = frozenset()
) -> list[Proposal]:
    """Every GPU set, on every host that can take ``count`` GPUs, best first."""
    return list(proposals_preferring(hosts, count, preferred))
