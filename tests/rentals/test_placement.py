"""Placement rules, with numbers alone."""

import pytest

from gpurental.rentals.placement import FreeGpu, HostFree, propose


def host(host_id, name, indices, peers=None):
    """peers: index -> set of NVLink peers; default: all connected (an SXM board)."""
    gpus = tuple(
        FreeGpu(
            gpu_id=host_id * 100 + i,
            index=i,
            nvlink_peers=frozenset(peers[i] if peers is not None else set(indices) - {i}),
        )
        for i in indices
    )
    return HostFree(host_id, name, gpus)


def test_all_gpus_of_a_launch_come_from_one_host():
    hosts = [host(1, "a", [0, 1]), host(2, "b", [0, 1])]
    assert propose(hosts, 3) == []
    assert {p.host_name for p in propose(hosts, 2)} == {"a", "b"}


def test_best_fit_prefers_the_fullest_host_that_still_fits():
    hosts = [host(1, "empty", range(8)), host(2, "busy", [5, 6])]
    first = propose(hosts, 2)[0]
    assert first.host_name == "busy"
    assert first.leftover == 0


def test_nvlink_connected_set_beats_a_tighter_fit_without_nvlink():
    pcie = {0: set(), 1: set()}
    hosts = [host(1, "pcie", [0, 1], peers=pcie), host(2, "sxm", [0, 1, 2, 3])]
    proposals = propose(hosts, 2)
    assert proposals[0].host_name == "sxm" and proposals[0].nvlink_connected
    assert proposals[-1].host_name == "pcie" and not proposals[-1].nvlink_connected
    assert all(p.nvlink_connected for p in proposals[:-1])


def test_picks_a_connected_subset_when_only_some_pairs_are_linked():
    # Two NVLink pairs: (0,1) and (2,3); 1 and 2 are not linked.
    peers = {1: {0}, 2: {3}, 3: {2}, 0: {1}}
    proposal = propose([host(1, "a", [1, 2, 3], peers={i: peers[i] for i in (1, 2, 3)})], 2)[0]
    assert [g.index for g in proposal.gpus] == [2, 3]
    assert proposal.nvlink_connected


def test_single_gpu_takes_the_lowest_free_index():
    proposal = propose([host(1, "a", [3, 1, 7])], 1)[0]
    assert proposal.gpus[0].index == 1


def test_ties_break_by_host_name_for_stable_choices():
    hosts = [host(2, "b", [0]), host(1, "a", [0])]
    assert [p.host_name for p in propose(hosts, 1)] == ["a", "b"]


def test_count_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        propose([host(1, "a", [0])], 0)
