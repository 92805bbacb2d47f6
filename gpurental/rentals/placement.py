"""Placement scoring: which free GPUs of which host a launch should take.

Pure functions over plain data, so the rules are testable with numbers alone.
The rules, in order:
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
from collections.abc import Iterable, Sequence
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


def propose(hosts: Iterable[HostFree], count: int) -> list[Proposal]:
    """Every GPU set, on every host that can take ``count`` GPUs, best first."""
    if count < 1:
        raise ValueError("count must be at least 1")
    proposals = []
    for host in hosts:
        if len(host.free) < count:
            continue
        for gpus, connected in _candidate_sets(host.free, count):
            proposals.append(
                Proposal(host.host_id, host.host_name, gpus, connected, len(host.free) - count)
            )
    proposals.sort(
        key=lambda p: (not p.nvlink_connected, p.leftover, p.host_name, [g.index for g in p.gpus])
    )
    return proposals
